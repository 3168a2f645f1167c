"""Old import paths keep working for one release, with a DeprecationWarning (issue 34, item 4)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import lethe.certified.estimators as new


def test_lethe_estimators_warns_and_reexports_the_moved_names():
    sys.modules.pop("lethe.estimators", None)  # a fresh import: the warning is raised at import
    with pytest.warns(DeprecationWarning, match=r"lethe\.certified\.estimators"):
        old = importlib.import_module("lethe.estimators")
    assert "CertifiedLogisticRegression" in old.__all__ and "CertifiedLinearRegression" in old.__all__
    for name in old.__all__:
        assert getattr(old, name) is getattr(new, name), name


def test_lethe_itself_never_imports_the_old_path():
    code = ("import importlib, sys\n"
            "for m in ['lethe.certified.estimators', 'lethe.release', 'lethe.noisygd.estimators', 'lethe.pipeline',\n"
            "          'lethe.planning', 'lethe.advisor', 'lethe.curator.adapters', 'lethe.curator.planning']:\n"
            "    importlib.import_module(m)\n"
            "assert 'lethe.estimators' not in sys.modules, 'lethe.estimators was imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("old", ["lethe.curator", "lethe.curator.adapters"])
def test_a_family_adapter_at_its_old_curator_path_warns_and_is_the_family_one(old):
    """Before issue 34 the built-in adapters were exported by ``lethe.curator`` and defined in
    ``lethe.curator.adapters``; asked for there, each is found through the registry, with a DeprecationWarning naming
    its family's package (the curator names no family itself)."""
    pytest.importorskip("sqlalchemy")
    from lethe.families import families

    mod = importlib.import_module(old)
    adapters = [f for f in families() if f.adapter is not None]
    assert adapters
    for fam in adapters:
        name = fam.adapter.rpartition(":")[2]
        with pytest.warns(DeprecationWarning, match=fam.adapter.partition(":")[0].replace(".", r"\.")):
            cls = getattr(mod, name)
        assert cls is fam.adapter_class(), name
    with pytest.raises(AttributeError, match="NoSuchAdapter"):
        _ = mod.NoSuchAdapter

"""The test tiers obey GELULAB_BACKEND: a framework test runs only where its backend is selected (conftest.requires),
and a session under one selection imports no framework of another backend; collecting the suite under
GELULAB_BACKEND=numpy imports none (the frameworks named by the backend registry and their companion libraries).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import conftest
import pytest

from gelulab.backends import REGISTRY

TESTS = Path(__file__).resolve().parent
# every framework but numpy's, by the registry's own names, and the libraries that run on them
OTHER_FRAMEWORKS = sorted({c.package for c in REGISTRY.values()} - {"numpy"} | set(conftest.COMPANIONS))


def _pytest(args: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=600, check=False)


def test_companions_run_on_the_backend_of_their_framework():
    # Keras runs on TensorFlow here (gelulab's Keras layers are tested on it), Flax and Optax on JAX, transformers'
    # BertModel on torch; a framework is the package its backend's record names.
    assert [conftest.backend_of(f) for f in ("keras", "flax", "optax", "transformers")] == [
        "tensorflow", "jax", "jax", "torch"]
    assert all(conftest.backend_of(c.package) == name for name, c in REGISTRY.items())
    with pytest.raises(KeyError):
        conftest.backend_of("ray")


def test_requires_skips_naming_gelulab_backend_when_the_backend_is_not_selected(monkeypatch):
    monkeypatch.setattr(conftest, "SELECTED", ["numpy"])
    for framework in OTHER_FRAMEWORKS:
        with pytest.raises(pytest.skip.Exception, match=rf"{framework} runs on the \w+ backend, not selected "
                                                        r"\(GELULAB_BACKEND="):
            conftest.requires(framework)
    assert not conftest.available("keras")
    assert conftest.requires("numpy") is sys.modules["numpy"]


@pytest.mark.subprocess
def test_a_test_that_imports_an_unselected_framework_fails_by_name(tmp_path):
    """A probe suite run with the suite's conftest under GELULAB_BACKEND=numpy: the module that imports a
    framework at collection and the test that imports one are reported by name; a clean test passes."""
    (tmp_path / "test_probe_module.py").write_text("import sys, types\n"
                                                   "sys.modules['torch'] = types.ModuleType('torch')\n"
                                                   "def test_never_runs():\n    pass\n")
    (tmp_path / "test_probe_tests.py").write_text(textwrap.dedent("""\
        import sys, types

        def test_clean():
            pass

        def test_imports_jax():
            sys.modules["jax"] = types.ModuleType("jax")
    """))
    p = _pytest(["-p", "conftest", "-q", "-rfE", "--continue-on-collection-errors", str(tmp_path)], tmp_path,
                GELULAB_BACKEND="numpy",
                PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "collecting test_probe_module.py imported ['torch']" in out, out
    assert "test_probe_tests.py::test_imports_jax imported ['jax']" in out, out
    assert "2 passed, 2 errors" in out and "test_clean" not in out.split("short test summary")[-1], out


@pytest.mark.subprocess
def test_collection_under_numpy_imports_no_other_framework():
    """What `GELULAB_BACKEND=numpy pytest --collect-only` leaves in sys.modules, seen from the collecting process."""
    code = textwrap.dedent(f"""\
        import json, sys, pytest
        rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", {str(TESTS)!r}])
        print(json.dumps({{"rc": int(rc), "loaded": sorted({{m.partition(".")[0] for m in sys.modules}}
                                                          & set({OTHER_FRAMEWORKS!r}))}}))
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=TESTS.parent, env={**os.environ, "GELULAB_BACKEND": "numpy"},
                       capture_output=True, text=True, timeout=600, check=False)
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "loaded": []}, p.stdout[-3000:]


def _makefile_xdist_options() -> list[str]:
    """The pytest-xdist options `make test` passes after `-n $(JOBS)` (the Makefile's XDIST line)."""
    line = next(v for v in (TESTS.parent / "Makefile").read_text().splitlines() if v.startswith("XDIST"))
    return line.split("-n $(JOBS)", 1)[1].rsplit(")", 1)[0].split()


@pytest.mark.subprocess
def test_make_test_keeps_a_module_on_one_worker(tmp_path):
    """Under `make test`'s xdist options and the suite's conftest (a test without a group mark goes with its
    module), two workers and a module of four tests: one process runs all four, so a module-scoped fixture is built
    once (pytest 9.2 with pytest-xdist 3.8 spread them over both workers, constraints.txt)."""
    (tmp_path / "test_probe_group.py").write_text(textwrap.dedent("""\
        import os
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_records_its_process(i, tmp_path_factory):
            (tmp_path_factory.getbasetemp().parent.parent / f"pid{i}").write_text(str(os.getpid()))
    """))
    p = _pytest(["-p", "conftest", "-q", "-n", "2", *_makefile_xdist_options(), "--basetemp", str(tmp_path / "t"),
                 str(tmp_path / "test_probe_group.py")], tmp_path, GELULAB_BACKEND="numpy",
                PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    assert p.returncode == 0, p.stdout + p.stderr
    pids = {(tmp_path / f"pid{i}").read_text() for i in range(4)}
    assert len(pids) == 1, (pids, p.stdout)

"""The package: one import name (`gelulab`, beside a user's own `core` package), one version (pyproject.toml), and
the architecture declared in pyproject.toml's `[tool.importlinter]` contracts (imports point one way: cli ->
experiments | benchmarks -> api : layers -> backends -> core; only the backends import a framework, a layer
module its own framework's), checked by import-linter's `lint-imports` over the source, and `ruff check` over the
source with pyproject.toml's `[tool.ruff]` settings (lines of at most 120 columns)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import gelulab

ROOT = Path(gelulab.__file__).resolve().parent  # the repository root is the package directory
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
RUFF = Path(sys.executable).with_name("ruff")


def _lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """`lint-imports` with the contracts of cwd's pyproject.toml, gelulab imported from `pythonpath` when given
    (else the installed one); no cache written."""
    if not LINT_IMPORTS.exists():
        pytest.skip("import-linter is not installed (the dev extra)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", "pyproject.toml"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_the_root_holds_no_module_but_the_packages_own():
    modules = sorted(p.name for p in ROOT.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py", "setup.py"]


def test_imports_follow_the_declared_architecture():
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in proc.stdout


@pytest.mark.subprocess
def test_the_checker_fails_on_a_wrong_way_import(tmp_path):
    """The contracts catch a core module importing an experiment, an experiment importing a framework and core's
    numerics importing the contracts above them, so the test above can fail."""
    copy = _checkout_copy(tmp_path / "gelulab")
    (copy / "core" / "wrong_way.py").write_text("def f():\n    from gelulab.experiments.moons import config\n")
    (copy / "experiments" / "wrong_framework.py").write_text("import torch\n")
    (copy / "core" / "numerics" / "wrong_layer.py").write_text("from gelulab.core.contracts import interface\n")
    proc = _lint_imports(copy, pythonpath=tmp_path)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 1 kept, 3 broken." in proc.stdout
    assert "gelulab.core.wrong_way -> gelulab.experiments.moons.config" in proc.stdout
    assert "gelulab.experiments is not allowed to import torch" in proc.stdout
    assert "gelulab.experiments.wrong_framework -> torch" in proc.stdout
    assert "gelulab.core.numerics.wrong_layer -> gelulab.core.contracts.interface" in proc.stdout


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`ruff check` with pyproject.toml's [tool.ruff] settings (line length 120, ruff's default rules and E501); no
    cache written."""
    if not RUFF.exists():
        pytest.skip("ruff is not installed (the dev extra)")
    return subprocess.run([str(RUFF), "check", "--no-cache", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_source_passes_ruff():
    proc = _ruff(str(ROOT))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_ruff_fails_on_a_line_of_121_columns(tmp_path):
    """A copy of __main__.py with one line of 121 columns fails the same settings, so the test above can fail."""
    line = 'TOO_LONG = "' + ("word " * 30)[: 121 - len('TOO_LONG = "') - 1] + '"'
    assert len(line) == 121
    copy = tmp_path / "main_copy.py"
    copy.write_text((ROOT / "__main__.py").read_text() + line + "\n")
    proc = _ruff("--config", str(ROOT / "pyproject.toml"), str(copy), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "E501" in proc.stdout and "(121 > 120)" in proc.stdout, proc.stdout[-4000:]


def test_version_is_written_once_in_pyproject():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert gelulab.__version__ == pyproject["project"]["version"] == metadata.version("gelulab")
    assert "__version__ = \"" not in (ROOT / "__init__.py").read_text()


def _checkout_copy(dest: Path) -> Path:
    """The files a fresh clone has (tracked and untracked-but-not-ignored), copied to dest."""
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                                capture_output=True, text=True, timeout=60).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout ({e})")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.mark.subprocess
def test_wheel_has_one_top_level_name_beside_a_users_core_package(tmp_path):
    src = _checkout_copy(tmp_path / "src")
    wheels = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(wheels), str(src)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = wheels.glob("gelulab-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert z.read(top_level).decode().split() == ["gelulab"]
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"gelulab"}
    assert not any(n.startswith("gelulab/tests/") for n in names)
    for module in ("gelulab/core/contracts/contract.py", "gelulab/backends/jax/__init__.py", "gelulab/cli/__init__.py",
                   "gelulab/experiments/moons/study.py", "gelulab/benchmarks/trainstep.py",
                   "gelulab/experiments/swap/data/sentence_pairs.tsv"):
        assert module in names, module

    # a user's project with its own `core` package, and gelulab installed from the wheel
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    project = tmp_path / "project"
    (project / "core").mkdir(parents=True)
    (project / "core" / "__init__.py").write_text("")
    (project / "core" / "config.py").write_text("SETTING = 'the user project'\n")
    script = ("import core.config, gelulab, gelulab.core.plumbing.config, gelulab.backends\n"
              "assert core.config.SETTING == 'the user project', core.config.__file__\n"
              "assert gelulab.core.plumbing.config.DEVICES == ('cpu', 'gpu', 'tpu')\n"
              "b = gelulab.get_backend('numpy')\n"
              "print(gelulab.__file__, gelulab.__version__, b.to_numpy(b.relu(b.asarray([-1.0, 2.0]))).tolist())\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{project}{os.pathsep}{site}"
    proc = subprocess.run([sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, version, relu = proc.stdout.split(maxsplit=2)
    assert Path(where).is_relative_to(site) and version == gelulab.__version__ and relu.strip() == "[0.0, 2.0]"

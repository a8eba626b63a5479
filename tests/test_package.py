"""The package: one import name (`gelulab`, beside a user's own `core` package), one version (pyproject.toml), and
imports that point one way (backends -> core; experiments and benchmarks -> core and backends; only cli.py
imports experiments; only backends import a framework), read from the source with `ast`.

One narrow exception to "only backends import a framework": `gelulab.layers.<fw>` is, by definition, that
framework's own layer classes (as einops.layers.torch), so it may import its own framework family and no other:
layers.torch torch, layers.keras keras, layers.flax flax and jax (LAYER_FRAMEWORKS); the computation stays in the
backends (the layers call gelulab.api)."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import tomllib

import gelulab

ROOT = Path(gelulab.__file__).resolve().parent  # the repository root is the package directory
PACKAGE_FOLDERS = ("core", "backends", "experiments", "benchmarks", "layers")
FRAMEWORKS = {"jax", "jaxlib", "flax", "optax", "torch", "tensorflow", "keras", "transformers"}
# the one exception: each framework's own layer module imports that framework's family, nothing else
LAYER_FRAMEWORKS = {"gelulab.layers.torch": {"torch"}, "gelulab.layers.keras": {"keras"},
                    "gelulab.layers.flax": {"flax", "jax"}}


def _sources() -> dict[str, Path]:
    """{dotted module name: path} of every .py file of the package (tests and build output excluded)."""
    out = {}
    files = [p for p in ROOT.glob("*.py") if p.name != "setup.py"]
    files += [p for folder in PACKAGE_FOLDERS for p in (ROOT / folder).rglob("*.py")]
    for path in sorted(files):
        rel = path.relative_to(ROOT)
        parts = ["gelulab", *rel.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any level, plus string constants naming a gelulab module (import_module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (gelulab uses absolute imports)"
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("gelulab."):
            found.add(node.value.split()[0])
    return found


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _framework_imports(module: str, imported: set[str]) -> list[str]:
    """The framework imports of `module` the rule forbids: any outside gelulab.backends, except a layer module's
    own family (LAYER_FRAMEWORKS)."""
    if _under(module, "gelulab.backends"):
        return []
    allowed = LAYER_FRAMEWORKS.get(module, set())
    return sorted(i for i in imported if i.split(".")[0] in FRAMEWORKS and i.split(".")[0] not in allowed)


def test_imports_point_one_way():
    sources = _sources()
    assert {"gelulab.core.contract", "gelulab.backends", "gelulab.experiments.moons.study", "gelulab.cli",
            *LAYER_FRAMEWORKS} <= set(sources)
    bad = []
    for module, path in sources.items():
        imported = _imports(path)
        forbidden = []
        if _under(module, "gelulab.core"):
            forbidden = ["gelulab.backends", "gelulab.experiments", "gelulab.benchmarks", "gelulab.cli"]
        elif _under(module, "gelulab.backends"):
            forbidden = ["gelulab.experiments", "gelulab.benchmarks", "gelulab.cli"]
        elif _under(module, "gelulab.benchmarks"):
            forbidden = ["gelulab.experiments", "gelulab.cli"]
        elif _under(module, "gelulab.experiments"):
            forbidden = ["gelulab.cli", "gelulab.benchmarks"]
        if module != "gelulab.cli" and not _under(module, "gelulab.experiments"):
            forbidden.append("gelulab.experiments")
        bad += [f"{module} imports {i}" for i in sorted(imported) if _under(i, *forbidden)]
        bad += [f"{module} imports the framework {i}" for i in _framework_imports(module, imported)]
    assert bad == []


def test_the_rule_catches_a_wrong_direction(tmp_path):
    """The checker itself: a core module importing an experiment is found (so the test above can fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from gelulab.experiments.moons import config\n"
                     "    return __import__('importlib').import_module('gelulab.benchmarks.grid')\n")
    assert {"gelulab.experiments.moons", "gelulab.experiments.moons.config", "gelulab.benchmarks.grid"} <= _imports(probe)


def test_the_layer_exception_is_narrow():
    """A layer module may import its own framework family only; the layers package, a backend-free module and
    another framework in a layer module are still caught."""
    torch_layer = {"torch", "torch.nn"}
    assert _framework_imports("gelulab.layers.torch", torch_layer) == []
    assert _framework_imports("gelulab.layers.flax", {"flax.linen", "jax.numpy"}) == []
    assert _framework_imports("gelulab.layers.keras", {"keras", "tensorflow"}) == ["tensorflow"]
    assert _framework_imports("gelulab.layers.torch", {"torch", "transformers"}) == ["transformers"]
    assert _framework_imports("gelulab.layers", torch_layer) == ["torch", "torch.nn"]
    assert _framework_imports("gelulab.benchmarks.identify", {"torch"}) == ["torch"]
    assert _framework_imports("gelulab.backends.torch.hf", {"torch", "transformers"}) == []


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
    for module in ("gelulab/core/contract.py", "gelulab/backends/jax/__init__.py", "gelulab/cli.py",
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
    script = ("import core.config, gelulab, gelulab.core.config, gelulab.backends\n"
              "assert core.config.SETTING == 'the user project', core.config.__file__\n"
              "assert gelulab.core.config.DEVICES == ('cpu', 'gpu', 'tpu')\n"
              "b = gelulab.get_backend('numpy')\n"
              "print(gelulab.__file__, gelulab.__version__, b.to_numpy(b.relu(b.asarray([-1.0, 2.0]))).tolist())\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{project}{os.pathsep}{site}"
    proc = subprocess.run([sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, version, relu = proc.stdout.split(maxsplit=2)
    assert Path(where).is_relative_to(site) and version == gelulab.__version__ and relu.strip() == "[0.0, 2.0]"

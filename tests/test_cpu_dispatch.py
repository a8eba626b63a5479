"""CPU dispatch: the level each framework runs at, how it is forced, and known faults keyed by it.

The references are the frameworks' own reports of their level in a process started with the level forced
(torch.backends.cpu.get_cpu_capability, numpy's __cpu_features__), and a parity run at a forced level whose cells
are known faults on that level only.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import conftest
import pytest
from conftest import SELECTED

from gelulab.backends import capabilities, get_backend
from gelulab.core.parity import cpu_dispatch
from gelulab.core.parity.known_faults import KnownFault
from gelulab.experiments.parity.engine import Group


def _in_child(code: str, env: dict) -> str:
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


def test_levels_are_ordered_and_the_host_supports_a_prefix():
    for d in cpu_dispatch.DISPATCHERS:
        have = cpu_dispatch.host_levels(d)
        assert have == cpu_dispatch.levels(d)[:len(have)]
    with pytest.raises(ValueError, match="unknown CPU dispatcher 'mkl'"):
        cpu_dispatch.levels("mkl")
    with pytest.raises(ValueError, match="unknown aten level 'avx9'"):
        cpu_dispatch.forced_env("aten", "avx9")


def test_xla_level_is_capped_by_the_flag_and_keeps_other_flags():
    have = cpu_dispatch.host_levels("xla")
    if not have:
        pytest.skip("not an x86-64 processor")
    assert cpu_dispatch.xla_level("") == have[-1]
    assert cpu_dispatch.xla_level("--xla_cpu_max_isa=SSE4_2") == "sse4_2"
    env = cpu_dispatch.forced_env("xla", "avx", {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2 intra_op_parallelism_threads=1"})
    assert env == {"XLA_FLAGS": "intra_op_parallelism_threads=1 --xla_cpu_max_isa=AVX"}


@pytest.mark.subprocess
@pytest.mark.parametrize("level", cpu_dispatch.host_levels("numpy"))
def test_numpy_runs_at_the_forced_level(level):
    env = cpu_dispatch.forced_env("numpy", level)
    code = ("from numpy._core import _multiarray_umath as m; from gelulab.core.parity.cpu_dispatch import numpy_level; "
            "print(numpy_level(), sorted(d for d in m.__cpu_dispatch__ if m.__cpu_features__[d]))")
    got, enabled = _in_child(code, env).split(" ", 1)
    assert got == level
    above = set(env["NPY_DISABLE_CPU_FEATURES"].split())
    assert not above & set(eval(enabled))  # numpy reports every target above the level disabled


@pytest.mark.subprocess
@pytest.mark.skipif("torch" not in SELECTED, reason="torch not selected (GELULAB_BACKEND)")
@pytest.mark.parametrize("level", cpu_dispatch.host_levels("aten"))
def test_torch_runs_at_the_forced_level_with_a_compile_cache_of_its_own(level):
    env = cpu_dispatch.forced_env("aten", level, {"TORCHINDUCTOR_CACHE_DIR": "/tmp/cache"})
    assert env["TORCHINDUCTOR_CACHE_DIR"] == f"/tmp/cache-aten-{level}"
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    assert _in_child(code, cpu_dispatch.forced_env("aten", level)) == level.upper()


@pytest.mark.compile
@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.skipif("torch" not in SELECTED or "avx512" not in cpu_dispatch.host_levels("aten"),
                    reason="needs torch and a processor with AVX-512")
def test_torch_compiled_at_a_lower_level_is_right_with_its_own_cache(tmp_path):
    """The fault forced_env works around: inductor's cache shared across ATen levels gives wrong values at the lower
    level (torch 2.13); with the cache forced_env names, compiled ReLU equals max(x, 0).

    The shared cache holds what a run at level avx512 built; it is kept between sessions in the suite's cache
    folder (conftest), so that run loads it instead of building it again (a lower level reading it gives the wrong
    values all the same, measured). The lower level's own cache, beside it in tmp_path, starts empty every time."""
    code = ("import torch; x = torch.linspace(-10, 10, 1001, dtype=torch.float64); "
            "y = torch.compile(lambda t: torch.where(t <= 0, 0.0, t))(x); "
            "print(bool(torch.equal(y, x.clamp(min=0))))")
    native = Path(conftest.CACHE or tmp_path) / "inductor-aten-avx512-tests"
    native.mkdir(exist_ok=True)
    (tmp_path / "cache").symlink_to(native, target_is_directory=True)
    shared = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    own = cpu_dispatch.forced_env("aten", "avx2", shared)
    assert not Path(own["TORCHINDUCTOR_CACHE_DIR"]).exists()
    try:
        assert _in_child(code, {**shared, "ATEN_CPU_CAPABILITY": "avx512"}) == "True"
        assert _in_child(code, own) == "True"
    except AssertionError:  # a cache written at another level (by a fault like this one) is not kept
        shutil.rmtree(native, ignore_errors=True)
        raise


def _group(backend, dispatch):
    return Group(backend, "builtin", "gelu_none", "float16", "eager", 0, "cpu", dispatch, capabilities(backend))


def test_a_fault_keyed_by_dispatch_is_certain_only_where_measured():
    fault = KnownFault("r", "no upstream report found", backend="torch", dispatch=("default", "avx2"))
    measured = capabilities("torch").measured_dispatch
    assert "default" in measured and "avx512" in measured
    assert fault.matches(_group("torch", "avx2"), "grid") and fault.certain(_group("torch", "avx2"))
    assert not fault.matches(_group("torch", "avx512"), "grid")  # measured there: the cell must pass
    unmeasured = _group("torch", "sve256")
    assert fault.matches(unmeasured, "grid") and not fault.certain(unmeasured)
    assert "depends on CPU dispatch" in fault.condition(unmeasured) and "'sve256'" in fault.condition(unmeasured)
    varies = KnownFault("r", "no upstream report found", backend="torch", varies="the processor's vendor")
    assert varies.matches(_group("torch", "avx512"), "grid") and not varies.certain(_group("torch", "avx512"))
    assert KnownFault("r", "x", backend="torch").certain(unmeasured)  # a fault of every level stays strict


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.skipif("torch" not in SELECTED, reason="torch not selected (GELULAB_BACKEND)")
@pytest.mark.skipif("avx2" not in cpu_dispatch.host_levels("aten"), reason="the processor has no AVX2")
def test_a_cell_that_moves_with_the_level_passes_the_suite_on_each_level():
    """torch's float16 tanh-form GELU cancels in 1+tanh in the negative tail at ATen levels avx2 and avx512, and not
    at level default (measured against mpmath): the parity cell is a strict xfail at the one and must pass at the
    other."""
    cell = "tests/test_parity.py::test_parity[torch-builtin-gelu_tanh-float16-eager-d0-cpu-negative_tail]"
    for level, outcome in (("default", "1 passed"), ("avx2", "1 xfailed")):
        env = {**os.environ, **cpu_dispatch.forced_env("aten", level), "GELULAB_BACKEND": "torch"}
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", cell], env=env,
                           capture_output=True, text=True, timeout=600, check=False)
        last = r.stdout.strip().splitlines()[-1]
        assert outcome in last, (level, r.stdout[-2000:])


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.skipif("torch" not in SELECTED, reason="torch not selected (GELULAB_BACKEND)")
def test_parity_reports_a_fault_that_depends_on_the_machine_as_known(tmp_path):
    """A fault that no forcible level decides (core.parity.known_faults `varies`) is known wherever it shows: the parity
    report names what it depends on and `--fail-on-new` exits 0, whether the cells fail here or not."""
    argv = ["parity", "--backend", "torch", "--impl", "builtin", "--activation", "gelu_none", "--dtype", "float16",
            "--order", "0", "--mode", "eager", "--no-plots", "--fail-on-new", "--out", str(tmp_path)]
    # the report's behaviour matrix also calls the torch kernels, which the cells asked for do not use: their
    # eager calls take the float64 path instead of building the inductor loops first
    env = {**os.environ, "GELULAB_KERNEL_COMPILE": "off"}
    r = subprocess.run([sys.executable, "-m", "gelulab", *argv], env=env, capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    cells = {c["region"]: c for c in json.loads((tmp_path / "parity.json").read_text())["cells"]}
    tail = cells["negative_tail"]
    assert tail["cpu_dispatch"] == get_backend("torch").cpu_dispatch()
    if not tail["passed"]:
        assert tail["flag"] == "upstream" and "may or may not occur" in tail["known_fault"]["condition"]
        assert "may or may not occur on this machine" in (tmp_path / "report.md").read_text()

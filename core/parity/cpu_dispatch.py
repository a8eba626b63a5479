"""CPU dispatch: which kernel level a framework picks on this machine, and how to force a lower one.

Frameworks choose their CPU kernels by the processor's features, so one wheel computes differently on different
CPUs (a known fault can appear on one machine and not on another). Three dispatchers decide it for gelulab's
backends, each named in the backend's record (core.contracts.contract.Capabilities.dispatcher):

* "aten" (torch eager and inductor): `torch.backends.cpu.get_cpu_capability()`, forced lower with
  ATEN_CPU_CAPABILITY=default|avx2|avx512 (https://pytorch.org/docs/stable/backends.html#torch-backends-cpu);
  inductor reads the same variable for its vector ISA (torch/_inductor/cpu_vec_isa.py).
* "xla" (jax, and TensorFlow's XLA-compiled mode): the ISA XLA's CPU compiler targets, capped with
  XLA_FLAGS=--xla_cpu_max_isa=SSE4_2|AVX|AVX2|AVX512 (xla/backends/cpu/codegen/cpu_features.cc). TensorFlow's
  eager kernels are built into its wheel and do not dispatch on this flag.
* "numpy": numpy's highest enabled dispatch target (numpy._core._multiarray_umath.__cpu_dispatch__), lowered with
  NPY_DISABLE_CPU_FEATURES (https://numpy.org/doc/stable/reference/simd/build-options.html#runtime-dispatch).

Levels are lower-case names, ordered lowest first in `levels(dispatcher)`. This module imports no framework: the
host's features come from numpy's own CPU detection.
"""
from __future__ import annotations

import getpass
import os
import re
import tempfile

DISPATCHERS = ("aten", "xla", "numpy")
_ATEN = ("default", "avx2", "avx512")
_XLA = ("sse4_2", "avx", "avx2", "avx512")
_XLA_FLAG = re.compile(r"--xla_cpu_max_isa=(\S+)")
# numpy feature that must be present on the host for each aten / xla level
_HOST_FEATURE = {"avx2": "AVX2", "avx512": "AVX512F", "avx": "AVX", "sse4_2": "SSE42"}


def _numpy_cpu():
    from numpy._core import _multiarray_umath as m  # numpy >= 2: its runtime dispatch tables

    return m.__cpu_baseline__, m.__cpu_dispatch__, m.__cpu_features__


def _check(dispatcher: str) -> None:
    if dispatcher not in DISPATCHERS:
        raise ValueError(f"unknown CPU dispatcher {dispatcher!r}; expected one of {list(DISPATCHERS)}")


def levels(dispatcher: str) -> tuple[str, ...]:
    """Every level of `dispatcher` ("aten", "xla" or "numpy"), lowest first (numpy: its baseline's highest
    feature group, then its dispatch targets). Raises ValueError for an unknown dispatcher."""
    _check(dispatcher)
    if dispatcher == "aten":
        return _ATEN
    if dispatcher == "xla":
        return _XLA
    baseline, dispatch, _ = _numpy_cpu()
    return tuple(n.lower() for n in (*baseline[-1:], *dispatch))


def host_levels(dispatcher: str) -> tuple[str, ...]:
    """The levels of `dispatcher` this machine's processor supports, lowest first: those that can be forced here.
    On a processor other than x86-64 aten gives ("default",), xla () and numpy its own targets."""
    _check(dispatcher)
    baseline, dispatch, features = _numpy_cpu()
    if dispatcher == "numpy":
        return tuple(n.lower() for n in (*baseline[-1:], *(d for d in dispatch if features.get(d))))
    have = tuple(lv for lv in levels(dispatcher) if lv == "default" or features.get(_HOST_FEATURE[lv]))
    return have


def xla_level(flags: str | None = None) -> str | None:
    """The ISA level XLA's CPU compiler targets in this process: the host's highest of levels("xla"), capped by
    the last --xla_cpu_max_isa in `flags` (default: the XLA_FLAGS environment variable; a value above AVX512, such
    as AVX512_VNNI or AMX, counts as "avx512"; one XLA does not know leaves the host's level, as XLA ignores it). None
    on a processor with none of these levels (not x86-64)."""
    have = host_levels("xla")
    if not have:
        return None
    best = have[-1]
    caps = _XLA_FLAG.findall(os.environ.get("XLA_FLAGS", "") if flags is None else flags)
    if caps:  # XLA reads the last one
        cap = caps[-1].lower()
        cap = cap if cap in _XLA else ("avx512" if cap.startswith(("avx512", "amx")) else best)
        best = min(best, cap, key=_XLA.index)
    return best


def numpy_level() -> str:
    """numpy's highest enabled dispatch target in this process, lower case (e.g. "x86_v4"; its baseline's highest
    feature group when NPY_DISABLE_CPU_FEATURES disables every target)."""
    baseline, dispatch, features = _numpy_cpu()
    enabled = [d for d in dispatch if features.get(d)]
    return (enabled[-1] if enabled else baseline[-1]).lower()


def aten_cache_dir(level: str, environ: dict | None = None) -> str:
    """The inductor compile cache a process forced to ATen `level` uses: TORCHINDUCTOR_CACHE_DIR (or torch's
    default, <tmp>/torchinductor_<user>) with "-aten-<level>" appended. torch 2.13's on-disk caches do not key
    their entries by ATEN_CPU_CAPABILITY, so a process at a lower level that shares the cache of the native one
    loads code built for the other vector width: measured, ReLU and exact GELU compiled at level avx2 after a run
    at avx512 returned NaN and values off by 10, and at level default the C++ build failed."""
    environ = os.environ if environ is None else environ
    base = environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    return f"{base}-aten-{level}"


def forced_env(dispatcher: str, level: str, environ: dict | None = None) -> dict[str, str]:
    """The environment variables that make a new process run `dispatcher` at `level` (a member of levels()):
    {"ATEN_CPU_CAPABILITY": level, "TORCHINDUCTOR_CACHE_DIR": aten_cache_dir(level)}, {"XLA_FLAGS": the current
    flags with --xla_cpu_max_isa=LEVEL} or {"NPY_DISABLE_CPU_FEATURES": every numpy target above level}. `environ`
    defaults to os.environ. Raises ValueError for an unknown dispatcher or level."""
    _check(dispatcher)
    if level not in levels(dispatcher):
        raise ValueError(f"unknown {dispatcher} level {level!r}; expected one of {list(levels(dispatcher))}")
    environ = os.environ if environ is None else environ
    if dispatcher == "aten":  # a compile cache of its own: inductor's does not key its entries by the level
        return {"ATEN_CPU_CAPABILITY": level, "TORCHINDUCTOR_CACHE_DIR": aten_cache_dir(level, environ)}
    if dispatcher == "xla":
        rest = _XLA_FLAG.sub("", environ.get("XLA_FLAGS", "")).strip()
        return {"XLA_FLAGS": f"{rest} --xla_cpu_max_isa={level.upper()}".strip()}
    _, dispatch, _ = _numpy_cpu()
    above = [d for d in dispatch if levels("numpy").index(d.lower()) > levels("numpy").index(level)]
    return {"NPY_DISABLE_CPU_FEATURES": " ".join(above)}

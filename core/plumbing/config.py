"""Run-time configuration read from the environment, resolved in one place.

GELULAB_BACKEND  one backend name or a comma-separated list; unset or empty means every installed backend (parsed
                 by gelulab.backends.parse_backend_list, which knows the backends' names).
GELULAB_DEVICE   "cpu" (default), "gpu" or "tpu".
GELULAB_THREADS  threads per framework (intra-op), default 1, at most max_threads() = 4 x the CPU count, applied by
                 the command line through gelulab.reproducible: measured on the 2-core reference machine, 2-thread
                 torch training ran 4x slower when another process was busy, 1-thread runs were unaffected; far
                 more threads than cores only add contention (100000 made a framework's thread pool fail with
                 MemoryError).
GELULAB_KERNEL_COMPILE  how eager calls of a compiled float32 kernel get their compiled loop (torch):
                 "background" (default: the float64 formula serves calls until the loop, built in a background
                 thread once the float64 calls have cost half a second, is ready, and serves calls of fewer than
                 16384 elements throughout, where it is faster), "wait" (built in the calling
                 thread on the first call: what `gelulab` commands and the test suite measure) or "off" (never).
GELULAB_REFERENCE_CACHE  a folder where the parity engine keeps the correctly rounded mpmath references between
                 runs (core.parity.reference_store; unset: computed in every process, about 17 s for all of them).
"""
from __future__ import annotations

import os

DEVICES = ("cpu", "gpu", "tpu")
KERNEL_COMPILE_ENV = "GELULAB_KERNEL_COMPILE"
KERNEL_COMPILE = ("background", "wait", "off")


def kernel_compile() -> str:
    """The policy from GELULAB_KERNEL_COMPILE (default "background"; see the module docstring). Raises ValueError
    naming the variable for another value."""
    v = os.environ.get(KERNEL_COMPILE_ENV, "background").strip().lower() or "background"
    if v not in KERNEL_COMPILE:
        raise ValueError(f"{KERNEL_COMPILE_ENV}={v!r}; expected one of {list(KERNEL_COMPILE)}")
    return v


def device() -> str:
    """The device from GELULAB_DEVICE (default "cpu"); raises ValueError for other values."""
    d = os.environ.get("GELULAB_DEVICE", "cpu").strip().lower() or "cpu"
    if d not in DEVICES:
        raise ValueError(f"GELULAB_DEVICE={d!r}; expected one of {list(DEVICES)}")
    return d


THREADS_PER_CPU = 4  # the most threads per CPU core GELULAB_THREADS may ask for


def max_threads() -> int:
    """The largest GELULAB_THREADS accepted: THREADS_PER_CPU x os.cpu_count() (1 CPU when it is unknown)."""
    return THREADS_PER_CPU * (os.cpu_count() or 1)


def threads() -> int:
    """Intra-op thread count from GELULAB_THREADS (default 1). Raises ValueError naming the value unless it is an
    integer from 1 to max_threads()."""
    raw = os.environ.get("GELULAB_THREADS", "1")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"GELULAB_THREADS={raw!r}; expected a positive integer")
    if n > max_threads():
        raise ValueError(f"GELULAB_THREADS={raw!r}; expected at most {max_threads()} ({THREADS_PER_CPU} per CPU "
                         f"core, {os.cpu_count() or 1} cores here)")
    return n

"""Run-time configuration read from the environment, resolved in one place.

GELULAB_BACKEND  one backend name or a comma-separated list; unset or empty means every installed backend.
GELULAB_DEVICE   "cpu" (default), "gpu" or "tpu".
GELULAB_THREADS  threads per framework (intra-op), default 1, at most max_threads() = 4 x the CPU count: measured
                 here, 2-thread torch training ran 4x slower when another process was busy, 1-thread runs were
                 unaffected; far more threads than cores only add contention (100000 made a framework's thread pool
                 fail with MemoryError).
"""
from __future__ import annotations

import os

BACKEND_NAMES = ("numpy", "jax", "torch", "tensorflow")
DEVICES = ("cpu", "gpu", "tpu")
INSTALL_HINT = {
    "numpy": "pip install -e .",
    "jax": "pip install -c constraints.txt -e '.[jax]'",
    "torch": "pip install -c constraints.txt -e '.[torch]'",
    "tensorflow": "pip install -c constraints.txt -e '.[tensorflow]'",
}


def parse_backend_list(value: str | None) -> list[str] | None:
    """Parse a GELULAB_BACKEND-style string into names; None/empty -> None (meaning: all installed).

    Raises ValueError naming the bad entry and the valid names.
    """
    if value is None or not value.strip():
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise ValueError(f"GELULAB_BACKEND={value!r} names no backend; valid backends: {list(BACKEND_NAMES)}")
    for n in names:
        if n not in BACKEND_NAMES:
            raise ValueError(f"unknown backend {n!r} in GELULAB_BACKEND={value!r}; valid backends: {list(BACKEND_NAMES)}")
    return list(dict.fromkeys(names))


def requested_backends() -> list[str] | None:
    """Backends named by GELULAB_BACKEND, or None when it is unset/empty."""
    return parse_backend_list(os.environ.get("GELULAB_BACKEND"))


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

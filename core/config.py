"""Run-time configuration read from the environment, resolved in one place.

GELULAB_BACKEND  one backend name or a comma-separated list; unset or empty means every installed backend (parsed
                 by gelulab.backends.parse_backend_list, which knows the backends' names).
GELULAB_DEVICE   "cpu" (default), "gpu" or "tpu".
GELULAB_THREADS  threads per framework (intra-op), default 1, applied by the command line through
                 gelulab.reproducible: measured on the 2-core reference machine, 2-thread torch training ran 4x
                 slower when another process was busy, 1-thread runs were unaffected.
"""
from __future__ import annotations

import os

DEVICES = ("cpu", "gpu", "tpu")


def device() -> str:
    """The device from GELULAB_DEVICE (default "cpu"); raises ValueError for other values."""
    d = os.environ.get("GELULAB_DEVICE", "cpu").strip().lower() or "cpu"
    if d not in DEVICES:
        raise ValueError(f"GELULAB_DEVICE={d!r}; expected one of {list(DEVICES)}")
    return d


def threads() -> int:
    """Intra-op thread count from GELULAB_THREADS (default 1); raises ValueError unless a positive integer."""
    raw = os.environ.get("GELULAB_THREADS", "1")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"GELULAB_THREADS={raw!r}; expected a positive integer")
    return n

"""Run-time configuration read from the environment, resolved in one place.

GELULAB_BACKEND  one backend name or a comma-separated list; unset or empty means every installed backend (parsed
                 by gelulab.backends.parse_backend_list, which knows the backends' names).
GELULAB_DEVICE   "cpu" (default), "gpu" or "tpu".
GELULAB_THREADS  threads per framework (intra-op), default 1, at most max_threads() = 4 x the CPU count, applied by
                 the command line through gelulab.reproducible: measured on the 2-core reference machine, 2-thread
                 torch training ran 4x slower when another process was busy, 1-thread runs were unaffected; far
                 more threads than cores only add contention (100000 made a framework's thread pool fail with
                 MemoryError).
GELULAB_KERNEL_COMPILE  how eager calls of torch's float32 kernels (impl="kernel") get their compiled loop, an
                 AOTInductor package built by a child process (never in the calling process) into
                 GELULAB_KERNEL_CACHE and loaded with a dlopen (1.4 ms): "background" (default: the float64
                 formula serves calls until the loop is built; a kernel's build starts once its float64 calls of
                 at least 16384 elements have cost half a second, and is killed if the program ends first),
                 "wait" (a call without a loop starts the build and waits for it, 40-50 s per kernel on a 2-core
                 Xeon: what `gelulab` commands and the test suite measure) or "off" (never built nor loaded: the
                 float64 path serves every call). A package already in the cache is loaded under "background"
                 and "wait" at the first call; `gelulab warmup` builds them ahead.
GELULAB_KERNEL_CACHE  the folder of those packages (default $XDG_CACHE_HOME/gelulab/torch-kernels, or
                 ~/.cache/gelulab/torch-kernels); one file per kernel, torch and gelulab version and CPU.
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


KERNEL_CACHE_ENV = "GELULAB_KERNEL_CACHE"


def kernel_cache() -> str:
    """The folder of torch's built kernel loops (GELULAB_KERNEL_CACHE; see the module docstring)."""
    v = os.environ.get(KERNEL_CACHE_ENV, "").strip()
    if v:
        return os.path.abspath(os.path.expanduser(v))
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.expanduser("~/.cache")
    return os.path.join(base, "gelulab", "torch-kernels")


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


# framework cache folders a command may write into (inductor's, JAX's compilation cache)
CACHE_FOLDERS = ("TORCHINDUCTOR_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")


def check_environment() -> None:
    """Every environment variable a gelulab command depends on, checked before any work, with the same answer in
    every command: GELULAB_KERNEL_COMPILE, GELULAB_DEVICE and GELULAB_THREADS (their readers above), and the cache
    folders GELULAB_KERNEL_CACHE, GELULAB_REFERENCE_CACHE and the frameworks' (CACHE_FOLDERS), which must not name
    an existing file nor a path under one; the frameworks' folders, which gelulab does not set (the user did), must
    also be writable (an existing folder, or the nearest existing folder above a missing one: a file is created
    and deleted there; JAX would otherwise warn once per compiled function). gelulab's own stores
    go on without a folder they cannot write, after one line (core.parity.reference_store). GELULAB_BACKEND is
    checked by gelulab.backends.selected_backends, which knows the names. Raises ValueError naming the variable,
    its value and what is expected."""
    kernel_compile()
    device()
    threads()
    for var in (KERNEL_CACHE_ENV, "GELULAB_REFERENCE_CACHE", *CACHE_FOLDERS):
        value = os.environ.get(var, "").strip()
        if value:
            _check_cache_folder(var, value, writable=var in CACHE_FOLDERS)


def _check_cache_folder(var: str, value: str, writable: bool) -> None:
    """Raise ValueError when the cache folder `value` of variable `var` is a file or lies under one, or (writable)
    when no file can be created in it (or in the nearest existing folder above it, when it is missing)."""
    import tempfile

    path = os.path.abspath(os.path.expanduser(value))
    probe = path
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        where = "is a file" if probe == path else f"lies under {probe}, which is a file"
        raise ValueError(f"{var}={value!r} {where}; expected a folder (or unset)")
    if writable:
        try:
            fd, tmp = tempfile.mkstemp(dir=probe, prefix=".gelulab-write-check-")
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            raise ValueError(f"{var}={value!r} cannot be written ({e.strerror or type(e).__name__} in {probe}); "
                             "expected a folder this user can write (or unset)") from None

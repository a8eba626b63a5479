"""The memory-traffic limit of an elementwise kernel: the machine's copy bandwidth, measured in the run.

An elementwise activation y = f(x) on n elements must at least read x and write y: 2 n itemsize bytes. The fastest
any kernel can do that is the time of a plain copy of the same bytes, so gelulab reports every cell against:

* `copy_bandwidth`: numpy copy (np.copyto) of arrays much larger than the last-level cache, best of several
  (the STREAM "Copy" kernel convention, McCalpin 1995: bytes counted = bytes read + bytes written; the extra
  read a write-allocate cache does is not counted, so STREAM-style figures are comparable).
* `copy_curve`: the same copy at each benchmark size, so cells that fit in a cache (where a kernel can beat the
  large-array figure) are compared with what that cache level allows.
* `framework_copy`: on a GPU or TPU, the framework's own device-to-device copy (large array and each size)
  replaces numpy's host copy as the reference.

numpy's references copy into memory that is already mapped (np.copyto into a preallocated array), while an
activation allocates its output on every call; for large outputs the allocator may hand back fresh pages whose
first-touch page faults count in the activation's time. That is part of what the framework costs, so it stays in.

numpy's copy runs on one thread, as does every framework here at GELULAB_THREADS=1 (the default). With more
threads the large-array figure still comes from one numpy thread, so % of copy bandwidth above 100 is then possible.
"""
from __future__ import annotations

import math
import time

import numpy as np

from gelulab.benchmarks.timer import TimerConfig, measure

GB = 1e9  # bytes per GB (decimal, as STREAM reports MB/s = 1e6 bytes/s)


def traffic_bytes(size: int, itemsize: int) -> int:
    """Minimal bytes an elementwise kernel moves for `size` elements of `itemsize` bytes: read input + write
    output = 2 * size * itemsize. Raises ValueError for a non-positive size or itemsize."""
    if size < 1 or itemsize < 1:
        raise ValueError(f"size={size!r}, itemsize={itemsize!r}; expected positive integers")
    return 2 * size * itemsize


def copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 5) -> dict:
    """Best-of-`repeats` copy bandwidth of a `nbytes` float64 array into a preallocated one (np.copyto).

    nbytes: size of ONE array in bytes (default 1 GiB: four times a 260 MiB L3, so the copy streams from DRAM).
    Returns {"gbps": best bytes read + written per second / 1e9, "median_gbps", "nbytes", "repeats",
    "seconds": [each copy's time in s]}. Raises ValueError for nbytes < 8 or repeats < 1.
    """
    if nbytes < 8 or repeats < 1:
        raise ValueError(f"nbytes={nbytes!r}, repeats={repeats!r}; expected nbytes >= 8 and repeats >= 1")
    n = nbytes // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch every page of dst before timing
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        seconds.append(time.perf_counter() - start)
    moved = traffic_bytes(n, 8)
    return {"gbps": moved / min(seconds) / GB, "median_gbps": moved / float(np.median(seconds)) / GB,
            "nbytes": n * 8, "repeats": repeats, "seconds": seconds}


def copy_curve(nbytes_list, config: TimerConfig) -> dict[int, float]:
    """Copy bandwidth (GB/s, bytes read + written, best block) of an `nbytes` array, for each nbytes given.

    nbytes_list: iterable of positive ints (bytes of one array). Timed with the shared timer; the fastest block
    is the figure, as for `copy_bandwidth`. Returns {nbytes: GB/s}.
    """
    out = {}
    for nbytes in sorted({int(b) for b in nbytes_list}):
        src = np.ones(max(nbytes, 1), dtype=np.uint8)
        dst = np.empty_like(src)
        t = measure(lambda dst=dst, src=src: np.copyto(dst, src), config=config)
        out[nbytes] = 2 * src.nbytes / t.min_s / GB
    return out


def framework_copy(bench, backend, nbytes_list, config: TimerConfig) -> dict[int, float]:
    """Copy bandwidth (GB/s, bytes read + written, best block) of the framework's own copy (`bench.copy`, from
    backends/<name>/bench.py) of an `nbytes` array on the backend's device, for each nbytes given; the
    reference for a GPU or TPU, where numpy's host copy says nothing. Arrays are float16 (nbytes // 2 elements).
    Returns {nbytes: GB/s}. Raises ValueError for nbytes < 2."""
    out = {}
    for nbytes in sorted({int(b) for b in nbytes_list}):
        if nbytes < 2:
            raise ValueError(f"nbytes={nbytes!r}; expected at least 2 bytes (one float16)")
        x = bench.device_input(backend, np.ones(nbytes // 2, dtype=np.float16))
        t = measure(lambda x=x: bench.copy(x), bench.sync, config)
        out[nbytes] = 2 * (nbytes // 2) * 2 / t.min_s / GB
    return out


def cell_throughput(size: int, itemsize: int, seconds: float, copy_gbps: float) -> dict:
    """Throughput figures of one cell.

    size: elements; itemsize: bytes per element; seconds: time per call (> 0); copy_gbps: the reference copy
    bandwidth in GB/s. Returns {"elements_per_s", "gbps" (effective GB/s = traffic_bytes / seconds / 1e9),
    "pct_copy" (gbps / copy_gbps * 100)}. Raises ValueError for a non-positive or non-finite seconds.
    """
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds={seconds!r}; expected a positive finite time per call")
    gbps = traffic_bytes(size, itemsize) / seconds / GB
    return {"elements_per_s": size / seconds, "gbps": gbps, "pct_copy": 100.0 * gbps / copy_gbps}

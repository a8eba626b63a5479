"""One careful timer for every framework: first call and warm-up apart, then blocked autorange.

The method (the one `torch.utils.benchmark.Timer.blocked_autorange` documents, written here without a framework so
numpy, jax, torch and tensorflow are timed by the same code):

1. The first call (tracing, compilation and one execution) is timed on its own: `first_call_s`.
2. Calibration and warm-up: the number of calls per block doubles from 1 until one block lasts at least
   `min_block_s`, so the clock's resolution and the loop overhead (about 0.1 us) are small against a block; blocks
   of that many calls follow until `warmup_calls` calls and `warmup_s` seconds have passed since the first call.
3. Blocks are timed with `time.perf_counter` until at least `min_blocks` blocks and `min_run_s` seconds are in,
   or `max_blocks` blocks. Each block gives one per-call time (block time / calls); the result is the median of
   these with their interquartile range. Several callables that will be compared (ReLU and the GELUs, builtin
   and formula) are timed side by side: their blocks interleave round by round (`timed_blocks`), so a busy
   moment of the machine slows all of them and not just the one that happened to run then.

Every call is followed by the backend's `sync` (e.g. jax's block_until_ready), so a call's time covers the work
finishing, not just its dispatch. The garbage collector is off while blocks run (as in the standard `timeit`).
"""
from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TimerConfig:
    """How long and how often to time one cell. All durations in seconds.

    min_block_s: shortest block (calls per block grow until a block lasts this long).
    min_run_s: shortest total of timed blocks; min_blocks / max_blocks: bounds on the number of blocks.
    warmup_s / warmup_calls: untimed calls after the first one, calibration included (both minimums must be met).
    Raises ValueError for a non-positive duration or count, or max_blocks < min_blocks.
    """

    min_block_s: float = 1e-3
    min_run_s: float = 0.1
    min_blocks: int = 5
    max_blocks: int = 200
    warmup_s: float = 0.02
    warmup_calls: int = 1

    def __post_init__(self):
        for name in ("min_block_s", "min_run_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"TimerConfig.{name}={v!r}; expected a positive number of seconds")
        if not (isinstance(self.warmup_s, (int, float)) and self.warmup_s >= 0):
            raise ValueError(f"TimerConfig.warmup_s={self.warmup_s!r}; expected seconds >= 0")
        for name in ("min_blocks", "max_blocks", "warmup_calls"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (0 if name == "warmup_calls" else 1):
                raise ValueError(f"TimerConfig.{name}={v!r}; expected a positive integer")
        if self.max_blocks < self.min_blocks:
            raise ValueError(f"TimerConfig.max_blocks={self.max_blocks} < min_blocks={self.min_blocks}")


MAX_CALLS_PER_BLOCK = 1 << 24  # bounds calibration against a clock that does not advance

QUICK = TimerConfig(min_block_s=5e-4, min_run_s=0.01, min_blocks=5, max_blocks=50, warmup_s=0.0, warmup_calls=1)


@dataclass(frozen=True)
class Timing:
    """The result of timing one callable. Times are seconds per call.

    median_s, q25_s, q75_s: median and quartiles of the per-call time over blocks (numpy's linear interpolation);
    iqr_s = q75_s - q25_s; min_s: the fastest block.
    first_call_s: the first call alone (tracing + compilation + one execution for a compiled function).
    warmup_s: wall time of every untimed call after the first (calibration and warm-up).
    blocks: number of timed blocks; calls_per_block: calls in each; timed_s: total time of the timed blocks.
    samples_s: the per-call time of each block, in order.
    probe_before / probe_after: what `probe()` returned just before the first and just after the last timed block
    (e.g. a compilation count), None without a probe.
    """

    median_s: float
    q25_s: float
    q75_s: float
    iqr_s: float
    min_s: float
    first_call_s: float
    warmup_s: float
    blocks: int
    calls_per_block: int
    timed_s: float
    samples_s: list = field(repr=False)
    probe_before: Any = None
    probe_after: Any = None

    def as_dict(self) -> dict:
        """Plain dict of every field (for JSON)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _block(call: Callable[[], Any], sync: Callable[[Any], None], n: int, clock: Callable[[], float]) -> float:
    """Wall time of n synchronised calls, in seconds."""
    start = clock()
    for _ in range(n):
        sync(call())
    return clock() - start


@dataclass(frozen=True)
class Warm:
    """What warm_up measured: first_call_s (s), warmup_s (s of the calls after it), calls_per_block (int)."""

    first_call_s: float
    warmup_s: float
    calls_per_block: int


def warm_up(call: Callable[[], Any], sync: Callable[[Any], None] = lambda y: None,
            config: TimerConfig = TimerConfig(), clock: Callable[[], float] = time.perf_counter) -> Warm:
    """Steps 1 and 2 of the method: the first call timed alone, then calibration and warm-up (untimed).
    Exceptions from `call` propagate unchanged (the caller records them)."""
    first = _block(call, sync, 1, clock)
    warm_start = clock()
    n, t = 1, _block(call, sync, 1, clock)
    calls = 1
    while t < config.min_block_s and n < MAX_CALLS_PER_BLOCK:  # calibration; its calls count as warm-up
        n *= 2
        t = _block(call, sync, n, clock)
        calls += n
    while calls < config.warmup_calls or clock() - warm_start < config.warmup_s:
        _block(call, sync, n, clock)
        calls += n
    return Warm(first_call_s=first, warmup_s=clock() - warm_start, calls_per_block=n)


def timed_blocks(calls: list, warms: list[Warm], sync: Callable[[Any], None] = lambda y: None,
                 config: TimerConfig = TimerConfig(), clock: Callable[[], float] = time.perf_counter,
                 probes: list | None = None) -> list[Timing]:
    """Step 3 of the method for several warmed-up callables at once, interleaved: each round times one block of
    every callable that still needs blocks, starting one further along the list each round, so slow drifts of the
    machine (other processes, clock changes) fall on all of them alike and their ratios stay fair.

    calls[i] is timed in blocks of warms[i].calls_per_block calls; probes[i] (optional) is called right before
    the first and right after the last round. Returns one Timing per callable (seconds per call).
    """
    k = len(calls)
    samples: list[list[float]] = [[] for _ in range(k)]
    timed = [0.0] * k
    before = [p() for p in probes] if probes else [None] * k

    def needs(i):
        got = len(samples[i])
        return got < config.max_blocks and (got < config.min_blocks or timed[i] < config.min_run_s)

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        rounds = 0
        while any(needs(i) for i in range(k)):
            for j in range(k):
                i = (j + rounds) % k
                if needs(i):
                    t = _block(calls[i], sync, warms[i].calls_per_block, clock)
                    timed[i] += t
                    samples[i].append(t / warms[i].calls_per_block)
            rounds += 1
    finally:
        if gc_was_enabled:
            gc.enable()
    after = [p() for p in probes] if probes else [None] * k
    out = []
    for i in range(k):
        q25, med, q75 = np.percentile(samples[i], [25, 50, 75])
        out.append(Timing(median_s=float(med), q25_s=float(q25), q75_s=float(q75), iqr_s=float(q75 - q25),
                          min_s=float(min(samples[i])), first_call_s=warms[i].first_call_s,
                          warmup_s=warms[i].warmup_s, blocks=len(samples[i]),
                          calls_per_block=warms[i].calls_per_block, timed_s=timed[i], samples_s=samples[i],
                          probe_before=before[i], probe_after=after[i]))
    return out


def measure(call: Callable[[], Any], sync: Callable[[Any], None] = lambda y: None,
            config: TimerConfig = TimerConfig(), clock: Callable[[], float] = time.perf_counter,
            probe: Callable[[], Any] | None = None) -> Timing:
    """Time one `call()` (no arguments; its inputs already on the device) as described in the module docstring.

    call: runs the operation once and returns its result; sync(result): blocks until the result is computed.
    clock: a monotonic clock in seconds (time.perf_counter; tests pass a fake one).
    probe: optional, called (untimed) right before the first and right after the last timed block.
    Returns a Timing (seconds per call). Exceptions from `call` propagate unchanged (the caller records them).
    """
    warm = warm_up(call, sync, config, clock)
    return timed_blocks([call], [warm], sync, config, clock, [probe] if probe else None)[0]

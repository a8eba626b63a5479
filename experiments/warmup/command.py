"""`gelulab warmup [--activation KEY[,KEY...]] [--device cpu]`: build torch's float32 kernel loops ahead (through
the warmup tool of each backend whose record lists one: backends/torch/warmup.py).

Only for impl="kernel", which is opt-in: gelulab's default in your model is the framework's own op, which needs
no warm-up. Builds, in child processes (one kernel at a time, never in this process), the AOTInductor loop of each torch
float32 kernel of the activations named (default: every catalogue entry with a kernel; four kernels per entry:
f, f', f'' and f with f') into GELULAB_KERNEL_CACHE (default $XDG_CACHE_HOME/gelulab/torch-kernels, i.e.
~/.cache/gelulab/torch-kernels), one file per kernel, torch and gelulab version and CPU. Measured on the 2-core
Intel Xeon reference machine (AVX-512), one thread, with other jobs on the second core: ReLU 43 s, exact GELU
100 s, the tanh form 680 s (its f' and f'' take the longest), the sigmoid form 150 s, SiLU 108 s: 18 min for all
five; a kernel already built is loaded (about 2 ms) and not built again.
Afterwards every process on this machine with the same versions runs impl="kernel" through its loop from the
first call (no float64 calls first, no build). The default impl="builtin" never needs it.
"""
from __future__ import annotations

import argparse
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab warmup`."""
    parser.epilog = __doc__.split("\n\n")[1]  # the details, after cli.DESCRIPTIONS' summary
    parser.allow_abbrev = False
    parser.add_argument("--activation", default=None, metavar="KEY[,KEY...]",
                        help="catalogue entries whose kernels to build (default: every entry with a kernel)")
    parser.add_argument("--device", default="cpu", choices=("cpu",),
                        help="device the loops are built for (default cpu)")


def _keys(text: str | None) -> list[str]:
    """The activation keys of --activation; ValueError (one line, exit 2) naming an unknown key or one without a
    kernel."""
    from gelulab.core.activations import ACTIVATIONS

    with_kernel = [k for k, a in ACTIVATIONS.items() if a.kernel is not None]
    if text is None:
        return with_kernel
    keys = [k.strip() for k in text.split(",")]
    for k in keys:
        if k not in with_kernel:
            raise ValueError(f"--activation {k!r}: expected one of {with_kernel} (comma-separated)")
    return list(dict.fromkeys(keys))


def run(args: argparse.Namespace) -> int:
    """Build the kernel loops of the activations named with the warmup tool of every backend whose record lists one
    (backends.tools; torch), one line per activation, then the folder they are kept in; returns 0."""
    keys = _keys(args.activation)
    from gelulab.backends.tools import tool, with_tool

    names = with_tool("warmup")
    for name in names:
        warmup = tool(name, "warmup")
        prefix = f"{name} " if len(names) > 1 else ""
        for key in keys:
            t0 = time.perf_counter()
            paths = warmup.warmup([key], args.device)
            print(f"{prefix}{key}: {len(paths)} kernels ready in {time.perf_counter() - t0:.1f} s", flush=True)
        print(f"{prefix}cache: {warmup.cache()}")
    return 0

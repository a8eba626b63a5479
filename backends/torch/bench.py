"""PyTorch's benchmark hooks (the same names in every backends/<name>/bench.py; used by benchmarks/).

CUDA kernels run asynchronously, so a timed call on a GPU ends with `torch.cuda.synchronize()` (as
torch.utils.benchmark.Timer does); CPU ops return with their result computed. torch.compile caches compiled
graphs per code object with guards; `torch._dynamo.utils.counters` counts every frame dynamo converts and every
graph it compiles, so a count that grows during the timed loop means it recompiled there. Each group of compiled
cells timed side by side (one per activation and impl) starts from `torch._dynamo.reset()`, so it compiles on its
own. The formula callables (and all vjp callables) share one code object and dynamo keeps at most
`recompile_limit` (8) compiled variants per code object, running further ones eager; gelulab's compiled functions
therefore run under raised limits, patched around each call (activations.compile), with an error instead of that
eager fallback. Should a cell still run eager, `compile_stats` shows no new graph and the runner marks it
"not compiled".
"""
from __future__ import annotations

import numpy as np
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from gelulab.backends.torch.activations import threads  # noqa: F401 - the bench hook, defined once


def sync(y) -> None:
    """Wait for the CUDA stream when y lives on a GPU; CPU results are complete when the call returns."""
    if y.device.type == "cuda":
        torch.cuda.synchronize(y.device)


def device_input(backend, a: np.ndarray):
    """`a` as a contiguous torch tensor on the backend's device, copied there before timing starts."""
    x = backend.asarray(a).contiguous()
    sync(x)
    return x


def copy(x):
    """A new tensor with x's contents on x's device (Tensor.clone)."""
    return x.clone()


def fresh() -> None:
    """Clear dynamo's caches so the next group of compiled cells compiles on its own (see module docstring)."""
    torch._dynamo.reset()


def compile_stats(fn) -> dict:
    """Process-wide dynamo counters: {"compiles": graphs compiled, "frames": frames converted,
    "graph_breaks": graph breaks}. fn is unused (torch counts globally)."""
    return {"compiles": int(counters["stats"]["unique_graphs"]), "frames": int(counters["frames"]["total"]),
            "graph_breaks": int(sum(counters["graph_break"].values()))}

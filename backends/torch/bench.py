"""PyTorch's benchmark hooks (the same names in every backends/<name>/bench.py; used by benchmarks/).

CUDA kernels run asynchronously, so a timed call on a GPU ends with `torch.cuda.synchronize()` (as
torch.utils.benchmark.Timer does); CPU ops return with their result computed. torch.compile caches compiled
graphs per code object with guards; `torch._dynamo.utils.counters` counts every frame dynamo converts and every
graph it compiles, so a count that grows during the timed loop means it recompiled there. Each group of compiled
cells timed side by side (at most 8: 4 activations x 2 impls) starts from `torch._dynamo.reset()`: the formula
callables (and all vjp callables) share one code object, dynamo keeps at most `recompile_limit` (8) compiled
variants per code object, and past it (measured here, torch 2.13) it logs one warning and runs every further
variant eager; `compile_stats` then shows no new graph and the runner marks the cell "not compiled".
"""
from __future__ import annotations

import numpy as np
import torch
import torch._dynamo
from torch._dynamo.utils import counters


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


def threads() -> dict:
    """torch's intra-op and inter-op thread counts in effect."""
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}

"""PyTorch backend: torch.nn.functional builtins, torch.func autodiff, torch.compile (inductor).

builtin: torch.nn.functional.gelu(x, approximate='none'|'tanh') and F.relu (torch doc,
https://pytorch.org/docs/stable/generated/torch.nn.functional.gelu.html); torch has no sigmoid-form GELU, so its
builtin is the one-liner users write, x * torch.sigmoid(1.702 * x) (as transformers' QuickGELUActivation).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
import torch.nn.functional as F

from gelulab.core.dtypes import get_dtype
from gelulab.core.formulas import SIGMOID_SCALE

NAME = "torch"
MODES = ("eager", "compiled")

_TORCH = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_NAMES = {v: k for k, v in _TORCH.items()}
_DEVICE = {"cpu": "cpu", "gpu": "cuda"}
_state = {"device": "cpu"}


def setup(device: str, threads: int) -> None:
    """Set torch's intra-op threads and check the device; raises RuntimeError when the device is absent.
    TF32 is turned off so float32 matmuls stay float32 on GPUs (Keras conftest does the same)."""
    if device not in _DEVICE:
        raise RuntimeError(f"torch backend: device {device!r} is not supported; expected one of {list(_DEVICE)}")
    if device == "gpu" and not torch.cuda.is_available():
        raise RuntimeError("torch backend: GELULAB_DEVICE=gpu but torch.cuda.is_available() is False")
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    _state["device"] = _DEVICE[device]


def versions() -> dict:
    """{"torch": version string}."""
    return {"torch": torch.__version__}


def torch_device() -> str:
    """The torch device string in use ("cpu" or "cuda")."""
    return _state["device"]


def asarray(a: np.ndarray, device: str):
    """numpy array (float64/float32/bfloat16/float16, any shape, 0-d included) -> torch.Tensor of the same dtype
    and shape on `device` ("cpu" or "gpu"), a copy. bfloat16 travels as int16 bits (torch.from_numpy does not know
    ml_dtypes' bfloat16)."""
    a = np.ascontiguousarray(a).reshape(np.shape(a))  # ascontiguousarray turns a 0-d array into shape (1,)
    if a.dtype == ml_dtypes.bfloat16:
        t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a.copy())
    return t.to(_DEVICE[device])


def to_numpy(x) -> np.ndarray:
    """torch.Tensor (any device) -> numpy array of the same dtype and shape on the host, detached (bfloat16 via
    ml_dtypes, as int16 bits)."""
    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


# ArrayOps


def where(c, a, b):
    """torch.where(c, a, b), elementwise with broadcasting."""
    return torch.where(c, a, b)


def astype(x, name: str):
    """x cast to dtype `name` ("float64", "float32", "bfloat16", "float16"); ValueError for another."""
    return x.to(_TORCH[get_dtype(name).name])


def dtype_name(x) -> str:
    """The gelulab dtype name of a torch.Tensor ("float64", "float32", "bfloat16", "float16"); KeyError for
    another torch dtype."""
    return _NAMES[x.dtype]


def wide(name: str) -> str:
    """The dtype gelulab's formulas compute `name` in (core.dtypes DType.wide: float16 -> float32,
    bfloat16/float32/float64 -> float64)."""
    return get_dtype(name).wide


erfc = torch.special.erfc
exp = torch.exp
sigmoid = torch.sigmoid

_BUILTINS = {
    "relu": F.relu,
    "gelu_none": lambda x: F.gelu(x, approximate="none"),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_sigmoid": lambda x: x * torch.sigmoid(SIGMOID_SCALE * x),
}


def builtin(activation):
    """The framework's own function for a catalogue entry, or None where the framework has none."""
    return _BUILTINS.get(activation.key)


def kernel(activation):
    """gelulab's float32 kernel for a catalogue entry (backends/torch/kernels.py), or None where there is none.
    It takes float32, bfloat16 and float16 arrays; Backend routes float64 to the formula."""
    from gelulab.backends.torch import kernels

    from gelulab.core.kernels import KERNELS

    return kernels.kernel(activation.key) if activation.key in KERNELS else None


def derivative(fn, activation):
    """Elementwise derivative through torch.func.vjp with a cotangent of ones (composable: apply twice for f'').

    gelulab's kernels (impl "kernel", torch.autograd.Function) go through torch.autograd.grad with
    create_graph=True instead: torch.compile of torch.func.vjp of an autograd.Function silently differentiates the
    Function's forward and ignores its backward (measured with torch 2.13), while torch.autograd.grad honours it
    in eager and compiled code alike. Their float64 inputs take the formula, differentiated by torch.func.vjp
    (aot_autograd has no double backward through torch.autograd.grad)."""
    if getattr(fn, "kernel", None) is not None:
        d_float64 = derivative(fn.float64, activation)

        def d(x):
            if x.dtype == torch.float64:
                return d_float64(x)
            outer = x.requires_grad  # an enclosing derivative differentiates this one: keep the graph
            with torch.enable_grad():
                xr = x if outer else x.detach().requires_grad_(True)
                y = fn(xr)
                (g,) = torch.autograd.grad(y, xr, torch.ones_like(y), create_graph=outer)
            return g

        d.kernel = fn.kernel
        d.float64 = d_float64
        return d

    def d(x):
        out, vjp = torch.func.vjp(fn, x)
        return vjp(torch.ones_like(out))[0]

    return d


def compile(fn):
    """torch.compile with the default inductor backend and static shapes (a new shape or dtype recompiles).

    dynamo keeps at most `recompile_limit` (default 8) compiled variants per code object and silently runs eager
    past it; every formula and derivative closure shares one code object, so the limit is raised here (measured:
    the 9th variant ran eager)."""
    cfg = torch._dynamo.config
    cfg.recompile_limit = max(cfg.recompile_limit, 4096)
    cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 16384)
    if hasattr(cfg, "fail_on_recompile_limit_hit"):
        cfg.fail_on_recompile_limit_hit = True  # never a silent eager fallback
    return torch.compile(fn, dynamic=False)

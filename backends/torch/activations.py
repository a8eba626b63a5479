"""PyTorch backend: torch.nn.functional builtins, torch.func autodiff, torch.compile (inductor).

builtin: torch.nn.functional.gelu(x, approximate='none'|'tanh') and F.relu (torch doc,
https://pytorch.org/docs/stable/generated/torch.nn.functional.gelu.html); torch has no sigmoid-form GELU, so its
builtin is the one-liner users write, x * torch.sigmoid(1.702 * x) (as transformers' QuickGELUActivation).

Nothing here changes a torch setting on import or use: threads and TF32 are set by gelulab.reproducible
(apply_settings), and dynamo's recompile limits are raised only around calls of gelulab's own compiled functions.
"""
from __future__ import annotations

import functools
from contextlib import nullcontext

import ml_dtypes
import numpy as np
import torch

from gelulab.core.numerics.dtypes import get_dtype

_TORCH = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_NAMES = {v: k for k, v in _TORCH.items()}
_DEVICE = {"cpu": "cpu", "gpu": "cuda"}
_state = {"device": "cpu"}


def setup(device: str) -> None:
    """Select the device ("cpu" or "gpu") tensors are placed on; raises RuntimeError when it is absent. Changes no
    torch setting."""
    if device not in _DEVICE:
        raise RuntimeError(f"torch backend: device {device!r} is not supported; expected one of {list(_DEVICE)}")
    if device == "gpu" and not torch.cuda.is_available():
        raise RuntimeError("torch backend: GELULAB_DEVICE=gpu but torch.cuda.is_available() is False")
    _state["device"] = _DEVICE[device]


def apply_settings(settings) -> dict:
    """Apply core.plumbing.settings.Settings to torch (see gelulab.reproducible): torch.set_num_threads(threads)
    (intra-op; any time), and with tf32 False/True torch.backends.cuda.matmul.allow_tf32 and
    torch.backends.cudnn.allow_tf32 (float32 matmuls and convolutions in full float32 on GPUs when False, as Keras' test
    set-up does). Returns {setting: value set}."""
    done = {}
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
        done["torch.set_num_threads"] = settings.threads
    if settings.tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = settings.tf32
        torch.backends.cudnn.allow_tf32 = settings.tf32
        done["allow_tf32"] = settings.tf32
    return done


def threads() -> dict:
    """torch's thread counts in force: {"intra_op": torch.get_num_threads(), "inter_op":
    torch.get_num_interop_threads()}."""
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


def formula_scope():
    """No scope is needed: torch computes float64 whatever its settings (contextlib.nullcontext())."""
    return nullcontext()


def versions() -> dict:
    """{"torch": version string}."""
    return {"torch": torch.__version__}


def cpu_dispatch() -> str:
    """ATen's CPU kernel level in this process, lower case: torch.backends.cpu.get_cpu_capability() ("default",
    "avx2", "avx512"; elsewhere e.g. "sve256"), lowered with ATEN_CPU_CAPABILITY (core.parity.cpu_dispatch)."""
    return torch.backends.cpu.get_cpu_capability().lower()


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
    """The dtype gelulab's formulas compute `name` in (core.numerics.dtypes DType.wide: float16 -> float32,
    bfloat16/float32/float64 -> float64)."""
    return get_dtype(name).wide


erfc = torch.special.erfc
exp = torch.exp
sigmoid = torch.sigmoid

def builtin(activation):
    """The framework's own function for a catalogue entry: its `builtins["torch"]` descriptor
    (core.activations.Call / TimesX / Expression), resolved here; None where torch has none."""
    return activation.builtin("torch")


def kernel(activation):
    """gelulab's float32 kernel for a catalogue entry (backends/torch/kernels.py), or None where there is none.
    It takes float32, bfloat16 and float16 arrays; Backend routes float64 to the formula."""
    if activation.kernel is None:
        return None
    from gelulab.backends.torch import kernels

    return kernels.kernel(activation.key)


def derivative(fn, activation):
    """Elementwise derivative through torch.func.vjp with a cotangent of ones (composable: apply twice for f'').

    gelulab's kernels (impl "kernel", torch.autograd.Function) go through torch.autograd.grad with
    create_graph=True instead: torch.compile of torch.func.vjp of an autograd.Function silently differentiates the
    Function's forward and ignores its backward (measured with torch 2.13), while torch.autograd.grad honours it
    in eager and compiled code alike; where nothing differentiates the derivative further (x does not require
    grad) it is the f' kernel itself, with no autograd. Their float64 inputs take the formula, differentiated by
    torch.func.vjp (aot_autograd has no double backward through torch.autograd.grad)."""
    if getattr(fn, "kernel", None) is not None:
        d_float64 = derivative(fn.float64, activation)
        level = getattr(fn, "kernel_order", 0)  # fn is the kernel's value (0) or its level-th derivative

        def d(x):
            if x.dtype == torch.float64:
                return d_float64(x)
            outer = x.requires_grad  # an enclosing derivative differentiates this one: keep the graph
            if not outer and level < len(fn.kernel.derivatives):  # f^(level+1) times a cotangent of ones is that
                return fn.kernel.derivatives[level](x)  # derivative's kernel itself (no forward value, no autograd)
            with torch.enable_grad():
                xr = x if outer else x.detach().requires_grad_(True)
                y = fn(xr)
                (g,) = torch.autograd.grad(y, xr, torch.ones_like(y), create_graph=outer)
            return g

        d.kernel = fn.kernel
        d.kernel_order = level + 1
        d.float64 = d_float64
        return d

    def d(x):
        out, vjp = torch.func.vjp(fn, x)
        return vjp(torch.ones_like(out))[0]

    return d


# dynamo keeps at most `recompile_limit` (default 8) compiled variants per code object and, past it, logs one
# warning and runs every further variant eager; every formula and derivative closure shares one code object, so
# gelulab's compiled calls that may compile run with higher limits and an error instead of the eager fallback. The
# limits are patched around those calls (torch._dynamo.config.patch, restored on return), not set globally:
# measured on torch 2.13, with the patch the 9th to 12th variants of one closure each compiled a graph, and the
# global config read recompile_limit 8 afterwards; without it they ran eager. The patch costs about 27 us per call
# (measured: 48 us against 21 us for a compiled GELU of 1e3 float32), so it is applied only to a call whose input
# signature (shape, dtype, device, requires_grad, grad mode) the compiled function has not seen: a seen signature
# hits dynamo's cache, which does not consult the limits (measured: 21.4 us against 20.4 us for torch.compile's
# own object; 12 variants of the formula closure, 4 activations x 3 dtypes, compiled 12 graphs).
_COMPILE_LIMITS = {"recompile_limit": 4096, "accumulated_recompile_limit": 16384,
                   "fail_on_recompile_limit_hit": True}


def _signature(args) -> tuple:
    return (torch.is_grad_enabled(),) + tuple(
        (a.shape, a.dtype, a.device, a.requires_grad) if isinstance(a, torch.Tensor) else (type(a), a) for a in args)


def with_derivatives(f0, f1, f2):
    """torch keeps subnormals, so autodiff of the float64 formula meets its goal: f0 unchanged (f1, f2 unused)."""
    return f0


def compile(fn):
    """torch.compile with the default inductor backend and static shapes (a new shape or dtype recompiles); a call
    with an input signature not seen before runs under raised dynamo recompile limits (see _COMPILE_LIMITS),
    restored when it returns. The torch.compile object is the `compiled` attribute."""
    import torch._dynamo

    compiled = torch.compile(fn, dynamic=False)
    cfg = torch._dynamo.config
    limits = {k: v for k, v in _COMPILE_LIMITS.items() if hasattr(cfg, k)}
    seen = set()

    @functools.wraps(fn)
    def call(*args):
        key = _signature(args)
        if key in seen:
            return compiled(*args)
        with cfg.patch(**limits):
            out = compiled(*args)
        seen.add(key)
        return out

    call.compiled = compiled
    return call

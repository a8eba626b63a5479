"""gelulab's activations as torch.nn.Modules: drop-in for torch.nn.GELU, torch.nn.ReLU and torch.nn.SiLU.

    from gelulab.layers.torch import GELU
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), GELU(approximate="tanh"), torch.nn.Linear(16, 1))

The constructors are torch's (`GELU(approximate="none")`, `ReLU(inplace=False)`, `SiLU(inplace=False)`) plus
`impl=`: "kernel" (gelulab's float32 kernel, core.numerics.kernels, within 1 ULP, default), "formula" (its correctly rounded
formula, core.numerics.formulas) or "builtin" (torch.nn.functional's own).
`approximate` may also be "sigmoid" (x sigmoid(1.702 x)), which torch.nn.GELU lacks. The modules have no parameters
or buffers (an empty state_dict), run under autograd and torch.compile, and accept float16, bfloat16, float32 and
float64 tensors on any device (TypeError for other dtypes).
"""
from __future__ import annotations

import torch

from gelulab.api import apply
from gelulab.backends.torch.kernels import onnx_exporting
from gelulab.core.activations import DEFAULT_IMPL, activation_key, check_impl, check_mode, get_activation


class Activation(torch.nn.Module):
    """Any catalogue entry (core.activations.ACTIVATIONS) as an elementwise module.

    key: catalogue key ("relu", "gelu_none", "gelu_tanh", "gelu_sigmoid", ...); impl: "kernel" (default), "formula" or "builtin";
    inplace: write the result into the input tensor (as torch.nn.ReLU(inplace=True)). Input: a floating tensor of
    any shape; output: the same shape and dtype. Raises ValueError for an unknown key or impl.
    """

    def __init__(self, key: str, impl: str = DEFAULT_IMPL, inplace: bool = False):
        super().__init__()
        self.key = get_activation(key).key
        self.impl = check_impl(impl)
        self.inplace = bool(inplace)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # TorchScript compiles this branch alone: impl "builtin" (__prepare_scriptable__)
            out = _scripted_builtin(self.key, input)
        else:
            if self.impl == "formula" and onnx_exporting():
                raise RuntimeError(_FORMULA_ONNX)
            out = apply(self.key, input, self.impl)
        return input.copy_(out) if self.inplace else out

    def __prepare_scriptable__(self):
        """torch.jit.script calls this before compiling: impl "builtin" scripts (torch.nn.functional's op);
        the kernel and the formula are Python over gelulab's modules, which TorchScript cannot compile, so they
        are refused here, before any work, with the ways out (RuntimeError)."""
        if self.impl != "builtin":
            raise RuntimeError(f"torch.jit.script: gelulab's impl={self.impl!r} cannot be scripted; use "
                               "torch.jit.trace or torch.export (they carry the kernel), or call "
                               "gelulab.swap(model, impl='builtin') before scripting")
        return self

    def extra_repr(self) -> str:
        return f"key={self.key!r}, impl={self.impl!r}" + (", inplace=True" if self.inplace else "")


_FORMULA_ONNX = ("torch.onnx.export: gelulab's impl='formula' computes in float64 with erfc, which ONNX and ONNX "
                 "Runtime lack; export with impl='kernel' (exported op for op, the same values) or call "
                 "gelulab.swap(model, impl='builtin') before export")


def _scripted_builtin(key: str, x: torch.Tensor) -> torch.Tensor:
    """impl "builtin" in TorchScript: torch's own op for each catalogue key (backends/torch/activations.py's
    builtins). Raises RuntimeError for a key without one."""
    if key == "gelu_none":
        return torch.nn.functional.gelu(x)
    if key == "gelu_tanh":
        return torch.nn.functional.gelu(x, approximate="tanh")
    if key == "gelu_sigmoid":
        return x * torch.sigmoid(1.702 * x)
    if key == "relu":
        return torch.nn.functional.relu(x)
    if key == "silu":
        return torch.nn.functional.silu(x)
    raise RuntimeError("torch.jit.script: this catalogue entry has no TorchScript builtin")


class GELU(Activation):
    """GELU as torch.nn.GELU(approximate=...), computed by gelulab.

    approximate: "none" (exact x Phi(x), Hendrycks & Gimpel 2016 eq. 1), "tanh" (sec. 2) or "sigmoid"
    (x sigmoid(1.702 x), sec. 2); a bool or None raises ValueError. impl: "kernel" (default), "formula" or "builtin"
    (torch.nn.functional.gelu).
    """

    def __init__(self, approximate: str = "none", impl: str = DEFAULT_IMPL):
        super().__init__(activation_key("gelu", check_mode(approximate)), impl)
        self.approximate = approximate

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}, impl={self.impl!r}"


class ReLU(Activation):
    """ReLU max(x, 0) as torch.nn.ReLU(inplace=False), computed by gelulab (impl "kernel" (default), "formula" or "builtin")."""

    def __init__(self, inplace: bool = False, impl: str = DEFAULT_IMPL):
        super().__init__("relu", impl, inplace)

    def extra_repr(self) -> str:
        return f"impl={self.impl!r}" + (", inplace=True" if self.inplace else "")


class SiLU(Activation):
    """SiLU x sigmoid(x) as torch.nn.SiLU(inplace=False), computed by gelulab (impl "kernel" (default), "formula" or "builtin").
    Raises ValueError when the catalogue has no "silu" entry."""

    def __init__(self, inplace: bool = False, impl: str = DEFAULT_IMPL):
        super().__init__("silu", impl, inplace)

    def extra_repr(self) -> str:
        return f"impl={self.impl!r}" + (", inplace=True" if self.inplace else "")


def layer_for(key: str, impl: str = DEFAULT_IMPL) -> Activation:
    """The module computing catalogue entry `key`: the class its unit names (`layer_name`: GELU(approximate=mode),
    ReLU(), SiLU()), else Activation(key). impl: as the layers' (the default "kernel" takes the formula for
    an entry without a kernel, Activation.impl_for). Raises ValueError for an unknown key or impl."""
    entry = get_activation(key)
    impl = entry.impl_for(check_impl(impl))
    cls = globals().get(entry.layer_name) if entry.layer_name else None
    if cls is None:
        return Activation(key, impl)
    if entry.mode is not None:
        return cls(approximate=entry.mode, impl=impl)
    return cls(impl=impl)

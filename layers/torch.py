"""gelulab's activations as torch.nn.Modules: drop-in for torch.nn.GELU, torch.nn.ReLU and torch.nn.SiLU.

    from gelulab.layers.torch import GELU
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), GELU(approximate="tanh"), torch.nn.Linear(16, 1))

The constructors are torch's (`GELU(approximate="none")`, `ReLU(inplace=False)`, `SiLU(inplace=False)`) plus
`impl=`: "kernel" (gelulab's float32 kernel, core.kernels, within 1 ULP, default), "formula" (its correctly rounded
formula, core.formulas) or "builtin" (torch.nn.functional's own).
`approximate` may also be "sigmoid" (x sigmoid(1.702 x)), which torch.nn.GELU lacks. The modules have no parameters
or buffers (an empty state_dict), run under autograd and torch.compile, and accept float16, bfloat16, float32 and
float64 tensors on any device (TypeError for other dtypes).
"""
from __future__ import annotations

import torch

from gelulab.api import apply
from gelulab.core.activations import DEFAULT_IMPL, GELU_MODES, activation_key, check_impl, check_mode, get_activation


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
        out = apply(self.key, input, self.impl)
        return input.copy_(out) if self.inplace else out

    def extra_repr(self) -> str:
        return f"key={self.key!r}, impl={self.impl!r}" + (", inplace=True" if self.inplace else "")


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
    """The module computing catalogue entry `key`: GELU(approximate=...), ReLU() or SiLU() where one is named for
    it, else Activation(key). Raises ValueError for an unknown key or impl."""
    named = {"relu": ReLU, "silu": SiLU}
    named.update({activation_key("gelu", mode): _gelu(mode) for mode in GELU_MODES})
    get_activation(key)
    return named[key](impl=impl) if key in named else Activation(key, impl)


def _gelu(mode):
    return lambda impl: GELU(approximate=mode, impl=impl)

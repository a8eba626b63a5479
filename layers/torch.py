"""gelulab's activations as torch.nn.Modules: drop-in for torch.nn.GELU, torch.nn.ReLU and torch.nn.SiLU.

    from gelulab.layers.torch import GELU
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), GELU(approximate="tanh"), torch.nn.Linear(16, 1))

By default a layer computes with torch's own op (`impl="builtin"`: torch.nn.functional.gelu(approximate=...),
relu, silu; for approximate="sigmoid", which torch.nn.GELU lacks, x * torch.sigmoid(1.702 x)), so a model costs
what it costs with torch.nn.GELU: the layer adds about a microsecond per call (one dictionary look-up), starts no
thread and compiles nothing. The constructors are torch's (`GELU(approximate="none")`, `ReLU(inplace=False)`,
`SiLU(inplace=False)`) plus `impl=`: "builtin" (default), "kernel" (opt-in: gelulab's float32 kernel,
core.numerics.kernels, within 1 ULP; on a CPU about 8-9x torch's op per call once its loop is built, a float64
path until then; `gelulab warmup` builds the loop once per machine, see backends/torch/kernels.py) or "formula"
(its correctly rounded formula, core.numerics.formulas, computed in float64). The modules have no parameters or
buffers (an empty state_dict), run under autograd and torch.compile, and accept float16, bfloat16, float32 and
float64 tensors on any device (TypeError for other dtypes).
"""
from __future__ import annotations

import torch

from gelulab.api import backend_module
from gelulab.backends.torch.kernels import onnx_exporting
from gelulab.core.activations import activation_key, check_impl, check_mode, get_activation
from gelulab.core.contracts.interface import implementation

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# (catalogue key, impl) -> the callable on torch tensors, filled when a layer is constructed, so that a forward
# call is one look-up and one call of torch's op (the builtin) or gelulab's kernel or formula
_FUNCTIONS: dict = {}


def _function(key: str, impl: str):
    """The callable computing catalogue entry `key` in `impl` on torch tensors (core.contracts.interface.
    implementation over backends/torch/activations.py), built once per (key, impl)."""
    fn = _FUNCTIONS.get((key, impl))
    if fn is None:
        fn = _FUNCTIONS[(key, impl)] = implementation(backend_module("torch"), "torch", get_activation(key), impl)
    return fn


class Activation(torch.nn.Module):
    """Any catalogue entry (core.activations.ACTIVATIONS) as an elementwise module.

    key: catalogue key ("relu", "gelu_none", "gelu_tanh", "gelu_sigmoid", ...); impl: None or "builtin" (default:
    torch's own op, or gelulab's formula for an entry torch has none for), "kernel" (opt-in, gelulab's float32
    kernel within 1 ULP) or "formula"; inplace: write the result into the input tensor (as
    torch.nn.ReLU(inplace=True)). Input: a floating tensor of any shape; output: the same shape and dtype. Raises
    ValueError for an unknown key or impl, TypeError (at the call) for a tensor of another dtype.
    """

    def __init__(self, key: str, impl: str | None = None, inplace: bool = False):
        super().__init__()
        entry = get_activation(key)
        self.key = entry.key
        self.impl = entry.impl_for(None if impl is None else check_impl(impl), "torch")
        self.inplace = bool(inplace)
        _function(self.key, self.impl)  # ValueError now, not at the first call, where torch has no such impl

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # TorchScript compiles this branch alone: impl "builtin" (__prepare_scriptable__)
            out = _scripted_builtin(self.key, input)
            return input.copy_(out) if self.inplace else out
        else:
            if input.dtype not in _FLOATS:
                raise TypeError(f"gelulab.layers.torch: got a torch.Tensor of dtype {input.dtype}; expected "
                                "float16, bfloat16, float32 or float64")
            if self.impl == "formula" and onnx_exporting():
                raise RuntimeError(_FORMULA_ONNX)
            if not self.inplace:
                return _function(self.key, self.impl)(input)
            return _inplace(self.key, self.impl, input)

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


def _inplace(key: str, impl: str, input: torch.Tensor) -> torch.Tensor:
    """inplace=True: the result written into `input`, as torch.nn.ReLU / SiLU(inplace=True) do, autograd included:
    the value is computed from a copy of the input when autograd records (its backward reads the input, which the
    write would overwrite), from the input itself otherwise."""
    source = input.clone() if torch.is_grad_enabled() and input.requires_grad else input
    return input.copy_(_function(key, impl)(source))


_FORMULA_ONNX = ("torch.onnx.export: gelulab's impl='formula' computes in float64 with erfc, which ONNX and ONNX "
                 "Runtime lack; export with impl='builtin' (torch's op) or impl='kernel' (exported op for op, the "
                 "same values), or call gelulab.swap(model, impl='builtin') before export")


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
    (x sigmoid(1.702 x), sec. 2); a bool or None raises ValueError. impl: None or "builtin" (default:
    torch.nn.functional.gelu(approximate=...), x * torch.sigmoid(1.702 x) for "sigmoid"), "kernel" (opt-in:
    gelulab's float32 kernel within 1 ULP, about 8-9x torch's op per call on a CPU once built; `gelulab warmup`)
    or "formula".
    """

    def __init__(self, approximate: str = "none", impl: str | None = None):
        super().__init__(activation_key("gelu", check_mode(approximate)), impl)
        self.approximate = approximate

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}, impl={self.impl!r}"


class ReLU(Activation):
    """ReLU max(x, 0) as torch.nn.ReLU(inplace=False); impl None or "builtin" (default: torch.nn.functional.relu),
    "kernel" or "formula" (see Activation)."""

    def __init__(self, inplace: bool = False, impl: str | None = None):
        super().__init__("relu", impl, inplace)

    def extra_repr(self) -> str:
        return f"impl={self.impl!r}" + (", inplace=True" if self.inplace else "")


class SiLU(Activation):
    """SiLU x sigmoid(x) as torch.nn.SiLU(inplace=False); impl None or "builtin" (default:
    torch.nn.functional.silu), "kernel" or "formula" (see Activation). Raises ValueError when the catalogue has no
    "silu" entry."""

    def __init__(self, inplace: bool = False, impl: str | None = None):
        super().__init__("silu", impl, inplace)

    def extra_repr(self) -> str:
        return f"impl={self.impl!r}" + (", inplace=True" if self.inplace else "")


def layer_for(key: str, impl: str | None = None) -> Activation:
    """The module computing catalogue entry `key`: the class its unit names (`layer_name`: GELU(approximate=mode),
    ReLU(), SiLU()), else Activation(key). impl: as the layers' (None: torch's builtin, or the formula for an entry
    torch has none for, Activation.impl_for). Raises ValueError for an unknown key or impl."""
    entry = get_activation(key)
    impl = entry.impl_for(None if impl is None else check_impl(impl), "torch")
    cls = globals().get(entry.layer_name) if entry.layer_name else None
    if cls is None:
        return Activation(key, impl)
    if entry.mode is not None:
        return cls(approximate=entry.mode, impl=impl)
    return cls(impl=impl)

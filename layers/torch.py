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
buffers (an empty state_dict), run under autograd and torch.compile (and torch.jit.script with impl "builtin": the
function written from the catalogue entry's torch builtin, script_descriptor), and accept float16, bfloat16, float32 and
float64 tensors on any device (TypeError for other dtypes).
"""
from __future__ import annotations

import linecache
import math

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
        if input.dtype not in _FLOATS:
            raise TypeError(f"gelulab.layers.torch: got a torch.Tensor of dtype {input.dtype}; expected "
                            "float16, bfloat16, float32 or float64")
        if self.impl == "formula" and onnx_exporting():
            raise RuntimeError(_FORMULA_ONNX)
        if not self.inplace:
            return _function(self.key, self.impl)(input)
        return _inplace(self.key, self.impl, input)

    def __prepare_scriptable__(self):
        """torch.jit.script calls this before compiling: impl "builtin" becomes a module TorchScript compiles, the
        function written from the catalogue entry's torch builtin (its `builtins["torch"]` descriptor, e.g.
        torch.nn.functional.gelu(x, approximate='tanh') or x * torch.sigmoid(1.702 * x); _scripted_class). The
        kernel and the formula are Python over gelulab's modules, which TorchScript cannot compile, so they are
        refused here, before any work, with the ways out (RuntimeError); so is a builtin TorchScript cannot
        compile."""
        if self.impl != "builtin":
            raise RuntimeError(f"torch.jit.script: gelulab's impl={self.impl!r} cannot be scripted; use "
                               "torch.jit.trace or torch.export (they carry the kernel), or call "
                               "gelulab.swap(model, impl='builtin') before scripting")
        scripted = _scripted_class(self.key)(self.inplace)
        scripted.train(self.training)
        return scripted

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


class _Symbol:
    """An expression of TorchScript source, built by running a builtin descriptor (core.activations._entry: Call,
    TimesX, Expression) on symbols instead of tensors: each framework function it resolves writes a call, each
    operator its infix form. Anything else (a comparison used as a bool, an attribute) raises TypeError."""

    def __init__(self, text: str):
        self.text = text

    def __neg__(self) -> _Symbol:
        return _Symbol(f"(-{self.text})")

    def __bool__(self):
        raise TypeError("a builtin that branches on its input's values has no TorchScript source here")


def _infix(sign: str, reflected: bool = False):
    """The operator method of _Symbol writing `a sign b` (b sign a where reflected)."""
    def op(self: _Symbol, other) -> _Symbol:
        a, b = _source(self), _source(other)
        return _Symbol(f"({b} {sign} {a})" if reflected else f"({a} {sign} {b})")

    return op


for _name, _sign in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("pow", "**")):
    setattr(_Symbol, f"__{_name}__", _infix(_sign))
    setattr(_Symbol, f"__r{_name}__", _infix(_sign, reflected=True))


def _source(value) -> str:
    """TorchScript source of a symbol or a literal argument (number, string, bool, None); TypeError otherwise."""
    if isinstance(value, _Symbol):
        return value.text
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(float(value))  # a numpy float64 constant as a plain literal
    raise TypeError(f"argument {value!r} has no TorchScript literal")


def _symbolic(path: str):
    """The resolver a descriptor binds to: `path` as a function writing its call."""
    def call(*args, **kwargs):
        parts = [_source(a) for a in args] + [f"{k}={_source(v)}" for k, v in kwargs.items()]
        return _Symbol(f"{path}({', '.join(parts)})")

    return call


def scripted_builtin(key: str):
    """The TorchScript function (a torch.jit.ScriptFunction, tensor -> tensor) of catalogue entry `key`'s torch
    builtin, its `builtins["torch"]` descriptor (script_descriptor); built once per entry. Raises RuntimeError
    ("torch.jit.script: ...") for an entry without a torch builtin or one TorchScript cannot compile (naming the
    builtin)."""
    fn = _SCRIPTED.get(key)
    if fn is None:
        spec = get_activation(key).builtins.get("torch")
        if spec is None:
            raise RuntimeError(f"torch.jit.script: catalogue entry {key!r} has no torch builtin to script; use "
                               "torch.jit.trace or torch.export")
        fn = _SCRIPTED[key] = script_descriptor(spec, f"scripted_{''.join(c if c.isalnum() else '_' for c in key)}")
    return fn


def script_descriptor(spec, name: str):
    """A builtin descriptor of the catalogue (core.activations._entry: Call, TimesX or Expression over torch's
    functions) as a TorchScript function `name` (tensor -> tensor): the descriptor bound to symbolic functions
    (`_symbolic`) writes its source, e.g. "torch.nn.functional.gelu(x, approximate='tanh')" or
    "(x * torch.sigmoid((1.702 * x)))", which torch.jit.script compiles. Raises RuntimeError ("torch.jit.script:
    ...", naming the descriptor) where the descriptor branches on values, passes a non-literal argument or calls
    a function TorchScript cannot compile."""
    try:
        body = _source(spec.bind(_symbolic)(_Symbol("x")))
        return torch.jit.script(_python_function(name, body))
    except Exception as e:  # TorchScript's frontend raises RuntimeError, the symbols TypeError
        raise RuntimeError(f"torch.jit.script: the torch builtin {spec} cannot be scripted "
                           f"({type(e).__name__}: {' '.join(str(e).split())[:160]}); use torch.jit.trace or "
                           "torch.export") from e


_SCRIPTED: dict = {}  # catalogue key -> its scripted torch builtin
_SCRIPTED_CLASSES: dict = {}  # catalogue key -> the module class TorchScript compiles for it


def _python_function(name: str, body: str):
    """A Python function `name`(x) returning the TorchScript expression `body`, its source kept in linecache (so
    torch.jit.script reads it, and compiles it into the module that calls it, which torch.jit.save then stores)."""
    source = f"def {name}(x: torch.Tensor) -> torch.Tensor:\n    return {body}\n"
    filename = f"<gelulab.layers.torch {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"torch": torch}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - source written from the descriptor
    fn = namespace[name]
    fn.__module__ = __name__
    return fn


_SCRIPTED: dict = {}  # catalogue key -> its scripted torch builtin
_SCRIPTED_CLASSES: dict = {}  # catalogue key -> the module class TorchScript compiles for it


def _scripted_class(key: str) -> type:
    """The torch.nn.Module class that stands for Activation(key, impl="builtin") in TorchScript: forward is the
    entry's scripted builtin (scripted_builtin), written into the input with `inplace`. One class per entry,
    because TorchScript resolves the function a forward calls once per class."""
    cls = _SCRIPTED_CLASSES.get(key)
    if cls is not None:
        return cls
    builtin = scripted_builtin(key)  # a torch.jit.ScriptFunction, compiled into the class's forward

    class ScriptedBuiltin(torch.nn.Module):
        def __init__(self, inplace: bool):
            super().__init__()
            self.inplace = inplace

        def forward(self, input: torch.Tensor) -> torch.Tensor:
            out = builtin(input)
            if self.inplace:
                return input.copy_(out)
            return out

    ScriptedBuiltin.__qualname__ = ScriptedBuiltin.__name__ = f"ScriptedBuiltin_{key}"
    cls = _SCRIPTED_CLASSES[key] = ScriptedBuiltin
    return cls


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

"""identify's probe on torch (the `probe` tool module, gelulab.backends.tools): torch tensors fed to callables of
torch and transformers, and to torch.nn.Modules. torch is asked for in sys.modules only, never imported here."""
from __future__ import annotations

import sys

import numpy as np

MODULES = ("torch", "transformers")
ARRAY_KIND = "torch tensor"

# The names of torch and transformers that a `gelulab identify` expression may use (experiments/identify/expression.py
# collects them from every backend's probe module): per namespace `path`, its members by name ("names", checked before
# anything is imported) and/or by kind ("kind": "function"; "ufunc", a numpy ufunc of that name; "class", a class
# defined in module "defined_in"), which a refusal calls "described"; "module", the module to import where the path is
# an attribute of one; "denied", members never accepted. Names the framework lacks fail when evaluated
# (AttributeError).
NAMESPACES = (
    {"path": "torch", "names": ("abs", "add", "clip", "cos", "cosh", "divide", "erf", "erfc", "erfinv", "exp", "exp2",
                                "expm1", "log", "log1p", "logaddexp", "maximum", "minimum", "multiply", "negative",
                                "pow", "reciprocal", "relu", "rsqrt", "sigmoid", "sign", "sin", "sinh", "softplus",
                                "sqrt", "square", "subtract", "tanh", "where", "clamp", "div", "mul", "neg", "sub",
                                "gelu", "selu", "celu", "hardshrink", "logit")},
    {"path": "torch.special", "names": ("erf", "erfc", "erfcx", "erfinv", "expit", "exp2", "expm1", "log1p",
                                        "log_ndtr", "logit", "ndtr", "ndtri", "sinc", "softmax", "log_softmax",
                                        "xlogy")},
    {"path": "torch.nn.functional", "names": ("celu", "elu", "gelu", "glu", "hardshrink", "hardsigmoid", "hardswish",
                                              "hardtanh", "leaky_relu", "log_softmax", "logsigmoid", "mish", "prelu",
                                              "relu", "relu6", "rrelu", "selu", "sigmoid", "silu", "softmax",
                                              "softmin", "softplus", "softshrink", "softsign", "tanh", "tanhshrink",
                                              "threshold")},
    {"path": "torch.nn", "kind": "class", "defined_in": "torch.nn.modules.activation",
     "described": "activation Module classes", "denied": ("MultiheadAttention",)},
    {"path": "transformers.activations", "kind": "class", "defined_in": "transformers.activations",
     "described": "classes", "denied": ("ClassInstantier",)},
)
ALIASES = {"F": "torch.nn.functional"}  # the short names of its modules an identify expression may use


def owner(fn) -> str | None:
    """"torch" for a torch.nn.Module (a layer, a transformers activation), else None."""
    torch = sys.modules.get("torch")
    return "torch" if torch is not None and isinstance(fn, torch.nn.Module) else None


def native(a: np.ndarray):
    """A CPU torch tensor holding a copy of `a`, the same dtype and shape."""
    return sys.modules["torch"].from_numpy(a.copy())


def as_numpy(y) -> np.ndarray | None:
    """A torch tensor as a numpy array on the host (detached), None for anything else."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(y, torch.Tensor):
        return None
    return y.detach().cpu().numpy()


def context():
    """torch.no_grad(): the probe records no autograd graph (a module with parameters would build one)."""
    return sys.modules["torch"].no_grad()


def float64_note() -> str:
    """"": torch computes float64 as asked."""
    return ""



"""identify's probe on TensorFlow and Keras (the `probe` tool module, gelulab.backends.tools): tf tensors fed to
callables of tensorflow and tf_keras; a Keras layer or keras function is fed the arrays of Keras' configured
backend. TensorFlow and Keras are asked for in sys.modules only, never imported here."""
from __future__ import annotations

import contextlib
import functools
import sys

import numpy as np

MODULES = ("tensorflow", "tf_keras", "keras")
ARRAY_KIND = "tf tensor"

# The names of TensorFlow and Keras that a `gelulab identify` expression may use (experiments/identify/expression.py
# collects them from every backend's probe module): per namespace `path`, its members by name ("names", checked before
# anything is imported) and/or by kind ("kind": "function"; "ufunc", a numpy ufunc of that name; "class", a class
# defined in module "defined_in"), which a refusal calls "described"; "module", the module to import where the path is
# an attribute of one; "denied", members never accepted. Names the framework lacks fail when evaluated
# (AttributeError).
NAMESPACES = (
    {"path": "tensorflow.nn", "names": ("crelu", "elu", "gelu", "leaky_relu", "log_softmax", "relu", "relu6", "selu",
                                        "sigmoid", "silu", "softmax", "softplus", "softsign", "swish", "tanh")},
    {"path": "tensorflow.math", "names": ("abs", "add", "clip", "cos", "cosh", "divide", "erf", "erfc", "erfinv",
                                          "exp", "exp2", "expm1", "log", "log1p", "logaddexp", "maximum", "minimum",
                                          "multiply", "negative", "pow", "reciprocal", "relu", "rsqrt", "sigmoid",
                                          "sign", "sin", "sinh", "softplus", "sqrt", "square", "subtract", "tanh",
                                          "where", "erfcinv", "log_sigmoid", "ndtri", "softsign")},
    {"path": "tensorflow", "names": ("abs", "add", "clip_by_value", "cos", "exp", "maximum", "minimum", "multiply",
                                     "negative", "pow", "sigmoid", "sign", "sin", "sqrt", "square", "subtract",
                                     "tanh", "where")},
    {"path": "keras.activations", "kind": "function", "described": "functions",
     "denied": ("get", "serialize", "deserialize")},
    {"path": "keras.layers", "names": ("Activation", "ELU", "LeakyReLU", "PReLU", "ReLU", "Softmax")},
)
ALIASES = {"tf": "tensorflow"}  # the short names of its modules an identify expression may use


def owner(fn) -> str | None:
    """For a Keras layer, or a function of the keras package, the name of Keras' configured backend
    (keras.backend.backend(): "tensorflow", "jax", "torch" or "numpy"), whose arrays it takes; None for anything
    else."""
    keras = sys.modules.get("keras")
    if keras is None:
        return None
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    module = getattr(target, "__module__", None) or type(target).__module__ or ""
    if isinstance(fn, keras.layers.Layer) or module.split(".")[0] == "keras":
        return keras.backend.backend()
    return None


def native(a: np.ndarray):
    """A tf.constant of `a`, the same dtype and shape."""
    return sys.modules["tensorflow"].constant(a)


def as_numpy(y) -> np.ndarray | None:
    """A tf.Tensor or tf.Variable as a numpy array, None for anything else."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not (tf.is_tensor(y) or isinstance(y, tf.Variable)):
        return None
    return y.numpy()


def context():
    """No context: TensorFlow records gradients only under a GradientTape."""
    return contextlib.nullcontext()


def float64_note() -> str:
    """"": TensorFlow computes float64 as asked."""
    return ""

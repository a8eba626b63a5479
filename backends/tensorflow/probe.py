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

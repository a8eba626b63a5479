"""TensorFlow's activation callables that gelulab.identify is measured on (core.contracts.contract.Subjects): tf.nn's
GELU (approximate=False by default, and True), ReLU and SiLU, and Keras's (keras.activations and the Activation layer;
Keras 3 is installed with TensorFlow and runs on its configured backend, KERAS_BACKEND, TensorFlow by default;
left out when keras is not installed).
"""
from __future__ import annotations

import functools
import importlib.util

import tensorflow as tf


def subjects() -> dict:
    """{expression: callable}, each key the Python expression `gelulab identify` evaluates to that callable."""
    out = {
        "tf.nn.gelu": tf.nn.gelu,
        "functools.partial(tf.nn.gelu, approximate=True)": functools.partial(tf.nn.gelu, approximate=True),
        "tf.nn.relu": tf.nn.relu,
        "tf.nn.silu": tf.nn.silu,
    }
    if importlib.util.find_spec("keras") is not None:
        import keras

        out.update({
            "keras.activations.gelu": keras.activations.gelu,
            "functools.partial(keras.activations.gelu, approximate=True)": functools.partial(
                keras.activations.gelu, approximate=True),
            "keras.activations.relu": keras.activations.relu,
            "keras.activations.silu": keras.activations.silu,
            "keras.layers.Activation('gelu')": keras.layers.Activation("gelu"),
        })
    return out

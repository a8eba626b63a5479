"""gelulab's activations as Keras 3 layers, registered as serializable (package "gelulab").

    from gelulab.layers.keras import GELU
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16), GELU(approximate="tanh"),
                              keras.layers.Dense(1)])

`model.save("m.keras")` then `keras.models.load_model("m.keras")` round-trips with no `custom_objects`, provided
this module has been imported in the loading process (`import gelulab.layers.keras`): the layers are stored under
their registered names ("gelulab>GELU", ...) and Keras imports modules of its own packages only, never a third
party's, when it meets an unknown name (keras.saving's deserialize_keras_object); without the import
load_model raises TypeError ("Could not locate class 'GELU'").

The layers work with every Keras backend: `call` hands the backend's tensor (tf.Tensor, jax.Array or
torch.Tensor) to gelulab.apply, which dispatches on its type. They have no weights. Each layer is also a valid
`activation=` of another layer (Dense(16, activation=GELU())): Keras stores it by its registered name.
"""
from __future__ import annotations

import keras

from gelulab.api import apply
from gelulab.core.activations import DEFAULT_IMPL, GELU_MODES, activation_key, check_impl, check_mode, get_activation


@keras.saving.register_keras_serializable(package="gelulab")
class Activation(keras.layers.Layer):
    """Any catalogue entry (core.activations.ACTIVATIONS) as an elementwise Keras layer.

    key: catalogue key; impl: "kernel" (default), "formula" (gelulab's formula) or "builtin" (the backend framework's own function);
    further keyword arguments go to keras.layers.Layer (name, dtype, ...). Input: a floating tensor of any shape;
    output: the same shape, in the layer's compute dtype: Keras casts floating inputs to it before `call` (float32
    by default, so a float16 input gives float32; dtype="float16" or a "mixed_float16" policy computes float16).
    Raises ValueError for an unknown key or impl.
    """

    def __init__(self, key: str, impl: str = DEFAULT_IMPL, **kwargs):
        super().__init__(**kwargs)
        self.key = get_activation(key).key
        self.impl = check_impl(impl)
        self.supports_masking = True

    def call(self, inputs):
        return apply(self.key, inputs, self.impl)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "key": self.key, "impl": self.impl}


@keras.saving.register_keras_serializable(package="gelulab")
class GELU(Activation):
    """GELU: approximate "none" (exact x Phi(x), Hendrycks & Gimpel 2016 eq. 1), "tanh" (sec. 2) or "sigmoid"
    (x sigmoid(1.702 x), sec. 2), an explicit string (a bool or None raises ValueError; keras.activations.gelu's
    `approximate` is a bool); impl "kernel" (default), "formula" or "builtin"."""

    def __init__(self, approximate: str = "none", impl: str = DEFAULT_IMPL, **kwargs):
        kwargs.pop("key", None)
        super().__init__(activation_key("gelu", check_mode(approximate)), impl, **kwargs)
        self.approximate = approximate

    def get_config(self) -> dict:
        config = super().get_config()
        del config["key"]
        return {**config, "approximate": self.approximate}


@keras.saving.register_keras_serializable(package="gelulab")
class ReLU(Activation):
    """ReLU max(x, 0), impl "kernel" (default), "formula" or "builtin" (the plain case of keras.layers.ReLU)."""

    def __init__(self, impl: str = DEFAULT_IMPL, **kwargs):
        kwargs.pop("key", None)
        super().__init__("relu", impl, **kwargs)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["key"]
        return config


@keras.saving.register_keras_serializable(package="gelulab")
class SiLU(Activation):
    """SiLU x sigmoid(x), impl "kernel" (default), "formula" or "builtin". Raises ValueError when the catalogue has no "silu" entry."""

    def __init__(self, impl: str = DEFAULT_IMPL, **kwargs):
        kwargs.pop("key", None)
        super().__init__("silu", impl, **kwargs)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["key"]
        return config


def layer_for(key: str, impl: str = DEFAULT_IMPL, **kwargs) -> Activation:
    """The layer computing catalogue entry `key`: GELU(approximate=...), ReLU() or SiLU() where one is named for
    it, else Activation(key); kwargs go to keras.layers.Layer. Raises ValueError for an unknown key or impl."""
    named = {"relu": ReLU, "silu": SiLU}
    named.update({activation_key("gelu", mode): _gelu(mode) for mode in GELU_MODES})
    get_activation(key)
    return named[key](impl=impl, **kwargs) if key in named else Activation(key, impl, **kwargs)


def _gelu(mode):
    return lambda impl, **kwargs: GELU(approximate=mode, impl=impl, **kwargs)

"""gelulab's activations as Keras 3 layers, registered as serializable (package "gelulab.layers.keras").

    from gelulab.layers.keras import GELU
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16), GELU(approximate="tanh"),
                              keras.layers.Dense(1)])

`model.save("m.keras")` then `keras.models.load_model("m.keras")` round-trips with no `custom_objects`, provided
this module has been imported in the loading process (`import gelulab.layers.keras`): the layers are stored under
their registered names ("gelulab.layers.keras>GELU", ...) and Keras imports modules of its own packages only, never
a third party's, when it meets an unknown name (keras.saving's deserialize_keras_object); without the import
load_model raises TypeError ("Could not locate class 'GELU'. ... make sure they are all imported ... Full object
config: {'module': 'gelulab.layers.keras', ..., 'registered_name': 'gelulab.layers.keras>GELU'}"), which names the
module to import. Files saved under the earlier names ("gelulab>GELU") load as well.

Leaving Keras (TensorFlow backend): `model.export(path)` writes a SavedModel that `tf.saved_model.load` serves in a
process with TensorFlow alone (no gelulab, no Keras), and `tf.lite.TFLiteConverter.from_keras_model(model)` converts
a model holding the kernel to builtin TFLite ops (a right shift, no bitwise and) run by the stock interpreter.

By default (impl=None) a layer computes with the Keras backend framework's own op (tf.nn.gelu(approximate=...),
jax.nn.gelu, torch.nn.functional.gelu; the sigmoid form as x * sigmoid(1.702 x)), so a model costs what it costs
with keras.activations.gelu; impl="kernel" opts in to gelulab's float32 kernel within 1 ULP (about 8-9x the
framework's op per call on a CPU), impl="formula" to its correctly rounded formula.

The layers work with every Keras backend: `call` hands the backend's tensor (tf.Tensor, jax.Array or
torch.Tensor) to gelulab.apply, which dispatches on its type. They have no weights. Each layer is also a valid
`activation=` of another layer (Dense(16, activation=GELU())): Keras stores it by its registered name.
"""
from __future__ import annotations

import keras

from gelulab.api import apply
from gelulab.core.activations import activation_key, check_impl, check_mode, get_activation

# The registered names ("gelulab.layers.keras>GELU") name the module a loading process must import; Keras prints
# them in its "Could not locate class" error. Files saved under the earlier names ("gelulab>GELU") still load.
PACKAGE = "gelulab.layers.keras"
EARLIER_PACKAGE = "gelulab"


@keras.saving.register_keras_serializable(package=PACKAGE)
class Activation(keras.layers.Layer):
    """Any catalogue entry (core.activations.ACTIVATIONS) as an elementwise Keras layer.

    key: catalogue key; impl: None (default: "builtin", the Keras backend framework's own function, e.g. tf.nn.gelu,
    or gelulab's formula for an entry that framework has none for), "builtin", "kernel" (opt-in: gelulab's float32
    kernel within 1 ULP, about 8-9x the builtin per call on a CPU) or "formula" (gelulab's formula);
    further keyword arguments go to keras.layers.Layer (name, dtype, ...). Input: a floating tensor of any shape;
    output: the same shape, in the layer's compute dtype: Keras casts floating inputs to it before `call` (float32
    by default, so a float16 input gives float32; dtype="float16" or a "mixed_float16" policy computes float16).
    Raises ValueError for an unknown key or impl.
    """

    def __init__(self, key: str, impl: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.key = get_activation(key).key
        self.impl = None if impl is None else check_impl(impl)
        self.supports_masking = True

    def call(self, inputs):
        return apply(self.key, inputs, self.impl)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "key": self.key, "impl": self.impl}


@keras.saving.register_keras_serializable(package=PACKAGE)
class GELU(Activation):
    """GELU: approximate "none" (exact x Phi(x), Hendrycks & Gimpel 2016 eq. 1), "tanh" (sec. 2) or "sigmoid"
    (x sigmoid(1.702 x), sec. 2), an explicit string (a bool or None raises ValueError; keras.activations.gelu's
    `approximate` is a bool); impl None (default: the framework's own op), "builtin", "kernel" or "formula"
    (see Activation)."""

    def __init__(self, approximate: str = "none", impl: str | None = None, **kwargs):
        kwargs.pop("key", None)
        super().__init__(activation_key("gelu", check_mode(approximate)), impl, **kwargs)
        self.approximate = approximate

    def get_config(self) -> dict:
        config = super().get_config()
        del config["key"]
        return {**config, "approximate": self.approximate}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ReLU(Activation):
    """ReLU max(x, 0) (the plain case of keras.layers.ReLU); impl None (default: the framework's own op),
    "builtin", "kernel" or "formula" (see Activation)."""

    def __init__(self, impl: str | None = None, **kwargs):
        kwargs.pop("key", None)
        super().__init__("relu", impl, **kwargs)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["key"]
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class SiLU(Activation):
    """SiLU x sigmoid(x); impl None (default: the framework's own op), "builtin", "kernel" or "formula" (see
    Activation). Raises ValueError when the catalogue has no "silu" entry."""

    def __init__(self, impl: str | None = None, **kwargs):
        kwargs.pop("key", None)
        super().__init__("silu", impl, **kwargs)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["key"]
        return config


def _register_earlier_names() -> None:
    custom = keras.saving.get_custom_objects()
    for cls in (Activation, GELU, ReLU, SiLU):
        custom.setdefault(f"{EARLIER_PACKAGE}>{cls.__name__}", cls)


_register_earlier_names()


def layer_for(key: str, impl: str | None = None, **kwargs) -> Activation:
    """The layer computing catalogue entry `key`: the class its unit names (`layer_name`: GELU(approximate=mode),
    ReLU(), SiLU()), else Activation(key); kwargs go to keras.layers.Layer. impl: as the layers' (None: the
    framework's own op where there is one). Raises ValueError for an unknown key or impl."""
    entry = get_activation(key)
    impl = None if impl is None else check_impl(impl)
    cls = globals().get(entry.layer_name) if entry.layer_name else None
    if cls is None:
        return Activation(key, impl, **kwargs)
    if entry.mode is not None:
        return cls(approximate=entry.mode, impl=impl, **kwargs)
    return cls(impl=impl, **kwargs)

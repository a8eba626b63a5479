"""gelulab.swap on Keras models (the `surgery` tool module, gelulab.backends.tools): every layer whose `activation`
is one of KERAS_FUNCTIONS (keras.activations.gelu / relu / silu, i.e. Dense(..., activation="gelu") and
keras.layers.Activation("gelu")) or a gelulab Keras layer gets the layer the caller's `layer_for` builds
(gelulab.layers.keras, serializable: the model still saves and loads) as its activation. keras.layers.ReLU and
other layers are left as they are. Keras is asked for in sys.modules only, never imported here (whatever backend
Keras runs on)."""
from __future__ import annotations

import sys

from gelulab.core.activations import ACTIVATIONS, get_activation

MODEL_TYPE = "a keras.layers.Layer / keras.Model"
LAYERS_MODULE = "gelulab.layers.keras"  # where gelulab's own Keras layers are defined (recognised by module)
# keras.activations function name -> catalogue key, from the catalogue units' `keras_names`.
KERAS_FUNCTIONS = {name: key for key, a in ACTIVATIONS.items() for name in a.keras_names}


def owns(model) -> bool:
    """Whether `model` is a keras.layers.Layer (a keras.Model included), asking sys.modules only."""
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(model, keras.layers.Layer)


def activation_module(obj) -> bool:
    """Whether obj is a Keras layer that is an activation, not a model: a layer (not a keras.Model) without weights
    (keras.layers.Activation("gelu"), ReLU). False for anything else (asking sys.modules only)."""
    keras = sys.modules.get("keras")
    if keras is None or not isinstance(obj, keras.layers.Layer) or isinstance(obj, keras.Model):
        return False
    return not obj.weights


def keras_key(activation) -> str | None:
    """The catalogue key of a Keras `activation` attribute: a keras.activations function in KERAS_FUNCTIONS or a
    gelulab Keras layer; None for anything else."""
    keras = sys.modules["keras"]
    for name, key in KERAS_FUNCTIONS.items():
        if activation is getattr(keras.activations, name):
            return key
    if type(activation).__module__ == LAYERS_MODULE:
        return activation.key
    return None


def swap(model, choose, layer_for, impl) -> list[tuple]:
    """Give every layer of `model` whose activation is recognised, and for which choose(catalogue key it computes)
    gives a key (None: left alone), layer_for(that key, impl) as its activation, in place. Returns (path, was,
    was_class, now, now_class) per replaced activation, in the model's order; every target is checked (ValueError)
    before anything is replaced."""
    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    plan = []
    for layer in layers:
        if type(layer).__module__ == LAYERS_MODULE:
            continue  # gelulab's own layers are replaced where they are another layer's activation
        was = keras_key(getattr(layer, "activation", None))
        now = None if was is None else choose(was)
        if now is not None:
            get_activation(now)
            plan.append((layer, was, now))
    records = []
    for layer, was, now in plan:
        old = layer.activation
        new = layer_for(now, impl)
        tracker = getattr(layer, "_tracker", None)
        locked = getattr(tracker, "locked", False)
        if locked:  # a built layer refuses new sub-layers; the activation layer has no weights
            tracker.unlock()
        try:
            if tracker is not None and isinstance(old, sys.modules["keras"].layers.Layer):
                tracker.untrack(old)
            layer.activation = new
        finally:
            if locked:
                tracker.lock()
        old_name = (f"keras.activations.{old.__name__}" if callable(old) and hasattr(old, "__name__")
                    else _class_name(old))
        records.append((f"{layer.path or layer.name}.activation", was, old_name, now,
                        f"{LAYERS_MODULE}.{type(new).__name__}({_keras_args(new)})"))
    return records


def _keras_args(layer) -> str:
    config = layer.get_config()
    return ", ".join(f"{k}={config[k]!r}" for k in ("key", "approximate", "impl") if k in config)


def _class_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"

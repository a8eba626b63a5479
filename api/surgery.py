"""Swap the activations of a user's model for gelulab's: `gelulab.swap(model, to=..., impl=...)`.

torch: every submodule whose class is listed in TORCH_CLASSES (torch.nn.GELU / ReLU / SiLU, the activation
classes of Hugging Face transformers, gelulab's own layers) is replaced in its parent by the gelulab module
(gelulab.layers.torch) computing the target variant. Keras: every layer whose `activation` is one of
KERAS_FUNCTIONS (keras.activations.gelu / relu / silu, i.e. Dense(..., activation="gelu") and
keras.layers.Activation("gelu")) or a gelulab Keras layer gets gelulab's Keras layer as its activation
(gelulab.layers.keras, serializable: the model still saves and loads). Everything else is left as it is, e.g.
transformers' ClippedGELUActivation (a GELU clipped to [-10, 10]) and keras.layers.ReLU.

Which formula each transformers class computes (transformers/activations.py, 4.x and 5.x):
GELUActivation: torch.nn.functional.gelu, or 0.5 x (1 + erf(x / sqrt 2)) with use_gelu_python -> exact GELU;
GELUTanh (alias PytorchGELUTanh): F.gelu(approximate="tanh"), or its Python form -> tanh form;
NewGELUActivation, AccurateGELUActivation: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) -> tanh form;
FastGELUActivation: 0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2))) -> tanh form (sqrt(2/pi) to 10 digits);
QuickGELUActivation: x sigmoid(1.702 x) -> sigmoid form; SiLUActivation: F.silu -> SiLU.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gelulab.core.activations import DEFAULT_IMPL, activation_key, check_impl, get_activation

# torch module class ("module.qualname") -> catalogue key of what it computes (a function of the module where
# the class has a mode). Exact class match: a subclass may compute something else.
TORCH_CLASSES = {
    "torch.nn.modules.activation.GELU": lambda m: activation_key("gelu", m.approximate),
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.SiLU": "silu",
    "transformers.activations.GELUActivation": "gelu_none",
    "transformers.activations.GELUTanh": "gelu_tanh",
    "transformers.activations.PytorchGELUTanh": "gelu_tanh",  # a class of its own in transformers 4.x
    "transformers.activations.NewGELUActivation": "gelu_tanh",
    "transformers.activations.FastGELUActivation": "gelu_tanh",
    "transformers.activations.AccurateGELUActivation": "gelu_tanh",
    "transformers.activations.QuickGELUActivation": "gelu_sigmoid",
    "transformers.activations.SiLUActivation": "silu",
    "gelulab.layers.torch.Activation": lambda m: m.key,
    "gelulab.layers.torch.GELU": lambda m: m.key,
    "gelulab.layers.torch.ReLU": lambda m: m.key,
    "gelulab.layers.torch.SiLU": lambda m: m.key,
}
# keras.activations function name -> catalogue key (keras.activations.gelu defaults to approximate=False; swish is
# silu).
KERAS_FUNCTIONS = {"gelu": "gelu_none", "relu": "relu", "silu": "silu"}


@dataclass(frozen=True)
class Swapped:
    """One replaced activation.

    path: where it sits in the model (torch: the module's qualified name, "encoder.layer.0.intermediate.
    intermediate_act_fn"; Keras: the layer's path and ".activation", "dense_1.activation");
    was: the catalogue key of what it computed; was_class: its class or function ("torch.nn.modules.activation.
    GELU", "keras.activations.gelu"); now: the catalogue key of the replacement; now_class: the replacement's
    repr ("gelulab.layers.torch.GELU(approximate='tanh', impl='formula')").
    """

    path: str
    was: str
    was_class: str
    now: str
    now_class: str


def swap(model, to: str | Mapping[str, str] | None = None, impl: str = DEFAULT_IMPL,
         only: Iterable[str] | None = None) -> list[Swapped]:
    """Replace the activations of a torch nn.Module tree or a Keras model in place with gelulab's layers.

    model: a torch.nn.Module or a keras.layers.Layer / keras.Model (its framework already imported).
    to: the catalogue key every activation becomes ("relu", "gelu_tanh", ...); a mapping {key it was: key it
      becomes} (keys not in the mapping are left alone); or None: each keeps its variant and is computed by gelulab.
    impl: "kernel" (default: gelulab's float32 kernel), "formula" (gelulab's formula) or "builtin" (the framework's
    function, called by gelulab's layer).
    only: catalogue keys of the activations to replace (default: every recognised one).
    Returns one Swapped record per replaced activation, in the model's order (empty when none was recognised).
    Raises ValueError for an unknown key or impl (before anything is replaced), TypeError for another model type.
    """
    check_impl(impl)
    if isinstance(to, Mapping):
        for v in to.values():
            get_activation(v)
        target = dict(to).get
    elif to is None:
        def target(key):
            return key
    else:
        key = get_activation(to).key

        def target(_):
            return key
    wanted = None if only is None else set(only)

    def choose(was):
        if wanted is not None and was not in wanted:
            return None
        return target(was)

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        return _swap_torch(model, choose, impl)
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(model, keras.layers.Layer):
        return _swap_keras(model, choose, impl)
    raise TypeError(f"gelulab.swap: got a {type(model).__module__}.{type(model).__qualname__}; expected a "
                    "torch.nn.Module or a keras.layers.Layer / keras.Model")


def torch_key(module) -> str | None:
    """The catalogue key a torch module computes when its class is in TORCH_CLASSES, else None."""
    rule = TORCH_CLASSES.get(f"{type(module).__module__}.{type(module).__qualname__}")
    return rule(module) if callable(rule) else rule


def _swap_torch(model, choose, impl) -> list[Swapped]:
    from gelulab.layers.torch import layer_for

    plan = []  # (parent, attribute, path, old, was, now) in the model's order, all checked before replacing
    modules = dict(model.named_modules(remove_duplicate=False))  # a module shared by two parents: both places
    for path, child in modules.items():
        was = torch_key(child) if path else None
        now = None if was is None else choose(was)
        if now is not None:
            get_activation(now)
            parent_path, _, name = path.rpartition(".")
            plan.append((modules[parent_path], name, path, child, was, now))
    records = []
    for parent, name, path, old, was, now in plan:
        new = layer_for(now, impl)
        new.train(old.training)
        setattr(parent, name, new)
        records.append(Swapped(path, was, _class_name(old), now, f"gelulab.layers.torch.{new!r}"))
    return records


def keras_key(activation) -> str | None:
    """The catalogue key of a Keras `activation` attribute: a keras.activations function in KERAS_FUNCTIONS or a
    gelulab Keras layer; None for anything else."""
    keras = sys.modules["keras"]
    for name, key in KERAS_FUNCTIONS.items():
        if activation is getattr(keras.activations, name):
            return key
    if type(activation).__module__ == "gelulab.layers.keras":
        return activation.key
    return None


def _swap_keras(model, choose, impl) -> list[Swapped]:
    from gelulab.layers.keras import layer_for

    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    plan = []
    for layer in layers:
        if type(layer).__module__ == "gelulab.layers.keras":
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
        old_name = f"keras.activations.{old.__name__}" if callable(old) and hasattr(old, "__name__") else _class_name(old)
        records.append(Swapped(f"{layer.path or layer.name}.activation", was, old_name, now,
                               f"gelulab.layers.keras.{type(new).__name__}({_keras_args(new)})"))
    return records


def _keras_args(layer) -> str:
    config = layer.get_config()
    return ", ".join(f"{k}={config[k]!r}" for k in ("key", "approximate", "impl") if k in config)


def _class_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"

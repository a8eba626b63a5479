"""Swap the activations of a user's model for gelulab's: `gelulab.swap(model, to=..., impl=...)`.

The model's framework does the work: each backend whose record lists a `surgery` tool module (backends/<name>/
surgery.py, gelulab.backends.tools) recognises its own models and the activations in them, and replaces them with
the layers of gelulab.layers.<its record's `layers`>. torch (backends/torch/surgery.py): every submodule whose class
is listed in its TORCH_CLASSES (torch.nn.GELU / ReLU / SiLU, the activation classes of Hugging Face transformers,
gelulab's own layers) is replaced in its parent by the gelulab module (gelulab.layers.torch) computing the target
variant; a swapped transformers model warns once per `save_pretrained` call that the saved folder loads with the
model's own activations, naming the `gelulab.swap(...)` call to repeat. Keras (backends/tensorflow/surgery.py): every
layer whose `activation` is one of its KERAS_FUNCTIONS (keras.activations.gelu / relu / silu, i.e. Dense(...,
activation="gelu") and keras.layers.Activation("gelu")) or a gelulab Keras layer gets gelulab's Keras layer as its
activation (gelulab.layers.keras, serializable: the model still saves and loads). Everything else is left as it
is, e.g. transformers' ClippedGELUActivation (a GELU clipped to [-10, 10]) and keras.layers.ReLU.

Which formula each transformers class computes (transformers/activations.py, 4.x and 5.x):
GELUActivation: torch.nn.functional.gelu, or 0.5 x (1 + erf(x / sqrt 2)) with use_gelu_python -> exact GELU;
GELUTanh (alias PytorchGELUTanh): F.gelu(approximate="tanh"), or its Python form -> tanh form;
NewGELUActivation, AccurateGELUActivation: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) -> tanh form;
FastGELUActivation: 0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2))) -> tanh form (sqrt(2/pi) to 10 digits);
QuickGELUActivation: x sigmoid(1.702 x) -> sigmoid form; SiLUActivation: F.silu -> SiLU.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gelulab.backends import REGISTRY
from gelulab.backends.tools import tool, with_tool
from gelulab.core.activations import check_impl, get_activation


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


def swap(model, to: str | Mapping[str, str] | None = None, impl: str | None = None,
         only: Iterable[str] | None = None) -> list[Swapped]:
    """Replace the activations of a torch nn.Module tree or a Keras model in place with gelulab's layers. Name
    what changes: the variant (`to`), the implementation (`impl`), or both.

        gelulab.swap(model, to="gelu_tanh")   # every activation becomes tanh GELU, computed by the framework's op
        gelulab.swap(model, impl="kernel")    # each keeps its variant, computed by gelulab's float32 kernel

    model: a torch.nn.Module or a keras.layers.Layer / keras.Model (its framework already imported).
    to: the catalogue key every activation becomes ("relu", "gelu_tanh", ...); a mapping {key it was: key it
      becomes} (keys not in the mapping are left alone); or None: each keeps its variant (then `impl` is needed).
    impl: None (default: "builtin", the framework's own op called by gelulab's layer, no cost over the model's own
    module), "builtin", "kernel" (opt-in: gelulab's float32 kernel within 1 ULP, about 8-9x the framework's op per
    call on a CPU; for torch eager calls `gelulab warmup` builds its loop once per machine) or "formula" (gelulab's
    correctly rounded formula, computed in float64).
    only: catalogue keys of the activations to replace (default: every recognised one).
    Returns one Swapped record per replaced activation, in the model's order (empty when none was recognised).
    Raises ValueError for an unknown key or impl, and when neither `to` nor `impl` is given (nothing would change),
    before anything is replaced; TypeError for another model type.
    """
    if to is None and impl is None:
        raise ValueError("gelulab.swap(model): name what to change: to='gelu_tanh' (or another catalogue key, or a "
                         "mapping {was: becomes}) for another variant, or impl='kernel' (or 'formula', 'builtin') "
                         "to compute the same variants another way; with neither, nothing would change")
    if impl is not None:
        check_impl(impl)
    if isinstance(to, Mapping):
        for k, v in to.items():  # both sides: an unknown key raises before anything is replaced
            get_activation(k)
            get_activation(v)
        target = {get_activation(k).key: v for k, v in to.items()}.get
    elif to is None:
        def target(key):
            return key
    else:
        key = get_activation(to).key

        def target(_):
            return key
    if isinstance(only, str):  # one key, not its letters
        only = (only,)
    wanted = None if only is None else {get_activation(k).key for k in only}

    def choose(was):
        if wanted is not None and was not in wanted:
            return None
        return target(was)

    for name in with_tool("surgery"):
        surgery = tool(name, "surgery")
        if surgery.owns(model):
            return [Swapped(*r) for r in surgery.swap(model, choose, _layers(name).layer_for, impl)]
    types = " or ".join(tool(name, "surgery").MODEL_TYPE for name in with_tool("surgery"))
    raise TypeError(f"gelulab.swap: got a {type(model).__module__}.{type(model).__qualname__}; expected {types}")


def _layers(name: str):
    """gelulab.layers.<module> of backend `name` (its record's `layers`: torch, keras), imported now (it imports
    its framework, which the caller's model has already)."""
    return importlib.import_module(f"gelulab.layers.{REGISTRY[name].layers}")


def activation_module(obj) -> bool:
    """Whether obj is an activation module or layer of a framework with a surgery module (torch.nn.GELU,
    transformers' GELUActivation, gelulab's layers, a torch module with no submodules and no parameters, a Keras
    layer without weights that is not a Model) rather than a model; asks only frameworks already imported."""
    return any(tool(name, "surgery").activation_module(obj) for name in with_tool("surgery"))

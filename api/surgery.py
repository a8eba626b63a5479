"""Swap the activations of a user's model for gelulab's: `gelulab.swap(model, to=..., impl=...)`.

torch: every submodule whose class is listed in TORCH_CLASSES (torch.nn.GELU / ReLU / SiLU, the activation
classes of Hugging Face transformers, gelulab's own layers) is replaced in its parent by the gelulab module
(gelulab.layers.torch) computing the target variant. Keras: every layer whose `activation` is one of
KERAS_FUNCTIONS (keras.activations.gelu / relu / silu, i.e. Dense(..., activation="gelu") and
keras.layers.Activation("gelu")) or a gelulab Keras layer gets gelulab's Keras layer as its activation
(gelulab.layers.keras, serializable: the model still saves and loads). Everything else is left as it is, e.g.
transformers' ClippedGELUActivation (a GELU clipped to [-10, 10]) and keras.layers.ReLU.

Saving a swapped transformers model: `save_pretrained` stores the weights and config.json, and `from_pretrained`
rebuilds the activations the model's code and config name (its `hidden_act`), not gelulab's, which have no weights
and no config entry. So that this is not silent, a torch model swapped while transformers is loaded warns once per
`save_pretrained` call (a UserWarning of one line, naming the folder and the `gelulab.swap(...)` call to repeat after
`from_pretrained`); `state_dict()`, `torch.save` and `torch.export` are unaffected and say nothing.

Which formula each transformers class computes (transformers/activations.py, 4.x and 5.x):
GELUActivation: torch.nn.functional.gelu, or 0.5 x (1 + erf(x / sqrt 2)) with use_gelu_python -> exact GELU;
GELUTanh (alias PytorchGELUTanh): F.gelu(approximate="tanh"), or its Python form -> tanh form;
NewGELUActivation, AccurateGELUActivation: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) -> tanh form;
FastGELUActivation: 0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2))) -> tanh form (sqrt(2/pi) to 10 digits);
QuickGELUActivation: x sigmoid(1.702 x) -> sigmoid form; SiLUActivation: F.silu -> SiLU.
"""
from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gelulab.core.activations import ACTIVATIONS, DEFAULT_IMPL, activation_key, check_impl, get_activation


def _torch_rule(keys: tuple[str, ...]):
    """The TORCH_CLASSES value of a class the catalogue entries `keys` list: the key itself, or for a class listed by
    several entries of one op (torch.nn.GELU), a function of the module choosing by its `approximate`."""
    if len(keys) == 1:
        return keys[0]
    op = get_activation(keys[0]).op
    return lambda m: activation_key(op, m.approximate)


def _torch_classes() -> dict:
    listed: dict[str, tuple[str, ...]] = {}
    for key, a in ACTIVATIONS.items():
        for cls in a.torch_classes:
            listed[cls] = listed.get(cls, ()) + (key,)
    rules = {cls: _torch_rule(keys) for cls, keys in listed.items()}
    own = ("Activation", *dict.fromkeys(a.layer_name for a in ACTIVATIONS.values() if a.layer_name))
    rules.update({f"gelulab.layers.torch.{name}": (lambda m: m.key) for name in own})
    return rules


# torch module class ("module.qualname") -> catalogue key of what it computes (a function of the module where
# the class has a mode), from the catalogue units' `torch_classes`, and gelulab's own layers. Exact class match: a
# subclass may compute something else.
TORCH_CLASSES = _torch_classes()
# keras.activations function name -> catalogue key, from the catalogue units' `keras_names`.
KERAS_FUNCTIONS = {name: key for key, a in ACTIVATIONS.items() for name in a.keras_names}


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
        # what the model's code builds there, read by _warn_on_save_pretrained (kept through a second swap)
        new.gelulab_swapped_from = getattr(old, "gelulab_swapped_from", (was, _class_name(old)))
        setattr(parent, name, new)
        records.append(Swapped(path, was, _class_name(old), now, f"gelulab.layers.torch.{new!r}"))
    if records and "transformers.modeling_utils" in sys.modules:
        hooks = model._state_dict_pre_hooks.values()
        if _warn_on_save_pretrained not in hooks:
            model.register_state_dict_pre_hook(_warn_on_save_pretrained)
    return records


def _save_pretrained_call(frame) -> tuple[str, int] | None:
    """(save_directory, stack level of its caller for warnings.warn, counted from `frame` as level 1) of a
    transformers `PreTrainedModel.save_pretrained` call running further up the stack from `frame` (found by its
    code object), or None outside one."""
    modeling_utils = sys.modules.get("transformers.modeling_utils")
    code = getattr(getattr(getattr(modeling_utils, "PreTrainedModel", None), "save_pretrained", None), "__code__", None)
    level = 1
    while frame is not None and code is not None:
        if frame.f_code is code:
            return str(frame.f_locals.get("save_directory")), level + 1
        frame, level = frame.f_back, level + 1
    return None


def reapply_call(layers) -> str:
    """The `gelulab.swap(model, to={...}, ...)` call(s) that put gelulab's `layers` (torch modules placed by swap,
    each with its `gelulab_swapped_from` = (catalogue key it was, class it was)) back into a freshly loaded model:
    a mapping {key it was: key it became}, so that exactly those kinds of activation are replaced, and `impl` where
    it is not the default; one call per impl, joined by "; "."""
    calls = []
    for impl in dict.fromkeys(layer.impl for layer in layers):
        pairs = {m.gelulab_swapped_from[0]: m.key for m in layers if m.impl == impl}
        calls.append(f"gelulab.swap(model, to={pairs!r}" + (f", impl={impl!r})" if impl != DEFAULT_IMPL else ")"))
    return "; ".join(calls)


def _warn_on_save_pretrained(module, prefix, keep_vars) -> None:
    """state_dict pre-hook of a swapped torch model: inside transformers' save_pretrained, one UserWarning that
    the saved folder will load with the model's own activations, and the call that reapplies gelulab's; silent
    for every other state_dict() (torch.save, checkpoints, load_state_dict round trips keep gelulab's layers)."""
    call = _save_pretrained_call(sys._getframe())
    if call is None:
        return
    directory, level = call
    layers = [m for m in module.modules() if hasattr(m, "gelulab_swapped_from")]
    if not layers:
        return
    classes = sorted({m.gelulab_swapped_from[1].rsplit(".", 1)[-1] for m in layers})
    warnings.warn(f"gelulab.swap: the model saved in {directory} loads with its own {', '.join(classes)}, not "
                  f"gelulab's {len(layers)} swapped activation(s) (from_pretrained builds what config.json names); "
                  f"after from_pretrained, call {reapply_call(layers)}", UserWarning, stacklevel=level)


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

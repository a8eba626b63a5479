"""gelulab.swap on torch models (the `surgery` tool module, gelulab.backends.tools): every submodule whose class
is listed in TORCH_CLASSES (torch.nn.GELU / ReLU / SiLU, the activation classes of Hugging Face transformers,
gelulab's own layers) is replaced in its parent by the module the caller's `layer_for` builds (gelulab.layers.torch).
torch and transformers are asked for in sys.modules only, never imported here.

Saving a swapped transformers model: `save_pretrained` stores the weights and config.json, and `from_pretrained`
rebuilds the activations the model's code and config name (its `hidden_act`), not gelulab's, which have no weights
and no config entry. So that this is not silent, a torch model swapped while transformers is loaded warns once per
`save_pretrained` call (a UserWarning of one line, naming the folder and the `gelulab.swap(...)` call to repeat after
`from_pretrained`); `state_dict()`, `torch.save` and `torch.export` are unaffected and say nothing.
"""
from __future__ import annotations

import sys
import warnings

from gelulab.core.activations import ACTIVATIONS, DEFAULT_IMPL, activation_key, get_activation

MODEL_TYPE = "a torch.nn.Module"
LAYERS_MODULE = "gelulab.layers.torch"  # where gelulab's own torch layers are defined (recognised by class name)


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
    rules.update({f"{LAYERS_MODULE}.{name}": (lambda m: m.key) for name in own})
    return rules


# torch module class ("module.qualname") -> catalogue key of what it computes (a function of the module where
# the class has a mode), from the catalogue units' `torch_classes`, and gelulab's own layers. Exact class match: a
# subclass may compute something else.
TORCH_CLASSES = _torch_classes()


def owns(model) -> bool:
    """Whether `model` is a torch.nn.Module (asking sys.modules only)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def activation_module(obj) -> bool:
    """Whether obj is a torch module that is an activation, not a model: its class is one of TORCH_CLASSES
    (torch.nn.GELU, transformers' GELUActivation, gelulab's layers), or it has no submodules and no parameters
    (torch.nn.Tanh, a user's activation Module). False for anything else (asking sys.modules only)."""
    if not owns(obj):
        return False
    if _class_name(obj) in TORCH_CLASSES:
        return True
    return next(obj.children(), None) is None and next(obj.parameters(), None) is None


def torch_key(module) -> str | None:
    """The catalogue key a torch module computes when its class is in TORCH_CLASSES, else None."""
    rule = TORCH_CLASSES.get(_class_name(module))
    return rule(module) if callable(rule) else rule


def swap(model, choose, layer_for, impl) -> list[tuple]:
    """Replace, in place, every recognised activation module of `model` for which choose(catalogue key it computes)
    gives a key (None: left alone) with layer_for(that key, impl). Returns (path, was, was_class, now, now_class)
    per replaced module, in the model's order; every target is checked (ValueError) before anything is replaced."""
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
        records.append((path, was, _class_name(old), now, f"{LAYERS_MODULE}.{new!r}"))
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


def _class_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"

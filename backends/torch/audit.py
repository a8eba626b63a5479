"""The activation sites of torch models (api.audit's reader for torch): an nn.Module, a torch.export
ExportedProgram, a `.pt2` file written by torch.export.save, and a Hugging Face model folder (config.json and
model.safetensors) built with transformers.

Sites are found in the torch.export graph, so functional calls inside `forward` (`F.gelu(x)`,
`x * torch.sigmoid(1.702 * x)`, a tanh formula written by hand) are found as well as activation modules: a site is a
maximal connected region of elementwise `call_function` nodes (ELEMENTWISE: sigmoid, tanh, erf, mul, add, pow,
...) that all depend on one and the same floating tensor (scalars, 0-d constants and what is computed from
constants aside), whose output has that tensor's shape, and that holds a nonlinear op (NONLINEAR); an op computing a
whole activation (WHOLE: aten gelu, relu, silu, ...) is a site of its own. A residual add (two tensors) or a
division by sqrt(d) (no nonlinear op) is no site. Each site's nodes are cut out and
evaluated eagerly, node by node, on a float32 CPU tensor: the aten ops eager torch runs.

An nn.Module is exported with an example input: `options.example` (a numpy array or a tuple of them, passed
positionally), else one inferred from the model: a transformers model gets `input_ids` int64 (2, 8); a model whose
first submodule with parameters is nn.Embedding gets int64 ids (2, 8) below its num_embeddings; nn.Linear gets
float32 (2, in_features). Otherwise ValueError naming `example=`.

Files that need Python's pickle (which runs code that came with the file) are refused unless
`options.allow_pickle`: a `.bin` / `.pt` / `.pth` checkpoint, a Hugging Face folder with only pytorch_model.bin, and
a `.pt2` whose archive pickles a weight, a constant or its sample inputs (torch.export.save writes plain tensors
as raw bytes with a JSON index, but tensor subclasses, script objects and sample inputs that torch's weights-only
loader refuses through pickle, and torch.export.load then unpickles them with weights_only=False).

torch is imported inside the functions only (api.audit asks `reads_object` only when torch is in sys.modules).
"""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

from gelulab.core.contracts.regions import connected, needed_by

# aten overload packets computed elementwise (one output element from the same element of each input)
ELEMENTWISE = frozenset([
    "gelu", "relu", "relu6", "silu", "sigmoid", "tanh", "erf", "erfc", "erfinv", "mul", "add", "sub", "rsub", "div",
    "pow", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "reciprocal", "abs", "clamp",
    "clamp_min", "clamp_max", "clip", "maximum", "minimum", "fmax", "fmin", "hardtanh", "hardswish", "hardsigmoid",
    "leaky_relu", "elu", "selu", "celu", "softplus", "mish", "logsigmoid", "square", "where", "threshold", "sign",
    "tanh_", "sigmoid_", "mul_", "add_", "sub_", "div_", "gelu_", "relu_", "silu_", "hardtanh_", "leaky_relu_", "elu_",
    "_to_copy", "to", "type_as", "clone", "alias", "detach", "lift_fresh_copy", "special_erfcx", "special_ndtr",
    "special_expit", "masked_fill", "gt", "lt", "ge", "le", "eq", "ne", "isnan", "logical_not",
])
# ... of which these make a region an activation (a region of only linear ops, casts or comparisons is none)
NONLINEAR = frozenset([
    "gelu", "relu", "relu6", "silu", "sigmoid", "tanh", "erf", "erfc", "exp", "exp2", "expm1", "log", "log1p", "log2",
    "sqrt", "rsqrt", "reciprocal", "abs", "clamp", "clamp_min", "clamp_max", "clip", "maximum", "minimum", "fmax",
    "fmin", "hardtanh", "hardswish", "hardsigmoid", "leaky_relu", "elu", "selu", "celu", "softplus", "mish",
    "logsigmoid", "threshold", "tanh_", "sigmoid_", "gelu_", "relu_", "silu_", "hardtanh_", "leaky_relu_", "elu_",
    "special_erfcx", "special_ndtr", "special_expit", "pow", "square",
])
# ... of which these compute a whole activation: a site of their own, never merged with the ops around them (so
# relu(x * sigmoid(1.702 x)) is two sites, the sigmoid form and ReLU)
WHOLE = frozenset([
    "gelu", "relu", "relu6", "silu", "hardtanh", "hardswish", "hardsigmoid", "leaky_relu", "elu", "selu", "celu",
    "softplus", "mish", "logsigmoid", "threshold", "gelu_", "relu_", "silu_", "hardtanh_", "leaky_relu_", "elu_",
])
_PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
ACTIVATION_KEYS = ("hidden_act", "hidden_activation", "activation_function")


# --- the reader contract (api.audit.READERS) ---------------------------------------------------------------------


def reads_path(path: Path) -> bool:
    """A `.pt2` file, a pickled checkpoint (`.bin`, `.pt`, `.pth`, `.ckpt`, `.pkl`), or a folder with config.json
    and model.safetensors or pytorch_model.bin."""
    if path.is_dir():
        return (path / "config.json").is_file() and any(
            (path / n).is_file() for n in ("model.safetensors", "pytorch_model.bin"))
    return path.suffix.lower() in (".pt2", *_PICKLED_SUFFIXES)


def reads_object(obj) -> bool:
    """A torch.nn.Module or a torch.export.ExportedProgram (asking sys.modules only)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(obj, (torch.nn.Module, _exported_program_class()))


def read(source, options) -> tuple[list, str, str]:
    """(sites, format, runtime) of a model object or path (see the module docstring). Raises ValueError in one line
    for a file that does not load or needs pickle, a folder transformers cannot build, a model whose example input
    cannot be inferred."""
    import torch

    runtime = f"torch {torch.__version__}, eager"
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            model, fmt = _hf_folder(path, options)
            return _sites(_export_module(model, options), options), fmt, runtime
        if path.suffix.lower() == ".pt2":
            return _sites(_load_pt2(path, options), options), ".pt2 file (torch.export.save)", runtime
        obj = _load_pickled(path, options)
        return read(obj, options)[0], f"pickled checkpoint ({path.suffix})", runtime
    if isinstance(source, _exported_program_class()):
        return _sites(source, options), "torch.export ExportedProgram", runtime
    return (_sites(_export_module(source, options), options),
            f"torch nn.Module {type(source).__qualname__} (its torch.export graph)", runtime)


# --- loading ------------------------------------------------------------------------------------------------------


def _exported_program_class():
    import torch.export

    return torch.export.ExportedProgram


def _one_line(e: BaseException, limit: int = 160) -> str:
    text = " ".join(str(e).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _pt2_pickles(path: Path) -> str | None:
    """What in a .pt2 archive would be unpickled by torch.export.load (None: nothing)."""
    import io

    import torch

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            for name in names:
                if name.endswith(("model_weights_config.json", "model_constants_config.json")):
                    config = json.loads(z.read(name)).get("config", {})
                    for fqn, meta in config.items():
                        if isinstance(meta, dict) and meta.get("use_pickle"):
                            return f"the pickled tensor {fqn!r}"
                elif "/data/constants/" in name and Path(name).name.startswith(("custom_obj", "opaque_obj")):
                    return f"the pickled object {Path(name).name!r}"
            for name in names:
                if "/data/sample_inputs/" in name:
                    data = z.read(name)
                    if data:
                        try:
                            torch.load(io.BytesIO(data), weights_only=True)
                        except Exception:  # noqa: BLE001 - whatever the weights-only loader refuses needs pickle
                            return "its sample inputs (not loadable with weights_only=True)"
    except (zipfile.BadZipFile, OSError, ValueError, KeyError) as e:
        raise ValueError(f"{path}: not a .pt2 archive torch.export.load reads ({_one_line(e)})") from e
    return None


def _load_pt2(path: Path, options):
    import torch

    if not options.allow_pickle:
        what = _pt2_pickles(path)
        if what is not None:
            raise ValueError(f"{path}: loading it unpickles {what}, which runs code that came with the file; pass "
                             "--allow-pickle (allow_pickle=True) only for a file you trust")
    try:
        return torch.export.load(str(path))
    except Exception as e:
        raise ValueError(f"{path}: torch.export.load failed ({_one_line(e)})") from e


def _load_pickled(path: Path, options):
    import torch

    if not options.allow_pickle:
        raise ValueError(f"{path}: a {path.suffix} checkpoint is a Python pickle, and loading it runs code that came "
                         "with the file; pass --allow-pickle (allow_pickle=True) only for a file you trust, or give "
                         "a .pt2, .onnx or Hugging Face folder with model.safetensors")
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as e:
        raise ValueError(f"{path}: torch.load failed ({_one_line(e)})") from e
    if isinstance(obj, (torch.nn.Module, _exported_program_class())):
        return obj
    raise ValueError(f"{path}: holds a {type(obj).__name__}, not a model (a state dict has no graph); give the "
                     "model object, a .pt2 file or a Hugging Face folder")


def _variant_of_class(cls_name: str, module=None) -> str | None:
    """The catalogue key a torch/transformers activation class computes (core.activations' torch_classes; a class
    listed by several entries, torch.nn.GELU, by its `approximate`)."""
    from gelulab.core.activations import ACTIVATIONS

    keys = [k for k, a in ACTIVATIONS.items() if cls_name in a.torch_classes]
    if len(keys) == 1:
        return keys[0]
    if keys and module is not None:
        mode = getattr(module, "approximate", "none")
        return next((k for k in keys if ACTIVATIONS[k].mode == mode), None)
    return None


def describe_activation(name: str) -> str:
    """What transformers' ACT2FN makes of a config value: "GELUActivation, exact GELU" (the class and the catalogue
    variant, or "not in gelulab's catalogue"). Raises ValueError for a name ACT2FN does not know."""
    from transformers.activations import ACT2CLS, ACT2FN

    if name not in ACT2CLS:
        raise ValueError(f"transformers' ACT2FN has no activation {name!r}")
    entry = ACT2CLS[name]
    cls = entry[0] if isinstance(entry, tuple) else entry
    module = ACT2FN[name]
    variant = _variant_of_class(f"{cls.__module__}.{cls.__qualname__}", module)
    if variant is None:
        return f"{cls.__qualname__}, not in the catalogue"
    from gelulab.core.activations import ACTIVATIONS

    return f"{cls.__qualname__}, {ACTIVATIONS[variant].words}"


def _hf_folder(path: Path, options):
    """(model, format) of a Hugging Face folder: transformers' AutoConfig / AutoModel from local files only, no
    remote code, safetensors unless allow_pickle."""
    import os

    root = path.resolve()
    for f in path.iterdir():
        if (f.is_file() or f.is_symlink()) and not f.resolve().is_relative_to(root):
            raise ValueError(f"{path}: {f.name} resolves outside the folder (to {f.resolve()}); copy the files into "
                             "one folder")
    safetensors = (path / "model.safetensors").is_file()
    if not safetensors and not options.allow_pickle:
        raise ValueError(f"{path}: the weights are pytorch_model.bin, a Python pickle whose loading runs code that "
                         "came with the file; pass --allow-pickle (allow_pickle=True) only for a folder you trust, "
                         "or save it with safetensors")
    try:
        config_json = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: config.json does not load ({_one_line(e)})") from e
    if not isinstance(config_json, dict):  # a file's content, refused in one line as the CLI's ValueErrors are
        raise ValueError(f"{path}: config.json is not a JSON object")  # noqa: TRY004
    if config_json.get("auto_map"):
        raise ValueError(f"{path}: config.json names remote code (auto_map); gelulab builds only the models "
                         "transformers ships")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging

    logging.disable_progress_bar()
    said = []
    for key in ACTIVATION_KEYS:
        value = config_json.get(key)
        if isinstance(value, str):
            try:
                said.append(f"{key}={value!r} -> {describe_activation(value)}")
            except ValueError:
                said.append(f"{key}={value!r} -> unknown to transformers' ACT2FN")
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
        model = AutoModel.from_pretrained(str(path), config=config, local_files_only=True, trust_remote_code=False,
                                          use_safetensors=safetensors).eval()
    except Exception as e:
        raise ValueError(f"{path}: transformers could not build the model ({_one_line(e)})") from e
    return model, f"Hugging Face folder, {type(model).__name__} ({'; '.join(said) or 'no activation key'})"


# --- export -------------------------------------------------------------------------------------------------------


def _example(model, options):
    """(args, kwargs) for torch.export of `model` (see the module docstring). Raises ValueError naming example=."""
    import numpy as np
    import torch

    if options.example is not None:
        ex = options.example if isinstance(options.example, tuple) else (options.example,)
        return tuple(torch.as_tensor(np.asarray(a)) for a in ex), {}
    first = next((m for m in model.modules() if any(True for _ in m.parameters(recurse=False))), None)
    if _is_transformers(model):
        emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        n = getattr(emb, "num_embeddings", None) or getattr(getattr(model, "config", None), "vocab_size", 2)
        return (), {"input_ids": torch.arange(16, dtype=torch.int64).reshape(2, 8) % max(1, min(int(n), 100))}
    if isinstance(first, torch.nn.Embedding):
        return (torch.arange(16, dtype=torch.int64).reshape(2, 8) % first.num_embeddings,), {}
    if isinstance(first, torch.nn.Linear):
        g = torch.Generator().manual_seed(0)
        return (torch.randn(2, first.in_features, generator=g),), {}
    what = "no parameters" if first is None else f"a first layer {type(first).__name__}"
    raise ValueError(f"{type(model).__qualname__}: cannot infer an example input ({what}; an nn.Embedding or "
                     "nn.Linear first is inferred); pass example= (a numpy array) in Python, or --example FILE.npy "
                     "on the command line")


def _is_transformers(model) -> bool:
    tr = sys.modules.get("transformers")
    return tr is not None and isinstance(model, tr.PreTrainedModel)


def _export_module(model, options):
    import torch

    args, kwargs = _example(model, options)
    was_training = model.training
    model.eval()
    try:
        return torch.export.export(model, args, kwargs, strict=False)
    except Exception as e:
        raise ValueError(f"{type(model).__qualname__}: torch.export failed on the example input "
                         f"({_one_line(e)}); pass another example= / --example FILE.npy") from e
    finally:
        model.train(was_training)


# --- sites in an ExportedProgram ----------------------------------------------------------------------------------


def _packet(node) -> str | None:
    """The aten overload packet name of a call_function node ("gelu" for aten.gelu.default), else None."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    if packet is None or getattr(target, "namespace", None) != "aten":
        return None
    return packet.__name__


def _val(node):
    v = node.meta.get("val") if hasattr(node, "meta") else None
    return v if hasattr(v, "dtype") and hasattr(v, "shape") else None


def _constants(ep) -> dict:
    """{placeholder name: tensor} of the program's parameters, buffers and lifted constants."""
    sig = ep.graph_signature
    out = {}
    for name, fqn in {**sig.inputs_to_parameters, **sig.inputs_to_buffers}.items():
        out[name] = ep.state_dict[fqn] if fqn in ep.state_dict else ep.constants.get(fqn)
    for name, fqn in sig.inputs_to_lifted_tensor_constants.items():
        out[name] = ep.constants.get(fqn)
    return {k: v for k, v in out.items() if v is not None}


def _sites(ep, options) -> list:
    """The Site of every activation region of an ExportedProgram's graph, in the graph's order."""
    import torch

    from gelulab.core.contracts.audit import Site

    graph = ep.graph_module.graph
    nodes = list(graph.nodes)
    consts = _constants(ep)
    roots: dict = {}  # node -> frozenset of the tensor nodes it depends on (empty: a constant)
    elementwise, wholes = set(), []
    for n in nodes:
        if n.op == "placeholder":
            c = consts.get(n.name)
            roots[n] = frozenset() if c is not None and c.numel() == 1 else frozenset([n])
        elif n.op == "get_attr":
            roots[n] = frozenset()
        elif n.op == "call_function" and _packet(n) in WHOLE:
            roots[n] = frozenset([n])
            tensors = [a for a in n.all_input_nodes if roots.get(a) != frozenset()]
            if len(tensors) == 1 and _floating(tensors[0]) and _floating(n):
                wholes.append(n)
        elif n.op == "call_function" and _packet(n) in ELEMENTWISE:
            deps = frozenset().union(*(roots.get(a, frozenset([a])) for a in n.all_input_nodes)) \
                if n.all_input_nodes else frozenset()
            if len(deps) > 1:  # a residual add, a bias vector: no part of a region, the root of what follows
                roots[n] = frozenset([n])
                continue
            roots[n] = deps
            elementwise.add(n)
        else:
            roots[n] = frozenset([n])
    # gelulab's own layers with impl "kernel" or "formula" trace to hundreds of ops (bit casts, masks, shifts) that
    # no elementwise region holds whole: each call of such a layer is one site, its nodes cut out together
    order = {n: i for i, n in enumerate(nodes)}
    how = f"cut out of the torch.export graph, run eagerly by torch {torch.__version__} on float32 CPU tensors"
    found, grouped = [], set()
    for group in _gelulab_layer_calls(nodes):
        outside = {a for m in group for a in m.all_input_nodes if a not in group
                   and not (a.op == "placeholder" and a.name in consts) and a.op != "get_attr"}
        if len(outside) != 1:
            continue
        root = next(iter(outside))
        members = set(group)
        out = max((m for m in group if any(u not in members for u in m.users)), key=order.get, default=None)
        rv, ov = _val(root), _val(out) if out is not None else None
        if out is None or not (_floating(root) and _floating(out)) or (
                rv is not None and ov is not None and tuple(rv.shape) != tuple(ov.shape)):
            continue
        grouped |= members
        ordered = [m for m in group if order[m] <= order[out]]
        label = _gelulab_label(group)
        found.append((order[out], Site(f"{label[0]}: {ordered[0].name} ... {out.name}" if len(ordered) > 8
                                       else _path(ordered), f"{label[1]} ({len(ordered)} aten ops)"
                                       if len(ordered) > 8 else _op(ordered), how,
                                       probe=_probe(ordered, root, roots, consts, order))))
    wholes = [n for n in wholes if n not in grouped]
    elementwise -= grouped
    # candidate nodes: elementwise, depending on exactly one floating tensor
    cand = {n for n in elementwise if len(roots[n]) == 1}
    cand = {n for n in cand if _floating(next(iter(roots[n]))) and _floating(n)}
    # connected components among candidates with the same root
    seen = set()
    for n in wholes:
        root = next(a for a in n.all_input_nodes if roots.get(a) != frozenset())
        found.append((order[n], Site(_path([n]), _op([n]), how, probe=_probe([n], root, roots, consts, order))))
    for n in nodes:
        if n not in cand or n in seen:
            continue
        comp = set(connected(n, lambda m: (*m.all_input_nodes, *m.users),
                             lambda k, n=n: k in cand and roots[k] == roots[n]).values())
        seen |= comp
        region = _trim(comp, order)
        if region is None or not any(_packet(m) in NONLINEAR and _truly_nonlinear(m) for m in region):
            continue
        root = next(iter(roots[n]))
        out = max(region, key=order.get)
        rv, ov = _val(root), _val(out)
        if rv is not None and ov is not None and tuple(rv.shape) != tuple(ov.shape):
            continue
        ordered = sorted(region, key=order.get)
        found.append((order[out], Site(_path(ordered), _op(ordered), how,
                                       probe=_probe(ordered, root, roots, consts, order))))
    return [site for _, site in sorted(found, key=lambda t: t[0])]


def _gelulab_layer_calls(nodes) -> list:
    """The call_function nodes of each call of one of gelulab's torch layers (gelulab.layers.torch; read from the
    nodes' nn_module_stack, innermost module), one list per call in the graph's order."""
    groups, current, key = [], [], None
    for n in nodes:
        stack = n.meta.get("nn_module_stack") if n.op == "call_function" else None
        last = list(stack.items())[-1] if stack else None
        cls = str(last[1][1]) if last and len(last[1]) > 1 else ""
        k = last[0] if "gelulab.layers.torch." in cls else None
        if k is not None and k == key:
            current.append(n)
            continue
        if current:
            groups.append(current)
        current, key = ([n], k) if k is not None else ([], None)
    if current:
        groups.append(current)
    return groups


def _gelulab_label(group) -> tuple[str, str]:
    """(module path, class name) of a group of _gelulab_layer_calls."""
    path, cls = list(group[0].meta["nn_module_stack"].values())[-1][:2]
    path = str(path).replace("L['self'].", "").replace("L__self___", "")
    cls = str(cls).split("'")[1] if "'" in str(cls) else str(cls)
    return path, cls


def _floating(node) -> bool:
    v = _val(node)
    return v is None or v.dtype.is_floating_point


def _truly_nonlinear(node) -> bool:
    """pow with exponent 1 is not; every other NONLINEAR op is."""
    if _packet(node) == "pow":
        return not (len(node.args) > 1 and isinstance(node.args[1], (int, float)) and node.args[1] == 1)
    return True


def _trim(comp: set, order: dict):
    """The region's nodes that the output (its last node used outside the region) depends on."""
    outs = [m for m in comp if any(u not in comp for u in m.users) or not m.users]
    if not outs:
        return None
    out = max(outs, key=order.get)
    return set(needed_by(out, lambda m: m.all_input_nodes, lambda k: k in comp).values())


def _path(ordered) -> str:
    stack = ordered[-1].meta.get("nn_module_stack") or {}
    module = ""
    if stack:
        module = str(list(stack.values())[-1][0])
        module = module.replace("L['self'].", "").replace("L__self___", "")
    names = ", ".join(n.name for n in ordered)
    return f"{module}: {names}" if module else names


def _format_arg(v) -> str:
    return repr(v) if isinstance(v, (str, int, float, bool)) or v is None else type(v).__name__


def _op(ordered) -> str:
    if len(ordered) == 1:
        n = ordered[0]
        scalars = [_format_arg(a) for a in n.args if not hasattr(a, "op")]
        kw = [f"{k}={_format_arg(v)}" for k, v in n.kwargs.items()]
        inner = ", ".join(scalars + kw)
        return f"{n.target}({inner})" if inner else str(n.target)
    return ", ".join(f"aten.{_packet(n)}" for n in ordered)


def _probe(ordered, root, roots, consts, order):
    """float32 numpy array -> float32 numpy array: the region's nodes evaluated eagerly on a CPU tensor."""

    rv = _val(root)
    example_shape = tuple(int(d) for d in rv.shape) if rv is not None else None

    def run(x):
        import numpy as np
        import torch

        env = {root: torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))}

        def value(a):
            if hasattr(a, "op"):
                if a not in env:
                    env[a] = _constant(a)
                return env[a]
            if isinstance(a, (list, tuple)):
                return type(a)(value(v) for v in a)
            return a

        def _constant(a):
            if a.op == "placeholder":
                return consts[a.name].detach().to("cpu")
            if a.op == "get_attr":
                return getattr(a.graph.owning_module, a.target).detach().to("cpu")
            # a node computed from constants only
            return a.target(*value(a.args), **{k: value(v) for k, v in a.kwargs.items()})

        with torch.no_grad():
            for n in ordered:
                kwargs = {k: value(v) for k, v in n.kwargs.items()}
                if kwargs.get("device") is not None:
                    kwargs["device"] = torch.device("cpu")
                args = value(n.args)
                if _packet(n) in ("full", "empty", "zeros", "ones") and example_shape is not None and args and \
                        tuple(args[0]) == example_shape:  # made with the example's shape: the probe's now
                    args = (tuple(env[root].shape), *args[1:])
                env[n] = n.target(*args, **kwargs)
        y = env[ordered[-1]]
        return y.detach().to("cpu").float().numpy() if y.dtype != torch.float32 else y.detach().numpy()

    return run

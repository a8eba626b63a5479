"""The activation sites of an ONNX file as onnxruntime runs it (api.audit's reader "onnx").

The file is loaded with onnx (a file that does not load is refused in one line), then an onnxruntime
InferenceSession is created on the CPU with the graph optimization level of `options.ort_level` (ORT_ENABLE_ALL,
onnxruntime's default, unless told) and `optimized_model_filepath` in a temporary folder: the saved graph is the one
onnxruntime runs, with its fusions (the Erf pattern -> com.microsoft.Gelu, x*sigmoid(1.702x) -> QuickGelu, Gemm +
Relu -> FusedGemm(activation='Relu'), ...).

Sites are found in that graph as in the torch reader: a maximal connected region of elementwise nodes (ELEMENTWISE)
that depend on one and the same tensor (scalar initializers and Constants aside), holding a nonlinear op
(NONLINEAR); an op computing a whole activation (WHOLE: Gelu, Relu, ..., and onnxruntime's contrib Gelu, FastGelu,
BiasGelu, QuickGelu) is a site of its own, and so is a FusedGemm with an `activation` attribute. Each region is cut out
as a small ONNX model (one input, the region's nodes, their scalar initializers) and run by onnxruntime. The cut nodes
are already the optimized ones, so the cut model runs with its graph optimizations off (ORT_DISABLE_ALL): exactly the
nodes the whole model's session runs, with the same kernels. A non-scalar bias of a contrib op (BiasGelu's, FastGelu's)
is set to zeros of shape (1,) and the probe fed as shape (n, 1), column 0 taken ("bias set to 0" in `how`); a FusedGemm
gets weight 1 and bias 0.

onnx and onnxruntime are imported inside the functions only.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from gelulab.core.contracts.regions import connected, needed_by

ELEMENTWISE = frozenset([
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Erf", "Tanh", "Sigmoid",
    "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish",
    "Clip", "Max", "Min", "Cast", "Identity", "Where", "IsNaN", "IsInf", "Not", "Equal", "Greater", "Less",
    "GreaterOrEqual", "LessOrEqual", "ThresholdedRelu", "PRelu", "Sign",
])
NONLINEAR = frozenset([
    "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Erf", "Tanh", "Sigmoid", "Relu", "LeakyRelu", "Elu", "Selu", "Celu",
    "Gelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish", "Clip", "Max", "Min", "Pow", "ThresholdedRelu",
    "PRelu",
])
# onnxruntime's contrib activation ops (domain com.microsoft): {op: positions of a bias input}
CONTRIB = {"Gelu": (), "FastGelu": (1,), "BiasGelu": (1,), "QuickGelu": ()}
FUSED_WITH_ACTIVATION = ("FusedGemm",)
LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}
# the names of onnxruntime's graph optimization levels, least to most (api.audit.Options.ort_level, identify's
# --ort-level)
ORT_LEVELS = tuple(LEVELS)
_MS = "com.microsoft"
# ops computing a whole activation: a site of their own, never merged with the ops around them
WHOLE = frozenset([
    "Gelu", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish",
    "ThresholdedRelu",
])


def reads_path(path: Path) -> bool:
    """An `.onnx` file."""
    return path.is_file() and path.suffix.lower() == ".onnx"


def reads_object(obj) -> bool:
    """An onnx.ModelProto (asking sys.modules only)."""
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(obj, onnx.ModelProto)


def _one_line(e: BaseException, limit: int = 160) -> str:
    text = " ".join(str(e).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _level(ort, name: str):
    return getattr(ort.GraphOptimizationLevel, LEVELS[name])


def _session(ort, model_or_path, level, optimized: str | None = None):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3  # the warning about serializing an ORT_ENABLE_ALL graph is expected here
    so.intra_op_num_threads = 1
    if optimized is not None:
        so.optimized_model_filepath = optimized
    return ort.InferenceSession(model_or_path, so, providers=["CPUExecutionProvider"])


def read(source, options) -> tuple[list, str, str]:
    """(sites, format, runtime) of an .onnx path or an onnx.ModelProto. Raises ValueError in one line for a file
    that onnx or onnxruntime cannot load."""
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as e:
        raise ValueError(f"reading ONNX files needs onnx and onnxruntime: pip install -e '.[export]' ({e})") from e
    level_name = LEVELS[options.ort_level]
    name = str(source) if isinstance(source, (str, Path)) else "the ONNX model"
    if isinstance(source, (str, Path)):
        try:
            model = onnx.load(str(source), load_external_data=False)
        except Exception as e:
            raise ValueError(f"{source}: not an ONNX model onnx {onnx.__version__} can load ({_one_line(e)})") from e
    else:
        model = source
    with tempfile.TemporaryDirectory(prefix="gelulab-audit-") as tmp:
        optimized = str(Path(tmp) / "optimized.onnx")
        try:
            data = str(source) if isinstance(source, (str, Path)) else model.SerializeToString()
            _session(ort, data, _level(ort, options.ort_level), optimized)
            opt = onnx.load(optimized, load_external_data=False)  # the weights are not needed
        except Exception as e:
            raise ValueError(f"{name}: onnxruntime {ort.__version__} cannot run it ({_one_line(e)})") from e
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    producer = f"{model.producer_name} {model.producer_version}".strip() or "unknown producer"
    fmt = f"ONNX (opset {opsets.get('ai.onnx', '?')}, from {producer})"
    runtime = f"onnxruntime {ort.__version__}, {level_name}"
    return _sites(opt, ort, level_name), fmt, runtime


# --- regions ------------------------------------------------------------------------------------------------------


def _kind(node) -> str:
    """"Gelu" for ai.onnx ops, "com.microsoft.Gelu" for contrib ones, "other" for the rest."""
    if node.domain in ("", "ai.onnx") and node.op_type in ELEMENTWISE:
        return node.op_type
    if node.domain == _MS and node.op_type in CONTRIB:
        return f"{_MS}.{node.op_type}"
    return "other"


def _nonlinear(node, consts) -> bool:
    if node.domain == _MS:
        return node.op_type in CONTRIB
    if node.op_type == "Pow":
        e = consts.get(node.input[1]) if len(node.input) > 1 else None
        return not (e is not None and e.size == 1 and float(e.reshape(())) == 1.0)
    return node.op_type in NONLINEAR


def _constants(graph) -> dict:
    """{tensor name: numpy array} of the initializers and Constant nodes."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    out = {}
    for t in graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:  # not loaded: its shape and dtype stand for it
            out[t.name] = np.broadcast_to(np.zeros((), helper.tensor_dtype_to_np_dtype(t.data_type)), tuple(t.dims))
        else:
            out[t.name] = numpy_helper.to_array(t)
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.attribute:
            a = n.attribute[0]
            v = helper.get_attribute_value(a)
            try:
                out[n.output[0]] = numpy_helper.to_array(v) if a.name == "value" else np.asarray(v)
            except Exception:  # noqa: BLE001, S112 - a sparse or odd constant is not a scalar we need
                continue
    return out


def _float_names(model) -> dict:
    """{tensor name: True when floating, False otherwise} where ONNX's shape inference or the graph says."""
    import onnx

    floating = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - contrib ops may stop it; what the graph says is enough
        inferred = model.graph
    out = {}
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type in floating
    for t in inferred.initializer:
        out[t.name] = t.data_type in floating
    return out


def _sites(model, ort, level_name) -> list:
    from gelulab.core.contracts.audit import Site

    graph = model.graph
    consts = _constants(graph)
    floats = _float_names(model)
    producer = {}
    nodes = [n for n in graph.node if not (n.op_type == "Constant" and n.domain in ("", "ai.onnx"))]
    for n in nodes:
        for o in n.output:
            producer[o] = n
    roots: dict = {}  # tensor name -> frozenset of tensor names it depends on (empty: a constant)
    biases: dict = {}  # id(node) -> positions of inputs set to 0
    elementwise, wholes = [], []
    for i, n in enumerate(nodes):
        kind = _kind(n)
        if kind == "other":
            for o in n.output:
                roots[o] = frozenset([o])
            continue
        deps, zeroed = set(), []
        for pos, name in enumerate(n.input):
            if not name:
                continue
            if name in consts:
                if consts[name].size == 1:
                    continue
                if n.domain == _MS and pos in CONTRIB[n.op_type]:
                    zeroed.append(pos)
                    continue
                deps.add(name)
            else:
                deps |= roots.get(name, frozenset([name]))
        if (n.domain == _MS or n.op_type in WHOLE) and len(deps) == 1:  # a whole activation: a site of its own
            roots[n.output[0]] = frozenset([n.output[0]])
            biases[id(n)] = tuple(zeroed)
            wholes.append((n, next(iter(deps))))
            continue
        if len(deps) > 1:  # a residual add, a bias vector: not part of a region, but the root of what follows
            roots[n.output[0]] = frozenset([n.output[0]])
            continue
        roots[n.output[0]] = frozenset(deps)
        biases[id(n)] = tuple(zeroed)
        elementwise.append(n)
    order = {id(n): i for i, n in enumerate(nodes)}
    users: dict = {}
    for n in nodes:
        for name in n.input:
            users.setdefault(name, []).append(n)
    graph_outputs = {o.name for o in graph.output}
    cand = {id(n): n for n in elementwise if len(roots[n.output[0]]) == 1 and n.output[0] not in roots[n.output[0]]}
    cand = {k: n for k, n in cand.items() if floats.get(next(iter(roots[n.output[0]])), True)
            and floats.get(n.output[0], True)}
    seen, found = set(), []
    for n, root in wholes:
        if floats.get(root, True) and floats.get(n.output[0], True):
            found.append((order[id(n)], ("region", [n], root)))
    for n in nodes:
        if id(n) in cand and id(n) not in seen:
            root = roots[n.output[0]]
            comp = connected(n, lambda m: [producer[x] for x in m.input if x in producer] + users.get(m.output[0], []),
                             lambda k, root=root: id(k) in cand and roots[k.output[0]] == root)
            seen |= set(comp)
            region = _trim(comp, users, graph_outputs, producer, order)
            if region and any(_nonlinear(m, consts) for m in region):
                found.append((order[id(region[-1])], ("region", region, next(iter(root)))))
        elif n.domain == _MS and n.op_type in FUSED_WITH_ACTIVATION and _attr(n, "activation"):
            found.append((order[id(n)], ("fused", [n], None)))
    found.sort(key=lambda t: t[0])
    sites = []
    for _, (what, region, root) in found:
        if what == "fused":
            cut, note = _cut_fused(model, region[0]), "FusedGemm with weight 1 and bias 0: its activation alone"
        else:
            zeroed = [p for m in region for p in biases.get(id(m), ())]
            cut = _cut(model, region, root, consts, biases)
            note = "bias set to 0" if zeroed else ""
        how = (f"cut out of the graph onnxruntime optimized with {level_name}, run by onnxruntime "
               f"{ort.__version__} (CPU)" + (f"; {note}" if note else ""))
        sites.append(Site(", ".join(m.name or m.output[0] for m in region), _op(region), how,
                          probe=_probe(ort, cut, column=bool(note))))
    return sites


def _attr(node, name):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return None


def _trim(comp: dict, users: dict, graph_outputs: set, producer: dict, order: dict) -> list:
    """The region's nodes its output (the last node whose output is used outside the region) depends on, in order."""
    outs = [m for m in comp.values() if m.output[0] in graph_outputs
            or any(id(u) not in comp for u in users.get(m.output[0], [])) or not users.get(m.output[0])]
    if not outs:
        return []
    out = max(outs, key=lambda m: order[id(m)])
    keep = needed_by(out, lambda m: [producer[x] for x in m.input if x in producer], lambda k: id(k) in comp)
    return sorted(keep.values(), key=lambda m: order[id(m)])


def _op(region) -> str:
    def one(n):
        name = f"{_MS}.{n.op_type}" if n.domain == _MS else n.op_type
        names = sorted((a.name for a in n.attribute), key=lambda k: (k != "activation", k))
        attrs = [f"{k}={_attr(n, k)!r}" for k in names]
        return f"{name}({', '.join(attrs)})" if attrs else name

    if len(region) == 1:
        return one(region[0])
    return ", ".join(f"{_MS}.{n.op_type}" if n.domain == _MS else n.op_type for n in region)


def _model(source_model, nodes, inputs, outputs, initializers):
    from onnx import helper

    g = helper.make_graph(nodes, "gelulab_site", inputs, outputs, initializers)
    m = helper.make_model(g, opset_imports=list(source_model.opset_import))
    m.ir_version = source_model.ir_version
    return m


def _cut(model, region, root, consts, biases):
    """A model of one float32 input "x" (shape (n,), or (n, 1) when a bias was set to 0) computing the region."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    zero_any = any(biases.get(id(m)) for m in region)
    names = {m.output[0] for m in region}
    inits, nodes = {}, []
    for m in region:
        new = helper.make_node(m.op_type, [], list(m.output), name=m.name, domain=m.domain)
        new.attribute.extend(m.attribute)
        for pos, name in enumerate(m.input):
            if not name:
                new.input.append("")
            elif name == root:
                new.input.append("x")
            elif name in names:
                new.input.append(name)
            elif pos in biases.get(id(m), ()):
                key = f"zero_bias_{len(inits)}"
                inits[key] = numpy_helper.from_array(np.zeros((1,), consts[name].dtype), key)
                new.input.append(key)
            else:
                if name not in inits:
                    inits[name] = numpy_helper.from_array(np.asarray(consts[name]), name)
                new.input.append(name)
        nodes.append(new)
    shape = ["n", 1] if zero_any else ["n"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_empty_tensor_value_info(region[-1].output[0])
    return _model(model, nodes, [x], [y], list(inits.values()))


def _cut_fused(model, node):
    """A FusedGemm of x (n, 1), weight [[1]] and bias [0]: its activation alone."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    new = helper.make_node(node.op_type, ["x", "w_one", "b_zero"], ["y"], name=node.name, domain=node.domain)
    keep = [a for a in node.attribute if a.name not in ("alpha", "beta", "transA", "transB")]
    new.attribute.extend(keep)
    inits = [numpy_helper.from_array(np.ones((1, 1), np.float32), "w_one"),
             numpy_helper.from_array(np.zeros((1,), np.float32), "b_zero")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1])
    return _model(model, [new], [x], [helper.make_empty_tensor_value_info("y")], inits)


def _probe(ort, cut, column: bool):
    """float32 numpy array -> float32 numpy array of its shape: the cut model run by onnxruntime, its graph
    optimizations off (its nodes are already onnxruntime's optimized ones)."""
    state = {}

    def run(x):
        import numpy as np

        if "session" not in state:
            state["session"] = _session(ort, cut.SerializeToString(), _level(ort, "disable"))
        sess = state["session"]
        flat = np.ascontiguousarray(x, dtype=np.float32).ravel()
        feed = flat.reshape(-1, 1) if column else flat
        y = np.asarray(sess.run(None, {"x": feed})[0])
        y = y[:, 0] if column else y
        return y.astype(np.float32).reshape(np.shape(x))

    return run

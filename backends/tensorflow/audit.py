"""The activation sites of Keras models, `.keras` files, SavedModel folders and `.tflite` files (api.audit's reader
"tensorflow"; see api/audit.py for the reader contract). TensorFlow and Keras are imported inside the functions.

* Keras model objects (any keras.layers.Layer, a Model included) and `.keras` files (keras.models.load_model with
  safe_mode=True; a file that holds a lambda or other Python code is refused): every layer whose `activation` is
  not linear (keras.activations functions, functools.partial of one, a gelulab Keras layer, a user's function),
  keras.layers.Activation, keras.layers.ReLU / ELU / LeakyReLU and gelulab's Keras layers. Probe: the activation
  itself applied by Keras to a tensor of its backend (tf.Tensor on TensorFlow), i.e. what the model runs.
* SavedModel folders (saved_model.pb): the serving signature's function, frozen (variables folded to constants,
  called functions inlined); the sites are the elementwise regions of its GraphDef (`elementwise_regions`), each cut
  out into a GraphDef of its own (its nodes, its scalar constants, a Placeholder where its input was) and run by
  TensorFlow as a graph function (tf.compat.v1.wrap_function + tf.graph_util.import_graph_def with an input_map).
* `.tflite` files: the elementwise regions of the main subgraph (GELU, LOGISTIC, TANH, RELU..., with the MUL / ADD /
  POW around them, scalar constants aside), each cut out into a one-subgraph TFLite model holding the file's own
  operators and options (copied from the file's flatbuffer, not rebuilt) and run by tf.lite.Interpreter with its
  default delegates (XNNPACK on CPU), as the file is served; an activation fused into another op
  (FULLY_CONNECTED / CONV_2D / ADD / SUB / MUL with fused_activation_function RELU, RELU6, TANH...) cannot be cut
  out: its (pre, post) pairs come from forward passes of the whole model on N(0, 1) inputs (and 4 N(0, 1), so that
  the tail below -3 is reached), the pre-activation recomputed in float32 from the op's inputs.
  The delegate matters: on TensorFlow 2.21, XNNPACK's GELU(approximate=False) loses the negative tail below
  x ~ -4.5 (1 + erf cancels), TFLite's builtin kernel (BUILTIN_WITHOUT_DEFAULT_DELEGATES) keeps it.

The regions are core.contracts.regions' (framework-free: nodes in, regions out), as every reader's.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gelulab.core.contracts.audit import Site
from gelulab.core.contracts.regions import Node, elementwise_regions, scope

# --- dispatch ---------------------------------------------------------------------------------------------------


def reads_path(path) -> bool:
    path = Path(path)
    return (path.is_file() and path.suffix in (".keras", ".tflite")) or (path.is_dir() and (
        (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file()))


def reads_object(obj) -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(obj, keras.layers.Layer)


def read(source, options) -> tuple[list[Site], str, str]:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.suffix == ".tflite":
            return read_tflite(path)
        if path.suffix == ".keras":
            return read_keras(load_keras(path), "Keras (.keras file)")
        return read_saved_model(path)
    return read_keras(source, "Keras model")


def tf_runtime() -> str:
    import tensorflow as tf

    keras = sys.modules.get("keras")
    return f"TensorFlow {tf.__version__}" + (f", Keras {keras.__version__}" if keras is not None else "")


def _quiet_tf() -> None:
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# --- Keras --------------------------------------------------------------------------------------------------------

# keras.activations functions that are not elementwise of one tensor (or change its shape)
_NOT_ELEMENTWISE = ("softmax", "log_softmax", "glu", "sparsemax", "linear")


def load_keras(path: Path):
    """keras.models.load_model(path, safe_mode=True) (api.audit registers gelulab's Keras layers first). Raises
    ValueError in one line for a file that needs unsafe deserialization (a lambda, a Lambda layer) or does not load."""
    _quiet_tf()
    import keras

    try:
        return keras.models.load_model(path, safe_mode=True, compile=False)
    except Exception as e:
        text = " ".join(str(e).split())
        if "safe_mode" in text or "unsafe" in text or "lambda" in text.lower():
            raise ValueError(f"{path}: the file holds Python code (a lambda or Lambda layer) that Keras runs only "
                             "with safe_mode=False; gelulab does not load it: rebuild the model in Python and pass "
                             "the model object") from e
        import zipfile

        if path.is_file() and path.suffix.lower() == ".keras" and not zipfile.is_zipfile(path):
            raise ValueError(f"{path}: not a .keras file (a .keras file is a zip archive written by model.save)") \
                from e
        raise ValueError(f"{path}: keras.models.load_model failed: {type(e).__name__}: {text[:200]}") from e


def read_keras(model, fmt: str) -> tuple[list[Site], str, str]:
    """The sites of a Keras model or layer (see the module docstring)."""
    import keras

    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    paths = _layer_paths(model)
    as_activation = {id(getattr(layer, "activation", None)) for layer in layers}
    sites = []
    how = f"the activation applied by Keras ({keras.backend.backend()} backend) to a tensor"
    for layer in layers:
        own = type(layer).__module__ == "gelulab.layers.keras"
        if own or isinstance(layer, (keras.layers.ReLU, keras.layers.ELU, keras.layers.LeakyReLU)):
            if own and id(layer) in as_activation:
                continue  # reported as its parent layer's activation
            sites.append(Site(paths.get(id(layer), layer.name), _layer_op(layer), f"the layer called by Keras "
                              f"({keras.backend.backend()} backend) on a tensor", _keras_probe(layer)))
            continue
        fn = getattr(layer, "activation", None)
        if fn is None or not callable(fn) or _activation_name(fn) in _NOT_ELEMENTWISE:
            continue
        path = paths.get(id(layer), layer.name) + ("" if isinstance(layer, keras.layers.Activation) else ".activation")
        sites.append(Site(path, _function_op(fn), how, _keras_probe(fn)))
    return sites, fmt, tf_runtime() if keras.backend.backend() == "tensorflow" else (
        f"Keras {keras.__version__} ({keras.backend.backend()} backend)")


def _layer_paths(model) -> dict:
    """{id(layer): "model/block/dense"}: the layer names from the model down (Keras' own `path` is missing for a
    layer without weights and differs between a model built in Python and one loaded from a file)."""
    paths = {id(model): model.name}
    stack = [model]
    while stack:
        layer = stack.pop()
        for child in layer._flatten_layers(include_self=False, recursive=False):
            if id(child) not in paths:
                paths[id(child)] = f"{paths[id(layer)]}/{child.name}"
                stack.append(child)
    return paths


def _keras_probe(fn) -> Callable:
    def probe(x: np.ndarray) -> np.ndarray:
        import keras

        y = fn(keras.ops.convert_to_tensor(np.asarray(x, np.float32)))
        return np.asarray(y.numpy() if hasattr(y, "numpy") else keras.ops.convert_to_numpy(y), np.float32)

    return probe


def _activation_name(fn) -> str | None:
    """The keras.activations name of fn (or of the function a functools.partial wraps), else None."""
    keras = sys.modules["keras"]
    target = fn.func if isinstance(fn, functools.partial) else fn
    for name in dir(keras.activations):
        if not name.startswith("_") and getattr(keras.activations, name) is target:
            return name
    return None


def _function_op(fn) -> str:
    """What a Keras `activation` is, in Keras' words: "keras.activations.gelu(approximate=False)",
    "functools.partial(keras.activations.gelu, approximate=True)", a gelulab layer with its config, or the
    function's qualified name."""
    import inspect

    name = _activation_name(fn)
    if type(fn).__module__ == "gelulab.layers.keras":
        return _layer_op(fn)
    if name is not None and not isinstance(fn, functools.partial):
        params = inspect.signature(fn).parameters
        defaults = ", ".join(f"{k}={p.default!r}" for k, p in list(params.items())[1:]
                             if p.default is not inspect.Parameter.empty)
        return f"keras.activations.{name}({defaults})"
    if name is not None:
        args = ", ".join([*map(repr, fn.args), *(f"{k}={v!r}" for k, v in fn.keywords.items())])
        return f"functools.partial(keras.activations.{name}{', ' + args if args else ''})"
    target = fn.func if isinstance(fn, functools.partial) else fn
    qual = getattr(target, "__qualname__", type(target).__qualname__)
    return f"{getattr(target, '__module__', '?')}.{qual}"


def _layer_op(layer) -> str:
    config = layer.get_config()
    keep = ("key", "approximate", "impl", "negative_slope", "max_value", "threshold", "alpha")
    args = ", ".join(f"{k}={config[k]!r}" for k in keep if k in config)
    return f"{type(layer).__module__.replace('keras.src.layers.activations', 'keras.layers').split('.relu')[0]}." \
           f"{type(layer).__qualname__}({args})" if type(layer).__module__.startswith("gelulab") else \
        f"keras.layers.{type(layer).__qualname__}({args})"


# --- SavedModel ---------------------------------------------------------------------------------------------------

_TF_NONLINEAR = {"Erf", "Erfc", "Tanh", "Sigmoid", "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Softplus",
                 "Softsign", "Exp", "Maximum", "Minimum", "Gelu", "_MklGelu"}
_TF_ELEMENTWISE = {"Mul", "AddV2", "Add", "Sub", "RealDiv", "Div", "DivNoNan", "Pow", "Square", "Sqrt", "Rsqrt",
                   "Neg", "Cast", "Identity", "Reciprocal", "Abs", "Log1p", "Log", "Expm1"}


def read_saved_model(path: Path) -> tuple[list[Site], str, str]:
    """The sites of a SavedModel folder's serving signature (see the module docstring)."""
    _quiet_tf()
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as e:
        raise ValueError(f"{path}: tf.saved_model.load failed: {type(e).__name__}: "
                         f"{' '.join(str(e).split())[:200]}") from e
    signatures = dict(loaded.signatures)
    if not signatures:
        raise ValueError(f"{path}: the SavedModel has no signature to serve; export it with signatures "
                         "(keras: model.export(path))")
    key = "serving_default" if "serving_default" in signatures else min(signatures)
    frozen = convert_variables_to_constants_v2(signatures[key])
    graph_def = frozen.graph.as_graph_def()
    by_name = {n.name: n for n in graph_def.node}
    nodes, consts = [], {}
    for n in graph_def.node:
        if n.op == "Const":
            value = tf.make_ndarray(n.attr["value"].tensor)
            if value.size and np.issubdtype(value.dtype, np.number) and np.all(value == value.flat[0]):
                consts[f"{n.name}:0"] = value.flat[0]
            continue
        inputs = [_tensor_name(i) for i in n.input if not i.startswith("^")]
        kind = "nonlinear" if n.op in _TF_NONLINEAR else "elementwise" if n.op in _TF_ELEMENTWISE else None
        if n.op == "Identity" and inputs and inputs[0] in consts:
            consts[f"{n.name}:0"] = consts[inputs[0]]
            continue
        nodes.append(Node(n.name, n.op, inputs, [f"{n.name}:0"], kind, scope=n.name.rpartition("/")[0]))
    outputs = [t.name for t in frozen.outputs]
    regions = elementwise_regions(nodes, consts.__contains__, outputs)
    how = (f"cut out of the frozen '{key}' graph (its nodes and scalar constants, imported with an input_map), "
           "run by TensorFlow as a graph function")
    sites = []
    for r in regions:
        members = [nodes[i] for i in r.nodes]
        probe = _graph_probe(members, r, consts, by_name)
        sites.append(Site(scope([m.name for m in members]), ", ".join(m.op for m in members), how, probe))
    return sites, "SavedModel", tf_runtime()


def _tensor_name(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def _graph_probe(members, region, consts, by_name) -> Callable:
    """A function running the region's nodes (copied from the frozen GraphDef, their uniform constants as scalar
    Const nodes) on a float32 array, as a TensorFlow graph function."""
    import tensorflow as tf

    gd = tf.compat.v1.GraphDef()
    added = sorted({_tensor_name(i) for m in members for i in by_name[m.name].input
                    if not i.startswith("^") and _tensor_name(i) in consts})
    consts_nodes, ops = [], []
    for m in members:
        n = tf.compat.v1.NodeDef()
        n.CopyFrom(by_name[m.name])
        for attr in ("_output_shapes", "_class"):
            if attr in n.attr:
                del n.attr[attr]
        del n.input[:]
        n.input.extend(i for i in by_name[m.name].input if not i.startswith("^"))
        ops.append(n)
    for t in added:
        c = tf.compat.v1.NodeDef()
        c.name, c.op = t.split(":")[0], "Const"
        value = np.asarray(consts[t])
        c.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
        c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
        consts_nodes.append(c)
    gd.node.extend(consts_nodes + ops)
    source = by_name[region.input.split(":")[0]]
    placeholder_dtype = _output_dtype(source, region.input)
    # the region's input tensor becomes a Placeholder of the same name (index 0 only: rename otherwise)
    in_name = region.input
    if not in_name.endswith(":0"):
        alias = "gelulab_region_input"
        for n in gd.node:
            n.input[:] = [alias if _tensor_name(i) == in_name else i for i in n.input]
        in_name = f"{alias}:0"
    ph = gd.node.add()
    ph.name, ph.op = in_name.split(":")[0], "Placeholder"
    ph.attr["dtype"].type = placeholder_dtype
    fn = {}

    def probe(x: np.ndarray) -> np.ndarray:
        if "f" not in fn:
            def imported(t):
                return tf.graph_util.import_graph_def(gd, input_map={in_name: t}, return_elements=[region.output],
                                                      name="")[0]

            fn["f"] = tf.compat.v1.wrap_function(imported, [tf.TensorSpec(None, tf.as_dtype(placeholder_dtype))])
        dtype = tf.as_dtype(placeholder_dtype)
        y = fn["f"](tf.constant(np.asarray(x, dtype.as_numpy_dtype)))
        return np.asarray(y.numpy(), np.float32)

    return probe


def _output_dtype(node, tensor: str):
    """The DataType enum of a node's output tensor (attr T, dtype, DstT or out_type; float32 by default)."""
    for attr in ("T", "dtype", "DstT", "out_type", "Tout"):
        if attr in node.attr and node.attr[attr].type:
            return node.attr[attr].type
    return 1  # DT_FLOAT


# --- TFLite -------------------------------------------------------------------------------------------------------

_TFL_NONLINEAR = {"GELU", "LOGISTIC", "TANH", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU",
                  "HARD_SWISH", "ELU", "EXP", "MAXIMUM", "MINIMUM", "FlexErf", "FlexErfc", "FlexTanh",
                  "FlexSigmoid"}
_TFL_ELEMENTWISE = {"MUL", "ADD", "SUB", "DIV", "POW", "SQUARE", "SQRT", "RSQRT", "NEG", "ABS", "CAST",
                    "FlexMul", "FlexAddV2", "FlexRealDiv", "FlexPow", "FlexSub"}
_TFL_WHOLE = {"GELU", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "HARD_SWISH", "ELU"}
_FUSABLE = {"FULLY_CONNECTED", "CONV_2D", "ADD", "SUB", "MUL", "DIV"}
_CUT_OUT_HOW = ("cut out of the file (its own operators, options and constants in a one-subgraph model), run by "
                "tf.lite.Interpreter with its default delegates (XNNPACK on CPU, which computes GELU, LOGISTIC and "
                "TANH with kernels of its own)")
_N_BATCH, _BATCH = 4, 16  # forward passes per scale (1 and 4) and the batch size set for a dynamic batch dimension


def tflite_runtime() -> str:
    import tensorflow as tf

    return f"TFLite interpreter (TensorFlow {tf.__version__}), default delegates (XNNPACK on CPU)"


def _interpreter(content: bytes | None = None, path: Path | None = None):
    import warnings

    import tensorflow as tf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter's deprecation and preserve_all_tensors notes
        return tf.lite.Interpreter(model_path=str(path) if path else None, model_content=content,
                                   experimental_preserve_all_tensors=True)


def read_tflite(path: Path) -> tuple[list[Site], str, str]:
    """The sites of a .tflite file (see the module docstring)."""
    _quiet_tf()
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.python import schema_util
    from tensorflow.lite.python.util import _convert_model_from_bytearray_to_object

    data = path.read_bytes()
    try:
        model = _convert_model_from_bytearray_to_object(bytearray(data))
    except Exception as e:
        raise ValueError(f"{path}: not a TFLite flatbuffer ({type(e).__name__}: {str(e)[:120]})") from e
    _check_tflite_structure(path, model)
    builtin = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    activation = {v: k for k, v in vars(fb.ActivationFunctionType).items() if not k.startswith("_")}
    sg = model.subgraphs[0]

    def constant(t: int) -> bool:
        tensor = sg.tensors[t]
        buf = model.buffers[tensor.buffer] if tensor.buffer < len(model.buffers) else None
        return buf is not None and (buf.data is not None and len(buf.data) > 0 or bool(getattr(buf, "size", 0)))

    def uniform(t: int) -> bool:
        if t < 0:
            return True
        if not constant(t):
            return False
        v = _tfl_value(model, sg.tensors[t])
        return v is not None and v.size > 0 and bool(np.all(v == v.flat[0]))

    nodes = []
    for i, op in enumerate(sg.operators):
        code = model.operatorCodes[op.opcodeIndex]
        name = builtin.get(schema_util.get_builtin_code_from_operator_code(code), "?")
        if name == "CUSTOM" and code.customCode:
            name = code.customCode.decode() if isinstance(code.customCode, bytes) else str(code.customCode)
        inputs, outputs = [int(t) for t in (op.inputs if op.inputs is not None else [])], \
            [int(t) for t in (op.outputs if op.outputs is not None else [])]
        fused = activation.get(getattr(op.builtinOptions, "fusedActivationFunction", 0), "NONE")
        float_io = all(_is_float(sg.tensors[t]) for t in inputs + outputs if t >= 0 and not uniform(t))
        category = "nonlinear" if name in _TFL_NONLINEAR else "elementwise" if name in _TFL_ELEMENTWISE else None
        fixed = any(t >= 0 and constant(t) and not uniform(t) for t in inputs)  # a bias vector, a weight
        kind = None if fused != "NONE" or not float_io or fixed else category
        label = _tensor_label(sg.tensors[outputs[0]]) if outputs else f"op {i}"
        # a single-op activation is a site of its own; the ops of a pattern share their layer's name scope
        own = name in _TFL_WHOLE
        nodes.append(Node(label, name, inputs, outputs, kind, {"index": i, "fused": fused,
                                                               "options": op.builtinOptions},
                          scope=i if own else label.rpartition("/")[0]))
    regions = elementwise_regions(nodes, uniform, [int(t) for t in sg.outputs])
    keyed = []
    for r in regions:
        members = [nodes[i] for i in r.nodes]
        ops = ", ".join(_tfl_op(m) for m in members)
        probe = _tflite_cut_out(model, sg, [m.extra["index"] for m in members], r.input, r.output)
        keyed.append((r.nodes[0], Site(scope([m.name for m in members]), f"TFLite {ops}", _CUT_OUT_HOW, probe)))
    fused_nodes = [n for n in nodes if n.extra["fused"] != "NONE" and n.op in _FUSABLE]
    pairs = _tflite_fused_pairs(path, sg, fused_nodes) if fused_nodes else {}
    for n in fused_nodes:
        if n.extra["index"] in pairs:
            keyed.append((n.extra["index"], Site(
                n.name, f"TFLite {n.op}(fused_activation_function={n.extra['fused']})",
                f"pairs from {2 * _N_BATCH} forward passes of the whole file on N(0, 1) and 4 N(0, 1) inputs, the "
                "pre-activation recomputed in float32 from the op's inputs (a fused activation cannot be cut out)",
                pairs=pairs[n.extra["index"]])))
    sites = [s for _, s in sorted(keyed, key=lambda k: k[0])]
    runtime = tflite_runtime()
    return sites, "TFLite", runtime


def _check_tflite_structure(path: Path, model) -> None:
    """Raises ValueError naming path when the parsed flatbuffer is not a model read_tflite can walk: no subgraph
    (a file of zeros parses as an empty model), or an operator or tensor pointing past the tables it indexes."""
    expected = "expected a .tflite file written by tf.lite.TFLiteConverter"
    if not model.subgraphs:
        raise ValueError(f"{path}: not a TFLite model: no subgraph; {expected}")
    model.buffers = model.buffers if model.buffers is not None else []
    codes = model.operatorCodes if model.operatorCodes is not None else []
    sg = model.subgraphs[0]
    tensors = sg.tensors if sg.tensors is not None else []
    sg.tensors, sg.operators = tensors, sg.operators if sg.operators is not None else []
    sg.inputs, sg.outputs = [] if sg.inputs is None else sg.inputs, [] if sg.outputs is None else sg.outputs
    for i, op in enumerate(sg.operators):
        if not 0 <= op.opcodeIndex < len(codes):
            raise ValueError(f"{path}: not a usable TFLite model: operator {i} names operator code {op.opcodeIndex} "
                             f"of {len(codes)}; {expected}")
        for t in [*(op.inputs if op.inputs is not None else []), *(op.outputs if op.outputs is not None else [])]:
            if int(t) >= len(tensors):
                raise ValueError(f"{path}: not a usable TFLite model: operator {i} names tensor {int(t)} of "
                                 f"{len(tensors)}; {expected}")
    for t in [*sg.inputs, *sg.outputs]:
        if not 0 <= int(t) < len(tensors):
            raise ValueError(f"{path}: not a usable TFLite model: the subgraph names tensor {int(t)} of "
                             f"{len(tensors)}; {expected}")


def _is_float(tensor) -> bool:
    from tensorflow.lite.python import schema_py_generated as fb

    return tensor.type in (fb.TensorType.FLOAT32, fb.TensorType.FLOAT16, fb.TensorType.FLOAT64)


def _tensor_label(tensor) -> str:
    name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)
    return name.split(";")[0]


def _tfl_value(model, tensor) -> np.ndarray | None:
    from tensorflow.lite.python import schema_py_generated as fb

    buf = model.buffers[tensor.buffer]
    if buf.data is None or not len(buf.data):
        return None
    dtype = {fb.TensorType.FLOAT32: np.float32, fb.TensorType.FLOAT16: np.float16, fb.TensorType.FLOAT64: np.float64,
             fb.TensorType.INT32: np.int32, fb.TensorType.INT64: np.int64, fb.TensorType.INT8: np.int8,
             fb.TensorType.UINT8: np.uint8}.get(tensor.type)
    return None if dtype is None else np.frombuffer(np.asarray(buf.data, np.uint8).tobytes(), dtype)


def _tfl_op(node: Node) -> str:
    options = node.extra["options"]
    if node.op == "GELU":
        return f"GELU(approximate={bool(getattr(options, 'approximate', False))})"
    if node.op == "LEAKY_RELU":
        return f"LEAKY_RELU(alpha={getattr(options, 'alpha', None)})"
    return node.op


def _tflite_cut_out(model, sg, op_indices: list, input_t: int, output_t: int) -> Callable:
    """A one-subgraph TFLite model of the file's operators op_indices (options and operator codes copied),
    reading tensor input_t (made 1-D of dynamic size) and giving output_t, run by tf.lite.Interpreter."""
    import copy

    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.python.util import _convert_model_from_object_to_bytearray

    new = fb.ModelT()
    new.version = model.version
    new.operatorCodes = model.operatorCodes
    new.description = "gelulab cut-out"
    new.buffers = [fb.BufferT()]
    sub = fb.SubGraphT()
    sub.tensors, sub.operators = [], []
    index = {}

    def tensor(t: int) -> int:
        if t < 0:
            return t
        if t not in index:
            old = sg.tensors[t]
            tt = copy.copy(old)
            value = _tfl_value(model, old) if old.buffer else None
            if value is not None:
                buf = fb.BufferT()
                buf.data = np.frombuffer(value.flat[:1].tobytes(), np.uint8)
                new.buffers.append(buf)
                tt.buffer = len(new.buffers) - 1
                tt.shape, tt.shapeSignature = [], None
            else:
                tt.buffer = 0
                tt.shape, tt.shapeSignature = [1], [-1]
            tt.quantization = None
            sub.tensors.append(tt)
            index[t] = len(sub.tensors) - 1
        return index[t]

    for i in op_indices:
        op = copy.copy(sg.operators[i])
        op.inputs = [tensor(int(t)) for t in op.inputs]
        op.outputs = [tensor(int(t)) for t in op.outputs]
        op.intermediates = None
        sub.operators.append(op)
    sub.inputs, sub.outputs = [tensor(input_t)], [tensor(output_t)]
    sub.name = "cut_out"
    new.subgraphs = [sub]
    content = bytes(_convert_model_from_object_to_bytearray(new))
    state = {}

    def probe(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float32)
        it = state.get("interpreter")
        if it is None:
            it = state["interpreter"] = _interpreter(content=content)
        inp, out = it.get_input_details()[0], it.get_output_details()[0]
        flat = x.reshape(-1)
        it.resize_tensor_input(inp["index"], [flat.size])
        it.allocate_tensors()
        it.set_tensor(inp["index"], flat)
        it.invoke()
        return np.asarray(it.get_tensor(out["index"]), np.float32).reshape(x.shape)

    return probe


def _tflite_fused_pairs(path: Path, sg, fused_nodes) -> dict:
    """{op index: (pre, post)} for ops with a fused activation, from forward passes of the whole file on N(0, 1)
    and 4 N(0, 1) float32 inputs; the pre-activation recomputed in float32 from the op's input tensors."""
    it = _interpreter(path=path)
    inputs = it.get_input_details()
    if any(d["dtype"] != np.float32 for d in inputs):
        return {}  # token ids and quantized inputs: no N(0, 1) forward pass; the fused sites are not evidenced
    for d in inputs:
        shape = [(_BATCH if s < 0 else int(s)) for s in d["shape_signature"]] or [1]
        it.resize_tensor_input(d["index"], shape)
    it.allocate_tensors()
    rng = np.random.default_rng(0)
    got: dict = {n.extra["index"]: ([], []) for n in fused_nodes}
    for scale in (1.0, 4.0):
        for _ in range(_N_BATCH):
            for d in it.get_input_details():
                it.set_tensor(d["index"], (scale * rng.standard_normal(d["shape"])).astype(np.float32))
            it.invoke()
            for n in fused_nodes:
                pre = _pre_activation(it, sg, n)
                if pre is None:
                    continue
                post = np.asarray(it.get_tensor(n.outputs[0]), np.float32)
                if pre.size == post.size:
                    got[n.extra["index"]][0].append(pre.ravel())
                    got[n.extra["index"]][1].append(post.ravel())
    return {k: (np.concatenate(a), np.concatenate(b)) for k, (a, b) in got.items() if a}


def _pre_activation(it, sg, node: Node) -> np.ndarray | None:
    ins = [np.asarray(it.get_tensor(t), np.float32) if t >= 0 else None for t in node.inputs]
    with np.errstate(all="ignore"):
        if node.op in ("ADD", "SUB", "MUL", "DIV"):
            return {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide}[node.op](ins[0], ins[1])
        if node.op == "FULLY_CONNECTED":
            w = ins[1]
            y = ins[0].reshape(-1, w.shape[1]) @ w.T
            return y + ins[2] if len(ins) > 2 and ins[2] is not None else y
        if node.op == "CONV_2D":
            import tensorflow as tf

            o = node.extra["options"]
            padding = "SAME" if o.padding == 0 else "VALID"
            y = tf.nn.conv2d(ins[0], np.transpose(ins[1], (1, 2, 3, 0)), [1, o.strideH, o.strideW, 1], padding,
                             dilations=[1, o.dilationHFactor, o.dilationWFactor, 1]).numpy()
            return y + ins[2] if len(ins) > 2 and ins[2] is not None else y
    return None

"""api.audit's TensorFlow and JAX readers (backends/tensorflow/audit.py, backends/jax/audit.py): the activation sites
of Keras models, `.keras` files, SavedModel folders, `.tflite` files, Flax modules and jax functions, each
identified as its own runtime computes it; and the README's two audit blocks (run as written, and from a copy
kept here until they are pasted into README.md).

References: the variants are what the frameworks document: Keras 3's activation="gelu" and
keras.activations.gelu(approximate=False) are the exact GELU, approximate=True the tanh form (keras.io, the
activations page); flax.linen.gelu defaults to approximate=True (the tanh form), approximate=False is exact;
x * sigmoid(1.702 x) is the sigmoid form (Hendrycks & Gimpel 2016, sec. 2); torch.nn.GELU() is exact. What the
TFLite converter writes for them (a GELU builtin with its `approximate` option; ReLU fused into
FULLY_CONNECTED) is read from the file's flatbuffer with TensorFlow's own schema, not from the code under test.
"""
from __future__ import annotations

import functools
import textwrap

import numpy as np
import pytest
import readme_blocks
from conftest import available, requires

from gelulab.api import audit as A

VARIANTS = ["gelu_none", "gelu_tanh", "relu"]
X = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)


# --- the region finder, on a graph written by hand ----------------------------------------------------------------


def test_regions_one_input_scalars_aside():
    from gelulab.backends.tensorflow.audit import Node, elementwise_regions

    # a -> [mul 0.5, erf, add 1, mul a] (one site); b -> tanh -> mul with c (gate: tanh is a site, the mul not);
    # d + bias vector -> logistic (the add reads a non-uniform constant: the site is the logistic alone);
    # e -> relu -> relu in two scopes (two sites)
    nodes = [
        Node("m", "Mul", ["a", "half"], ["t1"], "elementwise"),
        Node("e", "Erf", ["t1"], ["t2"], "nonlinear"),
        Node("p", "Add", ["t2", "one"], ["t3"], "elementwise"),
        Node("q", "Mul", ["a", "t3"], ["out1"], "elementwise"),
        Node("t", "Tanh", ["b"], ["t4"], "nonlinear"),
        Node("g", "Mul", ["t4", "c"], ["out2"], "elementwise"),
        Node("ba", "Add", ["d", "bias"], ["t5"], "elementwise"),
        Node("s", "Sigmoid", ["t5"], ["out3"], "nonlinear"),
        Node("r1", "Relu", ["e"], ["t6"], "nonlinear", scope="one"),
        Node("r2", "Relu", ["t6"], ["out4"], "nonlinear", scope="two"),
    ]
    regions = elementwise_regions(nodes, {"half", "one"}.__contains__, ["out1", "out2", "out3", "out4"])
    got = [([nodes[i].name for i in r.nodes], r.input, r.output) for r in regions]
    assert got == [(["m", "e", "p", "q"], "a", "out1"), (["t"], "b", "t4"), (["s"], "t5", "out3"),
                   (["r1"], "e", "t6"), (["r2"], "t6", "out4")]


# --- Keras, SavedModel, TFLite ------------------------------------------------------------------------------------


def keras_model(tanh):
    """Dense(activation="gelu") (exact), an Activation layer with the tanh form (`tanh`: the callable), and
    Dense(activation="relu"), Dense layers between them."""
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="gelu"), keras.layers.Dense(8),
                             keras.layers.Activation(tanh), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(1)])


@functools.cache
def registered_tanh_gelu():
    """keras.activations.gelu(approximate=True) as a registered function: a .keras file stores it by name and
    loads it in safe mode (a functools.partial or a lambda would not)."""
    import keras

    @keras.saving.register_keras_serializable(package="gelulab_tests")
    def tanh_gelu(x):
        return keras.activations.gelu(x, approximate=True)

    return tanh_gelu


def test_keras_model_object():
    keras = requires("keras")
    model = keras_model(functools.partial(keras.activations.gelu, approximate=True))
    report = A.audit(model)
    assert [s.variant for s in report.sites] == VARIANTS
    tf = requires("tensorflow")
    assert report.format == "Keras model" and report.runtime.startswith(f"TensorFlow {tf.__version__}, Keras")
    assert report.sites[0].op == "keras.activations.gelu(approximate=False)"
    assert report.sites[1].op == "functools.partial(keras.activations.gelu, approximate=True)"
    names = [layer.name for layer in model.layers]  # Keras numbers its default names per process
    assert [s.path for s in report.sites] == [f"{model.name}/{names[0]}.activation", f"{model.name}/{names[2]}",
                                              f"{model.name}/{names[3]}.activation"]


def test_keras_file_and_gelulab_layer(tmp_path):
    keras = requires("keras")
    from gelulab.layers.keras import GELU

    path = tmp_path / "model.keras"
    keras_model(registered_tanh_gelu()).save(path)
    assert [s.variant for s in A.audit(path).sites] == VARIANTS
    # gelulab's own layer, as a layer and as another layer's activation, is one site each
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), GELU(approximate="tanh"),
                              keras.layers.Dense(8, activation=GELU(approximate="sigmoid"))])
    model.save(tmp_path / "own.keras")
    report = A.audit(tmp_path / "own.keras")
    assert [s.variant for s in report.sites] == ["gelu_tanh", "gelu_sigmoid"]
    assert report.sites[0].op.startswith("gelulab.layers.keras.GELU(approximate='tanh'")


def test_keras_file_with_code_is_refused(tmp_path):
    keras = requires("keras")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Lambda(lambda x: x * keras.ops.sigmoid(1.702 * x))])
    model.save(tmp_path / "lambda.keras")
    with pytest.raises(ValueError, match="safe_mode=False") as info:
        A.audit(tmp_path / "lambda.keras")
    assert "\n" not in str(info.value)


@pytest.mark.compile  # model.export traces the model into a tf.function
def test_saved_model(tmp_path):
    requires("keras")
    keras_model(registered_tanh_gelu()).export(tmp_path / "sm", verbose=False)
    report = A.audit(tmp_path / "sm")
    assert report.format == "SavedModel"
    assert [s.variant for s in report.sites] == VARIANTS
    ops = [s.op.split(", ") for s in report.sites]
    assert {"Erf", "Erfc"} & set(ops[0]) and "Tanh" in ops[1] and ops[2] == ["Relu"]
    assert all(s.evidence == "probe" for s in report.sites)


def tflite_file(tmp_path, model):
    tf = requires("tensorflow")
    path = tmp_path / "model.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    return path


def tflite_ops(path) -> list[tuple[str, str]]:
    """(operator name, options) of the file's main subgraph, read with TensorFlow's flatbuffer schema: the
    reference for what the converter wrote."""
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.python import schema_util

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(bytearray(path.read_bytes()), 0))
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    activations = {v: k for k, v in vars(fb.ActivationFunctionType).items() if not k.startswith("_")}
    out = []
    for op in model.subgraphs[0].operators:
        name = names[schema_util.get_builtin_code_from_operator_code(model.operatorCodes[op.opcodeIndex])]
        o = op.builtinOptions
        detail = (f"approximate={bool(o.approximate)}" if name == "GELU" else
                  f"fused={activations[o.fusedActivationFunction]}" if hasattr(o, "fusedActivationFunction") else "")
        out.append((name, detail))
    return out


@pytest.mark.compile  # the converter traces and compiles the model
def test_tflite_conversion(tmp_path):
    keras = requires("keras")
    model = keras_model(functools.partial(keras.activations.gelu, approximate=True))
    path = tflite_file(tmp_path, model)
    # what TF 2.21's converter writes: GELU builtins with the approximate option (no Flex Erf), ReLU fused
    ops = tflite_ops(path)
    assert ("GELU", "approximate=False") in ops and ("GELU", "approximate=True") in ops
    assert ("FULLY_CONNECTED", "fused=RELU") in ops
    report = A.audit(path)
    assert report.format == "TFLite" and report.runtime.startswith("TFLite interpreter (TensorFlow ")
    assert [s.variant for s in report.sites] == VARIANTS
    assert [s.op for s in report.sites] == ["TFLite GELU(approximate=False)", "TFLite GELU(approximate=True)",
                                            "TFLite FULLY_CONNECTED(fused_activation_function=RELU)"]
    assert [s.evidence for s in report.sites] == ["probe", "probe", "pairs"]
    # against the Keras model: no variant changed
    diffs = A.compare(A.audit(model), report)
    assert [d.status for d in diffs if d.changed] == []


# --- JAX and Flax -------------------------------------------------------------------------------------------------


def linen_model():
    nn = requires("flax").linen

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.gelu(nn.Dense(8)(x), approximate=False)
            x = nn.gelu(nn.Dense(8)(x))  # flax's default: approximate=True
            x = nn.relu(nn.Dense(8)(x))
            return nn.Dense(1)(x)

    return MLP()


@pytest.mark.compile  # each cut-out region runs under jax.jit
def test_flax_linen():
    jax = requires("jax")
    model = linen_model()
    params = model.init(jax.random.PRNGKey(0), X)
    report = A.audit(model, A.Options(params=params, example=X))
    assert report.format == "Flax linen module" and report.runtime.startswith(f"jax {jax.__version__}")
    assert [s.variant for s in report.sites] == VARIANTS
    assert "erf" in report.sites[0].op or "erfc" in report.sites[0].op
    assert "tanh" in report.sites[1].op and report.sites[2].op == "jaxpr relu: max"
    assert all("MLP" in s.path for s in report.sites)


def test_flax_linen_needs_params_and_example():
    requires("flax")
    with pytest.raises(ValueError, match="params=variables, example=x") as info:
        A.audit(linen_model())
    assert "\n" not in str(info.value)


@pytest.mark.compile
def test_jax_function():
    jax = requires("jax")

    def quick_gelu(x):
        return x * jax.nn.sigmoid(1.702 * x)

    report = A.audit(jax.jit(quick_gelu), A.Options(example=X))
    assert [s.variant for s in report.sites] == ["gelu_sigmoid"]
    assert report.sites[0].op == "jaxpr quick_gelu: mul, logistic, mul"
    # a plain function is no model for the dispatch (it is an activation callable), but the reader takes it
    from gelulab.backends.jax import audit as J

    sites, fmt, _ = J.read(quick_gelu, A.Options(example=X))
    assert fmt == "jax function" and [A.report_site(s).variant for s in sites] == ["gelu_sigmoid"]
    with pytest.raises(ValueError, match="example=x"):
        J.read(quick_gelu, A.Options())


@pytest.mark.compile
def test_flax_nnx():
    requires("flax")
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.a, self.b = nnx.Linear(4, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)

        def __call__(self, x):
            return self.b(nnx.gelu(self.a(x), approximate=False))

    report = A.audit(Block(nnx.Rngs(0)), A.Options(example=X))
    assert report.format == "flax.nnx module" and [s.variant for s in report.sites] == ["gelu_none"]


# --- the README's blocks ------------------------------------------------------------------------------------------

# The blocks as README.md shows them under "What does this model really compute?" (the runner finds a block by its
# first line). test_readme_block_* run README.md's; test_block_copy_* run these copies the same way.
BLOCKS = {
    "Audit: Keras against TFLite": textwrap.dedent('''\
        # Audit: Keras against TFLite
        import functools
        import pathlib
        import tempfile

        import keras
        import tensorflow as tf

        from gelulab.api.audit import audit_pair

        keras.utils.set_random_seed(0)
        model = keras.Sequential([
            keras.Input((16,)),
            keras.layers.Dense(32, activation="gelu"),  # exact GELU: Keras 3's default
            keras.layers.Dense(32),
            keras.layers.Activation(functools.partial(keras.activations.gelu, approximate=True)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(1),
        ])
        path = pathlib.Path(tempfile.mkdtemp()) / "model.tflite"
        path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
        comparison = audit_pair(model, path)  # the model as TensorFlow runs it, the file as the TFLite interpreter does
        print(comparison)
        [s.op for s in comparison.b.sites]
        # ['TFLite GELU(approximate=False)', 'TFLite GELU(approximate=True)',
        #  'TFLite FULLY_CONNECTED(fused_activation_function=RELU)']
        [d.a.variant == d.b.variant for d in comparison.diffs]  # [True, True, True]
        "1+erf cancellation in B only" in comparison.diffs[0].why  # True: TFLite's exact GELU loses the tail
        comparison.changed  # 0
        '''),
    "Audit: PyTorch against Flax": textwrap.dedent('''\
        # Audit: PyTorch against Flax
        import flax.linen as nn
        import numpy as np
        import torch

        from gelulab.api.audit import Options, audit_pair

        torch.manual_seed(0)
        original = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))


        class Port(nn.Module):  # a Flax port of `original`
            @nn.compact
            def __call__(self, x):
                x = nn.gelu(nn.Dense(32)(x))  # flax's gelu defaults to approximate=True: the tanh form
                return nn.Dense(1)(x)


        weights = [(layer.weight.detach().numpy().T, layer.bias.detach().numpy())
                   for layer in (original[0], original[2])]
        params = {"params": {f"Dense_{i}": {"kernel": w, "bias": b} for i, (w, b) in enumerate(weights)}}
        x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
        same_outputs = np.allclose(original(torch.from_numpy(x)).detach().numpy(), Port().apply(params, x), atol=1e-3)
        comparison = audit_pair(original, Port(), Options(example=x, params=params))
        print(comparison)
        same_outputs  # True: a test at atol=1e-3 passes
        comparison.changed  # 1
        comparison.diffs[0].status  # 'VARIANT CHANGED'
        (comparison.diffs[0].a.variant, comparison.diffs[0].b.variant)  # ('gelu_none', 'gelu_tanh')
        '''),
}


def check_keras_tflite(namespace):
    comparison = namespace["comparison"]
    assert [d.a.variant for d in comparison.diffs] == VARIANTS


def check_torch_flax(namespace):
    comparison = namespace["comparison"]
    assert [d.status for d in comparison.diffs] == ["VARIANT CHANGED"]


def run_copy(label, monkeypatch):
    monkeypatch.setattr(readme_blocks, "block", lambda name: BLOCKS[name])
    return readme_blocks.run(label)


@pytest.mark.compile
def test_block_copy_keras_tflite(monkeypatch):
    requires("keras")
    check_keras_tflite(run_copy("Audit: Keras against TFLite", monkeypatch))


@pytest.mark.compile
def test_readme_block_keras_tflite():
    requires("keras")
    check_keras_tflite(readme_blocks.run("Audit: Keras against TFLite"))


def torch_and_flax():
    requires("torch")
    requires("flax")
    if not available("torch") or not __import__("importlib").util.find_spec("gelulab.backends.torch.audit"):
        pytest.skip("the torch reader (gelulab.backends.torch.audit) is not there")


@pytest.mark.compile  # torch.export of the torch model, jax.jit of the Flax regions
def test_block_copy_torch_flax(monkeypatch):
    torch_and_flax()
    check_torch_flax(run_copy("Audit: PyTorch against Flax", monkeypatch))


@pytest.mark.compile
def test_readme_block_torch_flax():
    torch_and_flax()
    check_torch_flax(readme_blocks.run("Audit: PyTorch against Flax"))

"""Every way a small model holding gelulab's layers leaves the notebook: it works, its outputs within a stated bound
of the unexported model's, or it is refused before any work with one line naming the path and the way out.

Bounds: the lone layer within 2 float32 ULP of the unexported layer (each is within 1 ULP of the exact value: the
exported kernel is gelulab's float32 kernel op for op, the eager call may take the correctly rounded float64 path);
the Linear-layer-Linear model within rtol 1e-5, atol 1e-6 (another runtime's matrix products round differently).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import requires

# float32 inputs across the activations' regions: tails, the middle, tiny values, signed zeros
GRID = np.concatenate([np.linspace(-12.0, 12.0, 2001), np.geomspace(1e-30, 1e-3, 50), -np.geomspace(1e-30, 1e-3, 50),
                       [0.0, -0.0]]).astype(np.float32)
XS = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
ULP = 2
RTOL, ATOL = 1e-5, 1e-6


def close_model(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)


def close_layer(got, want):
    np.testing.assert_array_max_ulp(np.asarray(got, np.float32), np.asarray(want, np.float32), maxulp=ULP)


# --- torch -------------------------------------------------------------------------------------------------------


def torch_models(impl="kernel", approximate="none"):
    torch = requires("torch")
    from gelulab.layers.torch import GELU

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), GELU(approximate, impl=impl), torch.nn.Linear(8, 2)).eval()
    return mlp, GELU(approximate, impl=impl)


def eager(model, x):
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


@pytest.mark.slow
def test_torch_export_save_and_load(tmp_path):
    torch = requires("torch")
    mlp, layer = torch_models()
    for name, model, x in (("mlp", mlp, XS), ("layer", layer, GRID)):
        program = torch.export.export(model, (torch.from_numpy(x),))
        torch.export.save(program, tmp_path / f"{name}.pt2")
        again = torch.export.load(tmp_path / f"{name}.pt2").module()
        with torch.no_grad():
            got = again(torch.from_numpy(x)).numpy()
        (close_model if name == "mlp" else close_layer)(got, eager(model, x))


@pytest.mark.parametrize("approximate", ["none", "tanh", "sigmoid"])
def test_torch_jit_trace_save_and_load_for_another_shape(approximate, tmp_path):
    torch = requires("torch")
    mlp, layer = torch_models(approximate=approximate)
    for name, model, x in (("mlp", mlp, XS), ("layer", layer, GRID)):
        traced = torch.jit.trace(model, torch.from_numpy(x[:3]))  # traced on 3 rows, run on all of them
        torch.jit.save(traced, tmp_path / f"{name}.pt")
        again = torch.jit.load(tmp_path / f"{name}.pt")
        with torch.no_grad():
            got = again(torch.from_numpy(x)).numpy()
        (close_model if name == "mlp" else close_layer)(got, eager(model, x))


def test_torch_jit_script_of_the_builtin_works_and_of_the_kernel_is_refused(tmp_path):
    torch = requires("torch")
    for approximate in ("none", "tanh", "sigmoid"):
        mlp, _ = torch_models("builtin", approximate)
        scripted = torch.jit.script(mlp)
        torch.jit.save(scripted, tmp_path / "m.pt")
        with torch.no_grad():
            got = torch.jit.load(tmp_path / "m.pt")(torch.from_numpy(XS)).numpy()
        np.testing.assert_array_equal(got, eager(mlp, XS))  # the same torch ops
    from gelulab.layers.torch import ReLU, SiLU

    for layer in (ReLU(impl="builtin"), SiLU(impl="builtin")):
        ref = torch.nn.ReLU() if isinstance(layer, ReLU) else torch.nn.SiLU()
        np.testing.assert_array_equal(torch.jit.script(layer)(torch.from_numpy(GRID)).numpy(), eager(ref, GRID))
    for impl in ("kernel", "formula"):
        mlp, _ = torch_models(impl)
        with pytest.raises(RuntimeError, match=rf"^torch.jit.script: gelulab's impl='{impl}' cannot be scripted; "
                                               r".*torch.jit.trace.*gelulab.swap\(model, impl='builtin'\)"):
            torch.jit.script(mlp)
    mlp, _ = torch_models("kernel")
    import gelulab

    gelulab.swap(mlp, impl="builtin")  # the way out the message names
    np.testing.assert_array_equal(torch.jit.script(mlp)(torch.from_numpy(XS)).detach().numpy(), eager(mlp, XS))


def onnx_run(path, x):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def onnx_export(model, x, path, dynamo):
    import torch

    if dynamo:
        batch = torch.export.Dim("batch", min=2)
        torch.onnx.export(model, (torch.from_numpy(x[:3]),), str(path), dynamo=True, verbose=False,
                          input_names=["x"], dynamic_shapes=({0: batch},))
    else:
        torch.onnx.export(model, (torch.from_numpy(x[:3]),), str(path), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}}, opset_version=17)


@pytest.mark.parametrize("impl", ["kernel", "builtin"])
def test_onnx_legacy_exporter_runs_in_onnxruntime(impl, tmp_path):
    pytest.importorskip("onnxruntime")
    mlp, layer = torch_models(impl)
    for name, model, x in (("mlp", mlp, XS), ("layer", layer, GRID)):
        onnx_export(model, x, tmp_path / f"{name}.onnx", dynamo=False)
        got = onnx_run(tmp_path / f"{name}.onnx", x)
        if name == "mlp" or impl == "builtin":  # builtin: onnxruntime's Erf, not torch's, in the layer too
            close_model(got, eager(model, x))
        else:
            close_layer(got, eager(model, x))


@pytest.mark.slow
def test_onnx_dynamo_exporter_runs_in_onnxruntime(tmp_path):
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    mlp, layer = torch_models("kernel")
    for name, model, x in (("mlp", mlp, XS), ("layer", layer, GRID)):
        onnx_export(model, x, tmp_path / f"{name}.onnx", dynamo=True)
        (close_model if name == "mlp" else close_layer)(onnx_run(tmp_path / f"{name}.onnx", x), eager(model, x))


@pytest.mark.parametrize("dynamo", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_onnx_export_of_the_formula_is_refused_in_one_line(dynamo, tmp_path):
    pytest.importorskip("onnxscript")
    mlp, _ = torch_models("formula")
    with pytest.raises(Exception) as caught:
        onnx_export(mlp, XS, tmp_path / "m.onnx", dynamo=dynamo)
    chain = []
    e = caught.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    line = ("torch.onnx.export: gelulab's impl='formula' computes in float64 with erfc, which ONNX and ONNX Runtime "
            "lack; export with impl='builtin' (torch's op) or impl='kernel' (exported op for op, the same values), or "
            "call gelulab.swap(model, impl='builtin') before export")
    assert any(line in text for text in chain), chain[0][:500]
    assert not (tmp_path / "m.onnx").exists()


# --- Keras / TensorFlow ------------------------------------------------------------------------------------------


def keras_model(impl="kernel", approximate="none"):
    keras = requires("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("SavedModel and TFLite need Keras' TensorFlow backend")
    from gelulab.layers.keras import GELU

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), GELU(approximate, impl=impl),
                             keras.layers.Dense(2)])


_SAVED_MODEL = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    model = tf.saved_model.load(sys.argv[1])
    np.save(sys.argv[2], model.serve(tf.constant(np.load(sys.argv[3]))).numpy())
    assert not [m for m in sys.modules if m.startswith("gelulab")]
""")


@pytest.mark.subprocess
@pytest.mark.slow
def test_keras_export_saved_model_reloads_with_tensorflow_alone(tmp_path):
    model = keras_model()
    model.export(str(tmp_path / "saved"), verbose=False)
    np.save(tmp_path / "x.npy", XS)
    done = subprocess.run([sys.executable, "-c", _SAVED_MODEL, str(tmp_path / "saved"), str(tmp_path / "y.npy"),
                           str(tmp_path / "x.npy")], check=False, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    close_model(np.load(tmp_path / "y.npy"), model.predict(XS, verbose=0))


@pytest.mark.subprocess
def test_keras_load_model_without_the_import_names_the_module(tmp_path):
    model = keras_model(approximate="tanh")
    model.save(tmp_path / "m.keras")
    script = "import sys, keras\nkeras.models.load_model(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "m.keras")], check=False,
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode != 0
    assert "Could not locate class 'GELU'" in done.stderr and "'gelulab.layers.keras>GELU'" in done.stderr


def test_keras_loads_files_saved_under_the_earlier_registered_names():
    keras = requires("keras")
    from gelulab.layers.keras import GELU

    config = keras.saving.serialize_keras_object(GELU(approximate="tanh"))
    config["registered_name"] = "gelulab>GELU"
    again = keras.saving.deserialize_keras_object(config)
    assert isinstance(again, GELU) and again.approximate == "tanh"


def test_keras_layer_dtype_is_its_compute_dtype():
    keras = requires("keras")
    from gelulab.layers.keras import GELU

    x = GRID.astype(np.float16)
    assert keras.ops.convert_to_numpy(GELU()(x)).dtype == np.float32  # as documented: float32 by default
    assert keras.ops.convert_to_numpy(GELU(dtype="float16")(x)).dtype == np.float16


@pytest.mark.slow
def test_tflite_conversion_runs_in_the_stock_interpreter():
    tf = requires("tensorflow")
    model = keras_model()
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    flat = converter.convert()
    interpreter = tf.lite.Interpreter(model_content=flat)
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], list(XS.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], XS)
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    close_model(got, model.predict(XS, verbose=0))


# --- JAX / Flax --------------------------------------------------------------------------------------------------


def linen_model():
    requires("flax")
    import flax.linen as nn

    from gelulab.layers.flax import GELU

    return nn.Sequential([nn.Dense(8), GELU(impl="kernel"), nn.Dense(2)])


def test_jax_export_serialize_and_deserialize():
    jax = requires("jax")
    from jax import export

    from gelulab.layers.flax import GELU

    model = linen_model()
    params = model.init(jax.random.PRNGKey(0), XS)
    for fn, x in ((lambda v: model.apply(params, v), XS), (lambda v: GELU(impl="kernel").apply({}, v), GRID)):
        exported = export.export(jax.jit(fn))(jax.ShapeDtypeStruct(x.shape, x.dtype))
        again = export.deserialize(exported.serialize())
        (close_model if x is XS else close_layer)(again.call(x), fn(x))


def test_flax_checkpoint_of_the_params_round_trips(tmp_path):
    jax = requires("jax")
    from flax import serialization

    model = linen_model()
    params = model.init(jax.random.PRNGKey(0), XS)
    (tmp_path / "params.msgpack").write_bytes(serialization.to_bytes(params))
    empty = model.init(jax.random.PRNGKey(1), XS)
    again = serialization.from_bytes(empty, (tmp_path / "params.msgpack").read_bytes())
    np.testing.assert_array_equal(np.asarray(model.apply(again, XS)), np.asarray(model.apply(params, XS)))

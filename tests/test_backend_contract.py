"""The backend contract (core.contracts.contract) run against every selected backend: its capability record, the
Protocols of its modules, and the behaviour the record promises. A new backend folder with a record is covered here
without an edit. Expected values come from mpmath and the definitions (erfc(0) = 1, sigmoid(0) = 1/2, ReLU' = 0 / 1),
the packaged model's config.json and transformers' documented BERT activation (hidden_act "gelu": GELUActivation)."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import pkgutil
import re
import sys
import tomllib
from contextlib import AbstractContextManager
from pathlib import Path

import mpmath
import numpy as np
import pytest
from parity_shapes import call

import gelulab
from gelulab import backends
from gelulab.backends import (
    BACKEND_NAMES,
    INSTALL_HINT,
    PACKAGES,
    REGISTRY,
    DeviceUnavailable,
    capabilities,
    get_backend,
)
from gelulab.benchmarks.runner import counter_growth
from gelulab.core.activations import ACTIVATIONS
from gelulab.core.contracts.contract import (
    PROTOCOLS,
    ArrayOps,
    Capabilities,
    Encoder,
    KernelNamespace,
    Package,
    TrainableEncoder,
)
from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.plumbing import config
from gelulab.core.plumbing.report import environment
from gelulab.experiments.identify.command import evaluate

PYPROJECT = tomllib.loads((Path(gelulab.__file__).parent / "pyproject.toml").read_text())


def _normal(name: str) -> str:
    """A distribution or import name normalised as PEP 503 does ("array-api-strict" == "array_api_strict")."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ------------------------------------------------------------------------------------------------ the registry


def test_every_backend_folder_has_a_record_in_the_registry():
    folders = sorted(m.name for m in pkgutil.iter_modules(backends.__path__)
                     if m.ispkg and m.name not in backends.READER_FOLDERS)
    assert sorted(BACKEND_NAMES) == folders
    for name in folders:
        package = importlib.import_module(f"gelulab.backends.{name}")
        assert isinstance(package, Package) and PACKAGES[name] is package
        record = package.CAPABILITIES
        assert isinstance(record, Capabilities) and record.name == name and REGISTRY[name] is record


def test_packages_recognise_no_foreign_value():
    """Each package's array_dtype answers None for what no framework makes (gelulab.api asks them in turn)."""
    for name, package in PACKAGES.items():
        for value in ([1.0], 1.0, "x", None, (1.0,), object()):
            assert package.array_dtype(value) is None, (name, value)


def test_names_and_install_hints_derive_from_the_records():
    assert BACKEND_NAMES == tuple(REGISTRY) and BACKEND_NAMES.index("torch") < BACKEND_NAMES.index("tensorflow")
    extras = PYPROJECT["project"]["optional-dependencies"]
    for name, record in REGISTRY.items():
        assert INSTALL_HINT[name] == record.install_hint
        if record.extra is None:
            assert record.install_hint == "pip install -e ."
        else:
            assert record.extra in extras and f"'.[{record.extra}]'" in record.install_hint
            assert any(_normal(re.split(r"[<>=!~ ;\[]", dep)[0]) == _normal(record.package)
                       for dep in extras[record.extra])
    with pytest.raises(ValueError, match=re.escape(f"valid backends: {list(REGISTRY)}")):
        capabilities("mxnet")


@pytest.mark.parametrize("change,match", [
    ({"modes": ("compiled",)}, "modes"),
    ({"devices": ("quantum",)}, "devices"),
    ({"modules": ("bench",)}, "modules"),
    ({"autodiff": False}, "autodiff"),
    ({"thread_control": ("all",)}, "thread_control"),
    ({"autodiff": False, "modules": ("activations", "hf")}, "hf module"),
    ({"dispatcher": "mkl"}, "dispatcher"),
    ({"dtypes": ("float32", "float8")}, "dtypes"),
    ({"dtypes": ("float32", "float16")}, "dtypes"),
])
def test_a_record_that_contradicts_itself_is_refused(change, match):
    base = {"name": "x", "package": "x", "extra": "x", "modes": ("eager",), "devices": ("cpu",), "autodiff": True,
            "thread_control": (), "modules": ("activations", "moons"), "dispatcher": "numpy",
            "dtypes": ("float64", "float32"), "array_type": "x.Array"}
    Capabilities(**base)
    with pytest.raises(ValueError, match=match):
        Capabilities(**{**base, **change})


def test_the_array_api_module_is_written_once_over_a_namespace():
    """backends/array_api/ops.py bound by a record alone to another Array API namespace, numpy's own (numpy 2
    implements the standard), with no backend folder: a full activations module whose erfc, exp and sigmoid agree
    with mpmath, whose GELU' is the definition's Phi(x) + x phi(x), and whose record recognises numpy's arrays
    alone, never importing a library that is not imported."""
    from gelulab.backends.array_api.library import Library
    from gelulab.backends.array_api.ops import ArrayAPIOps
    from gelulab.core.contracts.contract import ActivationOps

    library = Library(name="numpy_namespace", namespace="numpy", package="numpy", extra=None,
                      array_type="numpy.ndarray", versions=("numpy",))
    ops = ArrayAPIOps(library)
    module = type(sys)("numpy_namespace_activations")
    module.__dict__.update(ops.functions())
    assert isinstance(module, ActivationOps)
    record = library.capabilities()
    assert record.modes == ("eager",) and record.dtypes == ("float64", "float32") and not record.kernels
    assert dataclasses.replace(library, jit="numpy.vectorize").capabilities().compiled
    values = (0.0, 1.0, -2.0, 5.5, -0.5)
    x = module.asarray(np.array(values), "cpu")
    with mpmath.workdps(30):
        erfc = [float(mpmath.erfc(v)) for v in values]
        sig = [float(1 / (1 + mpmath.exp(-v))) for v in values]
        d_gelu = [float(mpmath.ncdf(v) + v * mpmath.npdf(v)) for v in values]
    np.testing.assert_allclose(module.to_numpy(module.erfc(x)), erfc, rtol=1e-14)
    np.testing.assert_allclose(module.to_numpy(module.sigmoid(x)), sig, rtol=1e-15)
    d = module.derivative(lambda v: v, ACTIVATIONS["gelu_none"])
    np.testing.assert_allclose(module.to_numpy(d(x)), d_gelu, rtol=1e-14)
    assert module.dtype_name(module.astype(x, "float32")) == "float32"
    with pytest.raises(ValueError, match="float16"):
        module.asarray(np.ones(2, np.float16), "cpu")
    with pytest.raises(RuntimeError, match="not on 'gpu'"):
        module.setup("gpu")
    with pytest.raises(ValueError, match="no compiled mode"):
        module.compile(lambda v: v)
    assert library.array_dtype(np.ones(2, np.float32)) == "float32" and library.array_dtype([1.0]) is None
    absent = Library(name="absent", namespace="gelulab_absent_namespace", package="gelulab_absent", extra=None,
                     array_type="gelulab_absent.Array", array_class="gelulab_absent.Array")
    assert absent.array_dtype(np.ones(2)) is None and "gelulab_absent" not in sys.modules


# --------------------------------------------------------------------------------------- per selected backend


def test_record_and_folder_agree(backend_name):
    record = capabilities(backend_name)
    assert importlib.util.find_spec(record.package) is not None
    for module in PROTOCOLS:
        spec = importlib.util.find_spec(f"gelulab.backends.{backend_name}.{module}")
        assert (spec is not None) == (module in record.modules), (backend_name, module)


def test_modules_implement_their_protocols(backend_name):
    record = capabilities(backend_name)
    get_backend(backend_name)
    for module in record.modules:
        mod = importlib.import_module(f"gelulab.backends.{backend_name}.{module}")
        protocol = record.protocol(module)
        missing = [n for n in dir(protocol) if not n.startswith("_") and not hasattr(mod, n)]
        assert isinstance(mod, protocol), f"{mod.__name__} lacks {missing} of {protocol.__name__}"
    if "bert" in record.modules:
        bert = importlib.import_module(f"gelulab.backends.{backend_name}.bert")
        assert isinstance(bert, Encoder) and isinstance(bert, TrainableEncoder) == record.autodiff
    if record.kernels:
        kernels = importlib.import_module(f"gelulab.backends.{backend_name}.kernels")
        assert isinstance(kernels.NS, KernelNamespace)


def test_kernels_are_as_declared(backend):
    """A backend lists "kernels" exactly when impl="kernel" gives a callable, computing ReLU (max(x, 0)) on each of
    its narrower-than-float64 dtypes."""
    act = ACTIVATIONS["relu"]
    k = backend.module.kernel(act)
    if not backend.capabilities.kernels:
        assert k is None
        with pytest.raises(ValueError, match="has no kernel"):
            backend.function("relu", "kernel")
        return
    assert callable(k)
    for dtype in set(backend.capabilities.dtypes) - {"float64"}:
        x = backend.asarray(np.array([-1.5, 0.0, 2.5], DTYPES[dtype].np_dtype))
        y = backend.to_numpy(backend.function("relu", "kernel")(x))
        assert y.dtype == DTYPES[dtype].np_dtype and y.astype(np.float64).tolist() == [0.0, 0.0, 2.5], dtype


@pytest.mark.compile
def test_modes_are_as_declared(backend):
    record = backend.capabilities
    assert backend.modes == record.modes and backend.capabilities is capabilities(backend.name)
    x = backend.asarray(np.array([-1.0, 2.0], np.float32))
    if "compiled" in record.modes:
        y = backend.to_numpy(backend.function("relu", "formula", 0, "compiled")(x))
        assert y.dtype == np.float32 and y.tolist() == [0.0, 2.0]
    else:
        with pytest.raises(ValueError, match="compiled"):
            backend.module.compile(lambda v: v)
        with pytest.raises(ValueError, match=r"mode='compiled' is not offered"):
            backend.function("relu", mode="compiled")


def test_devices_outside_the_record_are_refused(backend_name):
    record = capabilities(backend_name)
    for device in set(config.DEVICES) - set(record.devices):
        with pytest.raises(DeviceUnavailable, match=f"not on '{device}'"):
            get_backend(backend_name, device)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_asarray_to_numpy_round_trip(backend, dtype):
    a = np.array([-np.inf, -2.5, -0.0, 0.0, 1.0, 3.0, np.inf, np.nan], dtype=DTYPES[dtype].np_dtype)
    if dtype not in backend.capabilities.dtypes:  # refused by name, not converted to another dtype
        with pytest.raises(ValueError, match=dtype):
            backend.asarray(a)
        return
    x = backend.asarray(a)
    assert backend.module.dtype_name(x) == dtype
    back = backend.to_numpy(x)
    assert back.dtype == a.dtype and back.shape == a.shape
    assert np.array_equal(back, a, equal_nan=True) and np.signbit(back[2]) and not np.signbit(back[3])


def test_array_ops_against_their_definitions(backend):
    m = backend.module
    assert isinstance(m, ArrayOps)
    x = backend.asarray(np.array([0.0, 1.0, -2.0]))
    with mpmath.workdps(30):
        erfc = [float(mpmath.erfc(v)) for v in (0, 1, -2)]
        exp = [float(mpmath.exp(v)) for v in (0, 1, -2)]
        sig = [float(1 / (1 + mpmath.exp(-v))) for v in (0, 1, -2)]
    for op, want in ((m.erfc, erfc), (m.exp, exp), (m.sigmoid, sig)):
        np.testing.assert_allclose(backend.to_numpy(op(x)), want, rtol=1e-14)
    assert backend.to_numpy(m.where(x > 0, x, 0.0)).tolist() == [0.0, 1.0, 0.0]
    for name in backend.capabilities.dtypes:
        assert m.dtype_name(m.astype(x, name)) == name
        # core.numerics.dtypes' wide dtype; narrower only on a device without it (TPU)
        assert m.wide(name) == DTYPES[name].wide or (backend.device == "tpu" and m.wide(name) == name), name
    assert isinstance(m.formula_scope(), AbstractContextManager)


def test_builtins_are_none_or_callable_and_derivatives_follow_the_definition(backend):
    x = backend.asarray(np.array([-2.0, 3.0], np.float32))
    for key, act in ACTIVATIONS.items():
        fn = backend.module.builtin(act)
        assert fn is None or callable(fn), key
        assert backend.has_builtin(key) == (fn is not None)
    d = backend.to_numpy(backend.function("relu", "formula", 1)(x))  # ReLU'(x) = 0 for x < 0, 1 for x > 0
    assert d.dtype == np.float32 and d.tolist() == [0.0, 1.0]


def test_versions_threads_and_bench_hooks(backend):
    """versions and threads as the record says; the bench hooks where the record lists a bench module."""
    record = backend.capabilities
    versions = backend.versions()
    assert record.package in versions and all(isinstance(v, str) for v in versions.values())
    threads = backend.module.threads()
    for pool in record.thread_control:  # the suite runs under reproducible(threads=GELULAB_THREADS)
        assert threads[pool] == config.threads(), (pool, threads)
    if not record.thread_control:
        assert threads["intra_op"] == 1
    assert environment([backend])["threads_in_effect"] == {backend.name: threads}  # every report records them
    if "bench" not in record.modules:  # optional: the benchmarks need it, nothing else does
        return
    bench = importlib.import_module(f"gelulab.backends.{backend.name}.bench")
    assert bench.threads() == threads
    x = bench.device_input(backend, np.arange(4, dtype=np.float32))
    y = bench.copy(x)
    bench.sync(y)
    assert backend.to_numpy(y).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert "compiles" in bench.compile_stats(backend.function("relu", mode=record.modes[-1]))


@pytest.mark.compile
@pytest.mark.slow
def test_compiled_mode_compiles_every_variant(backend):
    """More compiled variants of the formula closure than dynamo's default recompile limit (8): each one compiles
    (a compile counter grows), none falls back to eager, and no global compiler setting is left changed."""
    if not backend.capabilities.compiled:
        pytest.skip(f"{backend.name} has no compiled mode")
    if "bench" not in backend.capabilities.modules:
        pytest.skip(f"{backend.name} has no bench module to count compilations")
    bench = importlib.import_module(f"gelulab.backends.{backend.name}.bench")
    bench.fresh()
    dtypes = [d for d in ("float32", "float64", "float16") if d in backend.capabilities.dtypes]
    variants = [(key, dtype) for dtype in dtypes for key in ACTIVATIONS]
    assert len(variants) > 8
    for key, dtype in variants:
        fn = backend.function(key, "formula", 0, "compiled")
        before = bench.compile_stats(fn)
        call(backend, fn, np.linspace(-3, 3, 9).astype(dtype), "compiled")  # at the parity length: a cached graph
        assert counter_growth(before, bench.compile_stats(fn)) >= 1, (key, dtype)


def test_subjects_are_the_callables_their_expressions_give(backend_name):
    """Each subject (benchmarks/identify.py times gelulab.identify on them) is keyed by the expression `gelulab
    identify` reads: that expression gives a callable computing the same values, and the callable runs on this
    backend's arrays (Keras's on its configured backend)."""
    record = capabilities(backend_name)
    if "subjects" not in record.modules:
        pytest.skip(f"the {backend_name} backend names no subjects")
    subjects = importlib.import_module(f"gelulab.backends.{backend_name}.subjects").subjects()
    assert subjects and all(callable(fn) for fn in subjects.values())
    for expression, fn in subjects.items():
        same = gelulab.identify(evaluate(expression), fn)
        want = sys.modules["keras"].backend.backend() if expression.startswith("keras.") else backend_name
        assert same.a.framework == same.b.framework == want, expression
        np.testing.assert_array_equal(same.a.values, same.b.values, err_msg=expression)


@pytest.mark.training
def test_pretrained_bert_module(backend_name):
    """backends/<name>/hf.py on the packaged all-MiniLM-L6-v2 folder: the BertModel as config.json describes it,
    hidden states as numpy float32, and a fine-tune that trains the encoder layers only, with the loss defined as
    1 - mean cosine of the mean-pooled last hidden state to the target."""
    if "hf" not in capabilities(backend_name).modules:
        pytest.skip(f"the {backend_name} backend has no hf module")
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (pip install -c constraints.txt -e '.[swap]')")
    from gelulab.experiments.swap import model as bert

    try:
        directory = bert.model_directory()
    except bert.ModelUnavailable as e:
        pytest.skip(str(e))
    hf = importlib.import_module(f"gelulab.backends.{backend_name}.hf")
    cfg = json.loads((directory / "config.json").read_text())
    model = hf.load(directory)
    info = hf.describe(model)
    assert info["model"] == "BertModel" and info["activation"] == "GELUActivation" and cfg["hidden_act"] == "gelu"
    tokenizer = bert.load_pretrained(directory).tokenizer
    ids, mask = bert.tokenize(tokenizer, ["A man is playing a guitar.", "Cats sleep a lot.", "It rained all day."])
    hidden = hf.hidden_states(model, ids, mask)
    assert len(hidden) == cfg["num_hidden_layers"] + 1
    assert all(h.dtype == np.float32 and h.shape == (*ids.shape, cfg["hidden_size"]) for h in hidden)
    before = bert.mean_pool(hidden[-1], mask)
    targets = np.roll(before, 1, axis=0)  # each sentence distilled toward another's embedding
    frozen = {k: v.detach().clone() for k, v in model.named_parameters() if not k.startswith("encoder.layer.")}
    trained = {k: v.detach().clone() for k, v in model.named_parameters() if k.startswith("encoder.layer.")}
    losses = hf.finetune(model, ids, mask, targets, np.array([[0, 1, 2]] * 3), 1e-4)
    assert len(losses) == 3 and losses[0] == pytest.approx(1 - bert.cosine_rows(before, targets).mean(), abs=1e-5)
    assert losses[-1] < losses[0]
    params = dict(model.named_parameters())
    assert frozen and all(np.array_equal(params[k].detach().numpy(), v.numpy()) for k, v in frozen.items())
    assert any(not np.array_equal(params[k].detach().numpy(), v.numpy()) for k, v in trained.items())
    assert not any(p.requires_grad for p in model.parameters())

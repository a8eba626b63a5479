"""gelulab's activations on native arrays (gelulab.api): dispatch on the array's type, the same kind out, values
against the correctly rounded mpmath reference, the frameworks' autodiff and compilers, and the TypeError for
arrays that are not accepted.

References: core.parity.reference (mpmath, correctly rounded) for values and first derivatives; each framework's own
function, called here directly, for impl="builtin".
"""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import array_namespace, requires

import gelulab
from gelulab.backends import REGISTRY, capabilities, get_backend
from gelulab.core.activations import ACTIVATIONS, get_activation
from gelulab.core.parity.reference import reference

KEYS = list(ACTIVATIONS)
X = np.linspace(-8.0, 8.0, 129)  # step 1/8: exact in every dtype used here


def native(name, a):
    """numpy array -> the framework's own array (torch.Tensor, jax.Array, tf.Tensor, numpy copy; another backend's
    by its own conversion, which tests/test_backend_contract.py checks)."""
    if name == "torch":
        import torch

        return torch.from_numpy(a.copy())
    if name == "jax":
        import jax.numpy as jnp

        return jnp.asarray(a)
    if name == "tensorflow":
        import tensorflow as tf

        return tf.constant(a)
    if name == "numpy":
        return a.copy()
    return get_backend(name).asarray(a)


def kind(name):
    """The array type a framework's functions return."""
    if name == "torch":
        import torch

        return torch.Tensor
    if name == "jax":
        import jax

        return jax.Array
    if name == "tensorflow":
        import tensorflow as tf

        return tf.Tensor
    if name == "numpy":
        return np.ndarray
    return type(native(name, np.zeros(1, np.float32)))


def to_numpy(y):
    y = y.detach().numpy() if hasattr(y, "detach") else y
    return np.asarray(y.numpy() if hasattr(y, "numpy") and not isinstance(y, np.ndarray) else y)


def dtypes(name):
    """float32 everywhere; float64 where the framework has it without a global setting changed by this test."""
    if name == "jax":
        import jax

        return ["float32", "float64"] if jax.config.read("jax_enable_x64") else ["float32"]
    return ["float32", "float64"]


def close(got, key, x, dtype, order=0):
    want = reference(key, x, dtype, order).astype(np.float64)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-30)


def builtin(name, key):
    """The framework's own function for `key`, written out here (None where it has none)."""
    if name == "torch":
        import torch
        import torch.nn.functional as F

        table = {"relu": F.relu, "gelu_none": lambda x: F.gelu(x, approximate="none"),
                 "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
                 "gelu_sigmoid": lambda x: x * torch.sigmoid(1.702 * x), "silu": F.silu}
    elif name == "jax":
        import jax

        table = {"relu": jax.nn.relu, "gelu_none": lambda x: jax.nn.gelu(x, approximate=False),
                 "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
                 "gelu_sigmoid": lambda x: x * jax.nn.sigmoid(1.702 * x), "silu": jax.nn.silu}
    elif name == "tensorflow":
        import tensorflow as tf

        table = {"relu": tf.nn.relu, "gelu_none": lambda x: tf.nn.gelu(x, approximate=False),
                 "gelu_tanh": lambda x: tf.nn.gelu(x, approximate=True),
                 "gelu_sigmoid": lambda x: x * tf.math.sigmoid(1.702 * x), "silu": tf.nn.silu}
    else:
        return None
    return table.get(key)


@pytest.fixture
def api_path(monkeypatch):
    """For a test of the API (dispatch, kind, dtype, shape, names) rather than of the kernels' compiled loops: the
    torch kernel serves its eager calls by its float64 path (GELULAB_KERNEL_COMPILE=off; the same accuracy contract),
    so this test builds no loop. The loops themselves are judged by tests/test_parity.py (every entry, dtype and
    order), tests/test_kernels.py and, for shapes and layouts, tests/test_torch_eager.py; the gradient and
    torch.func tests below keep the loop."""
    monkeypatch.setenv("GELULAB_KERNEL_COMPILE", "off")


# --- values, kind, dtype ----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("api_path")
@pytest.mark.parametrize("impl", ["kernel", "formula"])
@pytest.mark.parametrize("key", KEYS)
def test_same_kind_dtype_shape_and_reference_values(backend_name, key, impl):
    if impl not in get_backend(backend_name).impls(key):
        pytest.skip(f"{backend_name} has no {impl} for {key}")
    for dtype in dtypes(backend_name):
        a = X.astype(dtype).reshape(3, 43)
        y = gelulab.apply(key, native(backend_name, a), impl)
        assert isinstance(y, kind(backend_name))
        out = to_numpy(y)
        assert out.dtype == np.dtype(dtype) and out.shape == (3, 43)
        close(out.ravel(), key, X.astype(dtype), dtype)


@pytest.mark.parametrize("key", KEYS)
def test_builtin_impl_is_the_framework_function(backend_name, key):
    fn = builtin(backend_name, key)
    if fn is None:
        pytest.skip(f"{backend_name} has no builtin for {key} written in this test")
    x = native(backend_name, X.astype(np.float32))
    np.testing.assert_array_equal(to_numpy(gelulab.apply(key, x, impl="builtin")), to_numpy(fn(x)))


@pytest.mark.parametrize("key", KEYS)
def test_the_default_is_the_framework_function(backend_name, key):
    """With no impl named, gelulab.apply / gelu / relu / silu / activation compute the framework's own function
    for the variant (written out in `builtin` above, from each framework's documentation), bit for bit; a backend
    with no builtin for the entry computes gelulab's formula."""
    x = native(backend_name, X.astype(np.float32))
    fn = builtin(backend_name, key)
    want = to_numpy(fn(x)) if fn is not None else to_numpy(gelulab.apply(key, x, impl="formula"))
    if fn is None and get_backend(backend_name).has_builtin(key):
        pytest.skip(f"{backend_name}'s builtin for {key} is not written in this test")
    np.testing.assert_array_equal(to_numpy(gelulab.apply(key, x)), want)
    np.testing.assert_array_equal(to_numpy(gelulab.activation(key)(x)), want)
    act = get_activation(key)
    named = {"relu": gelulab.relu, "silu": gelulab.silu}.get(key)
    if act.op == "gelu":
        np.testing.assert_array_equal(to_numpy(gelulab.gelu(x, approximate=act.mode)), want)
    elif named is not None:
        np.testing.assert_array_equal(to_numpy(named(x)), want)


@pytest.mark.usefixtures("api_path")
def test_named_functions_match_apply(backend_name):
    x = native(backend_name, X.astype(np.float32))
    for mode in ("none", "tanh", "sigmoid"):
        for impl in (None, "formula"):
            np.testing.assert_array_equal(to_numpy(gelulab.gelu(x, approximate=mode, impl=impl)),
                                          to_numpy(gelulab.apply(f"gelu_{mode}", x, impl)))
    close(to_numpy(gelulab.relu(x)), "relu", X.astype(np.float32), "float32")
    close(to_numpy(gelulab.activation("gelu_tanh", "formula")(x)), "gelu_tanh", X.astype(np.float32), "float32")


@pytest.mark.usefixtures("api_path")
def test_silu_follows_the_catalogue(backend_name):
    x = native(backend_name, X.astype(np.float32))
    if "silu" in ACTIVATIONS:
        close(to_numpy(gelulab.silu(x, impl="formula")), "silu", X.astype(np.float32), "float32")
    else:
        with pytest.raises(ValueError, match="silu"):
            gelulab.silu(x)


def test_tf_variable_gives_a_tensor():
    tf = requires("tensorflow")
    v = tf.Variable(X.astype(np.float32))
    for impl in (None, "kernel"):
        y = gelulab.gelu(v, approximate="tanh", impl=impl)
        assert isinstance(y, tf.Tensor) and not isinstance(y, tf.Variable)
    close(y.numpy(), "gelu_tanh", X.astype(np.float32), "float32")


# --- autodiff and compilers -------------------------------------------------------------------------------------
# gelulab's own values (the opt-in kernel, within 1 ULP) through each framework's autodiff and compiler, against
# mpmath; the default is the framework's function itself (test_the_default_is_the_framework_function).
KERNEL = "kernel"
KERNEL_KEYS = [k for k in KEYS if get_activation(k).kernel is not None]  # the entries with a kernel


@pytest.mark.parametrize("key", KERNEL_KEYS)
def test_gradient_through_the_framework(backend_name, key):
    x32 = X.astype(np.float32)
    if backend_name == "torch":
        import torch

        x = torch.from_numpy(x32.copy()).requires_grad_(True)
        gelulab.apply(key, x, "kernel").sum().backward()
        grad = x.grad.numpy()
    elif backend_name == "jax":
        import jax

        # tracers under vmap and grad
        grad = np.asarray(jax.vmap(jax.grad(lambda t: gelulab.apply(key, t, KERNEL)))(x32))
    elif backend_name == "tensorflow":
        import tensorflow as tf

        v = tf.Variable(x32)
        with tf.GradientTape() as tape:
            y = gelulab.apply(key, v, KERNEL)
        grad = tape.gradient(y, v).numpy()
    else:
        assert not capabilities(backend_name).autodiff, f"{backend_name} has autodiff: write its gradient here"
        pytest.skip(f"{backend_name} has no autodiff")
    close(grad, key, x32, "float32", order=1)


@pytest.mark.compile
@pytest.mark.parametrize("key", KERNEL_KEYS)
def test_jax_jit(key):
    jax = requires("jax")
    x = X.astype(np.float32)
    f = jax.jit(lambda t: gelulab.apply(key, t, KERNEL))
    close(np.asarray(f(x)), key, x, "float32")
    np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(gelulab.apply(key, jax.numpy.asarray(x), KERNEL)))


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("key", KERNEL_KEYS)
def test_torch_compile_fullgraph(key):
    torch = requires("torch")
    x = torch.from_numpy(X.astype(np.float32))
    f = torch.compile(lambda t: gelulab.apply(key, t, KERNEL), fullgraph=True, dynamic=False)
    close(f(x).numpy(), key, X.astype(np.float32), "float32")


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("key", KERNEL_KEYS)
def test_tf_function_jit_compile(key):
    tf = requires("tensorflow")
    x = tf.constant(X.astype(np.float32))
    f = tf.function(lambda t: gelulab.apply(key, t, KERNEL), jit_compile=True)
    close(f(x).numpy(), key, X.astype(np.float32), "float32")


# --- refused input ----------------------------------------------------------------------------------------------


def _bad_arrays(name):
    if name == "torch":
        import torch

        return [(torch.arange(3), "int64"), (torch.tensor([True]), "bool"), (torch.tensor([1j]), "complex64")]
    if name == "jax":
        import jax.numpy as jnp

        return [(jnp.arange(3, dtype=jnp.int32), "int32"), (jnp.array([True]), "bool"),
                (jnp.array([1j], dtype=jnp.complex64), "complex64")]
    if name == "tensorflow":
        import tensorflow as tf

        return [(tf.constant([1, 2]), "int32"), (tf.constant([True]), "bool"), (tf.constant([1j]), "complex128")]
    xp = array_namespace(name)  # numpy, or an Array API library's namespace: its asarray
    return [(xp.asarray(np.arange(3, dtype=np.int64)), "int64"), (xp.asarray(np.array([True])), "bool"),
            (xp.asarray(np.array([1j])), "complex128")]


def test_integer_bool_complex_raise_typeerror(backend_name):
    for x, dtype in _bad_arrays(backend_name):
        for call in (gelulab.gelu, gelulab.relu, lambda t: gelulab.apply("gelu_tanh", t)):
            with pytest.raises(TypeError, match=rf"of dtype {dtype}; expected a floating dtype.*float32"):
                call(x)


@pytest.mark.parametrize("value", [[1.0, 2.0], 1.0, "x", None, (1.0,)])
def test_unknown_types_raise_typeerror_naming_the_accepted_ones(value):
    with pytest.raises(TypeError, match=rf"got a {type(value).__name__}; expected a ") as e:
        gelulab.gelu(value)
    for record in REGISTRY.values():  # every backend's array type is named
        assert re.search(rf"\ban? {re.escape(record.array_type)}\b", str(e.value)), record.name


@pytest.mark.parametrize("approximate", [True, False, None, "exact"])
def test_approximate_must_be_an_explicit_mode(approximate):
    with pytest.raises(ValueError, match="approximate="):
        gelulab.gelu(np.ones(2), approximate=approximate)


def test_unknown_impl_and_key():
    with pytest.raises(ValueError, match="impl='fast'"):
        gelulab.relu(np.ones(2), impl="fast")
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        gelulab.activation("swish")


FRAMEWORK_PACKAGES = {c.package for c in REGISTRY.values() if c.package != "numpy"} | {"keras", "flax"}


@pytest.mark.subprocess
def test_no_framework_is_imported_that_the_caller_did_not_import():
    code = ("import sys, numpy as np, gelulab, gelulab.layers\n"
            "y = gelulab.gelu(np.linspace(-3, 3, 7), approximate='tanh')\n"
            "assert isinstance(y, np.ndarray) and y.dtype == np.float64\n"
            "r = gelulab.identify(lambda x: x / (1 + np.exp(-1.702 * x)))\n"
            "assert r.variant == 'gelu_sigmoid', r\n"
            f"print(sorted({FRAMEWORK_PACKAGES!r} & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("key", KEYS)
def test_the_kernel_computes_float32_alone(key):
    """impl="kernel" computes float32 in float32 alone (no float64 value in the traced program), where
    impl="formula" widens to float64, and the default (the framework's op, jax.nn) has none either; an entry
    without a kernel refuses impl="kernel"."""
    jax = requires("jax")
    x = X.astype(np.float32)

    def has_f64(impl=None):
        fn = (lambda t: gelulab.apply(key, t)) if impl is None else (lambda t: gelulab.apply(key, t, impl))
        return "f64" in str(jax.make_jaxpr(fn)(x))

    assert has_f64("formula") or key == "relu"
    assert not has_f64()
    if get_activation(key).kernel is None:
        with pytest.raises(ValueError, match="kernel"):
            gelulab.apply(key, jax.numpy.asarray(x), "kernel")
        return
    assert not has_f64("kernel")
    close(np.asarray(gelulab.apply(key, jax.numpy.asarray(x), "kernel")), key, x, "float32")


XD = X[np.abs(X) > 1e-3].astype(np.float32)  # ReLU's derivatives are not defined at 0


@pytest.mark.parametrize("key", KERNEL_KEYS)
def test_jax_forward_and_reverse_mode_of_the_kernel(key):
    jax = requires("jax")
    f = lambda t: gelulab.apply(key, t, "kernel")
    close(jax.jvp(f, (XD,), (np.ones_like(XD),))[1], key, XD, "float32", order=1)
    close(np.diag(jax.jacfwd(f)(XD[:16])), key, XD[:16], "float32", order=1)
    close(np.diag(jax.hessian(lambda t: f(t).sum())(XD[:16])), key, XD[:16], "float32", order=2)
    close(jax.vmap(jax.grad(jax.grad(f)))(XD), key, XD, "float32", order=2)


@pytest.mark.parametrize("key", KERNEL_KEYS)
def test_torch_func_transforms_of_the_kernel(key):
    torch = requires("torch")
    x = torch.from_numpy(XD)
    f = lambda t: gelulab.apply(key, t, "kernel")
    close(torch.diag(torch.func.jacrev(f)(x[:16])).numpy(), key, XD[:16], "float32", order=1)
    close(torch.diag(torch.func.jacfwd(f)(x[:16])).numpy(), key, XD[:16], "float32", order=1)
    close(torch.diag(torch.func.hessian(lambda t: f(t).sum())(x[:16])).numpy(), key, XD[:16], "float32", order=2)
    close(torch.func.vmap(torch.func.grad(torch.func.grad(f)))(x).numpy(), key, XD, "float32", order=2)
    close(torch.func.jvp(f, (x,), (torch.ones_like(x),))[1].numpy(), key, XD, "float32", order=1)


@pytest.mark.compile
def test_torch_jit_trace_and_export_of_a_kernel_give_the_same_outputs():
    """The eager model, its torch.jit.trace and its torch.export each compute the kernel within 1 ULP of the
    correctly rounded mpmath value at the Linear layer's outputs (they run the kernel's ops through different
    namespaces on a CPU: Dekker's split in the eager loop, bit masks or their portable form when recorded)."""
    torch = requires("torch")
    from gelulab.core.numerics.metrics import ulp_distance
    from gelulab.layers.torch import GELU

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), GELU(impl="kernel"))
    z = torch.from_numpy(XD.reshape(-1, 1).repeat(3, axis=1))
    with torch.no_grad():
        h = model[0](z).numpy()
    ref = reference("gelu_none", h.ravel(), "float32", 0).reshape(h.shape)
    traced = torch.jit.trace(model, torch.randn(2, 3))
    exported = torch.export.export(model, (z,))
    for name, out in (("eager", model(z)), ("jit.trace", traced(z)), ("export", exported.module()(z))):
        u = ulp_distance(out.detach().numpy(), ref, "float32")
        assert u.max() <= 1, (name, u.max())

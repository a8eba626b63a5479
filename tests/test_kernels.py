"""gelulab's float32 kernels (impl "kernel", core.numerics.kernels) per backend: against the correctly rounded mpmath
reference on a spread of float32 bit patterns and the hard points (the zeros of f' and f'', the underflow tails,
the smallest normal result), float32 only in the graph, the special values, and second-order graphs that stay
connected (ReLU included). The catalogue fields the kernels and `gelulab verify` read (kernel: clamp points and
root of f'; float64; half_at_zero) are checked against mpmath, and an entry without a kernel is left out
everywhere. `gelulab verify` checks every float32 input; tests/test_verify.py runs it on a stride.
"""
from __future__ import annotations

import dataclasses
from functools import cache

import mpmath
import numpy as np
import pytest
from parity_shapes import call

from gelulab.core.activations import ACTIVATIONS
from gelulab.core.numerics import kernel_coeffs as KC
from gelulab.core.numerics import kernel_fit
from gelulab.core.numerics import kernels as K
from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.numerics.metrics import ulp_distance
from gelulab.core.parity.reference import reference
from gelulab.core.parity.tolerances import KERNEL_GOALS

pytestmark = pytest.mark.backend_needs("kernels")  # on the backends that have kernels (their record)
KEYS = [k for k, a in ACTIVATIONS.items() if a.kernel is not None]
TINY = float(np.finfo(np.float32).smallest_normal)


def _inputs() -> np.ndarray:
    bits = np.arange(0, 1 << 32, (1 << 21) + 7, dtype=np.uint64).astype(np.uint32)  # 2048 spread bit patterns
    x = bits.view(np.float32)
    hard = [-KC.GELU_A0_HI, -KC.SILU_A0_HI, -KC.GELU_SIGMOID_A0_HI, -KC.GELU_TANH_A0_HI,  # zeros of f'
            KC.SILU_B0_HI, KC.GELU_SIGMOID_B0_HI, KC.GELU_TANH_B0_HI, 2**0.5,  # zeros of f''
            -13.0, -13.19, -9.9, -52.0, -85.0, -87.0, -60.0, 2.0**-60, -(2.0**-60), 1.0, 2.0, 1e4]
    around = []
    for h in hard:
        c = np.float32(h)
        around += [np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))]
    specials = np.array([0x00FFFFFF, 0x01000000, 0x81000000, 0x00800000], np.uint32).view(np.float32)
    return np.concatenate([x[np.isfinite(x)], np.array(around, np.float32), specials])


X = _inputs()


@cache
def _kernel_fn(backend, key: str, order: int, mode: str):
    """backend.function(key, "kernel", order, mode), built once per module. The tests call it through
    parity_shapes.call: a compiled mode (static shapes) runs at the parity suite's input length, the program the
    parity cells compile, instead of tracing and compiling one for each shape here."""
    return backend.function(key, "kernel", order, mode)


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize("key", KEYS)
def test_kernel_within_its_ulp_goal(backend, key, order):
    tol = KERNEL_GOALS[("float32", order)].max_ulp
    for mode in backend.modes:
        fn = _kernel_fn(backend, key, order, mode)
        with np.errstate(all="ignore"):
            y = call(backend, fn, X, mode)
        ref = reference(key, X, "float32", order)
        x64, r64 = X.astype(np.float64), ref.astype(np.float64)
        normal = ((x64 == 0) | (np.abs(x64) >= TINY)) & ((r64 == 0) | (np.abs(r64) >= TINY))
        u = ulp_distance(y, ref, "float32")[normal]
        worst = X[normal][np.argmax(u)]
        assert u.max() <= tol, f"{mode}: {u.max()} ULP at x={worst!r} ({np.float32(worst).view(np.uint32):#010x})"


@pytest.mark.parametrize("key", [k for k in KEYS if ACTIVATIONS[k].half_at_zero])
def test_smallest_normal_result_survives_flush_to_zero(backend, key):
    # x = 0x00FFFFFF: x/2 is a tie just below 2^-126 and f(x) = x/2 + O(x^2) rounds up to 2^-126 (XLA flushes
    # the formula's float64 -> float32 rounding to 0); likewise bfloat16 0x00FF. The float32 input is judged at
    # the head of an array shaped as X (in eager mode the torch kernel's loop, which a 1-element call would leave
    # for its float64 path; a compiled mode runs at the parity length, parity_shapes.call)
    x = np.concatenate([np.array([0x00FFFFFF], np.uint32).view(np.float32), X[1:]])
    xb = np.array([0x00FF], np.uint16).view(get_dtype("bfloat16").np_dtype)
    for mode in backend.modes:
        fn = _kernel_fn(backend, key, 0, mode)
        assert call(backend, fn, x, mode)[0] == np.float32(2.0**-126), mode
        assert float(call(backend, fn, xb, mode)[0]) == 2.0**-126, mode


@pytest.mark.parametrize("key", KEYS)
def test_special_values(backend, key):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    # judged at the head of an array shaped as X: the torch kernel's eager loop (see above); a compiled mode runs
    # at the parity length (parity_shapes.call), as in test_kernel_within_its_ulp_goal
    padded = np.concatenate([x, X[len(x):]])
    for order in (0, 1, 2):
        ref = reference(key, x, "float32", order)
        for mode in backend.modes:
            fn = _kernel_fn(backend, key, order, mode)
            y = call(backend, fn, padded, mode)[:len(x)]
            same = (y == ref) | (np.isnan(y) & np.isnan(ref))
            if order > 0 and not ACTIVATIONS[key].nan_derivative:
                same[4] = True  # ReLU'(NaN) is not defined (core.parity.tolerances.UNCOMPARED_NAN_DERIVATIVE)
            if order == 0 and ACTIVATIONS[key].zero_sign:
                zero = ref == 0
                same[zero] &= np.signbit(y[zero]) == np.signbit(ref[zero])  # f(-0) = -0, f(-inf) = -0
            assert same.all(), (order, mode, y, ref)


def _dtypes_in_graph(backend_name, fn, x):
    """The dtype names of every value the framework's graph of fn(x) creates."""
    if backend_name == "jax":
        import jax

        def walk(jaxpr):
            for eqn in jaxpr.eqns:
                for v in eqn.outvars:
                    yield str(v.aval.dtype)
                for sub in jax.core.subjaxprs(jaxpr) if hasattr(jax.core, "subjaxprs") else ():
                    yield from walk(sub)
                for p in eqn.params.values():
                    inner = getattr(p, "jaxpr", None)
                    if inner is not None:
                        yield from walk(getattr(inner, "jaxpr", inner))

        return set(walk(jax.make_jaxpr(fn)(x).jaxpr))
    if backend_name == "tensorflow":
        import tensorflow as tf

        graph = tf.function(fn).get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph
        out = set()
        for op in graph.get_operations():
            out |= {t.dtype.name for t in op.outputs}
            for f in getattr(graph, "_functions", {}).values():
                for inner in f.graph.get_operations() if hasattr(f, "graph") else ():
                    out |= {t.dtype.name for t in inner.outputs}
        return out
    if backend_name == "torch":
        from torch.fx.experimental.proxy_tensor import make_fx

        gm = make_fx(fn)(x)
        return {str(n.meta["val"].dtype).replace("torch.", "") for n in gm.graph.nodes
                if hasattr(n.meta.get("val"), "dtype")}
    return None


@pytest.mark.parametrize("key", KEYS)
def test_no_float64_in_the_graph(backend, key):
    x = backend.asarray(np.linspace(-20, 20, 64).astype(np.float32))
    for order in (0, 1):
        dts = _dtypes_in_graph(backend.name, backend.function(key, "kernel", order), x)
        if dts is None:
            pytest.skip("numpy has no graph; it runs the same core.numerics.kernels code as the other backends")
        assert "float64" not in dts, (order, dts)


def test_relu_second_order_graph_is_connected(backend):
    # ReLU'' = 0 (NaN at NaN) from the framework's own autograd, not an error or a missing gradient
    x = np.array([-1.0, 0.0, 2.0, np.nan], np.float32)
    y2 = backend.to_numpy(backend.function("relu", "kernel", 2)(backend.asarray(x)))
    assert y2[:3].tolist() == [0.0, 0.0, 0.0] and np.isnan(y2[3])
    if backend.name == "torch":
        import torch

        t = torch.tensor(x[:3], requires_grad=True)
        (g,) = torch.autograd.grad(backend.relu(t, impl="kernel").sum(), t, create_graph=True)
        (g2,) = torch.autograd.grad(g.sum(), t)  # raises if the graph of g is not connected to t
        assert g.tolist() == [0.0, 0.0, 1.0] and g2.tolist() == [0.0, 0.0, 0.0]
    if backend.name == "tensorflow":
        import tensorflow as tf

        t = tf.constant(x[:3])
        with tf.GradientTape() as outer:
            outer.watch(t)
            with tf.GradientTape() as inner:
                inner.watch(t)
                y = backend.relu(t, impl="kernel")
            g = inner.gradient(y, t)
        g2 = outer.gradient(g, t)
        assert g2 is not None and g2.numpy().tolist() == [0.0, 0.0, 0.0]


def test_coefficients_are_what_the_fitting_script_makes():
    # a regeneration check (the committed core/numerics/kernel_coeffs.py is current), not a reference check: the exp
    # polynomial and a root window refitted by core/numerics/kernel_fit.py give the committed coefficients. The window's
    # weighted least squares run through LAPACK, whose float64 bits depend on the CPU's BLAS kernels (OpenBLAS picks
    # them by processor), so its float32-rounded coefficients may differ by a rounding step: measured, SILU_J2's
    # last coefficient is 1 float32 step apart between an AMD EPYC and an Intel Xeon
    assert tuple(kernel_fit.fit_exp_q()["coeffs"]) == KC.COEFFS["EXP_Q"]
    root = kernel_fit.sigma_root("silu")
    j = kernel_fit._j_function("silu")
    fit = kernel_fit.fit_window(lambda d: j(root + d) / d, kernel_fit.WINDOW)
    got, committed = np.array(fit["coeffs"], np.float32), np.array(KC.COEFFS["SILU_J2"], np.float32)
    assert got.shape == committed.shape
    steps = np.abs(got.view(np.int32).astype(np.int64) - committed.view(np.int32).astype(np.int64))
    assert steps.max() <= 2, (fit["coeffs"], KC.COEFFS["SILU_J2"])
    assert fit["max_rel_err"] < 2.0**-29


@pytest.mark.parametrize("key", KEYS)
def test_catalogue_kernel_fields_agree_with_mpmath(key):
    # what the kernels and `gelulab verify` read from an entry with a kernel, against the mpmath reference
    act = ACTIVATIONS[key]
    kern = act.kernel
    assert all(callable(kern.function(o)) for o in (0, 1, 2))
    assert act.float64 is not None, "verify's oracle needs the float64 closed form"
    x = np.array([-30.0, -5.0, -1.3, -0.3, 1e-3, 0.7, 2.0, 9.0], np.float64)
    for order in (0, 1):
        with np.errstate(all="ignore"):
            v = act.float64(x, order)
        with mpmath.workdps(40):
            t = np.array([float(act.mp(mpmath.mpf(float(xi)), order)) for xi in x])
        assert np.all(np.abs(v - t) <= 2.0**-40 * np.abs(t) + 1e-300), (order, v, t)
    # half_at_zero: f(x) = x/2 + c x^2, c > 0, iff f(x) - x/2 > 0 at a small x of either sign
    with mpmath.workdps(40):
        h = mpmath.mpf(2) ** -20
        bump = [act.mp(s * h, 0) - s * h / 2 for s in (1, -1)]
    assert act.half_at_zero == all(b > 0 and abs(b) < h**2 for b in bump)
    if 1 in act.root_windows:
        x0 = -kern.d1_root
        assert any(lo < x0 < hi for lo, hi in act.root_windows[1])
        assert np.float32(x0) == x0 and abs(act.mp(mpmath.mpf(x0), 1)) < 2.0**-23
    else:
        assert kern.d1_root is None
    if kern.a_max is not None:
        for order, a in enumerate(kern.a_max):
            beyond = np.array([np.nextafter(np.float32(a), np.float32(np.inf))], np.float32)
            far = np.array([beyond[0], -beyond[0]], np.float32)
            ref = reference(key, far, "float32", order).astype(np.float64)
            if order < 2:  # beyond the clamp point f(-a), f'(-a) round to -0, f(a) to a and f'(a) to 1
                assert ref[1] == 0.0 and np.signbit(ref[1]) and ref[0] == (far[0], 1.0)[order], (order, a, ref)
            else:  # f''(+-a) is below the smallest normal (the kernel gives 0; subnormal results are not judged)
                assert np.all(np.abs(ref) < TINY), (order, a, ref)


def test_an_entry_without_a_kernel_is_refused_and_left_out(backend, monkeypatch):
    # the kernel cells follow the catalogue field, not a list of keys: set one entry's kernel to None
    from gelulab.benchmarks.grid import DIRECTIONS, GridSpec
    from gelulab.experiments.parity.engine import groups
    from gelulab.experiments.verify import oracle

    key = next(k for k in KEYS if ACTIVATIONS[k].smooth)
    monkeypatch.setitem(ACTIVATIONS, key, dataclasses.replace(ACTIVATIONS[key], kernel=None, float64=None))
    with pytest.raises(ValueError, match=key):
        backend.function(key, "kernel")
    with pytest.raises(ValueError, match=key):
        K.kernel_function(ACTIVATIONS[key], 0)
    with pytest.raises(ValueError, match=key):
        oracle.float64_value(key, 0, np.zeros(1))
    assert backend.function(key, "formula") is not None
    gs = groups([backend], impls=("formula", "kernel"), keys=tuple(ACTIVATIONS), orders=(0,))
    assert {g.key for g in gs if g.impl == "kernel"} == set(KEYS) - {key}
    assert {g.key for g in gs if g.impl == "formula"} == set(ACTIVATIONS)
    spec = GridSpec((backend.name,), ("cpu",), ("eager",), tuple(ACTIVATIONS), ("formula", "kernel"), DIRECTIONS[:1],
                    ("float32",), (10,))
    cells = spec.cells(backend.name, "cpu", ("eager",))
    assert {c.activation for c in cells if c.impl == "kernel"} == set(KEYS) - {key}


def test_exp_polynomial_against_mpmath():
    # EXP_Q(r) = (e^-r - 1 + r) / r^2 on |r| <= 0.42 (core/numerics/kernel_fit.py), checked at points of its range with
    # the committed float32 coefficients evaluated in float64: the relative error of a float32-coefficient fit
    import mpmath

    coeffs = KC.COEFFS["EXP_Q"]
    for r in (-0.42, -0.3, -0.1, -1e-3, 1e-3, 0.05, 0.2, 0.42):
        q = 0.0
        for c in reversed(coeffs):
            q = q * r + c
        with mpmath.workdps(40):
            want = (mpmath.exp(-mpmath.mpf(r)) - 1 + mpmath.mpf(r)) / mpmath.mpf(r) ** 2
        assert abs(q - float(want)) <= 2.0**-22 * abs(float(want)), (r, q, float(want))

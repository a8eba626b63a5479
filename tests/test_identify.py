"""gelulab.identify and `gelulab identify`: the variant of every builtin of torch, jax, TensorFlow and Keras, of
transformers' activation classes, of x sigmoid(1.702 x) and of functions that are none of them; the fault
signatures; comparing two callables; the command line.

Expected variants come from each framework's documentation: torch.nn.functional.gelu (approximate='none' is
x Phi(x), 'tanh' the tanh form), jax.nn.gelu (approximate=True by default: the tanh form), tf.nn.gelu and
keras.activations.gelu (approximate=False by default: exact), and the formula each transformers class states in
transformers/activations.py. The fault signatures expected are the upstream faults the parity suite lists
(core/known_faults.py: torch's 1+erf, the three frameworks' 1+tanh, NaN at -inf, tf.nn.gelu's float32 constants).
"""
from __future__ import annotations

import functools
import importlib.util
import math

import mpmath
import numpy as np
import pytest
import readme_blocks

from gelulab import cli, identify
from gelulab.core.activations import ACTIVATIONS
from gelulab.probe import PROBE, SEPARATING, tolerance

SILU = "silu" if "silu" in ACTIVATIONS else None  # SiLU is a variant once the catalogue has it


def _have(name):
    return importlib.util.find_spec(name) is not None


def _cases():
    """(id, framework module needed, factory of the callable, expected variant, faults expected, faults absent)."""
    out = []

    def add(need, name, factory, variant, seen=(), unseen=()):
        out.append(pytest.param(need, factory, variant, seen, unseen, id=name))

    import_torch = lambda: __import__("torch")
    add("torch", "F.gelu", lambda: import_torch().nn.functional.gelu, "gelu_none",
        ("1+erf cancellation", "wrong at -inf"))
    add("torch", "F.gelu-tanh", lambda: functools.partial(import_torch().nn.functional.gelu, approximate="tanh"),
        "gelu_tanh", ("1+tanh cancellation", "wrong at -inf"))
    add("torch", "nn.GELU", lambda: import_torch().nn.GELU(), "gelu_none", ("1+erf cancellation",))
    add("torch", "nn.GELU-tanh", lambda: import_torch().nn.GELU("tanh"), "gelu_tanh", ("1+tanh cancellation",))
    add("torch", "F.relu", lambda: import_torch().nn.functional.relu, "relu")
    add("torch", "nn.ReLU", lambda: import_torch().nn.ReLU(), "relu")
    add("torch", "F.silu", lambda: import_torch().nn.functional.silu, SILU)
    add("torch", "nn.SiLU", lambda: import_torch().nn.SiLU(), SILU)
    add("torch", "x*sigmoid(1.702x)", lambda: (lambda x: x * import_torch().sigmoid(1.702 * x)), "gelu_sigmoid")
    add("torch", "x*sigmoid(1.5x)", lambda: (lambda x: x * import_torch().sigmoid(1.5 * x)), None)
    add("torch", "0.5x(1+erf)", lambda: (lambda x: 0.5 * x * (1 + import_torch().erf(x / math.sqrt(2)))),
        "gelu_none", ("1+erf cancellation",))
    add("torch", "tanh", lambda: import_torch().tanh, None)

    jax_nn = lambda: __import__("jax").nn
    add("jax", "jax.nn.gelu", lambda: jax_nn().gelu, "gelu_tanh", ("1+tanh cancellation", "wrong at -inf"))
    add("jax", "jax.nn.gelu-exact", lambda: functools.partial(jax_nn().gelu, approximate=False), "gelu_none",
        ("wrong at -inf",), ("1+erf cancellation",))
    add("jax", "jax.nn.relu", lambda: jax_nn().relu, "relu")
    add("jax", "jax.nn.silu", lambda: jax_nn().silu, SILU)
    add("jax", "jax x*sigmoid(1.702x)", lambda: (lambda x: x * jax_nn().sigmoid(1.702 * x)), "gelu_sigmoid")

    tf_nn = lambda: __import__("tensorflow").nn
    add("tensorflow", "tf.nn.gelu", lambda: tf_nn().gelu, "gelu_none", ("float64 imprecise", "wrong at -inf"),
        ("1+erf cancellation",))
    add("tensorflow", "tf.nn.gelu-tanh", lambda: functools.partial(tf_nn().gelu, approximate=True), "gelu_tanh",
        ("1+tanh cancellation",))
    add("tensorflow", "tf.nn.relu", lambda: tf_nn().relu, "relu")
    add("tensorflow", "tf.nn.silu", lambda: tf_nn().silu, SILU)

    keras = lambda: __import__("keras")
    add("keras", "keras.activations.gelu", lambda: keras().activations.gelu, "gelu_none")
    add("keras", "keras gelu approximate", lambda: functools.partial(keras().activations.gelu, approximate=True),
        "gelu_tanh")
    add("keras", "keras.activations.relu", lambda: keras().activations.relu, "relu")
    add("keras", "keras.activations.silu", lambda: keras().activations.silu, SILU)
    add("keras", "keras Activation layer", lambda: keras().layers.Activation("gelu"), "gelu_none")

    hf = lambda: importlib.import_module("transformers.activations")
    for cls, kwargs, variant, seen in (
        ("GELUActivation", {}, "gelu_none", ("1+erf cancellation",)),
        ("GELUActivation", {"use_gelu_python": True}, "gelu_none", ("1+erf cancellation",)),
        ("GELUTanh", {}, "gelu_tanh", ("1+tanh cancellation",)),
        ("GELUTanh", {"use_gelu_tanh_python": True}, "gelu_tanh", ("1+tanh cancellation",)),
        ("PytorchGELUTanh", {}, "gelu_tanh", ()),
        ("NewGELUActivation", {}, "gelu_tanh", ("1+tanh cancellation",)),
        ("FastGELUActivation", {}, "gelu_tanh", ()),
        ("AccurateGELUActivation", {}, "gelu_tanh", ()),
        ("QuickGELUActivation", {}, "gelu_sigmoid", ()),
        ("SiLUActivation", {}, SILU, ()),
        ("ClippedGELUActivation", {"min": -10.0, "max": 10.0}, None, ()),
    ):
        add("transformers", f"transformers.{cls}{'-python' if kwargs and 'min' not in kwargs else ''}",
            (lambda c=cls, k=kwargs: getattr(hf(), c)(**k)), variant, seen)

    for mode in ("none", "tanh", "sigmoid"):
        add("numpy", f"gelulab.gelu-{mode}", lambda m=mode: functools.partial(__import__("gelulab").gelu,
                                                                                approximate=m),
            f"gelu_{mode}", (), ("1+erf cancellation", "1+tanh cancellation", "negative tail lost", "wrong at -inf",
                                 "wrong at +inf", "float64 imprecise"))
    add("numpy", "numpy x/(1+exp(-1.702x))", lambda: (lambda x: x / (1 + np.exp(-1.702 * x))), "gelu_sigmoid")
    return out


@pytest.mark.parametrize("need, factory, variant, seen, unseen", _cases())
def test_identifies_the_documented_variant(need, factory, variant, seen, unseen):
    if not _have(need):
        pytest.skip(f"{need} is not installed")
    result = identify(factory())
    assert result.variant == variant, str(result)
    names = {f.name for f in result.faults}
    assert set(seen) <= names, str(result)
    assert not set(unseen) & names, str(result)
    if variant is not None:
        assert result.distances[variant] <= result.tolerance
        assert sorted(result.distances.values())[1] > 4 * result.tolerance  # the next variant is far
    assert result.seconds < 30  # a sanity bound only; the time per callable is measured by the benchmark


def test_tolerance_is_an_eighth_of_the_tanh_exact_separation():
    # the largest |tanh form - exact| on the probe, from the closed forms in mpmath (Hendrycks & Gimpel 2016)
    mpmath.mp.prec = 100
    c = mpmath.sqrt(2 / mpmath.pi)

    def gap(x):
        x = mpmath.mpf(float(x))
        exact = x / 2 * mpmath.erfc(-x / mpmath.sqrt(2))
        tanh = x / 2 * (1 + mpmath.tanh(c * (x + mpmath.mpf("0.044715") * x**3)))
        return abs(tanh - exact) / max(1, abs(exact))

    separation = max(gap(x) for x in SEPARATING if -3.0 <= x <= -2.4)
    assert 4.7e-4 < separation < 4.8e-4  # "up to 4.7e-4 near x = 2.7"
    if {"gelu_none", "gelu_tanh"} <= set(ACTIVATIONS):
        # the probe's references are rounded to float32: their differences carry a float32 ULP of |f| < 1
        assert tolerance() <= float(separation) / 8 + 1e-8
    assert np.all(PROBE.astype(np.float32).astype(np.float64)[np.isfinite(PROBE)] == PROBE[np.isfinite(PROBE)])


def test_framework_is_chosen_from_the_callable():
    torch = pytest.importorskip("torch")
    assert identify(torch.nn.GELU()).framework == "torch"
    assert identify(torch.nn.functional.gelu).framework == "torch"
    assert identify(lambda x: x * torch.sigmoid(1.702 * x)).framework == "torch"  # numpy tried first, refused
    assert identify(lambda x: np.maximum(x, 0)).framework == "numpy"
    import gelulab

    forced = identify(functools.partial(gelulab.gelu, approximate="tanh"), framework="torch")  # takes any array
    assert (forced.framework, forced.variant) == ("torch", "gelu_tanh")


def test_two_callables_same_or_different():
    torch = pytest.importorskip("torch")
    same = identify(torch.nn.GELU("tanh"), lambda x: torch.nn.functional.gelu(x, approximate="tanh"))
    assert same.same and same.a.variant == "gelu_tanh" and same.difference < 1e-6
    differ = identify(torch.nn.functional.gelu, torch.nn.GELU("tanh"))
    assert not differ.same and 4.7e-4 < differ.difference < 4.8e-4  # the tanh-vs-exact separation
    neither = identify(torch.tanh, torch.sin)
    assert not neither.same and neither.a.variant is None


def test_cross_framework_port_check():
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    import jax
    import torch

    assert not identify(torch.nn.functional.gelu, jax.nn.gelu).same  # exact vs jax's default tanh
    assert identify(torch.nn.functional.gelu, functools.partial(jax.nn.gelu, approximate=False)).same


def test_bad_callables():
    with pytest.raises(TypeError, match="not callable"):
        identify(3)
    with pytest.raises(ValueError, match="elementwise"):
        identify(lambda x: x.sum(keepdims=True))
    with pytest.raises(TypeError, match="returned dtype bool; expected a floating dtype"):
        identify(lambda x: x > 0)
    with pytest.raises(TypeError, match="could not be called on an array of any imported framework"):
        identify(lambda x: x.no_such_method())
    with pytest.raises(ValueError, match="framework="):
        identify(np.tanh, framework="mxnet")


def test_readme_identify_block():
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    readme_blocks.run("Identify")


def test_command_line(capsys):
    pytest.importorskip("torch")
    assert cli.main(["identify", "torch.nn.GELU('tanh')"]) == 0
    assert "| gelu_tanh |" in capsys.readouterr().out
    assert cli.main(["identify", "F.gelu", "lambda x: 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))"]) == 0
    assert "same variant: gelu_none vs gelu_none" in capsys.readouterr().out
    assert cli.main(["identify", "torch.nn.functional.gelu", "torch.nn.GELU('tanh')", "--json"]) == 1
    assert '"same": false' in capsys.readouterr().out
    assert cli.main(["identify", "torch.nn.GELU("]) == 2
    assert "is not a Python expression" in capsys.readouterr().err
    assert cli.main(["identify", "3"]) == 2
    assert "not a callable" in capsys.readouterr().err

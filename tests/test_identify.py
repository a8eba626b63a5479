"""gelulab.identify and `gelulab identify`: the variant of every builtin of torch, jax, TensorFlow and Keras, of
transformers' activation classes, of x sigmoid(1.702 x) and of functions that are none of them; the fault
signatures; comparing two callables; the command line, its restricted expressions (what they accept and refuse,
and that a refused one imports and runs nothing) and a callable that raises.

Expected variants come from each framework's documentation: torch.nn.functional.gelu (approximate='none' is
x Phi(x), 'tanh' the tanh form), jax.nn.gelu (approximate=True by default: the tanh form), tf.nn.gelu and
keras.activations.gelu (approximate=False by default: exact), and the formula each transformers class states in
transformers/activations.py. The fault signatures expected are the upstream faults the parity suite lists
(core/parity/known_faults.py: torch's 1+erf, the three frameworks' 1+tanh, NaN at -inf, tf.nn.gelu's float32 constants).
"""
from __future__ import annotations

import functools
import importlib.util
import math
import re

import mpmath
import numpy as np
import pytest
import readme_blocks
from conftest import available, requires

from gelulab import cli, identify
from gelulab.api.probe import PROBE, SEPARATING, CallableFailed, tolerance
from gelulab.core.activations import ACTIVATIONS
from gelulab.experiments.identify import expression as identify_expression

SILU = "silu" if "silu" in ACTIVATIONS else None  # SiLU is a variant once the catalogue has it


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

    for mode in ("none", "tanh", "sigmoid"):  # gelulab's kernel (opt-in): none of the builtins' faults
        add("numpy", f"gelulab.gelu-kernel-{mode}", lambda m=mode: functools.partial(__import__("gelulab").gelu,
                                                                                       approximate=m, impl="kernel"),
            f"gelu_{mode}", (), ("1+erf cancellation", "1+tanh cancellation", "negative tail lost", "wrong at -inf",
                                 "wrong at +inf", "float64 imprecise"))
        # the default is numpy's builtin (x * scipy.stats.norm.cdf(x), ...): the same variant, its faults its own
        add("numpy", f"gelulab.gelu-{mode}", lambda m=mode: functools.partial(__import__("gelulab").gelu,
                                                                                approximate=m), f"gelu_{mode}")
    add("numpy", "numpy x/(1+exp(-1.702x))", lambda: (lambda x: x / (1 + np.exp(-1.702 * x))), "gelu_sigmoid")
    return out


@pytest.mark.parametrize("need, factory, variant, seen, unseen", _cases())
def test_identifies_the_documented_variant(need, factory, variant, seen, unseen):
    requires(need)
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
    torch = requires("torch")
    assert identify(torch.nn.GELU()).framework == "torch"
    assert identify(torch.nn.functional.gelu).framework == "torch"
    assert identify(lambda x: x * torch.sigmoid(1.702 * x)).framework == "torch"  # numpy tried first, refused
    assert identify(lambda x: np.maximum(x, 0)).framework == "numpy"
    import gelulab

    forced = identify(functools.partial(gelulab.gelu, approximate="tanh"), framework="torch")  # takes any array
    assert (forced.framework, forced.variant) == ("torch", "gelu_tanh")


def test_two_callables_same_or_different():
    torch = requires("torch")
    same = identify(torch.nn.GELU("tanh"), lambda x: torch.nn.functional.gelu(x, approximate="tanh"))
    assert same.same and same.a.variant == "gelu_tanh" and same.difference < 1e-6
    differ = identify(torch.nn.functional.gelu, torch.nn.GELU("tanh"))
    assert not differ.same and 4.7e-4 < differ.difference < 4.8e-4  # the tanh-vs-exact separation
    neither = identify(torch.tanh, torch.sin)
    assert not neither.same and neither.a.variant is None


def test_cross_framework_port_check():
    requires("torch")
    requires("jax")
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
    requires("torch")
    requires("jax")
    readme_blocks.run("Identify")


def test_command_line(capsys):
    requires("torch")
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


# --- the restricted expressions of `gelulab identify` --------------------------------------------------------------

# (expression, what the refusal names): each is outside the restricted form of identify_expression's docstring
REFUSED = [
    ("__import__('os').system('touch X')", r"the name '__import__'"),
    ("os.system('true')", r"the name 'os'"),
    ("open('X', 'w')", r"the name 'open'"),
    ("eval('1')", r"the name 'eval'"),
    ("lambda x: getattr(x, 'y')", r"the name 'getattr'"),
    ("numpy.tanh.__globals__", r"the attribute '__globals__'"),
    ("functools.partial(numpy.tanh).func.__class__", r"the attribute 'func' of a call's result"),
    ("numpy.load", r"the dotted name 'numpy\.load' \(not one of the ufuncs of numpy or where, clip\)"),
    ("lambda x: numpy.savetxt('X', x)", r"the dotted name 'numpy\.savetxt'"),
    ("lambda x: numpy.asarray(x).tofile('X')", r"the attribute 'tofile' of a call's result"),
    ("lambda x: numpy.asarray(x)", r"the dotted name 'numpy\.asarray' \(not one of the ufuncs of numpy"),
    ("lambda x: x.sum()", r"the attribute 'sum' of the parameter 'x'"),
    ("gelulab.cli.main", r"the dotted name 'gelulab\.cli\.main'"),
    ("lambda x: np.lib.npyio.DataSource", r"the dotted name 'numpy\.lib\.npyio\.DataSource'"),
    ("torch", r"the module name 'torch' alone"),
    ("{'a': 1}", r"a dict display"),
    ("functools.partial(numpy.tanh, out=numpy.tanh)", r"the value of the keyword argument 'out'"),
    # file, code and environment access found by testing: each is refused before anything runs
    (("keras.layers.Lambda.from_config({'function': {'class_name': '__lambda__', 'config': {'code': '4wEAAAAA'}}}, "
      "safe_mode=False)"), r"the dotted name 'keras\.layers\.Lambda\.from_config'"),
    ("keras.layers.ReLU.from_config", r"the attribute 'from_config' of keras\.layers\.ReLU"),
    ("transformers.AutoConfig.from_pretrained('no_such_model_folder', trust_remote_code=True)",
     r"the dotted name 'transformers\.AutoConfig\.from_pretrained' \(not an activation"),
    ("lambda x: float(np.genfromtxt('/tmp/secret.txt', dtype='U64'))", r"the string '/tmp/secret\.txt'"),
    ("lambda x: float(np.genfromtxt('secret.txt', dtype='U64'))", r"the dotted name 'numpy\.genfromtxt'"),
    ("lambda x: float(np.fromregex('secret.txt', 'x', 'U9'))", r"the dotted name 'numpy\.fromregex'"),
    ("lambda x: float('{0.__globals__[os].environ[FOO_SECRET]}'.format(np.genfromtxt))",
     r"the string '\{0\.__globals__"),
    ("lambda x: float('a'.format(np.tanh))", r"the attribute 'format' of a str literal"),
    ("tf.print('PWNED', output_stream='file:///tmp/PWNED')", r"the dotted name 'tensorflow\.print'"),
    ("lambda x: np.lib.stride_tricks.as_strided(x, (2**40,), (0,))",
     r"the dotted name 'numpy\.lib\.stride_tricks\.as_strided'"),
    ("lambda x: torch.nn.functional.gelu(x, approximate='a' * 40)", r"the value of the keyword argument"),
    ("lambda x: np.tanh('" + "a" * 33 + "')", r"the string 'a{32}'\.\.\. \(strings have at most 32 characters"),
    ("[t for t in ()]", r"a list comprehension"),
    ("(t := 1)", r"an assignment expression \(:=\)"),
    ("f'{1}'", r"an f-string"),
    ("functools.partial(*())", r"a starred argument"),
    ("functools.partial(numpy.tanh, **{})", r"a \*\* argument"),
    ("lambda __x: 1", r"the parameter name '__x'"),
    ("{1, 2}", r"a set display"),
]


@pytest.mark.parametrize("expression, what", REFUSED, ids=[e for e, _ in REFUSED])
def test_restricted_expression_refuses_naming_the_construct_and_the_flag(expression, what):
    with pytest.raises(identify_expression.Refused, match=what) as caught:
        identify_expression.evaluate(expression)
    text = str(caught.value)
    assert "\n" not in text and "--allow-python evaluates it as Python, which runs arbitrary code" in text


def test_restricted_expression_refuses_members_outside_the_activation_namespaces():
    requires("torch")
    with pytest.raises(identify_expression.Refused, match=r"the dotted name 'torch\.os\.getcwd'"):
        identify_expression.evaluate("torch.os.getcwd")
    with pytest.raises(identify_expression.Refused, match=r"the dotted name 'torch\.builtins\.getattr'"):
        identify_expression.evaluate("lambda x: torch.builtins.getattr(x, 'y')")  # refused before any call
    with pytest.raises(identify_expression.Refused, match=r"the dotted name 'torch\.utils\.checkpoint\.checkpoint'"):
        identify_expression.evaluate("torch.utils.checkpoint.checkpoint")
    with pytest.raises(identify_expression.Refused, match=r"the dotted name 'torch\.nn\.Linear' \(not one of the "
                                                          r"activation Module classes of torch\.nn\)"):
        identify_expression.evaluate("torch.nn.Linear(2, 2)")  # torch.nn.Linear is in torch.nn.modules.linear


@pytest.mark.parametrize("expression", ["lambda x: " + "-" * 3000 + "x", "1+" * 20000 + "1"], ids=["-x", "1+1"])
def test_restricted_expression_too_long_is_one_line(expression):
    with pytest.raises(ValueError, match=rf"has {len(expression)} characters; expected an identify expression of "
                                         r"at most 1000$") as caught:
        identify_expression.evaluate(expression)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_restricted_expression_too_deeply_nested_is_one_line():
    expression = "lambda x: " + "-" * 989 + "x"  # 1000 characters, nested deeper than Python's recursion limit
    assert len(expression) == 1000
    with pytest.raises(ValueError, match=r"^'lambda x: -+'\.\.\.: expression too deeply nested$"):
        identify_expression.evaluate(expression)
    with pytest.raises(ValueError, match=r"expression too deeply nested$"):
        identify_expression.evaluate_python("lambda x: " + "-" * 100000 + "x")


def test_restricted_expression_accepts_names_calls_partial_and_lambda():
    import functools as ft

    import scipy.special

    import gelulab

    evaluate = identify_expression.evaluate
    assert evaluate("numpy.tanh") is np.tanh and evaluate("np.tanh") is np.tanh
    assert evaluate("scipy.special.erf") is scipy.special.erf
    f = evaluate("functools.partial(gelulab.gelu, approximate='tanh')")
    assert isinstance(f, ft.partial) and f.func is gelulab.gelu and f.keywords == {"approximate": "tanh"}
    # values from the formula itself, in plain Python
    assert evaluate("lambda x: x / (1 + np.exp(-1.702 * x))")(1.0) == pytest.approx(1 / (1 + math.exp(-1.702)))
    assert evaluate("lambda x, a=1.702: x * scipy.special.expit(a * x)")(2.0) == pytest.approx(
        2 / (1 + math.exp(-3.404)))
    assert evaluate("lambda x: numpy.where(x > 0, x, 0.0)")(np.array([-1.0, 2.0])).tolist() == [0.0, 2.0]
    assert evaluate("lambda x: max(0.0, x) if x > -1 else -abs(x)")(-3.0) == -3.0  # the safe builtins
    assert evaluate("lambda numpy: numpy * 2")(3) == 6  # a parameter shadows the module
    assert evaluate("lambda x: x[..., 0:1] * 1")(np.array([4.0, 5.0])).tolist() == [4.0]
    if available("transformers"):
        assert evaluate("transformers.activations.ClippedGELUActivation(-10, 10)").min == -10  # a negative literal


def test_restricted_expression_torch_forms():
    torch = requires("torch")
    evaluate = identify_expression.evaluate
    assert evaluate("torch.nn.functional.gelu") is torch.nn.functional.gelu is evaluate("F.gelu")
    assert evaluate("torch.nn.GELU(approximate='tanh')").approximate == "tanh"  # torch.nn.GELU's own attribute
    f = evaluate("functools.partial(torch.nn.functional.gelu, approximate='tanh')")
    assert f.func is torch.nn.functional.gelu and f.keywords == {"approximate": "tanh"}
    y = evaluate("lambda x: x * torch.sigmoid(1.702 * x)")(torch.tensor([1.0], dtype=torch.float64))
    assert float(y) == pytest.approx(1 / (1 + math.exp(-1.702)), rel=1e-15)


def _python(code: str, cwd) -> dict:
    import json
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300,
                       env={**os.environ, "GELULAB_BACKEND": os.environ.get("GELULAB_BACKEND", "numpy")},
                       check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
def test_a_refused_expression_imports_and_runs_nothing(tmp_path):
    code = """if True:
        import json, sys
        from gelulab.experiments.identify import expression as ie
        out = {}
        for e in ("lambda x: torch.sigmoid(x) + os.getcwd()", "jax.nn.gelu(open('X', 'w'))",
                  "__import__('os').system('touch X')",
                  "transformers.AutoConfig.from_pretrained('no_such_folder', trust_remote_code=True)",
                  "keras.layers.Lambda.from_config({'function': 'x'}, safe_mode=False)",
                  "tf.print('PWNED', output_stream='file://PWNED')", "tf.print('PWNED', output_stream='PWNED')",
                  "lambda x: tf.io.write_file('PWNED', 'x')"):
            try:
                ie.evaluate(e)
            except ie.Refused as r:
                out[e] = str(r)
        ie.evaluate("numpy.tanh")
        out["modules"] = [m for m in ("torch", "jax", "tensorflow", "keras", "transformers", "scipy.special")
                          if m in sys.modules]
        print(json.dumps(out))
    """
    out = _python(code, tmp_path)
    assert out["modules"] == []  # refused before any import; numpy.tanh imports numpy only
    assert "the name 'os'" in out["lambda x: torch.sigmoid(x) + os.getcwd()"]
    assert "the name 'open'" in out["jax.nn.gelu(open('X', 'w'))"]
    assert "the dotted name 'transformers.AutoConfig.from_pretrained' (not an activation" in \
        out["transformers.AutoConfig.from_pretrained('no_such_folder', trust_remote_code=True)"]
    assert "the dotted name 'tensorflow.print'" in out["tf.print('PWNED', output_stream='PWNED')"]
    assert len(out) == 9  # every expression refused
    assert list(tmp_path.iterdir()) == []


@pytest.mark.subprocess
def test_command_line_runs_python_only_with_the_flag(tmp_path):
    import os
    import subprocess
    import sys

    def gelulab(*argv):
        return subprocess.run([sys.executable, "-m", "gelulab", "identify", *argv], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300, check=False,
                              env={**os.environ, "GELULAB_BACKEND": os.environ.get("GELULAB_BACKEND", "numpy")})

    p = gelulab("__import__('os').system('touch X')")
    assert p.returncode == 2 and list(tmp_path.iterdir()) == []
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "the name '__import__' is not accepted" in p.stderr and "--allow-python" in p.stderr
    p = gelulab("__import__('os').system('touch X')", "--allow-python")  # the flag evaluates it as Python
    assert (tmp_path / "X").exists()
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].endswith("gives a int, not a callable")


def test_help_says_the_flag_runs_arbitrary_python(capsys):
    with pytest.raises(SystemExit):
        cli.main(["identify", "--help"])
    assert "--allow-python evaluate A and B as Python with every builtin, importing any module they name: runs " \
           "arbitrary Python code" in " ".join(capsys.readouterr().out.split())


def test_a_callable_that_raises_is_reported_as_its_failure():
    with pytest.raises(CallableFailed, match=r"^identify: the callable raised ZeroDivisionError: division by zero "
                                             r"on a float32 numpy array of shape \(2,\) \(<function"):
        identify(lambda x: 1 / 0)

    def out_of_memory(x):
        raise MemoryError("Unable to allocate 8.00 TiB")

    with pytest.raises(CallableFailed, match=r"the callable raised MemoryError: Unable to allocate 8\.00 TiB on a "
                                             r"float32 numpy array of shape \(2,\)"):
        identify(out_of_memory)

    def fails_on_the_probe(x):  # takes the two-point trial array, fails on the probe itself
        if x.size > 2:
            raise ArithmeticError("too many points")
        return x * 1

    with pytest.raises(CallableFailed, match=rf"ArithmeticError: too many points on a float32 numpy array of shape "
                                             rf"\({PROBE.size},\)") as caught:
        identify(fails_on_the_probe)
    assert isinstance(caught.value.__cause__, ArithmeticError)


def test_command_line_callable_failures_are_one_line(capsys):
    assert cli.main(["identify", "lambda x: 1/0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [("gelulab identify: error: 'lambda x: 1/0': the callable raised ZeroDivisionError: division by "
                    "zero on a float32 numpy array of shape (2,)")]
    # an 8 PiB list whose size comes from the probe (a size folded from literals alone is refused before): MemoryError
    assert cli.main(["identify", "lambda x: numpy.maximum(x, [0.0] * int(0 * x[0] + 2**16 * 2**16 * 2**16 * 4))"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the callable raised MemoryError on a float32 numpy array" in err[0]
    assert cli.main(["identify", "lambda x: numpy.tanh(x, 'a')"]) == 2  # a TypeError of the probe, one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not be called on an array of any imported framework (numpy: TypeError" \
        in err[0]


def test_every_backend_tool_module_a_record_lists_exists_and_imports_no_framework():
    # the records (Capabilities.tools) are the one list: identify's --framework choices are the backends with a
    # probe module, and each listed module offers the interface gelulab.backends.tools describes
    import argparse
    import subprocess
    import sys

    from gelulab.backends import REGISTRY
    from gelulab.backends.tools import tool, with_tool
    from gelulab.experiments.identify import command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    choices = next(a.choices for a in parser._actions if a.dest == "framework")
    assert tuple(choices) == with_tool("probe") == tuple(n for n, c in REGISTRY.items() if "probe" in c.tools)
    wanted = {"probe": ("MODULES", "ARRAY_KIND", "owner", "native", "as_numpy", "context", "float64_note"),
              "surgery": ("MODEL_TYPE", "owns", "activation_module", "swap"),
              "audit": ("reads_path", "reads_object", "read"),
              "model_bench": ("OVERHEAD",), "warmup": ("warmup", "cache")}
    listed = [(name, t) for name, caps in REGISTRY.items() for t in caps.tools]
    assert ("numpy", "probe") in listed and ("torch", "surgery") in listed  # the records are not empty
    for name, t in listed:
        module = tool(name, t)
        assert [a for a in wanted[t] if not hasattr(module, a)] == [], (name, t)
    imports = "; ".join(f"import gelulab.backends.{n}.{t}" for n, t in listed if t != "model_bench")
    frameworks = ("torch", "jax", "tensorflow", "keras", "flax", "transformers", "onnx")
    code = f"import sys; {imports}; print(sorted(m for m in {frameworks!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _zip(members: dict) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buffer.getvalue()


# structurally empty model files: (name, bytes, the framework that reads them, what the one line says). The
# flatbuffer schema (tensorflow/lite/schema/schema.fbs) reads 4096 zero bytes as a Model whose tables are absent;
# "TFL3" is the schema's file_identifier, at bytes 4-8.
_EMPTY_MODELS = [
    ("zeros.tflite", bytes(4096), "tensorflow", r"not a TFLite model: no subgraph"),
    ("tfl3.tflite", bytes(4) + b"TFL3" + bytes(4088), "tensorflow", r"not a TFLite model: no subgraph"),
    ("zeros.onnx", bytes(4096), "onnx", r"not an ONNX model"),
    ("empty.onnx", b"", "onnx", r"cannot run it|not an ONNX model"),
    ("empty.keras", _zip({}), "keras", r"load_model failed|not a \.keras file"),
    ("garbage.pt2", _zip({"archive/data.pkl": b"garbage"}), "torch", r"torch\.export\.load failed|not a \.pt2"),
]


@pytest.mark.parametrize("name,data,framework,said", _EMPTY_MODELS, ids=[m[0] for m in _EMPTY_MODELS])
def test_a_structurally_empty_model_file_is_one_line_naming_it(name, data, framework, said, tmp_path, monkeypatch,
                                                                capsys):
    requires(framework) if framework != "onnx" else (pytest.importorskip("onnx"), pytest.importorskip("onnxruntime"))
    (tmp_path / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["identify", name]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.startswith("gelulab")]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and re.search(rf"^gelulab identify: error: {re.escape(name)}: .*({said})", lines[0]), err
    with pytest.raises(ValueError, match=re.escape(name)):
        identify(str(tmp_path / name))


@pytest.mark.parametrize("expression", ["((((((((2**16)**16)**16)**16)**16)**16)**16)**16)",
                                        "(((((((((2**16)**16)**16)**16)**16)**16)**16)**16)**16)",
                                        "lambda x: ((((((((2**16)**16)**16)**16)**16)**16)**16)**16) * x",
                                        "[0]*10**9", "lambda x: x + max([0.0] * (2**10 * 2**10 * 2**10))",
                                        "(((1 << 16) << 16) ** 16) ** 16"])
def test_a_literal_size_beyond_the_bound_is_refused_before_it_is_computed(expression, capsys):
    # unbounded, (2**16)**16**... takes 24 s and 1.8 GB at 8 levels, [0]*10**9 7.9 GB: a refusal within seconds
    # shows nothing was computed (the bound is 4096 bits, 10**6 items; 2**(16**3) has 4097 bits)
    import time

    start = time.perf_counter()
    assert cli.main(["identify", expression]) == 2
    elapsed = time.perf_counter() - start
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and re.search(r"(bits|items|at most 16); .*is not accepted in an identify", lines[0]), lines
    assert elapsed < 5, elapsed


def test_literals_within_the_bound_are_folded_to_their_value():
    # ((2**16)**16)**15 = 2**3840 has 3841 bits, within the bound; [0.0] * 10**6 is 10**6 items
    assert identify_expression.evaluate("lambda x: x * (((2**16)**16)**15 // ((2**16)**16)**15 + 1)")(3.0) == 6.0
    assert identify_expression.evaluate("lambda x: x + max([1.0] * 10**6)")(1.0) == 2.0
    assert identify_expression.evaluate("lambda x: (x ** 2) ** 0.5")(-3.0) == 3.0

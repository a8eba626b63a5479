"""The catalogue of activations: the one place to add a new activation.

An `Activation` carries everything that differs between activations: gelulab's formula (core.formulas) and its
closed-form derivatives, the mpmath reference (core.mp_forms), the float32 kernels (core.kernels) and the float64
closed forms that check them (core.float64_forms), the limits at +-inf, the clamp point of the formula,
how the reference evaluates the far tail, the roots of the derivatives, the sign-of-zero and NaN-derivative rules,
each framework's builtin (a descriptor the backend resolves, see `Call`, `TimesX`, `Expression`), and the traits
the reports, plots and experiments read (baseline, smooth, colour, transformers' names). No module outside this
one compares an activation's key or op: the parity suite, the reports, the benchmarks and the experiments iterate
over `ACTIVATIONS` and read these fields, so a new entry here, with its formula and mpmath form, is covered
everywhere without an edit in the backends or the tests.
"""
from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import mpmath

from gelulab.core import float64_forms, formulas, kernel_coeffs, kernels, mp_forms

IMPLS = ("formula", "builtin", "kernel")
# gelulab's implementation where none is named (Backend.relu/gelu/function, gelulab.gelu/apply, the layers, swap()):
# "kernel", float32 arithmetic alone, within 1 ULP (core.kernels; float64 inputs take the formula). "formula" is the
# float64-widened, correctly rounded path (core.formulas), the parity suite's second oracle.
DEFAULT_IMPL = "kernel"


# --- builtins: what each framework's own function is, resolved by the backend ------------------------------------


def resolve(path: str):
    """The object at a dotted path, importing the longest module prefix: "torch.nn.functional.gelu" ->
    torch.nn.functional.gelu, "scipy.special.expit" -> scipy.special.expit. Called by a backend when it binds a
    builtin, so the framework is imported there and only then. Raises ImportError or AttributeError naming the
    path."""
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for i, name in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


@dataclass(frozen=True)
class Call:
    """A framework function called as path(x, *args, **kwargs), e.g.
    Call("torch.nn.functional.gelu", kwargs={"approximate": "tanh"}) or Call("numpy.maximum", args=(0.0,))."""

    path: str
    args: tuple = ()
    kwargs: Mapping = field(default_factory=dict)

    def bind(self, resolver: Callable = resolve) -> Callable:
        """The callable x -> path(x, *args, **kwargs), path resolved now with `resolver`."""
        fn, args, kwargs = resolver(self.path), tuple(self.args), dict(self.kwargs)

        def builtin(x):
            return fn(x, *args, **kwargs)

        return builtin

    def __str__(self) -> str:
        extra = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.path}({', '.join(['x', *extra])})"


@dataclass(frozen=True)
class TimesX:
    """x * path(scale * x): the one-liner users write where the framework has no builtin (x * sigmoid(1.702 x),
    transformers' QuickGELUActivation) or a numpy reference (x * scipy.stats.norm.cdf(x))."""

    path: str
    scale: float = 1.0

    def bind(self, resolver: Callable = resolve) -> Callable:
        """The callable x -> x * path(scale * x), path resolved now with `resolver`."""
        fn, k = resolver(self.path), self.scale
        if k == 1.0:
            return lambda x: x * fn(x)
        return lambda x: x * fn(k * x)

    def __str__(self) -> str:
        return f"x * {self.path}(x)" if self.scale == 1.0 else f"x * {self.path}({self.scale!r} * x)"


@dataclass(frozen=True)
class Expression:
    """Any other expression: fn(resolver, x) builds the result from framework functions it resolves by dotted
    path (e.g. numpy's tanh-form reference 0.5 x (1 + tanh(u))); text is how the report names it."""

    text: str
    fn: Callable

    def bind(self, resolver: Callable = resolve) -> Callable:
        """The callable x -> fn(resolver, x)."""
        fn = self.fn
        return lambda x: fn(resolver, x)

    def __str__(self) -> str:
        return self.text


def _numpy_tanh_form(resolver, x):
    # PyTorch OpInfo's reference_gelu for approximate="tanh" (torch/testing/_internal/common_methods_invocations.py)
    tanh = resolver("numpy.tanh")
    return 0.5 * x * (1.0 + tanh(formulas.SQRT_2_OVER_PI * (x + formulas.TANH_CUBIC * x**3)))


# --- the entry ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Activation:
    """One catalogue entry.

    key: unique id, also the reference key ("gelu_tanh"). op, mode: the name of the function and its GELU
      `approximate` string (None where there is none); Backend.gelu(x, approximate) finds its entry by them.
    formula: f(xp, x) -> array, gelulab's implementation over a backend's ArrayOps (core.formulas).
    d1, d2: closed-form derivatives f(xp, x) in the wide dtype: numpy's derivatives (no autodiff), and the float64
      formula's derivative rules on jax and TensorFlow (core.interface.implementation).
    mp: f(x, order) in mpmath, the high-precision reference of the value and its first two derivatives.
    limits: {order: (limit at -inf, limit at +inf)}, the reference at infinite inputs; a zero limit carries the sign
      of the side it is approached from (-0.0: from below).
    source: where the formula comes from (paper / framework doc).
    builtins: {backend name: Call | TimesX | Expression}, each framework's own function (or the one-liner its users
      write); a backend without an entry has no builtin cells.
    clamp: the formula's clamp point T (beyond +T f = x, beyond -T the -0.0 tail; core.formulas), also applied to
      the closed-form derivatives, which then take `limits`; None: the formula needs none (ReLU).
    far: beyond |x| > far the reference returns the limits (x itself for a linear tail; a tiny number of the limit's
      sign for a zero limit), every neglected term being below 2^-1400 relative; None: the mp form is evaluated at
      every finite x.
    root_windows: {order: ((lo, hi), ...)}, intervals of x around the roots of f' (order 1) and f'' (order 2), where
      relative error means nothing and the tolerance's absolute floor applies (core.tolerances).
    dense_tail: intervals of the negative tail sampled densely by the parity regions (core.regions), where an
      intermediate of the float64 formula turns subnormal before the result does.
    zero_sign: the sign of a zero value is defined and judged: f(-0) = -0 and an underflowing negative tail gives
      -0.0. False: zero results are +0 by convention (ReLU) and their sign is not judged.
    nan_derivative: f' and f'' at NaN are NaN and judged; False where the derivative at NaN is a framework's mask
      convention (ReLU: 0 or 1).
    smooth: infinitely differentiable, with a tail worth plotting (parity's error plots and tail-point table).
    baseline: the arm every other activation is compared against (moons paired differences, bench ratios).
    headline: one of the pair the article compares, ReLU vs exact GELU (quick benchmark grid, training-step
      benchmark, `gelulab run`'s moons arms, the accuracy bar).
    color: matplotlib colour of its lines in the benchmark plots.
    hf_names: transformers' ACT2FN names of this function (transformers/activations.py), for pretrained configs.
    kernel: its float32 kernels, a core.kernels.Kernel (the f, f', f'' functions of core.kernels, their clamp points
      and the float32 root of f'), used by impl "kernel", `gelulab verify`, parity and bench; None: no kernel (impl
      "kernel" raises ValueError naming the key, and verify, parity and bench leave it out).
    float64: f(x, order) on float64 numpy arrays for orders 0 and 1, closed forms that do not cancel
      (core.float64_forms): the fast oracle of `gelulab verify`; None: none (verify needs one for an entry with a
      kernel).
    half_at_zero (derived, not a field): f(x) = x/2 + c x^2 + ... with c > 0 near 0, read from the mpmath reference.
    """

    key: str
    op: str
    mode: str | None
    formula: Callable
    d1: Callable
    d2: Callable
    mp: Callable
    limits: Mapping
    source: str
    builtins: Mapping = field(default_factory=dict)
    clamp: float | None = None
    far: float | None = None
    root_windows: Mapping = field(default_factory=dict)
    dense_tail: tuple = ()
    zero_sign: bool = True
    nan_derivative: bool = True
    smooth: bool = True
    baseline: bool = False
    headline: bool = False
    color: str = "black"
    hf_names: tuple = ()
    kernel: kernels.Kernel | None = None
    float64: Callable | None = None

    @cached_property
    def half_at_zero(self) -> bool:
        """Whether f(x) = x/2 + c x^2 + O(x^3) with c > 0 at 0, i.e. f'(0) = 1/2 and f''(0) > 0 in the mpmath
        reference `mp` (every x S(x) with S(0) = 1/2 and S'(0) > 0: the GELU forms and SiLU; not ReLU). Then below
        |x| = 2^-60 the correctly rounded f(x) is the rounding of x/2, a tie (the subnormal half of an odd x) going
        to the larger neighbour: `gelulab verify`'s oracle rounds so, and the kernels' bfloat16 0x00FF gives 2^-126
        (core.kernels.kernel_function)."""
        zero = mpmath.mpf(0)
        return bool(self.mp(zero, 1) == mpmath.mpf(0.5) and self.mp(zero, 2) > 0)

    @property
    def label(self) -> str:
        """Human-readable name: 'relu', 'gelu(none)', 'gelu(tanh)', 'gelu(sigmoid)', 'silu'."""
        return self.op if self.mode is None else f"{self.op}({self.mode})"

    def builtin(self, backend: str, resolver: Callable = resolve) -> Callable | None:
        """The framework's own function for this entry on `backend` (its `builtins` descriptor bound with
        `resolver`), or None where the framework has none."""
        spec = self.builtins.get(backend)
        return None if spec is None else spec.bind(resolver)

    def builtin_name(self, backend: str) -> str | None:
        """How the report names the builtin on `backend` ("torch.nn.functional.silu(x)"), None where none."""
        spec = self.builtins.get(backend)
        return None if spec is None else str(spec)


# f, f', f'' at -inf and +inf: every x F(x) with F a CDF tends to -0.0 from below on the left, to x on the right;
# f' to -0.0 and 1; f'' to -0.0 on both sides (phi(x)(2 - x^2) < 0 for |x| > sqrt 2, likewise the other forms).
_X_CDF_LIMITS = {0: (-0.0, math.inf), 1: (-0.0, 1.0), 2: (-0.0, -0.0)}

# GELU's derivative roots (mpmath.findroot): f' = 0 at x = -0.75179 (exact; -0.75246 tanh, -0.75115 sigmoid),
# f'' = 0 at x = +-sqrt 2 (exact; +-1.41850 tanh, +-1.40973 sigmoid). One set of windows covers the three forms.
_GELU_ROOTS = {1: ((-0.85, -0.65),), 2: ((-1.6, -1.2), (1.2, 1.6))}
# Past |x| = 1000 every GELU form and SiLU equals its limit to far below any dtype's resolution (the slowest tail,
# x sigmoid(x), is 1000 e^-1000 < 2^-1400 there), and mpmath's erfc, or the exact rounding of an e^-1e300, cannot
# take such arguments.
_FAR = 1e3


def _entries():
    k = formulas.SIGMOID_SCALE
    return (
        Activation(
            "relu", "relu", None, formulas.relu, formulas.relu_d1, formulas.relu_d2, mp_forms.relu,
            {0: (0.0, math.inf), 1: (0.0, 1.0), 2: (0.0, 0.0)}, "max(x, 0); Nair & Hinton 2010",
            builtins={"numpy": Call("numpy.maximum", args=(0.0,)), "jax": Call("jax.nn.relu"),
                      "torch": Call("torch.nn.functional.relu"), "tensorflow": Call("tensorflow.nn.relu")},
            zero_sign=False, nan_derivative=False, smooth=False, baseline=True, headline=True, color="tab:red",
            hf_names=("relu",), kernel=kernels.Kernel(kernels.relu, kernels.relu_d1, kernels.relu_d2),
            float64=float64_forms.relu,
        ),
        Activation(
            "gelu_none", "gelu", "none", formulas.gelu_none, formulas.gelu_none_d1, formulas.gelu_none_d2,
            mp_forms.gelu_none, _X_CDF_LIMITS, "x Phi(x) = x/2 erfc(-x/sqrt 2); Hendrycks & Gimpel 2016, eq. 1",
            builtins={"numpy": TimesX("scipy.stats.norm.cdf"),
                      "jax": Call("jax.nn.gelu", kwargs={"approximate": False}),
                      "torch": Call("torch.nn.functional.gelu", kwargs={"approximate": "none"}),
                      "tensorflow": Call("tensorflow.nn.gelu", kwargs={"approximate": False})},
            clamp=formulas.CLAMP_GELU_NONE, far=_FAR, root_windows=_GELU_ROOTS, dense_tail=((-38.6, -37.2), (-36.5, -24.5)),
            headline=True, color="tab:blue", hf_names=("gelu",),
            kernel=kernels.Kernel(kernels.gelu_none, kernels.gelu_none_d1, kernels.gelu_none_d2,
                                  a_max=kernels.GELU_NONE_A_MAX, d1_root=kernel_coeffs.GELU_A0_HI),
            float64=float64_forms.gelu_none,
        ),
        Activation(
            "gelu_tanh", "gelu", "tanh", formulas.gelu_tanh, formulas.gelu_tanh_d1, formulas.gelu_tanh_d2,
            mp_forms.gelu_tanh, _X_CDF_LIMITS,
            "x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))); Hendrycks & Gimpel 2016, sec. 2",
            builtins={"numpy": Expression("0.5 * x * (1 + numpy.tanh(sqrt(2/pi) (x + 0.044715 x**3)))",
                                          _numpy_tanh_form),
                      "jax": Call("jax.nn.gelu", kwargs={"approximate": True}),
                      "torch": Call("torch.nn.functional.gelu", kwargs={"approximate": "tanh"}),
                      "tensorflow": Call("tensorflow.nn.gelu", kwargs={"approximate": True})},
            clamp=formulas.CLAMP_GELU_TANH, far=_FAR, root_windows=_GELU_ROOTS, dense_tail=((-21.6, -20.8),),
            color="tab:orange", hf_names=("gelu_pytorch_tanh", "gelu_new"),
            kernel=kernels.sigmoid_kernel("gelu_tanh", kernels.z_tanh, kernels.zp_tanh, a_max=(11.0, 11.0, 11.0)),
            float64=float64_forms.gelu_tanh,
        ),
        Activation(
            "gelu_sigmoid", "gelu", "sigmoid", formulas.gelu_sigmoid, formulas.gelu_sigmoid_d1,
            formulas.gelu_sigmoid_d2, mp_forms.gelu_sigmoid, _X_CDF_LIMITS,
            "x sigmoid(1.702 x); Hendrycks & Gimpel 2016, sec. 2",
            # no framework ships the sigmoid form: its builtin is the one-liner users write
            builtins={"numpy": TimesX("scipy.special.expit", k), "jax": TimesX("jax.nn.sigmoid", k),
                      "torch": TimesX("torch.sigmoid", k), "tensorflow": TimesX("tensorflow.math.sigmoid", k)},
            clamp=formulas.CLAMP_GELU_SIGMOID, far=_FAR, root_windows=_GELU_ROOTS, dense_tail=((-420.0, -416.0),),
            color="tab:green", hf_names=("quick_gelu",),
            kernel=kernels.sigmoid_kernel("gelu_sigmoid", kernels.z_sigmoid, kernels.zp_sigmoid,
                                          a_max=(64.5, 65.0, 65.0)),
            float64=float64_forms.gelu_sigmoid,
        ),
        Activation(
            "silu", "silu", None, formulas.silu, formulas.silu_d1, formulas.silu_d2, mp_forms.silu, _X_CDF_LIMITS,
            "x sigmoid(x); Elfwing, Uchibe & Doya 2018, eq. 1 (SiLU); Ramachandran et al. 2017 (Swish, beta = 1)",
            builtins={"numpy": TimesX("scipy.special.expit"), "jax": Call("jax.nn.silu"),
                      "torch": Call("torch.nn.functional.silu"), "tensorflow": Call("tensorflow.nn.silu")},
            clamp=formulas.CLAMP_SILU, far=_FAR,
            # mpmath.findroot: f' = 0 at x = -1.2784645427610738 (the minimum, f = -0.2784645427610738),
            # f'' = 0 at x = +-2.3993572805154676 (x tanh(x/2) = 2). SiLU is flatter there than GELU (f'' = 0.218 at
            # the minimum, GELU 0.43): windows of +-0.2 and +-0.3 keep |f'| <= 0.05 and |f''| <= 0.035 inside, as
            # GELU's +-0.1 and +-0.2 keep |f'| <= 0.047 and |f''| <= 0.1.
            root_windows={1: ((-1.48, -1.08),), 2: ((-2.7, -2.1), (2.1, 2.7))},
            dense_tail=((-716.0, -707.0),),  # sigmoid(x) subnormal in float64 (x < -708.4) while f' is still normal
            color="tab:purple", hf_names=("silu", "swish"),
            kernel=kernels.sigmoid_kernel("silu", kernels.z_silu, kernels.zp_silu, a_max=(109.0, 110.0, 110.0)),
            float64=float64_forms.silu,
        ),
    )


ACTIVATIONS: dict[str, Activation] = {a.key: a for a in _entries()}

BASELINE: str = next(k for k, a in ACTIVATIONS.items() if a.baseline)  # "relu"
HEADLINE: tuple[str, ...] = tuple(k for k, a in ACTIVATIONS.items() if a.headline)  # ("relu", "gelu_none")
GELU_MODES: tuple[str, ...] = tuple(a.mode for a in ACTIVATIONS.values() if a.op == "gelu")
HF_ACTIVATIONS: dict[str, str] = {n: k for k, a in ACTIVATIONS.items() for n in a.hf_names}


def check_mode(approximate) -> str:
    """Validate a GELU mode: it must be one of the strings "none", "tanh", "sigmoid".

    A bool, None or any other value raises ValueError naming the accepted values (frameworks disagree: jax.nn.gelu
    defaults to tanh, and tf.nn.gelu(x, approximate="none") silently gives tanh because the string is truthy).
    """
    if not isinstance(approximate, str) or approximate not in GELU_MODES:
        raise ValueError(
            f"approximate={approximate!r} is not a GELU mode; expected one of {list(GELU_MODES)} "
            "(an explicit string: bools and None are refused because frameworks read them differently)"
        )
    return approximate


def check_impl(impl) -> str:
    """Validate an implementation name (one of IMPLS: "formula", "builtin", "kernel"); raises ValueError
    otherwise."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not an implementation; expected one of {list(IMPLS)}")
    return impl


def get_activation(key: str) -> Activation:
    """Catalogue entry by key; raises ValueError naming the valid keys."""
    if key not in ACTIVATIONS:
        raise ValueError(f"unknown activation {key!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[key]


def activation_key(op: str, approximate: str | None = None) -> str:
    """Catalogue key for an op and mode: ("relu", None) -> "relu", ("gelu", "tanh") -> "gelu_tanh".

    An op with modes (GELU) needs an explicit mode string (check_mode); an op without ignores `approximate`.
    Raises ValueError for an unknown op (naming the known ones) or mode."""
    entries = [a for a in ACTIVATIONS.values() if a.op == op]
    if not entries:
        ops = list(dict.fromkeys(a.op for a in ACTIVATIONS.values()))
        raise ValueError(f"unknown op {op!r}; expected one of {ops}")
    if all(a.mode is None for a in entries):
        return entries[0].key
    mode = check_mode(approximate)
    return next(a.key for a in entries if a.mode == mode)

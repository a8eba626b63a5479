"""The catalogue's building blocks: the `Activation` entry every unit module of core/activations/ defines, and
the builtin descriptors (`Call`, `TimesX`, `Expression`) a backend resolves to each framework's own function.

Nothing here names an activation: each unit module (core/activations/<key>.py) builds its own entry from these.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import mpmath

from gelulab.core.numerics import kernels

IMPLS = ("formula", "builtin", "kernel")
# The implementation where none is named (Backend.relu/gelu/function, gelulab.gelu/apply, the layers, swap()):
# "builtin", the framework's own op for the variant (torch.nn.functional.gelu(approximate=...), jax.nn.gelu,
# tf.nn.gelu, ...; for the sigmoid form, which no framework has, the expression users write, x * sigmoid(1.702 x)),
# so a model pays nothing for using gelulab. An entry with no builtin on a backend takes its formula there
# (Activation.impl_for). The opt-in "kernel" is gelulab's float32 kernel within 1 ULP (core.numerics.kernels; about
# 8-9x the builtin as an op on a CPU, see backends/torch/kernels.py); "formula" is the float64-widened, correctly
# rounded path (core.numerics.formulas), the parity suite's second oracle. The measuring commands (parity, verify,
# bench, moons, swap) name every impl they compare.
DEFAULT_IMPL = "builtin"


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


# --- the entry ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Activation:
    """One catalogue entry, built with keywords by its unit module (core/activations/<key>.py) as ACTIVATION.

    The fields come in five groups: identity, numerics (what gelulab computes and the reference it is judged by),
    parity (how the parity suite samples and judges the entry), presentation (reports, plots, experiments) and
    integrations (the frameworks' and libraries' names of the function). Each is documented where it is declared.
    """

    # --- identity ------------------------------------------------------------------------------------------------

    key: str
    """Unique id, also the reference key and the test ids' name ("gelu_tanh")."""
    op: str
    """The name of the function ("gelu", "relu"); Backend.gelu(x, approximate) finds its entry by op and mode."""
    mode: str | None = None
    """GELU's `approximate` string ("none", "tanh", "sigmoid"); None where the op has no modes."""
    source: str
    """Where the formula comes from: the formula in words and its paper or framework doc."""
    position: int = 1000
    """Where the entry stands in the catalogue: ACTIVATIONS is ordered by it, and the reports, plots and test ids
    follow that order (10 relu, 20 gelu_none, 30 gelu_tanh, 40 gelu_sigmoid, 50 silu; a new unit takes a free one)."""

    # --- numerics: gelulab's implementations and the reference --------------------------------------------------

    formula: Callable
    """f(xp, x) -> array: gelulab's implementation over a backend's ArrayOps (core.numerics.formulas), computed in
    the wide dtype and rounded once."""
    d1: Callable
    """f'(xp, x) in closed form, in the wide dtype: numpy's derivative (no autodiff), and the float64 formula's
    derivative rule on jax and TensorFlow (core.contracts.interface.implementation)."""
    d2: Callable
    """f''(xp, x) in closed form, as `d1`."""
    mp: Callable
    """mp(x, order) in mpmath, order 0, 1 or 2: the high-precision reference of the value and its first two
    derivatives, at the caller's working precision (core.parity.reference rounds it to each dtype)."""
    limits: Mapping
    """{order: (limit at -inf, limit at +inf)}: the reference at infinite inputs. A limit may be +-inf at any order;
    a zero limit carries the sign of the side it is approached from (-0.0: from below)."""
    clamp: float | None = None
    """The formula's clamp point T (core.numerics.formulas): beyond +T f = x, beyond -T the -0.0 tail; the
    closed-form derivatives are clamped too and take `limits` beyond it. None: the formula needs none (ReLU)."""
    far: float | None = None
    """Beyond |x| > far the reference returns the limits (x itself for an infinite limit, so only where f(x)/x -> 1;
    a tiny number of the limit's sign for a zero limit), every neglected term being below 2^-1400 relative. None:
    the mp form is evaluated at every finite x."""
    kernel: kernels.Kernel | None = None
    """Its float32 kernels, a core.numerics.kernels.Kernel (the f, f', f'' functions of core.numerics.kernels, their
    clamp points and the float32 root of f'), used by impl "kernel", `gelulab verify`, parity and bench. None: no
    kernel: an explicit impl "kernel" raises ValueError naming the key, verify, parity and bench leave it out, and
    where the kernel is only the default (gelulab.apply, the layers, gelulab.swap) the entry takes its formula
    (`impl_for`)."""
    float64: Callable | None = None
    """f(x, order) on float64 numpy arrays for orders 0 and 1, closed forms that do not cancel
    (core.numerics.float64_forms): the fast oracle of `gelulab verify`. None: none (verify needs one for an entry
    with a kernel)."""
    sigma_form: tuple | None = None
    """The kernel fit's description of an x sigma(z(x)) form (core/numerics/kernel_fit.py): (z(a), a z'(a),
    a z''(a), a starting guess of the zero of f''), mpmath functions evaluated at the fit's working precision.
    None where the kernel is not of that form (or there is no kernel)."""

    # --- parity: how the parity suite samples and judges the entry ----------------------------------------------

    root_windows: Mapping = field(default_factory=dict)
    """{order: ((lo, hi), ...)}: intervals of x around the roots of f' (order 1) and f'' (order 2), where relative
    error means nothing and the tolerance's absolute floor applies (core.parity.tolerances)."""
    dense_tail: tuple = ()
    """Intervals of the negative tail sampled densely by the parity regions (core.parity.regions), where an
    intermediate of the float64 formula turns subnormal before the result does."""
    zero_sign: bool = True
    """The sign of a zero value is defined and judged: f(-0) = -0 and an underflowing negative tail gives -0.0.
    False: zero results are +0 by convention (ReLU) and their sign is not judged."""
    nan_derivative: bool = True
    """f' and f'' at NaN are NaN and judged. False where the derivative at NaN is a framework's mask convention
    (ReLU: 0 or 1)."""
    known_faults: tuple = ()
    """The known faults of the frameworks' builtins for this entry (core.parity.known_faults.KnownFault rows; their
    `keys` are set to this entry's key when the table is collected), as measured by `gelulab parity`: the unit
    loads them from its data file core/activations/faults/<key>.toml (core.parity.fault_data.load), which
    `gelulab parity --draft-faults` drafts rows for."""

    # --- presentation: reports, plots and experiments -----------------------------------------------------------

    words: str
    """How reports name it in prose ("exact GELU", "tanh GELU", "ReLU"): a sentence's words, beside `label`, the
    short name of tables and test ids ("gelu(none)")."""
    color: str = "black"
    """matplotlib colour of its lines in the benchmark plots (its name in reports is `label`)."""
    smooth: bool = True
    """Infinitely differentiable, with a tail worth plotting (parity's error plots and tail-point table)."""
    baseline: bool = False
    """The arm every other activation is compared against (moons paired differences, bench ratios)."""
    headline: bool = False
    """One of the pair the article compares, ReLU vs exact GELU (quick benchmark grid, training-step benchmark,
    `gelulab run`'s moons arms, the accuracy bar)."""

    # --- integrations: the frameworks' and libraries' names of the function -------------------------------------

    builtins: Mapping = field(default_factory=dict)
    """{backend name: Call | TimesX | Expression}: each framework's own function (or the one-liner its users
    write); a backend without an entry has no builtin cells and computes the formula where no impl is named."""
    hf_names: tuple = ()
    """transformers' ACT2FN names of this function (transformers/activations.py), for pretrained configs."""
    torch_classes: tuple[str, ...] = ()
    """The torch module classes ("module.qualname", exact class match) that compute this entry, for gelulab.swap
    and identify (surgery.TORCH_CLASSES); a class listed by several entries (torch.nn.GELU) is resolved by its
    `approximate` attribute against their `mode`."""
    keras_names: tuple[str, ...] = ()
    """The keras.activations function names that compute this entry (surgery.KERAS_FUNCTIONS)."""
    layer_name: str | None = None
    """The class of gelulab.layers.torch / gelulab.layers.keras named for this entry ("GELU", built with
    approximate=mode where the entry has a mode). None: the generic layers' Activation(key)."""
    tail_signatures: tuple[str, ...] = ()
    """Names of the faults `gelulab identify` recognises in a user's implementation of this entry by a lost near
    negative tail (probe.NEAR_TAIL: "1+erf cancellation"; probe.SIGNATURES)."""

    # derived, not fields: `half_at_zero` (read from `mp`) and `label` (from op and mode), below

    @cached_property
    def half_at_zero(self) -> bool:
        """Whether f(x) = x/2 + c x^2 + O(x^3) with c > 0 at 0, i.e. f'(0) = 1/2 and f''(0) > 0 in the mpmath
        reference `mp` (every x S(x) with S(0) = 1/2 and S'(0) > 0: the GELU forms and SiLU; not ReLU). Then below
        |x| = 2^-60 the correctly rounded f(x) is the rounding of x/2, a tie (the subnormal half of an odd x) going
        to the larger neighbour: `gelulab verify`'s oracle rounds so, and the kernels' bfloat16 0x00FF gives 2^-126
        (core.numerics.kernels.kernel_function)."""
        zero = mpmath.mpf(0)
        return bool(self.mp(zero, 1) == mpmath.mpf(0.5) and self.mp(zero, 2) > 0)

    @property
    def label(self) -> str:
        """Human-readable name: 'relu', 'gelu(none)', 'gelu(tanh)', 'gelu(sigmoid)', 'silu'."""
        return self.op if self.mode is None else f"{self.op}({self.mode})"

    def impl_for(self, impl: str | None, backend: str) -> str:
        """The implementation a call asking for `impl` on `backend` takes: `impl` itself; None (no impl named)
        is DEFAULT_IMPL ("builtin") where this entry has a builtin on `backend`, else "formula" (the default is the
        framework's op only where there is one). An impl named explicitly is never replaced."""
        if impl is not None:
            return impl
        if DEFAULT_IMPL == "builtin" and self.builtins.get(backend) is None:
            return "formula"
        return DEFAULT_IMPL

    def builtin(self, backend: str, resolver: Callable = resolve) -> Callable | None:
        """The framework's own function for this entry on `backend` (its `builtins` descriptor bound with
        `resolver`), or None where the framework has none."""
        spec = self.builtins.get(backend)
        return None if spec is None else spec.bind(resolver)

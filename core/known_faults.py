"""Known upstream faults of the frameworks' builtins, as data: each cell of the parity matrix listed here must
fail its tolerance, and the test suite marks it xfail(strict=True), so a framework fix shows up as XPASS.

Measured on CPU with torch 2.13.0, jax 0.10.2 and tensorflow 2.21.0 (constraints.txt) by `gelulab parity`; each
entry is one mechanism (reason, upstream link) applied to the cells where it shows: backend x activation x
derivative orders x regions x dtypes x modes. An entry for gelulab's own formula or kernel (impl "formula" or
"kernel", kind "gelulab") would mark a cell where it misses its goal; today none does. When a framework is upgraded, rerun `gelulab parity`: cells that
pass now are reported XPASS by the tests and their entries are deleted here.

Each entry has a kind (KINDS; KnownFault.classification): "upstream" (a fault with an upstream report, linked),
"unreported" (known here, no upstream report found) or "gelulab" (gelulab's own formula). `gelulab parity` splits
its flagged cells by kind, and a flagged cell that matches no entry is NEW (`--fail-on-new` exits 1).

Some faults depend on the machine. Frameworks pick CPU kernels by the processor's features (core.cpu_dispatch), so
an entry may name the dispatch levels where it occurs (`dispatch`): on another level that was measured
(MEASURED_DISPATCH) the cell must pass, and on a level that was never measured the fault may or may not occur. An
entry whose occurrence no forcible setting decides says where it was seen (`varies`) and may or may not occur
anywhere. Such cells are known, never NEW, and the tests mark them xfail without strict (KnownFault.certain).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

KINDS = {
    "upstream": "upstream fault, reported (link)",
    "unreported": "known, not reported upstream",
    "gelulab": "gelulab's own formula",
}


@dataclass(frozen=True)
class KnownFault:
    """A known fault: the cells it matches fail (xfail, strict where `certain`). None matches anything.
    reason: one line; link: the upstream issue or PR (or, where none exists, the closest one and a note);
    kind: one of KINDS, or None to derive it (see `classification`); dispatch: the CPU dispatch levels of the
    backend (core.cpu_dispatch) where it occurs, None on every level; varies: where the fault was seen and where
    not, when it depends on the machine in a way no forcible setting decides (then it may or may not occur)."""

    reason: str
    link: str
    backend: str | None = None
    impl: str | None = "builtin"
    keys: tuple[str, ...] | None = None
    orders: tuple[int, ...] | None = None
    regions: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    modes: tuple[str, ...] | None = None
    devices: tuple[str, ...] | None = ("cpu",)
    kind: str | None = None
    dispatch: tuple[str, ...] | None = None
    varies: str | None = None

    @property
    def classification(self) -> str:
        """The fault's kind (a key of KINDS): `kind` when given; else "gelulab" for gelulab's own formula
        or kernel (impl "formula" or "kernel"), "unreported" when the link says no upstream report exists ("no ... report ..."), and
        "upstream" otherwise."""
        if self.kind is not None:
            return self.kind
        if self.impl in ("formula", "kernel"):  # the kernel's own cells, and its float64 cells, which are the formula's
            return "gelulab"
        return "unreported" if self.link.lower().startswith("no ") else "upstream"

    def matches(self, group, region: str) -> bool:
        """True when this fault covers `group` (a experiments.parity.engine.Group) on `region`: its fields match,
        and with `dispatch`, the group's level is one of them or was never measured (MEASURED_DISPATCH)."""
        if self.backend is not None and group.backend != self.backend:
            return False
        if self.dispatch is not None and group.dispatch not in self.dispatch and _measured(group):
            return False
        if self.impl is not None and group.impl != self.impl:
            return False
        for want, have in ((self.keys, group.key), (self.orders, group.order), (self.regions, region),
                           (self.dtypes, group.dtype), (self.modes, group.mode), (self.devices, group.device)):
            if want is not None and have not in want:
                return False
        return True

    def certain(self, group) -> bool:
        """True when a matching cell of `group` must fail: the fault does not vary by machine (`varies` is None) and,
        when keyed by `dispatch`, the group runs at a level that was measured."""
        return self.varies is None and (self.dispatch is None or _measured(group))

    def condition(self, group) -> str | None:
        """None when `certain(group)`; else one line on what the fault depends on, for reports and test reasons."""
        if self.certain(group):
            return None
        if self.varies is not None:
            return f"may or may not occur on this machine: it depends on {self.varies}"
        return (f"may or may not occur on this machine: it depends on CPU dispatch (seen at {group.backend} levels "
                f"{list(self.dispatch)}; this machine's level {group.dispatch!r} was not measured)")


# The CPU dispatch levels (core.cpu_dispatch) at which the whole table below was measured, per backend: forced with
# ATEN_CPU_CAPABILITY, XLA_FLAGS=--xla_cpu_max_isa and NPY_DISABLE_CPU_FEATURES on an Intel Xeon (AVX-512) by
# `make test-dispatch`. An entry with `dispatch` is certain only at these levels.
MEASURED_DISPATCH: dict[str, tuple[str, ...]] = {
    "torch": ("default", "avx2", "avx512"),
    "jax": ("sse4_2", "avx2", "avx512"),
    "tensorflow": ("sse4_2", "avx2", "avx512"),
    "numpy": ("x86_v2", "x86_v3", "x86_v4", "avx512_icl", "avx512_spr"),
}


def _measured(group) -> bool:
    return group.dispatch in MEASURED_DISPATCH.get(group.backend, ())


# Mechanisms: (reason, link) or (reason, link, kind); a cell failing for two reasons names both. Without a kind
# the entry's kind is derived (KnownFault.classification); it is given where the link alone would mislead.
ERF_CANCEL = (
    "torch's exact GELU computes 0.5*x*(1+erf(x/sqrt2)): 1+erf cancels in the negative tail (17% low at x=-5, 0 from x~-6 in float32), also in its backward",
    'https://github.com/pytorch/pytorch/issues/187806 (fix: https://github.com/pytorch/pytorch/pull/189234, open)',
    'upstream',
)
INF_GRAD = (
    "the builtin's derivative is NaN at +-inf (inf * 0 in the backward formula); the limits are 1 and 0",
    'no upstream report found (2026-11)',
)
INF_VALUE = (
    'the builtin returns NaN at -inf (-inf * 0); the limit is -0',
    "no upstream report found (2026-11) for jax/tf; torch's twin: https://github.com/pytorch/pytorch/pull/192318",
    'unreported',
)
INF_VALUE_torch = (
    "torch's GELU returns NaN at -inf (-inf*0; the limit is -0), and its exact form also NaN at +inf",
    'https://github.com/pytorch/pytorch/issues/185770 (fix: https://github.com/pytorch/pytorch/pull/192318, open)',
    'upstream',
)
INPUT_DTYPE_ERFC = (
    "jax.nn.gelu/tf.nn.gelu round the erfc argument -x/sqrt2 to the input dtype (error amplified ~x^2 times in the tail) and XLA flushes erfc's subnormal result to zero below x~-13 (f32/bf16) although x*Phi(x) is still normal",
    'https://github.com/jax-ml/jax/issues/16200 (flush-to-zero, working as intended); no report of the argument rounding found',
    'unreported',
)
NUMPY_REF = (
    "numpy's builtin is PyTorch OpInfo's reference (x*norm.cdf(x); 0.5*x*(1+tanh(u))): 1+tanh cancels below x~-7, scipy's ndtr is ~2e-13 relative accurate below x~-30 in float64 (beyond the 1e-13 tolerance), and -inf*0 gives NaN",
    'https://github.com/pytorch/pytorch/blob/main/torch/testing/_internal/common_methods_invocations.py (reference_gelu)',
    'unreported',
)
OVERFLOW_GRAD = (
    "x^2 or x^3 overflows inside the builtin's derivative for large |x| (float16 from x=148..256), giving inf/NaN where f' is 1 or 0 and f'' is 0",
    'no torch/jax/tf report found (2026-11); same fault: https://github.com/facebookresearch/fairseq/issues/2235',
)
OVERFLOW_GRAD_ERF_CANCEL = (
    "x^2 or x^3 overflows inside the builtin's derivative for large |x| (float16 from x=148..256), giving inf/NaN where f' is 1 or 0 and f'' is 0; and torch's exact GELU computes 0.5*x*(1+erf(x/sqrt2)): 1+erf cancels in the negative tail (17% low at x=-5, 0 from x~-6 in float32), also in its backward",
    'no torch/jax/tf report found (2026-11); same fault: https://github.com/facebookresearch/fairseq/issues/2235 ; https://github.com/pytorch/pytorch/issues/187806 (fix: https://github.com/pytorch/pytorch/pull/189234, open)',
    'unreported',
)
OVERFLOW_GRAD_TANH_CANCEL = (
    "x^2 or x^3 overflows inside the builtin's derivative for large |x| (float16 from x=148..256), giving inf/NaN where f' is 1 or 0 and f'' is 0; and the builtin tanh form computes 0.5*x*(1+tanh(u)): 1+tanh cancels for x below about -3 (bf16), -5 (f32), -7 (f64), giving 0 or 100% error where x*sigmoid(2u) is tiny; its derivatives likewise",
    'no torch/jax/tf report found (2026-11); same fault: https://github.com/facebookresearch/fairseq/issues/2235 ; no torch/jax/tf report found (2026-11); same fault: https://github.com/tenstorrent/tt-metal/issues/56517',
)
OVERFLOW_VALUE = (
    "torch's exact GELU overflows to inf at the dtype's maximum (FLT_MAX -> inf) although GELU(x) = x there",
    'no pytorch report found (2026-11); same fault: https://github.com/PaddlePaddle/Paddle/issues/79461',
)
SIGMOID_ONELINER = (
    'no framework ships the sigmoid form: the builtin is the one-liner x*sigmoid(1.702*x) in the input dtype, whose sigmoid underflows/flushes in the tail before the product does, whose 1.702*x is rounded to the input dtype, and whose autodiff sigmoid*(1-sigmoid) cancels for large x',
    'https://github.com/huggingface/transformers/blob/main/src/transformers/activations.py (QuickGELUActivation, the usual source of the one-liner)',
    'unreported',
)
SUBNORMAL_INTERMEDIATE = (
    'in float64 erfc (or sigmoid) is already subnormal, and flushed by XLA, where x*Phi(x) is still a normal number (x ~ -32 .. -38, or -417 for the sigmoid form)',
    'https://github.com/jax-ml/jax/issues/16200 (flush-to-zero); no GELU report',
    'unreported',
)
TANH_CANCEL = (
    'the builtin tanh form computes 0.5*x*(1+tanh(u)): 1+tanh cancels for x below about -3 (bf16), -5 (f32), -7 (f64), giving 0 or 100% error where x*sigmoid(2u) is tiny; its derivatives likewise',
    'no torch/jax/tf report found (2026-11); same fault: https://github.com/tenstorrent/tt-metal/issues/56517',
)
ERF_CANCEL_F16 = (
    ("torch's float16 exact GELU is its float32 kernel rounded to float16, and the vectorised float32 erf's error in "
     "1+erf (0.16% relative at x = -3.6) reaches 6 float16 ULP below x ~ -3.5"),
    'https://github.com/pytorch/pytorch/issues/187806 (the 1+erf cancellation; fix: https://github.com/pytorch/pytorch/pull/189234, open)',
    'upstream',
)
XLA_F16_NO_F16C = (
    ("at XLA's lowest CPU level (XLA_FLAGS=--xla_cpu_max_isa=SSE4_2) XLA converts float16 through the runtime "
     "helpers __extendhfsf2/__truncsfhf2, which neither jaxlib nor TensorFlow links: float16 computations that XLA "
     "compiles raise 'Failed to materialize symbols'"),
    'https://github.com/openxla/xla/issues/6787 (the same missing __extendhfsf2 on CPUs without F16C; closed)',
    'upstream',
)
ZERO_SIGN_TINY = (
    "torch's exact GELU returned +0 for x = -2**-149 (float32, eager) where x*Phi(x) rounds to -0",
    'no pytorch report found (2026-12)',
    'unreported',
)
TF_F64_CONST = (
    'tf.nn.gelu casts its Python-float constants (sqrt 2, 0.044715) through float32, so float64 results are only ~1e-7..1e-6 relative accurate',
    'https://github.com/tensorflow/tensorflow/issues/57779 (tf.cast of a Python float goes through float32; closed, fix rolled back)',
    'upstream',
)


# SiLU, x * sigmoid(x) (torch.nn.functional.silu, jax.nn.silu, tf.nn.silu; numpy: x * scipy.special.expit(x)).
_INF_SILU = ("x*sigmoid(x) at -inf is -inf * 0 = NaN (the limit is -0), and its derivatives from autodiff are NaN at "
             "+-inf (inf * 0; the limits are 1 and 0)")
SILU_INF_JAX = (_INF_SILU, "no jax report found (2026-11); torch's twin: https://github.com/pytorch/pytorch/issues/160876")
SILU_INF_TF = (_INF_SILU,
               "no tensorflow report found (2026-11); torch's twin: https://github.com/pytorch/pytorch/issues/160876")
SILU_INF_TORCH = (
    ("torch's silu computes x / (1 + exp(-x)): -inf / inf = NaN at -inf (the limit is -0), and its backward "
     "sigmoid(x) (1 + x (1 - sigmoid(x))) is NaN at +-inf (the limits are 1 and 0)"),
    "https://github.com/pytorch/pytorch/issues/160876 (fix of the value: https://github.com/pytorch/pytorch/pull/195197, open)",
)
SILU_INF_NUMPY = (
    "numpy's reference x * scipy.special.expit(x) is -inf * 0 = NaN at -inf (the limit is -0)",
    "no upstream report found (2026-11); torch's twin: https://github.com/pytorch/pytorch/issues/160876",
)
_FTZ_SILU = ("sigmoid(x) is subnormal below x = -708.4 (float64) and -87.3 (float32; bfloat16 is computed in float32) "
             "and is flushed to zero, so x*sigmoid(x) and its derivatives are 0 down to x = -715 (float64) / -91.8 "
             "(float32), where they are still normal numbers (f(-709) = -5.8e-306)")
SILU_FTZ_SIGMOID_JAX = (
    _FTZ_SILU + " (XLA's CPU flush-to-zero)",
    "https://github.com/jax-ml/jax/issues/39798 (the gradient at x = -709; fix https://github.com/jax-ml/jax/pull/40828 closed)",
)
SILU_FTZ_SIGMOID_TF = (
    _FTZ_SILU + " (TF's CPU kernels flush subnormals)",
    ("https://github.com/tensorflow/tensorflow/issues/124835 (the gradient at x = -709; fix "
     "https://github.com/tensorflow/tensorflow/pull/125173 is not in 2.21.0); f'': "
     "https://github.com/tensorflow/tensorflow/issues/124832"),
)
_EXP_OVERFLOW_SILU = ("x / (1 + exp(-x)): exp(-x) overflows to inf below x = -709.78 (float64) / -88.72 (float32; "
                      "bfloat16 is computed in float32), so the result is -0 down to x = -715 / -91.8, where "
                      "x*sigmoid(x) is still a normal number")
SILU_EXP_OVERFLOW_TORCH = (
    "torch's silu computes " + _EXP_OVERFLOW_SILU + "; its backward likewise",
    "no pytorch report found (2026-11); same fault: https://github.com/tenstorrent/tt-metal/issues/55711",
)
SILU_EXP_OVERFLOW_NUMPY = (
    "scipy.special.expit computes 1 / (1 + exp(-x)), so numpy's reference is " + _EXP_OVERFLOW_SILU,
    "no upstream report found (2026-11); same fault: https://github.com/tenstorrent/tt-metal/issues/55711",
)
_F16_SILU = ("in float16 the builtin forms its value or derivatives from sigmoid(x) rounded to float16, which is "
             "subnormal below x = -9.7 and 0 below x = -17.3, while x*sigmoid(x) is representable down to x = -20.3: "
             "the results lose most digits from x = -11 and are 0 in [-18.6, -17.3]")
SILU_F16_SIGMOID = (_F16_SILU, "no upstream report found (2026-11)")
_GRAD2_SILU = ("the builtin's second derivative (autodiff through sigmoid(x) (1 - sigmoid(x))) cancels in "
               "1 - sigmoid(x) for x > 0: its relative error grows like eps e^x (3e-12 at x = 10 in float64, 1e-3 in "
               "float32), and it is 0 where 1 - sigmoid(x) rounds to 0 (x > 36.7 float64, 16.6 float32) although "
               "f'' ~ -x e^-x is still normal (-7.7e-63 at x = 148)")
SILU_GRAD2_CANCEL_JAX = (
    _GRAD2_SILU,
    ("https://github.com/jax-ml/jax/issues/40385 (jax.nn.sigmoid's gradient, sigmoid (1 - sigmoid); fix "
     "https://github.com/jax-ml/jax/pull/40825, open)"),
)
SILU_GRAD2_CANCEL_TF = (
    _GRAD2_SILU, "no tensorflow report found (2026-11); torch's twin: https://github.com/pytorch/pytorch/issues/195682")
SILU_GRAD2_CANCEL_TORCH = (
    _GRAD2_SILU + " (torch differentiates its silu backward sigmoid(x) (1 + x (1 - sigmoid(x))))",
    "https://github.com/pytorch/pytorch/issues/195682 (f'' = 0 at x = 40.41 in float64, open)",
)
_LOW_SILU = ("in bfloat16 and float16 the builtin's derivatives are formed in (or rounded through) the input dtype: "
             "sigmoid + x sigmoid (1 - sigmoid) loses its leading digits next to the roots of f' (x = -1.28) and f'' "
             "(x = +-2.40) beyond the root windows, and f'' is 0 where 1 - sigmoid(x) rounds to 0 (x > 5.5 bfloat16, "
             "7.6 float16) although it is still representable")
SILU_LOW_PRECISION_GRAD = (_LOW_SILU, "no upstream report found (2026-11)")
SILU_F16_SIGMOID_LOW_PRECISION = (_F16_SILU + "; and " + _LOW_SILU, "no upstream report found (2026-11)")
SILU_FTZ_SIGMOID_LOW_PRECISION_JAX = (
    SILU_FTZ_SIGMOID_JAX[0] + "; and " + _LOW_SILU,
    SILU_FTZ_SIGMOID_JAX[1] + " ; no report of the low-precision derivative found (2026-11)",
)


def _f(mechanism, backend, keys, orders, regions, dtypes, modes, impl="builtin", dispatch=None,
       varies=None) -> KnownFault:
    reason, link, *kind = mechanism
    return KnownFault(reason, link, backend=backend, impl=impl, keys=keys, orders=orders, regions=regions,
                      dtypes=dtypes, modes=modes, kind=kind[0] if kind else None, dispatch=dispatch, varies=varies)


KNOWN_FAULTS: tuple[KnownFault, ...] = (
    # first, so that they name these cells: float16 through XLA raises at its lowest CPU level (core.cpu_dispatch,
    # `make test-dispatch`): every jax float16 cell, TensorFlow's compiled ones and its kernel (an XLA function
    # in eager mode too); ReLU'' of the builtin and the formula, a constant 0, compiles without a conversion
    *(_f(XLA_F16_NO_F16C, b, keys, orders, None, ('float16',), modes, impl=impl, dispatch=("sse4_2",))
      for b, modes, impl, keys, orders in (
          ("jax", ("eager",), None, None, None),
          ("tensorflow", ("eager",), "kernel", None, None),
          ("jax", ("compiled",), "kernel", None, None),
          ("tensorflow", ("compiled",), "kernel", None, None),
          ("jax", ("compiled",), None, None, (0, 1)),
          ("tensorflow", ("compiled",), None, None, (0, 1)),
          ("jax", ("compiled",), None, ("gelu_none", "gelu_tanh", "gelu_sigmoid", "silu"), (2,)),
          ("tensorflow", ("compiled",), None, ("gelu_none", "gelu_tanh", "gelu_sigmoid", "silu"), (2,)))),
    _f(INF_GRAD, "jax", ("gelu_none",), (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INF_VALUE, "jax", ("gelu_none",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INPUT_DTYPE_ERFC, "jax", ("gelu_none",), (0, 1, 2), ('negative_tail',), ('float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INPUT_DTYPE_ERFC, "jax", ("gelu_none",), (0,), ('grid',), ('bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INPUT_DTYPE_ERFC, "jax", ("gelu_none",), (0,), ('cases', 'large'), ('bfloat16',), ('eager',)),
    _f(INPUT_DTYPE_ERFC, "jax", ("gelu_none",), (1, 2), ('cases', 'grid'), ('bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "jax", ("gelu_none",), (2,), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SUBNORMAL_INTERMEDIATE, "jax", ("gelu_none",), (0, 1, 2), ('negative_tail',), ('float64',), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "jax", ("gelu_sigmoid",), (0, 1), ('negative_tail', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "jax", ("gelu_sigmoid",), (2,), ('grid', 'large', 'near_max', 'negative_tail', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "jax", ("gelu_sigmoid",), (2,), ('cases',), ('float64', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "jax", ("gelu_sigmoid",), (0, 1), ('cases', 'grid', 'large'), ('bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INF_GRAD, "jax", ("gelu_tanh",), (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INF_VALUE, "jax", ("gelu_tanh",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "jax", ("gelu_tanh",), (1, 2), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "jax", ("gelu_tanh",), (1,), ('large',), ('float16',), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "jax", ("gelu_tanh",), (1,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "jax", ("gelu_tanh",), (2,), ('large',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "jax", ("gelu_tanh",), (1, 2), ('cases',), ('float16',), ('eager', 'compiled')),
    _f(TANH_CANCEL, "jax", ("gelu_tanh",), (0,), ('cases', 'grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "jax", ("gelu_tanh",), (0,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "jax", ("gelu_tanh",), (1, 2), ('grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "jax", ("gelu_tanh",), (1, 2), ('cases',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(NUMPY_REF, "numpy", ("gelu_none",), (0,), ('negative_tail',), ('float64',), ('eager',)),
    _f(NUMPY_REF, "numpy", ("gelu_none",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    _f(NUMPY_REF, "numpy", ("gelu_sigmoid",), (0,), ('negative_tail',), ('float64',), ('eager',)),
    _f(NUMPY_REF, "numpy", ("gelu_sigmoid",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    _f(NUMPY_REF, "numpy", ("gelu_tanh",), (0,), ('cases', 'grid', 'large', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('eager',)),
    _f(NUMPY_REF, "numpy", ("gelu_tanh",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    _f(NUMPY_REF, "numpy", ("gelu_tanh",), (1,), ('negative_tail',), ('float64',), ('eager',)),
    _f(INF_GRAD, "tensorflow", ("gelu_none",), (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INF_VALUE, "tensorflow", ("gelu_none",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INPUT_DTYPE_ERFC, "tensorflow", ("gelu_none",), (0, 1, 2), ('negative_tail',), ('float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INPUT_DTYPE_ERFC, "tensorflow", ("gelu_none",), (0,), ('grid',), ('bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INPUT_DTYPE_ERFC, "tensorflow", ("gelu_none",), (0,), ('cases', 'large'), ('bfloat16',), ('eager',)),
    _f(INPUT_DTYPE_ERFC, "tensorflow", ("gelu_none",), (1, 2), ('cases', 'grid'), ('bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "tensorflow", ("gelu_none",), (2,), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(TF_F64_CONST, "tensorflow", ("gelu_none",), (0, 1, 2), ('cases', 'grid', 'large', 'negative_tail', 'tiny'), ('float64',), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "tensorflow", ("gelu_sigmoid",), (0, 1), ('negative_tail', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "tensorflow", ("gelu_sigmoid",), (2,), ('grid', 'large', 'near_max', 'negative_tail', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "tensorflow", ("gelu_sigmoid",), (2,), ('cases',), ('float64', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "tensorflow", ("gelu_sigmoid",), (0, 1), ('cases', 'grid', 'large'), ('bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INF_GRAD, "tensorflow", ("gelu_tanh",), (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INF_VALUE, "tensorflow", ("gelu_tanh",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "tensorflow", ("gelu_tanh",), (1, 2), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "tensorflow", ("gelu_tanh",), (1,), ('large',), ('float16',), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "tensorflow", ("gelu_tanh",), (1,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "tensorflow", ("gelu_tanh",), (2,), ('large',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "tensorflow", ("gelu_tanh",), (1, 2), ('cases',), ('float16',), ('eager', 'compiled')),
    _f(TANH_CANCEL, "tensorflow", ("gelu_tanh",), (0,), ('cases', 'grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "tensorflow", ("gelu_tanh",), (0,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "tensorflow", ("gelu_tanh",), (1, 2), ('grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "tensorflow", ("gelu_tanh",), (1, 2), ('cases',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(ERF_CANCEL, "torch", ("gelu_none",), (0,), ('cases', 'grid', 'large', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(ERF_CANCEL, "torch", ("gelu_none",), (1,), ('cases', 'grid', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(ERF_CANCEL, "torch", ("gelu_none",), (1,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager',)),
    _f(ERF_CANCEL, "torch", ("gelu_none",), (1,), ('large',), ('float64', 'float32'), ('compiled',)),
    _f(ERF_CANCEL, "torch", ("gelu_none",), (2,), ('grid', 'negative_tail'), ('bfloat16', 'float16'), ('eager',)),
    _f(INF_GRAD, "torch", ("gelu_none",), (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INF_VALUE_torch, "torch", ("gelu_none",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "torch", ("gelu_none",), (2,), ('large', 'near_max'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    _f(OVERFLOW_GRAD, "torch", ("gelu_none",), (2,), ('large', 'near_max'), ('float64', 'float32', 'bfloat16'), ('compiled',)),
    _f(OVERFLOW_GRAD_ERF_CANCEL, "torch", ("gelu_none",), (2,), ('cases',), ('float16',), ('eager',)),
    _f(OVERFLOW_VALUE, "torch", ("gelu_none",), (0,), ('near_max',), ('float32', 'bfloat16'), ('eager',)),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (0, 1), ('negative_tail',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (0, 1), ('negative_tail',), ('float64', 'float32', 'bfloat16'), ('compiled',)),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (0, 1), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (2,), ('grid', 'large', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (2,), ('near_max', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (2,), ('near_max', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('compiled',)),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (2,), ('cases',), ('float64', 'bfloat16', 'float16'), ('eager',)),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (2,), ('cases',), ('float64',), ('compiled',)),
    _f(SIGMOID_ONELINER, "torch", ("gelu_sigmoid",), (0, 1), ('cases', 'grid', 'large'), ('bfloat16', 'float16'), ('eager',)),
    _f(INF_GRAD, "torch", ("gelu_tanh",), (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(INF_VALUE_torch, "torch", ("gelu_tanh",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "torch", ("gelu_tanh",), (1,), ('near_max',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD, "torch", ("gelu_tanh",), (2,), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    _f(OVERFLOW_GRAD, "torch", ("gelu_tanh",), (2,), ('near_max',), ('float64', 'float32', 'bfloat16'), ('compiled',)),
    _f(OVERFLOW_GRAD, "torch", ("gelu_tanh",), (2,), ('large',), ('float16',), ('eager',)),
    _f(OVERFLOW_GRAD, "torch", ("gelu_tanh",), (2,), ('large',), ('bfloat16',), ('compiled',)),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "torch", ("gelu_tanh",), (1,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "torch", ("gelu_tanh",), (2,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager',)),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "torch", ("gelu_tanh",), (2,), ('large',), ('float64', 'float32'), ('compiled',)),
    _f(OVERFLOW_GRAD_TANH_CANCEL, "torch", ("gelu_tanh",), (2,), ('cases',), ('float16',), ('eager',)),
    _f(TANH_CANCEL, "torch", ("gelu_tanh",), (0,), ('cases', 'grid', 'large', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "torch", ("gelu_tanh",), (1,), ('cases', 'grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "torch", ("gelu_tanh",), (2,), ('grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(TANH_CANCEL, "torch", ("gelu_tanh",), (2,), ('cases',), ('float64', 'float32', 'bfloat16'), ('eager',)),
    _f(TANH_CANCEL, "torch", ("gelu_tanh",), (2,), ('cases',), ('float64', 'float32', 'bfloat16', 'float16'), ('compiled',)),
    # the negative tail sampled down to each entry's own underflow point (core.regions): float16 x ~ -5.06
    _f(TANH_CANCEL, "torch", ("gelu_tanh",), (0,), ('negative_tail',), ('float16',), ('eager',),
       dispatch=("avx2", "avx512")),
    _f(TANH_CANCEL, "torch", ("gelu_tanh",), (0,), ('negative_tail',), ('float16',), ('compiled',)),
    # CPU-dependent cells of torch's exact GELU (core.cpu_dispatch; `make test-dispatch`)
    _f(ERF_CANCEL_F16, "torch", ("gelu_none",), (0,), ('cases', 'grid', 'negative_tail'), ('float16',), ('eager',),
       varies=("the processor: beyond tolerance on an Intel Xeon with AVX-512 at ATen levels default, avx2 and "
               "avx512, within it on the AMD EPYC where the rest of this table was first measured")),
    _f(ZERO_SIGN_TINY, "torch", ("gelu_none",), (0,), ('tiny',), ('float32',), ('eager',),
       varies=("the processor: seen on a 2-core AMD EPYC without AVX-512 (ATen level avx2), not on an Intel Xeon "
               "with AVX-512 at ATen levels default, avx2 or avx512, nor with flush-to-zero on or at any tensor "
               "size from 1 to 10^5")),
    # SiLU (measured by `gelulab parity --activation silu`, every backend, eager and compiled)
    _f(SILU_F16_SIGMOID, "jax", ("silu",), (0, 1), ('negative_tail', 'large'), ('float16',), ('eager', 'compiled')),
    _f(SILU_F16_SIGMOID, "jax", ("silu",), (2,), ('negative_tail',), ('float16',), ('eager', 'compiled')),
    _f(SILU_F16_SIGMOID_LOW_PRECISION, "jax", ("silu",), (2,), ('large',), ('float16',), ('eager', 'compiled')),
    _f(SILU_FTZ_SIGMOID_LOW_PRECISION_JAX, "jax", ("silu",), (1,), ('negative_tail',), ('bfloat16',), ('eager', 'compiled')),
    _f(SILU_FTZ_SIGMOID_JAX, "jax", ("silu",), (0, 2), ('negative_tail',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(SILU_FTZ_SIGMOID_JAX, "jax", ("silu",), (1,), ('negative_tail',), ('float64', 'float32'), ('eager', 'compiled')),
    _f(SILU_GRAD2_CANCEL_JAX, "jax", ("silu",), (2,), ('cases',), ('float64',), ('eager', 'compiled')),
    _f(SILU_GRAD2_CANCEL_JAX, "jax", ("silu",), (2,), ('grid', 'large'), ('float64', 'float32'), ('eager', 'compiled')),
    _f(SILU_INF_JAX, "jax", ("silu",), (0, 1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SILU_LOW_PRECISION_GRAD, "jax", ("silu",), (1, 2), ('cases',), ('float16',), ('eager', 'compiled')),
    _f(SILU_LOW_PRECISION_GRAD, "jax", ("silu",), (1, 2), ('grid',), ('bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SILU_LOW_PRECISION_GRAD, "jax", ("silu",), (2,), ('large',), ('bfloat16',), ('eager', 'compiled')),
    _f(SILU_EXP_OVERFLOW_NUMPY, "numpy", ("silu",), (0,), ('negative_tail',), ('float64',), ('eager',)),
    _f(SILU_INF_NUMPY, "numpy", ("silu",), (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    _f(SILU_F16_SIGMOID, "tensorflow", ("silu",), (0, 1), ('negative_tail', 'large'), ('float16',), ('eager', 'compiled')),
    _f(SILU_F16_SIGMOID, "tensorflow", ("silu",), (2,), ('negative_tail',), ('float16',), ('eager', 'compiled')),
    _f(SILU_F16_SIGMOID_LOW_PRECISION, "tensorflow", ("silu",), (2,), ('large',), ('float16',), ('eager', 'compiled')),
    _f(SILU_FTZ_SIGMOID_TF, "tensorflow", ("silu",), (0, 1, 2), ('negative_tail',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(SILU_GRAD2_CANCEL_TF, "tensorflow", ("silu",), (2,), ('cases',), ('float64',), ('eager', 'compiled')),
    _f(SILU_GRAD2_CANCEL_TF, "tensorflow", ("silu",), (2,), ('grid', 'large'), ('float64', 'float32'), ('eager', 'compiled')),
    _f(SILU_INF_TF, "tensorflow", ("silu",), (0, 1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SILU_LOW_PRECISION_GRAD, "tensorflow", ("silu",), (1, 2), ('grid',), ('bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SILU_LOW_PRECISION_GRAD, "tensorflow", ("silu",), (2,), ('cases',), ('float16',), ('compiled',)),
    _f(SILU_LOW_PRECISION_GRAD, "tensorflow", ("silu",), (2,), ('large',), ('bfloat16',), ('eager', 'compiled')),
    _f(SILU_EXP_OVERFLOW_TORCH, "torch", ("silu",), (0, 1, 2), ('negative_tail',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    _f(SILU_F16_SIGMOID, "torch", ("silu",), (1,), ('negative_tail', 'large'), ('float16',), ('eager',)),
    _f(SILU_F16_SIGMOID, "torch", ("silu",), (2,), ('negative_tail',), ('float16',), ('eager',)),
    _f(SILU_F16_SIGMOID_LOW_PRECISION, "torch", ("silu",), (2,), ('large',), ('float16',), ('eager',)),
    _f(SILU_GRAD2_CANCEL_TORCH, "torch", ("silu",), (2,), ('cases',), ('float64',), ('eager', 'compiled')),
    _f(SILU_GRAD2_CANCEL_TORCH, "torch", ("silu",), (2,), ('grid', 'large'), ('float64', 'float32'), ('eager', 'compiled')),
    _f(SILU_INF_TORCH, "torch", ("silu",), (0, 1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    _f(SILU_LOW_PRECISION_GRAD, "torch", ("silu",), (1, 2), ('grid',), ('bfloat16', 'float16'), ('eager',)),
    _f(SILU_LOW_PRECISION_GRAD, "torch", ("silu",), (2,), ('large',), ('bfloat16', 'float16'), ('compiled',)),
    _f(SILU_LOW_PRECISION_GRAD, "torch", ("silu",), (2,), ('large',), ('bfloat16',), ('eager',)),
)


# impl "kernel" computes float64 inputs with the formula: its float64 cells share the formula's faults, each copy
# placed right after its formula entry so that a cell of either impl meets the same first match (known_fault)
KNOWN_FAULTS = tuple(
    g for f in KNOWN_FAULTS
    for g in ((f, replace(f, impl="kernel")) if f.impl == "formula" and f.dtypes == ("float64",) else (f,))
)


def known_fault(group, region: str) -> KnownFault | None:
    """The first KnownFault matching (group, region) that is certain for the group (KnownFault.certain), else the
    first that may or may not occur, or None: a fault that depends on the machine never hides a certain one."""
    maybe = None
    for f in KNOWN_FAULTS:
        if f.matches(group, region):
            if f.certain(group):
                return f
            maybe = maybe or f
    return maybe

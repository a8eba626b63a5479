"""SiLU, x sigmoid(x) (Elfwing, Uchibe & Doya 2018; Swish with beta = 1): one catalogue unit, everything
gelulab knows of it: the catalogue entry, its kernel's fit, the known faults of the frameworks' builtins
(torch.nn.functional.silu, jax.nn.silu, tf.nn.silu; numpy: x * scipy.special.expit(x)), and the classes that
compute it.
"""
from __future__ import annotations

from gelulab.core.activations._entry import Activation, Call, TimesX
from gelulab.core.activations._shared import FAR, X_CDF_LIMITS
from gelulab.core.numerics import float64_forms, formulas, kernels, mp_forms
from gelulab.core.parity.known_faults import fault

# the kernel fit's x sigma(z) form (core/numerics/kernel_fit.py): z = a
SIGMA_FORM = (lambda a: a, lambda a: a, lambda a: 0, 2.4)


# --- the known faults of the frameworks' builtins (core.parity.known_faults; measured by `gelulab parity`) ---

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

KNOWN_FAULTS = (
    fault(SILU_F16_SIGMOID, "jax", (0, 1), ('negative_tail', 'large'), ('float16',), ('eager', 'compiled')),
    fault(SILU_F16_SIGMOID, "jax", (2,), ('negative_tail',), ('float16',), ('eager', 'compiled')),
    fault(SILU_F16_SIGMOID_LOW_PRECISION, "jax", (2,), ('large',), ('float16',), ('eager', 'compiled')),
    fault(SILU_FTZ_SIGMOID_LOW_PRECISION_JAX, "jax", (1,), ('negative_tail',), ('bfloat16',), ('eager', 'compiled')),
    fault(SILU_FTZ_SIGMOID_JAX, "jax", (0, 2), ('negative_tail',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(SILU_FTZ_SIGMOID_JAX, "jax", (1,), ('negative_tail',), ('float64', 'float32'), ('eager', 'compiled')),
    fault(SILU_GRAD2_CANCEL_JAX, "jax", (2,), ('cases',), ('float64',), ('eager', 'compiled')),
    fault(SILU_GRAD2_CANCEL_JAX, "jax", (2,), ('grid', 'large'), ('float64', 'float32'), ('eager', 'compiled')),
    fault(SILU_INF_JAX, "jax", (0, 1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SILU_LOW_PRECISION_GRAD, "jax", (1, 2), ('cases',), ('float16',), ('eager', 'compiled')),
    fault(SILU_LOW_PRECISION_GRAD, "jax", (1, 2), ('grid',), ('bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SILU_LOW_PRECISION_GRAD, "jax", (2,), ('large',), ('bfloat16',), ('eager', 'compiled')),
    fault(SILU_EXP_OVERFLOW_NUMPY, "numpy", (0,), ('negative_tail',), ('float64',), ('eager',)),
    fault(SILU_INF_NUMPY, "numpy", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    fault(SILU_F16_SIGMOID, "tensorflow", (0, 1), ('negative_tail', 'large'), ('float16',), ('eager', 'compiled')),
    fault(SILU_F16_SIGMOID, "tensorflow", (2,), ('negative_tail',), ('float16',), ('eager', 'compiled')),
    fault(SILU_F16_SIGMOID_LOW_PRECISION, "tensorflow", (2,), ('large',), ('float16',), ('eager', 'compiled')),
    fault(SILU_FTZ_SIGMOID_TF, "tensorflow", (0, 1, 2), ('negative_tail',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(SILU_GRAD2_CANCEL_TF, "tensorflow", (2,), ('cases',), ('float64',), ('eager', 'compiled')),
    fault(SILU_GRAD2_CANCEL_TF, "tensorflow", (2,), ('grid', 'large'), ('float64', 'float32'), ('eager', 'compiled')),
    fault(SILU_INF_TF, "tensorflow", (0, 1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SILU_LOW_PRECISION_GRAD, "tensorflow", (1, 2), ('grid',), ('bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SILU_LOW_PRECISION_GRAD, "tensorflow", (2,), ('cases',), ('float16',), ('compiled',)),
    fault(SILU_LOW_PRECISION_GRAD, "tensorflow", (2,), ('large',), ('bfloat16',), ('eager', 'compiled')),
    fault(SILU_EXP_OVERFLOW_TORCH, "torch", (0, 1, 2), ('negative_tail',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(SILU_F16_SIGMOID, "torch", (1,), ('negative_tail', 'large'), ('float16',), ('eager',)),
    fault(SILU_F16_SIGMOID, "torch", (2,), ('negative_tail',), ('float16',), ('eager',)),
    fault(SILU_F16_SIGMOID_LOW_PRECISION, "torch", (2,), ('large',), ('float16',), ('eager',)),
    fault(SILU_GRAD2_CANCEL_TORCH, "torch", (2,), ('cases',), ('float64',), ('eager', 'compiled')),
    fault(SILU_GRAD2_CANCEL_TORCH, "torch", (2,), ('grid', 'large'), ('float64', 'float32'), ('eager', 'compiled')),
    fault(SILU_INF_TORCH, "torch", (0, 1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SILU_LOW_PRECISION_GRAD, "torch", (1, 2), ('grid',), ('bfloat16', 'float16'), ('eager',)),
    fault(SILU_LOW_PRECISION_GRAD, "torch", (2,), ('large',), ('bfloat16', 'float16'), ('compiled',)),
    fault(SILU_LOW_PRECISION_GRAD, "torch", (2,), ('large',), ('bfloat16',), ('eager',)),
)


ACTIVATION = Activation(
    "silu", "silu", None, formulas.silu, formulas.silu_d1, formulas.silu_d2, mp_forms.silu, X_CDF_LIMITS,
    "x sigmoid(x); Elfwing, Uchibe & Doya 2018, eq. 1 (SiLU); Ramachandran et al. 2017 (Swish, beta = 1)",
    builtins={"numpy": TimesX("scipy.special.expit"), "jax": Call("jax.nn.silu"),
              "torch": Call("torch.nn.functional.silu"), "tensorflow": Call("tensorflow.nn.silu")},
    clamp=formulas.CLAMP_SILU, far=FAR,
    # mpmath.findroot: f' = 0 at x = -1.2784645427610738 (the minimum, f = -0.2784645427610738),
    # f'' = 0 at x = +-2.3993572805154676 (x tanh(x/2) = 2). SiLU is flatter there than GELU (f'' = 0.218 at
    # the minimum, GELU 0.43): windows of +-0.2 and +-0.3 keep |f'| <= 0.05 and |f''| <= 0.035 inside, as
    # GELU's +-0.1 and +-0.2 keep |f'| <= 0.047 and |f''| <= 0.1.
    root_windows={1: ((-1.48, -1.08),), 2: ((-2.7, -2.1), (2.1, 2.7))},
    dense_tail=((-716.0, -707.0),),  # sigmoid(x) subnormal in float64 (x < -708.4) while f' is still normal
    color="tab:purple", hf_names=("silu", "swish"),
    kernel=kernels.sigmoid_kernel("silu", kernels.z_silu, kernels.zp_silu, a_max=(109.0, 110.0, 110.0)),
    float64=float64_forms.silu,
    position=50,
    known_faults=KNOWN_FAULTS,
    sigma_form=SIGMA_FORM,
    torch_classes=("torch.nn.modules.activation.SiLU", "transformers.activations.SiLUActivation"),
    keras_names=("silu",),  # keras.activations.swish is the same function
    layer_name="SiLU",
)

"""Exact GELU, x Phi(x) = x/2 erfc(-x/sqrt 2) (Hendrycks & Gimpel 2016, eq. 1): one catalogue unit, everything
gelulab knows of it: the catalogue entry, the known faults of the frameworks' builtins, and the classes that compute
it. Its kernel's polynomials are fitted by core/numerics/kernel_fit.py (GELU_K, GELU_W, GELU_D2_*).
"""
from __future__ import annotations

from gelulab.core.activations._entry import Activation, Call, TimesX
from gelulab.core.activations._shared import FAR, GELU_ROOTS, X_CDF_LIMITS
from gelulab.core.numerics import float64_forms, formulas, kernel_coeffs, kernels, mp_forms
from gelulab.core.parity.known_faults import (
    INF_GRAD,
    INF_VALUE,
    NUMPY_REF,
    OVERFLOW_GRAD,
    INF_VALUE_torch,
    fault,
)

# --- the known faults of the frameworks' builtins (core.parity.known_faults; measured by `gelulab parity`) ---

ERF_CANCEL = (
    "torch's exact GELU computes 0.5*x*(1+erf(x/sqrt2)): 1+erf cancels in the negative tail (17% low at x=-5, 0 from x~-6 in float32), also in its backward",
    'https://github.com/pytorch/pytorch/issues/187806 (fix: https://github.com/pytorch/pytorch/pull/189234, open)',
    'upstream',
)
INPUT_DTYPE_ERFC = (
    "jax.nn.gelu/tf.nn.gelu round the erfc argument -x/sqrt2 to the input dtype (error amplified ~x^2 times in the tail) and XLA flushes erfc's subnormal result to zero below x~-13 (f32/bf16) although x*Phi(x) is still normal",
    'https://github.com/jax-ml/jax/issues/16200 (flush-to-zero, working as intended); no report of the argument rounding found',
    'unreported',
)
OVERFLOW_GRAD_ERF_CANCEL = (
    "x^2 or x^3 overflows inside the builtin's derivative for large |x| (float16 from x=148..256), giving inf/NaN where f' is 1 or 0 and f'' is 0; and torch's exact GELU computes 0.5*x*(1+erf(x/sqrt2)): 1+erf cancels in the negative tail (17% low at x=-5, 0 from x~-6 in float32), also in its backward",
    'no torch/jax/tf report found (2026-11); same fault: https://github.com/facebookresearch/fairseq/issues/2235 ; https://github.com/pytorch/pytorch/issues/187806 (fix: https://github.com/pytorch/pytorch/pull/189234, open)',
    'unreported',
)
OVERFLOW_VALUE = (
    "torch's exact GELU overflows to inf at the dtype's maximum (FLT_MAX -> inf) although GELU(x) = x there",
    'no pytorch report found (2026-11); same fault: https://github.com/PaddlePaddle/Paddle/issues/79461',
)
SUBNORMAL_INTERMEDIATE = (
    'in float64 erfc (or sigmoid) is already subnormal, and flushed by XLA, where x*Phi(x) is still a normal number (x ~ -32 .. -38, or -417 for the sigmoid form)',
    'https://github.com/jax-ml/jax/issues/16200 (flush-to-zero); no GELU report',
    'unreported',
)
ERF_CANCEL_F16 = (
    ("torch's float16 exact GELU is its float32 kernel rounded to float16, and the vectorised float32 erf's error in "
     "1+erf (0.16% relative at x = -3.6) reaches 6 float16 ULP below x ~ -3.5"),
    'https://github.com/pytorch/pytorch/issues/187806 (the 1+erf cancellation; fix: https://github.com/pytorch/pytorch/pull/189234, open)',
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

KNOWN_FAULTS = (
    fault(INF_GRAD, "jax", (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INF_VALUE, "jax", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INPUT_DTYPE_ERFC, "jax", (0, 1, 2), ('negative_tail',), ('float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INPUT_DTYPE_ERFC, "jax", (0,), ('grid',), ('bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INPUT_DTYPE_ERFC, "jax", (0,), ('cases', 'large'), ('bfloat16',), ('eager',)),
    fault(INPUT_DTYPE_ERFC, "jax", (1, 2), ('cases', 'grid'), ('bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "jax", (2,), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SUBNORMAL_INTERMEDIATE, "jax", (0, 1, 2), ('negative_tail',), ('float64',), ('eager', 'compiled')),
    fault(NUMPY_REF, "numpy", (0,), ('negative_tail',), ('float64',), ('eager',)),
    fault(NUMPY_REF, "numpy", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    fault(INF_GRAD, "tensorflow", (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INF_VALUE, "tensorflow", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INPUT_DTYPE_ERFC, "tensorflow", (0, 1, 2), ('negative_tail',), ('float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INPUT_DTYPE_ERFC, "tensorflow", (0,), ('grid',), ('bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INPUT_DTYPE_ERFC, "tensorflow", (0,), ('cases', 'large'), ('bfloat16',), ('eager',)),
    fault(INPUT_DTYPE_ERFC, "tensorflow", (1, 2), ('cases', 'grid'), ('bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "tensorflow", (2,), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(TF_F64_CONST, "tensorflow", (0, 1, 2), ('cases', 'grid', 'large', 'negative_tail', 'tiny'), ('float64',), ('eager', 'compiled')),
    fault(ERF_CANCEL, "torch", (0,), ('cases', 'grid', 'large', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(ERF_CANCEL, "torch", (1,), ('cases', 'grid', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(ERF_CANCEL, "torch", (1,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager',)),
    fault(ERF_CANCEL, "torch", (1,), ('large',), ('float64', 'float32'), ('compiled',)),
    fault(ERF_CANCEL, "torch", (2,), ('grid', 'negative_tail'), ('bfloat16', 'float16'), ('eager',)),
    fault(INF_GRAD, "torch", (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INF_VALUE_torch, "torch", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "torch", (2,), ('large', 'near_max'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    fault(OVERFLOW_GRAD, "torch", (2,), ('large', 'near_max'), ('float64', 'float32', 'bfloat16'), ('compiled',)),
    fault(OVERFLOW_GRAD_ERF_CANCEL, "torch", (2,), ('cases',), ('float16',), ('eager',)),
    fault(OVERFLOW_VALUE, "torch", (0,), ('near_max',), ('float32', 'bfloat16'), ('eager',)),
    # CPU-dependent cells of torch's exact GELU (core.parity.cpu_dispatch; `make test-dispatch`)
    fault(ERF_CANCEL_F16, "torch", (0,), ('cases', 'grid', 'negative_tail'), ('float16',), ('eager',),
          varies=("the processor: beyond tolerance on an Intel Xeon with AVX-512 at ATen levels default, avx2 and "
                  "avx512, within it on the AMD EPYC where the rest of this table was first measured")),
    fault(ZERO_SIGN_TINY, "torch", (0,), ('tiny',), ('float32',), ('eager',),
          varies=("the processor: seen on a 2-core AMD EPYC without AVX-512 (ATen level avx2), not on an Intel Xeon "
                  "with AVX-512 at ATen levels default, avx2 or avx512, nor with flush-to-zero on or at any tensor "
                  "size from 1 to 10^5")),
)


ACTIVATION = Activation(
    "gelu_none", "gelu", "none", formulas.gelu_none, formulas.gelu_none_d1, formulas.gelu_none_d2,
    mp_forms.gelu_none, X_CDF_LIMITS, "x Phi(x) = x/2 erfc(-x/sqrt 2); Hendrycks & Gimpel 2016, eq. 1",
    builtins={"numpy": TimesX("scipy.stats.norm.cdf"),
              "jax": Call("jax.nn.gelu", kwargs={"approximate": False}),
              "torch": Call("torch.nn.functional.gelu", kwargs={"approximate": "none"}),
              "tensorflow": Call("tensorflow.nn.gelu", kwargs={"approximate": False})},
    clamp=formulas.CLAMP_GELU_NONE, far=FAR, root_windows=GELU_ROOTS, dense_tail=((-38.6, -37.2), (-36.5, -24.5)),
    headline=True, color="tab:blue", hf_names=("gelu",),
    kernel=kernels.Kernel(kernels.gelu_none, kernels.gelu_none_d1, kernels.gelu_none_d2,
                          a_max=kernels.GELU_NONE_A_MAX, d1_root=kernel_coeffs.GELU_A0_HI),
    float64=float64_forms.gelu_none,
    position=20,
    known_faults=KNOWN_FAULTS,
    # torch.nn.GELU computes this entry with approximate="none"; transformers' GELUActivation is F.gelu, or
    # 0.5 x (1 + erf(x / sqrt 2)) with use_gelu_python (transformers/activations.py, 4.x and 5.x)
    torch_classes=("torch.nn.modules.activation.GELU", "transformers.activations.GELUActivation"),
    keras_names=("gelu",),  # keras.activations.gelu defaults to approximate=False
    layer_name="GELU",
    tail_signatures=("1+erf cancellation",),  # 0.5 x (1 + erf(x / sqrt 2))
)

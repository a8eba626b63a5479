"""tanh-form GELU, x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) (Hendrycks & Gimpel 2016, sec. 2): one
catalogue unit, everything gelulab knows of it: the catalogue entry, its kernel's fit, the known faults of the
frameworks' builtins, and the classes that compute it.
"""
from __future__ import annotations

import mpmath

from gelulab.core.activations._entry import Activation, Call, Expression
from gelulab.core.activations._shared import FAR, GELU_ROOTS, X_CDF_LIMITS
from gelulab.core.numerics import float64_forms, formulas, kernels, mp_forms
from gelulab.core.parity.known_faults import (
    INF_GRAD,
    INF_VALUE,
    NUMPY_REF,
    OVERFLOW_GRAD,
    INF_VALUE_torch,
    fault,
)


def _numpy_tanh_form(resolver, x):
    # PyTorch OpInfo's reference_gelu for approximate="tanh" (torch/testing/_internal/common_methods_invocations.py)
    tanh = resolver("numpy.tanh")
    return 0.5 * x * (1.0 + tanh(formulas.SQRT_2_OVER_PI * (x + formulas.TANH_CUBIC * x**3)))


# the kernel fit's x sigma(z) form (core/numerics/kernel_fit.py): z = 2u = C a + D a^3, C = 2 sqrt(2/pi), D = 0.044715 C
# (the exact decimal, as the frameworks state it), at the fit's working precision
def _c():
    return 2 * mpmath.sqrt(2 / mpmath.pi)


def _d():
    return _c() * mpmath.mpf("0.044715")


SIGMA_FORM = (lambda a: _c() * a + _d() * a**3, lambda a: _c() * a + 3 * _d() * a**3, lambda a: 6 * _d() * a * a,
              1.42)


# --- the known faults of the frameworks' builtins (core.parity.known_faults; measured by `gelulab parity`) ---

OVERFLOW_GRAD_TANH_CANCEL = (
    "x^2 or x^3 overflows inside the builtin's derivative for large |x| (float16 from x=148..256), giving inf/NaN where f' is 1 or 0 and f'' is 0; and the builtin tanh form computes 0.5*x*(1+tanh(u)): 1+tanh cancels for x below about -3 (bf16), -5 (f32), -7 (f64), giving 0 or 100% error where x*sigmoid(2u) is tiny; its derivatives likewise",
    'no torch/jax/tf report found (2026-11); same fault: https://github.com/facebookresearch/fairseq/issues/2235 ; no torch/jax/tf report found (2026-11); same fault: https://github.com/tenstorrent/tt-metal/issues/56517',
)
TANH_CANCEL = (
    'the builtin tanh form computes 0.5*x*(1+tanh(u)): 1+tanh cancels for x below about -3 (bf16), -5 (f32), -7 (f64), giving 0 or 100% error where x*sigmoid(2u) is tiny; its derivatives likewise',
    'no torch/jax/tf report found (2026-11); same fault: https://github.com/tenstorrent/tt-metal/issues/56517',
)

KNOWN_FAULTS = (
    fault(INF_GRAD, "jax", (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INF_VALUE, "jax", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "jax", (1, 2), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "jax", (1,), ('large',), ('float16',), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "jax", (1,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "jax", (2,), ('large',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "jax", (1, 2), ('cases',), ('float16',), ('eager', 'compiled')),
    fault(TANH_CANCEL, "jax", (0,), ('cases', 'grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "jax", (0,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "jax", (1, 2), ('grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "jax", (1, 2), ('cases',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(NUMPY_REF, "numpy", (0,), ('cases', 'grid', 'large', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('eager',)),
    fault(NUMPY_REF, "numpy", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    fault(NUMPY_REF, "numpy", (1,), ('negative_tail',), ('float64',), ('eager',)),
    fault(INF_GRAD, "tensorflow", (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INF_VALUE, "tensorflow", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "tensorflow", (1, 2), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "tensorflow", (1,), ('large',), ('float16',), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "tensorflow", (1,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "tensorflow", (2,), ('large',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "tensorflow", (1, 2), ('cases',), ('float16',), ('eager', 'compiled')),
    fault(TANH_CANCEL, "tensorflow", (0,), ('cases', 'grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "tensorflow", (0,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "tensorflow", (1, 2), ('grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "tensorflow", (1, 2), ('cases',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(INF_GRAD, "torch", (1, 2), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(INF_VALUE_torch, "torch", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "torch", (1,), ('near_max',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD, "torch", (2,), ('near_max',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    fault(OVERFLOW_GRAD, "torch", (2,), ('near_max',), ('float64', 'float32', 'bfloat16'), ('compiled',)),
    fault(OVERFLOW_GRAD, "torch", (2,), ('large',), ('float16',), ('eager',)),
    fault(OVERFLOW_GRAD, "torch", (2,), ('large',), ('bfloat16',), ('compiled',)),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "torch", (1,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "torch", (2,), ('large',), ('float64', 'float32', 'bfloat16'), ('eager',)),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "torch", (2,), ('large',), ('float64', 'float32'), ('compiled',)),
    fault(OVERFLOW_GRAD_TANH_CANCEL, "torch", (2,), ('cases',), ('float16',), ('eager',)),
    fault(TANH_CANCEL, "torch", (0,), ('cases', 'grid', 'large', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "torch", (1,), ('cases', 'grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "torch", (2,), ('grid', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(TANH_CANCEL, "torch", (2,), ('cases',), ('float64', 'float32', 'bfloat16'), ('eager',)),
    fault(TANH_CANCEL, "torch", (2,), ('cases',), ('float64', 'float32', 'bfloat16', 'float16'), ('compiled',)),
    # the negative tail sampled down to each entry's own underflow point (core.parity.regions): float16 x ~ -5.06
    # eager and compiled alike: inductor's generated loops take ATen's level too (scalar code at "default")
    fault(TANH_CANCEL, "torch", (0,), ('negative_tail',), ('float16',), ('eager', 'compiled'),
          dispatch=("avx2", "avx512")),
)


ACTIVATION = Activation(
    "gelu_tanh", "gelu", "tanh", formulas.gelu_tanh, formulas.gelu_tanh_d1, formulas.gelu_tanh_d2,
    mp_forms.gelu_tanh, X_CDF_LIMITS,
    "x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))); Hendrycks & Gimpel 2016, sec. 2",
    builtins={"numpy": Expression("0.5 * x * (1 + numpy.tanh(sqrt(2/pi) (x + 0.044715 x**3)))",
                                  _numpy_tanh_form),
              "jax": Call("jax.nn.gelu", kwargs={"approximate": True}),
              "torch": Call("torch.nn.functional.gelu", kwargs={"approximate": "tanh"}),
              "tensorflow": Call("tensorflow.nn.gelu", kwargs={"approximate": True})},
    clamp=formulas.CLAMP_GELU_TANH, far=FAR, root_windows=GELU_ROOTS, dense_tail=((-21.6, -20.8),),
    color="tab:orange", hf_names=("gelu_pytorch_tanh", "gelu_new"),
    kernel=kernels.sigmoid_kernel("gelu_tanh", kernels.z_tanh, kernels.zp_tanh, a_max=(11.0, 11.0, 11.0)),
    float64=float64_forms.gelu_tanh,
    position=30,
    known_faults=KNOWN_FAULTS,
    sigma_form=SIGMA_FORM,
    # torch.nn.GELU with approximate="tanh"; transformers (activations.py, 4.x and 5.x): GELUTanh (alias
    # PytorchGELUTanh, a class of its own in 4.x) is F.gelu(approximate="tanh") or its Python form;
    # NewGELUActivation and AccurateGELUActivation 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)));
    # FastGELUActivation 0.5 x (1 + tanh(0.7978845608 x (1 + 0.044715 x^2))) (sqrt(2/pi) to 10 digits)
    torch_classes=("torch.nn.modules.activation.GELU", "transformers.activations.GELUTanh",
                   "transformers.activations.PytorchGELUTanh", "transformers.activations.NewGELUActivation",
                   "transformers.activations.FastGELUActivation", "transformers.activations.AccurateGELUActivation"),
    layer_name="GELU",
    tail_signatures=("1+tanh cancellation",),  # 0.5 x (1 + tanh u) instead of x sigmoid(2u)
)

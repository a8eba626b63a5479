"""sigmoid-form GELU, x sigmoid(1.702 x) (Hendrycks & Gimpel 2016, sec. 2): one catalogue unit, everything
gelulab knows of it: the catalogue entry, its kernel's fit, the known faults of the one-liners users write (no
framework ships the form), and the classes that compute it.
"""
from __future__ import annotations

import mpmath

from gelulab.core.activations._entry import Activation, TimesX
from gelulab.core.activations._shared import FAR, GELU_ROOTS, X_CDF_LIMITS
from gelulab.core.numerics import float64_forms, formulas, kernels, mp_forms
from gelulab.core.parity.known_faults import NUMPY_REF, fault

# the kernel fit's x sigma(z) form (core/numerics/kernel_fit.py): z = k a, k = 1.702 (the exact decimal, as the frameworks
# state it), at the fit's working precision
SIGMA_FORM = (lambda a: mpmath.mpf("1.702") * a, lambda a: mpmath.mpf("1.702") * a, lambda a: 0, 1.41)


# --- the known faults of the frameworks' builtins (core.parity.known_faults; measured by `gelulab parity`) ---

SIGMOID_ONELINER = (
    'no framework ships the sigmoid form: the builtin is the one-liner x*sigmoid(1.702*x) in the input dtype, whose sigmoid underflows/flushes in the tail before the product does, whose 1.702*x is rounded to the input dtype, and whose autodiff sigmoid*(1-sigmoid) cancels for large x',
    'https://github.com/huggingface/transformers/blob/main/src/transformers/activations.py (QuickGELUActivation, the usual source of the one-liner)',
    'unreported',
)

KNOWN_FAULTS = (
    fault(SIGMOID_ONELINER, "jax", (0, 1), ('negative_tail', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "jax", (2,), ('grid', 'large', 'near_max', 'negative_tail', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "jax", (2,), ('cases',), ('float64', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "jax", (0, 1), ('cases', 'grid', 'large'), ('bfloat16', 'float16'), ('eager', 'compiled')),
    fault(NUMPY_REF, "numpy", (0,), ('negative_tail',), ('float64',), ('eager',)),
    fault(NUMPY_REF, "numpy", (0,), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    fault(SIGMOID_ONELINER, "tensorflow", (0, 1), ('negative_tail', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "tensorflow", (2,), ('grid', 'large', 'near_max', 'negative_tail', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "tensorflow", (2,), ('cases',), ('float64', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "tensorflow", (0, 1), ('cases', 'grid', 'large'), ('bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "torch", (0, 1), ('negative_tail',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    fault(SIGMOID_ONELINER, "torch", (0, 1), ('negative_tail',), ('float64', 'float32', 'bfloat16'), ('compiled',)),
    fault(SIGMOID_ONELINER, "torch", (0, 1), ('specials',), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "torch", (2,), ('grid', 'large', 'specials'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager', 'compiled')),
    fault(SIGMOID_ONELINER, "torch", (2,), ('near_max', 'negative_tail'), ('float64', 'float32', 'bfloat16', 'float16'), ('eager',)),
    fault(SIGMOID_ONELINER, "torch", (2,), ('near_max', 'negative_tail'), ('float64', 'float32', 'bfloat16'), ('compiled',)),
    fault(SIGMOID_ONELINER, "torch", (2,), ('cases',), ('float64', 'bfloat16', 'float16'), ('eager',)),
    fault(SIGMOID_ONELINER, "torch", (2,), ('cases',), ('float64',), ('compiled',)),
    fault(SIGMOID_ONELINER, "torch", (0, 1), ('cases', 'grid', 'large'), ('bfloat16', 'float16'), ('eager',)),
)


ACTIVATION = Activation(
    "gelu_sigmoid", "gelu", "sigmoid", formulas.gelu_sigmoid, formulas.gelu_sigmoid_d1,
    formulas.gelu_sigmoid_d2, mp_forms.gelu_sigmoid, X_CDF_LIMITS,
    "x sigmoid(1.702 x); Hendrycks & Gimpel 2016, sec. 2",
    # no framework ships the sigmoid form: its builtin is the one-liner users write
    builtins={"numpy": TimesX("scipy.special.expit", formulas.SIGMOID_SCALE),
              "jax": TimesX("jax.nn.sigmoid", formulas.SIGMOID_SCALE),
              "torch": TimesX("torch.sigmoid", formulas.SIGMOID_SCALE),
              "tensorflow": TimesX("tensorflow.math.sigmoid", formulas.SIGMOID_SCALE)},
    clamp=formulas.CLAMP_GELU_SIGMOID, far=FAR, root_windows=GELU_ROOTS, dense_tail=((-420.0, -416.0),),
    color="tab:green", hf_names=("quick_gelu",),
    kernel=kernels.sigmoid_kernel("gelu_sigmoid", kernels.z_sigmoid, kernels.zp_sigmoid,
                                  a_max=(64.5, 65.0, 65.0)),
    float64=float64_forms.gelu_sigmoid,
    position=40,
    known_faults=KNOWN_FAULTS,
    sigma_form=SIGMA_FORM,
    torch_classes=("transformers.activations.QuickGELUActivation",),  # x sigmoid(1.702 x)
    layer_name="GELU",
)

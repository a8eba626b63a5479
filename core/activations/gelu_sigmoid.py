"""sigmoid-form GELU, x sigmoid(1.702 x) (Hendrycks & Gimpel 2016, sec. 2): one catalogue unit, everything
gelulab knows of it: the catalogue entry, its kernel's fit and the classes that compute it (the known faults of
the one-liners users write, since no framework ships the form, are data: faults/gelu_sigmoid.toml).
"""
from __future__ import annotations

import mpmath

from gelulab.core.activations._entry import Activation, TimesX
from gelulab.core.activations._shared import FAR, GELU_ROOTS, X_CDF_LIMITS
from gelulab.core.numerics import float64_forms, formulas, kernels, mp_forms
from gelulab.core.parity import fault_data

# the kernel fit's x sigma(z) form (core/numerics/kernel_fit.py): z = k a, k = 1.702 (the exact decimal, as the
# frameworks state it), at the fit's working precision
SIGMA_FORM = (lambda a: mpmath.mpf("1.702") * a, lambda a: mpmath.mpf("1.702") * a, lambda a: 0, 1.41)


ACTIVATION = Activation(
    # identity
    key="gelu_sigmoid", op="gelu", mode="sigmoid", source="x sigmoid(1.702 x); Hendrycks & Gimpel 2016, sec. 2",
    position=40,
    # numerics
    formula=formulas.gelu_sigmoid, d1=formulas.gelu_sigmoid_d1, d2=formulas.gelu_sigmoid_d2,
    mp=mp_forms.gelu_sigmoid, limits=X_CDF_LIMITS, clamp=formulas.CLAMP_GELU_SIGMOID, far=FAR,
    kernel=kernels.sigmoid_kernel("gelu_sigmoid", kernels.z_sigmoid, kernels.zp_sigmoid,
                                  a_max=(64.5, 65.0, 65.0)),
    float64=float64_forms.gelu_sigmoid, sigma_form=SIGMA_FORM,
    # parity
    root_windows=GELU_ROOTS, dense_tail=((-420.0, -416.0),),
    known_faults=fault_data.load("gelu_sigmoid"),
    # presentation
    words="sigmoid GELU", color="tab:green",
    # integrations: no framework ships the sigmoid form, its builtin is the one-liner users write
    builtins={"numpy": TimesX("scipy.special.expit", formulas.SIGMOID_SCALE),
              "jax": TimesX("jax.nn.sigmoid", formulas.SIGMOID_SCALE),
              "torch": TimesX("torch.sigmoid", formulas.SIGMOID_SCALE),
              "tensorflow": TimesX("tensorflow.math.sigmoid", formulas.SIGMOID_SCALE)},
    hf_names=("quick_gelu",),
    torch_classes=("transformers.activations.QuickGELUActivation",),  # x sigmoid(1.702 x)
    layer_name="GELU",
)

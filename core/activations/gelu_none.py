"""Exact GELU, x Phi(x) = x/2 erfc(-x/sqrt 2) (Hendrycks & Gimpel 2016, eq. 1): one catalogue unit, everything
gelulab knows of it: the catalogue entry and the classes that compute it (the known faults of the frameworks'
builtins are data: faults/gelu_none.toml). Its kernel's polynomials are fitted by core/numerics/kernel_fit.py
(GELU_K, GELU_W, GELU_D2_*).
"""
from __future__ import annotations

from gelulab.core.activations._entry import Activation, Call, TimesX
from gelulab.core.activations._shared import FAR, GELU_ROOTS, X_CDF_LIMITS
from gelulab.core.numerics import float64_forms, formulas, kernel_coeffs, kernels, mp_forms
from gelulab.core.parity import fault_data

ACTIVATION = Activation(
    # identity
    key="gelu_none", op="gelu", mode="none", source="x Phi(x) = x/2 erfc(-x/sqrt 2); Hendrycks & Gimpel 2016, eq. 1",
    position=20,
    # numerics
    formula=formulas.gelu_none, d1=formulas.gelu_none_d1, d2=formulas.gelu_none_d2, mp=mp_forms.gelu_none,
    limits=X_CDF_LIMITS, clamp=formulas.CLAMP_GELU_NONE, far=FAR,
    kernel=kernels.Kernel(kernels.gelu_none, kernels.gelu_none_d1, kernels.gelu_none_d2,
                          a_max=kernels.GELU_NONE_A_MAX, d1_root=kernel_coeffs.GELU_A0_HI),
    float64=float64_forms.gelu_none,
    # parity
    root_windows=GELU_ROOTS, dense_tail=((-38.6, -37.2), (-36.5, -24.5)),
    known_faults=fault_data.load("gelu_none"),
    # presentation
    words="exact GELU", color="tab:blue", headline=True,
    # integrations
    builtins={"numpy": TimesX("scipy.stats.norm.cdf"),
              "jax": Call("jax.nn.gelu", kwargs={"approximate": False}),
              "torch": Call("torch.nn.functional.gelu", kwargs={"approximate": "none"}),
              "tensorflow": Call("tensorflow.nn.gelu", kwargs={"approximate": False})},
    hf_names=("gelu",),
    # torch.nn.GELU computes this entry with approximate="none"; transformers' GELUActivation is F.gelu, or
    # 0.5 x (1 + erf(x / sqrt 2)) with use_gelu_python (transformers/activations.py, 4.x and 5.x)
    torch_classes=("torch.nn.modules.activation.GELU", "transformers.activations.GELUActivation"),
    keras_names=("gelu",),  # keras.activations.gelu defaults to approximate=False
    layer_name="GELU",
    tail_signatures=("1+erf cancellation",),  # 0.5 x (1 + erf(x / sqrt 2))
)

"""tanh-form GELU, x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) (Hendrycks & Gimpel 2016, sec. 2): one
catalogue unit, everything gelulab knows of it: the catalogue entry, its kernel's fit and the classes that compute it
(the known faults of the frameworks' builtins are data: faults/gelu_tanh.toml).
"""
from __future__ import annotations

import mpmath

from gelulab.core.activations._entry import Activation, Call, Expression
from gelulab.core.activations._shared import FAR, GELU_ROOTS, X_CDF_LIMITS
from gelulab.core.numerics import float64_forms, formulas, kernels, mp_forms
from gelulab.core.parity import fault_data


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


ACTIVATION = Activation(
    # identity
    key="gelu_tanh", op="gelu", mode="tanh",
    source="x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))); Hendrycks & Gimpel 2016, sec. 2", position=30,
    # numerics
    formula=formulas.gelu_tanh, d1=formulas.gelu_tanh_d1, d2=formulas.gelu_tanh_d2, mp=mp_forms.gelu_tanh,
    limits=X_CDF_LIMITS, clamp=formulas.CLAMP_GELU_TANH, far=FAR,
    kernel=kernels.sigmoid_kernel("gelu_tanh", kernels.z_tanh, kernels.zp_tanh, a_max=(11.0, 11.0, 11.0)),
    float64=float64_forms.gelu_tanh, sigma_form=SIGMA_FORM,
    # parity
    root_windows=GELU_ROOTS, dense_tail=((-21.6, -20.8),),
    known_faults=fault_data.load("gelu_tanh"),
    # presentation
    words="tanh GELU", color="tab:orange",
    # integrations
    builtins={"numpy": Expression("0.5 * x * (1 + numpy.tanh(sqrt(2/pi) (x + 0.044715 x**3)))",
                                  _numpy_tanh_form),
              "jax": Call("jax.nn.gelu", kwargs={"approximate": True}),
              "torch": Call("torch.nn.functional.gelu", kwargs={"approximate": "tanh"}),
              "tensorflow": Call("tensorflow.nn.gelu", kwargs={"approximate": True})},
    hf_names=("gelu_pytorch_tanh", "gelu_new"),
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

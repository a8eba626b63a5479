"""SiLU, x sigmoid(x) (Elfwing, Uchibe & Doya 2018; Swish with beta = 1): one catalogue unit, everything
gelulab knows of it: the catalogue entry, its kernel's fit and the classes that compute it (the known faults of the
frameworks' builtins, torch.nn.functional.silu, jax.nn.silu, tf.nn.silu and numpy's x * scipy.special.expit(x), are
data: faults/silu.toml).
"""
from __future__ import annotations

from gelulab.core.activations._entry import Activation, Call, TimesX
from gelulab.core.activations._shared import FAR, X_CDF_LIMITS
from gelulab.core.numerics import float64_forms, formulas, kernels, mp_forms
from gelulab.core.parity import fault_data

# the kernel fit's x sigma(z) form (core/numerics/kernel_fit.py): z = a
SIGMA_FORM = (lambda a: a, lambda a: a, lambda a: 0, 2.4)


ACTIVATION = Activation(
    # identity
    key="silu", op="silu",
    source="x sigmoid(x); Elfwing, Uchibe & Doya 2018, eq. 1 (SiLU); Ramachandran et al. 2017 (Swish, beta = 1)",
    position=50,
    # numerics
    formula=formulas.silu, d1=formulas.silu_d1, d2=formulas.silu_d2, mp=mp_forms.silu, limits=X_CDF_LIMITS,
    clamp=formulas.CLAMP_SILU, far=FAR,
    kernel=kernels.sigmoid_kernel("silu", kernels.z_silu, kernels.zp_silu, a_max=(109.0, 110.0, 110.0)),
    float64=float64_forms.silu, sigma_form=SIGMA_FORM,
    # parity. mpmath.findroot: f' = 0 at x = -1.2784645427610738 (the minimum, f = -0.2784645427610738),
    # f'' = 0 at x = +-2.3993572805154676 (x tanh(x/2) = 2). SiLU is flatter there than GELU (f'' = 0.218 at
    # the minimum, GELU 0.43): windows of +-0.2 and +-0.3 keep |f'| <= 0.05 and |f''| <= 0.035 inside, as
    # GELU's +-0.1 and +-0.2 keep |f'| <= 0.047 and |f''| <= 0.1.
    root_windows={1: ((-1.48, -1.08),), 2: ((-2.7, -2.1), (2.1, 2.7))},
    dense_tail=((-716.0, -707.0),),  # sigmoid(x) subnormal in float64 (x < -708.4) while f' is still normal
    known_faults=fault_data.load("silu"),
    # presentation
    words="SiLU", color="tab:purple",
    # integrations
    builtins={"numpy": TimesX("scipy.special.expit"), "jax": Call("jax.nn.silu"),
              "torch": Call("torch.nn.functional.silu"), "tensorflow": Call("tensorflow.nn.silu")},
    hf_names=("silu", "swish"),
    torch_classes=("torch.nn.modules.activation.SiLU", "transformers.activations.SiLUActivation"),
    keras_names=("silu",),  # keras.activations.swish is the same function
    layer_name="SiLU",
)

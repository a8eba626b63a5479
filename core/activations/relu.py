"""ReLU, max(x, 0) (Nair & Hinton 2010): one catalogue unit, everything gelulab knows of it.

No framework builtin of ReLU has a known fault in the parity matrix, so it has no faults file.
"""
from __future__ import annotations

import math

from gelulab.core.activations._entry import Activation, Call
from gelulab.core.numerics import float64_forms, formulas, kernels, mp_forms

ACTIVATION = Activation(
    # identity
    key="relu", op="relu", source="max(x, 0); Nair & Hinton 2010", position=10,
    # numerics
    formula=formulas.relu, d1=formulas.relu_d1, d2=formulas.relu_d2, mp=mp_forms.relu,
    limits={0: (0.0, math.inf), 1: (0.0, 1.0), 2: (0.0, 0.0)},
    kernel=kernels.Kernel(kernels.relu, kernels.relu_d1, kernels.relu_d2),
    float64=float64_forms.relu,
    # parity: relu(-0) = +0 by convention, and the derivative at NaN is the frameworks' mask (0 or 1)
    zero_sign=False, nan_derivative=False,
    # presentation
    words="ReLU", color="tab:red", smooth=False, baseline=True, headline=True,
    # integrations
    builtins={"numpy": Call("numpy.maximum", args=(0.0,)), "jax": Call("jax.nn.relu"),
              "torch": Call("torch.nn.functional.relu"), "tensorflow": Call("tensorflow.nn.relu")},
    hf_names=("relu",),
    torch_classes=("torch.nn.modules.activation.ReLU",),
    keras_names=("relu",),
    layer_name="ReLU",
)

"""ReLU, max(x, 0) (Nair & Hinton 2010): one catalogue unit, everything gelulab knows of it.

No framework builtin of ReLU has a known fault in the parity matrix, so its `known_faults` is empty.
"""
from __future__ import annotations

import math

from gelulab.core.activations._entry import Activation, Call
from gelulab.core.numerics import float64_forms, formulas, kernels, mp_forms

ACTIVATION = Activation(
    "relu", "relu", None, formulas.relu, formulas.relu_d1, formulas.relu_d2, mp_forms.relu,
    {0: (0.0, math.inf), 1: (0.0, 1.0), 2: (0.0, 0.0)}, "max(x, 0); Nair & Hinton 2010",
    builtins={"numpy": Call("numpy.maximum", args=(0.0,)), "jax": Call("jax.nn.relu"),
              "torch": Call("torch.nn.functional.relu"), "tensorflow": Call("tensorflow.nn.relu")},
    zero_sign=False, nan_derivative=False, smooth=False, baseline=True, headline=True, color="tab:red",
    hf_names=("relu",), kernel=kernels.Kernel(kernels.relu, kernels.relu_d1, kernels.relu_d2),
    float64=float64_forms.relu,
    position=10,
    torch_classes=("torch.nn.modules.activation.ReLU",),
    keras_names=("relu",),
    layer_name="ReLU",
)

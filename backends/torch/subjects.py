"""torch's activation callables that gelulab.identify is measured on (core.contracts.contract.Subjects):
torch.nn.functional's GELU, ReLU and SiLU and the torch.nn layers, transformers' activation modules
(transformers/activations.py, on torch; left out when transformers is not installed), GELU formulas written in torch
operations as users write them, and torch.tanh, which is none of the variants.
"""
from __future__ import annotations

import functools
import importlib.util

import torch
import torch.nn.functional as F


def subjects() -> dict:
    """{expression: callable}, each key the Python expression `gelulab identify` evaluates to that callable."""
    out = {
        "torch.nn.functional.gelu": F.gelu,
        "functools.partial(torch.nn.functional.gelu, approximate='tanh')": functools.partial(F.gelu,
                                                                                             approximate="tanh"),
        "torch.nn.GELU()": torch.nn.GELU(),
        "torch.nn.GELU('tanh')": torch.nn.GELU("tanh"),
        "torch.nn.functional.relu": F.relu,
        "torch.nn.functional.silu": F.silu,
        "torch.nn.SiLU()": torch.nn.SiLU(),
    }
    if importlib.util.find_spec("transformers") is not None:
        from transformers import activations as hf

        out.update({
            "transformers.activations.GELUActivation()": hf.GELUActivation(),
            "transformers.activations.GELUActivation(use_gelu_python=True)":
                hf.GELUActivation(use_gelu_python=True),
            "transformers.activations.GELUTanh()": hf.GELUTanh(),
            "transformers.activations.GELUTanh(use_gelu_tanh_python=True)":
                hf.GELUTanh(use_gelu_tanh_python=True),
            "transformers.activations.NewGELUActivation()": hf.NewGELUActivation(),
            "transformers.activations.FastGELUActivation()": hf.FastGELUActivation(),
            "transformers.activations.AccurateGELUActivation()": hf.AccurateGELUActivation(),
            "transformers.activations.QuickGELUActivation()": hf.QuickGELUActivation(),
            "transformers.activations.SiLUActivation()": hf.SiLUActivation(),
            "transformers.activations.ClippedGELUActivation(-10, 10)": hf.ClippedGELUActivation(-10, 10),
        })
    out.update({
        "lambda x: x * torch.sigmoid(1.702 * x)": lambda x: x * torch.sigmoid(1.702 * x),
        "lambda x: x * torch.sigmoid(1.5 * x)": lambda x: x * torch.sigmoid(1.5 * x),
        "lambda x: 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))": lambda x: 0.5 * x * (1 + torch.erf(x / 2 ** 0.5)),
        "lambda x: x * torch.sigmoid(x)": lambda x: x * torch.sigmoid(x),
        "torch.tanh": torch.tanh,
    })
    return out

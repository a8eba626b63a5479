"""identify's probe on torch (the `probe` tool module, gelulab.backends.tools): torch tensors fed to callables of
torch and transformers, and to torch.nn.Modules. torch is asked for in sys.modules only, never imported here."""
from __future__ import annotations

import sys

import numpy as np

MODULES = ("torch", "transformers")
ARRAY_KIND = "torch tensor"


def owner(fn) -> str | None:
    """"torch" for a torch.nn.Module (a layer, a transformers activation), else None."""
    torch = sys.modules.get("torch")
    return "torch" if torch is not None and isinstance(fn, torch.nn.Module) else None


def native(a: np.ndarray):
    """A CPU torch tensor holding a copy of `a`, the same dtype and shape."""
    return sys.modules["torch"].from_numpy(a.copy())


def as_numpy(y) -> np.ndarray | None:
    """A torch tensor as a numpy array on the host (detached), None for anything else."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(y, torch.Tensor):
        return None
    return y.detach().cpu().numpy()


def context():
    """torch.no_grad(): the probe records no autograd graph (a module with parameters would build one)."""
    return sys.modules["torch"].no_grad()


def float64_note() -> str:
    """"": torch computes float64 as asked."""
    return ""



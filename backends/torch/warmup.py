"""The warmup tool of the torch backend (`gelulab warmup`; backends.tools): torch's float32 kernel loops built ahead
(backends.torch.kernels.warmup: AOTInductor loops, each built in a child process) into GELULAB_KERNEL_CACHE. Imports
no framework: torch is imported by `warmup` only."""
from __future__ import annotations


def warmup(keys, device: str = "cpu") -> list[str]:
    """Build (or load where built) every kernel loop of the catalogue entries `keys` for `device` ("cpu"); returns
    the package files written or found. Raises RuntimeError naming a kernel whose build failed, ImportError where
    torch is not installed."""
    from gelulab.backends.torch import kernels

    return kernels.warmup(keys, device)


def cache() -> str:
    """The folder the loops are kept in (GELULAB_KERNEL_CACHE; core.plumbing.config.kernel_cache)."""
    from gelulab.core.plumbing import config

    return config.kernel_cache()

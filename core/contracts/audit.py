"""The record a model reader gives api.audit for each activation site: defined here, below the backends, so that
a reader (`backends/<framework>/audit.py`) can build it without importing gelulab.api; gelulab.api.audit re-exports
it as `Site`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Site:
    """One activation site found by a format's reader.

    path: where it is (a module path "encoder.layer.0.intermediate.intermediate_act_fn", or the graph's node
    names "/encoder/layer.0/intermediate/Gelu" joined by ", "); op: what the graph shows there, in the runtime's
    own words ("torch.nn.GELU(approximate='tanh')", "aten.gelu.default(approximate='tanh')",
    "com.microsoft.FastGelu", "Div, Erf, Add, Mul, Mul", "TFLite GELU(approximate=False)"); how: how it was
    probed ("cut out, run by onnxruntime 1.22 with ORT_ENABLE_ALL", "bias set to 0", "pairs from one forward
    pass of N(0, 1) inputs"); probe: float32 numpy array -> float32 numpy array of the same shape, running the
    site in its runtime, or None; pairs: (x, y) float32 arrays of one shape, or None. Exactly one of probe and
    pairs is given (ValueError otherwise)."""

    path: str
    op: str
    how: str
    probe: Callable | None = field(default=None, repr=False, compare=False)
    pairs: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if (self.probe is None) == (self.pairs is None):
            raise ValueError(f"site {self.path!r}: give exactly one of probe and pairs")

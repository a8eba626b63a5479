"""The framework-wide settings gelulab can apply for reproducible runs, as a record (no framework imported here).

`gelulab.reproducible(...)` (backends/settings.py) validates them into a `Settings`, keeps it here as the
settings this process asked for (`requested()`, recorded in every report by core.plumbing.report.environment), and has
each backend's activations module apply them. Nothing else in gelulab changes a framework-wide setting.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

_state: dict = {"requested": None}


@dataclass(frozen=True)
class Settings:
    """threads: intra-op (and TF inter-op) thread count, a positive int, or None to leave the frameworks' own;
    x64: JAX's jax_enable_x64 (True: float64 arrays exist), None to leave it; tf32: False for float32 matmuls and
    convolutions in full float32 (torch and TF TF32 off, JAX jax_default_matmul_precision "highest"), True for the
    reduced-precision defaults of GPUs, None to leave them.

    Raises ValueError naming the field for any other value.
    """

    threads: int | None = 1
    x64: bool | None = True
    tf32: bool | None = False

    def __post_init__(self):
        t = self.threads
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 1):
            raise ValueError(f"threads={t!r}; expected a positive integer or None")
        for name in ("x64", "tf32"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, bool):
                raise ValueError(f"{name}={v!r}; expected True, False or None")

    def as_dict(self) -> dict:
        """{"threads", "x64", "tf32"} as plain values (for reports)."""
        return asdict(self)


def requested() -> Settings | None:
    """The Settings of the last `gelulab.reproducible` call in this process, None when it was never called."""
    return _state["requested"]


def record(settings: Settings) -> None:
    """Keep `settings` as the ones this process asked for (called by gelulab.reproducible only)."""
    if not isinstance(settings, Settings):
        raise TypeError(f"expected a Settings, got {type(settings).__name__}")
    _state["requested"] = settings

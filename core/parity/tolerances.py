"""Tolerances, platform overrides and known upstream faults, as data (not scattered in tests).

How a cell is judged (experiments.parity.engine.check): element by element, the computed value passes when
  ULP distance to the correctly rounded reference <= max_ulp   or   |error| <= atol + rtol * |reference|.
A cell passes when every element passes. Special inputs (+-0, +-inf, nan) are judged the same way (inf == inf,
nan == nan), and for order 0 the sign of a zero result must match too (gelu(-inf) = -0.0, gelu(-0) = -0).

* TOLERANCES: the default (builtin) table per dtype and derivative order, after PyTorch's assert_close table
  (torch/testing/_comparison.py: f16 (1e-3, 1e-5), bf16 (1.6e-2, 1e-5), f32 (1.3e-6, 1e-5), f64 (1e-7, 1e-7)),
  with two changes: atol is the dtype's smallest normal for values, so a wrong negative tail is not hidden by an
  absolute floor of 1e-5 (the true values there are 1e-9 .. 1e-40); and float32 rtol is 1e-5, the accuracy of a
  good float32 erfc GELU (jax and tf builtins measured 6.4e-6 on [-10, 10]). First derivatives get the values'
  rtol, second derivatives twice it; where they cross zero (each catalogue entry's `root_windows`) an absolute floor
  of about one machine epsilon applies.
* FORMULA_GOALS: gelulab's own formula is held to its accuracy goal: within 1 ULP in bfloat16/float16 and 4 ULP in
  float32, values and derivatives, no absolute floor; float64 is measured (<= 2048 ULP, with results below the
  smallest normal judged absolutely).
* Overrides: platform behaviour that is not an activation bug, each with its reason, per backend x impl x mode x
  device (None matches any): a backend whose capability record lists `flushes_subnormals` flushes those dtypes'
  subnormals to zero on the CPU (`overrides`), and the group carries its record (`overrides_for`).
* Known upstream faults with links live in core.parity.known_faults; the tests turn a cell that matches one into
  xfail(strict=True), so a framework fix shows up as XPASS. The report flags the cell with the link.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gelulab.core.activations import get_activation
from gelulab.core.numerics.dtypes import get_dtype


@dataclass(frozen=True)
class Tol:
    """An element passes if ulp <= max_ulp or |error| <= atol + rtol * |reference|.
    max_ulp: ULPs of the target dtype (-1 = the ULP test is off); rtol: relative; atol: absolute (same units as x);
    atol_root: the larger absolute floor for derivatives inside the entry's root windows, where f' or f'' crosses
    zero.
    flush_subnormals: also accept the result the function has at +-0 for a subnormal input, and 0 for a
    subnormal result (FTZ/DAZ hardware modes)."""

    max_ulp: float = -1
    rtol: float = 0.0
    atol: float = 0.0
    atol_root: float = 0.0
    flush_subnormals: bool = False


def _normal(d):
    return float(get_dtype(d).finfo.smallest_normal)


def _eps(d):
    return float(get_dtype(d).finfo.eps)


# Default table, for the frameworks' builtins: (dtype, order) -> Tol
TOLERANCES: dict[tuple[str, int], Tol] = {
    ("float64", 0): Tol(rtol=1e-13, atol=_normal("float64")),
    ("float32", 0): Tol(rtol=1e-5, atol=_normal("float32")),
    ("bfloat16", 0): Tol(rtol=1.6e-2, atol=_normal("bfloat16")),
    ("float16", 0): Tol(rtol=2e-3, atol=_normal("float16") / 512),  # 2 subnormal steps
    ("float64", 1): Tol(rtol=1e-13, atol=_normal("float64"), atol_root=_eps("float64")),
    ("float32", 1): Tol(rtol=1e-5, atol=_normal("float32"), atol_root=_eps("float32")),
    ("bfloat16", 1): Tol(rtol=1.6e-2, atol=_normal("bfloat16"), atol_root=_eps("bfloat16")),
    ("float16", 1): Tol(rtol=2e-3, atol=_normal("float16") / 512, atol_root=_eps("float16")),
    ("float64", 2): Tol(rtol=2e-13, atol=_normal("float64"), atol_root=2 * _eps("float64")),
    ("float32", 2): Tol(rtol=2e-5, atol=_normal("float32"), atol_root=2 * _eps("float32")),
    ("bfloat16", 2): Tol(rtol=3.2e-2, atol=_normal("bfloat16"), atol_root=2 * _eps("bfloat16")),
    ("float16", 2): Tol(rtol=4e-3, atol=_normal("float16") / 512, atol_root=2 * _eps("float16")),
}

# gelulab's formula: its accuracy goals (values and derivatives). float64 is "as close as we can make it": the
# argument x/sqrt(2) (or u) is rounded once, and erfc/sigmoid amplify that by about x^2 (|2u|) in the tail.
# float64: every normal result is judged by ULP (subnormal results absolutely); where a subnormal intermediate makes
# gelulab's own formula miss this (erfc(-x/sqrt 2) is subnormal for x < -37.5 while x Phi(x) is normal until -38.5),
# core/parity/known_faults.py lists the cells. Near the roots of f' and f'' derivatives are judged within 4 eps
# absolutely.
FORMULA_GOALS: dict[tuple[str, int], Tol] = {}
for _order in (0, 1, 2):
    FORMULA_GOALS[("bfloat16", _order)] = Tol(max_ulp=1)
    FORMULA_GOALS[("float16", _order)] = Tol(max_ulp=1)
    FORMULA_GOALS[("float32", _order)] = Tol(max_ulp=4)
    FORMULA_GOALS[("float64", _order)] = Tol(max_ulp=2048, atol=_normal("float64"),
                                             atol_root=4 * _eps("float64") if _order else 0)


# gelulab's float32 kernels (core.numerics.kernels): within 1 ULP of the correctly rounded value in float32, bfloat16
# and float16, values and first derivatives; second derivatives within 4 ULP in float32 (1 ULP in bfloat16/float16).
# float64 inputs take the formula, so they keep its goal.
KERNEL_GOALS: dict[tuple[str, int], Tol] = {}
for _order in (0, 1, 2):
    KERNEL_GOALS[("bfloat16", _order)] = Tol(max_ulp=1)
    KERNEL_GOALS[("float16", _order)] = Tol(max_ulp=1)
    KERNEL_GOALS[("float32", _order)] = Tol(max_ulp=1 if _order < 2 else 4)
    KERNEL_GOALS[("float64", _order)] = FORMULA_GOALS[("float64", _order)]


@dataclass(frozen=True)
class Override:
    """A platform behaviour that changes the tolerance for matching cells. None matches anything.
    flush_subnormals: the platform flushes subnormal inputs/outputs of these dtypes to zero."""

    reason: str
    backend: str | None = None
    impl: str | None = None
    mode: str | None = None
    device: str | None = None
    dtypes: tuple[str, ...] | None = None
    flush_subnormals: bool = True


def _and(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def overrides(records) -> tuple[Override, ...]:
    """The Overrides of the backends with these capability records (core.contracts.contract.Capabilities), in their
    order: one per record that lists `flushes_subnormals`, on the CPU, for those dtypes."""
    return tuple(
        Override(f"{r.name}'s CPU runtime runs with flush-to-zero / denormals-are-zero: "
                 f"{_and(r.flushes_subnormals)} subnormal inputs read as +-0 and subnormal results are written as 0",
                 backend=r.name, device="cpu", dtypes=tuple(r.flushes_subnormals))
        for r in records if r.flushes_subnormals
    )


def overrides_for(group) -> list[Override]:
    """The Overrides that apply to a experiments.parity.engine.Group (listed in the report beside the cell): those of
    its backend's capability record (`group.capabilities`; none for a group without one)."""
    record = getattr(group, "capabilities", None)
    return [
        o for o in overrides(() if record is None else (record,))
        if all(w is None or w == h for w, h in ((o.backend, group.backend), (o.impl, group.impl),
                                                  (o.mode, group.mode), (o.device, group.device)))
        and (o.dtypes is None or group.dtype in o.dtypes)
    ]


def in_root_window(key: str, order: int, x) -> np.ndarray:
    """Boolean mask of inputs x (numpy array) inside one of catalogue entry `key`'s root windows for derivative
    `order` (core.activations.Activation.root_windows): where f' or f'' crosses zero, relative error is meaningless
    and an absolute floor of about one eps applies. The floor applies only inside these windows of x, so a backward
    pass that returns 0 in the tail (true values 1e-9 .. 1e-40) is flagged, not hidden."""
    x = np.asarray(x, dtype=np.float64)
    mask = np.zeros(x.shape, dtype=bool)
    for lo, hi in get_activation(key).root_windows.get(order, ()):
        mask |= (x >= lo) & (x <= hi)
    return mask


def tolerance(group, region: str | None = None) -> Tol:
    """The Tol for a experiments.parity.engine.Group: FORMULA_GOALS for impl "formula", KERNEL_GOALS for "kernel",
    else TOLERANCES (its atol_root applies inside the entry's root windows only, see experiments.parity.engine); a
    matching Override switches on flush_subnormals. `region` is
    accepted for symmetry with the known faults and not used."""
    table = {"formula": FORMULA_GOALS, "kernel": KERNEL_GOALS}.get(group.impl, TOLERANCES)
    tol = table[(group.dtype, group.order)]
    if any(o.flush_subnormals for o in overrides_for(group)):
        tol = replace(tol, flush_subnormals=True)
    return tol

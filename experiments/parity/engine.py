"""The parity engine: evaluate one backend's activations over the named regions and compare each with the
correctly rounded mpmath reference. Backend-free: it reaches frameworks only through the Backend interface.

A *group* is (backend, impl, activation, dtype, mode, order) on one device: all regions are concatenated into one
input vector and evaluated by a single call, so a compiled mode compiles once per group; the results are then
split per region into *cells*. Eager is no oracle: every mode is compared with the reference, never with another.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from gelulab.core.activations import ACTIVATIONS, IMPLS, get_activation
from gelulab.core.contracts.contract import Capabilities
from gelulab.core.contracts.interface import ORDERS
from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.numerics.metrics import ErrorSummary, abs_error, rel_error, summarize, ulp_distance
from gelulab.core.parity import reference_store
from gelulab.core.parity.known_faults import known_fault
from gelulab.core.parity.reference import reference
from gelulab.core.parity.regions import REGIONS, region
from gelulab.core.parity.tolerances import in_root_window, tolerance


@dataclass(frozen=True)
class Group:
    """One evaluation: backend name, impl ("formula"/"builtin"/"kernel"), activation key, dtype name, mode
    ("eager"/"compiled"), derivative order (0, 1, 2), device ("cpu", "gpu", "tpu") and the framework's CPU dispatch
    level it runs at (Backend.cpu_dispatch: "avx2", ...; None off the CPU or unknown). The id leaves the level out:
    a group is the same cell of the matrix on every machine, measured at the level of the machine it runs on.
    capabilities: the backend's record (core.contracts.contract.Capabilities), whose `measured_dispatch` and
    `flushes_subnormals` the known faults and tolerances read; None for a group built without one (measured at no
    level, no flush-to-zero); not part of the group's identity."""

    backend: str
    impl: str
    key: str
    dtype: str
    mode: str
    order: int
    device: str = "cpu"
    dispatch: str | None = None
    capabilities: Capabilities | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        """A short readable id, e.g. 'torch-builtin-gelu_none-float32-eager-d0-cpu'."""
        return f"{self.backend}-{self.impl}-{self.key}-{self.dtype}-{self.mode}-d{self.order}-{self.device}"


@dataclass(frozen=True)
class Cell:
    """One group restricted to one region."""

    group: Group
    region: str

    @property
    def id(self) -> str:
        return f"{self.group.id}-{self.region}"


@dataclass
class CellResult:
    """What one cell measured: the inputs, outputs, correctly rounded reference and their error summary.
    x, actual, expected: 1-D numpy arrays of the group's dtype. error: None if the call raised (see `exception`)."""

    cell: Cell
    x: np.ndarray = field(repr=False)
    actual: np.ndarray | None = field(repr=False)
    expected: np.ndarray = field(repr=False)
    error: ErrorSummary | None
    exception: str | None = None

    def ulp(self) -> np.ndarray:
        """Elementwise ULP distance (float64 array)."""
        return ulp_distance(self.actual, self.expected, self.cell.group.dtype)

    def abs(self) -> np.ndarray:
        return abs_error(self.actual, self.expected)

    def rel(self) -> np.ndarray:
        return rel_error(self.actual, self.expected)

    def normal_range(self, floor: float = 0.0) -> np.ndarray:
        """Mask of finite inputs that are 0 or normal whose correctly rounded result is 0 or at least
        max(smallest normal, floor): where ULP and relative errors mean what they say (subnormals have fewer
        significant bits, FTZ platforms flush them, and results below a tolerance's absolute floor are judged
        absolutely)."""
        normal = float(DTYPES[self.cell.group.dtype].finfo.smallest_normal)
        x = np.abs(self.x.astype(np.float64))
        e = np.abs(self.expected.astype(np.float64))
        return np.isfinite(x) & ((x == 0) | (x >= normal)) & ((e == 0) | (e >= max(normal, floor)))

    def normal_range_summary(self, floor: float = 0.0) -> dict:
        """{'max_ulp', 'max_rel'} over normal_range(floor) (0 when empty; None when the call raised)."""
        if self.actual is None:
            return {"max_ulp": None, "max_rel": None}
        m = self.normal_range(floor)
        if not m.any():
            return {"max_ulp": 0.0, "max_rel": 0.0}
        return {"max_ulp": float(self.ulp()[m].max()), "max_rel": float(self.rel()[m].max())}


def groups(backends, impls=IMPLS, keys=tuple(ACTIVATIONS), dtypes=tuple(DTYPES), modes=None, orders=ORDERS):
    """Every Group of the matrix for the given Backend objects and filters (modes default to each backend's own).

    Order 2 is evaluated for the GELU forms and ReLU alike (ReLU'' = 0). Builtins a framework lacks, kernels of
    entries without one (their catalogue `kernel` is None) or of a backend without kernels, and dtypes a backend
    does not hold (its record's `dtypes`) are left out. Each group carries its backend's
    CPU dispatch level and capability record."""
    out = []
    for b in backends:
        dispatch = b.cpu_dispatch()
        for mode in b.modes if modes is None else [m for m in modes if m in b.modes]:
            for impl in impls:
                for key in keys:
                    if impl == "builtin" and not b.has_builtin(key):
                        continue
                    if impl == "kernel" and (get_activation(key).kernel is None or not b.capabilities.kernels):
                        continue
                    for dtype in (d for d in dtypes if d in b.capabilities.dtypes):
                        for order in orders:
                            out.append(Group(b.name, impl, key, dtype, mode, order, b.device, dispatch,
                                           b.capabilities))
    return out


@cache
def inputs(dtype: str, regions: tuple[str, ...] = tuple(REGIONS)) -> tuple[np.ndarray, dict[str, slice]]:
    """The concatenated inputs of `regions` for `dtype` and each region's slice in it."""
    parts, slices, start = [], {}, 0
    for r in regions:
        a = region(r, dtype)
        parts.append(a)
        slices[r] = slice(start, start + a.size)
        start += a.size
    return np.concatenate(parts), slices


@cache
def expected(key: str, order: int, dtype: str, regions: tuple[str, ...] = tuple(REGIONS)) -> np.ndarray:
    """Correctly rounded reference for the concatenated inputs (cached: shared by every backend, impl and mode; kept
    between runs in GELULAB_REFERENCE_CACHE's folder when it is set, core.parity.reference_store)."""
    x, _ = inputs(dtype, regions)
    return reference_store.stored(reference, key, order, dtype, x)


def evaluate(backend, group: Group, regions: tuple[str, ...] = tuple(REGIONS)) -> dict[str, CellResult]:
    """Run `group` on `backend` (a Backend whose name and device match) once over all regions.

    Returns {region: CellResult}. A framework exception is caught and recorded in every cell (exception text,
    error None), so one failing call never loses the rest of a report.
    Raises ValueError if the backend does not match the group.
    """
    actual, exc = measure(backend, group, regions)
    return results(group, actual, exc, regions)


def measure(backend, group: Group, regions: tuple[str, ...] = tuple(REGIONS)) -> tuple[np.ndarray | None, str | None]:
    """The backend's output for the group's concatenated inputs (a 1-D array of the group's dtype), or
    (None, "ExceptionName: message") when the call raised. Raises ValueError if the backend does not match."""
    if backend.name != group.backend or backend.device != group.device:
        raise ValueError(f"backend {backend.name}/{backend.device} does not match group {group.id}")
    x, _ = inputs(group.dtype, regions)
    try:
        fn = backend.function(group.key, group.impl, group.order, group.mode)
        with np.errstate(all="ignore"):  # the special-value region feeds nan and inf on purpose
            y = backend.to_numpy(fn(backend.asarray(x)))
        if y.dtype != x.dtype or y.shape != x.shape:
            raise TypeError(f"returned {y.dtype}{y.shape}, expected {x.dtype}{x.shape}")
        return y, None
    except Exception as e:  # noqa: BLE001 - recorded in the report, not hidden
        return None, f"{type(e).__name__}: {e}"[:500]


def results(group: Group, actual: np.ndarray | None, exc: str | None,
            regions: tuple[str, ...] = tuple(REGIONS)) -> dict[str, CellResult]:
    """{region: CellResult} of a measured group: `actual` (the output over the concatenated inputs, as from
    `measure`, or None with the exception text `exc`) split per region beside the correctly rounded reference."""
    x, slices = inputs(group.dtype, regions)
    ref = expected(group.key, group.order, group.dtype, regions)
    out = {}
    for r, s in slices.items():
        cell = Cell(group, r)
        if actual is not None:
            out[r] = CellResult(cell, x[s], actual[s], ref[s], summarize(x[s], actual[s], ref[s], group.dtype))
        else:
            out[r] = CellResult(cell, x[s], None, ref[s], None, exc)
    return out


@dataclass
class Verdict:
    """The judgement of one CellResult against its tolerance.

    passed: every element within tolerance (False if the call raised); n_bad: elements outside;
    worst_x: the input with the largest ULP distance among the bad ones (None if none); fault: the matching
    KnownFault or None; tol: the Tol applied."""

    passed: bool
    n_bad: int
    worst_x: float | None
    fault: object
    tol: object


def elementwise_ok(result: CellResult, tol) -> np.ndarray:
    """Boolean mask of elements within `tol` (a core.parity.tolerances.Tol); see core.parity.tolerances for the rule."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf and nan comparisons are decided explicitly
        return _elementwise_ok(result, tol)


def _elementwise_ok(result: CellResult, tol) -> np.ndarray:
    g = result.cell.group
    act = get_activation(g.key)
    a, e = result.actual, result.expected
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    ulp = ulp_distance(a, e, g.dtype)
    err = abs_error(a, e)
    atol = tol.atol
    if g.order > 0 and tol.atol_root > tol.atol:
        atol = np.where(in_root_window(g.key, g.order, result.x), tol.atol_root, tol.atol)
    ok = err <= atol + tol.rtol * np.abs(np.where(np.isfinite(e64), e64, 0.0))
    if tol.max_ulp >= 0:
        ok |= ulp <= tol.max_ulp
    if g.order == 0 and act.zero_sign:  # the sign of a zero result is part of the contract (gelu(-0) = -0)
        zero = (a64 == 0) & (e64 == 0)
        ok &= ~zero | (np.signbit(a64) == np.signbit(e64))
    if tol.flush_subnormals:
        normal = float(DTYPES[g.dtype].finfo.smallest_normal)
        x64 = result.x.astype(np.float64)
        sub_in = (np.abs(x64) < normal) & (x64 != 0)
        at_zero = reference(g.key, np.copysign(0.0, x64[sub_in]).astype(result.x.dtype), g.dtype, g.order)
        ok_sub = np.zeros_like(ok)
        ok_sub[sub_in] = abs_error(a[sub_in], at_zero) <= tol.atol + tol.rtol * np.abs(at_zero.astype(np.float64))
        ok |= ok_sub
        ok |= (np.abs(e64) < normal) & (np.abs(a64 - e64) <= normal)
    if g.order > 0 and not act.nan_derivative:  # a mask convention at NaN (ReLU: 0 or 1), not judged
        ok |= np.isnan(result.x.astype(np.float64))
    return ok


def check(result: CellResult) -> Verdict:
    """Judge a CellResult: its tolerance (core.parity.tolerances.tolerance) and any KnownFault for its cell."""
    g = result.cell.group
    tol = tolerance(g, result.cell.region)
    fault = known_fault(g, result.cell.region)
    if result.actual is None:
        return Verdict(False, int(result.x.size), None, fault, tol)
    ok = elementwise_ok(result, tol)
    bad = ~ok
    worst = None
    if bad.any():
        u = np.where(bad, result.ulp(), -1.0)
        worst = float(result.x.astype(np.float64)[int(np.argmax(u))])
    return Verdict(bool(ok.all()), int(bad.sum()), worst, fault, tol)

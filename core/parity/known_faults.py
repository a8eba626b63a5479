"""Known upstream faults of the frameworks' builtins, as data: each cell of the parity matrix listed here must
fail its tolerance, and the test suite marks it xfail(strict=True), so a framework fix shows up as XPASS.

The rows live with their activation: each catalogue unit (core/activations/<key>.py) holds the faults of the
builtins computing it in its `known_faults` field, read from its faults file core/activations/faults/<key>.toml
(core.parity.fault_data, which builds each row with `fault` from the mechanisms it names: the file's own, or the
ones shared by several activations, defined here). KNOWN_FAULTS collects them, after the rows that hold for every
activation (XLA's float16 at its lowest CPU level), when first read. `gelulab parity --draft-faults` drafts the rows
of a new entry from a parity run, each to be checked upstream by a person before it is pasted into the faults file.

Measured on CPU with torch 2.13.0, jax 0.10.2 and tensorflow 2.21.0 (constraints.txt) by `gelulab parity`; each
entry is one mechanism (reason, upstream link) applied to the cells where it shows: backend x activation x
derivative orders x regions x dtypes x modes. An entry for gelulab's own formula or kernel (impl "formula" or
"kernel", kind "gelulab") would mark a cell where it misses its goal; today none does. When a framework is
upgraded, rerun `gelulab parity`: cells that pass now are reported XPASS by the tests and their entries are deleted
from their unit's faults file.

Each entry has a kind (KINDS; KnownFault.classification): "upstream" (a fault with an upstream report, linked),
"unreported" (known here, no upstream report found) or "gelulab" (gelulab's own formula). `gelulab parity` splits
its flagged cells by kind, and a flagged cell that matches no entry is NEW (`--fail-on-new` exits 1).

Some faults depend on the machine. Frameworks pick CPU kernels by the processor's features
(core.parity.cpu_dispatch), so an entry may name the dispatch levels where it occurs (`dispatch`): on another level
that was measured (the backend record's `measured_dispatch`, core.contracts.contract.Capabilities, which each group
carries) the cell must pass, and on a level that was never measured the fault may or may not occur. An entry whose
occurrence no forcible setting decides says where it was seen (`varies`) and may or may not occur anywhere. Such
cells are known, never NEW, and the tests mark them xfail without strict (KnownFault.certain).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

KINDS = {
    "upstream": "upstream fault, reported (link)",
    "unreported": "known, not reported upstream",
    "gelulab": "gelulab's own formula",
}


@dataclass(frozen=True)
class KnownFault:
    """A known fault: the cells it matches fail (xfail, strict where `certain`). None matches anything.
    reason: one line; link: the upstream issue or PR (or, where none exists, the closest one and a note);
    kind: one of KINDS, or None to derive it (see `classification`); dispatch: the CPU dispatch levels of the
    backend (core.parity.cpu_dispatch) where it occurs, None on every level; varies: where the fault was seen and where
    not, when it depends on the machine in a way no forcible setting decides (then it may or may not occur)."""

    reason: str
    link: str
    backend: str | None = None
    impl: str | None = "builtin"
    keys: tuple[str, ...] | None = None
    orders: tuple[int, ...] | None = None
    regions: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    modes: tuple[str, ...] | None = None
    devices: tuple[str, ...] | None = ("cpu",)
    kind: str | None = None
    dispatch: tuple[str, ...] | None = None
    varies: str | None = None

    @property
    def classification(self) -> str:
        """The fault's kind (a key of KINDS): `kind` when given; else "gelulab" for gelulab's own formula or kernel
        (impl "formula" or "kernel"), "unreported" when the link says no upstream report exists ("no ... report ..."),
        and "upstream" otherwise."""
        if self.kind is not None:
            return self.kind
        if self.impl in ("formula", "kernel"):  # the kernel's own cells, and its float64 cells, which are the formula's
            return "gelulab"
        return "unreported" if self.link.lower().startswith("no ") else "upstream"

    def matches(self, group, region: str) -> bool:
        """True when this fault covers `group` (a experiments.parity.engine.Group) on `region`: its fields match,
        and with `dispatch`, the group's level is one of them or was never measured (its record's
        `measured_dispatch`)."""
        if self.backend is not None and group.backend != self.backend:
            return False
        if self.dispatch is not None and group.dispatch not in self.dispatch and _measured(group):
            return False
        if self.impl is not None and group.impl != self.impl:
            return False
        for want, have in ((self.keys, group.key), (self.orders, group.order), (self.regions, region),
                           (self.dtypes, group.dtype), (self.modes, group.mode), (self.devices, group.device)):
            if want is not None and have not in want:
                return False
        return True

    def certain(self, group) -> bool:
        """True when a matching cell of `group` must fail: the fault does not vary by machine (`varies` is None) and,
        when keyed by `dispatch`, the group runs at a level that was measured."""
        return self.varies is None and (self.dispatch is None or _measured(group))

    def condition(self, group) -> str | None:
        """None when `certain(group)`; else one line on what the fault depends on, for reports and test reasons."""
        if self.certain(group):
            return None
        if self.varies is not None:
            return f"may or may not occur on this machine: it depends on {self.varies}"
        return (f"may or may not occur on this machine: it depends on CPU dispatch (seen at {group.backend} levels "
                f"{list(self.dispatch)}; this machine's level {group.dispatch!r} was not measured)")


def _measured(group) -> bool:
    """Whether the group's CPU dispatch level is one its backend's known faults were measured at: a level of its
    capability record's `measured_dispatch` (`group.capabilities`; a group without a record was measured nowhere)."""
    record = getattr(group, "capabilities", None)
    return record is not None and group.dispatch in record.measured_dispatch


# Mechanisms: (reason, link) or (reason, link, kind); a cell failing for two reasons names both. Without a kind
# the entry's kind is derived (KnownFault.classification); it is given where the link alone would mislead. The
# mechanisms shared by several activations are here; each unit's faults file defines its own.
INF_GRAD = (
    "the builtin's derivative is NaN at +-inf (inf * 0 in the backward formula); the limits are 1 and 0",
    'no upstream report found (2026-11)',
)
INF_VALUE = (
    'the builtin returns NaN at -inf (-inf * 0); the limit is -0',
    "no upstream report found (2026-11) for jax/tf; torch's twin: https://github.com/pytorch/pytorch/pull/192318",
    'unreported',
)
INF_VALUE_torch = (
    "torch's GELU returns NaN at -inf (-inf*0; the limit is -0), and its exact form also NaN at +inf",
    'https://github.com/pytorch/pytorch/issues/185770 (fix: https://github.com/pytorch/pytorch/pull/192318, open)',
    'upstream',
)
NUMPY_REF = (
    ("numpy's builtin is PyTorch OpInfo's reference (x*norm.cdf(x); 0.5*x*(1+tanh(u))): 1+tanh cancels below "
     "x~-7, scipy's ndtr is ~2e-13 relative accurate below x~-30 in float64 (beyond the 1e-13 tolerance), and "
     "-inf*0 gives NaN"),
    ('https://github.com/pytorch/pytorch/blob/main/torch/testing/_internal/common_methods_invocations.py '
     '(reference_gelu)'),
    'unreported',
)
OVERFLOW_GRAD = (
    ("x^2 or x^3 overflows inside the builtin's derivative for large |x| (float16 from x=148..256), giving inf/NaN "
     "where f' is 1 or 0 and f'' is 0"),
    'no torch/jax/tf report found (2026-11); same fault: https://github.com/facebookresearch/fairseq/issues/2235',
)
XLA_F16_NO_F16C = (
    ("at XLA's lowest CPU level (XLA_FLAGS=--xla_cpu_max_isa=SSE4_2) XLA converts float16 through the runtime "
     "helpers __extendhfsf2/__truncsfhf2, which neither jaxlib nor TensorFlow links: float16 computations that XLA "
     "compiles raise 'Failed to materialize symbols'"),
    'https://github.com/openxla/xla/issues/6787 (the same missing __extendhfsf2 on CPUs without F16C; closed)',
    'upstream',
)


def fault(mechanism, backend, orders, regions, dtypes, modes, impl="builtin", dispatch=None,
          varies=None) -> KnownFault:
    """One row of a unit's `known_faults`: mechanism (reason, link) or (reason, link, kind) seen on `backend` for
    derivative orders x regions x dtypes x modes (tuples; None: any), impl "builtin" unless named. The row's `keys`
    are left None here and set to the unit's key when KNOWN_FAULTS is collected."""
    reason, link, *kind = mechanism
    return KnownFault(reason, link, backend=backend, impl=impl, keys=None, orders=orders, regions=regions,
                      dtypes=dtypes, modes=modes, kind=kind[0] if kind else None, dispatch=dispatch, varies=varies)


def _every_activation(smooth_keys: tuple[str, ...]) -> tuple[KnownFault, ...]:
    """The rows that hold for every activation, first so that they name these cells: float16 through XLA raises at
    its lowest CPU level (core.parity.cpu_dispatch, `make test-dispatch`): every jax float16 cell, TensorFlow's compiled
    ones and its kernel (an XLA function in eager mode too); the second derivative of the builtin and the formula
    of an entry that is not smooth (ReLU'', a constant 0) compiles without a conversion."""
    return tuple(
        replace(fault(XLA_F16_NO_F16C, b, orders, None, ('float16',), modes, impl=impl, dispatch=("sse4_2",)),
                keys=keys)
        for b, modes, impl, keys, orders in (
            ("jax", ("eager",), None, None, None),
            ("tensorflow", ("eager",), "kernel", None, None),
            ("jax", ("compiled",), "kernel", None, None),
            ("tensorflow", ("compiled",), "kernel", None, None),
            ("jax", ("compiled",), None, None, (0, 1)),
            ("tensorflow", ("compiled",), None, None, (0, 1)),
            ("jax", ("compiled",), None, smooth_keys, (2,)),
            ("tensorflow", ("compiled",), None, smooth_keys, (2,))))


@cache
def _collected() -> tuple[KnownFault, ...]:
    """KNOWN_FAULTS: the rows for every activation, then each catalogue unit's `known_faults` in catalogue order
    with `keys` set to its key. impl "kernel" computes float64 inputs with the formula: its float64 cells share the
    formula's faults, each copy placed right after its formula entry so that a cell of either impl meets the same
    first match (known_fault)."""
    from gelulab.core.activations import ACTIVATIONS  # here: the units import this module for `fault`

    rows = _every_activation(tuple(k for k, a in ACTIVATIONS.items() if a.smooth))
    rows += tuple(replace(f, keys=(a.key,)) for a in ACTIVATIONS.values() for f in a.known_faults)
    return tuple(
        g for f in rows
        for g in ((f, replace(f, impl="kernel")) if f.impl == "formula" and f.dtypes == ("float64",) else (f,))
    )


def __getattr__(name: str):
    # KNOWN_FAULTS is collected from the catalogue when first read (the catalogue's units import this module)
    if name == "KNOWN_FAULTS":
        return _collected()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def known_fault(group, region: str) -> KnownFault | None:
    """The first KnownFault matching (group, region) that is certain for the group (KnownFault.certain), else the
    first that may or may not occur, or None: a fault that depends on the machine never hides a certain one."""
    maybe = None
    for f in _collected():
        if f.matches(group, region):
            if f.certain(group):
                return f
            maybe = maybe or f
    return maybe

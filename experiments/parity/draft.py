"""`gelulab parity --draft-faults`: the known-fault rows of the NEW cells of a parity run, drafted as Python.

A new catalogue unit (core/activations/<key>.py) lists the known faults of the frameworks' builtins computing it
(its `known_faults`, rows of core.parity.known_faults.fault). This drafts them from the cells a run flagged NEW (beyond
tolerance, no known fault; EXCEPTION cells too): the cells of one backend, impl and activation are grouped into
products orders x regions x dtypes x modes, each product one row and one guess of a mechanism, named by a
placeholder whose reason and link say what was measured and that a person must check it upstream (reproduce it,
find the cause, find or file the upstream report) before the row is pasted into the unit.
"""
from __future__ import annotations

from collections import defaultdict

from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.parity.regions import REGIONS

MODES = ("eager", "compiled")
TO_CHECK = "TO BE CHECKED UPSTREAM BY A PERSON"


def _ordered(values, order) -> tuple:
    known = [v for v in order if v in values]
    return tuple(known + sorted(v for v in values if v not in order))


def draft_groups(cells) -> list[dict]:
    """The flagged NEW / EXCEPTION cells of `cells` (parity.json's "cells" rows: dicts with backend, impl,
    activation, order, region, dtype, mode, flag, and max_ulp / worst_x / exception) partitioned into products: a
    list of {"backend", "impl", "key", "orders", "regions", "dtypes", "modes", "cells"} (tuples in the catalogue's
    orders: DTYPES, REGIONS, eager then compiled; cells: the rows covered), sorted by backend, impl, key. Every
    flagged cell is in exactly one group and every group's product holds flagged cells only."""
    new = [c for c in cells if c.get("flag") in ("new", "exception")]
    by_cell = {(c["backend"], c["impl"], c["activation"], c["order"], c["region"], c["dtype"], c["mode"]): c
               for c in new}
    # merge one attribute at a time over cells identical in every other: modes, then dtypes, regions, orders
    step = defaultdict(set)
    for b, i, k, o, r, d, m in by_cell:
        step[(b, i, k, o, r, d)].add(m)
    step2 = defaultdict(set)
    for (b, i, k, o, r, d), ms in step.items():
        step2[(b, i, k, o, r, frozenset(ms))].add(d)
    step3 = defaultdict(set)
    for (b, i, k, o, r, ms), ds in step2.items():
        step3[(b, i, k, o, ms, frozenset(ds))].add(r)
    step4 = defaultdict(set)
    for (b, i, k, o, ms, ds), rs in step3.items():
        step4[(b, i, k, ms, ds, frozenset(rs))].add(o)
    out = []
    for (b, i, k, ms, ds, rs), os in step4.items():
        g = {"backend": b, "impl": i, "key": k, "orders": tuple(sorted(os)), "regions": _ordered(rs, REGIONS),
             "dtypes": _ordered(ds, DTYPES), "modes": _ordered(ms, MODES)}
        g["cells"] = [by_cell[(b, i, k, o, r, d, m)] for o in g["orders"] for r in g["regions"]
                      for d in g["dtypes"] for m in g["modes"]]
        out.append(g)
    return sorted(out, key=lambda g: (g["backend"], g["impl"], g["key"], g["orders"], g["regions"], g["dtypes"]))


def _evidence(g) -> str:
    worst = max(g["cells"], key=lambda c: -1.0 if c.get("max_ulp") is None else c["max_ulp"])
    raised = [c["exception"] for c in g["cells"] if c.get("exception")]
    if raised:
        return f"the call raised: {raised[0]}"
    at = "" if worst.get("worst_x") is None else f" at x = {worst['worst_x']:g}"
    ulp = "" if worst.get("max_ulp") is None else f"{worst['max_ulp']:.3g} ULP"
    return (f"beyond tolerance in {len(g['cells'])} cells, worst {ulp}{at} ({worst['dtype']}, d{worst['order']}, "
            f"{worst['region']}, {worst['mode']})")


def draft_faults(cells, source: str = "a parity run") -> str:
    """Python text: one mechanism placeholder and one `fault(...)` row per group of draft_groups(cells), grouped by
    activation under a comment naming its unit, every placeholder marked as to be checked upstream by a person.
    "" when no cell is NEW."""
    groups = draft_groups(cells)
    if not groups:
        return ""
    n = sum(len(g["cells"]) for g in groups)
    lines = [f"# Drafted by `gelulab parity --draft-faults` from {source}: {n} NEW cells in {len(groups)} rows.",
             "# Each row guesses that its cells share one mechanism. A person reproduces each, finds the cause and the",
             "# upstream report (or files one), writes reason and link, merges rows of one mechanism, and pastes them",
             "# into the unit's KNOWN_FAULTS (core/activations/<key>.py). Until then they are drafts, not known faults."]
    count = defaultdict(int)
    for key in dict.fromkeys(g["key"] for g in groups):
        lines += ["", f"# core/activations/{key}.py"]
        rows = []
        for g in (g for g in groups if g["key"] == key):
            count[(key, g["backend"])] += 1
            name = f"{key.upper()}_{g['backend'].upper()}_{count[(key, g['backend'])]}"
            lines += [f"{name} = (",
                      f"    {TO_CHECK + ': ' + _evidence(g)!r},",
                      f"    {TO_CHECK + ': no upstream report searched yet'!r},",
                      ")"]
            impl = "" if g["impl"] == "builtin" else f", impl={g['impl']!r}"
            rows.append(f"    fault({name}, {g['backend']!r}, {g['orders']!r}, {g['regions']!r}, {g['dtypes']!r}, "
                        f"{g['modes']!r}{impl}),  # {TO_CHECK}")
        lines += ["KNOWN_FAULTS = (", *rows, ")"]
    return "\n".join(lines) + "\n"

"""`gelulab parity --draft-faults`: the known-fault rows of the NEW cells of a parity run, drafted as the TOML of a
unit's faults file.

A catalogue unit (core/activations/<key>.py) reads the known faults of the frameworks' builtins computing it from
its faults file, core/activations/faults/<key>.toml (core.parity.fault_data: [mechanism.NAME] tables and [[fault]]
rows). This drafts both from the cells a run flagged NEW (beyond tolerance, no known fault; EXCEPTION cells too): the
cells of one backend, impl and activation are grouped into products orders x regions x dtypes x modes, each product
one row and one guess of a mechanism, named by a placeholder whose reason and link say what was measured and that a
person must check it upstream (reproduce it, find the cause, find or file the upstream report) before the tables
are pasted into the faults file.
"""
from __future__ import annotations

import json
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
    n = len(g["cells"])
    return (f"beyond tolerance in {n} cell{'' if n == 1 else 's'}, worst {ulp}{at} "
            f"({worst['dtype']}, d{worst['order']}, {worst['region']}, {worst['mode']})")


def _toml(value) -> str:
    """A TOML value: a basic string (JSON's escapes are TOML's), or an array of strings or integers."""
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def draft_faults(cells, source: str = "a parity run") -> str:
    """TOML text for the faults files of the activations with NEW cells: per activation, under a comment naming its
    file, one [mechanism.NAME] placeholder and one [[fault]] row per group of draft_groups(cells), every placeholder
    and row marked as to be checked upstream by a person (core.parity.fault_data reads the format). "" when no cell
    is NEW."""
    groups = draft_groups(cells)
    if not groups:
        return ""
    n = sum(len(g["cells"]) for g in groups)
    rows = len(groups)
    counted = f"{n} NEW cell{'' if n == 1 else 's'} in {rows} row{'' if rows == 1 else 's'}"
    lines = [f"# Drafted by `gelulab parity --draft-faults` from {source}: {counted}.",
             "# Each row guesses that its cells share one mechanism. A person reproduces each, finds the cause and the",
             "# upstream report (or files one), writes reason and link, merges rows of one mechanism, and pastes the",
             "# tables into the unit's faults file (core/activations/faults/<key>.toml, which the unit loads with",
             "# core.parity.fault_data.load). Until then they are drafts, not known faults."]
    count = defaultdict(int)
    for key in dict.fromkeys(g["key"] for g in groups):
        lines += ["", f"# core/activations/faults/{key}.toml"]
        for g in (g for g in groups if g["key"] == key):
            count[(key, g["backend"])] += 1
            name = f"{key.upper()}_{g['backend'].upper()}_{count[(key, g['backend'])]}"
            lines += ["", f"[mechanism.{name}]",
                      f"reason = {_toml(TO_CHECK + ': ' + _evidence(g))}",
                      f"link = {_toml(TO_CHECK + ': no upstream report searched yet')}",
                      "", f"[[fault]]  # {TO_CHECK}",
                      f"mechanism = {_toml(name)}",
                      f"backend = {_toml(g['backend'])}",
                      f"orders = {_toml(g['orders'])}",
                      f"regions = {_toml(g['regions'])}",
                      f"dtypes = {_toml(g['dtypes'])}",
                      f"modes = {_toml(g['modes'])}"]
            if g["impl"] != "builtin":
                lines.append(f"impl = {_toml(g['impl'])}")
    return "\n".join(lines) + "\n"

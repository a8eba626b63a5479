"""The README's counting prose, generated from the catalogue, the backend records, the known-fault table and the
built-in grid, so that a new activation, backend, dtype or grid axis changes the numbers and no one recounts by hand.

Each generated span sits between `<!-- counts:NAME -->` and `<!-- /counts -->` in README.md or a page of docs/.
tests/test_readme_counts.py
fails when a span differs from what BLOCKS computes now; `python tests/readme_counts.py --write` rewrites the
spans in place (nothing outside them changes). No framework is imported: the matrix is counted from the records.
"""
from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SPAN = re.compile(r"<!-- counts:(?P<name>[a-z_-]+) -->(?P<text>.*?)<!-- /counts -->", re.DOTALL)


class _Record:
    """What experiments.parity.engine.groups reads of a Backend, from its capability record alone: the cells it
    would evaluate on a CPU, whatever is installed (a builtin exists where the catalogue entry names one for the
    backend), at the highest CPU dispatch level the table was measured at."""

    def __init__(self, record):
        self.name, self.capabilities, self.modes, self.device = record.name, record, record.modes, "cpu"

    def cpu_dispatch(self):
        """The highest CPU dispatch level the known-fault table was measured at for this backend's framework
        (its record's measured_dispatch), None for a backend it was not measured on."""
        return (self.capabilities.measured_dispatch or (None,))[-1]

    def has_builtin(self, key: str) -> bool:
        from gelulab.core.activations import ACTIVATIONS

        return ACTIVATIONS[key].builtins.get(self.name) is not None


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@cache
def matrix() -> dict:
    """The parity matrix of every registered backend on a CPU: {"cells": n, "by_backend_mode": {(backend, mode):
    n}, "kernel_low": kernel cells in float32/bfloat16/float16, "known": {kind: cells the known-fault table lists},
    "machine_dependent": listed cells that may or may not fail (CPU dispatch or a processor)}."""
    from gelulab.backends import REGISTRY
    from gelulab.core.parity.known_faults import known_fault
    from gelulab.core.parity.regions import REGIONS
    from gelulab.experiments.parity.engine import groups

    gs = groups([_Record(r) for r in REGISTRY.values()])
    by, known, maybe, kernel_low = {}, {}, 0, 0
    for g in gs:
        by[(g.backend, g.mode)] = by.get((g.backend, g.mode), 0) + len(REGIONS)
        kernel_low += len(REGIONS) * (g.impl == "kernel" and g.dtype != "float64")
        for r in REGIONS:
            f = known_fault(g, r)
            if f is not None:
                known[f.classification] = known.get(f.classification, 0) + 1
                maybe += not f.certain(g)
    return {"cells": len(gs) * len(REGIONS), "by_backend_mode": by, "kernel_low": kernel_low, "known": known,
            "machine_dependent": maybe, "backends": list(REGISTRY)}


def _parity() -> str:
    from gelulab.core.activations import ACTIVATIONS
    from gelulab.core.numerics.dtypes import DTYPES
    from gelulab.core.parity.regions import REGIONS

    m = matrix()
    known = m["known"]
    return (f"{m['cells']} cells ({len(m['backends'])} backends: {_and(m['backends'])}; {len(ACTIVATIONS)} "
            f"activations × {len(DTYPES)} dtypes × {len(REGIONS)} regions × orders 0–2 × each backend's "
            f"implementations and modes); the known-fault table lists {sum(known.values())} of them: "
            f"{known.get('upstream', 0)} upstream faults with an upstream report, {known.get('unreported', 0)} "
            f"known faults with no upstream report, {known.get('gelulab', 0)} of gelulab's own, "
            f"{m['machine_dependent']} of them on some processors or CPU dispatch levels only")


def _kernel_cells() -> str:
    return f"{matrix()['kernel_low']} cells"


def _grid() -> str:
    from gelulab.core.activations import ACTIVATIONS
    from gelulab.experiments.moons import grid as G

    spec = G.parse_grid(G.DEFAULT_GRID)
    cells = spec.cells()
    cfg = cells[0].config
    varied = [a for a in G.AXES if len(spec.axes[a]) > 1]
    labels = {**G.AXIS_LABELS, "lr": "Adam learning rate", "dataset": "", "dtype": ""}  # values name themselves
    show = {"dataset": lambda v: f"make_{v}"}
    parts = []
    for a in varied:
        values = ", ".join(show.get(a, str)(v) for v in spec.axes[a])
        parts.append(f"{labels[a]} {values}".strip() if a != "depth" else f"depth {values} {labels[a]}")
    arms = [ACTIVATIONS[k].label for k in cfg.arms]
    fixed = [f"width {spec.axes['width'][0]}", f"noise {cfg.noise}", f"{cfg.n_samples} points",
             f"batch {cfg.batch_size}", f"{cfg.epochs} epochs", cfg.dtype, f"{_and(list(cfg.regimes))} regime"]
    return (f"{' × '.join(parts)} = {len(cells)} cells, each of the catalogue's {len(arms)} arms ({_and(arms)}) × "
            f"{len(cfg.seeds)} seeds × every selected backend ({len(cells) * len(arms) * len(cfg.seeds)} training "
            f"runs per backend), {', '.join(fixed)}")


@cache
def bench_cells() -> dict:
    """{"backends": the backends `gelulab bench` times by default (those whose record lists a bench module),
    "quick": the cells of `gelulab bench --quick` on a CPU with all of them, "default": those of the default grid},
    counted from the grid's axes (benchmarks/grid.py) and the records' modes; no framework is imported."""
    from gelulab.backends import REGISTRY
    from gelulab.benchmarks.grid import spec_from_filters

    names = [n for n, r in REGISTRY.items() if "bench" in r.modules]
    counts = {}
    for quick in (True, False):
        spec = spec_from_filters(backends=[",".join(names)], devices=["cpu"], quick=quick)
        counts["quick" if quick else "default"] = sum(len(list(spec.cells(b, "cpu", REGISTRY[b].modes)))
                                                      for b in spec.backends)
    return {"backends": names, **counts}


def _bench_quick() -> str:
    return f"{bench_cells()['quick']} cells"


def _bench_grid() -> str:
    b = bench_cells()
    return f"{b['default']} cells with {_and(b['backends'])}"


BLOCKS = {"parity": _parity, "kernel-cells": _kernel_cells, "grid": _grid, "bench-quick": _bench_quick,
          "bench-grid": _bench_grid}


def spans(text: str) -> dict[str, list[str]]:
    """{name: [text of each span with that name]} of a README text."""
    out: dict[str, list[str]] = {}
    for m in SPAN.finditer(text):
        out.setdefault(m.group("name"), []).append(m.group("text"))
    return out


def rendered(text: str) -> str:
    """`text` with every span's content replaced by what its BLOCKS function computes now. Raises KeyError for a
    span name BLOCKS does not know."""
    cache: dict[str, str] = {}

    def fill(m):
        name = m.group("name")
        if name not in cache:
            cache[name] = BLOCKS[name]()
        return f"<!-- counts:{name} -->{cache[name]}<!-- /counts -->"

    return SPAN.sub(fill, text)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/readme_counts.py --write   (rewrites the counts spans of README.md and docs/)")
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = rendered(text)
        page.write_text(new, encoding="utf-8")
        print(f"{page.name}: {'rewrote' if new != text else 'unchanged:'} {sum(map(len, spans(new).values()))} spans")

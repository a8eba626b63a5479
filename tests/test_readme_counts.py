"""The counting prose of README.md and docs/ matches the catalogue, the backend records, the known-fault table and the
built-in grid (tests/readme_counts.py computes it; `python tests/readme_counts.py --write` regenerates the spans).

References: the README itself (its spans are compared with what the records give now), the built-in grid's own
TOML text (read by tomllib here, independently of experiments.moons.grid) and the catalogue's length.
"""
from __future__ import annotations

import itertools
import tomllib

import readme_counts as RC

from gelulab.core.activations import ACTIVATIONS
from gelulab.experiments.moons.grid import DEFAULT_GRID


def _text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in RC.PAGES)


def test_every_counts_span_is_current():
    text = _text()
    found = RC.spans(text)
    assert set(found) == set(RC.BLOCKS), f"README counts spans {sorted(found)}; generated blocks {sorted(RC.BLOCKS)}"
    stale = [name for name, texts in found.items() for t in texts if t != RC.BLOCKS[name]()]
    assert not stale, (f"counts spans {stale} of README.md or docs/ are stale: "
                       "run `python tests/readme_counts.py --write`")


def test_grid_count_is_the_product_of_the_grid_files_axes():
    axes = tomllib.loads(DEFAULT_GRID)["axes"]
    n_cells = len(list(itertools.product(*axes.values())))
    seeds = tomllib.loads(DEFAULT_GRID)["base"]["seeds"]
    text = RC.BLOCKS["grid"]()
    assert f"= {n_cells} cells" in text
    assert f"{n_cells * len(ACTIVATIONS) * seeds} training runs per backend" in text


def test_a_changed_number_is_caught():
    text = _text()
    name, body = next(iter(RC.spans(text).items()))
    damaged = text.replace(f"<!-- counts:{name} -->{body[0]}", f"<!-- counts:{name} -->{body[0]} and 1 more", 1)
    assert RC.rendered(damaged) == RC.rendered(text)  # regenerating repairs it
    assert RC.spans(damaged)[name][0] != RC.BLOCKS[name]()

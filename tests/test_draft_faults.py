"""`gelulab parity --draft-faults` (experiments.parity.draft) on a small synthetic parity result: the drafted rows
cover exactly the NEW cells, read as a unit's faults file (core.parity.fault_data), and are marked as to be checked
upstream."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

from gelulab.core.parity.fault_data import parse
from gelulab.core.parity.known_faults import KnownFault
from gelulab.experiments.parity.draft import TO_CHECK, draft_faults, draft_groups


def _cell(backend, key, order, region, dtype, mode, flag, impl="builtin"):
    return {"backend": backend, "impl": impl, "activation": key, "order": order, "region": region,
            "dtype": dtype, "mode": mode, "flag": flag, "max_ulp": 4096.0, "worst_x": -90.5, "exception": None}


def _cells():
    # NEW: torch d0,d1 x negative_tail x float32,bfloat16 x eager,compiled (one product) and jax d2 specials float64
    # eager (another); passing, known and other-activation cells are not drafted
    new = [_cell("torch", "mish", o, "negative_tail", d, m, "new")
           for o, d, m in itertools.product((0, 1), ("float32", "bfloat16"), ("eager", "compiled"))]
    new.append(_cell("jax", "mish", 2, "specials", "float64", "eager", "new"))
    other = [_cell("torch", "mish", 0, "grid", "float32", "eager", None),
             _cell("torch", "mish", 2, "negative_tail", "float32", "eager", "upstream"),
             _cell("numpy", "silu", 0, "specials", "float64", "eager", "unreported")]
    return new, other


def _covered(rows, cell):
    g = SimpleNamespace(backend=cell["backend"], impl=cell["impl"], key=cell["activation"], order=cell["order"],
                        dtype=cell["dtype"], mode=cell["mode"], device="cpu", dispatch=None)
    return any(f.matches(g, cell["region"]) for f in rows)


def test_groups_are_products_of_the_new_cells():
    new, other = _cells()
    groups = draft_groups(new + other)
    assert [(g["backend"], g["orders"], g["regions"], g["dtypes"], g["modes"]) for g in groups] == [
        ("jax", (2,), ("specials",), ("float64",), ("eager",)),
        ("torch", (0, 1), ("negative_tail",), ("float32", "bfloat16"), ("eager", "compiled")),
    ]
    assert sorted(len(g["cells"]) for g in groups) == [1, 8]


def test_drafted_rows_run_and_cover_exactly_the_new_cells():
    new, other = _cells()
    text = draft_faults(new + other, "a synthetic store")
    assert text.count(TO_CHECK) == 3 * 2  # reason, link and row comment of each of the two rows
    assert "# core/activations/faults/mish.toml" in text and "silu" not in text
    # the draft is what a person pastes into the unit's faults file, read as the unit reads it
    rows = [f.__class__(**{**vars(f), "keys": ("mish",)}) for f in parse(text, "the draft")]
    assert all(isinstance(f, KnownFault) for f in rows) and len(rows) == 2
    assert all(_covered(rows, c) for c in new)
    assert not any(_covered(rows, c) for c in other if c["activation"] == "mish")


def test_nothing_to_draft():
    _, other = _cells()
    assert draft_faults(other) == ""

"""The catalogue units' faults files (core/activations/faults/<key>.toml, read by core.parity.fault_data): every
file belongs to a unit that loads it, every row names a backend, order, region, dtype, mode, impl and dispatch
level that exist, every mechanism a file defines is used, and a malformed file is refused naming what is wrong."""
from __future__ import annotations

import tomllib

import pytest

from gelulab.backends import REGISTRY
from gelulab.core.activations import ACTIVATIONS, IMPLS
from gelulab.core.contracts.contract import MODES
from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.parity import fault_data
from gelulab.core.parity.known_faults import KINDS
from gelulab.core.parity.regions import REGIONS

FILES = sorted(p for p in (fault_data.path("x").parent).iterdir() if p.name.endswith(".toml"))


def test_every_faults_file_is_a_units_and_is_what_the_unit_holds():
    assert FILES, "no faults file found"
    for p in FILES:
        key = p.name.removesuffix(".toml")
        assert key in ACTIVATIONS, f"{p.name} names no catalogue unit"
        assert ACTIVATIONS[key].known_faults == fault_data.load(key), f"unit {key!r} does not load {p.name}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_row_names_cells_that_exist(path):
    data = tomllib.loads(path.read_text())
    rows = fault_data.load(path.name.removesuffix(".toml"))
    assert len(rows) == len(data["fault"]) > 0
    for f in rows:
        where = f"{path.name}: {f.backend} {f.orders} {f.regions} {f.dtypes} {f.modes}"
        assert f.backend in REGISTRY, where
        assert set(f.orders) <= {0, 1, 2} and set(f.regions) <= set(REGIONS), where
        assert set(f.dtypes) <= set(DTYPES) and set(f.modes) <= set(MODES) and f.impl in IMPLS, where
        assert f.dispatch is None or set(f.dispatch) <= set(REGISTRY[f.backend].measured_dispatch), where
        assert f.classification in KINDS and f.reason.strip() == f.reason and "\n" not in f.reason, where
    used = {row["mechanism"] for row in data["fault"]}
    assert set(data.get("mechanism", {})) <= used, f"{path.name}: mechanisms no row names"


@pytest.mark.parametrize("text,message", [
    (('[[fault]]\nmechanism = "INF_GRAD"\nbackend = "jax"\norders = [1]\nregions = ["specials"]\n'
      'dtypes = ["float32"]\nmodes = ["eager"]\ncolour = "red"\n'), r"fault row 1 .* unknown keys \['colour'\]"),
    (('[[fault]]\nmechanism = "NOT_DEFINED"\nbackend = "jax"\norders = [1]\nregions = ["specials"]\n'
      'dtypes = ["float32"]\nmodes = ["eager"]\n'), "names mechanism 'NOT_DEFINED'"),
    ('[mechanism.A]\nreason = "r"\n', "mechanism 'A' must have reason and link"),
    ("[[fault]\n", "is not TOML"),
])
def test_a_malformed_faults_file_is_refused_naming_the_fault(text, message):
    with pytest.raises(ValueError, match=message):
        fault_data.parse(text, "mish.toml")


def test_a_wrapped_reason_reads_as_one_line_and_a_shared_mechanism_is_found_by_name():
    (row,) = fault_data.parse(
        '[mechanism.M]\nreason = """\\\n  first half \\\n  second half"""\nlink = "no upstream report found"\n'
        '[[fault]]\nmechanism = "M"\nbackend = "torch"\norders = [0]\nregions = ["grid"]\ndtypes = ["float16"]\n'
        'modes = ["eager"]\ndispatch = ["avx2"]\n', "m.toml")
    assert (row.reason, row.link, row.classification) == ("first half second half", "no upstream report found",
                                                          "unreported")
    assert (row.backend, row.orders, row.dispatch, row.impl, row.keys) == ("torch", (0,), ("avx2",), "builtin", None)

"""The moons study grid: which configurations (cells) a grid holds, read from a TOML file or the built-in default.

A grid varies the axes of AXES (depth 1-8 hidden layers and their width, Adam's learning rate, batch size,
epochs, the data set and its noise, the dtype); every combination of the values given is one cell, and a cell
is one MoonsConfig: today's study (arms, seeds, backends, the matched regime) with those values. A grid file:

    backends = ["jax", "torch", "tensorflow"]   # optional; default GELULAB_BACKEND, else every installed one

    [base]            # MoonsConfig fields held fixed in every cell (defaults: BASE_DEFAULTS)
    seeds = 10        # an integer n means seeds 0 .. n-1; a list gives them
    n_samples = 1000

    [axes]            # each a list of values; an axis left out takes its single value from DEFAULT_AXES
    depth = [1, 2, 4, 8]
    lr = [1e-3, 1e-2]
    dataset = ["moons", "circles"]

    [report]
    heatmap = ["depth", "lr"]   # the two axes of every heatmap (default: the first two axes that vary)

Files are read with the standard library's tomllib. Every value is type-checked and every cell validated
(MoonsConfig, its memory included) before any training; a bad value raises ValueError naming the key's path
(`[axes] depth[0] = [1]: expected an integer >= 1`), the value and what was expected.
"""
from __future__ import annotations

import itertools
import json
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from gelulab.experiments.moons.config import MoonsConfig, check_depth, check_seed_count, lr_problem

AXES = ("depth", "width", "lr", "batch_size", "epochs", "dataset", "noise", "dtype")
AXIS_LABELS = {"depth": "hidden layers", "width": "width", "lr": "learning rate", "batch_size": "batch size",
               "epochs": "epochs", "dataset": "data set", "noise": "noise", "dtype": "dtype",
               "backend": "backend", "regime": "regime"}
# The values an axis takes when a grid file leaves it out (one value each: the axis is then fixed).
DEFAULT_AXES = {"depth": (2,), "width": (32,), "lr": (1e-3,), "batch_size": (32,), "epochs": (25,),
                "dataset": ("moons",), "noise": (0.2,), "dtype": ("float64",)}
# MoonsConfig fields a grid holds fixed unless its [base] table says otherwise: a smaller study than the
# single-configuration default (1000 points instead of 2000, no second dtype: dtype is an axis, a coarse
# decision-boundary grid), so that a grid of dozens of cells stays affordable; seeds and arms are the study's.
BASE_DEFAULTS = {"n_samples": 1000, "compare_dtype": None, "grid_size": 20}
_FLOAT_AXES = ("lr", "noise")  # an integer value (noise = [0]) is read as the float it means
_INT_AXES = ("depth", "width", "batch_size", "epochs")
_STR_AXES = ("dataset", "dtype")
# MoonsConfig fields that the axes set (a [base] table may not set them)
_AXIS_FIELDS = ("hidden", "lr", "batch_size", "epochs", "dataset", "noise", "dtype")

# The built-in default grid (`gelulab moons --grid` without a file; `gelulab moons --print-grid` prints it).
# 4 depths x 3 learning rates x 2 data sets = 24 cells, each every catalogue arm x 20 seeds x every backend.
DEFAULT_GRID = """\
# gelulab moons grid: ReLU against the GELU forms over depth, learning rate and data set.
# 4 x 3 x 2 = 24 cells; each trains every arm x 20 seeds in every selected backend (matched regime,
# float64, 1000 points split 700/150/150, width 32, batch 32, 25 epochs = 550 Adam steps).

[base]
seeds = 20
n_samples = 1000

[axes]
depth = [1, 2, 4, 8]
width = [32]
lr = [0.001, 0.003, 0.01]
batch_size = [32]
epochs = [25]
dataset = ["moons", "circles"]
noise = [0.2]
dtype = ["float64"]

[report]
heatmap = ["depth", "lr"]
"""


@dataclass(frozen=True)
class Cell:
    """One cell of a grid: coords {axis: value} for every axis of AXES, its MoonsConfig, and its id (the
    name of its results subfolder, e.g. "depth2-width32-lr0.001-batch32-epochs25-moons-noise0.2-float64")."""

    coords: dict
    config: MoonsConfig
    id: str


@dataclass(frozen=True)
class GridSpec:
    """A grid: axes {axis: tuple of values} for every axis of AXES (in AXES order), base {MoonsConfig field:
    value} held fixed, backends (None: GELULAB_BACKEND, else every installed one), heatmap (the two axes of
    the heatmaps, or None), source (the file read, or "built-in default").

    Raises ValueError naming the key for an unknown axis or field, an empty or repeated axis, a heatmap axis
    that is not an axis, and (via cells()) any cell whose MoonsConfig is invalid.
    """

    axes: dict
    base: dict = field(default_factory=dict)
    backends: tuple | None = None
    heatmap: tuple | None = None
    source: str = "built-in default"

    def __post_init__(self):
        unknown = sorted(set(self.axes) - set(AXES))
        if unknown:
            raise ValueError(f"grid axes {unknown}: unknown; expected some of {list(AXES)}")
        axes = {}
        for a in AXES:
            values = self.axes.get(a, DEFAULT_AXES[a])
            if isinstance(values, dict):
                raise ValueError(f"[axes] {a} = {_shown(values)}: expected a list of values")  # noqa: TRY004 - bad input
            if isinstance(values, (str, bytes, int, float)) or not hasattr(values, "__iter__"):
                values = (values,)
            values = tuple(values)
            for i, v in enumerate(values):
                _check_axis_value(a, i, v)
            values = tuple(float(v) if a in _FLOAT_AXES and isinstance(v, int) and not isinstance(v, bool) else v
                           for v in values)
            if not values:
                raise ValueError(f"grid axis {a} = []: expected at least one value")
            if len(set(values)) != len(values):
                raise ValueError(f"grid axis {a} = {list(values)}: a value appears twice")
            axes[a] = values
        object.__setattr__(self, "axes", axes)
        if not isinstance(self.base, dict):
            raise ValueError(f"base = {_shown(self.base)}: expected a table ([base])")  # noqa: TRY004 - bad input
        names = {f.name for f in fields(MoonsConfig)}
        bad = sorted(k for k in self.base if k not in names or k in _AXIS_FIELDS)
        if bad:
            raise ValueError(f"grid [base] keys {bad}: expected MoonsConfig fields other than the axes' "
                             f"({sorted(names - set(_AXIS_FIELDS))})")
        base = {**BASE_DEFAULTS, **self.base}
        if isinstance(base.get("seeds"), int) and not isinstance(base["seeds"], bool):
            if base["seeds"] < 1:
                raise ValueError(f"grid [base] seeds = {base['seeds']}: expected at least 1 (or a list of seeds)")
            check_seed_count("[base] seeds", base["seeds"])  # before the list of seeds is built
            base["seeds"] = tuple(range(base["seeds"]))
        elif isinstance(base.get("seeds"), list):
            if len(base["seeds"]) > 0:
                check_seed_count("[base] seeds", len(base["seeds"]))
            for i, v in enumerate(base["seeds"]):
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise ValueError(f"[base] seeds[{i}] = {_shown(v)}: expected an integer >= 0")
        if base.get("compare_dtype") == "none":
            base["compare_dtype"] = None
        object.__setattr__(self, "base", base)
        if self.backends is not None:
            if isinstance(self.backends, (str, dict)) or not hasattr(self.backends, "__iter__"):
                raise ValueError(f"grid backends = {_shown(self.backends)}: expected a list of backend names")
            for i, v in enumerate(self.backends):
                if not isinstance(v, str):
                    raise ValueError(f"backends[{i}] = {_shown(v)}: expected a backend name (a string)")  # noqa: TRY004 - bad input
            object.__setattr__(self, "backends", tuple(self.backends) or None)
        if self.heatmap is not None:
            if isinstance(self.heatmap, (str, dict)) or not hasattr(self.heatmap, "__iter__"):
                raise ValueError(f"[report] heatmap = {_shown(self.heatmap)}: expected a list of two different "
                                 f"axes of {list(AXES)}")
            hm = tuple(self.heatmap)
            for i, v in enumerate(hm):
                if not isinstance(v, str):
                    raise ValueError(f"[report] heatmap[{i}] = {_shown(v)}: expected an axis name of {list(AXES)}")  # noqa: TRY004 - bad input
            if len(hm) != 2 or len(set(hm)) != 2 or not all(a in AXES for a in hm):
                raise ValueError(f"grid [report] heatmap = {list(hm)}: expected two different axes of {list(AXES)}")
            object.__setattr__(self, "heatmap", hm)

    @property
    def varied(self) -> list[str]:
        """The axes with more than one value, in AXES order."""
        return [a for a in AXES if len(self.axes[a]) > 1]

    def heatmap_axes(self) -> tuple[str, str]:
        """The two axes of the heatmaps: [report] heatmap, else the first two varied axes (filled up with
        fixed axes when fewer than two vary)."""
        if self.heatmap is not None:
            return self.heatmap
        order = self.varied + [a for a in AXES if a not in self.varied]
        return order[0], order[1]

    def cells(self) -> list[Cell]:
        """Every combination of the axes' values, in AXES order (the last axis varies fastest), as Cells.

        Raises ValueError naming the cell and the field when a combination is not a valid MoonsConfig.
        """
        out = []
        for combo in itertools.product(*(self.axes[a] for a in AXES)):
            coords = dict(zip(AXES, combo))
            try:
                depth, width = coords["depth"], coords["width"]
                check_depth(depth, width, _n_seeds(self.base))  # before the list of layer widths is built
                cfg = MoonsConfig(**self.base, hidden=(width,) * depth,
                                  **{a: coords[a] for a in AXES if a not in ("depth", "width")})
            except (TypeError, ValueError) as e:
                raise ValueError(f"grid cell {cell_id(coords)}: {e}") from e
            out.append(Cell(coords, cfg, cell_id(coords)))
        return out

    def to_dict(self) -> dict:
        """The spec as plain JSON values (the experiment settings that `gelulab merge` compares)."""
        base = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.base.items()}
        return {"axes": {a: list(v) for a, v in self.axes.items()}, "base": base,
                "backends": None if self.backends is None else list(self.backends),
                "heatmap": None if self.heatmap is None else list(self.heatmap)}


def _shown(v) -> str:
    """A grid file's value as TOML-like text for a message (JSON's spelling; repr for what JSON cannot spell)."""
    try:
        return json.dumps(v, separators=(", ", " = ")) if not isinstance(v, dict) else (
            "{" + ", ".join(f"{k} = {_shown(x)}" for k, x in v.items()) + "}")
    except (TypeError, ValueError):
        return repr(v)


def _n_seeds(base: dict) -> int:
    """How many seeds a grid's cells train (MoonsConfig's default when [base] sets none; 1 for a value that is not
    a list, which MoonsConfig then refuses)."""
    seeds = base.get("seeds", next(f.default for f in fields(MoonsConfig) if f.name == "seeds"))
    return len(seeds) if isinstance(seeds, (list, tuple)) else 1


def _check_axis_value(axis: str, index: int, v) -> None:
    """Raise ValueError naming `[axes] axis[index]` when v is not of the axis's type (integers >= 1 for the
    sizes, numbers for lr and noise, names for dataset and dtype; lr also in MoonsConfig's range); the other ranges
    and names are MoonsConfig's to check."""
    where = f"[axes] {axis}[{index}] = {_shown(v)}"
    if axis in _INT_AXES and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
        raise ValueError(f"{where}: expected an integer >= 1")
    if axis in _FLOAT_AXES and (not isinstance(v, (int, float)) or isinstance(v, bool)):
        raise ValueError(f"{where}: expected a number")
    if axis == "lr" and lr_problem(v):
        raise ValueError(f"{where}: {lr_problem(v)}")
    if axis in _STR_AXES and not isinstance(v, str):
        raise ValueError(f"{where}: expected a name (a string)")


def _fmt(v) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


def cell_id(coords: dict) -> str:
    """The folder name of a cell, from every axis value (floats written exactly, as repr)."""
    c = coords
    return (f"depth{c['depth']}-width{c['width']}-lr{_fmt(c['lr'])}-batch{c['batch_size']}-epochs{c['epochs']}"
            f"-{c['dataset']}-noise{_fmt(c['noise'])}-{c['dtype']}")


def parse_grid(text: str, source: str = "built-in default") -> GridSpec:
    """A GridSpec from TOML text (tomllib). Raises ValueError naming the source and the key for invalid TOML,
    an unknown top-level key or table, or a bad value."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"grid file {source}: not valid TOML ({e})") from e
    allowed = {"backends", "base", "axes", "report"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"grid file {source}: unknown keys {unknown}; expected some of {sorted(allowed)}")
    for name in ("base", "axes", "report"):
        if not isinstance(data.get(name, {}), dict):
            raise ValueError(f"grid file {source}: {name} = {_shown(data[name])}: expected a table ([{name}])")  # noqa: TRY004 - bad input
    report = data.get("report", {})
    bad = sorted(set(report) - {"heatmap"})
    if bad:
        raise ValueError(f"grid file {source}: unknown [report] keys {bad}; expected 'heatmap'")
    try:
        spec = GridSpec(axes=data.get("axes", {}), base=data.get("base", {}), backends=data.get("backends"),
                        heatmap=report.get("heatmap"), source=source)
        spec.cells()  # validate every cell now, before anything runs
    except ValueError as e:
        raise ValueError(f"grid file {source}: {e}") from e
    return spec


def load_grid(path=None) -> GridSpec:
    """The grid of a TOML file, or the built-in DEFAULT_GRID when path is None. Raises ValueError naming the file
    for a missing or unreadable file, one that is not UTF-8 text, or a bad grid (naming the key)."""
    if path is None:
        return parse_grid(DEFAULT_GRID)
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"grid file {p}: not UTF-8 text ({e.reason} at byte {e.start}); expected a TOML file "
                         "(see --print-grid)") from None
    except OSError as e:
        raise ValueError(f"grid file {p}: cannot read it ({e.strerror or e})") from e
    return parse_grid(text, str(p))

"""The benchmark grid: its axes, their filters, and the cells they select.

Axes: backend × device × mode × activation × impl × direction × dtype × size.

* activation: catalogue keys (core.activations.ACTIVATIONS: relu, gelu_none, gelu_tanh, gelu_sigmoid, ...).
* impl: "builtin" (the framework's own function) or "formula" (gelulab's accurate formula, core.numerics.formulas).
* direction: "forward" times `backend.function(key, impl, order=0, mode)(x)`, i.e. y = f(x).
  "forward+backward" times `backend.function(key, impl, order=1, mode)(x)`: the framework's vjp of f at x with a
  cotangent of ones (jax.vjp, torch.func.vjp, tf.GradientTape with output_gradients), which runs the forward pass
  and the backward pass and returns dy/dx. Both are exactly the callables the parity suite checks. The numpy
  backend has no autodiff: its "forward+backward" is the catalogue's closed-form derivative alone.
  Memory traffic counted for both directions: read x + write the result (2 n itemsize bytes); a fused kernel
  needs no more, since the cotangent of ones is created inside the call.
* size: elements of a 1-D input; 1e3..1e7 on a CPU, up to 1e8 on a GPU or TPU.
* dtype: float32, bfloat16, float16, float64 (core.numerics.dtypes); by default float32 and bfloat16 (DEFAULT_DTYPES),
  all four with --full or --dtype.
* mode: "eager" or "compiled" (jax.jit, torch.compile, tf.function(jit_compile=True)); numpy is eager only.
* device: "cpu", "gpu", "tpu".
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from gelulab.backends import BACKEND_NAMES, capabilities, requested_backends
from gelulab.core.activations import ACTIVATIONS, HEADLINE, IMPLS
from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.plumbing import config

DIRECTIONS = ("forward", "forward+backward")
ORDER = {"forward": 0, "forward+backward": 1}
MODES = ("eager", "compiled")
CPU_SIZES = (10**3, 10**4, 10**5, 10**6, 10**7)
ACCELERATOR_SIZES = CPU_SIZES + (10**8,)
DTYPE_ORDER = ("float32", "bfloat16", "float16", "float64")
# The default run keeps the two dtypes ML trains in. The whole grid (all four, --full: 2240 cells) took
# 34 min on the 2-core reference machine with cold compiler caches and 22 min with warm ones (load average 3-6
# from other jobs); float32 + bfloat16 were 46 % of the cell time, about 10 min.
DEFAULT_DTYPES = ("float32", "bfloat16")
AXES = ("backend", "device", "mode", "activation", "impl", "direction", "dtype", "size")


@dataclass(frozen=True)
class Cell:
    """One point of the grid (one timed callable on one input). size: elements (int)."""

    backend: str
    device: str
    mode: str
    activation: str
    impl: str
    direction: str
    dtype: str
    size: int

    def key(self) -> tuple:
        """The cell's coordinates in AXES order (used to match cells across runs)."""
        return tuple(getattr(self, a) for a in AXES)

    def as_dict(self) -> dict:
        """{axis: value} for every axis."""
        return asdict(self)


@dataclass(frozen=True)
class GridSpec:
    """The selected values of each axis. sizes None means the device's default sizes (CPU_SIZES on a CPU,
    ACCELERATOR_SIZES on a GPU/TPU)."""

    backends: tuple
    devices: tuple
    modes: tuple
    activations: tuple
    impls: tuple
    directions: tuple
    dtypes: tuple
    sizes: tuple | None = None

    def sizes_for(self, device: str) -> tuple:
        """Sizes (elements) to run on `device`."""
        if self.sizes is not None:
            return self.sizes
        return CPU_SIZES if device == "cpu" else ACCELERATOR_SIZES

    def cells(self, backend: str, device: str, modes_offered) -> list[Cell]:
        """Cells of this spec for one backend on one device, in run order (dtype, size, mode, direction, then
        activation and impl: the cells timed side by side), keeping only the modes the backend offers and the kernel
        cells of entries that have a kernel (catalogue field `kernel`)."""
        return [
            Cell(backend, device, mode, act, impl, direction, dtype, size)
            for dtype in self.dtypes
            for size in self.sizes_for(device)
            for mode in self.modes if mode in modes_offered
            for direction in self.directions
            for act in self.activations
            for impl in self.impls if impl != "kernel" or ACTIVATIONS[act].kernel is not None
        ]


QUICK = {"activations": HEADLINE, "impls": IMPLS, "directions": DIRECTIONS, "dtypes": ("float32",),
             "sizes": (10**4,), "modes": MODES}


def split_values(values) -> list[str]:
    """Flatten repeated and comma-separated command-line values: ["a,b", "c"] -> ["a", "b", "c"]."""
    out = []
    for v in values or ():
        out += [p.strip() for p in str(v).split(",") if p.strip()]
    return out


def choose(values, allowed, axis: str) -> tuple:
    """The chosen values of one axis in `allowed` order; None/empty selects all. Raises ValueError naming the
    unknown value, the axis and the valid values."""
    chosen = split_values(values)
    if not chosen:
        return tuple(allowed)
    for v in chosen:
        if v not in allowed:
            raise ValueError(f"unknown {axis} {v!r}; expected one of {list(allowed)}")
    return tuple(a for a in allowed if a in chosen)


def parse_size(text: str) -> int:
    """An element count from "1e6", "1000000" or "10**6"; raises ValueError unless a positive integer."""
    t = str(text).strip()
    try:
        value = float(10 ** int(t[4:])) if t.startswith("10**") else float(t)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ValueError(f"size {text!r}; expected a positive integer number of elements such as 1e6")
    return int(value)


def parse_sizes(values) -> tuple | None:
    """Sorted distinct sizes from command-line values, or None when none were given (device defaults)."""
    chosen = split_values(values)
    if not chosen:
        return None
    return tuple(sorted({parse_size(v) for v in chosen}))


def spec_from_filters(*, backends=None, devices=None, modes=None, activations=None, impls=None, directions=None,
                      dtypes=None, sizes=None, quick: bool = False, full: bool = False,
                      installed=BACKEND_NAMES) -> GridSpec:
    """A GridSpec from filter values (lists of strings, comma-separated allowed; None selects all, except dtypes:
    DEFAULT_DTYPES unless `full`).

    backends default to GELULAB_BACKEND (all `installed` when unset) and devices to GELULAB_DEVICE. `quick`
    narrows each axis that was not filtered to the smoke-test grid QUICK; `full` selects every dtype. Raises
    ValueError for any unknown value (naming it and the valid ones), or for quick and full together, before
    anything is run.
    """
    if quick and full:
        raise ValueError("--quick and --full contradict each other; give one of them")
    names = choose(backends, BACKEND_NAMES, "backend") if split_values(backends) else None
    if names is None:  # by default, the backends with the timer's hooks (a bench module)
        names = tuple(n for n in requested_backends() or installed if "bench" in capabilities(n).modules)
    devs = choose(devices, config.DEVICES, "device") if split_values(devices) else (config.device(),)
    given = {"modes": modes, "activations": activations, "impls": impls, "directions": directions, "dtypes": dtypes}
    allowed = {"modes": MODES, "activations": tuple(ACTIVATIONS), "impls": IMPLS, "directions": DIRECTIONS,
                   "dtypes": DTYPE_ORDER}
    assert set(DTYPE_ORDER) == set(DTYPES), "grid.DTYPE_ORDER must list every dtype of core.numerics.dtypes"
    axes = {}
    for axis, values in given.items():
        if quick and not split_values(values):
            axes[axis] = QUICK[axis]
        elif axis == "dtypes" and not full and not split_values(values):
            axes[axis] = DEFAULT_DTYPES
        else:
            axes[axis] = choose(values, allowed[axis], axis.rstrip("s"))
    size_values = parse_sizes(sizes)
    if quick and size_values is None:
        size_values = QUICK["sizes"]
    order = [n for n in BACKEND_NAMES if n in names]  # torch before tensorflow (import-order crash)
    return GridSpec(backends=tuple(order), devices=devs, sizes=size_values, **axes)

"""The moons study, backend-free part: configuration, data, splits, initial weights, batch order, Adam
formula.

Everything here is written once and shared by every backend (`backends/<name>/moons.py` does only the
training):

* data: `sklearn.datasets.make_moons(n_samples, noise)` (or another data set of experiments/moons/datasets.py,
  e.g. make_circles), split stratified into train / validation / test (70 / 15 / 15 % by default); the test
  set is evaluated once, after the last epoch;
* per seed, a `numpy.random.SeedSequence(seed)` spawns four independent streams: the data draw, the split, the
  initial weights and the per-epoch order, so a seed fixes all four and every arm and backend with that seed
  sees the same of each (paired comparisons);
* the matched regime's initial weights (Glorot uniform kernels, zero biases) and per-epoch orders, as numpy
  arrays;
* the one Adam update formula of the matched regime (`adam_step`, Kingma & Ba 2015, Algorithm 1) with its
  bias-correction tables.

A `MoonsConfig` is validated on construction: a bad field raises ValueError naming it, before any training,
and so does a configuration whose arrays could not fit in this machine's memory (`memory_needed`,
`machine_memory`): the sizes are checked before anything is allocated.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields

import numpy as np

from gelulab.core.activations import ACTIVATIONS, IMPLS
from gelulab.core.contracts import training
from gelulab.core.contracts.training import TRAIN_DTYPES, TrainOutput, TrainSpec, accuracy, bce_with_logits
from gelulab.experiments.moons.datasets import DATASETS

ARMS = tuple(ACTIVATIONS)  # every catalogue entry
REGIMES = ("matched", "native")
N_FEATURES = 2  # make_moons draws points in the plane
MAX_LR = 10.0  # the largest Adam learning rate accepted (the article's is 1e-3)

# Fields that change a single run's numbers; a results folder's runs must agree on all of them (see run_key).
# seeds, arms, regimes and dtypes only say WHICH runs exist, so a study can be extended with more of them.
_INDEX_FIELDS = ("seeds", "arms", "regimes", "dtype", "compare_dtype", "compare_seeds", "boundary_seed")


@dataclass(frozen=True)
class MoonsConfig:
    """Configuration of a moons study; the defaults are the article's (2000 samples, Adam lr 1e-3, 100
    epochs).

    n_samples: points drawn by make_moons (both classes together); noise: std of the Gaussian noise added to
    the points (make_moons units), >= 0; dataset: the data set drawn, a key of
    experiments.moons.datasets.DATASETS ("moons": make_moons, the default; "circles": make_circles); val_fraction,
    test_fraction: shares of n_samples held out (stratified); hidden: widths of the hidden layers (depth = len(hidden)),
    the MLP is 2 -> hidden... -> 1 logit; epochs, batch_size: training length and minibatch size (the last minibatch of
    an epoch is partial when the train set is not a multiple of batch_size, as torch's DataLoader with drop_last=False);
    lr, beta1, beta2, eps: Adam's alpha, beta_1, beta_2, epsilon (Kingma & Ba 2015, Algorithm 1). eps applies to
    the matched regime; the native regime uses each framework's default epsilon (torch 1e-8, optax 1e-8, Keras
    1e-7); seeds: the seeds (each fixes data, split, initial weights and order); arms: catalogue keys to
    train; impl: "formula" (gelulab's float64-widened, correctly rounded path), "builtin" (the framework's own
    activation) or "kernel" (gelulab's float32 kernel within 1 ULP, docs/kernels.md; a float64 study computes
    the formula, as the kernel takes float64 inputs by its formula); regimes: "matched"
    (shared numpy init, shared order, one Adam formula) and/or "native" (framework defaults); dtype: "float64"
    or "float32", the dtype of the study (statistics, plots); compare_dtype, compare_seeds: the first
    compare_seeds seeds (all, if fewer) are also trained in compare_dtype in the matched regime, to show how
    far the backends drift apart in that dtype (None: skip; compare_seeds is an integer >= 1 either way);
    boundary_seed: the seed whose decision boundaries
    are plotted (default: the first seed); grid_size: points per axis of the decision-boundary grid.

    Raises ValueError naming the field for any invalid value (checked here, before any training).
    """

    n_samples: int = 2000
    noise: float = 0.2
    dataset: str = "moons"
    val_fraction: float = 0.15
    test_fraction: float = 0.15
    hidden: tuple[int, ...] = (64, 64)
    epochs: int = 100
    batch_size: int = 32
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    seeds: tuple[int, ...] = tuple(range(20))
    arms: tuple[str, ...] = ARMS
    impl: str = "formula"
    regimes: tuple[str, ...] = ("matched",)
    dtype: str = "float64"
    compare_dtype: str | None = "float32"
    compare_seeds: int = 3
    boundary_seed: int | None = None
    grid_size: int = 60

    def __post_init__(self):
        for name in ("hidden", "seeds", "arms", "regimes"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise ValueError(f"{name}={value!r}: expected a sequence")
            object.__setattr__(self, name, tuple(value))
        _check_int("n_samples", self.n_samples, 20)
        _check_int("epochs", self.epochs, 1)
        _check_int("batch_size", self.batch_size, 1)
        _check_int("grid_size", self.grid_size, 2)
        if not _is_real(self.noise) or not self.noise >= 0 or not math.isfinite(self.noise):
            raise ValueError(f"noise={self.noise!r}: expected a finite number >= 0 (std of make_moons' noise)")
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset={self.dataset!r}: expected one of {list(DATASETS)}")
        for name in ("val_fraction", "test_fraction"):
            v = getattr(self, name)
            if not _is_real(v) or not 0 < v < 1:
                raise ValueError(f"{name}={v!r}: expected a fraction strictly between 0 and 1")
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError(f"val_fraction + test_fraction = {self.val_fraction + self.test_fraction!r}: "
                             "expected < 1 (something must be left to train on)")
        n_train, n_val, n_test = split_sizes(self.n_samples, self.val_fraction, self.test_fraction)
        for name, n in (("val_fraction", n_val), ("test_fraction", n_test)):
            if n < 2:
                raise ValueError(f"{name}: {n} of n_samples={self.n_samples} points; a stratified split needs >= 2")
        if self.batch_size > n_train:
            raise ValueError(f"batch_size={self.batch_size} is larger than the train set ({n_train} of "
                             f"n_samples={self.n_samples}); expected batch_size <= {n_train}")
        if not self.hidden:
            raise ValueError("hidden=(): expected at least one hidden layer width")
        for w in self.hidden:
            _check_int("hidden", w, 1)
        if not self.seeds:
            raise ValueError("seeds=(): expected at least one seed")
        check_memory(self)
        check_lr("lr", self.lr)
        for name in ("beta1", "beta2"):
            v = getattr(self, name)
            if not _is_real(v) or not 0 <= v < 1:
                raise ValueError(f"{name}={v!r}: expected 0 <= {name} < 1 (Kingma & Ba 2015, Algorithm 1)")
        if not _is_real(self.eps) or not self.eps > 0 or not math.isfinite(self.eps):
            raise ValueError(f"eps={self.eps!r}: expected a finite number > 0")
        for s in self.seeds:
            _check_int("seeds", s, 0)
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds={self.seeds!r}: a seed appears twice")
        _check_choices("arms", self.arms, ARMS)
        if self.impl not in IMPLS:
            raise ValueError(f"impl={self.impl!r}: expected one of {list(IMPLS)}")
        _check_choices("regimes", self.regimes, REGIMES)
        if self.dtype not in TRAIN_DTYPES:
            raise ValueError(f"dtype={self.dtype!r}: expected one of {list(TRAIN_DTYPES)}")
        if self.compare_dtype is not None and (self.compare_dtype not in TRAIN_DTYPES
                                               or self.compare_dtype == self.dtype):
            raise ValueError(f"compare_dtype={self.compare_dtype!r}: expected None or one of "
                             f"{[d for d in TRAIN_DTYPES if d != self.dtype]} (a dtype other than dtype)")
        _check_int("compare_seeds", self.compare_seeds, 1)  # also without compare_dtype: never accepted unread
        if self.boundary_seed is not None and self.boundary_seed not in self.seeds:
            raise ValueError(f"boundary_seed={self.boundary_seed!r}: expected one of seeds={list(self.seeds)}")

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(n_train, n_val, n_test) for this configuration."""
        return split_sizes(self.n_samples, self.val_fraction, self.test_fraction)

    @property
    def steps_per_epoch(self) -> int:
        """ceil(n_train / batch_size): minibatches per epoch (the last one partial when it does not divide).
        """
        return training.steps_per_epoch(self.sizes[0], self.batch_size)

    @property
    def compare_seed_list(self) -> tuple[int, ...]:
        """The seeds trained in compare_dtype (empty when compare_dtype is None)."""
        return () if self.compare_dtype is None else self.seeds[:self.compare_seeds]

    @property
    def plot_seed(self) -> int:
        """The seed whose decision boundaries are plotted."""
        return self.seeds[0] if self.boundary_seed is None else self.boundary_seed

    @property
    def layer_sizes(self) -> list[tuple[int, int]]:
        """[(fan_in, fan_out), ...] of the MLP's dense layers, input to logit."""
        return training.layer_sizes(N_FEATURES, self.hidden)

    def run_key(self) -> dict:
        """The fields that determine one run's numbers (everything but which seeds/arms/regimes/dtypes exist).
        """
        return {k: v for k, v in asdict(self).items() if k not in _INDEX_FIELDS}

    def to_dict(self) -> dict:
        """All fields as plain Python values (tuples as lists), for JSON."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> MoonsConfig:
        """Inverse of to_dict; unknown keys raise ValueError naming them."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown MoonsConfig fields {unknown}; expected some of {sorted(names)}")
        return cls(**d)


def lr_problem(v) -> str | None:
    """What is wrong with v as an Adam learning rate ("expected ..."), or None when v is a finite number with
    0 < v <= MAX_LR (larger steps only diverge on these data sets)."""
    if not _is_real(v) or not math.isfinite(v) or not 0 < v <= MAX_LR:
        return f"expected a finite number with 0 < lr <= {MAX_LR:g}"
    return None


def check_lr(name: str, v) -> None:
    """Raise ValueError naming `name` (a field or an option) unless v is an accepted learning rate (lr_problem)."""
    problem = lr_problem(v)
    if problem:
        raise ValueError(f"{name}={v!r}: {problem}")


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _check_int(name: str, v, minimum: int) -> None:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < minimum:
        raise ValueError(f"{name}: {v!r} is not allowed; expected an integer >= {minimum}")


def _check_choices(name: str, values: tuple, allowed: tuple) -> None:
    if not values:
        raise ValueError(f"{name}=(): expected at least one of {list(allowed)}")
    for v in values:
        if v not in allowed:
            raise ValueError(f"{name}: unknown value {v!r}; expected some of {list(allowed)}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name}={values!r}: a value appears twice")


# ------------------------------------------------------------------------------------------- memory


FLOAT_BYTES = 8  # the numpy arrays of a group are float64 whatever the study dtype (train_spec)
# per parameter and seed while a group trains: the initial value, the parameter, its gradient, Adam's two moments
PARAMETER_COPIES = 5
# the fields whose size drives a group's memory, in the order a message names them
_SIZE_FIELDS = ("n_samples", "hidden", "epochs", "seeds", "batch_size", "grid_size")


def memory_needed(cfg: MoonsConfig) -> int:
    """A lower bound, in bytes, of the memory one training group of `cfg` holds (every seed of one arm trained at
    once, as study.train_groups does), counting only the arrays that are certain to exist:

    * data: per seed the drawn points and labels, float64 (n_samples x 3), twice (the split copy and the seed
      stack), and the decision grid (grid_size^2 x 2), twice;
    * batch orders: per seed epochs x steps_per_epoch x batch_size int32, twice (per seed and stacked); Adam's bias
      corrections: 3 float64 tables of epochs x steps_per_epoch; the loss curves: epochs x 2 float64 per seed;
    * parameters: per seed (fan_in + 1) x fan_out float64 per dense layer, PARAMETER_COPIES times;
    * activations: per seed one layer's pre-activation and activation over the train set or the decision grid
      (the larger), and a minibatch's activations of every layer three times (forward, activation, gradient).

    The frameworks' own copies (casts to the study dtype, compiled buffers) come on top. Pure arithmetic on the
    sizes (Python integers, no overflow); allocates nothing."""
    n_train, _, _ = split_sizes(cfg.n_samples, cfg.val_fraction, cfg.test_fraction)
    return _memory(len(cfg.seeds), cfg.n_samples, n_train, cfg.hidden, cfg.epochs, cfg.batch_size, cfg.grid_size)


def _memory(n_seeds: int, n_samples: int, n_train: int, hidden, epochs: int, batch_size: int,
            grid_size: int) -> int:
    n_train = max(n_train, 1)
    steps = -(-n_train // max(batch_size, 1))
    points = grid_size ** 2
    widths = tuple(hidden)
    layers = list(zip((2, *widths), (*widths, 1)))
    per_seed = (
        2 * FLOAT_BYTES * (3 * n_samples + 2 * points)
        + 2 * 4 * epochs * steps * batch_size + 2 * FLOAT_BYTES * epochs
        + PARAMETER_COPIES * FLOAT_BYTES * sum((fan_in + 1) * fan_out for fan_in, fan_out in layers)
        + 2 * FLOAT_BYTES * max(n_train, points) * max(widths, default=1)
        + 3 * FLOAT_BYTES * batch_size * sum(widths)
    )
    return n_seeds * per_seed + 3 * FLOAT_BYTES * epochs * steps


def machine_memory() -> int | None:
    """The memory this process may use, in bytes: the machine's physical memory (psutil when installed, else
    os.sysconf's SC_PHYS_PAGES x SC_PAGE_SIZE), or the container's limit (cgroup v2 memory.max, v1
    memory.limit_in_bytes) when that is lower; None where neither can be read."""
    total = None
    try:
        import psutil

        total = int(psutil.virtual_memory().total)
    except (ImportError, OSError, AttributeError):
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            total = None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            total = int(text) if total is None else min(total, int(text))
            break
    return total if total and total > 0 else None


def format_bytes(n: int) -> str:
    """A byte count in binary units, three significant digits: 1536 -> "1.5 KiB", 4e14 -> "364 TiB"; beyond
    1024 EiB in bytes ("8e+24 bytes")."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    value, unit = float(n), 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{int(n)} bytes"
    return f"{value:.3g} {units[unit]}" if value < 1024 else f"{float(n):.3g} bytes"


def check_memory(cfg: MoonsConfig, available: int | None = None) -> None:
    """Raise ValueError when one training group of `cfg` needs more memory (memory_needed) than this machine has
    (`available`, default machine_memory(); nothing is checked when it cannot be read). The message names the
    size field that drives the need (the one whose default value would shrink it most), the bytes needed and the
    bytes the machine has."""
    available = machine_memory() if available is None else available
    needed = memory_needed(cfg)
    if available is None or needed <= available:
        return
    n_train = split_sizes(cfg.n_samples, cfg.val_fraction, cfg.test_fraction)[0]
    d = {f.name: f.default for f in fields(MoonsConfig)}
    sizes = {"n_samples": cfg.n_samples, "n_train": n_train, "hidden": cfg.hidden, "epochs": cfg.epochs,
             "seeds": len(cfg.seeds), "batch_size": cfg.batch_size, "grid_size": cfg.grid_size}
    defaults = {"n_samples": d["n_samples"], "hidden": d["hidden"], "epochs": d["epochs"],
                "seeds": len(d["seeds"]), "batch_size": d["batch_size"], "grid_size": d["grid_size"]}

    def with_default(name):
        s = {**sizes, name: defaults[name]}
        if name == "n_samples":
            s["n_train"] = split_sizes(s["n_samples"], cfg.val_fraction, cfg.test_fraction)[0]
        return _memory(s["seeds"], s["n_samples"], s["n_train"], s["hidden"], s["epochs"], s["batch_size"],
                       s["grid_size"])

    culprit = min(_SIZE_FIELDS, key=with_default)
    value = len(cfg.seeds) if culprit == "seeds" else getattr(cfg, culprit)
    shown = f"{value} seeds" if culprit == "seeds" else f"{culprit}={value!r}"
    raise ValueError(f"{shown}: one training group ({len(cfg.seeds)} seeds x {cfg.n_samples} samples, hidden "
                     f"{_short(cfg.hidden)}, {cfg.epochs} epochs) needs at least {format_bytes(needed)} of memory; "
                     f"this machine has {format_bytes(available)}")


def check_seed_count(name: str, n: int, available: int | None = None) -> None:
    """Raise ValueError when `n` seeds cannot fit in this machine's memory even in the smallest study (20 samples,
    one hidden unit, one epoch): refuses a seed count before its list of seeds is built. `name` is how the
    message names the value: an option ("--seeds") or a file's key ("[base] seeds")."""
    available = machine_memory() if available is None else available
    needed = _memory(n, 20, 14, (1,), 1, 1, 2)
    if available is not None and needed > available:
        shown = f"{name} {n}" if name.startswith("--") else f"{name} = {n}"  # an option, or a file's key
        raise ValueError(f"{shown}: {n} seeds need at least {format_bytes(needed)} of memory in one training "
                         f"group; this machine has {format_bytes(available)}")


def check_depth(depth, width, n_seeds: int, available: int | None = None) -> None:
    """Raise ValueError for a depth or width that is not an integer >= 1, or when `depth` hidden layers of `width`
    units cannot fit in this machine's memory for `n_seeds` seeds (their parameters alone, PARAMETER_COPIES
    float64 each, and the list of widths): refuses a grid cell before its list of layer widths is built."""
    for name, v in (("depth", depth), ("width", width)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: {v!r} is not allowed; expected an integer >= 1")
    available = machine_memory() if available is None else available
    needed = (max(n_seeds, 1) * PARAMETER_COPIES * FLOAT_BYTES * ((depth - 1) * (width + 1) * width + 4 * width + 1)
              + 8 * depth)
    if available is not None and needed > available:
        raise ValueError(f"depth {depth}, width {width}: the parameters of {max(n_seeds, 1)} seeds need at least "
                         f"{format_bytes(needed)} of memory; this machine has {format_bytes(available)}")


def _short(hidden) -> str:
    text = ",".join(str(w) for w in hidden[:4])
    return text + (f",... ({len(hidden)} layers)" if len(hidden) > 4 else "")


def split_sizes(n_samples: int, val_fraction: float, test_fraction: float) -> tuple[int, int, int]:
    """(n_train, n_val, n_test): n_test = ceil(test_fraction * n) and n_val = ceil(val_fraction * n) as
    sklearn.model_selection.train_test_split rounds a float test_size; the rest trains. 2000 -> (1400, 300, 300)."""
    n_test = math.ceil(test_fraction * n_samples)
    n_val = math.ceil(val_fraction * n_samples)
    return n_samples - n_val - n_test, n_val, n_test


@dataclass(frozen=True)
class SeedStreams:
    """The four independent random streams of one seed, spawned from numpy.random.SeedSequence(seed)."""

    data: int  # random_state of make_moons
    split: int  # random_state of the two stratified splits
    init: np.random.SeedSequence  # matched-regime initial weights
    order: np.random.SeedSequence  # matched-regime per-epoch order


def seed_streams(seed: int) -> SeedStreams:
    """Spawn the data / split / init / order streams of `seed` (SeedSequence.spawn: independent by design)."""
    data, split, init, order = np.random.SeedSequence(seed).spawn(4)
    return SeedStreams(int(data.generate_state(1)[0]), int(split.generate_state(1)[0]), init, order)


@dataclass(frozen=True)
class MoonsData:
    """One seed's data set. x_*: (n, 2) float64 points; y_*: (n,) float64 labels in {0, 1}."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def make_data(cfg: MoonsConfig, seed: int) -> MoonsData:
    """make_moons(cfg.n_samples, noise=cfg.noise) (the data set cfg.dataset names, see
    experiments/moons/datasets.py) split stratified into train/val/test (sizes cfg.sizes).

    Deterministic in (cfg, seed). Source: sklearn.datasets.make_moons / make_circles,
    sklearn.model_selection.train_test_split (stratify=y keeps the 50/50 class balance in every split).
    """
    from sklearn.model_selection import train_test_split

    st = seed_streams(seed)
    x, y = DATASETS[cfg.dataset].draw(cfg.n_samples, cfg.noise, st.data)
    _, n_val, n_test = cfg.sizes
    idx = np.arange(cfg.n_samples)
    rest, test = train_test_split(idx, test_size=n_test, stratify=y, random_state=st.split)
    train, val = train_test_split(rest, test_size=n_val, stratify=y[rest], random_state=st.split)
    f = np.float64
    return MoonsData(x[train].astype(f), y[train].astype(f), x[val].astype(f), y[val].astype(f),
                     x[test].astype(f), y[test].astype(f))


def glorot_uniform_init(cfg: MoonsConfig, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Matched-regime initial weights of one seed: [(W (fan_in, fan_out), b (fan_out,)), ...] float64.

    W ~ U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010, eq. 16; Keras Dense's default kernel
    initialiser), b = 0. Drawn with numpy from the seed's init stream, so every backend loads the same
    numbers.
    """
    return training.glorot_uniform(cfg.layer_sizes, seed_streams(seed).init)


def epoch_orders(cfg: MoonsConfig, seed: int) -> np.ndarray:
    """Matched-regime minibatch indices of one seed: (epochs, steps_per_epoch, batch_size) int32.

    Epoch e visits a fresh permutation of range(n_train) (numpy Generator.permutation from the seed's order
    stream), cut into minibatches in that order; the last minibatch is padded with index 0, whose weight is 0
    (see batch_weights).
    """
    return training.epoch_orders(cfg.sizes[0], cfg.epochs, cfg.batch_size, seed_streams(seed).order)


def batch_weights(cfg: MoonsConfig) -> np.ndarray:
    """(steps_per_epoch, batch_size) float64 weights of each minibatch slot in the loss: 1/m for the m real
    samples
    of a minibatch, 0 for padding, so sum(w * loss) is the minibatch mean loss (BCE mean reduction)."""
    return training.batch_weights(cfg.sizes[0], cfg.batch_size)


def adam_bias_corrections(cfg: MoonsConfig) -> tuple[np.ndarray, np.ndarray]:
    """(1 - beta1^t, 1 - beta2^t) for t = 1 .. epochs * steps_per_epoch, float64 arrays of shape (epochs,
    steps).

    Computed once in numpy and handed to every backend (cast to the run dtype), so all use the same numbers.
    """
    return training.adam_bias_corrections(cfg.beta1, cfg.beta2, cfg.epochs, cfg.steps_per_epoch)


def decision_grid(cfg: MoonsConfig, data: MoonsData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A grid_size x grid_size grid over the data's bounding box plus a 0.5 margin.

    Returns (xs (G,), ys (G,), points (G*G, 2) float64), points in row-major order (y outer, x inner).
    """
    x = np.concatenate([data.x_train, data.x_val, data.x_test])
    lo, hi = x.min(axis=0) - 0.5, x.max(axis=0) + 0.5
    xs = np.linspace(lo[0], hi[0], cfg.grid_size)
    ys = np.linspace(lo[1], hi[1], cfg.grid_size)
    gx, gy = np.meshgrid(xs, ys)
    return xs, ys, np.stack([gx.ravel(), gy.ravel()], axis=1)


def train_spec(cfg: MoonsConfig, arm: str, regime: str, dtype: str, seeds, datasets: dict) -> TrainSpec:
    """Assemble the TrainSpec of `seeds` (datasets: {seed: MoonsData}, as from make_data).

    Raises ValueError for an arm, regime or dtype the config does not allow.
    """
    _check_choices("arms", (arm,), ARMS)
    _check_choices("regimes", (regime,), REGIMES)
    _check_choices("dtype", (dtype,), TRAIN_DTYPES)
    seeds = tuple(seeds)
    ds = [datasets[s] for s in seeds]
    inits = [glorot_uniform_init(cfg, s) for s in seeds]
    init = [(np.stack([i[k][0] for i in inits]), np.stack([i[k][1] for i in inits]))
            for k in range(len(cfg.layer_sizes))]
    c1, c2 = adam_bias_corrections(cfg)
    return TrainSpec(
        arm=arm, impl=cfg.impl, regime=regime, dtype=dtype, hidden=cfg.hidden, epochs=cfg.epochs,
        batch_size=cfg.batch_size, lr=cfg.lr, beta1=cfg.beta1, beta2=cfg.beta2, eps=cfg.eps, seeds=seeds,
        x_train=np.stack([d.x_train for d in ds]), y_train=np.stack([d.y_train for d in ds]),
        x_val=np.stack([d.x_val for d in ds]), y_val=np.stack([d.y_val for d in ds]),
        x_test=np.stack([d.x_test for d in ds]),
        grid=np.stack([decision_grid(cfg, d)[2] for d in ds]),
        init=init, order=np.stack([epoch_orders(cfg, s) for s in seeds]), weights=batch_weights(cfg),
        c1=c1, c2=c2,
    )


def evaluate(spec: TrainSpec, out: TrainOutput, y_test: np.ndarray) -> list[dict]:
    """Per-seed metrics of a finished group, in float64 from the backend's logits (the test set's single use).

    y_test: (S, n_test) labels. Returns one dict per seed of spec.seeds: {"train_loss", "train_acc",
    "val_loss", "val_acc", "test_loss", "test_acc"} (losses: mean BCE of the final network; accuracies: shares
    in [0, 1]).
    """
    m = {
        "train_loss": bce_with_logits(out.logits_train, spec.y_train), "train_acc": accuracy(out.logits_train,
                                                                                             spec.y_train),
        "val_loss": bce_with_logits(out.logits_val, spec.y_val), "val_acc": accuracy(out.logits_val, spec.y_val),
        "test_loss": bce_with_logits(out.logits_test, y_test), "test_acc": accuracy(out.logits_test, y_test),
    }
    return [{k: float(v[i]) for k, v in m.items()} for i in range(spec.n_seeds)]

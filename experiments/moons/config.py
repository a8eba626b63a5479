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

A `MoonsConfig` is validated on construction: a bad field raises ValueError naming it, before any training.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from gelulab.core import training
from gelulab.core.activations import ACTIVATIONS, IMPLS
from gelulab.core.training import TRAIN_DTYPES, TrainOutput, TrainSpec, accuracy, bce_with_logits
from gelulab.experiments.moons.datasets import DATASETS

ARMS = tuple(ACTIVATIONS)  # every catalogue entry
REGIMES = ("matched", "native")
N_FEATURES = 2  # make_moons draws points in the plane

# Fields that change a single run's numbers; a results folder's runs must agree on all of them (see run_key).
# seeds, arms, regimes and dtypes only say WHICH runs exist, so a study can be extended with more of them.
_INDEX_FIELDS = ("seeds", "arms", "regimes", "dtype", "compare_dtype", "compare_seeds", "boundary_seed")


@dataclass(frozen=True)
class MoonsConfig:
    """Configuration of a moons study; the defaults are the article's (2000 samples, Adam lr 1e-3, 100
    epochs).

    n_samples: points drawn by make_moons (both classes together); noise: std of the Gaussian noise added to
    the points (make_moons units), >= 0; dataset: the data set drawn, a key of
    experiments.moons.datasets.DATASETS ("moons": make_moons, the default; "circles": make_circles); val_fraction, test_fraction: shares of n_samples held out
    (stratified); hidden: widths of the hidden layers (depth = len(hidden)), the MLP is 2 -> hidden... -> 1
    logit; epochs, batch_size: training length and minibatch size (the last minibatch of an epoch is partial
    when the train set is not a multiple of batch_size, as torch's DataLoader with drop_last=False); lr,
    beta1, beta2, eps: Adam's alpha, beta_1, beta_2, epsilon (Kingma & Ba 2015, Algorithm 1). eps applies to
    the matched regime; the native regime uses each framework's default epsilon (torch 1e-8, optax 1e-8, Keras
    1e-7); seeds: the seeds (each fixes data, split, initial weights and order); arms: catalogue keys to
    train; impl: "formula" (gelulab's) or "builtin" (the framework's own activation); regimes: "matched"
    (shared numpy init, shared order, one Adam formula) and/or "native" (framework defaults); dtype: "float64"
    or "float32", the dtype of the study (statistics, plots); compare_dtype, compare_seeds: the first
    compare_seeds seeds (all, if fewer) are also trained in compare_dtype in the matched regime, to show how
    far the backends drift apart in that dtype (None: skip); boundary_seed: the seed whose decision boundaries
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
        if not _is_real(self.lr) or not self.lr > 0 or not math.isfinite(self.lr):
            raise ValueError(f"lr={self.lr!r}: expected a finite number > 0")
        for name in ("beta1", "beta2"):
            v = getattr(self, name)
            if not _is_real(v) or not 0 <= v < 1:
                raise ValueError(f"{name}={v!r}: expected 0 <= {name} < 1 (Kingma & Ba 2015, Algorithm 1)")
        if not _is_real(self.eps) or not self.eps > 0 or not math.isfinite(self.eps):
            raise ValueError(f"eps={self.eps!r}: expected a finite number > 0")
        if not self.seeds:
            raise ValueError("seeds=(): expected at least one seed")
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
        if self.compare_dtype is not None:
            if self.compare_dtype not in TRAIN_DTYPES or self.compare_dtype == self.dtype:
                raise ValueError(f"compare_dtype={self.compare_dtype!r}: expected None or one of "
                                 f"{[d for d in TRAIN_DTYPES if d != self.dtype]} (a dtype other than dtype)")
            _check_int("compare_seeds", self.compare_seeds, 1)
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

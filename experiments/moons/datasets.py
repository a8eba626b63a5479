"""The two-class data sets of the moons study, every one drawn locally by scikit-learn (nothing is downloaded):
the one place to add a data set.

DATASETS maps a name to a `Dataset` whose draw(n_samples, noise, random_state) returns x (n, 2) float64 points
in the plane and y (n,) integer labels in {0, 1}, n // 2 of class 0 and the rest of class 1:

  moons    sklearn.datasets.make_moons(n_samples, noise=noise, random_state=...): two interleaving half circles
  circles  sklearn.datasets.make_circles(n_samples, noise=noise, factor=0.5, random_state=...): a circle of
           radius 0.5 (class 1) inside one of radius 1 (class 0), the factor of scikit-learn's classifier
           comparison example

noise is the standard deviation of the Gaussian noise added to the points (units of the data: the moons' radius
1, the outer circle's radius 1). A new entry here is a value of MoonsConfig.dataset, of `gelulab moons
--dataset` and of a grid's `dataset` axis, with no other edit.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """One data set: name (the config value), what it is in words, and draw(n_samples, noise, random_state) ->
    (x (n, 2) float64, y (n,) int)."""

    name: str
    description: str
    draw: Callable[[int, float, int], tuple[np.ndarray, np.ndarray]]


def _moons(n_samples: int, noise: float, random_state: int):
    from sklearn.datasets import make_moons

    return make_moons(n_samples=n_samples, noise=noise, random_state=random_state)


def _circles(n_samples: int, noise: float, random_state: int):
    from sklearn.datasets import make_circles

    return make_circles(n_samples=n_samples, noise=noise, factor=0.5, random_state=random_state)


DATASETS = {d.name: d for d in (
    Dataset("moons", "sklearn.datasets.make_moons: two interleaving half circles", _moons),
    Dataset("circles", "sklearn.datasets.make_circles(factor=0.5): a circle of radius 0.5 inside one of radius 1",
            _circles),
)}

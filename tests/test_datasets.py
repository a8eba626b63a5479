"""Every data set registered in experiments/moons/datasets.py keeps the contract its module states: draw(n_samples,
noise, random_state) gives x (n, 2) float64 and y (n,) integer labels in {0, 1}, n // 2 of class 0 and the rest of
class 1, the same values for the same seed, and noise the standard deviation of the Gaussian noise added to the
points. A data set whose description names a scikit-learn generator ("sklearn.datasets.make_circles(factor=0.5):
...") gives exactly that generator's values for the same arguments: the reference is scikit-learn itself, called
here, not the module's code."""
from __future__ import annotations

import ast
import importlib

import numpy as np
import pytest

from gelulab.experiments.moons.datasets import DATASETS

NAMES = sorted(DATASETS)
SIZES = (1, 2, 7, 100, 1001)  # one point, one of each class, odd counts


def _sklearn_generator(description: str):
    """(function, keyword arguments) of the scikit-learn generator a description names before its colon
    ("sklearn.datasets.make_circles(factor=0.5)"), or None where it names none."""
    head = description.split(":")[0].strip()
    if not head.startswith("sklearn.datasets."):
        return None
    call = ast.parse(head if head.endswith(")") else head + "()", mode="eval").body
    path = ast.unparse(call.func)
    module, _, name = path.rpartition(".")
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return getattr(importlib.import_module(module), name), kwargs


def test_the_registry_names_each_data_set_by_its_own_name():
    assert NAMES and all(DATASETS[n].name == n and DATASETS[n].description for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", SIZES)
def test_shapes_dtypes_labels_and_class_counts(name, n):
    x, y = DATASETS[name].draw(n, 0.2, 3)
    assert isinstance(x, np.ndarray) and x.shape == (n, 2) and x.dtype == np.float64
    assert isinstance(y, np.ndarray) and y.shape == (n,) and np.issubdtype(y.dtype, np.integer)
    assert set(np.unique(y).tolist()) <= {0, 1} and np.isfinite(x).all()
    assert int((y == 0).sum()) == n // 2 and int((y == 1).sum()) == n - n // 2
    if n >= 2:
        assert set(np.unique(y).tolist()) == {0, 1}  # both classes present


@pytest.mark.parametrize("name", NAMES)
def test_a_seed_gives_the_same_points_and_another_seed_other_points(name):
    draw = DATASETS[name].draw
    x1, y1 = draw(200, 0.1, 7)
    x2, y2 = draw(200, 0.1, 7)
    x3, _ = draw(200, 0.1, 8)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert not np.array_equal(x1, x3)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("noise", [0.05, 0.3])
def test_noise_is_the_standard_deviation_of_the_added_gaussian_noise(name, noise):
    """Same seed, with and without noise: the points differ by Gaussian noise of standard deviation `noise`
    (each coordinate; 4000 points, so the sample standard deviation is within 5 % of it with a wide margin:
    its relative standard error is 1/sqrt(2 * 8000) = 0.8 %)."""
    draw = DATASETS[name].draw
    clean, y0 = draw(4000, 0.0, 11)
    noisy, y1 = draw(4000, noise, 11)
    assert np.array_equal(y0, y1)
    d = (noisy - clean).ravel()
    assert abs(d.std() / noise - 1) < 0.05 and abs(d.mean()) < 4 * noise / np.sqrt(d.size)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n, noise, seed", [(100, 0.2, 0), (1001, 0.0, 5), (7, 0.35, 123)])
def test_values_are_scikit_learns_for_the_same_arguments(name, n, noise, seed):
    found = _sklearn_generator(DATASETS[name].description)
    if found is None:
        pytest.skip(f"{name}: its description names no scikit-learn generator")
    generator, kwargs = found
    want_x, want_y = generator(n_samples=n, noise=noise, random_state=seed, **kwargs)
    x, y = DATASETS[name].draw(n, noise, seed)
    assert np.array_equal(x, want_x) and np.array_equal(y, want_y)

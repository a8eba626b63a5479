"""The parity error plots (experiments.parity.command.errors_figure) read from their matplotlib objects, not pixels:
line style per impl as the legend says, one colour per backend from the registry, bit-identical backends drawn
once and named together, and the x ranges judged by absolute error (results below the smallest normal; |f'| ~ 0)
shaded, labelled and kept off the ULP lines. Real numpy results of exact GELU in float32; the x positions are
checked against mpmath."""
from __future__ import annotations

import dataclasses
import inspect

import matplotlib.colors
import mpmath
import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.lines import Line2D
from matplotlib.patches import Polygon, Rectangle

from gelulab.backends import BACKEND_NAMES, get_backend
from gelulab.experiments.parity import command

FLOAT32_SMALLEST_NORMAL = 2.0 ** -126  # IEEE 754 binary32
FLOAT32_SMALLEST_SUBNORMAL = 2.0 ** -149


def _gelu(x):
    """Exact GELU x Phi(x) in mpmath (60 digits)."""
    with mpmath.workdps(60):
        x = mpmath.mpf(x)
        return x * mpmath.ncdf(x)


def _gelu_prime_root():
    """The x < 0 where GELU's derivative Phi(x) + x phi(x) is zero (mpmath's root finder)."""
    with mpmath.workdps(30):
        return float(mpmath.findroot(lambda x: mpmath.ncdf(x) + x * mpmath.npdf(x), -0.75))


@pytest.fixture(scope="module")
def raw():
    """{group: {region: CellResult}} of numpy's exact GELU, float32, eager, value and first derivative, every
    impl numpy has."""
    _, raw, _ = command.collect([get_backend("numpy")], keys=("gelu_none",), dtypes=("float32",),
                                modes=("eager",), orders=(0, 1), progress=False)
    return raw


def _with_twin(raw, backend, impl):
    """`raw` plus a copy of numpy's `impl` groups under `backend`: a backend whose outputs are bit-identical."""
    twin = {dataclasses.replace(g, backend=backend): res for g, res in raw.items() if g.impl == impl}
    return {**raw, **twin}


def _legend(fig):
    (legend,) = fig.legends
    return legend


def _labelled_lines(fig):
    """{label: Line2D} of the lines drawn in the panels."""
    return {line.get_label(): line for ax in fig.axes for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def _shaded(ax, hatched: bool):
    """[(x0, x1)] of the axvspans of `ax` (hatched or not)."""
    out = []
    for p in ax.patches:
        if isinstance(p, (Rectangle, Polygon)) and bool(p.get_hatch()) == hatched:
            xs = p.get_xy()[:, 0] if isinstance(p, Polygon) else [p.get_x(), p.get_x() + p.get_width()]
            out.append((float(min(xs)), float(max(xs))))
    return out


def test_each_impl_has_its_own_line_style_stated_in_the_legend(raw):
    fig = command.errors_figure(raw, 0)
    lines = _labelled_lines(fig)
    styles = {"builtin": "-", "formula": "--", "kernel": ":"}
    impls = {label.split()[-1]: line.get_linestyle() for label, line in lines.items()}
    assert impls == styles, impls
    title = _legend(fig).get_title().get_text()
    assert "solid builtin" in title and "dashed gelulab formula" in title and "dotted gelulab kernel" in title
    legend_labels = [t.get_text() for t in _legend(fig).get_texts()]
    assert {"numpy builtin", "numpy formula", "numpy kernel"} <= set(legend_labels), legend_labels


def test_bit_identical_backends_are_one_line_named_together(raw):
    fig = command.errors_figure(_with_twin(raw, "torch", "formula"), 0)
    labels = set(_labelled_lines(fig))
    assert "numpy = torch formula (identical outputs)" in labels, labels
    assert not {"numpy formula", "torch formula"} & labels, labels
    assert "numpy builtin" in labels  # only the twin impl is merged


def test_a_backend_has_one_colour_from_the_registry_and_the_plot_code_names_none():
    colours = [command.backend_color(n) for n in BACKEND_NAMES]
    assert len(set(colours)) == len(BACKEND_NAMES)
    with pytest.raises(ValueError, match="unknown backend 'mxnet'"):
        command.backend_color("mxnet")
    source = inspect.getsource(command.errors_figure) + inspect.getsource(command.backend_color)
    assert not [n for n in BACKEND_NAMES if f'"{n}"' in source]


def test_the_lines_colour_is_their_backends(raw):
    fig = command.errors_figure(_with_twin(raw, "torch", "kernel"), 0)
    lines = _labelled_lines(fig)
    assert matplotlib.colors.same_color(lines["numpy builtin"].get_color(), command.backend_color("numpy"))
    merged = lines["numpy = torch kernel (identical outputs)"]
    assert matplotlib.colors.same_color(merged.get_color(), command.backend_color("numpy"))


def test_subnormal_results_are_a_labelled_hatched_band_with_no_ulp_line(raw):
    """Exact GELU in float32 is subnormal from about x = -14.1 to -13.2 (mpmath): that x range is hatched, named in
    the legend, and no ULP line has a point in it."""
    fig = command.errors_figure(raw, 0)
    (ax,) = fig.axes
    bands = _shaded(ax, hatched=True)
    assert bands, "no hatched band"
    for lo, hi in bands:
        centre = abs(_gelu((lo + hi) / 2))
        assert FLOAT32_SMALLEST_SUBNORMAL / 2 < centre < FLOAT32_SMALLEST_NORMAL, (lo, hi, centre)
        for line in ax.get_lines():
            x, y = (np.asarray(v, dtype=float) for v in line.get_data())
            inside = (x > lo) & (x < hi) & np.isfinite(y)
            assert not inside.any(), (line.get_label(), x[inside])
    assert any("below the smallest normal" in t.get_text() for t in _legend(fig).get_texts())


def test_the_zero_of_f_prime_is_a_labelled_band_with_hollow_markers(raw):
    """The builtin's f' is judged absolutely in the root window around GELU''s zero (x = -0.7518, mpmath): the
    window is shaded and labelled, and its errors are hollow markers inside it, not on the line."""
    root = _gelu_prime_root()
    assert root == pytest.approx(-0.7517915, abs=1e-6)
    fig = command.errors_figure(raw, 1)
    (ax,) = fig.axes
    bands = _shaded(ax, hatched=False)
    assert any(lo < root < hi for lo, hi in bands), bands
    hollow = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert hollow
    for c in hollow:
        assert len(c.get_facecolors()) == 0 or not c.get_facecolors()[:, 3].any()  # no fill
        x = c.get_offsets()[:, 0]
        assert np.all(np.abs(x - root) < 0.5), x  # in the bins of the window
    texts = [t.get_text() for t in _legend(fig).get_texts()]
    assert any("judged absolutely" in t and "hollow" in t for t in texts), texts
    assert any(isinstance(h, Line2D) for h in _legend(fig).legend_handles)

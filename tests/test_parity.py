"""The parity suite: every selected backend x impl x activation x dtype x mode x derivative order x region against
the correctly rounded mpmath reference, under the tolerance table of core.parity.tolerances.

Cells that match a known upstream fault are xfail(strict=True): the suite says so when the framework is fixed. A
fault that depends on the machine (a CPU dispatch level never measured, or a fault no forcible setting decides) is
xfail without strict: it may pass here.
Nothing here names a backend or an activation: adding one to the catalogue or to backends/ extends this file.
Every cell is marked `parity`; compiled modes are marked `slow` and `compile` too, and eager kernel cells
`compile` where the backend's record says its eager kernel calls compile (CI runs them all).
"""
from __future__ import annotations

from functools import lru_cache

import pytest
from conftest import SELECTED

from gelulab.backends import capabilities, get_backend
from gelulab.core.parity.known_faults import known_fault
from gelulab.core.parity.regions import REGIONS
from gelulab.experiments.parity.engine import Group, check, evaluate, groups

pytestmark = pytest.mark.parity


def _params():
    out = []
    for g in groups([get_backend(n) for n in SELECTED]):
        for r in REGIONS:
            marks = [pytest.mark.slow, pytest.mark.compile] if g.mode != "eager" else []
            if g.mode == "eager" and g.impl == "kernel" and capabilities(g.backend).eager_kernels_compile:
                marks.append(pytest.mark.compile)  # its eager call compiles the kernel first
            # with pytest-xdist (--dist loadgroup), one worker takes every cell sharing a reference
            marks.append(pytest.mark.xdist_group(f"parity-{g.key}-{g.dtype}-d{g.order}"))
            fault = known_fault(g, r)
            if fault is not None:  # a fault that depends on the machine may pass here: then not strict
                condition = fault.condition(g)
                marks.append(pytest.mark.xfail(strict=condition is None, reason=f"{fault.reason} ({fault.link})"
                                               + (f"; {condition}" if condition else "")))
            out.append(pytest.param(g, r, id=f"{g.id}-{r}", marks=marks))
    return out


@lru_cache(maxsize=8)
def _evaluated(group: Group):
    return evaluate(get_backend(group.backend, group.device), group)


@pytest.mark.parametrize("group,region", _params())
def test_parity(group, region):
    result = _evaluated(group)[region]
    assert result.exception is None, result.exception
    verdict = check(result)
    assert verdict.passed, (
        f"{verdict.n_bad} of {result.x.size} inputs beyond tolerance {verdict.tol}; worst at x={verdict.worst_x!r}; "
        f"max ULP {result.error.max_ulp:g} at x={result.error.x_at_max_ulp!r}, max rel {result.error.max_rel:.3g}"
    )

"""Assertions for test suites: `gelulab.testing.assert_same_activations(a, b)`.

A converter (torch -> ONNX, torch -> Core ML, torch -> Keras, a checkpoint port) that computes the wrong GELU
variant at one site changes each activation by up to about 5e-4, which an end-to-end `atol=1e-3` comparison does not
see. This assertion compares the models site by site instead (gelulab.api.audit: every activation site found in
each model's graph, cut out and probed in its own runtime) and fails naming the first site whose variant changed.

In a converter's test suite:

    import torch
    from gelulab.testing import assert_same_activations

    def test_export_keeps_the_gelu_variants(tmp_path):
        model = MyModel().eval()                       # holds nn.GELU(approximate="tanh"), F.gelu, ...
        path = tmp_path / "model.onnx"
        torch.onnx.export(model, (torch.randn(2, 16),), str(path))
        assert_same_activations(model, path)           # AssertionError naming the first changed site

Either side is what `gelulab.identify` takes as a model: a torch nn.Module (an example input inferred or given with
example=), a torch.export program, the path of an .onnx / .pt2 file or of a Hugging Face folder, a Keras model,
... The options are api.audit.Options' (example=, ort_level=, allow_pickle=, params=).
"""
from __future__ import annotations

__all__ = ["assert_same_activations"]


def assert_same_activations(a, b, **options) -> None:
    """Pass when `a` and `b` have the same number of activation sites and compute the same catalogue variant at
    each (in their order; sites that compute none of the variants pass when they compute the same function). Raise
    AssertionError naming the first changed site: its index, its path in each model, the variants, the largest
    difference and the input x where it is; and the count of changed sites. Raises ValueError (from api.audit) when
    a model cannot be read: a file that does not load, a model without activation, an example input needed."""
    from gelulab.api import audit

    result = audit.audit_pair(a, b, audit.Options(**options))
    changed = [d for d in result.diffs if d.changed]
    if not changed:
        return
    d = changed[0]
    where_a = d.a.path if d.a else "-"
    where_b = d.b.path if d.b else "-"
    what = (f"{d.a.computes if d.a else 'no site'} in A, {d.b.computes if d.b else 'no site'} in B")
    diff = f"; largest difference {d.difference:.2g} at x = {d.at:g}" if d.a and d.b else ""
    raise AssertionError(
        f"activation site {d.index} changed: {d.status}: {what} (A: {where_a}; B: {where_b}){diff}; "
        f"{len(changed)} of {len(result.diffs)} sites changed\n\n{result}")

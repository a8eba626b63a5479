"""gelulab.core.plumbing.report.environment(): a missing optional package is recorded, never fatal; threads in effect
per backend."""
from __future__ import annotations

import types

from gelulab.backends import capabilities
from gelulab.core.contracts.interface import Backend
from gelulab.core.plumbing.report import environment


def _module(versions, threads=None):
    m = types.ModuleType("fake_activations")
    m.versions = versions
    if threads is not None:
        m.threads = threads
    return m


def test_missing_optional_package_is_recorded_not_raised():
    def versions():
        import gelulab_no_such_package  # noqa: F401 - stands for flax/optax/keras absent beside their framework

    env = environment([Backend("jax", "cpu", _module(versions), capabilities("jax"))])
    assert env["frameworks"] == {"jax": {"gelulab_no_such_package": "not installed"}}


def test_threads_in_effect_come_from_the_backend_module():
    with_threads = Backend("tensorflow", "cpu", _module(lambda: {"tf": "x"}, lambda: {"intra_op": 3}),
                           capabilities("tensorflow"))
    without = Backend("torch", "cpu", _module(lambda: {"torch": "y"}), capabilities("torch"))
    env = environment([with_threads, without])
    assert env["threads_in_effect"] == {"tensorflow": {"intra_op": 3}}
    assert env["frameworks"] == {"tensorflow": {"tf": "x"}, "torch": {"torch": "y"}}


def test_numpy_backend_reports_its_single_thread():
    from gelulab.backends import get_backend

    assert environment([get_backend("numpy")])["threads_in_effect"] == {"numpy": {"intra_op": 1}}

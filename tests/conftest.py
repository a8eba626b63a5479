"""Shared pytest set-up: the backends under test come from GELULAB_BACKEND (all installed ones when unset).

A test that takes the `backend_name` argument runs once per selected backend; the `backend` fixture gives the
Backend object. An unknown name in GELULAB_BACKEND stops the session at once with the list of valid names.
"""
from __future__ import annotations

import importlib
import os
import sys

import pytest

os.environ.setdefault("GELULAB_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GELULAB_KERNEL_COMPILE", "wait")  # the suite measures the compiled kernels themselves

from gelulab.backends import BackendUnavailable, get_backend, reproducible, selected_backends
from gelulab.core import config

try:
    SELECTED = selected_backends()
except (ValueError, BackendUnavailable) as e:
    raise pytest.UsageError(f"GELULAB_BACKEND: {e}") from e

# The suite runs under the settings of the command line and the experiments (one thread per framework, JAX x64,
# no TF32), applied now to every selected backend, before any test can start a framework's runtime by itself
# (tests call jax.nn.gelu or tf.nn.gelu directly too). Importing gelulab and its activation API change none of
# them (tests/test_side_effects.py checks that in a fresh process).
reproducible(threads=config.threads(), backends=SELECTED)

# torch's backend before tensorflow's, whatever order GELULAB_BACKEND names them in: importing TF first can crash
# torch's import (Keras' backend/__init__.py imports torch first for the same reason). Only backends import
# frameworks, so this loads the torch backend module, not torch itself.
if "torch" in SELECTED and "tensorflow" in SELECTED:
    importlib.import_module("gelulab.backends.torch.activations")


def gelulab_argv(sigint: str) -> list[str]:
    """The argv of `python -m gelulab` started with a known SIGINT disposition, whatever pytest's own is:
    "terminal" (KeyboardInterrupt, as in a shell's foreground) or "background" (ignored, as a shell leaves it for
    a command a script starts with `&`, and as a child inherits it). No preexec_fn: pytest runs framework
    threads."""
    handler = {"terminal": "signal.default_int_handler", "background": "signal.SIG_IGN"}[sigint]
    return [sys.executable, "-c",
            (f"import runpy, signal, sys; signal.signal(signal.SIGINT, {handler}); sys.argv[0] = 'gelulab'; "
             "runpy.run_module('gelulab', run_name='__main__', alter_sys=True)")]


def pytest_report_header(config):
    return f"gelulab backends under test: {', '.join(SELECTED)} (GELULAB_BACKEND={os.environ.get('GELULAB_BACKEND')!r})"


def pytest_generate_tests(metafunc):
    if "backend_name" in metafunc.fixturenames:
        metafunc.parametrize("backend_name", SELECTED)


@pytest.fixture
def backend(backend_name):
    return get_backend(backend_name)


# hypothesis: derandomized (the same examples on every run, CI or not, so `make test` is never flaky), fixed
# example budget, no deadline (first framework calls are slow). GELULAB_HYPOTHESIS=explore draws fresh examples.
from hypothesis import settings

settings.register_profile("ci", derandomize=True, max_examples=60, deadline=None)
settings.register_profile("explore", max_examples=300, deadline=None)
settings.load_profile("explore" if os.environ.get("GELULAB_HYPOTHESIS") == "explore" else "ci")

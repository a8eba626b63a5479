"""The interface contract: explicit modes, clear errors, dtype-preserving conversions, backend selection."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from gelulab.backends import BACKEND_NAMES, BackendUnavailable, get_backend, parse_backend_list
from gelulab.core.activations import ACTIVATIONS, check_mode
from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.plumbing import config


@pytest.mark.parametrize("bad", [True, False, None, "exact", "erf", "", 1])
def test_gelu_mode_must_be_an_explicit_string(bad, backend):
    with pytest.raises(ValueError, match="expected one of \\['none', 'tanh', 'sigmoid'\\]"):
        backend.gelu(backend.asarray(np.zeros(3)), approximate=bad)
    with pytest.raises(ValueError, match="not a GELU mode"):
        check_mode(bad)


def test_unknown_impl_order_mode_key(backend):
    x = backend.asarray(np.zeros(3))
    with pytest.raises(ValueError, match="impl='fast'"):
        backend.gelu(x, impl="fast")
    with pytest.raises(ValueError, match="order=3"):
        backend.function("gelu_none", order=3)
    with pytest.raises(ValueError, match="mode='graph'"):
        backend.function("gelu_none", mode="graph")
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        backend.function("swish")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_conversion_round_trip_keeps_dtype_and_values(dtype, backend):
    a = np.array([-2.5, -0.0, 0.0, 1.0, 3.0], dtype=DTYPES[dtype].np_dtype)
    x = backend.asarray(a)
    back = backend.to_numpy(x)
    assert back.dtype == a.dtype
    assert np.array_equal(back.astype(np.float64), a.astype(np.float64))
    for key in ACTIVATIONS:
        for impl in backend.impls(key):
            y = backend.to_numpy(backend.function(key, impl)(x))
            assert y.dtype == a.dtype and y.shape == a.shape, (key, impl, y.dtype)


def test_gelu_is_deterministic(backend):
    x = backend.asarray(np.linspace(-8, 8, 10001).astype(np.float32))
    for impl in backend.impls("gelu_none"):
        a = backend.to_numpy(backend.gelu(x, "none", impl))
        b = backend.to_numpy(backend.gelu(x, "none", impl))
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_backend_list_parsing():
    assert parse_backend_list(" torch, jax ,torch") == ["torch", "jax"]
    assert parse_backend_list("") is None
    with pytest.raises(ValueError, match="names no backend"):
        parse_backend_list(" , ")
    with pytest.raises(ValueError, match=re.escape(f"valid backends: {list(BACKEND_NAMES)}")):
        parse_backend_list("torch,nosuch")
    with pytest.raises(ValueError, match="unknown backend 'mxnet'"):
        get_backend("mxnet")


def test_missing_framework_names_install_command(monkeypatch):
    from gelulab import backends

    monkeypatch.setattr(backends, "installed_backends", lambda: ["numpy"])
    monkeypatch.setenv("GELULAB_BACKEND", "numpy,torch")
    with pytest.raises(BackendUnavailable, match="pip install -c constraints.txt -e '.\\[torch\\]'"):
        backends.selected_backends()


@pytest.mark.subprocess
def test_unknown_backend_stops_pytest_at_once():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "tests/test_metrics.py"],
        env={**os.environ, "GELULAB_BACKEND": "nosuch"}, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode != 0
    assert "valid backends" in proc.stdout + proc.stderr


def test_bad_environment_values(monkeypatch):
    monkeypatch.setenv("GELULAB_THREADS", "0")
    with pytest.raises(ValueError, match="GELULAB_THREADS='0'"):
        config.threads()
    monkeypatch.setenv("GELULAB_DEVICE", "quantum")
    with pytest.raises(ValueError, match="GELULAB_DEVICE='quantum'"):
        config.device()


def test_bfloat16_is_ml_dtypes():
    assert DTYPES["bfloat16"].np_dtype == np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("bad", [True, False, 1.0, 0.0, "1", None])
def test_order_must_be_an_int(bad, backend):
    # bools are ints in Python (True == 1) and 1.0 == 1: both would slip past a membership test
    with pytest.raises(ValueError, match=f"order={bad!r}; expected one of \\[0, 1, 2\\]"):
        backend.function("gelu_none", order=bad)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_zero_dimensional_array_stays_zero_dimensional(dtype, backend):
    a = np.array(-1.5, dtype=DTYPES[dtype].np_dtype)
    x = backend.asarray(a)
    back = backend.to_numpy(x)
    assert back.shape == () and back.dtype == a.dtype and float(back) == -1.5
    y = backend.to_numpy(backend.function("relu")(x))
    assert y.shape == () and float(y) == 0.0  # ReLU(-1.5) = max(-1.5, 0) = 0

"""`gelulab.reproducible`: the one call that changes framework-wide settings, for reproducible numbers.

Importing gelulab, `get_backend` and the activation API change no framework setting; the command line, the
experiments, the benchmarks and the test suite call `reproducible()` first, and a library user may too.
"""
from __future__ import annotations

import sys

from gelulab.backends import BACKEND_NAMES, REGISTRY, activations_module, apply_settings, capabilities
from gelulab.core.plumbing import settings as _settings
from gelulab.core.plumbing.settings import Settings


def reproducible(threads: int | None = 1, *, x64: bool | None = True, tf32: bool | None = False,
                 backends=None) -> dict:
    """Set the framework-wide settings gelulab's experiments run under, in this process, and return what was set.

    threads (default 1; None leaves each framework's own): torch.set_num_threads(threads); TensorFlow's intra-op
    and inter-op thread pools (tf.config.threading.set_intra_op_parallelism_threads / inter_op); JAX's XLA CPU
    client through the environment variable XLA_FLAGS (`--xla_cpu_multi_thread_eigen=false|true
    intra_op_parallelism_threads=N`, replacing those two flags if present). TensorFlow's pools and XLA_FLAGS take
    effect only before the framework's runtime starts (TF: its first op or device query; JAX: its first
    computation or jax.devices()); called later with another count, a RuntimeWarning says so, nothing changes,
    and the backend's threads() reports "applied": False. numpy's elementwise code runs on one thread.
    x64 (default True; None leaves it): JAX's `jax_enable_x64` (float64 arrays exist, and a Python float becomes
    float64 in jnp.array). Without it gelulab's JAX backend refuses float64 arrays with an error naming the setting;
    its float32 formulas widen to float64 in a thread-local scope either way.
    tf32 (default False; None leaves them): False computes float32 matmuls and convolutions in full float32:
    torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 False, TensorFlow's
    tf.config.experimental.enable_tensor_float_32_execution(False), JAX's jax_default_matmul_precision "highest";
    True turns TF32 on in torch and TensorFlow and sets JAX's default precision back to None (its default).
    backends: names to apply the settings to now (importing their frameworks); by default the backends whose
    framework is already imported in this process or already loaded by gelulab. In every case each other backend
    gets the settings when gelulab first loads it (get_backend), before its runtime starts, for the rest of the
    process; a later call replaces them.

    Returns {backend: {setting: value set}} for the backends configured now. Raises ValueError for a bad value
    (naming it) or an unknown backend name, BackendUnavailable for a named backend whose framework is missing.
    """
    requested = Settings(threads=threads, x64=x64, tf32=tf32)
    names = [capabilities(n).name for n in ([backends] if isinstance(backends, str) else backends or ())]
    now = set(names)
    for name in BACKEND_NAMES:
        if f"gelulab.backends.{name}.activations" in sys.modules or REGISTRY[name].package in sys.modules:
            now.add(name)
    _settings.record(requested)
    done = {}
    for name in BACKEND_NAMES:  # canonical order: torch before tensorflow
        if name in now:
            done[name] = apply_settings(name, activations_module(name, apply=False), requested)
    return done

"""JAX backend: jax.nn builtins, jax.vjp autodiff, jax.jit.

builtin: jax.nn.gelu(x, approximate=False|True) (its default is approximate=True, the tanh form; gelulab always
passes it, https://docs.jax.dev/en/latest/_autosummary/jax.nn.gelu.html) and jax.nn.relu; JAX has no
sigmoid-form GELU, so its builtin is x * jax.nn.sigmoid(1.702 * x).

Nothing here changes a JAX setting on import or use. float64 arrays need `jax_enable_x64` (off by default in JAX):
without it asarray/astype refuse float64 with an error naming the setting. gelulab's formulas widen float32 to
float64 inside `formula_scope()`, `jax.enable_x64(True)`, a thread-local scope restored on exit, so their results
are the same with x64 on or off.
"""
from __future__ import annotations

import os
import re
import warnings
from contextlib import nullcontext

import jax
import jax.numpy as jnp
import numpy as np

from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.numerics.formulas import NARROW_HALF_STEP, min_normal_lifted
from gelulab.core.parity.cpu_dispatch import xla_level

_PLATFORM = {"cpu": "cpu", "gpu": "gpu", "tpu": "tpu"}
_state = {"device": None, "threads_requested": None, "threads_applied": None}
_THREAD_FLAGS = re.compile(r"\s*(--xla_cpu_multi_thread_eigen=\S*|intra_op_parallelism_threads=\S*)")
X64_HINT = ("float64 needs JAX's jax_enable_x64 setting, which is off: call gelulab.reproducible() (x64=True) or "
            "jax.config.update('jax_enable_x64', True) before creating arrays")


def setup(device: str) -> None:
    """Pick the device arrays are placed on; raises RuntimeError when the platform is absent. This starts JAX's
    client for that platform (so XLA_FLAGS threads set afterwards no longer apply) and changes no setting."""
    try:
        _state["device"] = jax.devices(_PLATFORM[device])[0]
    except RuntimeError as e:
        raise RuntimeError(f"jax backend: no {device!r} device ({e})") from e


def _client_started() -> bool:
    from jax._src import xla_bridge  # JAX's own record of whether a backend client exists

    return bool(xla_bridge.backends_are_initialized())


def apply_settings(settings) -> dict:
    """Apply core.plumbing.settings.Settings to JAX (see gelulab.reproducible): XLA_FLAGS thread flags (only before the
    client starts; later, a different count gives a RuntimeWarning and is not applied), jax_enable_x64,
    jax_default_matmul_precision ("highest" when settings.tf32 is False). Returns {setting: value set}."""
    done = {}
    if settings.threads is not None:
        n = settings.threads
        flags = os.environ.get("XLA_FLAGS", "")
        _state["threads_requested"] = n
        if _client_started():
            current = threads()["intra_op"]
            _state["threads_applied"] = current == n
            if current != n:
                warnings.warn(f"gelulab.reproducible(threads={n}): JAX's CPU client has already started with "
                              f"XLA_FLAGS={flags!r}; XLA reads its thread flags only at start, so they are left as "
                              "they are. Call gelulab.reproducible() before the first JAX computation.",
                              RuntimeWarning, stacklevel=3)
        else:
            rest = _THREAD_FLAGS.sub("", flags).strip()
            os.environ["XLA_FLAGS"] = (f"{rest} --xla_cpu_multi_thread_eigen={'true' if n > 1 else 'false'} "
                                       f"intra_op_parallelism_threads={n}").strip()
            _state["threads_applied"] = True
            done["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
    if settings.x64 is not None:
        jax.config.update("jax_enable_x64", settings.x64)
        done["jax_enable_x64"] = settings.x64
    if settings.tf32 is not None:
        precision = None if settings.tf32 else "highest"
        jax.config.update("jax_default_matmul_precision", precision)
        done["jax_default_matmul_precision"] = precision
    return done


def versions() -> dict:
    """{"jax", "jaxlib", "flax", "optax": version strings}. Raises ImportError without flax or optax
    (core.plumbing.report.environment records it as not installed)."""
    import flax
    import jaxlib
    import optax

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__, "optax": optax.__version__}


def cpu_dispatch() -> str | None:
    """The ISA level XLA's CPU compiler targets (core.parity.cpu_dispatch.xla_level: the host's, capped by
    --xla_cpu_max_isa in XLA_FLAGS), None on a processor other than x86-64."""
    return xla_level()


def threads() -> dict:
    """XLA CPU threads, read from XLA_FLAGS: {"intra_op": int or None (XLA's default, one per core), "xla_flags":
    str, "requested": the count given to gelulab.reproducible or None, "applied": False when JAX's client had
    already started with another count}."""
    flags = os.environ.get("XLA_FLAGS", "")
    m = re.search(r"intra_op_parallelism_threads=(\d+)", flags)
    return {"intra_op": int(m.group(1)) if m else None, "xla_flags": flags,
            "requested": _state["threads_requested"], "applied": _state["threads_applied"]}


def x64_enabled() -> bool:
    """Whether jax_enable_x64 is on here (the global setting or a jax.enable_x64 scope)."""
    return bool(jax.config.jax_enable_x64)


def require_x64(what: str = "float64") -> None:
    """Raise ValueError naming jax_enable_x64 (and how to turn it on) unless it is on; `what` says what needs it."""
    if not x64_enabled():
        raise ValueError(f"{what}: {X64_HINT}")


def formula_scope():
    """jax.enable_x64(True) while x64 is off (thread-local, restored on exit), so a formula's float64
    intermediates are float64; nullcontext() when x64 is on. Verified: value, first and second derivative, eager
    and jit, float32/bfloat16/float16, bit for bit the same as with x64 on globally, also under a caller's own
    jax.jit or jax.grad."""
    return nullcontext() if x64_enabled() else jax.enable_x64(True)


def jax_device():
    """The jax.Device arrays are placed on."""
    return _state["device"] or jax.devices("cpu")[0]


def asarray(a: np.ndarray, device: str):
    """numpy array (any float dtype, any shape) -> jax.Array of the same dtype and shape on the device chosen in
    setup() (`device` is that same name; placement uses jax_device()). Raises ValueError for float64 while
    jax_enable_x64 is off (JAX would silently make it float32)."""
    a = np.asarray(a)
    if a.dtype == np.float64:
        require_x64("a float64 array")
    return jax.device_put(a, jax_device())


def to_numpy(x) -> np.ndarray:
    """jax.Array -> numpy array of the same dtype and shape, copied to the host."""
    return np.asarray(jax.device_get(x))


# ArrayOps


def where(c, a, b):
    """jnp.where(c, a, b), elementwise with broadcasting."""
    return jnp.where(c, a, b)


def astype(x, name: str):
    """x cast to dtype `name` ("float64", "float32", "bfloat16", "float16"); ValueError for another, or for
    float64 while jax_enable_x64 is off (outside formula_scope). float64 to float32 or bfloat16 rounds as IEEE does
    next to the smallest normal, where XLA's convert flushes (core.numerics.formulas.min_normal_lifted)."""
    dtype = get_dtype(name)
    if dtype.name == "float64":
        require_x64("a cast to float64")
    if x.dtype == jnp.float64 and dtype.name in NARROW_HALF_STEP:
        x = min_normal_lifted(jnp.where, x, dtype.name)
    return x.astype(dtype.np_dtype)


def dtype_name(x) -> str:
    """The gelulab dtype name of a jax.Array ("float64", "float32", "bfloat16", "float16")."""
    return get_dtype(x.dtype).name


def wide(name: str) -> str:
    """The dtype gelulab's formulas compute `name` in (core.numerics.dtypes DType.wide), except float32 on a TPU, which
    has no float64 and stays float32."""
    if name == "float32" and jax_device().platform == "tpu":
        return "float32"  # TPUs have no float64: float32 inputs are computed in float32 there
    return get_dtype(name).wide


erfc = jax.lax.erfc
exp = jnp.exp
sigmoid = jax.nn.sigmoid

def builtin(activation):
    """The framework's own function for a catalogue entry: its `builtins["jax"]` descriptor
    (core.activations.Call / TimesX / Expression), resolved here; None where jax has none."""
    return activation.builtin("jax")


def kernel(activation):
    """gelulab's float32 kernel for a catalogue entry (backends/jax/kernels.py), or None where there is none.
    It takes float32, bfloat16 and float16 arrays; Backend routes float64 to the formula."""
    if activation.kernel is None:
        return None
    from gelulab.backends.jax import kernels

    return kernels.kernel(activation.key)


def derivative(fn, activation):
    """Elementwise derivative through jax.vjp with a cotangent of ones (apply twice for f'')."""

    def d(x):
        out, vjp = jax.vjp(fn, x)
        return vjp(jnp.ones_like(out))[0]

    return d


def with_derivatives(f0, f1, f2):
    """f0 with jvp t * f1(x), and f1 with jvp t * f2(x) (jax.custom_jvp; reverse mode transposes them), so
    jax.grad, jax.vjp and jax.jvp of f0 run f1 and f2, to second order. XLA's CPU runtime flushes subnormals, and
    reverse mode through e^w passes the cotangent e^w * (d f / d e^w), of the size of f itself: where f is just below
    the smallest normal and f' is not, autodiff returns 0 (core.numerics.formulas' float64 tails). f0, f1, f2: functions
    of one jax.Array returning an array of its dtype and shape. The returned function's attribute `d1` is f1 with its
    rule (backends/jax/kernels.py builds its kernels the same way)."""
    d1 = _with_jvp(f1, f2)
    f = _with_jvp(f0, d1)
    f.d1 = d1
    return f


def _with_jvp(g, dg):
    """g as a jax.custom_jvp whose jvp at x along t is t * dg(x)."""

    @jax.custom_jvp
    def h(x):
        return g(x)

    @h.defjvp
    def h_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return h(x), t * dg(x)

    return h


def compile(fn):
    """jax.jit (retraces per shape and dtype)."""
    return jax.jit(fn)

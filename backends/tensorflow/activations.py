"""TensorFlow backend: tf.nn builtins, tf.GradientTape autodiff, tf.function(jit_compile=True) (XLA).

builtin: tf.nn.gelu(x, approximate=False|True) (a bool: the string "none" is truthy and gives tanh,
https://www.tensorflow.org/api_docs/python/tf/nn/gelu) and tf.nn.relu; TF has no sigmoid-form GELU, so its builtin
is x * tf.sigmoid(1.702 * x).

Nothing here changes a TensorFlow setting on import or use: threads and TF32 are set by gelulab.reproducible
(apply_settings). setup() lists the devices, which starts TF's runtime: thread counts must be set before it.
"""
from __future__ import annotations

import warnings
from contextlib import nullcontext

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record  # could_possibly_record: whether any tape or accumulator records

from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.numerics.formulas import NARROW_HALF_STEP, min_normal_lifted
from gelulab.core.parity.cpu_dispatch import xla_level

_TF = {"float64": tf.float64, "float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}
_NAMES = {v: k for k, v in _TF.items()}
_DEVICE = {"cpu": "/CPU:0", "gpu": "/GPU:0", "tpu": "/TPU:0"}
_state = {"device": "/CPU:0", "threads_requested": None, "threads_applied": None}


def setup(device: str) -> None:
    """Check the device ("cpu", "gpu", "tpu") and place tensors there; raises RuntimeError when it is absent.
    Listing the devices starts TF's runtime (thread counts set afterwards no longer apply); no setting changes."""
    kind = {"cpu": "CPU", "gpu": "GPU", "tpu": "TPU"}[device]
    if not tf.config.list_logical_devices(kind):
        raise RuntimeError(f"tensorflow backend: no {device!r} device")
    _state["device"] = _DEVICE[device]


def apply_settings(settings) -> dict:
    """Apply core.plumbing.settings.Settings to TensorFlow (see gelulab.reproducible): intra-op and inter-op thread
    pools (tf.config.threading; only before TF's runtime starts: later, a different count gives a RuntimeWarning and the
    runtime keeps its own, which threads() reports with "applied": False) and
    tf.config.experimental.enable_tensor_float_32_execution(settings.tf32). Returns {setting: value set}."""
    done = {}
    if settings.threads is not None:
        n = settings.threads
        _state["threads_requested"] = n
        try:
            tf.config.threading.set_intra_op_parallelism_threads(n)
            tf.config.threading.set_inter_op_parallelism_threads(n)
            _state["threads_applied"] = True
            done["intra_op"] = done["inter_op"] = n
        except RuntimeError:  # runtime already initialised: the threads are those it started with
            _state["threads_applied"] = False
            warnings.warn(f"gelulab.reproducible(threads={n}): TensorFlow's runtime has already started with "
                          f"intra_op={tf.config.threading.get_intra_op_parallelism_threads()}, inter_op="
                          f"{tf.config.threading.get_inter_op_parallelism_threads()} (0: one per core); its thread "
                          "pools cannot change now. Call gelulab.reproducible() before the first TensorFlow op.",
                          RuntimeWarning, stacklevel=3)
    if settings.tf32 is not None:
        tf.config.experimental.enable_tensor_float_32_execution(settings.tf32)
        done["tensor_float_32_execution"] = settings.tf32
    return done


def formula_scope():
    """No scope is needed: TensorFlow computes float64 whatever its settings (contextlib.nullcontext())."""
    return nullcontext()


def versions() -> dict:
    """{"tensorflow": version, "keras": version} (version strings). Raises ImportError without keras."""
    import keras

    return {"tensorflow": tf.__version__, "keras": keras.__version__}


def cpu_dispatch() -> str | None:
    """The ISA level XLA targets in TensorFlow's compiled mode (core.parity.cpu_dispatch.xla_level; TF's eager kernels
    are built into its wheel), None on a processor other than x86-64."""
    return xla_level()


def threads() -> dict:
    """TensorFlow's thread counts in force: {"intra_op": int, "inter_op": int (0: TF's default, one per core),
    "requested": the count given to gelulab.reproducible or None, "applied": False when TF's runtime had already
    started and the request could not take effect}."""
    return {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
            "requested": _state["threads_requested"], "applied": _state["threads_applied"]}


def tf_device() -> str:
    """The TF device string in use ("/CPU:0", "/GPU:0")."""
    return _state["device"]


def asarray(a: np.ndarray, device: str):
    """numpy array (any float dtype, any shape) -> tf.Tensor of the same dtype and shape placed on `device`
    ("cpu", "gpu", "tpu")."""
    with tf.device(_DEVICE[device]):
        return tf.identity(tf.constant(np.asarray(a)))


def to_numpy(x) -> np.ndarray:
    """tf.Tensor -> numpy array of the same dtype and shape on the host."""
    return x.numpy()


# ArrayOps


def _const(v, dtype):
    # via numpy: TF's eager cache of Python-scalar constants is keyed by value, so once 0.0 was converted,
    # tf.constant(-0.0) returns +0.0 (measured on 2.21); a numpy scalar bypasses that cache.
    return tf.constant(np.array(v, dtype=dtype.as_numpy_dtype))


def where(c, a, b):
    """tf.where(c, a, b) with broadcasting; a Python-scalar branch becomes a constant of the other branch's dtype
    (tf.where does not promote)."""
    ref = b if tf.is_tensor(b) else a
    a = a if tf.is_tensor(a) else _const(a, ref.dtype)
    b = b if tf.is_tensor(b) else _const(b, ref.dtype)
    return tf.where(c, a, b)


def astype(x, name: str):
    """x cast to dtype `name` ("float64", "float32", "bfloat16", "float16") with tf.cast; ValueError for another.
    float64 to float32 or bfloat16 rounds as IEEE does next to the smallest normal, where TensorFlow's cast (eager
    and XLA) flushes (core.numerics.formulas.min_normal_lifted)."""
    name = get_dtype(name).name
    if x.dtype == tf.float64 and name in NARROW_HALF_STEP:
        x = min_normal_lifted(tf.where, x, name)
    return tf.cast(x, _TF[name])


def dtype_name(x) -> str:
    """The gelulab dtype name of a tf.Tensor ("float64", "float32", "bfloat16", "float16"); KeyError for
    another TF dtype."""
    return _NAMES[x.dtype]


def wide(name: str) -> str:
    """The dtype gelulab's formulas compute `name` in (core.numerics.dtypes DType.wide: float16 -> float32,
    bfloat16/float32/float64 -> float64)."""
    return get_dtype(name).wide


erfc = tf.math.erfc
exp = tf.math.exp
sigmoid = tf.math.sigmoid

def builtin(activation):
    """The framework's own function for a catalogue entry: its `builtins["tensorflow"]` descriptor
    (core.activations.Call / TimesX / Expression), resolved here; None where tensorflow has none."""
    return activation.builtin("tensorflow")


def kernel(activation):
    """gelulab's float32 kernel for a catalogue entry (backends/tensorflow/kernels.py), or None where there is none.
    It takes float32, bfloat16 and float16 arrays; Backend routes float64 to the formula."""
    if activation.kernel is None:
        return None
    from gelulab.backends.tensorflow import kernels

    return kernels.kernel(activation.key)


def derivative(fn, activation):
    """Elementwise derivative through tf.GradientTape with output_gradients of ones (nest for f'')."""

    def d(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        g = tape.gradient(y, x, output_gradients=tf.ones_like(y))
        return tf.zeros_like(x) if g is None else g

    return d


def with_derivatives(f0, f1, f2):
    """f0 with gradient g * f1(x), and f1 with gradient g * f2(x) (tf.custom_gradient, nested), so nested
    GradientTapes run f1 and f2 to second order. TensorFlow's CPU kernels and XLA flush subnormals, and the
    gradient through e^w passes a cotangent of the size of f itself: where f is just below the smallest normal and
    f' is not, autodiff returns 0 (core.numerics.formulas' float64 tails). f0, f1, f2: functions of one tf.Tensor
    returning a tensor of its dtype and shape.

    Each of f0, f1, f2 is called on tf.stop_gradient(x): the custom gradient is the derivative, so no tape needs to
    record their ops, and a tape that records an XLA tf.function call makes it keep every intermediate for its own
    gradient (a tape-watched Keras MLP forward and backward of the float32 kernel: 5.3 ms, 2.2 ms without; measured
    on 128 x 1024 inputs). The tapes still see f and f' as operations of x, so nested tapes reach f''. In eager
    mode with no GradientTape or ForwardAccumulator recording, f0 is called directly (tf.custom_gradient's own
    bookkeeping cost about 110 us a call, measured on 8 floats); a traced function always gets the custom gradient,
    which tf.gradients may ask for later."""

    @tf.custom_gradient
    def d1(x):
        def grad(g):
            return g * f2(tf.stop_gradient(x))

        return f1(tf.stop_gradient(x)), grad

    @tf.custom_gradient
    def f(x):
        def grad(g):
            return g * d1(x)

        return f0(tf.stop_gradient(x)), grad

    def call(x):
        if tf.executing_eagerly() and not record.could_possibly_record():
            return f0(tf.convert_to_tensor(x))  # a tf.Variable is read once
        return f(x)

    return call


def compile(fn):
    """tf.function with XLA (jit_compile=True); retraces per shape and dtype. autograph=False: gelulab's functions
    have no Python control flow on tensors, so autograph's source conversion would only cost time (the traced
    graphs are the same op for op, checked for every catalogue entry, impl, dtype and order; tracing the 60 formula
    groups of the parity matrix in a fresh process took 3.5 s of CPU without it and 5.2 s with it, measured on
    TF 2.21)."""
    return tf.function(fn, jit_compile=True, autograph=False)

"""The TensorFlow backend: tf.nn builtins, tf.GradientTape autodiff, tf.function(jit_compile=True) (XLA); Keras
for the native training regime. Its modules implement the Protocols of core.contracts.contract."""
import sys

from gelulab.core.contracts.contract import Capabilities

CAPABILITIES = Capabilities(
    name="tensorflow", package="tensorflow", extra="tensorflow", modes=("eager", "compiled"),
    devices=("cpu", "gpu", "tpu"), autodiff=True, thread_control=("intra_op", "inter_op"),
    modules=("activations", "kernels", "bench", "bert", "moons", "subjects"), dispatcher="xla",
    dtypes=("float64", "float32", "bfloat16", "float16"), array_type="tf.Tensor or tf.Variable",
    eager_kernels_compile=True, tools=("probe", "surgery", "audit", "model_bench"), layers="keras",
    # forced with XLA_FLAGS=--xla_cpu_max_isa on an Intel Xeon (AVX-512) by `make test-dispatch`
    measured_dispatch=("sse4_2", "avx2", "avx512"),
    # TensorFlow sets flush-to-zero / denormals-are-zero in its CPU kernels and in XLA
    flushes_subnormals=("float64", "float32", "bfloat16"),
)


def array_dtype(x) -> str | None:
    """The dtype name of a tf.Tensor (symbolic ones inside tf.function included) or tf.Variable, None for anything
    else or when TensorFlow is not imported."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "is_tensor") and (tf.is_tensor(x) or isinstance(x, tf.Variable)):
        return x.dtype.name
    return None


def load_activations():
    """backends/tensorflow/activations.py (imports TensorFlow)."""
    from gelulab.backends.tensorflow import activations

    return activations

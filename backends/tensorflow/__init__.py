"""The TensorFlow backend: tf.nn builtins, tf.GradientTape autodiff, tf.function(jit_compile=True) (XLA); Keras
for the native training regime. Its modules implement the Protocols of core.contract."""
from gelulab.core.contract import Capabilities

CAPABILITIES = Capabilities(
    name="tensorflow", package="tensorflow", extra="tensorflow", modes=("eager", "compiled"),
    devices=("cpu", "gpu", "tpu"), autodiff=True, thread_control=("intra_op", "inter_op"),
    modules=("activations", "bench", "bert", "moons", "subjects"), dispatcher="xla",
)

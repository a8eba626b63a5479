"""The numpy backend: float64 reference-grade arithmetic on the host; closed-form derivatives, no autodiff, no
compiler. Its modules implement the Protocols of core.contract."""
from gelulab.core.contract import Capabilities

CAPABILITIES = Capabilities(
    name="numpy", package="numpy", extra=None, modes=("eager",), devices=("cpu",), autodiff=False,
    thread_control=(), modules=("activations", "bench", "bert"), dispatcher="numpy",
)

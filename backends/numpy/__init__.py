"""The numpy backend: float64 reference-grade arithmetic on the host; closed-form derivatives, no autodiff, no
compiler. Its modules implement the Protocols of core.contracts.contract."""
import numpy as np

from gelulab.core.contracts.contract import Capabilities

CAPABILITIES = Capabilities(
    name="numpy", package="numpy", extra=None, modes=("eager",), devices=("cpu",), autodiff=False,
    thread_control=(), modules=("activations", "kernels", "bench", "bert"), dispatcher="numpy",
    dtypes=("float64", "float32", "bfloat16", "float16"), array_type="numpy.ndarray",
    tools=("probe",),
    # forced with NPY_DISABLE_CPU_FEATURES on an Intel Xeon (AVX-512) by `make test-dispatch`
    measured_dispatch=("x86_v2", "x86_v3", "x86_v4", "avx512_icl", "avx512_spr"),
)


def array_dtype(x) -> str | None:
    """The dtype name of a numpy array or numpy scalar, None for anything else."""
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype.name
    return None


def load_activations():
    """backends/numpy/activations.py."""
    from gelulab.backends.numpy import activations

    return activations

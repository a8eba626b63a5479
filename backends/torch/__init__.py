"""The PyTorch backend: torch.nn.functional builtins, torch.func autodiff, torch.compile (inductor). Its modules
implement the Protocols of core.contracts.contract."""
import sys

from gelulab.core.contracts.contract import Capabilities

CAPABILITIES = Capabilities(
    name="torch", package="torch", extra="torch", modes=("eager", "compiled"), devices=("cpu", "gpu"),
    autodiff=True, thread_control=("intra_op",),
    modules=("activations", "kernels", "bench", "bert", "moons", "subjects", "hf"), dispatcher="aten",
    dtypes=("float64", "float32", "bfloat16", "float16"), array_type="torch.Tensor", eager_kernels_compile=True,
    tools=("probe", "surgery", "audit", "model_bench", "warmup"), layers="torch",
    # forced with ATEN_CPU_CAPABILITY on an Intel Xeon (AVX-512) by `make test-dispatch`
    measured_dispatch=("default", "avx2", "avx512"),
)


def array_dtype(x) -> str | None:
    """The dtype name of a torch.Tensor ("float32"), None for anything else or when torch is not imported."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return str(x.dtype).removeprefix("torch.")
    return None


def load_activations():
    """backends/torch/activations.py (imports torch)."""
    from gelulab.backends.torch import activations

    return activations

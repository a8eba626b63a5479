"""The PyTorch backend: torch.nn.functional builtins, torch.func autodiff, torch.compile (inductor). Its modules
implement the Protocols of core.contract."""
from gelulab.core.contract import Capabilities

CAPABILITIES = Capabilities(
    name="torch", package="torch", extra="torch", modes=("eager", "compiled"), devices=("cpu", "gpu"),
    autodiff=True, thread_control=("intra_op",),
    modules=("activations", "bench", "bert", "moons", "subjects", "hf"), dispatcher="aten",
)

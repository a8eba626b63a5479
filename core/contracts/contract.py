"""The backend contract as code: what each module of `backends/<name>/` provides, and the capability record.

A backend is a folder `backends/<name>/` with
  * `__init__.py`, the Package Protocol: `CAPABILITIES`, a `Capabilities` record, `array_dtype(x)` (recognises
    the framework's own arrays) and `load_activations()`, all without importing the framework (so the registry in
    `backends/__init__.py` can list every backend, with its install command, on a machine that has none of the
    frameworks, and gelulab.api can dispatch on an array's type without importing a framework the caller has not);
  * one module per entry of `Capabilities.modules`, each implementing the Protocol of `PROTOCOLS`:
      activations.py  ActivationOps (conversion, the array primitives of core.numerics.formulas, builtins, kernels,
                      autodiff, compiler, versions, threads, settings)
      kernels.py      KernelOps: gelulab's float32 kernels (core.numerics.kernels) as the framework's callables, and the
                      kernel namespace they are written over (bit operations included); optional
      bench.py        BenchHooks (optional) (synchronisation, device input, copy, compile counts; used by benchmarks/)
      bert.py         Encoder, or TrainableEncoder where the backend has autodiff (experiments/swap)
      moons.py        Trainer, only where the backend has autodiff (experiments/moons, benchmarks/trainstep.py)
      subjects.py     Subjects: the framework's own activation callables, each under the expression that gives it
                      (benchmarks/identify.py times gelulab.identify on them)
      hf.py           PretrainedBert: the transformers BertModel of the framework, loaded from a local folder,
                      encoded and fine-tuned (experiments/swap; needs autodiff)

Only activations.py is required; what a backend offers beyond it (dtypes, kernels, compilation, autodiff, devices)
its record says, and the parity matrix, the tests and the commands follow the record.

The Protocols are `typing.runtime_checkable`: `isinstance(module, ActivationOps)` checks that a module defines
every name (not their signatures); tests/test_backend_contract.py checks every installed backend against them and
their behaviour against its record. Modules implement the methods as plain functions (without `self`).
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.parity.cpu_dispatch import DISPATCHERS
from gelulab.core.plumbing.config import DEVICES

MODES = ("eager", "compiled")


@runtime_checkable
class ArrayOps(Protocol):
    """The array primitives gelulab's formulas (core.numerics.formulas) are written over; `x` is a framework array."""

    def where(self, c, a, b):
        """Elementwise c ? a : b with broadcasting; a Python-scalar branch takes the other branch's dtype."""

    def astype(self, x, name: str):
        """x cast to dtype `name` ("float64", "float32", "bfloat16", "float16"); ValueError for another."""

    def dtype_name(self, x) -> str:
        """gelulab's dtype name of x ("float64", "float32", "bfloat16", "float16")."""

    def wide(self, name: str) -> str:
        """The dtype the formulas compute dtype `name` in (core.numerics.dtypes DType.wide, or narrower where the device
        lacks it)."""

    def erfc(self, x):
        """Complementary error function 1 - erf(x), elementwise, in x's dtype."""

    def exp(self, x):
        """e**x elementwise, in x's dtype."""

    def sigmoid(self, x):
        """Logistic sigmoid 1 / (1 + e**-x) elementwise, in x's dtype."""


@runtime_checkable
class ActivationOps(ArrayOps, Protocol):
    """`backends/<name>/activations.py`: everything `core.contracts.interface.Backend` needs from one framework."""

    def setup(self, device: str) -> None:
        """Select `device` ("cpu", "gpu", "tpu") for the arrays asarray creates; RuntimeError when it is absent.
        Changes no framework-wide setting."""

    def apply_settings(self, settings) -> dict:
        """Apply a core.plumbing.settings.Settings (threads, x64, TF32) to the framework, process-wide; returns what was
        set ({setting: value}). Only `gelulab.reproducible` calls it."""

    def threads(self) -> dict:
        """The thread counts in force, {"intra_op": int or None, ...} (recorded in every report)."""

    def asarray(self, a: np.ndarray, device: str):
        """numpy array -> framework array of the same dtype and shape on `device`; ValueError naming the dtype for
        one the record's `dtypes` leaves out."""

    def to_numpy(self, x) -> np.ndarray:
        """Framework array -> numpy array of the same dtype and shape, on the host."""

    def formula_scope(self) -> AbstractContextManager:
        """The context gelulab's formulas run in (a thread-local scope, restored on exit; e.g. JAX's float64
        intermediates with x64 off), contextlib.nullcontext() where none is needed."""

    def builtin(self, activation) -> Callable | None:
        """The framework's own function for a catalogue entry, None where it has none."""

    def kernel(self, activation) -> Callable | None:
        """gelulab's float32 kernel for a catalogue entry (the KernelOps module's `kernel(activation.key)`: float32
        and the record's narrower dtypes in, the same dtype out, differentiable by `derivative`), None where the
        entry has no kernel or the backend no kernels module. Backend routes float64 to the formula."""

    def derivative(self, fn: Callable, activation) -> Callable:
        """The elementwise derivative of fn (autodiff with a cotangent of ones, or a closed form)."""

    def with_derivatives(self, f0: Callable, f1: Callable, f2: Callable) -> Callable:
        """f0 with f1 as its derivative and f2 as f1's (the framework's custom-derivative rule), where autodiff of
        f0 would lose accuracy on this framework; f0 unchanged where it would not. gelulab's float64 formula takes
        its closed-form derivatives this way on XLA, whose flush-to-zero loses the subnormal cotangents of
        reverse mode (core.contracts.interface.implementation)."""

    def compile(self, fn: Callable) -> Callable:
        """fn compiled by the framework's compiler; ValueError where the backend has no compiled mode."""

    def versions(self) -> dict:
        """{package: version string} of the framework packages used."""

    def cpu_dispatch(self) -> str | None:
        """The CPU kernel level the framework runs at in this process (a level of core.parity.cpu_dispatch.levels of the
        backend's dispatcher, e.g. "avx2"), None where it cannot be told."""


@runtime_checkable
class KernelNamespace(Protocol):
    """The array operations core.numerics.kernels is written over (besides + - * / and comparisons), on float32
    arrays."""

    def where(self, c, a, b):
        """Elementwise c ? a : b, float32 (a Python-float branch becomes float32)."""

    def abs(self, x):
        """|x| elementwise."""

    def rint(self, x):
        """Round to the nearest integer, ties to even, float32 in and out."""

    def keep_bits(self, x, bits: int):
        """A head h of x with at most `bits` significant bits such that x - h is exact and |x - h| < 2^(1-bits) |x|:
        the low 24 - bits mantissa bits cleared by a mask, or Dekker's split t - (t - x), t = (2^(24-bits) + 1) x,
        where products are never contracted into FMAs (for |x| < 2^16, the values the kernels split)."""

    def pow2(self, k):
        """2**k for integer-valued float32 k in [-126, 127], exact (from its exponent bits, or an exact exp2)."""

    def bits_equal(self, x, u: int):
        """Whether x has the bit pattern u (an int; the kernels pass finite nonzero patterns only), elementwise."""


@runtime_checkable
class KernelOps(Protocol):
    """`backends/<name>/kernels.py`: gelulab's float32 kernels (core.numerics.kernels) in the framework's operations.
    Only a backend whose arrays can be reinterpreted bitwise (float32 <-> int32) has one (its record lists
    "kernels")."""

    NS: KernelNamespace
    """The kernel namespace core.numerics.kernels' functions take as `xp`."""

    def kernel(self, key: str) -> Callable:
        """The kernel of catalogue entry `key` (ValueError for an entry without one): float32, bfloat16 and float16
        arrays in (those of the record's dtypes), the same dtype out, with its own f' and f'' kernels."""


@runtime_checkable
class Package(Protocol):
    """`backends/<name>/__init__.py`: imports no framework."""

    CAPABILITIES: Capabilities
    """The backend's capability record."""

    def array_dtype(self, x) -> str | None:
        """The dtype name of x ("float32", "int64", ...) when x is this framework's array (tracers and variables
        included), None for anything else. Asks only a framework already imported (sys.modules), so it never
        imports one."""

    def load_activations(self):
        """The backend's activations module (importing the framework), by a plain import statement: torch.compile
        traces an import statement but refuses importlib.import_module."""


@runtime_checkable
class Trainer(Protocol):
    """`backends/<name>/moons.py`: trains the moons MLP from a core.contracts.training.TrainSpec (needs autodiff)."""

    def train(self, spec) -> Any:
        """Train the spec's seeds of one arm together; returns a core.contracts.training.TrainOutput."""

    def bench_step(self, spec, mode: str) -> tuple[Callable, Callable | None]:
        """(call, fn): call() runs one matched-regime training step; fn is the compiled function or None."""


@runtime_checkable
class Encoder(Protocol):
    """`backends/<name>/bert.py`: the BERT encoder forward pass from numpy weights (core.contracts.encoder)."""

    def to_framework(self, params: dict) -> dict:
        """numpy float32 weights -> the framework's arrays on the backend's device."""

    def encode(self, p: dict, ids, mask, config, activation) -> list:
        """Hidden states [embeddings, layer 1 .. L] as numpy float32 (B, T, H) arrays."""


@runtime_checkable
class TrainableEncoder(Encoder, Protocol):
    """An Encoder with autodiff: differentiable embeddings and the distillation fine-tune."""

    def embed(self, p: dict, ids, mask, config, activation):
        """Mean-pooled sentence embeddings as a framework array (differentiable in p)."""

    def finetune(self, p: dict, ids, mask, targets, batches, config, activation, lr: float, progress=None):
        """Fine-tune p toward `targets`; returns (params, losses)."""


@runtime_checkable
class BenchHooks(Protocol):
    """`backends/<name>/bench.py`: the hooks the benchmark's timer needs around a framework call."""

    def sync(self, y) -> None:
        """Block until y is computed on its device."""

    def device_input(self, backend, a: np.ndarray):
        """`a` on the backend's device, materialised before timing starts."""

    def copy(self, x):
        """A new buffer with x's contents on x's device (the reference copy)."""

    def fresh(self) -> None:
        """Reset compilation caches before a group of compiled cells."""

    def compile_stats(self, fn) -> dict:
        """{"compiles": int or None, ...}: compile counters, to detect recompilation."""

    def threads(self) -> dict:
        """The thread counts in force (the activations module's threads())."""


@runtime_checkable
class Subjects(Protocol):
    """`backends/<name>/subjects.py`: the activation callables of the framework (its own GELU, ReLU and SiLU
    functions and layers, those of libraries built on it, and formulas written in its operations) that
    `gelulab.identify` is measured on (benchmarks/identify.py)."""

    def subjects(self) -> dict[str, Callable]:
        """{expression: callable}, in a fixed order; each key is the Python expression giving its callable as
        `gelulab identify` reads it ("torch.nn.GELU('tanh')"). Callables of an optional library that is not
        installed (transformers, keras) are left out."""


@runtime_checkable
class PretrainedBert(Protocol):
    """`backends/<name>/hf.py`: the transformers BertModel of the framework from a local folder of pretrained
    weights (config.json, model.safetensors, offline: nothing is downloaded), as experiments/swap runs it beside
    gelulab's encoders. Models are CPU, float32, in eval mode (no dropout)."""

    def load(self, directory):
        """transformers.BertModel.from_pretrained(directory, local_files_only=True) in eval mode; OSError when
        the folder lacks the files, ImportError when transformers is not installed."""

    def describe(self, model) -> dict:
        """{"version": transformers' version, "torch_threads": int, "model": class name, "activation": qualified
        class name of the first layer's FFN activation}."""

    def hidden_states(self, model, ids, mask) -> list:
        """[embedding output, layer 1 .. layer L] for (B, T) int ids and 0/1 mask: numpy float32 (B, T, H)."""

    def finetune(self, model, ids, mask, targets, batches, lr: float, progress=None) -> list[float]:
        """Distil the encoder layers (embeddings and pooler frozen) toward `targets` ((N, H) unit vectors) with
        Adam; batches: (steps, batch) row indices of ids/mask; returns the loss per step (1 - mean cosine)."""


# the optional modules of backends/<name>/ that gelulab's tools call on a user's own callables and models, named in
# the record's `tools` (each imports its framework inside its functions only, and asks sys.modules whether it is
# loaded): "probe" (api.probe feeds identify's probe to the framework's callables), "surgery" (gelulab.swap replaces
# the activations of its models), "audit" (api.audit reads its models and files), "model_bench" (gelulab bench
# --model times its models)
TOOLS = ("probe", "surgery", "audit", "model_bench", "warmup")

PROTOCOLS = {"activations": ActivationOps, "kernels": KernelOps, "bench": BenchHooks, "bert": Encoder, "moons": Trainer,
             "subjects": Subjects, "hf": PretrainedBert}


@dataclass(frozen=True)
class Capabilities:
    """What one backend offers, declared in `backends/<name>/__init__.py` without importing its framework.

    name: the backend's name ("jax"); package: the framework's import name, probed to tell whether the backend is
    installed ("jax"); extra: the pyproject optional-dependency group that installs it ("jax"), None for a core
    dependency; modes: execution modes, ("eager",) or ("eager", "compiled"); devices: the devices it can run on
    (subset of core.plumbing.config.DEVICES); autodiff: whether derivatives come from the framework's autodiff (then it
    provides a moons Trainer and a TrainableEncoder; without it, no training); thread_control: the thread pools
    `gelulab.reproducible(threads=n)` sets ("intra_op", "inter_op"), () where the backend runs on one thread;
    modules: the contract modules the folder provides (keys of core.contracts.contract.PROTOCOLS); dispatcher: what
    picks the framework's CPU kernels by the processor's features (a key of core.parity.cpu_dispatch.DISPATCHERS:
    "aten", "xla", "numpy"), which known faults may depend on; dtypes: the gelulab dtypes its arrays can hold (some of
    core.numerics.dtypes.DTYPES, float32 and float64 always: the formulas compute in float64); no cell, test or command
    asks it for another; array_type: how messages name the framework's array type ("torch.Tensor");
    eager_kernels_compile: whether an eager call of a kernel compiles it first (TensorFlow: an XLA computation per
    shape and dtype; torch: the inductor loop under GELULAB_KERNEL_COMPILE=wait), so a test of it costs a compile
    (the suite marks such tests `compile`); default False; tools: the optional tool modules of the folder (some of
    TOOLS: "probe", "surgery", "audit", "model_bench", "warmup"), default (); layers: the module of gelulab.layers
    holding this backend's layers ("torch", "keras", "flax"), None where it has none; measured_dispatch: the CPU
    dispatch levels of its dispatcher at which its known faults were measured (forced by `make test-dispatch`): a fault
    row keyed by `dispatch` must hold at these levels and may or may not occur at another (core.parity.known_faults),
    default (); flushes_subnormals: the dtypes whose subnormal inputs and results the framework's CPU runtime flushes to
    zero (flush-to-zero / denormals-are-zero), which the parity tolerances accept there
    (core.parity.tolerances.overrides), default ().

    Raises ValueError on construction for a record that contradicts itself (unknown mode, device, module, tool or
    dtype, no activations module, no float32 or float64, a trainer or an hf module without autodiff, autodiff
    without a trainer, an unknown dispatcher, a flushed dtype it does not hold).
    """

    name: str
    package: str
    extra: str | None
    modes: tuple[str, ...]
    devices: tuple[str, ...]
    autodiff: bool
    thread_control: tuple[str, ...]
    modules: tuple[str, ...]
    dispatcher: str
    dtypes: tuple[str, ...]
    array_type: str
    eager_kernels_compile: bool = False
    tools: tuple[str, ...] = ()
    layers: str | None = None
    measured_dispatch: tuple[str, ...] = ()
    flushes_subnormals: tuple[str, ...] = ()

    def __post_init__(self):
        if self.dispatcher not in DISPATCHERS:
            raise ValueError(f"{self.name}: dispatcher={self.dispatcher!r}; expected one of {list(DISPATCHERS)}")
        if "eager" not in self.modes or set(self.modes) - set(MODES):
            raise ValueError(f"{self.name}: modes={self.modes!r}; expected 'eager' and optionally 'compiled'")
        if not self.devices or set(self.devices) - set(DEVICES):
            raise ValueError(f"{self.name}: devices={self.devices!r}; expected some of {list(DEVICES)}")
        if set(self.modules) - set(PROTOCOLS) or "activations" not in self.modules:
            raise ValueError(f"{self.name}: modules={self.modules!r}; expected 'activations' and some of "
                             f"{list(PROTOCOLS)}")
        if "hf" in self.modules and not self.autodiff:
            raise ValueError(f"{self.name}: the hf module fine-tunes a BertModel and needs autodiff "
                             f"(autodiff={self.autodiff}, modules={self.modules!r})")
        if ("moons" in self.modules) != self.autodiff:
            raise ValueError(f"{self.name}: a moons trainer needs autodiff and every backend with autodiff has one "
                             f"(autodiff={self.autodiff}, modules={self.modules!r})")
        if set(self.dtypes) - set(DTYPES) or not {"float32", "float64"} <= set(self.dtypes):
            raise ValueError(f"{self.name}: dtypes={self.dtypes!r}; expected 'float32', 'float64' and optionally "
                             f"some of {list(DTYPES)}")
        if set(self.tools) - set(TOOLS):
            raise ValueError(f"{self.name}: tools={self.tools!r}; expected some of {list(TOOLS)}")
        if set(self.flushes_subnormals) - set(self.dtypes):
            raise ValueError(f"{self.name}: flushes_subnormals={self.flushes_subnormals!r}; expected some of its "
                             f"dtypes {list(self.dtypes)}")
        if set(self.thread_control) - {"intra_op", "inter_op"}:
            raise ValueError(f"{self.name}: thread_control={self.thread_control!r}; expected some of "
                             "['intra_op', 'inter_op']")

    @property
    def kernels(self) -> bool:
        """Whether the backend has gelulab's float32 kernels (impl "kernel"; a kernels module)."""
        return "kernels" in self.modules

    @property
    def compiled(self) -> bool:
        """Whether the backend has a compiled mode (its framework's compiler)."""
        return "compiled" in self.modes

    @property
    def install_hint(self) -> str:
        """The command that installs this backend's framework from a checkout (pinned by constraints.txt)."""
        if self.extra is None:
            return "pip install -e ."
        return f"pip install -c constraints.txt -e '.[{self.extra}]'"

    def protocol(self, module: str) -> type:
        """The Protocol that module `module` of this backend implements (bert: TrainableEncoder with autodiff)."""
        if module not in self.modules:
            raise ValueError(f"backend {self.name!r} has no {module!r} module; it has {list(self.modules)}")
        if module == "bert" and self.autodiff:
            return TrainableEncoder
        return PROTOCOLS[module]

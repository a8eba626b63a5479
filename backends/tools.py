"""The tool modules of the backends, and whether a backend's framework is loaded.

Each backend's record lists the optional modules of its folder that gelulab's tools call on a user's own callables
and models (Capabilities.tools; core.contracts.contract.TOOLS): `probe` (api.probe), `surgery` (api.surgery),
`audit` (api.audit), `model_bench` (benchmarks.model), `warmup` (`gelulab warmup`). A tool module imports its
framework inside its functions only, so importing it imports no framework; api reaches the frameworks through them
alone, and asks whether the caller has imported a framework through `loaded` (gelulab never imports a framework the
caller has not imported).

The interface of each tool module:
  probe: MODULES (top-level module names whose callables take this framework's arrays: ("torch",
    "transformers")), ARRAY_KIND (how a message names one of its arrays: "torch tensor"), owner(fn) -> backend
    name or None (the framework whose arrays a model or layer object of its libraries takes, asking sys.modules
    only), native(a) (a numpy array as its array), as_numpy(y) -> numpy array or None (None: not its array),
    context() (the context a probe call runs in: torch.no_grad()), float64_note() -> str ("" where float64 is
    computed as asked; else why not); optionally FUNCTION_TYPES (class names of its function objects, which are
    functions rather than models: jax.jit's PjitFunction); NAMESPACES and ALIASES (the names of its framework a
    `gelulab identify` expression may use, and their short aliases: experiments/identify/expression.py).
  surgery: MODEL_TYPE ("a torch.nn.Module"), owns(model) -> bool, activation_module(obj) -> bool (an activation
    rather than a model), swap(model, choose, layer_for, impl) -> list of (path, was, was_class, now, now_class).
  audit: reads_path(path), reads_object(obj), read(source, options) (api.audit.READERS).
  model_bench: the models of `gelulab bench --model` (benchmarks.model); EXIT_SCRIPT and EXIT_ARMS (the
    process-exit script and the arms it is run with, benchmarks.first_call.process_exit); optionally SLOW_COMPILE
    (its compiler takes minutes: --quick leaves the compiled rows out) and FIRST_CALL_SCRIPT, FIRST_CALL_FRAMEWORK,
    FIRST_CALL_CACHE, FIRST_CALL_TRANSFORM (the first-call figures, benchmarks.first_call.measure).
  warmup: warmup(keys, device) -> list of files (builds, or loads where built, the kernel loops of catalogue
    entries `keys` ahead, so later processes run them from the first call), cache() -> the folder they are kept in.
"""
from __future__ import annotations

import importlib
import sys
from types import ModuleType

from gelulab.backends import REGISTRY, capabilities


def loaded(name: str) -> bool:
    """Whether backend `name`'s framework is imported in this process (its record's `package` is in sys.modules);
    imports nothing. Raises ValueError for an unknown name."""
    return capabilities(name).package in sys.modules


def with_tool(tool: str) -> tuple[str, ...]:
    """The backends whose record lists tool module `tool` ("probe", "surgery", "audit", "model_bench"), in the
    registry's order."""
    return tuple(name for name, caps in REGISTRY.items() if tool in caps.tools)


def tool(name: str, tool: str) -> ModuleType:
    """backends/<name>/<tool>.py (imports no framework). Raises ValueError when backend `name`'s record does not list
    `tool` (naming the backends that do)."""
    if tool not in capabilities(name).tools:
        raise ValueError(f"backend {name!r} has no {tool!r} module; the backends with one: {list(with_tool(tool))}")
    return importlib.import_module(f"gelulab.backends.{name}.{tool}")


"""An Array API library as one record: what gelulab needs to know of it to run its formulas over the library's
namespace (backends/array_api/ops.py, written once over any namespace of the Python Array API standard,
https://data-apis.org/array-api/). Imports no library: a backend package (`backends/<name>/__init__.py`, the
Package Protocol of core.contracts.contract) builds its record, capabilities and recogniser from it without
importing its framework.

A library joins gelulab as a backend folder with two short modules:
  __init__.py     LIBRARY = Library(...); CAPABILITIES = LIBRARY.capabilities(); array_dtype = LIBRARY.array_dtype;
                  load_activations() importing the folder's activations module by a plain import statement
  activations.py  globals().update(ArrayAPIOps(LIBRARY).functions())
plus its import and entry in `_PACKAGES` (backends/__init__.py) and its optional-dependency group in pyproject.toml.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType

from gelulab.core.contracts.contract import Capabilities


@dataclass(frozen=True)
class Library:
    """One Array API library as a gelulab backend.

    name: the backend's name ("array_api"); namespace: the import name of the library's Array API namespace
    ("array_api_strict", or array-api-compat's wrapper "array_api_compat.dask.array"), imported on first use only;
    package: the framework's import name, probed to tell whether the backend is installed; extra: the pyproject
    optional-dependency group that installs it; array_type: how messages name its array type ("dask.array.Array");
    array_class: the dotted import path of its array class, for a library whose arrays do not name their namespace
    (array-api-compat's wrappers); None where they do (`x.__array_namespace__()` is the namespace, the standard's
    rule); dtypes: the gelulab dtypes its namespace holds (float32 and float64 always; "float16" where it has one);
    devices: gelulab's device names it runs on ("cpu" is the namespace's default device); jit: the dotted import
    path of its compiler, a function fn -> compiled fn ("jax.jit"), None where it has none; compute: the method that
    computes a lazy array ("compute" for dask), None for an eager library; versions: the modules whose __version__
    each report records (the package first); dispatcher: what picks its CPU kernels (core.parity.cpu_dispatch; the
    libraries here compute with numpy).
    """

    name: str
    namespace: str
    package: str
    extra: str | None
    array_type: str
    array_class: str | None = None
    dtypes: tuple[str, ...] = ("float64", "float32")
    devices: tuple[str, ...] = ("cpu",)
    jit: str | None = None
    compute: str | None = None
    versions: tuple[str, ...] = ()
    dispatcher: str = "numpy"

    def capabilities(self) -> Capabilities:
        """The backend's Capabilities record: eager (and compiled with a jit), no autodiff (the catalogue's closed-form
        derivatives), one thread, an activations module only. ValueError as Capabilities for a record that
        contradicts itself."""
        return Capabilities(
            name=self.name, package=self.package, extra=self.extra,
            modes=("eager", "compiled") if self.jit else ("eager",), devices=self.devices, autodiff=False,
            thread_control=(), modules=("activations",), dispatcher=self.dispatcher, dtypes=self.dtypes,
            array_type=self.array_type,
        )

    def array_dtype(self, x) -> str | None:
        """The dtype name of an array of this library ("float32", "int64", "bool", ...), None for anything else or
        while the library is not imported (it is never imported here)."""
        if self.array_class is None:
            namespace = sys.modules.get(self.namespace)
            ask = getattr(x, "__array_namespace__", None)
            ours = namespace is not None and callable(ask) and not isinstance(x, type) and ask() is namespace
        else:
            module, _, name = self.array_class.rpartition(".")
            cls = getattr(sys.modules.get(module), name, None)
            ours = isinstance(cls, type) and isinstance(x, cls)
        return str(x.dtype).rpartition(".")[2] if ours else None

    def xp(self) -> ModuleType:
        """The library's Array API namespace (imports it; ImportError where it is not installed)."""
        return importlib.import_module(self.namespace)

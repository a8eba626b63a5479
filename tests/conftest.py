"""Shared pytest set-up: the backends under test come from GELULAB_BACKEND (all installed ones when unset).

A test that takes the `backend_name` argument runs once per selected backend; the `backend` fixture gives the
Backend object. An unknown name in GELULAB_BACKEND stops the session at once with the list of valid names.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import pytest

os.environ.setdefault("GELULAB_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GELULAB_KERNEL_COMPILE", "wait")  # the suite measures the compiled kernels themselves
# JAX's persistent compilation cache and the parity references' store (core.parity.reference_store), for the suite
# and the processes it starts, in a folder of the user's cache; not set where that folder cannot be written (JAX
# would warn on stderr, which tests of the command line read). Eager JAX compiles every primitive once per dtype
# and shape, about 400 small XLA programs for the eager parity cells alone, and a cache hit skips the XLA compile;
# its key holds the program, the jax/jaxlib versions and XLA_FLAGS, so a forced CPU level (--xla_cpu_max_isa) has
# entries of its own. gelulab itself sets none of this.
_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gelulab")
try:
    os.makedirs(_CACHE, exist_ok=True)
    _CACHE_OK = os.access(_CACHE, os.W_OK | os.X_OK)
except OSError:
    _CACHE_OK = False
# The suite's cache folder (~/.cache/gelulab), for tests that keep a build between sessions; None where it cannot be
# written.
CACHE = _CACHE if _CACHE_OK else None
if CACHE:
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(CACHE, "jax-compilation-cache-tests"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    os.environ.setdefault("GELULAB_REFERENCE_CACHE", os.path.join(CACHE, "reference-tests"))

from gelulab.backends import BackendUnavailable, capabilities, get_backend, reproducible, selected_backends
from gelulab.core.activations import ACTIVATIONS, get_activation
from gelulab.core.contracts.contract import PROTOCOLS
from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.plumbing import config

try:
    SELECTED = selected_backends()
except (ValueError, BackendUnavailable) as e:
    raise pytest.UsageError(f"GELULAB_BACKEND: {e}") from e

# The suite runs under the settings of the command line and the experiments (one thread per framework, JAX x64,
# no TF32), applied now to every selected backend, before any test can start a framework's runtime by itself
# (tests call jax.nn.gelu or tf.nn.gelu directly too). Importing gelulab and its activation API change none of
# them (tests/test_side_effects.py checks that in a fresh process).
reproducible(threads=config.threads(), backends=SELECTED)

# torch's backend before tensorflow's, whatever order GELULAB_BACKEND names them in: importing TF first can crash
# torch's import (Keras' backend/__init__.py imports torch first for the same reason). Only backends import
# frameworks, so this loads the torch backend module, not torch itself.
if "torch" in SELECTED and "tensorflow" in SELECTED:
    importlib.import_module("gelulab.backends.torch.activations")


def gelulab_argv(sigint: str) -> list[str]:
    """The argv of `python -m gelulab` started with a known SIGINT disposition, whatever pytest's own is:
    "terminal" (KeyboardInterrupt, as in a shell's foreground) or "background" (ignored, as a shell leaves it for
    a command a script starts with `&`, and as a child inherits it). No preexec_fn: pytest runs framework
    threads."""
    handler = {"terminal": "signal.default_int_handler", "background": "signal.SIG_IGN"}[sigint]
    return [sys.executable, "-c",
            (f"import runpy, signal, sys; signal.signal(signal.SIGINT, {handler}); sys.argv[0] = 'gelulab'; "
             "runpy.run_module('gelulab', run_name='__main__', alter_sys=True)")]


# Libraries that run on one backend's framework: Keras on TensorFlow (the backend gelulab gives Keras), Flax and
# Optax on JAX, transformers on torch. A framework itself belongs to the backend whose record names it as package.
COMPANIONS = {"keras": "tensorflow", "tf_keras": "tensorflow", "flax": "jax", "optax": "jax", "transformers": "torch"}
# Frameworks a selected one imports by itself: Keras 3 imports JAX whenever JAX is installed.
_PULLED_IN = {"tensorflow": ("jax", "jaxlib")}


def backend_of(framework: str) -> str:
    """The gelulab backend a framework or companion library runs under ("keras" -> "tensorflow", "torch" ->
    "torch"). Raises KeyError for a library that belongs to no backend."""
    from gelulab.backends import REGISTRY

    by_package = {c.package: c.name for c in REGISTRY.values()}
    return by_package.get(framework) or COMPANIONS[framework]


def requires(framework: str):
    """The imported module `framework` ("torch", "jax", "keras", "flax", "transformers"...), for a test that
    computes with it; the test (or, called at module level, the module) is skipped when its backend is not selected
    by GELULAB_BACKEND (nothing is imported then) or when the library is not installed (as pytest.importorskip)."""
    backend = backend_of(framework)
    if backend not in SELECTED:
        pytest.skip(f"{framework} runs on the {backend} backend, not selected "
                    f"(GELULAB_BACKEND={os.environ.get('GELULAB_BACKEND')!r})", allow_module_level=True)
    return pytest.importorskip(framework)


def array_namespace(name: str):
    """The module whose `asarray` turns a numpy array (of any dtype: a test's integer, bool or complex input) into
    an array of backend `name`: an Array API library's namespace, as its package's record (`LIBRARY`, of
    backends/array_api/library.py) names it, else the framework's module (the record's package: numpy)."""
    from gelulab.backends import PACKAGES

    library = getattr(PACKAGES[name], "LIBRARY", None)
    return library.xp() if library is not None else importlib.import_module(capabilities(name).package)


def available(framework: str) -> bool:
    """Whether `framework` may be used here: its backend is selected by GELULAB_BACKEND and it is installed (no
    import)."""
    return backend_of(framework) in SELECTED and importlib.util.find_spec(framework) is not None


def unselected_frameworks() -> set[str]:
    """Top-level framework modules (frameworks and their companions) that the selected backends do not use and
    that no test of this session may import, by the registry and COMPANIONS."""
    from gelulab.backends import REGISTRY

    names = {c.package: c.name for c in REGISTRY.values()} | COMPANIONS
    allowed = {m for b in SELECTED for m in _PULLED_IN.get(b, ())}
    return {m for m, b in names.items() if b not in SELECTED and m not in allowed}


_FORBIDDEN = unselected_frameworks()


def _imported_forbidden() -> list[str]:
    if not _FORBIDDEN:  # every backend selected: nothing to look for among the modules
        return []
    return sorted(_FORBIDDEN.intersection(m.partition(".")[0] for m in list(sys.modules)))


_already = _imported_forbidden()  # imported before the first test module (by pytest plugins): no test's fault


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test module whose collection imports a framework of an unselected backend fails to collect, named."""
    global _already
    report = yield
    found = [m for m in _imported_forbidden() if m not in _already]
    _already += found
    if found and report.passed:
        report.outcome, report.result = "failed", []
        report.longrepr = (f"collecting {report.nodeid} imported {found}, the framework of a backend that "
                           f"GELULAB_BACKEND={os.environ.get('GELULAB_BACKEND')!r} does not select")
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item):
    """A test that imports a framework of an unselected backend errors at teardown, named (it must call
    requires() or skip when its backend is not selected); its fixtures are torn down first."""
    global _already
    result = yield
    found = [m for m in _imported_forbidden() if m not in _already]
    _already += found
    if found:
        pytest.fail(f"{item.nodeid} imported {found}, the framework of a backend that "
                    f"GELULAB_BACKEND={os.environ.get('GELULAB_BACKEND')!r} does not select", pytrace=False)
    return result


def pytest_report_header(config):
    return f"gelulab backends under test: {', '.join(SELECTED)} (GELULAB_BACKEND={os.environ.get('GELULAB_BACKEND')!r})"


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's --dist loadgroup runs a group in one worker")
    config.addinivalue_line("markers", "backend_needs(*needs): run on the selected backends whose record has these "
                                       "only: capabilities (core.contracts.contract.Capabilities: kernels, compiled, "
                                       "autodiff), contract modules (bert, bench, ...) or dtypes it holds "
                                       "(float16, ...)")


def _has(record, need: str) -> bool:
    """Whether a backend's record holds a dtype ("float16"), lists a contract module ("bert", "bench") or has a
    capability ("kernels", "compiled", "autodiff")."""
    if need in DTYPES:
        return need in record.dtypes
    if need in PROTOCOLS:
        return need in record.modules
    return bool(getattr(record, need))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """With pytest-xdist's --dist loadgroup (`make test`): a test without an xdist_group mark goes with the rest of
    its module, so module-scoped fixtures (a benchmark run, a trained model) are built by one worker only; the
    parity cells carry finer groups of their own (tests/test_parity.py). A test of a kernel that compiles on its
    eager call is marked `compile` (before `-m` selects)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
        if _calls_a_compiling_kernel(item):
            item.add_marker(pytest.mark.compile)
    items[:] = sorted(items, key=_rank(items).__getitem__)


def _rank(items) -> dict:
    """{item: 0, 1 or 2}, the order in which pytest-xdist hands out the groups (the Makefile's
    --no-loadscope-reorder keeps it): 0 for a group holding a test marked subprocess, training or slow (a few
    dear tests: started first, so no worker is left alone with one at the end), 2 for the parity cells (one group
    per activation, dtype and order, a few seconds each: they fill the end evenly), 1 for the rest. Stable: a
    module keeps its order."""
    dear = {"subprocess", "training", "slow"}
    groups = {item: _group_name(item) for item in items}
    group_rank = {}
    for item, group in groups.items():
        rank = 2 if item.get_closest_marker("parity") else 1
        if rank == 1 and any(item.get_closest_marker(m) for m in dear):
            rank = 0
        group_rank[group] = min(group_rank.get(group, rank), rank)
    return {item: group_rank[group] for item, group in groups.items()}


def _group_name(item) -> str:
    """The name pytest-xdist gives the item's group: its xdist_group marks' names (positional or name=), joined."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names))


def _backend_param(item) -> str | None:
    """The backend a test item runs on (its `backend_name` parameter), None for a test without one and for the
    placeholder item pytest collects, marked skipped, when no selected backend has what the test needs (its
    parameter is then no backend name)."""
    name = getattr(getattr(item, "callspec", None), "params", {}).get("backend_name")
    return name if isinstance(name, str) else None


def _calls_a_compiling_kernel(item) -> bool:
    """Whether a backend's test runs its kernels (impl "kernel", or a `backend_needs("kernels")` mark) on a backend
    whose eager kernel calls compile first (its record's eager_kernels_compile): such a test is marked `compile`."""
    name = _backend_param(item)
    if name is None or not capabilities(name).eager_kernels_compile:
        return False
    needs = {c for mark in item.iter_markers("backend_needs") for c in mark.args}
    return item.callspec.params.get("impl") == "kernel" or "kernels" in needs


def pytest_generate_tests(metafunc):
    """`backend_name` (and so `backend`) runs once per selected backend, or per selected backend that has what the
    test's `backend_needs` marks name."""
    if "backend_name" in metafunc.fixturenames:
        needs = [c for mark in metafunc.definition.iter_markers("backend_needs") for c in mark.args]
        metafunc.parametrize("backend_name", [n for n in SELECTED if all(_has(capabilities(n), c) for c in needs)])


def pytest_runtest_setup(item):
    """A backend's test parametrised with a `dtype` its record does not hold, impl "kernel" where it or the test's
    catalogue entry `key` has no kernels, or impl "builtin" where it has no builtin (for the test's `key`, or for any
    entry) is skipped, saying why: what a backend offers is its record's to say, not a list of backends in the tests."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    name = _backend_param(item)
    if name is None:
        return
    record, dtype, impl = capabilities(name), params.get("dtype"), params.get("impl")
    if dtype in DTYPES and dtype not in record.dtypes:
        pytest.skip(f"backend {name!r} holds no {dtype} arrays (its dtypes: {list(record.dtypes)})")
    if impl == "kernel" and not record.kernels:
        pytest.skip(f"backend {name!r} has no kernels")
    if impl == "kernel" and isinstance(params.get("key"), str) and get_activation(params["key"]).kernel is None:
        pytest.skip(f"catalogue entry {params['key']!r} has no kernel (its default is the formula)")
    if impl == "builtin":
        keys = [params["key"]] if isinstance(params.get("key"), str) else list(ACTIVATIONS)
        if not any(get_backend(name).has_builtin(k) for k in keys):
            pytest.skip(f"backend {name!r} has no builtin for {keys if len(keys) == 1 else 'any entry'}")


@pytest.fixture
def backend(backend_name):
    return get_backend(backend_name)


# hypothesis: derandomized (the same examples on every run, CI or not, so `make test` is never flaky), fixed
# example budget, no deadline (first framework calls are slow). GELULAB_HYPOTHESIS=explore draws fresh examples;
# =fast (`make test-fast`) draws 10 instead of 60.
from hypothesis import settings

_PROFILES = {"ci": {"derandomize": True, "max_examples": 60}, "explore": {"max_examples": 300},
             "fast": {"derandomize": True, "max_examples": 10}}  # fast: `make test-fast`
for _name, _options in _PROFILES.items():
    settings.register_profile(_name, deadline=None, **_options)
_profile = os.environ.get("GELULAB_HYPOTHESIS", "ci")
if _profile not in _PROFILES:
    raise pytest.UsageError(f"GELULAB_HYPOTHESIS={_profile!r}; expected one of {list(_PROFILES)}")
settings.load_profile(_profile)

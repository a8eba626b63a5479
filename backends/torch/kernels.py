"""PyTorch glue for gelulab's float32 kernels (core.numerics.kernels): the kernel namespace over torch, each kernel as a
torch.autograd.Function whose backward is the next kernel (f' then f''), so torch.autograd.grad(...,
create_graph=True) and torch.func.vjp compose to second order, and one fused loop per call in eager mode.

Eager calls run the kernel through a loop compiled ahead of time by AOTInductor: one fused C++ loop instead of a
hundred elementwise passes, one per kernel (orders (0,), (1,), (2,), (0, 1)) and device for every shape (the
input is flattened to one dimension of dynamic length). The loop is never built in the user's process: a child
process (`python -m gelulab.backends.torch.kernel_build`, build_package) runs torch.export of a small module
computing the kernel on a 1-D float32 tensor and torch._inductor.aoti_compile_and_package, one thread, into
GELULAB_KERNEL_CACHE (default $XDG_CACHE_HOME/gelulab/torch-kernels), one .pt2 file per kernel, keyed by torch
and gelulab version, the CPU's capability and feature flags and a digest of the kernel code (_package_path).
The process that calls the kernel only loads that file (torch._C._aoti.AOTIModelPackageLoader: a dlopen; no
dynamo, no fx tracing, no compiler, nothing process-wide patched; measured 1.4-1.9 ms) and calls it, so a build
can never disturb its other threads (an in-process torch.compile build patched torch.nn.Module.__call__ for the
whole process: user threads died with "module is not installed as a submodule"). Measured on this 2-core Intel
Xeon (AVX-512), one thread: a build takes 11 s (ReLU) to 25-45 s (exact GELU) per kernel in the child, more for
tanh GELU's f'; exact GELU at 8x128x1536 float32 7.5 ms a call (torch.nn.GELU 0.6 ms; the former in-process
torch.compile loop 5.7 ms: AOTInductor's code of the same ops is 1.3x slower here), bit for bit what the kernel's
ops compute eagerly with CPU_NS, within 1 ULP of mpmath. The loop runs on the calling thread (no OpenMP).

Until a kernel's loop is loaded, calls compute through gelulab's float64 formula and closed-form derivatives
(core.numerics.formulas; the same accuracy contract, slower per call), _CHUNK elements at a time into outputs
allocated once where autograd does not differentiate those ops (a few MiB of temporaries; whole, they took 9x the
input's bytes). The first call of a kernel looks for its file and loads it (a `gelulab warmup` or an earlier build
made it). Otherwise GELULAB_KERNEL_COMPILE (core.plumbing.config) decides: "background" (default) starts the
child once the kernel's float64 calls of at least LOOP_MIN_NUMEL elements have spent BUILD_AFTER_S, and later
calls poll it (Popen.poll) and load its file when it has ended, so short scripts never build; "wait" starts it
(or joins a running one) and waits (the measurements of `gelulab parity`, `verify` and `bench`, and the test
suite); "off" never builds or loads (the float64 path serves every call). No thread is started in any case. The
child dies with its parent (PR_SET_PDEATHSIG set in the child, core.plumbing.interrupts.die_with_parent, or a
watch of the parent's pid where a user's thread that may end first started it), and an atexit handler kills it,
so a script ends within a second of its last line while a build runs (the build is lost; `gelulab warmup`
builds ahead, once per machine and version). Where the build fails (no C++ compiler) one RuntimeWarning says why
and the float64 path serves every call. Calls of 0 or 1 elements, calls inside torch.func transforms and calls
whose result is differentiated through the float64 ops take that path; calls in inference mode run the loop.

Inside a torch.compile'd caller (with gradients, through twin Functions that have no custom jvp and call plain
functions, which dynamo traces without breaking the graph) a CPU tensor's kernel call is one opaque op of the
caller's graph, gelulab::kernel or gelulab::kernel_pair, which runs the eager loop (or the float64 path while none
is loaded: _opaque); whether a call is traced is asked of this thread (_tracing), not of torch's process-wide
compiling flag, which another thread's compile sets; on other devices and under torch.export the kernel's ops are
traced into the graph (NS); torch.jit.trace and torch.onnx.export (both exporters) record them without bit casts
(PORTABLE_NS: the same bits), so a traced or ONNX model computes the kernel's values. On CPUs the loop uses
CPU_NS, which splits and compares floats without bit casts (inductor's C++ writes each bit cast as a per-element
store/load round trip): the same accuracy contract, other bits on about 0.1-0.5 % of inputs, 2.9x faster; a
recorded graph keeps NS (_recording).
With gradients enabled, the forward computes the value and f' in one loop (they share the exponential) and the
backward multiplies by the saved f' unless a graph of the backward is asked for (create_graph), in which case it
calls the f' kernel as a Function of its own. bfloat16/float16 are computed in float32 and rounded once; no
global torch setting is changed.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import math
import os
import platform
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
import warnings
from functools import cache

import torch
import torch.autograd.forward_ad as fwAD
from torch._guards import TracingContext
from torch._inductor import config as _inductor_config

from gelulab.backends.torch import activations as _xp
from gelulab.core.activations import ACTIVATIONS, get_activation
from gelulab.core.numerics import kernels as K
from gelulab.core.numerics.formulas import closed_form
from gelulab.core.plumbing import config

NAME = "torch"
BUILD_AFTER_S = 0.5  # background builds start once a kernel's float64 calls have taken this long
# Under the default policy (background), only calls of at least this many elements count towards BUILD_AFTER_S and
# start a build: a short script of small calls never builds. Once loaded, the loop serves calls of every size of 2
# or more (AOTInductor's call costs about 0.025 ms before its first element: 1024 floats 0.030 ms by the loop,
# 0.031 ms by the float64 path, 0.019 ms by torch.nn.GELU; exact GELU, one Xeon thread).
LOOP_MIN_NUMEL = 16384
_build_failed = []  # the first failure of an inductor build, warned about once per process




def _i32(u: int) -> int:
    return u - (1 << 32) if u >= (1 << 31) else u


class _Namespace:
    """The array operations core.numerics.kernels uses, in torch, float32 throughout."""

    @staticmethod
    def where(c, a, b):
        if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
            a = torch.full(c.shape, a, dtype=torch.float32, device=c.device)
        return torch.where(c, a, b)

    abs = staticmethod(torch.abs)
    rint = staticmethod(torch.round)  # round half to even

    @staticmethod
    def keep_bits(x, bits: int):
        mask = _i32((0xFFFFFFFF << (24 - bits)) & 0xFFFFFFFF)
        return (x.view(torch.int32) & mask).view(torch.float32)

    @staticmethod
    def pow2(k):
        return ((k.to(torch.int32) + 127) << 23).view(torch.float32)

    @staticmethod
    def bits_equal(x, u: int):
        return x.view(torch.int32) == _i32(u)


NS = _Namespace()


def _f32_of_bits(u: int) -> float:
    return struct.unpack("<f", struct.pack("<I", u))[0]


class _PortableNamespace(_Namespace):
    """The same operations without bit casts, for exporters whose IR or target has none (torch.jit.trace and the
    legacy ONNX exporter: no aten::view.dtype; the dynamo ONNX exporter: no translation of it): every result is the
    same float32 bits as _Namespace's on the values the kernels compute (tests/test_export.py compares them).
    keep_bits scales |x| by powers of two (exact) to [2^(b-1), 2^b), floors it and scales back; pow2 is 2.0**k."""

    @staticmethod
    def keep_bits(x, bits: int):
        a = torch.abs(x)
        small = a < 2.0**-64  # scaled up first, so that 2^(b-1-e) stays a normal float32
        a_n = torch.where(small, a * 2.0**64, a)
        e = torch.floor(torch.log2(torch.where(a_n > 0, a_n, 1.0)))  # may be one off near a power of two
        scale = _PortableNamespace.pow2(bits - 1.0 - e)
        t = a_n * scale
        over = t >= float(2**bits)
        t, scale = torch.where(over, t * 0.5, t), torch.where(over, scale * 0.5, scale)
        under = t < float(2 ** (bits - 1))
        t, scale = torch.where(under, t * 2.0, t), torch.where(under, scale * 2.0, scale)
        r = torch.floor(t) / scale
        r = torch.where(small, r * 2.0**-64, r)
        r = torch.where(x < 0, -r, r)
        return torch.where((a == 0) | ~(a < float("inf")), x, r)  # zeros (their sign), inf and nan as they are

    @staticmethod
    def pow2(k):
        return torch.pow(2.0, k.to(torch.float32))

    @staticmethod
    def bits_equal(x, u: int):
        v = _f32_of_bits(u)
        if v == 0.0 or math.isnan(v):  # a signed zero or a NaN pattern has no float equivalent; the kernels use neither
            raise ValueError(f"bits_equal: 0x{u:08X} is not a finite nonzero float32")
        return x == v


PORTABLE_NS = _PortableNamespace()


class _CpuNamespace(_Namespace):
    """The operations without bit casts, for inductor's C++ loops on CPUs, whose vector code writes each bit cast
    as a store of the vector and a loop of 16 scalar casts (measured, exact GELU at 8x128x1536 float32, one Xeon
    thread: 16.0 ms with them, 6.3 ms with these). keep_bits is Dekker's split (Veltkamp 1968; Dekker 1971, sec.
    5): t = (2^(24-b) + 1) x, h = t - (t - x) has at most b significant bits and x - h is exact, for |x| below
    2^(127 - (24 - b)) (the kernels split values below 2^16), unless a product is contracted into an FMA, which
    inductor's C++ does not do unless its `cpp.enable_floating_point_contract_flag` is changed (_namespace checks
    it). h is x rounded to b bits rather than truncated, so x - h may have either sign and |x - h| is at most
    half an ULP of h in b bits: every exact product and error bound of core.numerics.kernels holds with it.
    pow2(k) is exp2(k), exact for integer k in [-126, 127] (glibc's exp2 and SLEEF's, which inductor calls);
    bits_equal compares by value (the patterns it is given are finite and nonzero)."""

    @staticmethod
    def keep_bits(x, bits: int):
        t = x * float(2 ** (24 - bits) + 1)
        return t - (t - x)

    @staticmethod
    def pow2(k):
        return torch.exp2(k)

    bits_equal = staticmethod(_PortableNamespace.bits_equal)


CPU_NS = _CpuNamespace()


@torch.compiler.assume_constant_result
def _uncontracted() -> bool:
    """Whether inductor's C++ leaves products and sums apart (no FMA contraction: its default), read when called
    (under dynamo: once per trace, as a constant)."""
    return _inductor_config.cpp.enable_floating_point_contract_flag == "off"


@torch.compiler.assume_constant_result
def _this_thread_traces() -> bool:
    """Whether this thread holds a tracing context of dynamo or torch.export (thread-local); read by dynamo once,
    at trace time, as a constant."""
    return TracingContext.try_get() is not None


def _tracing() -> bool:
    """Whether torch.compile's dynamo or torch.export is tracing this call. torch.compiler.is_compiling() alone reads
    a process-wide flag that stays True while any thread compiles, a kernel's background build included: an eager
    call made meanwhile would take itself for traced (and, on a CPU, call its own opaque op again without end), so
    the flag counts only where this thread traces."""
    return torch.compiler.is_compiling() and _this_thread_traces()


def _namespace(x):
    """The kernel namespace to compute x with where the kernels run rather than being recorded: CPU_NS for CPU
    tensors while inductor's C++ does not contract products into FMAs (its default), NS otherwise (GPUs: Triton
    contracts, and its bit casts are free)."""
    if x.device.type != "cpu":
        return NS
    return CPU_NS if _uncontracted() else NS


def _recording():
    """The kernel namespace to record the kernels' ops with when a tracer is recording rather than running them;
    None when they run. PORTABLE_NS (no bit casts) under torch.jit.trace (so the legacy ONNX exporter too) and the
    dynamo ONNX exporter; NS under torch.compile's dynamo, torch.export, make_fx and torch.fx.symbolic_trace
    (under torch.compile a CPU tensor's call becomes an opaque op instead: _opaque). Not CPU_NS in a recorded
    graph: inductor inlines each use of a pointwise value again while it generates code, and Dekker's split uses
    its values twice, so with the static shapes of a first torch.compile call that work grows with the depth of
    the splits (measured: tanh GELU's f' compiled in 140 s instead of 23 s); the loop's own build (dynamic
    shapes) took 17-33 s with CPU_NS."""
    if torch.jit.is_tracing() or onnx_exporting():
        return PORTABLE_NS
    if _tracing():
        return NS
    from torch.fx import _symbolic_trace
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    symbolic = getattr(_symbolic_trace, "is_fx_symbolic_tracing", lambda: False)
    return NS if symbolic() or get_proxy_mode() is not None else None


def onnx_exporting() -> bool:
    """Whether torch.onnx.export (either exporter) is running, read from the exporters' own flags: torch.compile's
    dynamo, which the dynamo exporter's capture runs, folds torch.onnx.is_in_onnx_export() to False."""
    try:
        from torch.onnx._internal.exporter import _flags
        from torch.onnx._internal.torchscript_exporter._globals import GLOBALS
    except ImportError:  # another torch: its public flag
        return torch.onnx.is_in_onnx_export()
    if _flags._is_onnx_exporting:
        return True
    # the legacy exporter records with torch.jit.trace, never under dynamo (which refuses to trace its flag)
    return not _tracing() and bool(GLOBALS.in_onnx_export)


def _dense(t) -> bool:
    """Whether t's elements fill its memory without gaps or overlaps in some order of its dimensions (contiguous,
    channels-last, transposed; not sliced or expanded)."""
    expected = 1
    for d in sorted(range(t.dim()), key=t.stride):
        if t.size(d) != 1 and t.stride(d) != expected:
            return False
        expected *= t.size(d)
    return True


def _device_tag(device: torch.device) -> str:
    """What a package's machine code depends on besides the versions: the CPU's vector capability and a digest of
    its feature flags (inductor compiles with -march=native), or a GPU's compute capability."""
    if device.type == "cpu":
        flags = ""
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
        except OSError:
            pass
        digest = hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:8]
        return f"cpu-{torch.backends.cpu.get_cpu_capability()}-{digest}"
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"cuda-sm{major}{minor}"
    return device.type


@cache
def _source_digest() -> str:
    """A digest of the code a package's loop is made from (the kernels, their coefficients, the namespaces and the
    build) and the inductor setting the namespace depends on, so an edited checkout never loads a stale package."""
    import inspect

    from gelulab.core.numerics import kernel_coeffs

    h = hashlib.sha256()
    for mod in (K, kernel_coeffs):
        with open(mod.__file__, "rb") as f:
            h.update(f.read())
    parts = [_Compiled._run, _namespace, build_package]  # functions' sources (from their code objects: quick)
    parts += [(name, getattr(f, "__func__", f)) for ns in (_Namespace, _PortableNamespace, _CpuNamespace)
              for name, f in vars(ns).items() if isinstance(f, staticmethod)]
    for part in parts:
        fn = part[1] if isinstance(part, tuple) else part
        if isinstance(fn, types.FunctionType):
            h.update(inspect.getsource(fn).encode())
        else:
            h.update(f"{part[0]}={getattr(fn, '__name__', type(fn).__name__)}".encode())
    h.update(str(_inductor_config.cpp.enable_floating_point_contract_flag).encode())
    return h.hexdigest()[:12]


def _package_path(key: str, orders: tuple, device: torch.device) -> str:
    """The cache file of a kernel's AOTInductor package: GELULAB_KERNEL_CACHE (default
    $XDG_CACHE_HOME/gelulab/torch-kernels), one file per kernel, orders, device kind, torch and gelulab version
    and source digest."""
    from gelulab import __version__

    def clean(v):
        return "".join(c if c.isalnum() or c in "._-" else "_" for c in str(v))

    name = (f"{key}-{''.join(map(str, orders))}-{_device_tag(device)}-torch{clean(torch.__version__)}"
            f"-gelulab{clean(__version__)}-{_source_digest()}.pt2")
    return os.path.join(config.kernel_cache(), name)


def _load(path: str, device: torch.device):
    """The loop of the package at `path` as a function of a 1-D float32 tensor (a tensor, or a tuple for several
    orders), or None where there is none. A dlopen of its shared object: no dynamo, no tracing, no compiler
    (measured 1.4 ms). A package that cannot be loaded (cut short, another build's) is removed. The folder the
    loader extracts the package into (in the temporary directory) is removed at exit (_release_loaders)."""
    if not os.path.exists(path):
        return None
    try:
        runner = torch._C._aoti.AOTIModelPackageLoader(
            path, "model", False, _RUNNERS, -1 if device.type == "cpu" else (device.index or 0))
    except Exception:  # noqa: BLE001 - a damaged package: built again where a build is allowed
        with contextlib.suppress(OSError):
            os.remove(path)
        return None
    box = [runner]  # the only reference to the loader: emptied at exit (_release_loaders)
    del runner
    with _loaders_lock:
        if not _loaders:
            atexit.register(_release_loaders)
        _loaders.append(box)

    def loop(flat):
        runner = box[0] if box else None
        if runner is None:
            raise RuntimeError("gelulab: the float32 kernel's loop was released at interpreter exit")
        out = runner.boxed_run([flat])
        return tuple(out) if len(out) > 1 else out[0]

    return loop


# The loaded packages' loaders, each in a list of one that only its loop reads. A loader extracts its package into
# a folder of its own in the temporary directory (aotinductor_XXXXXX, about 1.7 MB) and removes it in its
# destructor, which interpreter shutdown never runs for these: _release_loaders, at exit, drops them.
_loaders: list[list] = []
_loaders_lock = threading.Lock()


def _release_loaders() -> None:
    """At exit (atexit, registered by the first _load): drop every loader, so each destructor removes the folder its
    package was extracted into. A call running in another thread keeps its loader until it returns; a later call
    raises RuntimeError. Independent of _kill_children (either may run first): the builds write only the cache."""
    with _loaders_lock:
        for box in _loaders:
            box.clear()


_children = []  # the build processes this process started (killed at exit)


def _kill_children() -> None:
    """At exit: kill the builds still running, so the program ends now, not when they end (atexit)."""
    for proc in _children:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
    for proc in _children:
        with contextlib.suppress(Exception):
            proc.wait(timeout=1.0)


def _start_build(key: str, orders: tuple, device: torch.device) -> subprocess.Popen:
    """Start the child process that builds a kernel's package (gelulab.backends.torch.kernel_build): nothing of the
    build runs in this process. It dies with this process (PR_SET_PDEATHSIG, set in the child; where the
    starting thread is not the main thread, which may end first, the child watches its parent instead) and is
    killed at exit. Its stderr goes to a temporary file, read if it fails."""
    if not _children:
        atexit.register(_kill_children)
    main = threading.current_thread() is threading.main_thread()
    cmd = [sys.executable, "-m", "gelulab.backends.torch.kernel_build", key, ",".join(map(str, orders)),
           str(device), _package_path(key, orders, device), str(os.getpid()), "main" if main else "thread"]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by _built, once the child has ended
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, close_fds=True)
    proc.gelulab_log = log
    _children.append(proc)
    return proc


def _built(proc: subprocess.Popen, key: str, orders: tuple, device: torch.device):
    """The loop of a finished build, or None (warned about once per process) where the child failed."""
    loop = _load(_package_path(key, orders, device), device) if proc.returncode == 0 else None
    if loop is None:
        proc.gelulab_log.seek(0)
        lines = proc.gelulab_log.read().decode("utf-8", "replace").strip().splitlines()
        why = lines[-1] if lines else f"exit status {proc.returncode}"
        first = not _build_failed
        _build_failed.append(why)
        if first:
            warnings.warn(f"gelulab: could not build the float32 kernels' loop ({why}); eager torch calls compute "
                          "in float64 instead (same accuracy, slower). A C++ compiler on PATH (g++) gives the fast "
                          "loop.", RuntimeWarning, stacklevel=4)
    proc.gelulab_log.close()
    return loop


def build_package(key: str, orders: tuple, device: str, path: str) -> None:
    """Build the AOTInductor package of kernel `key` (orders) for `device` at `path` (written whole, then renamed
    into place). Run by the child process (kernel_build), never in a user's process: torch.export traces a small
    module computing the kernels on a 1-D float32 tensor of dynamic length (at least 2), and
    torch._inductor.aoti_compile_and_package compiles it to a shared object, one thread."""
    import torch._inductor

    k = _kernels(key)[_WHICH[tuple(orders)]]
    x = torch.linspace(-4.0, 4.0, 64, device=device)
    ns = _namespace(x)

    class Kernel(torch.nn.Module):
        def forward(self, v):
            return k._run(v, ns)

    n = torch.export.Dim("n", min=2)
    ep = torch.export.export(Kernel(), (x,), dynamic_shapes=({0: n},))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path[:-4]}.{os.getpid()}.tmp.pt2"
    try:
        torch._inductor.aoti_compile_and_package(ep, package_path=tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)
    prefix = os.path.basename(path).split("-torch")[0] + "-torch"  # the same kernel of another version: stale
    for old in os.listdir(os.path.dirname(path)):
        if old.startswith(prefix) and old.endswith(".pt2") and ".tmp." not in old and old != os.path.basename(path):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(os.path.dirname(path), old))


def warmup(keys=None, device: str = "cpu") -> list[str]:
    """Build (in child processes, one kernel at a time) and load every kernel of the catalogue entries `keys`
    (default: every entry with a kernel) for `device`, so that this process and every later one on this machine
    (same torch and gelulab versions) runs their loops from the first call. Already built kernels are loaded, not
    built again. Returns the package files. Raises RuntimeError naming the kernel whose build failed."""
    keys = [k for k, a in ACTIVATIONS.items() if a.kernel is not None] if keys is None else list(keys)
    dev = torch.device(device)
    paths = []
    for key in keys:
        for k in _kernels(key):
            path = _package_path(k.key, k.orders, dev)
            loop = k._ready.get(dev.type) or _load(path, dev)
            if loop is None:
                proc = _start_build(k.key, k.orders, dev)
                proc.wait()
                loop = _built(proc, k.key, k.orders, dev)
                if loop is None:
                    raise RuntimeError(f"the {key} kernel (orders {k.orders}) could not be built: {_build_failed[-1]}")
            with k._lock:
                k._ready[dev.type] = loop
                k._looked.add(dev.type)
            paths.append(path)
    return paths


_CHUNK = 1 << 16  # elements per chunk of the float64 path (at most a few MiB of float64 temporaries)
_RUNNERS = 4  # model instances per loaded loop: calls from up to this many threads run at once


class _Compiled:
    """A float32 kernel (or tuple of kernels sharing their work: orders, e.g. (0, 1) for f and f') of catalogue
    entry `key`, run eagerly through its AOTInductor loop once that is built and loaded (module docstring;
    bfloat16/float16 are cast outside it) and traced as plain ops under a compiler. Returns a tensor of the input's
    dtype and shape, or a tuple for a tuple of kernels."""

    def __init__(self, key, orders, *fns, bf16=False):
        self.key, self.orders, self.fns = key, orders, fns
        self.bf16 = bf16  # True for GELU-form value kernels: the bfloat16 tie of core.numerics.kernels.kernel_function
        self._ready = {}  # device type -> the loaded loop, or None where it could not be built
        self._builds = {}  # device type -> the child process building its package (subprocess.Popen)
        self._looked = set()  # device types whose package was looked for in the cache before any build
        self._float64_s = 0.0  # seconds its calls have spent on the float64 path
        self._lock = threading.Lock()

    def _run(self, x, ns=None):
        ns = ns or _namespace(x)
        out = tuple(f(ns, x) for f in self.fns)
        return out if len(out) > 1 else out[0]

    def _float64(self, x):
        """The same values by gelulab's float64 formula and closed forms (core.numerics.formulas), rounded once to x's
        dtype: no compiler, any shape, inside any torch.func transform. Where autograd or a transform does not
        differentiate or batch the float64 ops (no gradient recorded, no forward tangent, no torch.func level), it
        computes _CHUNK elements at a time into outputs allocated once: extra memory a few MiB, whatever x's size
        (computed whole, the float64 temporaries took 9x the input's bytes)."""
        if (x.numel() <= _CHUNK or (x.requires_grad and torch.is_grad_enabled())
                or torch._C._functorch.maybe_current_level() is not None
                or (fwAD._current_level >= 0 and fwAD.unpack_dual(x).tangent is not None)):
            return self._float64_whole(x)
        with torch.no_grad():
            dense = _dense(x)
            src = x.as_strided((x.numel(),), (1,), x.storage_offset()) if dense else x.reshape(-1)
            outs = [torch.empty_like(x) if dense else torch.empty(x.shape, dtype=x.dtype, device=x.device)
                    for _ in self.orders]
            flats = [o.as_strided((o.numel(),), (1,), o.storage_offset()) for o in outs]
            for i in range(0, src.numel(), _CHUNK):
                part = self._float64_whole(src[i:i + _CHUNK])
                for flat, p in zip(flats, part if isinstance(part, tuple) else (part,)):
                    flat[i:i + _CHUNK] = p
        return tuple(outs) if len(outs) > 1 else outs[0]

    def _float64_whole(self, x):
        act = get_activation(self.key)
        out = tuple(act.formula(_xp, x) if o == 0 else closed_form(act, _xp, x.double(), o).to(x.dtype)
                    for o in self.orders)
        return out if len(out) > 1 else out[0]

    def _loop(self, x):
        """The loaded loop for x's device; None (the float64 path serves the call) while it is being built, where
        it cannot be built, under GELULAB_KERNEL_COMPILE=off, for sizes 0 and 1, inside a torch.func transform
        (vmap, grad, hessian) and for a call whose result is differentiated (x requires grad with grad mode on, or
        carries a forward-mode tangent: autograd differentiates the float64 ops). Without a loaded loop it looks
        once for the kernel's package in the cache (a `gelulab warmup` or an earlier build made it) and loads it;
        otherwise, under the default policy (background), a call of at least LOOP_MIN_NUMEL elements made once the
        kernel's calls have spent BUILD_AFTER_S on the float64 path starts the child process that builds it, and
        later calls poll it; under `wait` the call starts it (or joins a running one) and waits."""
        policy = config.kernel_compile()
        if policy == "off" or x.numel() < 2 or torch._C._functorch.maybe_current_level() is not None:
            return None
        if x.requires_grad and torch.is_grad_enabled():
            return None
        if fwAD._current_level >= 0 and fwAD.unpack_dual(x).tangent is not None:
            return None
        dev = x.device.type
        if dev in self._ready:
            return self._ready[dev]
        return self._obtain(x.device, policy, x.numel())

    def _obtain(self, device: torch.device, policy: str, numel: int):
        dev = device.type
        with self._lock:
            if dev in self._ready:
                return self._ready[dev]
            proc = self._builds.get(dev)
            if proc is None:
                if dev not in self._looked:  # a package built before this process (or by another one)
                    self._looked.add(dev)
                    loop = _load(_package_path(self.key, self.orders, device), device)
                    if loop is not None:
                        self._ready[dev] = loop
                        return loop
                if policy == "background" and (numel < LOOP_MIN_NUMEL or self._float64_s < BUILD_AFTER_S):
                    return None
                proc = self._builds[dev] = _start_build(self.key, self.orders, device)
            if policy != "wait" and proc.poll() is None:  # still building: never waited for
                return None
        if policy == "wait":
            proc.wait()
        with self._lock:
            if dev not in self._ready and self._builds.get(dev) is proc:
                self._ready[dev] = _built(proc, self.key, self.orders, device)
            return self._ready.get(dev)

    def __call__(self, x):
        dtype = x.dtype
        ns = _recording()
        if ns is NS and _opaque(x):
            return _as_op(self.key, _WHICH[self.orders], x)
        if ns is not None:
            xf = x if dtype == torch.float32 else x.to(torch.float32)
            y = self._run(xf, ns)
        else:
            loop = self._loop(x)
            if loop is None:
                t0 = time.perf_counter()
                y = self._float64(x)
                if x.numel() >= LOOP_MIN_NUMEL:  # a call the loop would serve once built
                    self._float64_s += time.perf_counter() - t0
                return y
            xf = x.detach() if dtype == torch.float32 else x.detach().to(torch.float32)
            dense = _dense(xf)  # its memory is its elements in some order: the result keeps the layout
            # the loop reads its input as contiguous memory: a view that is not (an expanded tensor reshapes to a
            # stride-0 view) is copied first
            flat = xf.as_strided((xf.numel(),), (1,), xf.storage_offset()) if dense else xf.reshape(-1).contiguous()
            try:
                with torch.no_grad():
                    y = loop(flat)
            except Exception:  # noqa: BLE001 - this call cannot run the loop; it stays loaded for the next ones
                return self._float64(x)
            back = (lambda v: v.as_strided(x.shape, xf.stride())) if dense else (lambda v: v.reshape(x.shape))
            y = tuple(back(v) for v in y) if isinstance(y, tuple) else back(y)
        return _in_dtype(y, xf, dtype, self.bf16, ns or NS)


def _in_dtype(y, xf, dtype, bf16: bool, ns):
    """Float32 kernel results y (a tensor or tuple) of float32 inputs xf, in the caller's dtype: bfloat16 and
    float16 rounded once, with the one bfloat16 tie of the value kernels (bf16;
    core.numerics.kernels.kernel_function)."""
    if dtype == torch.float32:
        return y
    if dtype == torch.bfloat16 and bf16:
        y0 = y[0] if isinstance(y, tuple) else y
        y0 = torch.where(ns.bits_equal(xf, K.BF16_TIE_BITS), K.SMALLEST_NORMAL, y0)
        y = (y0,) + y[1:] if isinstance(y, tuple) else y0
    return tuple(v.to(dtype) for v in y) if isinstance(y, tuple) else y.to(dtype)


_WHICH = {(0,): 0, (1,): 1, (2,): 2, (0, 1): 3}  # a _Compiled's orders -> its index in _kernels(key)


@torch.library.custom_op("gelulab::kernel", mutates_args=())
def _kernel_op(x: torch.Tensor, key: str, which: int) -> torch.Tensor:
    """The eager loop of kernel `which` (0: f, 1: f', 2: f'') of catalogue entry `key` on x, as one op of a
    caller's torch.compile graph on a CPU (_opaque): x's dtype and shape out, in the layout of
    torch.empty_like(x) (the fake implementation's, which the compiled graph is built for)."""
    return _like(x, _kernels(key)[which](x))


def _like(x, y):
    """y in the memory layout of torch.empty_like(x): y itself where its strides are those, else a copy (inputs
    that are not dense, whose loop result is contiguous)."""
    if torch.empty_like(x, device="meta").stride() == y.stride():  # the layout alone, nothing allocated
        return y
    return torch.empty_like(x).copy_(y)


@_kernel_op.register_fake
def _(x, key, which):
    return torch.empty_like(x)


@torch.library.custom_op("gelulab::kernel_pair", mutates_args=())
def _kernel_pair_op(x: torch.Tensor, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """f and f' of catalogue entry `key` on x in one loop (see _kernel_op)."""
    y, d = _kernels(key)[3](x)
    return _like(x, y), _like(x, d)


@_kernel_pair_op.register_fake
def _(x, key):
    return torch.empty_like(x), torch.empty_like(x)


def _opaque(x) -> bool:
    """Whether a kernel call that torch.compile is tracing into a caller's graph (not an export, whose graph must
    stand alone) runs as one opaque op calling the eager loop (CPU tensors): the loop is built once, by gelulab,
    with Dekker's split (CPU_NS), where tracing its ops into the caller's graph took inductor 45 s instead of
    1.4 s to compile the BertModel's forward pass (5.1 s with the op), and ran 1.64x the model's own activation
    (1.21x with the op; one Xeon thread).
    Not inside torch.func transforms (grad, vmap, jacrev) traced by dynamo: they differentiate or batch the
    recorded ops, which the op has no rules for."""
    return (x.device.type == "cpu" and _tracing() and not torch.compiler.is_exporting()
            and not torch._C._are_functorch_transforms_active())  # torch.func transforms differentiate the ops


def _as_op(key: str, which: int, x):
    return _kernel_pair_op(x, key) if which == 3 else _kernel_op(x, key, which)


def _traced(k: _Compiled):
    """k's computation as a plain function of its input, for the autograd.Functions called inside torch.compile:
    dynamo traces a Function's forward and backward without a source for the objects they close over, and can
    wrap functions and tuples there but not a _Compiled instance (it would break the graph)."""
    fns, bf16, key, which = k.fns, k.bf16, k.key, _WHICH[k.orders]

    def run(x):
        ns = _recording() or _namespace(x)  # PORTABLE_NS (no bit casts) for the ONNX exporters
        if ns is NS and _opaque(x):
            return _as_op(key, which, x)
        xf = x if x.dtype == torch.float32 else x.to(torch.float32)
        out = tuple(f(ns, xf) for f in fns)
        return _in_dtype(out if len(out) > 1 else out[0], xf, x.dtype, bf16, ns)

    return run


@cache
def _kernels(key: str):
    act = get_activation(key)
    fix = K.kernel_function(act, 0, "bfloat16") is not K.kernel_function(act, 0)  # ValueError if no kernel
    f0, f1, f2 = (act.kernel.function(o) for o in range(3))
    return (_Compiled(key, (0,), f0, bf16=fix), _Compiled(key, (1,), f1), _Compiled(key, (2,), f2),
            _Compiled(key, (0, 1), f0, f1, bf16=fix))


def kernel(key: str):
    """The kernel of catalogue entry `key` (ValueError if none): a callable on torch tensors of float32, bfloat16
    or float16 (any shape), differentiable to second order through its own f' and f'' kernels. Built for every
    kernel when this module is imported, so that a first call inside torch.compile(fullgraph=True) finds it
    (dynamo cannot trace the class definitions of _build)."""
    if key not in _BUILT:
        _BUILT[key] = _build(key)  # an entry added to the catalogue after this module was imported
    return _BUILT[key]


def _functions(k1, k2, k01, forward_mode: bool):
    """The autograd.Functions (D1: f' with f'' as its derivative; F: the value and f' in one loop) of one kernel.
    forward_mode: with a `jvp` (torch.func.jvp, jacfwd, hessian), for eager calls; without one for calls inside
    torch.compile, whose dynamo cannot trace a custom jvp and would break the caller's graph at every call."""

    class D1(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return k1(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            if forward_mode:
                ctx.save_for_forward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * k2(x)

        @staticmethod
        def vmap(info, in_dims, x):  # elementwise: the batch dimension stays where it is
            return D1.apply(x), in_dims[0]

    class F(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return k01(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0], output[1])
            if forward_mode:
                ctx.save_for_forward(inputs[0], output[1])
            ctx.mark_non_differentiable(output[1])

        @staticmethod
        def backward(ctx, g, _g_d):
            x, d = ctx.saved_tensors
            if torch.is_grad_enabled():  # a graph of the backward is being built: f' as a Function of x
                return g * D1.apply(x)
            return g * d

        @staticmethod
        def vmap(info, in_dims, x):
            y, d = F.apply(x)
            return (y, d), (in_dims[0], in_dims[0])

    if forward_mode:
        def d1_jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return t * k2(x)

        def f_jvp(ctx, t):  # forward mode: t f'(x), f' a Function for 2nd order
            x, _d = ctx.saved_tensors
            return t * D1.apply(x), None

        D1.jvp, F.jvp = staticmethod(d1_jvp), staticmethod(f_jvp)
    return D1, F


def _build(key: str):
    k0, k1, k2, k01 = _kernels(key)
    _, eager = _functions(k1, k2, k01, forward_mode=True)
    _, traced = _functions(_traced(k1), _traced(k2), _traced(k01), forward_mode=False)

    def f(x):  # torch.jit.trace records the value's ops alone (its IR cannot hold an autograd.Function)
        if torch.is_grad_enabled() and x.requires_grad and not torch.jit.is_tracing():
            return (traced if _tracing() else eager).apply(x)[0]
        return k0(x)

    f.__name__ = f"{key}_kernel"
    f.derivatives = (k1, k2)  # f' and f'' alone, for a derivative that no enclosing derivative differentiates
    return f


_BUILT = {key: _build(key) for key, act in ACTIVATIONS.items() if act.kernel is not None}

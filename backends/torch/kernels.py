"""PyTorch glue for gelulab's float32 kernels (core.numerics.kernels): the kernel namespace over torch, each kernel as a
torch.autograd.Function whose backward is the next kernel (f' then f''), so torch.autograd.grad(...,
create_graph=True) and torch.func.vjp compose to second order, and one fused kernel per call in eager mode.

Eager calls run the kernel through torch.compile (inductor): one fused loop instead of a hundred elementwise passes,
built once per kernel and device for every shape (the input is flattened to one dynamic dimension; sizes 0 and 1,
which dynamo specialises, and calls inside torch.func transforms take the float64 path below). The build takes
seconds to a minute, so it never stalls the caller: by default (GELULAB_KERNEL_COMPILE=background) calls compute
through gelulab's float64 formula and closed-form derivatives (core.numerics.formulas; the same accuracy contract, slower
per call), and once a kernel's calls have spent BUILD_AFTER_S seconds that way its loop is built in a background
thread; calls switch to it when it is built. Calls below LOOP_MIN_NUMEL elements keep the float64 path under this
policy (faster there than a call of the loop) and never start a build. The build thread is not a daemon (one cut short at exit aborts the
process); a build still running when the program ends stops there, silently. Short scripts, which never reach
BUILD_AFTER_S, never build. Calls whose result is differentiated, and calls under global state the loop was not
built for (autocast, another thread count), keep the float64 path (_Compiled._loop); calls in inference mode run
the loop outside it. GELULAB_KERNEL_COMPILE=wait builds in the calling thread (the measurements of `gelulab parity`, `verify` and
`bench` run the compiled loop itself), `off` never compiles. Where inductor cannot build (no C++ compiler) one
RuntimeWarning says so and the float64 path serves every call. Inside a torch.compile'd caller (with gradients,
through twin Functions that have no custom jvp and call plain functions, which dynamo traces without breaking the
graph) a CPU tensor's kernel call is one opaque op of the caller's graph, gelulab::kernel or gelulab::kernel_pair,
which runs the eager loop (_opaque); whether a call is traced is asked of this thread (_tracing), not of torch's
process-wide compiling flag, which a build in another thread sets; on other devices and under torch.export the kernel's ops are traced into the
graph (NS); torch.jit.trace and torch.onnx.export (both exporters) record them without bit
casts (PORTABLE_NS: the same bits), so a traced or ONNX model computes the kernel's values. On CPUs the eager
loop uses CPU_NS, which splits and compares floats without bit casts (inductor's C++ writes each bit cast as a
per-element store/load round trip): the same accuracy contract, other bits on about 0.1-0.5 % of inputs, 2.9x
faster (exact GELU at 8x128x1536 float32 on one Xeon thread: 5.5 ms instead of 16.0 ms); a recorded graph keeps
NS (_recording).
With gradients enabled, the forward computes the value and f' in one loop (they share the exponential) and the
backward multiplies by the saved f' unless a graph of the backward is asked for (create_graph), in which case it
calls the f' kernel as a Function of its own. bfloat16/float16 are computed in float32 and rounded once; no
global torch setting is changed.
"""
from __future__ import annotations

import math
import struct
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
# Under the default policy (background), calls with fewer elements than this take the float64 path even once the
# loop is built, and do not count towards BUILD_AFTER_S: a call of the compiled loop costs about 0.11 ms before
# its first element (dynamo's guards, its float arguments, inductor's wrapper), the float64 path 0.025 ms. Measured,
# exact GELU, one Xeon thread, median per call: 1024 floats 0.116 ms by the loop, 0.031 ms by the float64 path;
# 16384: 0.19 and 0.13 ms; 65536: 0.33 and 0.49 ms (torch.nn.GELU: 0.009, 0.013, 0.028 ms).
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


def _recompile_room():
    """dynamo's recompile limits raised for the duration of one build (or, in tests, one call of a built loop: the
    traced functions of the Functions share code objects); the host's settings are left as they are."""
    cfg = torch._dynamo.config
    return cfg.patch(recompile_limit=max(cfg.recompile_limit, 4096),
                     accumulated_recompile_limit=max(cfg.accumulated_recompile_limit, 16384))


def _own_code(fn, name: str):
    """A copy of the function fn with a code object of its own, named `name`. dynamo keeps compiled variants, and
    counts them against its recompile limit, per code object: with one copy per kernel, each loop's variants are
    its own, and a call's guard check never walks another kernel's entries."""
    code = fn.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


def _dense(t) -> bool:
    """Whether t's elements fill its memory without gaps or overlaps in some order of its dimensions (contiguous,
    channels-last, transposed; not sliced or expanded)."""
    expected = 1
    for d in sorted(range(t.dim()), key=t.stride):
        if t.size(d) != 1 and t.stride(d) != expected:
            return False
        expected *= t.size(d)
    return True


def _state() -> tuple:
    """The global torch state dynamo guards a compiled loop on, beyond its input and inference mode (the loop runs
    outside it): CPU autocast, the default dtype and the intra-op thread count (measured: a change of any of them
    recompiles, 1.5-6 s)."""
    return (torch.is_autocast_enabled("cpu"), torch.get_default_dtype(), torch.get_num_threads())


class _Compiled:
    """A float32 kernel (or tuple of kernels sharing their work: orders, e.g. (0, 1) for f and f') of catalogue
    entry `key`, run eagerly through torch.compile once it is built (module docstring; bfloat16/float16 are cast
    outside it, so no dtype recompiles) and traced as plain ops under a compiler. Returns a tensor of the input's
    dtype and shape, or a tuple for a tuple of kernels."""

    def __init__(self, key, orders, *fns, bf16=False):
        self.key, self.orders, self.fns = key, orders, fns
        self.bf16 = bf16  # True for GELU-form value kernels: the bfloat16 tie of core.numerics.kernels.kernel_function
        self._ready = {}  # device type -> the compiled loop, or None where it could not be built
        self._building = {}  # device type -> an Event set once its build has ended
        self._float64_s = 0.0  # seconds its calls have spent on the float64 path
        self._built_state = None  # the global state the loop was built under (_state)
        self._lock = threading.Lock()

    def _run(self, x, ns=None):
        ns = ns or _namespace(x)
        out = tuple(f(ns, x) for f in self.fns)
        return out if len(out) > 1 else out[0]

    def _float64(self, x):
        """The same values by gelulab's float64 formula and closed forms (core.numerics.formulas), rounded once to x's
        dtype: no compiler, any shape, inside any torch.func transform."""
        act = get_activation(self.key)
        out = tuple(act.formula(_xp, x) if o == 0 else closed_form(act, _xp, x.double(), o).to(x.dtype)
                    for o in self.orders)
        return out if len(out) > 1 else out[0]

    def _build(self, device: torch.device, done: threading.Event) -> None:
        self._built_state = _state()
        run = types.MethodType(_own_code(_Compiled._run, f"_run_{self.key}_{''.join(map(str, self.orders))}"), self)
        compiled = torch.compile(run, fullgraph=True, dynamic=True)
        try:
            with torch.no_grad(), _recompile_room():
                compiled(torch.linspace(-4.0, 4.0, 64, device=device))
        except Exception as e:  # noqa: BLE001 - inductor could not build the loop (e.g. no C++ compiler)
            compiled = None
            if not threading.main_thread().is_alive():  # the program ended during the build: nothing to say
                return
            with self._lock:
                first = not _build_failed
                _build_failed.append(e)
            if first:
                warnings.warn(f"gelulab: torch.compile could not build the float32 kernels ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}); eager torch calls compute in float64 "
                              "instead (same accuracy, slower). A C++ compiler on PATH (g++) gives the fast loop.",
                              RuntimeWarning, stacklevel=2)
        finally:
            self._ready[device.type] = compiled
            done.set()

    def _loop(self, x):
        """The compiled loop for x's device; None (the float64 path serves the call) while it is being built, where
        it cannot be built, under GELULAB_KERNEL_COMPILE=off, for sizes 0 and 1 (and, under the default policy,
        below LOOP_MIN_NUMEL elements, where the float64 path is faster), inside a torch.func transform
        (vmap, grad, hessian), for a call whose result is differentiated (x requires grad with grad mode on, or
        carries a forward-mode tangent: autograd differentiates the float64 ops) and under global state the loop
        was not built for (autocast, another default dtype or thread count), where calling it would recompile in
        the caller. Inference mode is left for the loop's call (__call__)."""
        policy = config.kernel_compile()
        if policy == "off" or x.numel() < 2 or torch._C._functorch.maybe_current_level() is not None:
            return None
        if policy == "background" and x.numel() < LOOP_MIN_NUMEL:
            return None
        if x.requires_grad and torch.is_grad_enabled():
            return None
        if fwAD._current_level >= 0 and fwAD.unpack_dual(x).tangent is not None:
            return None
        dev = x.device.type
        if dev in self._ready:
            return self._ready[dev] if _state() == self._built_state else None
        if policy == "background" and self._float64_s < BUILD_AFTER_S:
            return None
        with self._lock:
            done = self._building.get(dev)
            start = done is None
            if start:
                done = self._building[dev] = threading.Event()
        if start and policy == "wait":
            self._build(x.device, done)
        elif start:  # not a daemon (a daemon build cut short at exit aborts the process); at exit it stops silently
            threading.Thread(target=self._build, args=(x.device, done), name=f"gelulab-compile-{self.key}").start()
            return None
        elif policy == "wait":
            done.wait()
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
            flat = xf.as_strided((xf.numel(),), (1,), xf.storage_offset()) if dense else xf.reshape(-1)
            try:  # the loop runs outside inference mode, on a normal tensor: the state it was built for
                with torch.inference_mode(False), torch.no_grad():
                    y = loop(flat.clone() if flat.is_inference() else flat)
            except Exception:  # noqa: BLE001 - this call cannot run the loop; it stays built for the next ones
                return self._float64(x)
            back = (lambda v: v.as_strided(x.shape, xf.stride())) if dense else (lambda v: v.reshape(x.shape))
            y = tuple(back(v) for v in y) if isinstance(y, tuple) else back(y)
        return _in_dtype(y, xf, dtype, self.bf16, ns or NS)


def _in_dtype(y, xf, dtype, bf16: bool, ns):
    """Float32 kernel results y (a tensor or tuple) of float32 inputs xf, in the caller's dtype: bfloat16 and
    float16 rounded once, with the one bfloat16 tie of the value kernels (bf16; core.numerics.kernels.kernel_function)."""
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

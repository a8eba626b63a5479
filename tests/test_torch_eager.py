"""torch eager calls of gelulab's kernels: no stall, every signature, transforms and a missing C++ compiler.

The float64 path that serves eager calls until the compiled loop is built (GELULAB_KERNEL_COMPILE, core.plumbing.config)
is judged by the parity engine against the correctly rounded mpmath reference, like the compiled loop; the rest
checks which path served a call, never how long it took (`gelulab bench` times them).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import SELECTED

from gelulab.backends import get_backend
from gelulab.core.parity.known_faults import known_fault
from gelulab.experiments.parity.engine import check, evaluate, groups

pytestmark = pytest.mark.skipif("torch" not in SELECTED, reason="torch not selected (GELULAB_BACKEND)")


@pytest.mark.parity
def test_the_float64_path_meets_the_parity_tolerances(monkeypatch):
    monkeypatch.setenv("GELULAB_KERNEL_COMPILE", "off")
    b = get_backend("torch")
    bad = []
    for g in groups([b], impls=("kernel",), dtypes=("float32", "bfloat16", "float16"), modes=("eager",)):
        for region, result in evaluate(b, g).items():
            if known_fault(g, region) is None and not check(result).passed:
                bad.append(f"{g.id}-{region}")
    assert not bad, bad


def _recompile_room():
    """dynamo's recompile limits raised for one torch.compile of a kernel function: the test suite compiles the
    same functions (one code object per kernel form) in many tests."""
    import torch

    cfg = torch._dynamo.config
    return cfg.patch(recompile_limit=max(cfg.recompile_limit, 4096),
                     accumulated_recompile_limit=max(cfg.accumulated_recompile_limit, 16384))


def _child(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=900, check=False)


_SETUP = """
import threading, torch
from gelulab.backends import get_backend
from gelulab.backends.torch import kernels as TK
f = get_backend("torch").function("gelu_none", "kernel")
k0 = TK._kernels("gelu_none")[0]
x = torch.randn(4, TK.LOOP_MIN_NUMEL // 4)
"""


@pytest.mark.compile
@pytest.mark.subprocess
def test_the_first_calls_do_not_build_and_a_busy_kernel_builds_in_a_child_process(tmp_path):
    """Under the default policy: no build at the first call; calls of at least LOOP_MIN_NUMEL elements start one,
    in a child process, once they have spent BUILD_AFTER_S on the float64 path; smaller calls do not count towards
    it. The calling process starts no thread, compiles nothing (inductor's code generators are never imported, dynamo
    captures no frame) and leaves torch.nn.Module.__call__ as it is; once the child has written the package, a
    call loads it and every call of 2 elements or more runs the loop, within 1 ULP of mpmath."""
    code = _SETUP + """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
from test_kernels import X, TINY
from gelulab.core.parity.reference import reference
from gelulab.core.numerics.metrics import ulp_distance
call = torch.nn.Module.__call__
small = torch.randn(TK.LOOP_MIN_NUMEL - 1)
for _ in range(50):
    f(small)
assert k0._float64_s == 0.0 and not k0._builds, "calls below LOOP_MIN_NUMEL counted towards a build"
y = f(x)
assert not k0._builds and not k0._ready, "the first call started a build"
while not k0._builds:
    f(x)
proc = k0._builds["cpu"]
assert proc.args[:3] == [sys.executable, "-m", "gelulab.backends.torch.kernel_build"], proc.args
assert [t.name for t in threading.enumerate()] == ["MainThread"], threading.enumerate()
assert proc.wait() == 0
f(x)
built = k0._ready["cpu"]
assert built is not None, "the finished build was not loaded"
sizes = []
k0._ready["cpu"] = lambda v: sizes.append(v.numel()) or built(v)
xs = torch.from_numpy(np.resize(X, TK.LOOP_MIN_NUMEL))
got = f(xs)[:X.size].numpy()
f(small)
assert sizes == [xs.numel(), small.numel()], sizes
ref = reference("gelu_none", X, "float32", 0)
x64, r64 = X.astype(np.float64), ref.astype(np.float64)
normal = ((x64 == 0) | (np.abs(x64) >= TINY)) & ((r64 == 0) | (np.abs(r64) >= TINY))
assert ulp_distance(got, ref, "float32")[normal].max() <= 1
assert not any(m.startswith("torch._inductor.codegen") for m in sys.modules), "the process compiled"
from torch._dynamo.utils import counters
assert not counters["stats"]["unique_graphs"], dict(counters["stats"])
assert torch.nn.Module.__call__ is call
assert [t.name for t in threading.enumerate()] == ["MainThread"], threading.enumerate()
print("ok")
""".replace("{tests!r}", repr(os.path.dirname(os.path.abspath(__file__))))
    r = _child(code, GELULAB_KERNEL_COMPILE="background", GELULAB_KERNEL_CACHE=str(tmp_path / "kernels"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


@pytest.mark.compile
@pytest.mark.subprocess
def test_transforms_and_new_shapes_leave_the_compiled_loop_in_place():
    import torch

    from gelulab.backends.torch import kernels as TK

    f = get_backend("torch").function("gelu_tanh", "kernel")
    k0 = TK._kernels("gelu_tanh")[0]
    x = torch.linspace(-6, 6, 301)
    y = f(x)
    loop = k0._ready["cpu"]
    assert loop is not None
    rows = torch.stack([x[:100], x[100:200], x[200:300]])
    v = torch.func.vmap(f)(rows)
    h = torch.func.hessian(lambda t: f(t).sum())(x[:5])
    # each path is within 1 ULP of the correctly rounded value (the parity suite), so they are within 2 of each other
    np.testing.assert_array_max_ulp(v.reshape(-1).numpy(), y[:300].numpy(), maxulp=2)
    formula = get_backend("torch").function("gelu_tanh", "formula")
    d2 = get_backend("torch").function("gelu_tanh", "formula", order=2)
    np.testing.assert_array_max_ulp(h.diagonal().numpy(), d2(x[:5]).numpy(), maxulp=2)
    direct = loop(x)
    assert torch.equal(f(x), direct)  # a plain call after the transforms runs the compiled loop again
    with torch.inference_mode():  # serving a model: the loop runs (outside inference mode), no recompile
        assert torch.equal(f(x), direct)
    for shape in ((), (0,), (1,), (3, 1, 5), (2, 3, 4)):
        t = torch.randn(shape)
        for view in (t, t.transpose(0, -1) if t.dim() > 1 else t, t.expand(2, *shape) if t.dim() else t):
            out = f(view)
            assert out.shape == view.shape and out.dtype == view.dtype
            np.testing.assert_array_max_ulp(out.numpy(), formula(view).numpy(), maxulp=1)
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert f(cl).is_contiguous(memory_format=torch.channels_last)  # the layout of torch's own elementwise ops


@pytest.mark.compile
@pytest.mark.subprocess
def test_without_a_cpp_compiler_one_warning_and_the_float64_path(tmp_path):
    """Two builds fail, one warning: GELU's value kernel, then, through a gradient, ReLU's value-and-f' kernel (the
    second build of a kernel of its own, in a child process of its own)."""
    code = _SETUP + """
import warnings
r = get_backend("torch").function("relu", "kernel")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    a, b = f(x), f(x * 2)
    torch.autograd.grad(r(x.requires_grad_()).sum(), x)
notes = [str(m.message) for m in w if "could not build the float32 kernels" in str(m.message)]
assert len(notes) == 1, notes
assert k0._ready["cpu"] is None and TK._kernels("relu")[3]._ready["cpu"] is None
assert len(TK._build_failed) == 2, TK._build_failed
ref = TK._kernels("gelu_none")[0]._float64(x.detach())
assert torch.equal(a, ref)
print("ok")
"""
    r = _child(code, GELULAB_KERNEL_COMPILE="wait", CXX="/nonexistent/g++", CC="/nonexistent/gcc",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), GELULAB_KERNEL_CACHE=str(tmp_path / "kernels"))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_an_eager_call_while_any_thread_compiles_runs_eagerly(monkeypatch):
    """torch.compiler.is_compiling() reads a process-wide flag that is True while any thread compiles: a kernel's
    background build, or a model compiled in another thread. Eager calls made meanwhile are not traced calls: value,
    gradient and forward-mode derivative within 1 ULP of mpmath (the flag set here stands for the other thread)."""
    monkeypatch.setenv("GELULAB_KERNEL_COMPILE", "off")
    import torch
    from test_kernels import TINY, X

    from gelulab.core.numerics.metrics import ulp_distance
    from gelulab.core.parity.reference import reference

    f = get_backend("torch").function("gelu_none", "kernel")
    x = torch.from_numpy(X)
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
    y = f(x)
    xg = x.clone().requires_grad_()
    (d,) = torch.autograd.grad(f(xg).sum(), xg)
    _, t = torch.func.jvp(f, (x,), (torch.ones_like(x),))
    monkeypatch.undo()
    for order, got in ((0, y), (1, d), (1, t)):
        ref = reference("gelu_none", X, "float32", order)
        normal = (ref == 0) | (np.abs(ref.astype(np.float64)) >= TINY)
        assert ulp_distance(got.detach().numpy(), ref, "float32")[normal].max() <= 1, order


def test_both_kernel_namespaces_meet_the_ulp_goals_and_the_cpu_one_needs_uncontracted_products(monkeypatch):
    """On CPUs the loop splits floats arithmetically (CPU_NS, Dekker's split); on GPUs, and where inductor's C++
    would contract products into FMAs, it masks bits (NS). Both are judged here, op by op on the CPU, against the
    correctly rounded mpmath reference (the 2048 spread bit patterns and hard points of tests/test_kernels.py)."""
    import torch
    from test_kernels import TINY, X

    from gelulab.backends.torch import kernels as TK
    from gelulab.core.activations import ACTIVATIONS
    from gelulab.core.numerics.metrics import ulp_distance
    from gelulab.core.parity.reference import reference
    from gelulab.core.parity.tolerances import KERNEL_GOALS

    x = torch.from_numpy(X)
    assert TK._namespace(x) is TK.CPU_NS
    monkeypatch.setattr(TK._inductor_config.cpp, "enable_floating_point_contract_flag", "fast")
    assert TK._namespace(x) is TK.NS
    x64 = X.astype(np.float64)
    worst = {}
    for key, act in ACTIVATIONS.items():
        if act.kernel is None:
            continue
        for order in (0, 1, 2):
            ref = reference(key, X, "float32", order)
            r64 = ref.astype(np.float64)
            normal = ((x64 == 0) | (np.abs(x64) >= TINY)) & ((r64 == 0) | (np.abs(r64) >= TINY))
            for ns in (TK.NS, TK.CPU_NS):
                with torch.no_grad():
                    y = act.kernel.function(order)(ns, x).numpy()
                u = ulp_distance(y, ref, "float32")[normal]
                worst[(key, order, type(ns).__name__)] = u.max()
                assert u.max() <= KERNEL_GOALS[("float32", order)].max_ulp, (key, order, type(ns).__name__, u.max())
    assert len(worst) == 2 * 3 * sum(a.kernel is not None for a in ACTIVATIONS.values())


def test_a_compiled_caller_on_a_cpu_gets_one_opaque_op_and_an_export_gets_the_ops(monkeypatch):
    """Inside torch.compile a CPU tensor's kernel call is one gelulab::kernel op of the caller's graph, computing
    what the eager loop computes (bit for bit) within 1 ULP of mpmath; torch.export records the kernel's own ops,
    so its graph holds no gelulab op and runs without gelulab."""
    monkeypatch.setenv("GELULAB_KERNEL_COMPILE", "off")  # the op's values come from the float64 path: no build here
    import torch
    from test_kernels import TINY, X

    from gelulab.core.numerics.metrics import ulp_distance
    from gelulab.core.parity.reference import reference

    f = get_backend("torch").function("gelu_none", "kernel")
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.from_numpy(X)
    with torch.no_grad(), _recompile_room():  # f's code is every kernel function's: other tests compiled it too
        y = torch.compile(f, backend=record, fullgraph=True, dynamic=False)(x)
    targets = {n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"}
    assert torch.ops.gelulab.kernel.default in targets, targets
    assert torch.equal(y, f(x))
    ref = reference("gelu_none", X, "float32", 0)
    normal = np.abs(ref.astype(np.float64)) >= TINY
    assert ulp_distance(y.numpy(), ref, "float32")[normal].max() <= 1
    from gelulab.layers.torch import GELU

    ep = torch.export.export(torch.nn.Sequential(GELU(impl="kernel")), (x[:64].reshape(8, 8),))
    names = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert not any("gelulab" in n for n in names) and "aten.__and__.Scalar" in names, names


@pytest.mark.compile
def test_the_opaque_op_keeps_the_fake_layout_and_transforms_inside_compile_differentiate_the_ops(monkeypatch):
    """The compiled graph is built for torch.empty_like(x)'s layout: the op returns that layout for an input that
    is not dense too (the loop's result is contiguous there); torch.func.grad inside torch.compile differentiates
    the kernel's recorded ops (the op has no autograd rule) and gives f'(x) of mpmath."""
    monkeypatch.setenv("GELULAB_KERNEL_COMPILE", "wait")
    import torch

    import gelulab
    from gelulab.backends.torch import kernels  # noqa: F401 - registers the gelulab:: ops
    from gelulab.core.parity.reference import reference

    x = torch.linspace(-4.0, 4.0, 48).reshape(6, 8).t()[::2]  # (4, 6), strides (2, 8): not dense
    for which in (0, 1):
        y = torch.ops.gelulab.kernel(x, "gelu_none", which)
        assert y.stride() == torch.empty_like(x).stride()
    y, d = torch.ops.gelulab.kernel_pair(x, "gelu_none")
    assert y.stride() == d.stride() == torch.empty_like(x).stride()

    def f(v):
        return gelulab.gelu(v, impl="kernel").t().reshape(-1) * 2.0

    with _recompile_room():
        assert torch.equal(torch.compile(f, backend="aot_eager", fullgraph=True)(x), f(x))

    def g(u):
        return torch.func.grad(lambda v: gelulab.gelu(v, impl="kernel").sum())(u)

    z = torch.linspace(-4.0, 4.0, 35).reshape(5, 7)
    ref = reference("gelu_none", z.numpy().ravel(), "float32", 1).reshape(5, 7)
    # autodiff of the value's float32 ops, not the f' kernel: not held to its 1 ULP, a few float32 epsilons
    with _recompile_room():
        got = torch.compile(g, backend="eager")(z).numpy()
    np.testing.assert_allclose(got, ref, rtol=0, atol=4e-7)

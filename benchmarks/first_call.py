"""What a torch user feels of gelulab's default GELU: the first call in a fresh process, a new shape, a call after a
torch.func transform, and the steady state, beside torch.nn.GELU, measured side by side in one run.

    python -m gelulab.benchmarks.first_call [--size 8,128,1536] [--repeats 7]

Each first-call figure comes from a fresh Python process (torch imported, then one timed call), so it includes
what a user's first call includes; one thread (torch.set_num_threads(1)); medians over --repeats processes or
calls, and ratios against the builtin measured in the same process. Scenarios, each with an empty inductor cache:
the default (GELULAB_KERNEL_COMPILE unset: background), =wait (the build in the caller, as before), and no C++
compiler (CXX pointing nowhere). Prints one Markdown table; writes nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, time, torch
torch.set_num_threads(1)
import gelulab
from gelulab.backends import get_backend
shape = tuple(json.loads(sys.argv[1])); what = sys.argv[2]
x = torch.randn(shape)
builtin = torch.nn.GELU()
f = get_backend("torch").function("gelu_none", "kernel")
def once(fn, a):
    t0 = time.perf_counter(); fn(a); return time.perf_counter() - t0
out = {}
if what == "first":
    out["builtin_first"] = once(builtin, x)
    out["first"] = once(f, x)
    out["second"] = once(f, x)
else:  # steady: wait for the build, then medians of plain calls, a new shape, after a vmap
    from gelulab.backends.torch import kernels as TK
    k0 = TK._kernels("gelu_none")[0]
    while "cpu" not in k0._building:  # the build starts once the float64 calls have cost BUILD_AFTER_S
        f(x)
    k0._building["cpu"].wait()
    def med(fn, a, r=int(sys.argv[3])):
        return sorted(once(fn, a) for _ in range(r))[r // 2]
    f(x)
    out["builtin"] = med(builtin, x)
    out["kernel"] = med(f, x)
    out["float64"] = med(TK._kernels("gelu_none")[0]._float64, x)
    half = torch.randn(shape[0] // 2 or 1, *shape[1:])
    out["new_shape_first"] = once(f, half)
    torch.func.vmap(f)(x[:4])
    out["after_vmap"] = med(f, x)
print(json.dumps(out))
"""


def _run(shape, what, env, repeats) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(shape), what, str(repeats)],
                       env={**os.environ, **env}, capture_output=True, text=True, timeout=1800, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"benchmark child failed: {r.stderr.strip().splitlines()[-1:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gelulab.benchmarks.first_call", description=__doc__.split("\n")[0])
    p.add_argument("--size", default="8,128,1536", help="input shape, comma-separated (default 8,128,1536)")
    p.add_argument("--repeats", type=int, default=5, help="fresh processes per first-call figure (default 5)")
    a = p.parse_args(argv)
    try:
        shape = [int(v) for v in a.size.split(",")]
        if not shape or min(shape) < 1 or a.repeats < 1:
            raise ValueError
    except ValueError:
        p.error(f"--size {a.size!r} / --repeats {a.repeats!r}: expected positive integers")
    scenarios = {
        "default (background build)": {},
        "wait, empty inductor cache": {"GELULAB_KERNEL_COMPILE": "wait"},
        "no C++ compiler (default)": {"CXX": "/nonexistent/g++", "CC": "/nonexistent/gcc"},
    }
    os.environ.pop("GELULAB_KERNEL_COMPILE", None)  # the default, unless a scenario names it
    rows = ["| scenario | first call (s) | ÷ nn.GELU first call | second call (s) |", "|---|---|---|---|"]
    for name, env in scenarios.items():
        runs = []
        for _ in range(a.repeats):
            with tempfile.TemporaryDirectory() as cache:
                runs.append(_run(shape, "first", {**env, "TORCHINDUCTOR_CACHE_DIR": cache}, a.repeats))
        m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        rows.append(f"| {name} | {m['first']:.3f} | {statistics.median(r['first'] / r['builtin_first'] for r in runs):.1f} | "
                    f"{m['second']:.3f} |")
    print(f"torch, exact GELU, impl='kernel', input {tuple(shape)} float32, 1 thread, median of {a.repeats} fresh "
          "processes each\n")
    print("\n".join(rows))
    s = _run(shape, "steady", {}, max(a.repeats, 5))
    print(f"\nsteady state (after the background build): compiled loop {s['kernel'] / s['builtin']:.1f}× nn.GELU, "
          f"float64 path {s['float64'] / s['builtin']:.1f}×; first call at a new shape {s['new_shape_first']:.3f} s; "
          f"a plain call after torch.func.vmap {s['after_vmap'] / s['kernel']:.2f}× the one before")
    return 0


if __name__ == "__main__":
    sys.exit(main())

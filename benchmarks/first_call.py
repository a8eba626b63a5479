"""What a torch user feels of gelulab's default GELU layer: the first call in a fresh process, a new shape, a call
after a torch.func transform, and the steady state, beside torch.nn.GELU, measured side by side in one run.

    python -m gelulab.benchmarks.first_call [--size 8,128,1536] [--new-size 4,64,1536] [--repeats 3]
    (also part of `gelulab bench --model`, benchmarks/model.py)

Each first-call figure comes from a fresh Python process (torch and gelulab.layers.torch imported, then one timed
call of `gelulab.layers.torch.GELU()` and one of `torch.nn.GELU()`), so it includes what a user's first call
includes: one thread (torch.set_num_threads), GELULAB_KERNEL_COMPILE as the user's environment has it (unset:
the default), an empty inductor cache (TORCHINDUCTOR_CACHE_DIR a new temporary folder per process), and medians over
`repeats` processes. Scenarios: the cold cache with the C++ compiler on PATH, and again with no C++ compiler: PATH
replaced by a folder of links to every program on it except the C and C++ compilers (gcc, g++, cc, c++, clang,
...; CC and CXX unset), the child checking that none is found. In each first-call process, after the first call,
the first call at another shape. A further fresh process measures the steady state: calls until the kernel's
compiled loop (when gelulab builds one) is built (`settle_s` at most; 10 s of calls where this version of the
kernel has no build to wait for), then medians of plain calls of both layers,
the first call at yet another shape, and plain calls after one torch.func.vmap call against those before it.
All times in seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, shutil, sys, time
args = json.loads(sys.argv[1])
t0 = time.perf_counter()
import torch
torch.set_num_threads(args["threads"])
import gelulab.layers.torch as L
out = {"import_s": time.perf_counter() - t0, "threads": torch.get_num_threads(),
       "compiler_found": [c for c in ("g++", "gcc", "c++", "cc", "clang++", "clang") if shutil.which(c)]}
g = torch.Generator().manual_seed(0)
x = torch.randn(args["shape"], generator=g)
new = torch.randn(args["new_shape"], generator=g)
builtin, layer = torch.nn.GELU(), L.GELU()
def once(fn, a):
    t = time.perf_counter(); fn(a); return time.perf_counter() - t
def median(fn, a, r):
    return sorted(once(fn, a) for _ in range(r))[r // 2]
if args["what"] == "first":
    out["builtin_first_s"] = once(builtin, x)
    out["first_s"] = once(layer, x)
    out["second_s"] = once(layer, x)
    out["builtin_new_shape_first_s"] = once(builtin, new)
    out["new_shape_first_s"] = once(layer, new)
else:  # steady
    start = time.perf_counter()
    out["settled_by"] = "time limit" if args["settle_s"] > 0 else "no wait"
    try:  # gelulab's build of the compiled loop, where this version has one: wait for it to end
        from gelulab.backends.torch import kernels as TK
        objects = [k for k in TK._kernels("gelu_none") if hasattr(k, "_building")]
    except Exception:
        objects = []
    limit = args["settle_s"] if objects else min(args["settle_s"], 10.0)  # no build to wait for: 10 s of calls
    while time.perf_counter() - start < limit:
        layer(x)
        events = [e for k in objects for e in getattr(k, "_building", {}).values()]
        if events:
            for e in events:
                e.wait(max(0.0, limit - (time.perf_counter() - start)))
            out["settled_by"] = "build ended" if all(e.is_set() for e in events) else "time limit"
            break
    out["settle_s"] = time.perf_counter() - start
    layer(x)
    builtin(x)
    r = args["calls"]
    out["builtin_s"] = median(builtin, x, r)
    out["kernel_s"] = median(layer, x, r)
    out["builtin_new_shape_first_s"] = once(builtin, new)
    out["new_shape_first_s"] = once(layer, new)
    before = median(layer, x, r)
    torch.func.vmap(layer)(x[:2])
    out["before_vmap_s"], out["after_vmap_s"] = before, median(layer, x, r)
print(json.dumps(out))
"""

# Names of C and C++ compilers hidden from PATH in the no-compiler scenario (gcc-12, x86_64-linux-gnu-g++, cc, ...)
COMPILER = re.compile(r"gcc|g\+\+|clang|^(cc|c\+\+|cpp|c89|c99|icc|icpc|icx|icpx)(-[\d.]+)?$|-(cc|c\+\+|cpp)(-[\d.]+)?$")
TIMEOUT_S = 1800  # one child process at most (a first call once took 101 s on the 2-core reference machine)


def no_compiler_path(folder: str | Path, path: str | None = None) -> str:
    """A PATH of one folder: links in `folder` to every executable on `path` (default $PATH; the first of each
    name, as a shell finds it) except the compilers COMPILER matches. Returns the folder as a PATH string."""
    folder = Path(folder)
    for directory in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            target = folder / entry.name
            if COMPILER.search(entry.name) or target.exists() or target.is_symlink():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    return str(folder)


def _child(what: str, env: dict, **args) -> dict:
    """Run _CHILD in a fresh interpreter with os.environ updated by `env` (None values removed); returns its JSON.
    Raises RuntimeError with the child's last error line when it fails."""
    full = {**os.environ, **{k: v for k, v in env.items() if v is not None}}
    for k in [k for k, v in env.items() if v is None]:
        full.pop(k, None)
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps({"what": what, **args})], env=full,
                       capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()[-1:] or [f"exit code {r.returncode}"]
        raise RuntimeError(f"first-call child process failed: {tail[0]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(shape, new_shapes, repeats: int = 3, threads: int = 1, settle_s: float = 300.0, calls: int = 9,
            progress=None) -> dict:
    """Every figure of the module docstring.

    shape: the input shape of the first calls (float32 N(0, 1)); new_shapes: two other shapes, the first for the
    new-shape call of the first-call processes, the second for the steady-state process; repeats: fresh processes
    per scenario (medians); threads: torch threads in the children; settle_s: at most this long the steady-state
    process calls the layer waiting for its compiled loop (0: no wait); calls: plain calls per median there;
    progress: called with a short description before each child process.
    Returns {"scenarios": {name: {"env": what was changed, "runs": [child JSON], "median": {figure: s}}},
    "steady": child JSON, "shape", "new_shapes", "repeats"}. Raises RuntimeError if a child process fails.
    """
    result = {"shape": list(shape), "new_shapes": [list(s) for s in new_shapes], "repeats": repeats,
              "scenarios": {}}
    base = {"GELULAB_KERNEL_COMPILE": None}  # the user's default, whatever the parent runs under
    common = {"shape": list(shape), "new_shape": list(new_shapes[0]), "threads": threads}
    with tempfile.TemporaryDirectory(prefix="gelulab-nocc-") as shadow:
        scenarios = {
            "cold cache": {},
            "cold cache, no C++ compiler": {"PATH": no_compiler_path(shadow), "CC": None, "CXX": None},
        }
        for name, env in scenarios.items():
            runs = []
            for i in range(repeats):
                if progress:
                    progress(f"first call, {name} ({i + 1}/{repeats})")
                with tempfile.TemporaryDirectory(prefix="gelulab-inductor-") as cache:
                    runs.append(_child("first", {**base, **env, "TORCHINDUCTOR_CACHE_DIR": cache}, **common))
            shown = {k: ("<no compiler>" if k == "PATH" else v) for k, v in env.items()}
            result["scenarios"][name] = {
                "env": shown, "runs": runs,
                "median": {k: statistics.median(r[k] for r in runs) for k in runs[0] if k.endswith("_s")}}
    if progress:
        progress("steady state")
    with tempfile.TemporaryDirectory(prefix="gelulab-inductor-") as cache:
        result["steady"] = _child("steady", {**base, "TORCHINDUCTOR_CACHE_DIR": cache},
                                  **{**common, "new_shape": list(new_shapes[1])}, settle_s=settle_s, calls=calls)
    return result


def rows(result: dict) -> list[dict]:
    """The table rows of a `measure` result: {"case", "gelulab_s", "builtin_s", "ratio"} (ratio: gelulab ÷
    torch.nn.GELU, or after ÷ before for the vmap row; times in seconds)."""
    shape = "×".join(map(str, result["shape"]))
    new1, new2 = ("×".join(map(str, s)) for s in result["new_shapes"])
    out = []
    for name, s in result["scenarios"].items():
        m = s["median"]
        out.append({"case": f"first call in a fresh process, {name} ({shape})", "gelulab_s": m["first_s"],
                    "builtin_s": m["builtin_first_s"], "ratio": m["first_s"] / m["builtin_first_s"]})
        out.append({"case": f"then a new shape ({new1}), {name}", "gelulab_s": m["new_shape_first_s"],
                    "builtin_s": m["builtin_new_shape_first_s"],
                    "ratio": m["new_shape_first_s"] / m["builtin_new_shape_first_s"]})
    st = result["steady"]
    out.append({"case": f"warm: a new shape ({new2}), first call", "gelulab_s": st["new_shape_first_s"],
                "builtin_s": st["builtin_new_shape_first_s"],
                "ratio": st["new_shape_first_s"] / st["builtin_new_shape_first_s"]})
    out.append({"case": f"warm: plain call ({shape})", "gelulab_s": st["kernel_s"], "builtin_s": st["builtin_s"],
                "ratio": st["kernel_s"] / st["builtin_s"]})
    out.append({"case": "warm: plain call after one torch.func.vmap ÷ before it", "gelulab_s": st["after_vmap_s"],
                "builtin_s": None, "ratio": st["after_vmap_s"] / st["before_vmap_s"]})
    return out


def markdown(result: dict) -> str:
    """The rows as a Markdown table (seconds to 3 significant digits, ratios to 2 decimals)."""
    lines = ["| torch layer | gelulab GELU() (s) | torch.nn.GELU() (s) | ratio |", "|---|---|---|---|"]
    for r in rows(result):
        builtin = "" if r["builtin_s"] is None else f"{r['builtin_s']:.3g}"
        lines.append(f"| {r['case']} | {r['gelulab_s']:.3g} | {builtin} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def _shape(text: str) -> list[int]:
    try:
        shape = [int(v) for v in text.split(",")]
    except ValueError:
        shape = []
    if not shape or min(shape) < 1:
        raise ValueError(f"shape {text!r}; expected positive integers separated by commas, e.g. 8,128,1536")
    return shape


def main(argv=None) -> int:
    """`python -m gelulab.benchmarks.first_call`: print the Markdown table; returns 0 (2 on a bad option)."""
    p = argparse.ArgumentParser(prog="python -m gelulab.benchmarks.first_call", description=__doc__.split("\n")[0])
    p.add_argument("--size", default="8,128,1536", help="input shape, comma-separated (default 8,128,1536)")
    p.add_argument("--new-size", default="4,64,1536", help="the new shape after the first call (default 4,64,1536)")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per first-call figure (default 3)")
    a = p.parse_args(argv)
    try:
        shape, new = _shape(a.size), _shape(a.new_size)
        if a.repeats < 1:
            raise ValueError(f"--repeats {a.repeats}; expected a positive integer")
    except ValueError as e:
        print(f"gelulab.benchmarks.first_call: error: {e}", file=sys.stderr)
        return 2
    result = measure(shape, [new, [max(1, new[0] // 2), *new[1:]]], a.repeats,
                     progress=lambda what: print(f"… {what}", file=sys.stderr))
    print(f"torch, exact GELU, impl='kernel' (default), float32 N(0, 1), 1 thread, median of {a.repeats} fresh "
          "processes per first-call row\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

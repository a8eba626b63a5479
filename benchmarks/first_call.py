"""What a torch user feels of gelulab's default GELU layer: the first call in a fresh process, a new shape, a call
after a torch.func transform, and the steady state, beside torch.nn.GELU, measured side by side in one run. The
scripts of the fresh processes are the backends' (backends/<name>/model_bench.py: FIRST_CALL_SCRIPT, where a
backend has first-call figures, torch's; EXIT_SCRIPT for the process exit); this module runs them and tabulates.

    python -m gelulab.benchmarks.first_call [--size 8,128,1536] [--new-size 4,64,1536] [--repeats 3]
    (also part of `gelulab bench --model`, benchmarks/model.py)

Each first-call figure comes from a fresh Python process (torch and gelulab.layers.torch imported, then one timed
call of `torch.nn.GELU()` and one of `gelulab.layers.torch.GELU()` with no impl argument, whatever the library's
default is (recorded as "default_impl"), then, with kernel=True, one of `GELU(impl="kernel")`), so it includes what
a user's first call includes: one thread (torch.set_num_threads), GELULAB_KERNEL_COMPILE as the user's environment
has it (unset: the default), empty caches (TORCHINDUCTOR_CACHE_DIR and GELULAB_KERNEL_CACHE a new temporary folder
per process), and medians over `repeats` processes. Scenarios: the cold cache with the C++ compiler on PATH, and again
with no C++ compiler: PATH replaced by a folder of links to every program on it except the C and C++ compilers (gcc,
g++, cc, c++, clang, ...; CC and CXX unset), the child checking that none is found. In each first-call process, after
the first call, the first call at another shape. A further fresh process (the user's kernel cache) measures the steady
state: with kernel=True, calls until the kernel's compiled loop (when gelulab builds one) is built (`settle_s` at most;
10 s of calls where this version of the kernel has no build to wait for), then medians of plain calls of the layers,
the first call at yet another shape, and plain calls after one torch.func.vmap call against those before it (of
the kernel layer with kernel=True, else of the default layer).

Also here: process_exit(), the time from a script's last line to its process's exit (the parent's wait()
returning), for a script that builds a small model with gelulab's default layer (or the framework's own, or the
kernel) and runs a few training steps, in torch, Keras (TensorFlow) or Flax.
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

from gelulab.backends.tools import tool, with_tool

TOOL = "model_bench"  # the backend module holding the scripts (backends/<name>/model_bench.py)


def first_call_backends() -> tuple[str, ...]:
    """The backends whose model_bench module has first-call figures (FIRST_CALL_SCRIPT), in the registry's order;
    imports no framework."""
    return tuple(b for b in with_tool(TOOL) if hasattr(tool(b, TOOL), "FIRST_CALL_SCRIPT"))

# Names of C and C++ compilers hidden from PATH in the no-compiler scenario (gcc-12, x86_64-linux-gnu-g++, cc, ...)
COMPILER = re.compile(r"gcc|g\+\+|clang|^(cc|c\+\+|cpp|c89|c99|icc|icpc|icx|icpx)(-[\d.]+)?$"
                      r"|-(cc|c\+\+|cpp)(-[\d.]+)?$")
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


def _child(backend: str, what: str, env: dict, **args) -> dict:
    """Run `backend`'s FIRST_CALL_SCRIPT in a fresh interpreter with os.environ updated by `env` (None values removed);
    returns its JSON. Raises RuntimeError with the child's last error line when it fails."""
    full = {**os.environ, **{k: v for k, v in env.items() if v is not None}}
    for k in [k for k, v in env.items() if v is None]:
        full.pop(k, None)
    script = tool(backend, TOOL).FIRST_CALL_SCRIPT
    r = subprocess.run([sys.executable, "-c", script, json.dumps({"what": what, **args})], env=full,
                       capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if r.returncode != 0:
        tail = r.stderr.strip().splitlines()[-1:] or [f"exit code {r.returncode}"]
        raise RuntimeError(f"first-call child process failed: {tail[0]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(shape, new_shapes, repeats: int = 3, threads: int = 1, settle_s: float = 300.0, calls: int = 9,
            progress=None, kernel: bool = True, backend: str | None = None) -> dict:
    """Every figure of the module docstring.

    shape: the input shape of the first calls (float32 N(0, 1)); new_shapes: two other shapes, the first for the
    new-shape call of the first-call processes, the second for the steady-state process; repeats: fresh processes
    per scenario (medians); threads: torch threads in the children; settle_s: at most this long the steady-state
    process calls the layer waiting for its compiled loop (0: no wait); calls: plain calls per median there;
    progress: called with a short description before each child process; kernel: also time GELU(impl="kernel");
    backend: whose FIRST_CALL_SCRIPT runs (default: the first of first_call_backends()). Returns {"backend", "framework"
    (the framework's layer the rows are timed against), "transform", "scenarios": {name: {"env": what was changed,
    "runs": [child JSON], "median": {figure: s}}}, "steady": child JSON, "shape", "new_shapes", "repeats"}. Raises
    RuntimeError if a child process fails.
    """
    backend = backend or first_call_backends()[0]
    mod = tool(backend, TOOL)
    cache_env = mod.FIRST_CALL_CACHE
    result = {"backend": backend, "framework": mod.FIRST_CALL_FRAMEWORK, "transform": mod.FIRST_CALL_TRANSFORM,
              "shape": list(shape), "new_shapes": [list(s) for s in new_shapes], "repeats": repeats,
              "kernel": bool(kernel), "scenarios": {}}
    base = {"GELULAB_KERNEL_COMPILE": None}  # the user's default, whatever the parent runs under
    common = {"shape": list(shape), "new_shape": list(new_shapes[0]), "threads": threads, "kernel": bool(kernel)}
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
                    runs.append(_child(backend, "first", {**base, **env, cache_env: cache,
                                                 "GELULAB_KERNEL_CACHE": os.path.join(cache, "gelulab")}, **common))
            shown = {k: ("<no compiler>" if k == "PATH" else v) for k, v in env.items()}
            result["scenarios"][name] = {
                "env": shown, "runs": runs,
                "median": {k: statistics.median(r[k] for r in runs) for k in runs[0] if k.endswith("_s")}}
    result["default_impl"] = runs[0].get("default_impl")
    if progress:
        progress("steady state")
    with tempfile.TemporaryDirectory(prefix="gelulab-inductor-") as cache:
        result["steady"] = _child(backend, "steady", {**base, cache_env: cache},
                                  **{**common, "new_shape": list(new_shapes[1])}, settle_s=settle_s, calls=calls)
    return result


def rows(result: dict) -> list[dict]:
    """The table rows of a `measure` result: {"case", "gelulab_s" (the default layer), "kernel_s" (None without
    kernel), "builtin_s", "ratio" (default ÷ the framework's layer, e.g. torch.nn.GELU, or after ÷ before for the
    transform's row),
    "kernel_ratio"}; times in seconds."""
    shape = "×".join(map(str, result["shape"]))
    new1, new2 = ("×".join(map(str, s)) for s in result["new_shapes"])

    def row(case, ours, builtin, kernel=None):
        return {"case": case, "gelulab_s": ours, "builtin_s": builtin, "ratio": ours / builtin,
                "kernel_s": kernel, "kernel_ratio": None if kernel is None else kernel / builtin}

    out = []
    for name, s in result["scenarios"].items():
        m = s["median"]
        out.append(row(f"first call in a fresh process, {name} ({shape})", m["first_s"], m["builtin_first_s"],
                       m.get("kernel_first_s")))
        out.append(row(f"then a new shape ({new1}), {name}", m["new_shape_first_s"], m["builtin_new_shape_first_s"],
                       m.get("kernel_new_shape_first_s")))
    st = result["steady"]
    out.append(row(f"warm: a new shape ({new2}), first call", st["new_shape_first_s"],
                   st["builtin_new_shape_first_s"], st.get("kernel_new_shape_first_s")))
    out.append(row(f"warm: plain call ({shape})", st["default_s"], st["builtin_s"], st.get("kernel_s")))
    which = "GELU(impl='kernel')" if result.get("kernel") else "GELU()"
    out.append({"case": f"warm: plain call of {which} after one {result['transform']} ÷ before it",
                "gelulab_s": st["after_vmap_s"], "builtin_s": None, "ratio": st["after_vmap_s"] / st["before_vmap_s"],
                "kernel_s": None, "kernel_ratio": None})
    return out


def markdown(result: dict) -> str:
    """The rows as a Markdown table (seconds to 3 significant digits, ratios to 2 decimals): the default layer
    (its impl in the header), the kernel when measured, the framework's layer (torch.nn.GELU), and the ratios to
    it."""
    kernel = bool(result.get("kernel"))
    default = f"gelulab GELU() default ({result.get('default_impl') or '?'}) (s)"
    backend, framework = result["backend"], result["framework"]
    head = [f"{backend} layer", default] + (["GELU(impl='kernel') (s)"] if kernel else []) + [
        f"{framework} (s)", f"default ÷ {backend}"]
    head += [f"kernel ÷ {backend}"] if kernel else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows(result):
        builtin = "" if r["builtin_s"] is None else f"{r['builtin_s']:.3g}"
        cells = [r["case"], f"{r['gelulab_s']:.3g}"]
        if kernel:
            cells.append("" if r["kernel_s"] is None else f"{r['kernel_s']:.3g}")
        cells += [builtin, f"{r['ratio']:.2f}"]
        if kernel:
            cells.append("" if r["kernel_ratio"] is None else f"{r['kernel_ratio']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def exit_once(framework: str, arm: str, threads: int = 1, steps: int = 5, env: dict | None = None) -> dict:
    """One fresh process of backend `framework`'s EXIT_SCRIPT (backends/<name>/model_bench.py) with `arm`: {"exit_s":
    seconds from its last line (the timestamp it prints) to the parent's wait() returning, "total_s": the whole process,
    "returncode", the child's JSON}. The child runs under the user's default GELULAB_KERNEL_COMPILE (the variable
    unset), `env` added. Raises
    RuntimeError (the child's last error line) when it fails or prints no timestamp."""
    import time

    full = {**os.environ, **(env or {})}
    full.pop("GELULAB_KERNEL_COMPILE", None)  # the user's default, whatever the parent runs under
    with tempfile.TemporaryFile(mode="w+") as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", tool(framework, TOOL).EXIT_SCRIPT,
                                 json.dumps({"arm": arm, "threads": threads, "steps": steps})],
                                stdout=subprocess.PIPE, stderr=err, env=full, text=True)
        last = None
        for line in proc.stdout:  # ends at EOF, i.e. when the child's stdout closes (at its exit)
            if line.startswith("{") and '"t":' in line:
                last = json.loads(line)
        try:
            proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise RuntimeError(f"exit-time child ({framework}, {arm}) did not end within {TIMEOUT_S} s") from None
        end = time.monotonic()
        if proc.returncode != 0 or last is None:
            err.seek(0)
            tail = err.read().strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
            raise RuntimeError(f"exit-time child ({framework}, {arm}) failed: {tail[0]}")
    return {"exit_s": end - last["t"], "total_s": end - start, "returncode": proc.returncode, "child": last}


def process_exit(frameworks, arms=("default", "framework"), repeats: int = 3, threads: int = 1, steps: int = 5,
                 progress=None) -> dict:
    """exit_once for each framework (a backend with a model_bench module: with_tool("model_bench")) and arm, `repeats`
    fresh processes each, under the user's default GELULAB_KERNEL_COMPILE (unset). Returns {"rows": [{"framework",
    "arm", "runs": [exit_s...], "median_s", "max_s", "total_s" (median)}], "repeats", "steps", "threads"}; a failed
    child gives a row with "error" instead of the figures."""
    out = {"repeats": repeats, "steps": steps, "threads": threads, "rows": []}
    for fw in frameworks:
        for arm in arms:
            if progress:
                progress(f"process exit, {fw}, {arm}")
            try:
                runs = [exit_once(fw, arm, threads, steps) for _ in range(repeats)]
            except RuntimeError as e:
                out["rows"].append({"framework": fw, "arm": arm, "error": str(e)})
                continue
            exits = [r["exit_s"] for r in runs]
            out["rows"].append({"framework": fw, "arm": arm, "runs": exits, "median_s": statistics.median(exits),
                                "max_s": max(exits), "total_s": statistics.median(r["total_s"] for r in runs)})
    return out


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
    print(f"{result['backend']}, exact GELU, GELU() (default: {result.get('default_impl')}) and GELU(impl='kernel'), "
          f"float32 N(0, 1), 1 thread, median of {a.repeats} fresh processes per first-call row\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

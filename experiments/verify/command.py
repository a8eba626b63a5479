"""`gelulab verify`: every float32 bit pattern (or a fixed stride of them) through each backend's float32 kernel
(impl "kernel"), value and first derivative, against the correctly rounded result (experiments.verify.oracle), and
every bfloat16 and float16 bit pattern.

  gelulab verify --exhaustive            all 2^32 float32 inputs (four backends: 2.2 h on one core; resumable)
  gelulab verify --stride 65537          every 65537th bit pattern (seconds; what CI runs)

Reports, per backend, activation, order and dtype: the max ULP distance where the result is normal (finite inputs
that are 0 or normal, correctly rounded result 0 or normal: the kernels' 1-ULP contract), the counts of inputs at
1 ULP and beyond, the worst input, the max over subnormal results, and mismatches of the special-value contract
(NaN, +-inf, the sign of a zero result); and, per activation/order/dtype, the number of inputs where the backends
do not all return the same bits. Results go to --out (default results/verify): chunks.jsonl (one line per finished
chunk, appended and flushed, so an interrupted run resumes where it stopped; each line carries the id of its
settings, kernel source and package versions, and lines of other ids are ignored, so a changed kernel or framework
is verified afresh; each line carries the sha256 of its record too, and a line whose checksum is missing or does
not match, edited or damaged, is not reused: its chunk is verified again, with one note naming the file and line),
summary.json and report.md. One run at a time holds --out (core.plumbing.lock). Backends: GELULAB_BACKEND or --backend,
called as eager callers call them (--mode eager, the default: the kernels run as jax.jit, XLA and torch.compile'd
functions inside) or under the framework's compiler (--mode compiled); threads: GELULAB_THREADS (recorded).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from gelulab.core.activations import ACTIVATIONS
from gelulab.core.plumbing.report import (
    CHECKSUM_FIELD,
    atomic_write_text,
    environment,
    markdown_table,
    record_digest,
    verify_checksum,
    write_json,
)
from gelulab.experiments.verify.oracle import check_bound, expected

FLOAT32_PATTERNS = 1 << 32
MAX_CHUNK = 1 << 26  # the most inputs per chunk: its uint64 indices alone take 512 MiB, its outputs more
MAX_CHUNKS = 1 << 20  # more chunks than this is a mistake in --chunk (a 4-byte chunk of 2^32 inputs), refused
BOUND_SAMPLE_STRIDE = 65537  # the oracle's float64 bound is checked on a spread of these float32 inputs every run
# the source files whose text decides the verified bits, beside backends/<name>/kernels.py of each selected backend
KERNEL_SOURCES = ("core/numerics/kernels.py", "core/numerics/kernel_coeffs.py", "core/numerics/float64_forms.py",
                  "experiments/verify/oracle.py")
SMALL_DTYPES = ("bfloat16", "float16")
ORDERS = (0, 1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab verify`."""
    g = parser.add_mutually_exclusive_group(required=True)
    g.add_argument("--exhaustive", action="store_true", help="all 2^32 float32 bit patterns")
    g.add_argument("--stride", type=int, metavar="N", help="every N-th float32 bit pattern (N >= 1)")
    parser.add_argument("--backend", help="comma-separated backends (default: GELULAB_BACKEND or all installed)")
    parser.add_argument("--activation", help="comma-separated catalogue keys (default: every one with a kernel)")
    parser.add_argument("--order", default="0,1", help="derivative orders, from 0,1 (default both)")
    parser.add_argument("--mode", default="eager", choices=("eager", "compiled"),
                        help="eager (default: what eager callers get, the kernels compiled by jax.jit, XLA and "
                             "inductor inside) or compiled (the whole call under jax.jit, torch.compile, "
                             "tf.function with XLA; numpy stays eager)")
    parser.add_argument("--chunk", type=int, default=1 << 24, help="inputs per chunk (default 2^24)")
    parser.add_argument("--max-chunks", type=int, default=None,
                        help="stop after this many new float32 chunks (a timing run; rerun to continue)")
    parser.add_argument("--out", default="results/verify", help="results folder (default results/verify)")


def _csv(value, allowed, name):
    if value is None:
        return tuple(allowed)
    items = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    bad = [v for v in items if v not in [str(a) for a in allowed]]
    if not items or bad:
        raise ValueError(f"--{name} {value!r}: expected one or more of {[str(a) for a in allowed]}")
    return items


def _bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return bits.astype(np.uint32).view(np.float32)


def _all_small(dtype: str) -> np.ndarray:
    import ml_dtypes

    dt = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dt)


def _ordered(a: np.ndarray) -> np.ndarray:
    u = {2: np.uint16, 4: np.uint32}[a.dtype.itemsize]
    nbits = a.dtype.itemsize * 8
    b = a.view(u).astype(np.int64)
    mag = b & ((1 << (nbits - 1)) - 1)
    return np.where((b >> (nbits - 1)) == 1, -mag, mag)


def reference_context(key: str, order: int, x: np.ndarray, ref: np.ndarray, smallest_normal: float) -> dict:
    """What every backend's outputs for (key, order) are compared against, computed once per chunk: the reference's
    ULP keys and the masks of normal results, subnormal results and special inputs."""
    x64, r64 = x.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(x64)
    normal_in = finite & ((x64 == 0) | (np.abs(x64) >= smallest_normal))
    normal = normal_in & ((r64 == 0) | (np.abs(r64) >= smallest_normal))
    special = np.flatnonzero(~finite | (x64 == 0))
    if not ACTIVATIONS[key].nan_derivative and order >= 1:
        special = special[~np.isnan(x64[special])]  # the catalogue judges no derivative at NaN (ReLU'(NaN))
    return {"key": key, "order": order, "x": x, "ref": ref, "ref_key": _ordered(ref), "ref_nan": np.isnan(r64),
            "normal": normal, "sub": normal_in & ~normal & np.isfinite(r64), "special": special}


def cell_stats(ctx: dict, y: np.ndarray) -> dict:
    """Accuracy figures of one backend's outputs y against the reference context of their (key, order)."""
    with np.errstate(all="ignore"):
        return _cell_stats(ctx, y)


def _cell_stats(ctx, y):
    x, ref = ctx["x"], ctx["ref"]
    ynan = _isnan(y)
    ulp = np.abs(_ordered(y) - ctx["ref_key"]).astype(np.float64)
    both = ynan & ctx["ref_nan"]
    ulp[both] = 0.0
    ulp[ynan ^ ctx["ref_nan"]] = np.inf
    sp = ctx["special"]
    y_sp, r_sp = y[sp].astype(np.float64), ref[sp].astype(np.float64)
    bad = ulp[sp] != 0
    if ctx["order"] == 0 and ACTIVATIONS[ctx["key"]].zero_sign:
        z = (y_sp == 0) & (r_sp == 0)
        bad |= z & (np.signbit(y_sp) != np.signbit(r_sp))
    normal, sub = ctx["normal"], ctx["sub"]
    un = np.where(normal, ulp, -1.0)
    i = int(np.argmax(un))
    has = bool(normal.any())
    return {
        "n": int(x.size), "n_normal": int(normal.sum()),
        "max_ulp": float(un[i]) if has else 0.0,
        "n_ulp1": int((un == 1).sum()), "n_over1": int((un > 1).sum()),
        "worst_bits": int(x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])[i]) if has else None,
        "max_ulp_subnormal": float(ulp[sub].max()) if sub.any() else 0.0,
        "special_bad": int(bad.sum()),
    }


def merge(a: dict | None, b: dict) -> dict:
    """Combine the stats of two chunks of one cell."""
    if a is None:
        return dict(b)
    out = {k: a[k] + b[k] for k in ("n", "n_normal", "n_ulp1", "n_over1", "special_bad")}
    out["max_ulp"] = max(a["max_ulp"], b["max_ulp"])
    out["worst_bits"] = a["worst_bits"] if a["max_ulp"] >= b["max_ulp"] else b["worst_bits"]
    out["max_ulp_subnormal"] = max(a["max_ulp_subnormal"], b["max_ulp_subnormal"])
    return out


def _isnan(a: np.ndarray) -> np.ndarray:
    return np.isnan(a) if a.dtype in (np.float32, np.float16) else np.isnan(a.astype(np.float32))


def _identical(outs: list[np.ndarray]) -> np.ndarray:
    """Mask of inputs where every backend returned the same bits (any NaN equals any NaN)."""
    u = {2: np.uint16, 4: np.uint32}[outs[0].dtype.itemsize]
    base, bnan = outs[0].view(u), _isnan(outs[0])
    same = np.ones(outs[0].shape, dtype=bool)
    for o in outs[1:]:
        same &= (o.view(u) == base) | (_isnan(o) & bnan)
    return same


class Runner:
    """Evaluates chunks: the correctly rounded reference once per (key, order), then every backend's kernel."""

    def __init__(self, backends, keys, orders, mode="eager"):
        self.backends, self.keys, self.orders, self.mode = backends, keys, orders, mode
        self._fns = {}
        self.n_mpmath = 0
        self.bound_worst = 0.0
        self.bound_checked = False

    def fn(self, b, key, order):
        k = (b.name, key, order)
        if k not in self._fns:
            mode = self.mode if self.mode in b.modes else "eager"
            self._fns[k] = b.function(key, "kernel", order, mode)
        return self._fns[k]

    def check_bound(self, x: np.ndarray, n: int = 64) -> float:
        """Check the float64 oracle's error bound against mpmath on n inputs sampled from x (float32) for every
        selected (activation, order); keeps and returns the worst ratio to the bound (>= 1: the bound is wrong)."""
        with np.errstate(all="ignore"):
            for key in self.keys:
                for order in self.orders:
                    self.bound_worst = max(self.bound_worst, check_bound(key, order, x, n=n))
        self.bound_checked = True
        return self.bound_worst

    def chunk(self, x: np.ndarray, dtype: str) -> dict:
        from gelulab.core.numerics.dtypes import get_dtype

        tiny = float(get_dtype(dtype).finfo.smallest_normal)
        with np.errstate(all="ignore"):
            x64 = x.astype(np.float64)
            normal_in = np.isfinite(x64) & ((x64 == 0) | (np.abs(x64) >= tiny))
        del x64
        out = {}
        for key in self.keys:
            for order in self.orders:
                with np.errstate(all="ignore"):
                    ref, n_mp = expected(key, order, x, dtype)
                self.n_mpmath += n_mp
                with np.errstate(all="ignore"):
                    ctx = reference_context(key, order, x, ref, tiny)
                ys = []
                for b in self.backends:
                    with np.errstate(all="ignore"):
                        y = b.to_numpy(self.fn(b, key, order)(b.asarray(x)))
                    ys.append(y)
                    out[f"{b.name}|{dtype}|{key}|{order}"] = cell_stats(ctx, y)
                with np.errstate(all="ignore"):
                    same = _identical(ys)
                out[f"*|{dtype}|{key}|{order}"] = {"n": int(x.size), "n_differ": int((~same).sum()),
                                                     "n_differ_normal_input": int((~same & normal_in).sum())}
        return out


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def run(args) -> int:
    """`gelulab verify`; returns 0 when every normal result is within 1 ULP and the special values hold, else 1.

    Raises ValueError for bad options or an unwritable --out (one line, exit code 2 from the command line, before
    any work) and core.plumbing.output.Interrupted on Ctrl-C/SIGTERM, with every finished chunk kept in chunks.jsonl
    (the same command resumes from there)."""
    from gelulab.backends import BACKEND_NAMES, capabilities, get_backend, selected_backends
    from gelulab.core.plumbing.lock import check_held, hold
    from gelulab.core.plumbing.output import Interrupted, check_writable

    if args.stride is not None and not 1 <= args.stride <= FLOAT32_PATTERNS:
        raise ValueError(f"--stride {args.stride}: expected an integer from 1 to 2^32")
    if not 1 <= args.chunk <= MAX_CHUNK:
        raise ValueError(f"--chunk {args.chunk}: expected an integer from 1 to 2^26 = {MAX_CHUNK} (a chunk's inputs "
                         f"are held at once: {args.chunk} of them need at least {_gib(16 * args.chunk)} of memory)")
    if args.max_chunks is not None and args.max_chunks < 0:
        raise ValueError(f"--max-chunks {args.max_chunks}: expected an integer >= 0")
    stride = 1 if args.exhaustive else args.stride
    n_inputs = (FLOAT32_PATTERNS + stride - 1) // stride
    if (n_inputs + args.chunk - 1) // args.chunk > MAX_CHUNKS:
        raise ValueError(f"--chunk {args.chunk}: expected at least {-(-n_inputs // MAX_CHUNKS)} inputs per chunk for "
                         f"{n_inputs} inputs (at most {MAX_CHUNKS} chunks)")
    with_kernels = [n for n in BACKEND_NAMES if capabilities(n).kernels]  # what verify checks: the kernels
    names = (_csv(args.backend, with_kernels, "backend") if args.backend
             else tuple(n for n in selected_backends() if n in with_kernels))
    if not names:
        raise ValueError(f"no selected backend has gelulab's kernels; the backends with kernels: {with_kernels}")
    keys = _csv(args.activation, [k for k, a in ACTIVATIONS.items() if a.kernel is not None], "activation")
    orders = tuple(int(o) for o in _csv(args.order, ORDERS, "order"))
    out = check_writable(args.out)
    with hold(out):
        backends = [get_backend(n) for n in names]
        config = {"stride": stride, "chunk": args.chunk, "backends": list(names), "keys": list(keys),
                  "orders": list(orders), "mode": args.mode, "code": code_digest(names),
                  "versions": _versions(backends)}
        cid = hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
        log = out / "chunks.jsonl"
        done = _read_log(log, cid)
        runner = Runner(backends, keys, orders, args.mode)
        n_chunks = (n_inputs + args.chunk - 1) // args.chunk
        todo = [c for c in range(n_chunks) if ("float32", c) not in done]
        if args.max_chunks is not None:
            todo = todo[: args.max_chunks]
        print(f"verify: {n_inputs} float32 inputs (stride {stride}) in {n_chunks} chunks, {len(todo)} to run; "
              f"{', '.join(names)} x {', '.join(keys)} x orders {orders}; log {log}", flush=True)
        t_start = time.perf_counter()
        out.mkdir(parents=True, exist_ok=True)
        try:
            runner.check_bound(_bits_to_float32(np.arange(0, FLOAT32_PATTERNS, BOUND_SAMPLE_STRIDE, dtype=np.uint64)))
            with open(log, "a") as f:
                if f.tell() and not log.read_bytes().endswith(b"\n"):
                    f.write("\n")  # a line cut short by an interruption: the next record starts on a line of its own
                for dtype in SMALL_DTYPES:
                    if (dtype, 0) not in done:
                        t0 = time.perf_counter()
                        res = runner.chunk(_all_small(dtype), dtype)
                        _append(f, cid, dtype, 0, res, time.perf_counter() - t0)
                for c in todo:
                    check_held(log)  # the folder deleted or replaced: stop here, not after every chunk
                    t0 = time.perf_counter()
                    idx = np.arange(c * args.chunk, min((c + 1) * args.chunk, n_inputs), dtype=np.uint64) * stride
                    res = runner.chunk(_bits_to_float32(idx), "float32")
                    dt = time.perf_counter() - t0
                    _append(f, cid, "float32", c, res, dt)
                    print(f"  chunk {c + 1}/{n_chunks}: {idx.size} inputs in {dt:.3g} s "
                          f"({idx.size * len(keys) * len(orders) / dt / 1e6:.2f} M input-evaluations/s, all backends)",
                          flush=True)
        except KeyboardInterrupt:
            kept = sum(1 for (d, _) in _read_log(log, cid, quiet=True) if d == "float32")
            raise Interrupted(f"interrupted; {kept} of {n_chunks} float32 chunks are kept in {log}; "
                              "run the same command again to resume") from None
        done = _read_log(log, cid, quiet=True)
        summary = summarize(done, config, n_chunks, runner, time.perf_counter() - t_start, backends)
        write_json(out / "summary.json", summary)
        atomic_write_text(out / "report.md", report_md(summary))
        print(f"report: {out / 'report.md'}")
        return 0 if summary["passed"] else 1


def code_digest(names) -> str:
    """sha256 (first 16 hex digits) of the kernel source files (KERNEL_SOURCES and backends/<name>/kernels.py of
    each named backend): a changed kernel gives another config id, so old chunks are not reused for it."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for rel in (*KERNEL_SOURCES, *(f"backends/{n}/kernels.py" for n in names)):
        path = root / rel
        h.update(rel.encode() + b"\0" + (path.read_bytes() if path.exists() else b"") + b"\0")
    return h.hexdigest()[:16]


def _versions(backends) -> dict:
    """gelulab's, numpy's and scipy's versions and each backend's framework versions (part of the config id)."""
    import scipy

    from gelulab.core.plumbing.provenance import gelulab_version

    out = {"gelulab": gelulab_version(), "numpy": np.__version__, "scipy": scipy.__version__}
    for b in backends:
        out.update(b.versions())
    return out


def _append(f, cid, dtype, chunk, res, seconds):
    from gelulab.core.plumbing.lock import check_held

    check_held(f.name)  # FolderVanished: the log's folder was removed or replaced while the chunk ran
    rec = {"config": cid, "dtype": dtype, "chunk": chunk, "seconds": seconds, "cells": res}
    f.write(json.dumps({**rec, CHECKSUM_FIELD: record_digest(rec)}) + "\n")
    f.flush()
    os.fsync(f.fileno())


def _read_log(path: Path, cid: str, quiet: bool = False) -> dict:
    """The finished chunks of settings id `cid` in the log: {(dtype, chunk): record}. A line cut short by an
    interruption is skipped, and so is a line of other settings; a line of `cid` whose checksum is missing or does not
    match its record (edited or damaged) is skipped with one note on stderr naming the file and line (unless quiet), so
    its chunk runs again."""
    done, refused = {}, []
    if not path.exists():
        return done
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by an interruption
            continue
        if not isinstance(rec, dict) or rec.get("config") != cid:
            continue
        problem = verify_checksum(rec)
        if problem is not None or not isinstance(rec.get("cells"), dict):
            refused.append((number, (rec.get("dtype"), rec.get("chunk")), problem or "not a chunk record"))
            continue
        done[(rec["dtype"], rec["chunk"])] = rec
    for number, key, problem in refused:
        if not quiet and key not in done:  # not verified again since
            print(f"gelulab verify: {path} line {number}: {problem}; its chunk is verified again", file=sys.stderr)
    return dict(sorted(done.items()))  # chunk order, not the order they finished in: a resumed run sums the same


def summarize(done: dict, config: dict, n_chunks: int, runner, seconds: float, backends) -> dict:
    """Aggregate the finished chunks into per-cell figures, the verdict and the measured throughput."""
    cells, differ = {}, {}
    per_input = []  # seconds per float32 input of each chunk
    for (dtype, _), rec in done.items():
        if dtype == "float32":
            per_input.append(rec["seconds"] / next(iter(rec["cells"].values()))["n"])
        for k, v in rec["cells"].items():
            if k.startswith("*|"):
                d = differ.setdefault(k[2:], {"n": 0, "n_differ": 0, "n_differ_normal_input": 0})
                for f in d:
                    d[f] += v[f]
            else:
                cells[k] = merge(cells.get(k), v)
    f32_done = sum(1 for (d, _) in done if d == "float32")
    bound_ok = runner.bound_checked and runner.bound_worst < 1
    passed = bound_ok and all(v["max_ulp"] <= 1 and v["special_bad"] == 0 for v in cells.values())
    # the median chunk: the first chunk of a run also holds its compiles, a resumed run's chunks were timed before
    rate = 1 / float(np.median(per_input)) if per_input and np.median(per_input) > 0 else None
    return {
        "config": config, "float32_chunks_done": f32_done, "float32_chunks": n_chunks,
        "complete": f32_done == n_chunks, "passed": passed, "mode": config.get("mode"),
        "cells": cells, "backends_differ": differ,
        "mpmath_inputs_this_run": runner.n_mpmath, "float64_bound_check_worst": runner.bound_worst,
        "float64_bound_checked": runner.bound_checked,
        "throughput_inputs_per_s": rate,
        "estimated_total_seconds": FLOAT32_PATTERNS / rate if rate else None,
        "seconds_this_run": seconds, "environment": environment(backends),
    }


def report_md(s: dict) -> str:
    """The Markdown report of a summary."""
    cfg = s["config"]
    env = s["environment"]
    lines = [
        "# gelulab verify: float32 kernels against the correctly rounded result", "",
        (f"Command: `{env.get('command')}`; gelulab {env.get('gelulab')}, "
         f"git commit {env.get('git_commit') or 'unknown'}; "
         f"threads {env.get('threads')}, {env.get('cores')} cores, {env.get('cpu')}."), "",
        f"float32 inputs: one bit pattern in {cfg['stride']} (stride {cfg['stride']})" if cfg["stride"] > 1
        else "float32 inputs: all 2^32 bit patterns",
        f"({s['float32_chunks_done']} of {s['float32_chunks']} chunks done{'' if s['complete'] else ', incomplete'}); "
        "bfloat16 and float16: all 65536 bit patterns. Backends: " + ", ".join(cfg["backends"]) +
        f" ({cfg.get('mode', 'eager')} mode).", "",
        f"Verdict{'' if s['complete'] else ' so far (incomplete)'}: "
        f"{'every normal result within 1 ULP, special values as specified' if s['passed'] else 'FAILED'}. "
        f"Throughput (median chunk) {s['throughput_inputs_per_s'] or 0:.3g} float32 inputs/s (all backends, forms "
        f"and orders); the whole 2^32 run at that rate: {(s['estimated_total_seconds'] or 0) / 3600:.2f} h. "
        f"Inputs decided by mpmath this run: {s['mpmath_inputs_this_run']}; float64 bound check "
        + (f"(64 inputs per activation and order, mpmath): worst error {s['float64_bound_check_worst']:.3g} of the "
           "assumed bound." if s.get("float64_bound_checked") else "not run."), "",
        "## Max ULP where the result is normal", "",
    ]
    rows = []
    for k in sorted(s["cells"]):
        b, dtype, key, order = k.split("|")
        v = s["cells"][k]
        wb = v["worst_bits"]
        rows.append([b, dtype, key, f"f{'′' * int(order)}" if int(order) else "f", v["n"], v["max_ulp"], v["n_ulp1"],
                     v["n_over1"], "—" if wb is None else f"0x{wb:0{8 if dtype == 'float32' else 4}x}",
                     v["max_ulp_subnormal"], v["special_bad"]])
    lines.append(markdown_table(["backend", "dtype", "activation", "order", "inputs", "max ULP", "at 1 ULP",
                                 "beyond 1", "worst input", "max ULP subnormal", "special-value misses"], rows))
    lines += ["", ("max ULP subnormal: over 0 or normal inputs whose correctly rounded result is subnormal "
              "(XLA flushes these to zero in jax and TensorFlow on CPUs, so there it is the result's size in "
              "subnormal steps).")]
    lines += ["", "## Inputs where the backends differ in any bit", ""]
    if len(cfg["backends"]) < 2:
        lines += [f"One backend ran ({', '.join(cfg['backends'])}): nothing to compare.", ""]
        return "\n".join(lines) + "\n"
    rows = [[*k.split("|"), v["n"], v["n_differ"], v["n_differ_normal_input"]]
            for k, v in sorted(s["backends_differ"].items())]
    lines.append(markdown_table(["dtype", "activation", "order", "inputs", "differ", "differ (0 or normal input)"],
                                rows))
    lines += ["", ("Subnormal inputs and results differ by design where XLA flushes them (jax, TensorFlow); the rest "
              "comes from XLA contracting products and sums into FMAs, which numpy and inductor do not."), ""]
    return "\n".join(lines) + "\n"

"""The Markdown report of a benchmark run (from the result dict that is also written as JSON)."""
from __future__ import annotations

from gelulab.backends import BACKEND_NAMES
from gelulab.benchmarks.grid import DIRECTIONS, MODES
from gelulab.core.activations import ACTIVATIONS, BASELINE, HEADLINE, IMPLS
from gelulab.core.plumbing.config import DEVICES
from gelulab.core.plumbing.report import fmt, markdown_table

FOCUS_DTYPE = "float32"
FOCUS_SIZES = (10**6, 10**7)
GOAL = 1.2  # gelulab's formula within 1.2x of the builtin at 1e6 float32
KERNEL_GOAL = "≤ 1.5 compiled, aim 1.2; ≤ 3 torch eager"  # gelulab's float32 kernels at 1e6 float32


def _gmean(values) -> float:
    """scipy.stats.gmean, imported here only: scipy.stats takes about 0.7 s to import."""
    from scipy.stats import gmean

    return gmean(values)


def focus(result: dict) -> tuple[str, list[int]]:
    """The dtype and sizes the summary tables show: float32 at 1e6 and 1e7 where run, else the first dtype run and
    the largest size run."""
    cells = result["cells"]
    dtypes = [c["dtype"] for c in cells]
    dtype = FOCUS_DTYPE if FOCUS_DTYPE in dtypes else (dtypes[0] if dtypes else FOCUS_DTYPE)
    sizes = sorted({c["size"] for c in cells if c["dtype"] == dtype})
    chosen = [s for s in FOCUS_SIZES if s in sizes]
    return dtype, chosen or sizes[-1:]


def _pivot(entries: list[dict], row_axes: tuple, col_axis: str, cols: list[str]) -> list[list]:
    table: dict[tuple, dict] = {}
    for e in entries:
        table.setdefault(tuple(e[a] for a in row_axes), {})[e[col_axis]] = e["ratio"]
    return [list(k) + [v.get(c) for c in cols] for k, v in sorted(table.items(), key=lambda kv: _order(kv[0]))]


def _order(key: tuple) -> tuple:
    """Sort key of a pivot row: backends, modes, impls, directions in their canonical order."""
    ranks = {v: i for group in (BACKEND_NAMES, DEVICES, MODES, IMPLS, DIRECTIONS) for i, v in enumerate(group)}
    return tuple(ranks.get(v, 99) for v in key)


def ratio_tables(result: dict, dtype: str, size: int) -> str:
    """Markdown: the formula ÷ builtin, kernel ÷ builtin and GELU ÷ ReLU (every activation ÷ the baseline) pivots at
    one dtype and size."""
    fb = [e for e in result["ratios"]["formula_over_builtin"] if (e["dtype"], e["size"]) == (dtype, size)]
    gr = [e for e in result["ratios"]["gelu_over_relu"] if (e["dtype"], e["size"]) == (dtype, size)]
    acts = [a for a in ACTIVATIONS if any(e["activation"] == a for e in fb)]
    gelus = [a for a in ACTIVATIONS if any(e["activation"] == a for e in gr)]
    out = f"### formula ÷ builtin, {dtype}, n = {size:.0e} (goal ≤ {GOAL})\n\n"
    out += markdown_table(["backend", "device", "mode", "direction"] + acts,
                          _pivot(fb, ("backend", "device", "mode", "direction"), "activation", acts)) if fb else \
        "(no pair of formula and builtin cells)\n"
    kb = [e for e in result["ratios"].get("kernel_over_builtin", []) if (e["dtype"], e["size"]) == (dtype, size)]
    if kb:
        kacts = [a for a in ACTIVATIONS if any(e["activation"] == a for e in kb)]
        out += f"\n### kernel ÷ builtin, {dtype}, n = {size:.0e} (goal {KERNEL_GOAL})\n\n"
        out += markdown_table(["backend", "device", "mode", "direction"] + kacts,
                              _pivot(kb, ("backend", "device", "mode", "direction"), "activation", kacts))
    out += (f"\n### GELU ÷ ReLU: each activation ÷ {ACTIVATIONS[BASELINE].label} (same impl), {dtype}, "
            f"n = {size:.0e}\n\n")
    out += markdown_table(["backend", "device", "mode", "impl", "direction"] + gelus,
                          _pivot(gr, ("backend", "device", "mode", "impl", "direction"), "activation", gelus)) \
        if gr else "(no pair of GELU and ReLU cells)\n"
    return out


def pct_table(result: dict, dtype: str, size: int) -> str:
    """Markdown: % of copy bandwidth of every timed cell at one dtype and size, one row per backend, device, mode
    and direction, one column per activation and impl ("b" builtin, "f" formula, "k" kernel)."""
    cells = [c for c in result["cells"] if (c["dtype"], c["size"]) == (dtype, size) and "pct_copy" in c]
    cols = [(a, i) for a in ACTIVATIONS for i in IMPLS[::-1] if any((c["activation"], c["impl"]) == (a, i)
                                                                       for c in cells)]
    entries = [{**c, "col": (c["activation"], c["impl"]), "ratio": c["pct_copy"]} for c in cells]
    head = f"### % of copy bandwidth, {dtype}, n = {size:.0e} (b: builtin, f: formula, k: kernel)\n\n"
    if not cells:
        return head + "(no timed cell)\n"
    return head + markdown_table(["backend", "device", "mode", "direction"] + [f"{a} {i[0]}" for a, i in cols],
                                 _pivot(entries, ("backend", "device", "mode", "direction"), "col", cols))


CELL_HEADERS = ["backend", "device", "mode", "activation", "impl", "direction", "dtype", "size", "status",
                "median µs", "IQR µs", "first call (compile) ms", "Melem/s", "GB/s", "% copy", "% copy same size"]


def cell_rows(cells: list[dict]) -> list[list]:
    """One table row per cell (CELL_HEADERS); untimed cells show their status and blanks."""
    rows = []
    for c in cells:
        timed = "median_s" in c
        rows.append([c["backend"], c["device"], c["mode"], c["activation"], c["impl"], c["direction"], c["dtype"],
                     f"{c['size']:.0e}", c["status"],
                     c["median_s"] * 1e6 if timed else None, c["iqr_s"] * 1e6 if timed else None,
                     c["first_call_s"] * 1e3 if timed else None,
                     c["elements_per_s"] / 1e6 if timed else None, c.get("gbps"), c.get("pct_copy"),
                     c.get("pct_copy_same_size")])
    return rows


_HEADLINE_GELU = next(k for k in HEADLINE if k != BASELINE)  # exact GELU, the training step's other arm
TRAIN_STEP_HEADERS = ["backend", "device", "mode", "impl", "dtype", "ReLU µs", "ReLU IQR µs", "GELU µs",
                      "GELU IQR µs", "GELU ÷ ReLU", "first call (compile) ms ReLU / GELU", "status"]


def train_step_table(result: dict) -> str:
    """Markdown: the moons training step (benchmarks/trainstep.py), one row per backend, device, mode, impl and
    dtype: median and IQR µs per step of ReLU and exact GELU, GELU ÷ ReLU, first calls, statuses."""
    steps = result.get("train_step") or []
    head = ("## Training step: moons MLP 2-64-64-1, batch 32, Adam (forward + backward + update), "
            "µs per step\n\n")
    if not steps:
        return head + "(not run)\n"
    pairs: dict[tuple, dict] = {}
    for r in steps:
        pairs.setdefault((r["backend"], r["device"], r["mode"], r["impl"], r["dtype"]), {})[r["activation"]] = r
    us = lambda r, k: r[k] * 1e6 if r and k in r else None
    rows = []
    for key in sorted(pairs, key=_order):
        relu, gelu = pairs[key].get(BASELINE), pairs[key].get(_HEADLINE_GELU)
        ratio = (gelu["median_s"] / relu["median_s"] if relu and gelu and relu["status"] == gelu["status"] == "ok"
                 else None)
        first = " / ".join(fmt(r["first_call_s"] * 1e3) if r and "first_call_s" in r else "-" for r in (relu, gelu))
        status = " / ".join(r["status"] if r else "-" for r in (relu, gelu))
        rows.append([*key, us(relu, "median_s"), us(relu, "iqr_s"), us(gelu, "median_s"), us(gelu, "iqr_s"), ratio,
                     first, status])
    return head + markdown_table(TRAIN_STEP_HEADERS, rows)


def markdown(result: dict) -> str:
    """The whole report: machine and method, ratio pivots and cells at the focus sizes, problems, every cell."""
    env, bw = result["environment"], result["copy_bandwidth"]
    dtype, sizes = focus(result)
    lines = [
        "# gelulab bench: activation speed against the copy bandwidth\n",
        (f"- command: `{env.get('command')}`; gelulab {env.get('gelulab')}, git commit "
         f"{env.get('git_commit') or 'unknown'}"
         + ("; **interrupted: partial results**" if result.get("partial") else "")),
        f"- machine: {env['cpu']}, {env['cores']} cores; GELULAB_THREADS = {env['threads']}; "
        "threads in effect (intra-op): " + ", ".join(f"{k} {v.get('intra_op')}"
                                                      for k, v in result["threads_in_effect"].items()),
        (f"- copy bandwidth (numpy copy of {bw['nbytes'] / 2**20:.0f} MiB, best of {bw['repeats']}, bytes read + "
        f"written): **{fmt(bw['gbps'])} GB/s** (start of run {fmt(bw['start_gbps'])}, end {fmt(bw['end_gbps'])})"),
        *[f"- {tag}: the framework's device copy, {fmt(d['gbps'])} GB/s ({d['nbytes'] / 2**20:.0f} MiB), is the "
          "reference of its cells" for tag, d in result.get("device_copy", {}).items()],
        f"- timer: {result['timer']}; per cell: median over blocks and IQR, first call (compilation) apart",
        (f"- {len(result['cells'])} cells in {fmt(result['elapsed_s'])} s; grid: {result['grid']}; load average "
        f"(1/5/15 min) at start {result.get('load_average', {}).get('start')}, end "
        f"{result.get('load_average', {}).get('end')}"),
        ("- forward = backend.function(key, impl, 0, mode)(x); forward+backward = backend.function(key, impl, 1, mode)"
        "(x), the vjp with a cotangent of ones (numpy: closed-form derivative). Traffic counted: read x + write "
        "result."),
        ("- % copy: effective GB/s ÷ the copy bandwidth above; % copy same size: ÷ a copy of the same bytes (cells "
        "that fit in a cache are faster than the large-array copy).\n"),
    ]
    for size in sizes:
        lines.append(pct_table(result, dtype, size))
        lines.append(ratio_tables(result, dtype, size))
    if sizes:  # none in a training-step-only run
        focus_cells = [c for c in result["cells"] if c["dtype"] == dtype and c["size"] in sizes]
        lines.append(f"## {dtype} cells at n = {', '.join(f'{s:.0e}' for s in sizes)}\n")
        lines.append(markdown_table(CELL_HEADERS, cell_rows(focus_cells)))
    bad = [c for c in result["cells"] if c["status"] != "ok"]
    if bad or result["skipped"]:
        lines.append("## Cells not timed cleanly, backends skipped\n")
        lines += [f"- {c['backend']} {c['device']} {c['mode']} {c['activation']} {c['impl']} {c['direction']} "
                  f"{c['dtype']} {c['size']:.0e}: {c['status']} {c.get('error', '')}" for c in bad]
        lines += [f"- backend {s['backend']} on {s['device']}: skipped, {s['reason']}" for s in result["skipped"]]
        lines.append("")
    lines.append(train_step_table(result))
    if result["cells"]:
        lines.append("## Every cell\n")
        lines.append(markdown_table(CELL_HEADERS, cell_rows(result["cells"])))
    return "\n".join(lines)


def compare_table(cmp: dict, notes=()) -> str:
    """Markdown for `analysis.compare`: the notes first (e.g. that an input is a partial result), each as a
    bold line, then one row per matched cell with A and B medians (µs) and B ÷ A, then the counts and the
    geometric mean of B ÷ A (scipy.stats.gmean)."""
    rows = [[m["backend"], m["device"], m["mode"], m["activation"], m["impl"], m["direction"], m["dtype"],
             f"{m['size']:.0e}", m["a_s"] * 1e6, m["b_s"] * 1e6, m["ratio"]] for m in cmp["matched"]]
    out = "".join(f"**{n}**\n\n" for n in notes)
    out += markdown_table(["backend", "device", "mode", "activation", "impl", "direction", "dtype", "size",
                          "A µs", "B µs", "B ÷ A"], rows)
    out += f"\n{len(rows)} cells in both runs; {len(cmp['only_a'])} only in A, {len(cmp['only_b'])} only in B."
    if rows:
        out += f" Geometric mean of B ÷ A: {fmt(float(_gmean([m['ratio'] for m in cmp['matched']])))}."
    return out + "\n"

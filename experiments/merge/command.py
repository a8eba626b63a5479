"""`gelulab merge DIR... [--out DIR]`: results of parity, bench, moons (and moons grids) and swap made on
different machines, devices or framework versions, set side by side in one report.

Each DIR is a results folder of one command (it holds parity.json, bench.json, results.json, grid.json or
swap.json) or a folder of such folders (e.g. a machine's whole results/ or a `gelulab run` folder); the runs
found are grouped by kind and by their path inside DIR, so results/parity of one machine is set beside
results/parity of another. Within a group the experiment settings must be equal (experiments/merge/kinds.py
says which fields they are per kind); runs whose settings differ are refused before anything is written, in
one line naming the fields and their values. Where the runs were made is what the report sets side by side:
each run's device, machine (CPU, cores, platform), thread count and Python / numpy / framework versions, the
environment each command records (core.plumbing.report.environment).

A results file that cannot be used (not JSON, or a field missing or of the wrong type: a hand-edited or cut-short
file) is set aside as damaged: left out of the merge, never changed, named with what is wrong in one line on
stderr and in merge.md; the merge goes on with the rest, and stops (ValueError, exit 2) when nothing usable is left
to set side by side.

Outputs (default results/merge): merge.md (the runs and what differs between their environments; per group a
table with one column per run, the rows where the runs differ first) and merge.json (the same as data).
"""
from __future__ import annotations

import argparse
import json
import string
import sys
from pathlib import Path

from gelulab.core.plumbing.report import atomic_write_text, markdown_table, write_json
from gelulab.experiments.merge.kinds import FILES, KINDS

DEFAULT_OUT = "results/merge"
MAX_DEPTH = 3
SKIP = {"runs", "cells"}  # the per-run stores of moons and grids, not results folders
# results file names other programs write too (`gelulab run`'s own summary is a results.json): a JSON object of
# none of the kinds there is not gelulab's and is passed over, where under the other names it is damaged
_SHARED_NAMES = {"results.json"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `gelulab merge` options."""
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="results folders (of parity, bench, moons, moons --grid or swap, or folders holding "
                             "them), one per machine / device / version")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")


def _load(path: Path):
    """(data, None), or (None, what is wrong) for a file that is not UTF-8 JSON. OSError (unreadable) propagates."""
    try:
        return json.loads(path.read_bytes().decode("utf-8")), None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"not JSON ({e})"
    except RecursionError:
        return None, "not usable JSON (nested too deeply to read)"


def damage(kind: str, data) -> str | None:
    """What keeps a loaded results file of `kind` out of a merge, or None when it can be merged: every part the
    merge reads (experiment settings, rows, environment) is read here once, so a field missing or of the wrong
    type (KeyError, TypeError, ...) is reported as the file's damage, not raised later."""
    k = KINDS[kind]
    try:
        settings = k.settings(data)
        if not isinstance(settings, dict):
            return f"its settings are a {type(settings).__name__}, not a table"
        json.dumps(settings, sort_keys=True)
        env = data.get("environment", {})
        if env is not None and not isinstance(env, dict):
            return f"its environment is a {type(env).__name__}, not a table"
        _flat(env)
        for row in k.rows(data):
            hash(tuple(row.get(f) for f in k.key))
            for field, _, fmt_fn in k.values:
                fmt_fn(row.get(field))
    except KeyError as e:
        return f"a record lacks the field {e}"
    except (TypeError, AttributeError, ValueError, IndexError, OverflowError) as e:
        return f"a field has the wrong type or value ({' '.join(str(e).split())})"
    return None


def find_runs(folder, damaged: list | None = None, skipped: list | None = None) -> list[dict]:
    """The runs in one DIR: [{"kind", "path" (the results file), "rel" (its folder inside DIR, "." for DIR
    itself), "data"}]. A results file that cannot be merged (see `damage`; not JSON) is left out and appended to
    `damaged` as {"path", "kind" (None when not JSON), "problem"}. A folder reached through a symbolic link is
    followed only when it lies inside DIR and was not visited already; one that leads outside DIR is not
    followed and appended to `skipped` as {"path", "problem"}. Raises ValueError for a missing folder or one
    holding no results files at all (damaged ones count: the merge names them and goes on)."""
    root = Path(folder)
    if not root.exists():
        raise ValueError(f"folder {root} does not exist; expected a results folder of parity, bench, moons or swap")
    if not root.is_dir():
        raise ValueError(f"{root}: not a folder; expected a results folder of parity, bench, moons or swap")
    found, bad, aside = [], [], []
    top = root.resolve()
    seen: set[Path] = set()

    def inside(sub: Path) -> bool:  # a folder to visit: inside DIR once resolved, and not visited yet
        real = sub.resolve()
        if not real.is_relative_to(top):
            aside.append({"path": sub, "problem": f"a symbolic link to {real}, outside {root}; not followed"})
            return False
        return real not in seen

    def visit(d: Path, depth: int):
        seen.add(d.resolve())
        for name in sorted(FILES):
            p = d / name
            if not p.is_file():
                continue
            data, problem = _load(p)
            if problem is not None:
                bad.append({"path": p, "kind": None, "problem": problem})
                continue
            kinds = [k for k in KINDS.values() if k.file == name]
            hits = [k for k in kinds if isinstance(data, dict) and k.detect(data)]
            if not hits and name not in _SHARED_NAMES:
                what = "another record" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
                bad.append({"path": p, "kind": kinds[0].name, "problem": f"holds {what}, not a {kinds[0].name} "
                            "result"})
            for kind in hits:
                problem = damage(kind.name, data)
                if problem is None:
                    found.append({"kind": kind.name, "path": p, "rel": d.relative_to(root).as_posix(),
                                  "data": data})
                else:
                    bad.append({"path": p, "kind": kind.name, "problem": problem})
        if depth < MAX_DEPTH:
            for sub in sorted(p for p in d.iterdir() if p.is_dir() and p.name not in SKIP):
                if inside(sub):
                    visit(sub, depth + 1)

    visit(root, 0)
    if damaged is not None:
        damaged.extend(bad)
    if skipped is not None:
        skipped.extend(aside)
    if not found and not bad:
        raise ValueError(f"{root}: holds no results of parity, bench, moons or swap "
                         f"(looked for {', '.join(sorted(FILES))} up to {MAX_DEPTH} folders deep)")
    return found


# characters that would end a line or hide text: each written as its escape (\n, \x1b, \u2028, ...)
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), *range(0x7F, 0xA0))}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def inline(value) -> str:
    """str(value) as text on one line of merge.md or of a message: line breaks and other control characters written
    as their escapes (\\n, \\x1b), so a value read from a results file or a folder name (an environment string, a
    path) cannot start a line of its own (a forged heading or table row) in the report or a second line on stderr.
    Table cells are escaped by core.plumbing.report.table_cell."""
    return str(value).translate(_CONTROL)


def _damaged_list(damaged: list) -> str:
    return ", ".join(f"{inline(d['path'])} ({inline(d['problem'])})" for d in damaged)


def _flat(d, prefix="") -> dict:
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _short(v, limit: int = 60) -> str:
    s = inline(json.dumps(v) if not isinstance(v, str) else v)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def settings_differ(runs: list[dict]) -> list[str]:
    """The settings fields whose values are not the same in every run (flattened, e.g. "timer.min_run_s")."""
    flats = [_flat(KINDS[r["kind"]].settings(r["data"])) for r in runs]
    keys = list(dict.fromkeys(k for f in flats for k in f))
    return [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flats}) > 1]


def _env(run) -> dict:
    return run["data"].get("environment", {}) or {}


def environment_differs(runs: list[dict]) -> list[str]:
    """The environment fields (flattened: "threads", "frameworks.torch.torch", ...) that differ between runs."""
    flats = [_flat(_env(r)) for r in runs]
    keys = list(dict.fromkeys(k for f in flats for k in f))
    return [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flats}) > 1]


def _label_of(env: dict, fields: list[str]) -> str:
    flat = _flat(env)
    parts = [f"{inline(k)} {inline(flat.get(k))}" for k in fields if k in flat]
    return "; ".join(parts) if parts else "same environment"


def run_label(index: int) -> str:
    """The label of the index-th DIR: A, B, ..., Z, then D27, D28, ..."""
    return string.ascii_uppercase[index] if index < 26 else f"D{index + 1}"


def merge(dirs) -> dict:
    """Find the runs in every DIR, group them (kind, path inside DIR), check their settings and set them side
    by side; a run's label is its DIR's letter (A for the first DIR). Returns {"runs": [{label, dir, kind, rel,
    file, environment, differs}], "groups": [{kind, rel, runs (labels),
    settings, environment_differs, rows: [{key..., label: {field: value}}], differ: row count}], "single": groups
    found in one DIR only}.

    Damaged results files (see `damage`) are left out and listed in "damaged": [{path, kind, problem}]; the
    merge goes on with the rest. Folders behind symbolic links that lead outside their DIR are not followed and
    are listed in "skipped": [{path, problem}].

    Raises ValueError, before anything is written: a DIR that does not exist (every missing one named, checked
    first); fewer than two DIRs or one given twice; a DIR that is not a folder or holds no usable results; a
    group whose runs' experiment settings differ (one message naming the kind, the fields and each run's value); no
    group found in two or more DIRs (nothing to set side by side; the damaged files are named then).
    """
    missing = [str(d) for d in dirs if not Path(d).exists()]
    if missing:
        what = f"folder {missing[0]} does not" if len(missing) == 1 else f"folders {', '.join(missing)} do not"
        raise ValueError(f"{what} exist; expected results folders of parity, bench, moons or swap")
    if len(dirs) < 2:
        raise ValueError(f"{len(dirs)} folder given ({', '.join(map(str, dirs))}); expected two or more "
                         "results folders")
    resolved = [Path(d).resolve() for d in dirs]
    twice = sorted({str(d) for d, r in zip(dirs, resolved) if resolved.count(r) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} given twice; expected each results folder once")
    groups, damaged, skipped = {}, [], []
    for i, d in enumerate(dirs):
        for r in find_runs(d, damaged, skipped):
            r["dir"] = str(d)
            r["index"] = i
            groups.setdefault((r["kind"], r["rel"]), []).append(r)
    problems = []
    for (kind, rel), runs in groups.items():
        if len(runs) < 2:
            continue
        fields = settings_differ(runs)
        if fields:
            flats = [_flat(KINDS[kind].settings(r["data"])) for r in runs]
            shown = "; ".join(f"{inline(k)} (" + ", ".join(f"{inline(r['dir'])}: {_short(f.get(k))}"
                                                         for r, f in zip(runs, flats)) + ")" for k in fields[:6])
            more = f" and {len(fields) - 6} more" if len(fields) > 6 else ""
            where = "" if rel == "." else f" in {inline(rel)}"
            problems.append(f"{kind} runs{where} differ in experiment settings {', '.join(map(inline, fields))}: "
                            f"{shown}{more}")
    if problems:
        raise ValueError("; ".join(problems) + "; merge sets side by side only runs of the same experiment")
    joined = {k: v for k, v in groups.items() if len(v) >= 2}
    if not joined:
        found = (", ".join(f"{k} ({inline(r)}) in {inline(v[0]['dir'])}" for (k, r), v in groups.items())
                 or "nothing usable")
        aside = f"; set aside as damaged: {_damaged_list(damaged)}" if damaged else ""
        raise ValueError(f"no results found in two or more of the folders (found: {found}){aside}; expected "
                         "the same command's results from each machine")
    out_runs, out_groups = [], []
    for (kind, rel), runs in joined.items():
        env_fields = environment_differs(runs)
        labels = []
        for r in runs:
            label = run_label(r["index"])
            labels.append(label)
            out_runs.append({"label": label, "dir": r["dir"], "kind": kind, "rel": rel, "file": str(r["path"]),
                             "environment": _env(r), "differs": _label_of(_env(r), env_fields)})
        out_groups.append(_side_by_side(kind, rel, runs, labels, env_fields))
    single = [{"kind": k, "rel": r, "dir": v[0]["dir"]} for (k, r), v in groups.items() if len(v) < 2]
    return {"runs": out_runs, "groups": out_groups, "single": single,
            "damaged": [{**d, "path": str(d["path"])} for d in damaged],
            "skipped": [{**d, "path": str(d["path"])} for d in skipped]}


def _side_by_side(kind: str, rel: str, runs: list, labels: list, env_fields: list) -> dict:
    k = KINDS[kind]
    table = {}
    for label, r in zip(labels, runs):
        for row in k.rows(r["data"]):
            key = tuple(row.get(f) for f in k.key)
            entry = table.setdefault(key, {**{f: row.get(f) for f in k.key}, "runs": {}})
            entry["runs"][label] = {f: row.get(f) for f, _, _ in k.values}
    rows = list(table.values())
    for row in rows:
        vals = [json.dumps(row["runs"].get(lab), sort_keys=True) for lab in labels]
        row["differs"] = len(set(vals)) > 1
    rows.sort(key=lambda r: not r["differs"])  # stable: the rows where the runs differ first
    return {"kind": kind, "rel": rel, "runs": labels, "settings": KINDS[kind].settings(runs[0]["data"]),
            "environment_differs": env_fields, "rows": rows, "differ": sum(r["differs"] for r in rows)}


def _cell(kind, field, fmt_fn, row, label, first):
    v = row["runs"].get(label, {}).get(field)
    text = "—" if label not in row["runs"] else fmt_fn(v)
    if kind == "bench" and field == "median_s" and label != first and isinstance(v, float):
        base = row["runs"].get(first, {}).get(field)
        if isinstance(base, float) and base > 0:
            text += f" (×{v / base:.2f})"
    return text


def _machine(env: dict) -> str:
    return f"{env.get('cpu', '—')}, {env.get('cores', '—')} cores, {env.get('platform', '—')}"


def markdown(merged: dict) -> str:
    """The merge report as Markdown."""
    out = ["# gelulab merge: results side by side\n"]
    out.append("## Runs\n")
    out.append(markdown_table(
        ["run", "kind", "folder", "device", "machine", "threads", "what differs from the other runs"],
        [[r["label"], r["kind"] + ("" if r["rel"] == "." else f" ({r['rel']})"), r["file"],
          r["environment"].get("device", "—"),
          _machine(r["environment"]), r["environment"].get("threads", "—"), r["differs"]]
         for r in merged["runs"]]))
    out.append("\nVersions per run (python, numpy, frameworks):\n")
    for r in merged["runs"]:
        env = r["environment"]
        fw = "; ".join(f"{inline(b)}: " + ", ".join(f"{inline(k)} {inline(v)}" for k, v in vs.items())
                       for b, vs in (env.get("frameworks") or {}).items())
        out.append(f"- {r['label']}: python {inline(env.get('python', '—'))}, numpy {inline(env.get('numpy', '—'))}"
                   + (f"; {fw}" if fw else ""))
    out.append("")
    for g in merged["groups"]:
        k = KINDS[g["kind"]]
        title = g["kind"] + ("" if g["rel"] == "." else f" ({inline(g['rel'])})")
        out.append(f"## {title}: runs {', '.join(g['runs'])}\n")
        out.append(f"{k.description}. Experiment settings equal in every run; environments differ in: "
                   f"{', '.join(map(inline, g['environment_differs'])) or 'nothing recorded'}. {g['differ']} of "
                   f"{len(g['rows'])} "
                   "rows differ between the runs (listed first).\n")
        head = list(k.key) + [f"{h} {lab}" for _, h, _ in k.values for lab in g["runs"]] + ["differs"]
        first = g["runs"][0]
        body = [[r[f] for f in k.key] + [_cell(g["kind"], f, fmt_fn, r, lab, first) for f, _, fmt_fn in k.values
                                          for lab in g["runs"]] + ["yes" if r["differs"] else ""] for r in g["rows"]]
        out.append(markdown_table(head, body))
    for s in merged["single"]:
        out.append(f"- {s['kind']} ({inline(s['rel'])}) only in {inline(s['dir'])}: nothing to set beside it.")
    if merged.get("damaged"):
        out.append("\n## Set aside as damaged\n")
        out.append("These results files could not be used and are not in the tables above (left as they are):\n")
        out += [f"- {inline(d['path'])}: {inline(d['problem'])}" for d in merged["damaged"]]
    if merged.get("skipped"):
        out.append("\n## Folders not followed\n")
        out += [f"- {inline(d['path'])}: {inline(d['problem'])}" for d in merged["skipped"]]
    return "\n".join(out) + "\n"


def run(args) -> int:
    """`gelulab merge`: write merge.md and merge.json into --out; returns 0. Each damaged results file set aside is
    one line on stderr. Raises ValueError (exit 2, one line) for a missing folder, runs of different settings, or
    nothing (usable) to merge, before anything is written."""
    from gelulab.core.plumbing.lock import hold
    from gelulab.core.plumbing.output import check_writable

    out = check_writable(args.out)  # before any input is read
    merged = merge(args.dirs)
    for d in merged["damaged"]:
        print(f"merge: {inline(d['path'])} is damaged ({inline(d['problem'])}); set aside, not merged", file=sys.stderr)
    for d in merged["skipped"]:
        print(f"merge: {inline(d['path'])} is {inline(d['problem'])}", file=sys.stderr)
    text = markdown(merged)
    with hold(out):  # one run at a time in --out
        atomic_write_text(out / "merge.md", text)
        write_json(out / "merge.json", merged)
    for g in merged["groups"]:
        differ = ", ".join(map(inline, g["environment_differs"])) or "nothing recorded"
        print(f"{g['kind']} ({inline(g['rel'])}): runs {', '.join(g['runs'])}, {len(g['rows'])} rows, {g['differ']} "
              f"differ; environments differ in {differ}")
    print(f"wrote {out / 'merge.md'}, {out / 'merge.json'}")
    return 0

"""`gelulab merge`: two parity runs made here with GELULAB_THREADS=1 and 2 set side by side, two bench runs with
their ratios, and two moons runs of different learning rates refused with the field named (exit 2)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gelulab import cli as gelulab
from gelulab.backends import selected_backends
from gelulab.core.activations import IMPLS
from gelulab.experiments.moons import study as S

PARITY = ["parity", "--backend", "numpy", "--activation", "gelu_none,relu", "--dtype", "float32", "--mode", "eager",
          "--order", "0", "--no-plots"]


def _gelulab(argv, threads: int) -> subprocess.CompletedProcess:
    """The command in a fresh process (thread counts apply when a framework is loaded, once per process)."""
    env = {**os.environ, "GELULAB_THREADS": str(threads)}
    return subprocess.run([sys.executable, "-m", "gelulab", *argv], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def parity_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    for threads in (1, 2):
        done = _gelulab([*PARITY, "--out", str(root / f"t{threads}" / "parity")], threads)
        assert done.returncode == 0, done.stderr
    return root


@pytest.mark.subprocess
def test_merge_sets_two_parity_runs_side_by_side(parity_runs, tmp_path, capsys):
    a, b = parity_runs / "t1", parity_runs / "t2"  # folders holding parity/, as a machine's results/ does
    assert gelulab.main(["merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "merge.json").read_text())
    text = (tmp_path / "m" / "merge.md").read_text()
    assert [r["label"] for r in merged["runs"]] == ["A", "B"]
    assert [r["environment"]["threads"] for r in merged["runs"]] == [1, 2]
    (group,) = merged["groups"]
    assert (group["kind"], group["rel"], group["runs"]) == ("parity", "parity", ["A", "B"])
    assert "threads" in group["environment_differs"] and "threads 1" in text and "threads 2" in text
    # every row of the report is the parity.json cells of each run: the largest ULP error over the regions, of the
    # elements judged by ULP (max_ulp_normal, the figure of report.md's summary)
    for label, folder in (("A", a), ("B", b)):
        cells = json.loads((folder / "parity" / "parity.json").read_text())["cells"]
        for row in group["rows"]:
            mine = [c for c in cells if (c["backend"], c["impl"], c["activation"], c["dtype"], c["mode"],
                                         c["order"]) == tuple(row[k] for k in ("backend", "impl", "activation",
                                                                               "dtype", "mode", "order"))]
            finite = [c["max_ulp_normal"] for c in mine if isinstance(c["max_ulp_normal"], (int, float))]
            assert row["runs"][label]["max_ulp_normal"] == max(finite)
            assert row["runs"][label]["beyond"] == sum(not c["passed"] for c in mine)
    assert len(group["rows"]) == 2 * len(IMPLS)  # relu and gelu_none x every impl (numpy)
    assert "| max ULP (normal inputs) A | max ULP (normal inputs) B |" in text
    assert "parity (parity): runs A, B" in capsys.readouterr().out


@pytest.mark.subprocess
def test_merge_bench_runs_gives_ratios(tmp_path):
    argv = ["bench", "--quick", "--backend", "numpy", "--size", "1e3", "--dtype", "float32", "--no-train-step",
            "--no-plots"]
    for threads in (1, 2):
        done = _gelulab([*argv, "--out", str(tmp_path / f"b{threads}")], threads)
        assert done.returncode == 0, done.stderr
    assert gelulab.main(["merge", str(tmp_path / "b1"), str(tmp_path / "b2"), "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "merge.json").read_text())
    (group,) = merged["groups"]
    cells = {tuple(c[k] for k in ("activation", "impl", "direction")): c["median_s"]
             for c in json.loads((tmp_path / "b2" / "bench.json").read_text())["cells"]}
    row = group["rows"][0]
    assert row["runs"]["B"]["median_s"] == cells[(row["activation"], row["impl"], row["direction"])]
    ratio = row["runs"]["B"]["median_s"] / row["runs"]["A"]["median_s"]
    assert f"(×{ratio:.2f})" in (tmp_path / "m" / "merge.md").read_text()


@pytest.mark.training
@pytest.mark.slow
def test_merge_refuses_moons_runs_of_different_learning_rates(tmp_path, capsys):
    names, _ = S.check_backends(selected_backends())
    if not names:
        pytest.skip("no selected backend can train (numpy has no autodiff)")
    small = ["--backend", names[0], "--seeds", "2", "--samples", "100", "--epochs", "2", "--arms", "relu,gelu_none",
             "--compare-dtype", "none", "--no-progress"]
    for lr in ("0.001", "0.01"):
        assert gelulab.main(["moons", *small, "--lr", lr, "--out", str(tmp_path / f"lr{lr}")]) == 0
    capsys.readouterr()
    out = tmp_path / "m"
    assert gelulab.main(["merge", str(tmp_path / "lr0.001"), str(tmp_path / "lr0.01"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "moons runs differ in experiment settings lr" in err
    assert "0.001" in err and "0.01" in err and not out.exists()
    # the same settings merge (here: the same folder's copy)
    import shutil

    shutil.copytree(tmp_path / "lr0.01", tmp_path / "again")
    assert gelulab.main(["merge", str(tmp_path / "lr0.01"), str(tmp_path / "again"), "--out", str(out)]) == 0
    (group,) = json.loads((out / "merge.json").read_text())["groups"]
    assert group["kind"] == "moons" and group["differ"] == 0


@pytest.mark.parametrize("dirs,message", [
    (["only"], "gelulab merge: error: 1 folder given (only); expected two or more"),
    (["missing"], "gelulab merge: error: folder missing does not exist;"),
    (["only", "missing"], "gelulab merge: error: folder missing does not exist;"),
    (["missing", "also-missing"], "gelulab merge: error: folders missing, also-missing do not exist;"),
    (["a-file", "only"], "a-file: not a folder"),
    (["empty", "empty2"], "holds no results"),
    (["p", "p"], "given twice"),
])
def test_merge_bad_folders_are_one_line_exit_2(tmp_path, capsys, monkeypatch, dirs, message):
    monkeypatch.chdir(tmp_path)
    for d in ("only", "empty", "empty2", "p"):
        Path(d).mkdir()
    Path("a-file").write_text("not a folder\n")
    assert gelulab.main(["merge", *dirs, "--out", "m"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not Path("m").exists()


# ------------------------------------------------------------------------------ damaged values, links out of DIR

ENV_OF = {"threads": 1, "device": "cpu"}


def _parity(folder: Path, **cell) -> Path:
    """A parity.json in `folder` with two region cells of relu (one with the special value "nan" that parity
    writes for a non-finite error), the first updated with `cell`."""
    base = {"backend": "numpy", "impl": "builtin", "activation": "relu", "dtype": "float32", "mode": "eager",
            "order": 0, "passed": True}
    cells = [{**base, "region": "core", "max_ulp_normal": 1.0, **cell},
             {**base, "region": "tails", "max_ulp_normal": "nan"}]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "parity.json").write_text(json.dumps({"cells": cells, "tolerances": {"float32": 4},
                                                    "environment": ENV_OF}))
    return folder / "parity.json"


def _moons(folder: Path, acc=0.9, loss=0.3, diff=-0.01) -> Path:
    """A moons results.json in `folder`: one relu summary row and one paired difference of gelu_none."""
    where = {"backend": "torch", "regime": "matched"}
    data = {"config": {"lr": 0.01}, "runs": [], "environment": ENV_OF,
            "summary": [{**where, "arm": "relu", "test_acc": {"mean": acc}, "test_loss": {"geo_mean": loss}}],
            "paired": [{**where, "arm": "gelu_none", "metric": "test_acc", "mean_diff": diff, "kind": "tie"}]}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(data))
    return folder / "results.json"


@pytest.mark.parametrize("write, problem", [
    (lambda f: _parity(f, passed="no"), "a cell's passed is 'no', expected true or false"),
    (lambda f: _parity(f, max_ulp_normal=-3), "a cell's max_ulp_normal is -3, expected a number of at least 0"),
    (lambda f: _parity(f, max_ulp_normal="big"), "a cell's max_ulp_normal is 'big', expected a number"),
    (lambda f: _parity(f, order=float("nan")), "a cell's order is nan, expected a derivative order"),
    (lambda f: _moons(f, acc=5.0), "a summary's test_acc mean is 5.0, expected a number from 0 to 1"),
    (lambda f: _moons(f, loss=-3), "a summary's test_loss geo_mean is -3, expected a number of at least 0"),
    (lambda f: _moons(f, diff="big"), "a paired test_acc mean_diff is 'big', expected a number"),
    (lambda f: (f.mkdir(), (f / "parity.json").write_text("[" * 200000)), "nested too deeply"),
    (lambda f: _parity(f, max_ulp_normal=10 ** 400),
     "a cell's max_ulp_normal is an integer of 401 digits, expected a measured"),
])
def test_merge_sets_aside_out_of_range_and_wrong_typed_values(tmp_path, capsys, write, problem):
    kind_of = _moons if "summary" in problem or "paired" in problem else _parity
    good = [kind_of(tmp_path / name) for name in ("a", "b")]
    write(tmp_path / "bad")
    bad = next((tmp_path / "bad").iterdir())
    out = tmp_path / "m"
    assert gelulab.main(["merge", *(str(tmp_path / n) for n in ("a", "b", "bad")), "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"merge: {bad} is damaged (") and problem in err[0]
    merged = json.loads((out / "merge.json").read_text())
    assert [r["file"] for r in merged["runs"]] == [str(p) for p in good]  # the damaged run is not in the tables
    if kind_of is _parity:
        (row,) = merged["groups"][0]["rows"]
        assert row["runs"]["A"] == {"max_ulp_normal": 1.0, "beyond": 0}  # "nan" is a special value, not damage
    else:
        values = [r["runs"]["A"]["value"] for r in merged["groups"][0]["rows"]]
        assert values == pytest.approx([90.0, 0.3, -1.0])  # acc in %, the loss as is, the difference in pp


def test_merge_does_not_follow_a_symbolic_link_out_of_its_folder(tmp_path, capsys):
    a, b = _parity(tmp_path / "a").parent, _parity(tmp_path / "b").parent
    (a / "up").symlink_to("..")  # leads to tmp_path, which holds b
    (a / "self").symlink_to(".")  # inside a, and visited already
    (a / "sub").mkdir()
    (a / "inner").symlink_to("sub")  # inside a: followed once
    out = tmp_path / "m"
    assert gelulab.main(["merge", str(a), str(b), "--out", str(out)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"merge: {a / 'up'} is a symbolic link to {tmp_path.resolve()}, outside {a}; not followed"]
    merged = json.loads((out / "merge.json").read_text())
    assert [(r["label"], r["rel"]) for r in merged["runs"]] == [("A", "."), ("B", ".")]
    assert merged["skipped"] == [{"path": str(a / "up"),
                                  "problem": f"a symbolic link to {tmp_path.resolve()}, outside {a}; not followed"}]
    assert "## Folders not followed" in (out / "merge.md").read_text()


def test_a_field_read_from_a_file_cannot_forge_a_table_row(tmp_path):
    """A backend name holding a line break and pipes (a damaged or hand-made parity.json) stays inside its cell:
    escaped pipes, the line break a space, so merge.md has exactly one row per merged row (GitHub Markdown: a
    pipe inside a cell is written \\|)."""
    forged = "numpy\n| forged | row |"
    for name in ("a", "b"):
        _parity(tmp_path / name, backend=forged)
    out = tmp_path / "m"
    assert gelulab.main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    text = (out / "merge.md").read_text()
    assert "\n| forged" not in text and "numpy \\| forged \\| row \\|" in text
    rows = [line for line in text.splitlines() if "forged" in line]
    assert len(rows) == 1 and rows[0].count(" | ") == 10, rows  # one row, its 11 cells (the 2nd cell is "numpy")


def test_an_environment_string_read_from_a_file_cannot_forge_a_line_of_merge_md(tmp_path, capsys):
    """Environment strings holding line breaks (python, numpy, a framework's version, a field's name) are written
    on their own line of merge.md's "Versions per run" and in the sentence naming what differs: the line breaks
    are written as \\n, so no line of merge.md starts with the forged text."""
    forged = "\n| forged-env-python | x |"
    _parity(tmp_path / "a")
    path = _parity(tmp_path / "b")
    data = json.loads(path.read_text())
    data["environment"] = {**ENV_OF, "python": "3.11" + forged, "numpy": "2.0" + forged,
                           "frameworks": {"torch" + forged: {"torch": "2.4" + forged}}, "cpu" + forged: "x"}
    path.write_text(json.dumps(data))
    out = tmp_path / "m"
    assert gelulab.main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    lines = (out / "merge.md").read_text().splitlines()
    assert not [line for line in lines if line.startswith("| forged")]
    escaped = "\\n| forged-env-python | x |"  # the line break written as the two characters \ and n
    assert f"- B: python 3.11{escaped}, numpy 2.0{escaped}; torch{escaped}: torch 2.4{escaped}" in lines
    assert len(capsys.readouterr().out.splitlines()) == 2  # the group's line and the files written


def test_merge_gives_the_max_ulp_of_report_md(tmp_path):
    """For the same parity run, merge.md's max ULP is report.md's: gelu(none) float32 by gelulab's formula is
    0 ULP on normal inputs while a subnormal result of the "tiny" region is 1 ULP off (judged absolutely there),
    and both reports give 0 under headers saying what the figure covers."""
    from gelulab.experiments.parity import engine

    engine.expected.cache_clear()
    argv = ["parity", "--backend", "numpy", "--activation", "gelu_none", "--dtype", "float32", "--impl", "formula",
            "--order", "0", "--no-plots", "--out", str(tmp_path / "a")]
    assert gelulab.main(argv) == 0
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert gelulab.main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 0

    def column(path, header):  # the value under `header` in the one body row of the table that has it
        lines = path.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if f" {header} |" in line)
        assert lines[at + 1].startswith("|---") and not lines[at + 3].startswith("|")  # one row
        return lines[at + 2].split(" | ")[lines[at].split(" | ").index(header)]

    cells = json.loads((tmp_path / "a" / "parity.json").read_text())["cells"]
    assert max(c["max_ulp"] for c in cells) == 1.0  # the subnormal result the report judges absolutely
    assert column(tmp_path / "a" / "report.md", "max ULP f") == "0"
    assert column(tmp_path / "m" / "merge.md", "max ULP (normal inputs) A") == "0"

"""`gelulab bench --model --quick` (benchmarks/model.py): the report's structure, finite positive ratios, the
threads it was asked for, and one-line refusals of options that do not apply. No timing value is asserted
(speed figures come from the full run, read by a person).

References: the command's own options (which models, steps and modes must appear), the thread count requested
(GELULAB_THREADS, 1 in the suite) and the framework's own thread query as recorded.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math

import pytest

from gelulab.backends import requested_backends
from gelulab.benchmarks import activations
from gelulab.benchmarks import model as bench_model
from gelulab.core.plumbing import config

FIRST_CALL_ROWS = 7  # 2 scenarios × (first call, new shape), warm new shape, warm plain call, after vmap


def _args(*argv):
    parser = argparse.ArgumentParser()
    activations.add_arguments(parser)
    return parser.parse_args(list(argv))


def _tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of `text`: each a list of rows, each a list of its cells (header first, the
    separator line left out)."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = []
                tables.append(current)
            if not all(set(c) <= {"-"} and c for c in cells):
                current.append(cells)
        else:
            current = None
    return tables


def _positive_finite(text: str) -> bool:
    value = float(text)
    return math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One quick run: (exit code, stdout, model.json, model.md). The torch kernel's compiled loop is not built
    in the timing process (GELULAB_KERNEL_COMPILE=off: the run is about structure, not speed)."""
    if not any(requested_backends() is None or b in requested_backends() for b in bench_model.SUBJECTS):
        pytest.skip(f"no selected backend has a model benchmark (those with one: {sorted(bench_model.SUBJECTS)})")
    out = tmp_path_factory.mktemp("bench-model")
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(stdout):
        mp.setenv("GELULAB_KERNEL_COMPILE", "off")
        code = activations.run(_args("--model", "--quick", "--out", str(out)))
    return code, stdout.getvalue(), json.loads((out / "model.json").read_text()), (out / "model.md").read_text()


@pytest.mark.slow  # the quick run times a BertModel's and two MLPs' steps: 30 s
def test_quick_run_writes_the_table_it_prints(quick):
    code, stdout, result, md = quick
    assert code == 0
    assert result["schema"] == bench_model.SCHEMA and result["partial"] is False and result["quick"] is True
    assert md.strip() in stdout


@pytest.mark.slow  # the quick run times a BertModel's and two MLPs' steps: 30 s
def test_every_selected_model_has_its_steps_and_modes_with_finite_positive_ratios(quick):
    _, stdout, result, _ = quick
    selected = [b for b in bench_model.SUBJECTS if requested_backends() is None or b in requested_backends()]
    models = {bench_model.subject(b).MODEL: b for b in selected}
    skipped = {s["what"] for s in result["skipped"]}
    assert set(models) == set(result["models"]) | (skipped & set(models))  # each one ran or says why not
    table = _tables(stdout)[0]
    assert table[0] == ["model", "input", "step", "mode", "builtin (ms)", "IQR", "kernel ÷ builtin",
                        "formula ÷ builtin"]
    lines = {}
    for row in table[1:]:
        name, framework = row[0].rsplit(" (", 1)
        lines[(name, framework.rstrip(")"), row[2], row[3].split(" ")[0])] = row
    expected = {(m, b, step, mode) for m, b in models.items() if m in result["models"]
                for step in ("forward", "train step") for mode in ("eager", "compiled")
                if not (b == "torch" and mode == "compiled")}  # --quick leaves torch.compile out
    assert set(lines) == expected
    for row in lines.values():
        assert _positive_finite(row[4]) and row[5].endswith(" %"), row
        assert all(_positive_finite(c) for c in row[6:]), row
    assert len(result["ratios"]) == 2 * len(expected)
    assert all(math.isfinite(q["ratio"]) and q["ratio"] > 0 for q in result["ratios"])


@pytest.mark.slow  # the quick run times a BertModel's and two MLPs' steps: 30 s
def test_threads_are_the_requested_count(quick):
    _, stdout, result, _ = quick
    assert result["threads_in_effect"]  # at least one framework ran
    for name, threads in result["threads_in_effect"].items():
        assert threads["intra_op"] == config.threads(), name
    assert "threads: " in stdout


@pytest.mark.slow  # the quick run times a BertModel's and two MLPs' steps: 30 s
def test_first_call_table(quick):
    _, stdout, result, _ = quick
    if "torch" not in result["threads_in_effect"]:
        pytest.skip("torch not selected")
    table = _tables(stdout)[1]
    assert table[0] == ["torch layer", "gelulab GELU() (s)", "torch.nn.GELU() (s)", "ratio"]
    assert len(table) == 1 + FIRST_CALL_ROWS
    assert all(_positive_finite(row[3]) for row in table[1:])
    assert any("no C++ compiler" in row[0] for row in table[1:]) and "vmap" in table[-1][0]
    runs = result["first_call"]["scenarios"]["cold cache, no C++ compiler"]["runs"]
    assert all(r["compiler_found"] == [] for r in runs)  # the child saw no compiler on its PATH
    assert all(r["threads"] == config.threads() for r in runs)


@pytest.mark.parametrize("argv, words", [
    (["--dtype", "float32"], "--dtype does not apply to --model"),
    (["--backend", "numpy"], "--backend 'numpy' with --model"),
    (["--mode", "traced"], "--mode 'traced' with --model"),
    (["--full"], "--full does not apply to --model"),
])
def test_bad_options_are_one_line_exit_2(argv, words, tmp_path, capsys):
    assert activations.main(["--model", "--quick", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err

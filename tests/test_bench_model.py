"""`gelulab bench --model --quick` (benchmarks/model.py): the report's structure (the models and their arms, the
default arm labelled with the impl it computes with, the first-step table, the layers' per-call overhead, the
process exit), finite positive ratios, the threads it was asked for, --subject, and one-line refusals of options
that do not apply. No timing value is asserted
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


@pytest.mark.slow  # the quick run: 45 s
def test_quick_run_writes_the_table_it_prints(quick):
    code, stdout, result, md = quick
    assert code == 0
    assert result["schema"] == bench_model.SCHEMA and result["partial"] is False and result["quick"] is True
    assert md.strip() in stdout


def _arms_header(result):
    label = f"default ({'/'.join(sorted(set(result['default_impl'].values())))})"
    return [f"{label} ÷ op", "kernel ÷ op", "formula ÷ op"]


@pytest.mark.slow  # the quick run times two BertModels', a block's and two MLPs' steps: 45 s
def test_every_selected_model_has_its_steps_and_modes_with_finite_positive_ratios(quick):
    _, stdout, result, _ = quick
    selected = [b for b in bench_model.SUBJECTS if requested_backends() is None or b in requested_backends()]
    models = {m.MODEL: (b, m) for b in selected for m in bench_model.models(bench_model.subject(b))}
    skipped = {s["what"] for s in result["skipped"]}
    assert set(models) == set(result["models"]) | (skipped & set(models))  # each one ran or says why not
    assert {"BertModel all-MiniLM-L6-v2, tanh GELU", "Transformer block LayerNorm-Linear-GELU-Linear"} <= \
        {m for m, (b, _) in models.items() if b == "torch"}
    table = _tables(stdout)[0]
    assert table[0] == ["model", "input", "step", "mode", "framework op (ms)", "IQR"] + _arms_header(result)
    lines = {}
    for row in table[1:]:
        name, framework = row[0].rsplit(" (", 1)
        lines[(name, framework.rstrip(")"), row[2], row[3].split(" ")[0])] = row
    expected = {(name, b, step, mode) for name, (b, m) in models.items() if name in result["models"]
                for step in m.DIRECTIONS for mode in ("eager", "compiled")
                if not (b == "torch" and mode == "compiled")}  # --quick leaves torch.compile out
    assert set(lines) == expected
    arms = ("default", "kernel", "formula")
    for key, row in lines.items():
        m = models[key[0]][1]
        assert _positive_finite(row[4]) and row[5].endswith(" %"), row
        for arm, cell in zip(arms, row[6:]):
            assert _positive_finite(cell) if arm in m.ARMS else cell == "", (arm, row)
    assert len(result["ratios"]) == sum(len(models[k[0]][1].ARMS) - 1 for k in expected)
    assert all(math.isfinite(q["ratio"]) and q["ratio"] > 0 for q in result["ratios"])


@pytest.mark.slow
def test_default_arm_is_the_layer_without_impl_and_says_what_it_computes(quick):
    _, _, result, md = quick
    import gelulab.layers.torch as L

    if "torch" in result["default_impl"]:
        assert result["default_impl"]["torch"] == L.GELU().impl  # the library's default, whatever it is
    for r in result["rows"]:
        label = {"builtin": "framework op: ", "default": f"default ({result['default_impl'][r['framework']]})"}
        assert r["arm"].startswith(label.get(r["impl"], r["impl"])), r
    for m in result["models"].values():
        assert m["framework_op"]
    assert "Framework op (the reference of every ratio)" in md
    assert set(result["bar"]) >= {"worst_default", "ratio_ok", "worst_exit_s", "exit_ok"}
    assert ("Bar: every default ÷ op ≤ 1.03: " in md) == (result["bar"]["ratio_ok"] is not None)


@pytest.mark.slow
def test_block_is_timed_from_its_first_step(quick):
    _, stdout, result, _ = quick
    block = [r for r in result["rows"] if r["model"].startswith("Transformer block")]
    if not block:
        pytest.skip("torch not selected")
    assert {r["impl"] for r in block} == {"builtin", "default", "kernel"} and all(r["first_step"] for r in block)
    assert {r["direction"] for r in block} == {"train step"} and {r["input"] for r in block} == {"64×64"}
    assert all(r["first_call_s"] > 0 for r in block)
    table = next(t for t in _tables(stdout) if t[0][0] == "timed from the first step")
    assert len(table) == 1 + len({r["mode"] for r in block})
    assert all(_positive_finite(c) for row in table[1:] for c in row[3:]), table


@pytest.mark.slow
def test_overhead_and_process_exit_rows(quick):
    _, stdout, result, _ = quick
    ran = list(result["threads_in_effect"])
    assert [o["framework"] for o in result["overhead"]] == ran
    for o in result["overhead"]:
        assert o["size"] == 1024 and o["status"] == "ok" and math.isfinite(o["overhead_us"]), o
        assert o["impl"] == result["default_impl"][o["framework"]]
    tables = _tables(stdout)
    overhead = next(t for t in tables if t[0][0] == "layer call, 1024 float32")
    assert overhead[0][1:] == ["gelulab default (µs)", "framework's module (µs)", "overhead (µs)", "ratio"]
    assert len(overhead) == 1 + len(ran)
    rows = result["process_exit"]["rows"]
    assert [(r["framework"], r["arm"]) for r in rows] == [(b, "default") for b in ran]  # --quick: the default arm
    for r in rows:
        assert "error" not in r, r
        assert len(r["runs"]) == result["process_exit"]["repeats"] and r["median_s"] >= 0 and r["total_s"] > 0
        assert r["impl"] == result["default_impl"][r["framework"]]
    exits = next(t for t in tables if t[0][0].startswith("process exit"))
    assert len(exits) == 1 + len(rows) and all(_positive_finite(row[4]) for row in exits[1:])


def test_subject_runs_only_the_parts_named(tmp_path):
    """--subject block,overhead on torch: the block's rows and the torch overhead, nothing else (no BertModel,
    no process exit, no first calls)."""
    if requested_backends() is not None and "torch" not in requested_backends():
        pytest.skip("torch not selected")
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()):
        mp.setenv("GELULAB_KERNEL_COMPILE", "off")
        code = activations.run(_args("--model", "--quick", "--backend", "torch", "--subject", "block,overhead",
                                     "--impl", "builtin,default", "--out", str(tmp_path)))
    result = json.loads((tmp_path / "model.json").read_text())
    assert code == 0 and result["parts"] == ["block", "overhead"]
    assert {r["model"] for r in result["rows"]} == {"Transformer block LayerNorm-Linear-GELU-Linear"}
    assert {r["impl"] for r in result["rows"]} == {"builtin", "default"}
    assert [o["framework"] for o in result["overhead"]] == ["torch"]
    assert result["process_exit"] is None and result["first_call"] is None


@pytest.mark.slow  # the quick run: 45 s
def test_threads_are_the_requested_count(quick):
    _, stdout, result, _ = quick
    assert result["threads_in_effect"]  # at least one framework ran
    for name, threads in result["threads_in_effect"].items():
        assert threads["intra_op"] == config.threads(), name
    assert "threads: " in stdout


@pytest.mark.slow  # the quick run: 45 s
def test_first_call_table(quick):
    _, stdout, result, _ = quick
    if "torch" not in result["threads_in_effect"]:
        pytest.skip("torch not selected")
    table = next(t for t in _tables(stdout) if t[0][0] == "torch layer")
    default = f"gelulab GELU() default ({result['default_impl']['torch']}) (s)"
    assert table[0] == ["torch layer", default, "GELU(impl='kernel') (s)", "torch.nn.GELU() (s)", "default ÷ torch",
                        "kernel ÷ torch"]
    assert len(table) == 1 + FIRST_CALL_ROWS
    assert all(_positive_finite(row[4]) for row in table[1:])
    assert all(_positive_finite(row[5]) for row in table[1:-1])
    assert any("no C++ compiler" in row[0] for row in table[1:]) and "vmap" in table[-1][0]
    runs = result["first_call"]["scenarios"]["cold cache, no C++ compiler"]["runs"]
    assert all(r["compiler_found"] == [] for r in runs)  # the child saw no compiler on its PATH
    assert all(r["threads"] == config.threads() for r in runs)


@pytest.mark.parametrize("argv, words", [
    (["--dtype", "float32"], "--dtype does not apply to --model"),
    (["--backend", "numpy"], "--backend 'numpy' with --model"),
    (["--mode", "traced"], "--mode 'traced' with --model"),
    (["--full"], "--full does not apply to --model"),
    (["--subject", "resnet"], "--subject 'resnet' with --model"),
])
def test_bad_options_are_one_line_exit_2(argv, words, tmp_path, capsys):
    assert activations.main(["--model", "--quick", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err


def test_subject_without_model_is_refused(tmp_path, capsys):
    assert activations.main(["--quick", "--subject", "block", "--out", str(tmp_path)]) == 2
    assert "--subject applies to --model only" in capsys.readouterr().err

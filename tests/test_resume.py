"""Never lose work: `gelulab moons`, `parity` and `swap` keep every finished result when interrupted and resume
with the same numbers; a damaged moons run file ({}, [1, 2], missing metrics, not JSON) is set aside and only its
group retrained; results of other versions are not mixed in.

The moons and parity cases send a real SIGINT to a `python -m gelulab` subprocess once its first result is on
disk, then resume and compare number for number with an uninterrupted run (both through the command line's
main() in the test's process).
"""
from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import SELECTED, gelulab_argv

import gelulab
from gelulab import cli
from gelulab.backends import capabilities
from gelulab.core.activations import IMPLS
from gelulab.core.plumbing import report
from gelulab.experiments.moons import config as M
from gelulab.experiments.moons import study as X
from gelulab.experiments.parity import command as parity
from gelulab.experiments.parity import store as pstore

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(Path(gelulab.__file__).parent.parent), os.environ.get("PYTHONPATH")) if p)}
TRAINABLE = [b for b in SELECTED if capabilities(b).autodiff]  # canonical order: jax, torch, tensorflow
# The backend these tests train with: what they check (runs kept, set aside, resumed) is the study's, the same for
# every backend, so they take the cheapest one selected. torch trains the moons MLP op by op without compiling:
# the `trained` study took 1.3 s in torch on the 2-core reference machine, in jax (a jit per group) 41 s with a
# cold compilation cache and 6 s with the suite's cache warm.
TRAIN = "torch" if "torch" in TRAINABLE else next(iter(TRAINABLE), None)


def _interrupted_subprocess(argv, out: Path, pattern: str, env=None, timeout=600, sigint="terminal"):
    """Start `python -m gelulab argv` with SIGINT as `sigint` leaves it (conftest.gelulab_argv), send SIGINT once
    a file matching `pattern` exists under `out`, and return (returncode, stderr)."""
    p = subprocess.Popen([*gelulab_argv(sigint), *argv], cwd=ROOT, env=env or ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    while p.poll() is None and not list(out.rglob(pattern)):
        assert time.monotonic() - start < timeout, "no result was written"
        time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=timeout)
    return p.returncode, err


def _numbers(out: Path) -> dict:
    """Every run file's identity -> (metrics, curves), read as stored."""
    runs = {}
    for p in sorted(out.glob("runs/**/seed*.json")):
        rec = json.loads(p.read_text())
        runs[str(p.relative_to(out))] = (rec["metrics"], rec["curves"])
    return runs


# ------------------------------------------------------------------------------------------------------ moons

# 5 epochs: a group trains in about half a second in torch, so the SIGINT sent once the first group is stored
# finds the study in the middle of its ten groups
MOONS = ["moons", "--seeds", "2", "--epochs", "5", "--samples", "300", "--compare-seeds", "2", "--no-progress",
         "--jobs", "1"]
N_MOONS_RUNS = 2 * 2 * len(M.ARMS)  # 2 seeds x 2 run kinds (the regimes, or float64 and its drift check) x every arm


@pytest.mark.training
@pytest.mark.subprocess
@pytest.mark.skipif(not TRAINABLE, reason="moons needs a backend with autodiff")
def test_moons_sigint_keeps_finished_groups_and_resumes_number_for_number(tmp_path, monkeypatch, capsys):
    env = {**ENV, "GELULAB_BACKEND": TRAIN}
    out = tmp_path / "interrupted"
    rc, err = _interrupted_subprocess([*MOONS, "--out", str(out)], out, "seed1.json", env)
    assert rc == 130, err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    kept = len(list(out.rglob("seed*.json")))
    assert line == (f"gelulab moons: interrupted; {kept} of {N_MOONS_RUNS} moons runs are stored in {out / 'runs'}; "
                    "run the same command again to resume")
    assert 2 <= kept < N_MOONS_RUNS, "the study was not interrupted in the middle"
    # The same command again, and an uninterrupted run, in this process: the command line's main() as
    # `python -m gelulab` runs it, under the same GELULAB_BACKEND (the kept runs came from the other process).
    monkeypatch.setenv("GELULAB_BACKEND", TRAIN)
    assert cli.main([*MOONS, "--out", str(out)]) == 0, capsys.readouterr().err[-2000:]
    assert json.loads((out / "results.json").read_text())["resumed_groups"] >= 1
    # the uninterrupted run is the reference numbers only: its plots (half its time) are left out
    monkeypatch.setattr(X, "write_plots", lambda results, out_dir: {})
    assert cli.main([*MOONS, "--out", str(tmp_path / "whole")]) == 0, capsys.readouterr().err[-2000:]
    a, b = _numbers(out), _numbers(tmp_path / "whole")
    assert len(a) == N_MOONS_RUNS and a == b  # identical, not merely close


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small study, trained once in-process, in a results folder that the tests copy."""
    if not TRAINABLE:
        pytest.skip("moons needs a backend with autodiff")
    cfg = M.MoonsConfig(n_samples=300, lr=1e-2, epochs=5, seeds=(0, 1), compare_dtype="float32",
                        compare_seeds=2, grid_size=10)
    out = tmp_path_factory.mktemp("moons_trained")
    return cfg, TRAIN, out, X.run_study(cfg, out, [TRAIN], jobs=1, progress=False)


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.training
def test_damaged_run_files_are_set_aside_and_only_their_groups_retrained(trained, tmp_path, monkeypatch, capsys):
    cfg, backend, src, first = trained
    out = _copy(src, tmp_path / "out")
    damage = {  # one case per group; the other groups stay untouched
        ("matched", "float64", "relu", 0): "{}",
        ("matched", "float64", "gelu_tanh", 1): "[1, 2]",
        ("matched", "float32", "relu", 0): None,  # valid JSON without "metrics"
        ("matched", "float32", "gelu_none", 1): '{"key": {',  # not JSON
    }
    originals = {}
    for (regime, dtype, arm, seed), text in damage.items():
        p = X.run_path(out, backend, regime, dtype, arm, seed)
        if text is None:
            rec = json.loads(p.read_text())
            del rec["metrics"]
            text = json.dumps(rec)
        p.write_text(text)
        originals[p] = text
    stale = X.run_path(out, backend, "matched", "float64", "gelu_sigmoid", 0)
    rec = json.loads(stale.read_text())
    pkg = next(k for k in rec["key_versions"] if k not in ("gelulab", "numpy", "sklearn"))
    rec["key_versions"][pkg] = "0.0.1"
    stale.write_text(report.json_text(rec, checksum=True))  # as another version would have written it

    module = importlib.import_module(f"gelulab.backends.{backend}.moons")
    real, trained_groups = module.train, []

    def counting(spec):
        trained_groups.append((spec.dtype, spec.arm))
        return real(spec)

    monkeypatch.setattr(module, "train", counting)
    again = X.run_study(cfg, out, [backend], jobs=1, progress=False)
    assert sorted(trained_groups) == sorted({(d, a) for (_, d, a, _) in damage} | {("float64", "gelu_sigmoid")})
    err = capsys.readouterr().err
    for p, text in originals.items():
        kept = p.parent / f"{p.name}.damaged-1"
        assert kept.read_text() == text  # kept, renamed, never deleted
        assert f"moons: {p} is damaged (" in err and f"kept as {kept.name}, its group is retrained" in err
    assert "lacks metrics" in err and "holds a JSON list" in err and "not JSON" in err and "no settings key" in err
    assert (stale.parent / "seed0.json.stale-1").exists()
    assert f"1 stored runs were made with other versions ({pkg} 0.0.1 -> " in err and "not mixed in" in err

    def numbers(res):
        return {(r["backend"], r["regime"], r["dtype"], r["arm"], r["seed"]): (r["metrics"], r["curves"])
                for r in res["runs"]}

    assert numbers(again) == numbers(first)


@pytest.mark.training
def test_moons_cli_damaged_file_is_one_line_not_a_traceback(trained, tmp_path, capsys):
    cfg, backend, src, _ = trained
    out = _copy(src, tmp_path / "out")
    X.run_path(out, backend, "matched", "float64", "relu", 1).write_text("[1, 2]")
    argv = ["moons", "--backend", backend, "--seeds", "2", "--epochs", "5", "--samples", "300", "--lr", "0.01",
            "--compare-seeds", "2", "--no-progress", "--jobs", "1", "--out", str(out)]
    # the same settings as the fixture, except the plot grid: refused as other settings, before any training
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "grid_size: stored 10, now 60" in err
    cfg_cli = dataclasses.replace(cfg, grid_size=60)
    assert cfg_cli.run_key() != cfg.run_key()


# ----------------------------------------------------------------------------------------------------- parity

PARITY = ["parity", "--backend", "numpy", "--dtype", "float32,float16", "--order", "0,1", "--no-plots",
          "--activation", "gelu_none,relu"]
N_PARITY_GROUPS = 2 * len(IMPLS) * 2 * 2  # activations x impls x dtypes x orders, one group each


def _cells(out: Path) -> list:
    rows = json.loads((out / "parity.json").read_text())["cells"]
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


@pytest.mark.subprocess
def test_parity_sigint_keeps_measured_groups_and_resumes(tmp_path, capsys):
    out = tmp_path / "p"
    # started as a script's background command, SIGINT inherited ignored: gelulab stops on it all the same
    rc, err = _interrupted_subprocess([*PARITY, "--out", str(out)], out, "*.npz", sigint="background")
    assert rc == 130 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()[-1:]
    kept = len(list((out / "groups").glob("*.npz")))
    assert line == (f"gelulab parity: interrupted; {kept} parity groups are stored in {out / 'groups'}; run the "
                    "same command again to resume")
    assert 1 <= kept < N_PARITY_GROUPS and not (out / "parity.json").exists()
    # the same command again, and an uninterrupted run, in this process (the command line's main())
    assert cli.main([*PARITY, "--out", str(out)]) == 0, capsys.readouterr().err[-2000:]
    assert cli.main([*PARITY, "--out", str(tmp_path / "whole")]) == 0, capsys.readouterr().err[-2000:]
    assert len(list((tmp_path / "whole" / "groups").glob("*.npz"))) == N_PARITY_GROUPS
    assert _cells(out) == _cells(tmp_path / "whole")


def test_parity_reuses_stored_groups_and_measures_stale_or_damaged_ones_again(tmp_path, monkeypatch, capsys):
    argv = [*PARITY, "--out", str(tmp_path)]
    real, calls = parity.measure, []

    def counting(backend, group, *a):
        calls.append(group.id)
        if len(calls) == 3 and interrupt:
            raise KeyboardInterrupt
        return real(backend, group, *a)

    monkeypatch.setattr(parity, "measure", counting)
    interrupt = True
    assert cli.main(argv) == 130
    assert capsys.readouterr().err.endswith("2 parity groups are stored in "
                                            f"{tmp_path / 'groups'}; run the same command again to resume\n")
    interrupt, calls[:] = False, []
    assert cli.main(argv) == 0
    assert len(calls) == N_PARITY_GROUPS - 2  # the two stored groups are read
    whole = json.loads((tmp_path / "parity.json").read_text())
    # one group stored with other versions, one damaged file: both measured again, with a line each
    files = sorted((tmp_path / "groups").glob("*.npz"))
    with np.load(files[0]) as z:
        meta, bits = json.loads(str(z["meta"])), z["bits"]
    meta["key"]["versions"]["numpy"] = "0.0"
    meta["sha256"] = pstore.digest(meta, bits)  # as another version would have written it
    buf = io.BytesIO()
    np.savez_compressed(buf, meta=np.array(json.dumps(meta)), bits=bits)
    files[0].write_bytes(buf.getvalue())
    files[1].write_bytes(b"not an npz")
    calls[:] = []
    capsys.readouterr()
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert sorted(calls) == sorted(f.name[:-4] for f in files[:2])
    assert f"1 stored groups were measured with other versions (numpy 0.0 -> {np.__version__})" in err
    assert f"gelulab parity: {files[1]} (" in err and f"moved to {files[1].name}.damaged-1" in err
    assert (files[1].parent / f"{files[1].name}.damaged-1").read_bytes() == b"not an npz"
    again = json.loads((tmp_path / "parity.json").read_text())
    assert again["cells"] == whole["cells"]
    assert pstore.FOLDER == "groups"


# ------------------------------------------------------------------------------------------------------- swap


@pytest.fixture(scope="module")
def small_pairs(tmp_path_factory):
    from gelulab.experiments.swap import command as swap
    from gelulab.experiments.swap import model as bert

    try:
        bert.model_directory()
    except bert.ModelUnavailable as e:
        pytest.skip(str(e))
    pairs = swap.load_pairs()
    rows = [p for label in bert.PAIR_LABELS for p in [q for q in pairs if q[0] == label][:3]]
    path = tmp_path_factory.mktemp("pairs") / "pairs.tsv"
    path.write_text("label\tsentence_a\tsentence_b\n" + "".join("\t".join(p) + "\n" for p in rows))
    return path


def _swap_rows(out: Path) -> list:
    rows = json.loads((out / "swap.json").read_text())["rows"]
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


@pytest.mark.slow  # four swap runs over the packaged BertModel
def test_swap_interrupt_keeps_results_and_resumes(small_pairs, tmp_path, monkeypatch, capsys):
    from gelulab.experiments.swap import command as swap

    # gelulab's numpy encoder only: the transformers BertModel's rows are computed again on every run, never
    # stored or resumed (tests/test_swap.py runs the command with it)
    argv = ["swap", "--backend", "numpy", "--activation", "relu,gelu_tanh", "--pairs", str(small_pairs),
            "--no-transformers"]
    # the plot (half a run's time) is drawn by the resumed run only, the run under test; the others are about
    # the stored results
    real_plot = swap._plot
    monkeypatch.setattr(swap, "_plot", lambda report, path: None)
    assert cli.main([*argv, "--out", str(tmp_path / "whole")]) == 0
    real, calls = swap._encode, []

    def interrupted(*a):
        calls.append(a[3])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(swap, "_encode", interrupted)
    out = tmp_path / "out"
    capsys.readouterr()
    assert cli.main([*argv, "--out", str(out)]) == 130
    err = capsys.readouterr().err  # the progress bar, closed, then the one line
    assert err.endswith(f"\ngelulab swap: interrupted; 2 of 3 swap results are stored in {out / 'parts'}; run the "
                        "same command again to resume\n")
    monkeypatch.setattr(swap, "_encode", real)
    monkeypatch.setattr(swap, "_plot", real_plot)
    assert cli.main([*argv, "--out", str(out)]) == 0
    assert (out / "swap_layers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setattr(swap, "_plot", lambda report, path: None)
    assert _swap_rows(out) == _swap_rows(tmp_path / "whole")
    assert json.loads((out / "swap.json").read_text())["resumed"] == 2
    # a damaged stored result is set aside and computed again; other settings are refused before any work
    part = out / "parts" / "numpy" / "relu.swapped.json"
    part.write_text("{}")
    assert cli.main([*argv, "--out", str(out)]) == 0
    assert (part.parent / "relu.swapped.json.damaged-1").read_text() == "{}"
    assert _swap_rows(out) == _swap_rows(tmp_path / "whole")
    capsys.readouterr()
    assert cli.main([*argv, "--impl", "builtin", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "impl: stored 'formula', now 'builtin'" in err


# ------------------------------------------------------------------------------------------------------ bench


def test_bench_writes_cells_after_each_backend_and_on_ctrl_c(tmp_path, monkeypatch, capsys):
    from gelulab.benchmarks import activations as bench

    real, calls = bench.run_group, []

    def failing(backend, *a):
        calls.append(backend.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(backend, *a)

    monkeypatch.setattr(bench, "run_group", failing)
    argv = ["bench", "--quick", "--backend", "numpy", "--no-train-step", "--no-plots", "--copy-mib", "8"]
    assert cli.main([*argv, "--out", str(tmp_path / "b")]) == 130
    last = capsys.readouterr().err.splitlines()[-1]
    result = json.loads((tmp_path / "b" / "bench.partial.json").read_text())
    assert result["partial"] and result["interrupted"] and len(result["cells"]) >= 1
    assert not (tmp_path / "b" / "bench.json").exists()  # only a complete result is bench.json
    assert last == (f"gelulab bench: interrupted; the {len(result['cells'])} cells measured are in "
                    f"{tmp_path / 'b' / 'bench.partial.json'} (marked partial); bench does not resume: the same "
                    "command measures every cell again, so that all cells of one result share the machine's state")

    # a crash in a later backend keeps the cells of the backends before it (written after each backend)
    if "jax" not in SELECTED:
        return

    def crash(backend, *a):
        if backend.name == "jax":
            raise RuntimeError("simulated crash")
        return real(backend, *a)

    monkeypatch.setattr(bench, "run_group", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        bench.run(cli.build_parser().parse_args([*argv[:3], "numpy,jax", *argv[4:], "--out", str(tmp_path / "c")]))
    kept = json.loads((tmp_path / "c" / "bench.partial.json").read_text())
    assert kept["partial"] and {c["backend"] for c in kept["cells"]} == {"numpy"} and kept["cells"]


def test_an_interrupted_bench_rerun_keeps_the_last_complete_result_and_compare_says_partial(tmp_path, monkeypatch,
                                                                                            capsys):
    from gelulab.benchmarks import activations as bench

    out = tmp_path / "b"
    argv = ["bench", "--quick", "--backend", "numpy", "--activation", "relu,gelu_none", "--no-train-step",
            "--no-plots", "--copy-mib", "8", "--out", str(out)]
    assert cli.main(argv) == 0
    complete = (out / "bench.json").read_bytes()
    n_complete = len(json.loads(complete)["cells"])
    real, calls = bench.run_group, []

    def interrupted(backend, *a):
        calls.append(backend.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(backend, *a)

    monkeypatch.setattr(bench, "run_group", interrupted)
    assert cli.main(argv) == 130
    assert (out / "bench.json").read_bytes() == complete  # the last complete result, untouched
    partial = json.loads((out / "bench.partial.json").read_text())
    assert partial["partial"] and 1 <= len(partial["cells"]) < n_complete
    capsys.readouterr()
    assert cli.main(["bench", "compare", str(out / "bench.json"), str(out / "bench.partial.json")]) == 0
    captured = capsys.readouterr()
    note = (f"B ({out / 'bench.partial.json'}) is a partial result of an interrupted run: {len(partial['cells'])} "
            "cells; the cells it lacks show as only in the other run")
    assert captured.err.splitlines() == [f"gelulab bench compare: {note}"]
    assert captured.out.startswith(f"**{note}**\n")
    assert f"{len(partial['cells'])} cells in both runs; {n_complete - len(partial['cells'])} only in A" in captured.out
    # a complete rerun replaces bench.json and removes the partial files
    monkeypatch.setattr(bench, "run_group", real)
    assert cli.main(argv) == 0
    assert not (out / "bench.partial.json").exists() and not (out / "bench.partial.md").exists()
    assert not json.loads((out / "bench.json").read_text())["partial"]

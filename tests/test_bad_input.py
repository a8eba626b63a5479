"""Bad input on the command line: one row per case, its exit code and the first line it prints on stderr.

Each row of CASES runs `gelulab <argv>` in this process (gelulab.cli.main, stderr captured) after writing its
files into the test's folder ("{tmp}" in argv and in the files' text is that folder). Every row asserts its exit
code, a regex on the first stderr line, the number of stderr lines (one unless the row says otherwise) and that no
traceback is printed; training is made to fail the test if it starts, so a refusal comes before any work. The
next case is one more row: a command's own setup (a fake, a monkeypatch) goes in `setup`; plain (argv, exit
code, regex) tuples become rows with `rows()` (those of identify and swap: tests/bad_input_cases_identify_swap.py).

The tests after the table check what one line cannot show: the memory figures against the sizes themselves, what
a merge with a damaged input keeps, and Ray's lost workers (the translation, and one slow real run).
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from bad_input_cases_identify_swap import IDENTIFY_SWAP_CASES
from conftest import requires

from gelulab import cli as gelulab
from gelulab.backends import REGISTRY
from gelulab.experiments.moons import executors as X
from gelulab.experiments.moons import grid_study as GS
from gelulab.experiments.moons import study as S


@dataclass(frozen=True)
class Case:
    """One bad input. name: the test id; argv: the arguments after `gelulab` ("{tmp}" is the test's folder);
    code: the exit code; first_line: a regex searched in the first stderr line; files: {path under the folder:
    text} written first; lines: how many stderr lines (None: any); setup(monkeypatch, tmp_path): fakes the row
    needs; needs: modules that must be importable (else the row is skipped); marks: pytest marks (slow)."""

    name: str
    argv: tuple
    code: int
    first_line: str
    files: dict = field(default_factory=dict)
    lines: int | None = 1
    setup: Callable | None = None
    needs: tuple = ()
    marks: tuple = ()


def _grid(name: str, text: str, expected: str) -> Case:
    """A grid file that `gelulab moons --grid` refuses, naming the file and the key's path."""
    return Case(f"grid-{name}", ("moons", "--grid", "{tmp}/g.toml", "--out", "{tmp}/out", "--no-progress"), 2,
                r"^gelulab moons: error: grid file \S*g\.toml: " + expected, files={"g.toml": text})


BACKEND_PACKAGES = {c.package for c in REGISTRY.values()}


def _moons(option: str, value: str, expected: str) -> Case:
    return Case(f"moons{option}", ("moons", option, value, "--out", "{tmp}/out", "--no-progress"), 2,
                r"^gelulab moons: error: " + expected)


# one parity cell as parity.json stores it (the fields merge reads), and the same cell without "impl"
_CELL = {"backend": "numpy", "impl": "formula", "activation": "relu", "dtype": "float32", "mode": "eager",
         "order": 0, "region": "grid", "max_ulp": 0.0, "max_ulp_normal": 0.0, "passed": True}
_PARITY = json.dumps({"cells": [_CELL], "tolerances": {"float32/d0": {"rtol": 1e-5}}, "environment": {"threads": 1}})
_PARITY_NO_IMPL = json.dumps({"cells": [{k: v for k, v in _CELL.items() if k != "impl"}], "tolerances": {}})
# moons results whose summary lost a field, and whose summary is not a list
_MOONS = {"config": {"lr": 0.001}, "runs": [], "summary": [{"backend": "torch", "regime": "matched"}]}
_MOONS_NO_ARM = json.dumps(_MOONS)
_MOONS_BAD_SUMMARY = json.dumps({**_MOONS, "summary": 5})
_SIZE = r"at least (?:[\d.]+ [TPE]iB|[\d.]+e\+\d+ bytes) of memory; this machine has [\d.]+ [KMGTPE]iB$"


def _ray_gives_up(monkeypatch, tmp_path):
    """Ray's lost-task error on the first task, before any finished: as if every worker had been killed."""
    ray = pytest.importorskip("ray")
    names, _ = S.check_backends(S.selected_backends())
    if not names:
        pytest.skip("no selected backend can train (numpy has no autodiff)")

    def gives_up(fn, tasks, jobs, address, env):
        raise X.lost_workers(ray.exceptions.WorkerCrashedError(), 0, len(tasks), 0)
        yield

    monkeypatch.setattr(X, "_ray", gives_up)
    grid = tmp_path / "g.toml"
    grid.write_text(f"backends = [{names[0]!r}]\n" + grid.read_text())  # no line about a backend skipped


CASES = [
    # an --out whose name is not UTF-8 (the reports name it): refused before any work, for every command that writes
    *[Case(f"out-not-utf8-{cmd}", (cmd, *args, "--out", "{tmp}/res\udcff"), 2,
           rf"^gelulab {cmd}: error: --out \S*res\\xff: the path is not valid UTF-8")
      for cmd, args in (("parity", ("--backend", "numpy", "--order", "0", "--activation", "relu", "--no-plots")),
                        ("bench", ("--quick", "--backend", "numpy", "--no-plots")))],
    # the environment, checked in one place before any work: the same one line in every command
    *[Case(f"env-{var}-{cmd}", argv, 2, rf"^gelulab {cmd}: error: {var}='{re.escape(value)}'{expected}",
           setup=lambda mp, tmp, var=var, value=value: mp.setenv(var, value.replace("{tmp}", str(tmp))))
      for var, value, expected in (("GELULAB_KERNEL_COMPILE", "fast", r"; expected one of \['background'"),
                                   ("GELULAB_DEVICE", "cuda", r"; expected one of \['cpu', 'gpu', 'tpu'\]"))
      for cmd, argv in (("parity", ("parity", "--backend", "numpy", "--activation", "relu", "--order", "0",
                                    "--no-plots", "--out", "{tmp}/p")),
                        ("identify", ("identify", "numpy.tanh")))],
    Case("env-inductor-cache-is-a-file", ("parity", "--backend", "numpy", "--activation", "relu", "--no-plots",
                                          "--out", "{tmp}/p"), 2,
         r"^gelulab parity: error: TORCHINDUCTOR_CACHE_DIR='\S+/a-file' is a file; expected a folder",
         files={"a-file": "x\n"}, setup=lambda mp, tmp: mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp / "a-file"))),
    # a JAX compilation cache the user named that cannot be a folder, or cannot be written: refused before any work
    # (JAX itself would warn once per compiled function and go on)
    Case("env-jax-cache-under-a-file", ("parity", "--backend", "numpy", "--activation", "relu", "--no-plots",
                                        "--out", "{tmp}/p"), 2,
         r"^gelulab parity: error: JAX_COMPILATION_CACHE_DIR='\S+/a-file/cache' lies under \S+/a-file, which is a "
         r"file; expected a folder \(or unset\)$",
         files={"a-file": "x\n"},
         setup=lambda mp, tmp: mp.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp / "a-file" / "cache"))),
    Case("env-jax-cache-read-only", ("parity", "--backend", "numpy", "--activation", "relu", "--no-plots",
                                     "--out", "{tmp}/p"), 2,
         r"^gelulab parity: error: JAX_COMPILATION_CACHE_DIR='\S+/ro' cannot be written \(Permission denied in "
         r"\S+/ro\); expected a folder this user can write \(or unset\)$",
         setup=lambda mp, tmp: (tmp.joinpath("ro").mkdir(mode=0o555),
                                mp.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp / "ro"))),
         marks=(pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                                   reason="root writes into a read-only folder"),)),
    # a results folder holds one command's results (here written by an older gelulab, without the record: judged by
    # the files one command alone writes)
    Case("out-of-moons-given-to-the-grid", ("moons", "--grid", "{tmp}/g.toml", "--out", "{tmp}/X", "--no-progress"), 2,
         r"^gelulab moons: error: --out \S+/X holds results of `gelulab moons` \(results\.json, runs/\); choose "
         r"another --out for `gelulab moons --grid`$",
         files={"g.toml": "[base]\nseeds = 1\nn_samples = 100\n[axes]\ndepth = [1, 2]\nepochs = [1]\n",
                "X/runs/matched/seed0.json": "{}\n", "X/results.json": "{}\n"}),
    Case("out-of-the-grid-given-to-moons", ("moons", "--backend", "torch", "--seeds", "1", "--out", "{tmp}/X",
                                           "--no-progress"), 2,
         r"^gelulab moons: error: --out \S+/X holds results of `gelulab moons --grid` \(cells/, grid\.json, "
         r"report\.md\); choose another --out for `gelulab moons`$",
         files={"X/cells/c0/runs.txt": "x\n", "X/grid.json": "{}\n", "X/report.md": "# grid\n"}, needs=("torch",)),
    Case("out-of-parity-given-to-bench", ("bench", "--quick", "--backend", "numpy", "--no-plots", "--out", "{tmp}/X"),
         2, r"^gelulab bench: error: --out \S+/X holds results of `gelulab parity` \(parity\.json, report\.md\); "
            r"choose another --out for `gelulab bench`$",
         files={"X/parity.json": "{}\n", "X/report.md": "# parity\n"}),
    # sizes beyond this machine's memory: refused before anything is allocated, naming the field
    _moons("--samples", "100000000000", r"n_samples=100000000000: one training group .* needs " + _SIZE),
    _moons("--hidden", "100000000000", r"hidden=\(100000000000,\): one training group .* needs " + _SIZE),
    _moons("--epochs", "100000000000", r"epochs=100000000000: one training group .* needs " + _SIZE),
    _moons("--seeds", "1000000000000", r"--seeds 1000000000000: 1000000000000 seeds need "
           + _SIZE.replace("of memory", "of memory in one training group")),
    # grid files: every value type-checked, the key's path in the message
    _grid("depth-list", "[axes]\ndepth = [[1]]\n", r"\[axes\] depth\[0\] = \[1\]: expected an integer >= 1$"),
    _grid("depth-table", "[axes]\ndepth = [{a=1}]\n", r"\[axes\] depth\[0\] = \{a = 1\}: expected an integer >= 1$"),
    _grid("depth-is-table", "[axes]\ndepth = {a=1}\n", r"\[axes\] depth = \{a = 1\}: expected a list of values$"),
    _grid("lr-text", "[axes]\nlr = ['fast']\n", r"\[axes\] lr\[0\] = \"fast\": expected a number$"),
    _grid("dataset-number", "[axes]\ndataset = [3]\n", r"\[axes\] dataset\[0\] = 3: expected a name"),
    _grid("report-number", "report = 5\n", r"report = 5: expected a table \(\[report\]\)$"),
    _grid("heatmap-number", "[report]\nheatmap = 5\n", r"\[report\] heatmap = 5: expected a list of two"),
    _grid("heatmap-numbers", "[report]\nheatmap = [1, 2]\n", r"\[report\] heatmap\[0\] = 1: expected an axis name"),
    _grid("backends-number", "backends = [1]\n", r"backends\[0\] = 1: expected a backend name"),
    _grid("seeds-list", "[base]\nseeds = [[1]]\n", r"\[base\] seeds\[0\] = \[1\]: expected an integer >= 0$"),
    _grid("seeds-huge", "[base]\nseeds = 1000000000000\n",
          r"\[base\] seeds = 1000000000000: 1000000000000 seeds need " + _SIZE.replace("of memory", "of memory in one "
                                                                                  "training group")),
    _grid("width-huge", "[axes]\nwidth = [100000000000]\n",
          r"grid cell depth2-width100000000000-\S+: depth 2, width 100000000000: the parameters of 20 seeds need "
          + _SIZE),
    _grid("depth-huge", "[axes]\ndepth = [100000000000]\n",
          r"grid cell depth100000000000-\S+: depth 100000000000, width 32: the parameters of 20 seeds need " + _SIZE),
    # learning rates bounded in the study and the grid alike; --jobs bounded by the CPU count
    _moons("--lr", "100", r"lr=100\.0: expected a finite number with 0 < lr <= 10$"),
    _grid("lr-huge", "[axes]\nlr = [9223372036854775807]\n",
          r"\[axes\] lr\[0\] = 9223372036854775807: expected a finite number with 0 < lr <= 10$"),
    # a list with an empty item, and a count that is read only with a second dtype: refused, never passed over
    _moons("--hidden", "64,,64", r"argument --hidden: '64,,64': item 2 is empty; expected comma-separated integers"),
    _moons("--hidden", "64,", r"argument --hidden: '64,': item 2 is empty; expected comma-separated integers"),
    Case("moons-compare-seeds-negative", ("moons", "--compare-seeds", "-1", "--compare-dtype", "none", "--out",
                                          "{tmp}/out", "--no-progress"), 2,
         r"^gelulab moons: error: compare_seeds: -1 is not allowed; expected an integer >= 1$"),
    Case("moons-jobs-huge", ("moons", "--grid", "--jobs", "100000", "--out", "{tmp}/out", "--no-progress"), 2,
         rf"^gelulab moons: error: --jobs 100000: expected at most {4 * (os.cpu_count() or 1)} \(4 per CPU core, "
         rf"{os.cpu_count() or 1} cores here\)$"),
    # sizes refused before the allocation they would need
    Case("verify-chunk-huge", ("verify", "--stride", "1", "--chunk", "99999999999", "--out", "{tmp}/v"), 2,
         r"^gelulab verify: error: --chunk 99999999999: expected an integer from 1 to 2\^26 = 67108864 \(.* need at "
         r"least 1\.49e\+03 GiB of memory\)$"),
    Case("run-seeds-huge", ("run", "--seeds", "99999999999", "--out", "{tmp}/r"), 2,
         r"^gelulab run: error: --seeds 99999999999: 99999999999 seeds need "
         + _SIZE.replace("of memory", "of memory in one training group")),
    # options argparse refuses: one line naming the command, the option and the value, no usage block
    Case("argparse-moons-seeds-not-a-number", ("moons", "--seeds", "abc"), 2,
         r"^gelulab moons: error: argument --seeds: invalid int value: 'abc'; see gelulab moons --help$"),
    Case("argparse-parity-unknown-option", ("parity", "--foo"), 2,
         r"^gelulab parity: error: unrecognized arguments: --foo; see gelulab parity --help$"),
    Case("argparse-bench-compare-unknown-option", ("bench", "compare", "a.json", "b.json", "--foo"), 2,
         r"^gelulab bench compare: error: unrecognized arguments: --foo; see gelulab bench compare --help$"),
    Case("argparse-option-before-the-command", ("--verbose", "moons"), 2,
         r"^gelulab: error: unrecognized arguments: --verbose; see gelulab --help$"),
    Case("argparse-option-between-bench-and-compare", ("bench", "--foo", "compare", "a.json", "b.json"), 2,
         r"^gelulab bench: error: unrecognized arguments: --foo; see gelulab bench --help$"),
    Case("argparse-no-command", (), 2,
         r"^gelulab: error: the following arguments are required: command; see gelulab --help$"),
    # swap: an activation twice, a pairs file that is not a text file
    Case("swap-activation-twice", ("swap", "--activation", "relu,relu", "--out", "{tmp}/s"), 2,
         r"^gelulab swap: error: --activation='relu,relu': relu appears twice; expected each activation once$"),
    Case("swap-pairs-dev-null", ("swap", "--pairs", "/dev/null", "--out", "{tmp}/s"), 2,
         r"^gelulab swap: error: --pairs /dev/null: not a regular file; expected a TSV of labelled sentence pairs$"),
    # merge: a damaged input is set aside, named; the merge goes on with the rest or, with nothing left, exits 2
    Case("merge-parity-lacks-impl-goes-on", ("merge", "{tmp}/a", "{tmp}/b", "{tmp}/c", "--out", "{tmp}/m"), 0,
         r"^merge: \S*/a/parity\.json is damaged \(a record lacks the field 'impl'\); set aside, not merged$",
         files={"a/parity.json": _PARITY_NO_IMPL, "b/parity.json": _PARITY, "c/parity.json": _PARITY}),
    Case("merge-parity-lacks-impl", ("merge", "{tmp}/a", "{tmp}/b", "--out", "{tmp}/m"), 2,
         r"^gelulab merge: error: no results found in two or more of the folders \(found: parity \(\.\) in "
         r"\S*/b\); set aside as damaged: \S*/a/parity\.json \(a record lacks the field 'impl'\)",
         files={"a/parity.json": _PARITY_NO_IMPL, "b/parity.json": _PARITY}),
    Case("merge-two-damaged-moons", ("merge", "{tmp}/d", "{tmp}/e", "--out", "{tmp}/m"), 2,
         r"^gelulab merge: error: no results found .*\(found: nothing usable\); set aside as damaged: "
         r"\S*/d/results\.json \(a record lacks the field 'arm'\), \S*/e/results\.json \(a field has the wrong type",
         files={"d/results.json": _MOONS_NO_ARM, "e/results.json": _MOONS_BAD_SUMMARY}),
    Case("merge-not-json", ("merge", "{tmp}/a", "{tmp}/b", "{tmp}/c", "--out", "{tmp}/m"), 0,
         r"^merge: \S*/a/parity\.json is damaged \(not JSON \(", files={"a/parity.json": "{\"cells\": [",
                                                                          "b/parity.json": _PARITY,
                                                                          "c/parity.json": _PARITY}),
    # Ray: every worker of a task killed, beyond Ray's retries
    Case("ray-workers-all-killed", ("moons", "--grid", "{tmp}/g.toml", "--executor", "ray", "--out", "{tmp}/out",
                                    "--no-progress"), 2,
         r"^gelulab moons: error: --executor ray: Ray lost task 1 of 2 after its retries \(WorkerCrashedError: .*\); "
         r"0 of 2 tasks had finished and are kept; rerun the same command to run the rest$",
         files={"g.toml": "[base]\nseeds = 2\nn_samples = 100\n[axes]\ndepth = [1, 2]\nepochs = [1]\n"
                          "[report]\nheatmap = ['depth', 'lr']\n"},
         setup=_ray_gives_up, needs=("ray",)),
]




def rows(name: str, cases) -> list[Case]:
    """Cases from (argv, exit code, first-line regex) tuples, named name-0, name-1, ..."""
    return [Case(f"{name}-{i}", tuple(argv), code, first_line) for i, (argv, code, first_line) in enumerate(cases)]


CASES += rows("identify-swap", IDENTIFY_SWAP_CASES)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=c.marks) for c in CASES])
def test_bad_input_is_one_line(case: Case, tmp_path, monkeypatch, capsys):
    for module in case.needs:  # a backend's framework: skipped where GELULAB_BACKEND does not select it
        requires(module) if module in BACKEND_PACKAGES else pytest.importorskip(module)
    for rel, text in case.files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{tmp}", str(tmp_path)))
    monkeypatch.setattr(S, "train_groups", lambda *a, **k: pytest.fail("training started"))
    monkeypatch.setattr(GS, "train_cell", lambda *a, **k: pytest.fail("training started"))
    if case.setup is not None:
        case.setup(monkeypatch, tmp_path)
    rc = gelulab.main([a.replace("{tmp}", str(tmp_path)) for a in case.argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == case.code, err
    assert "Traceback" not in err, err
    assert lines and re.search(case.first_line, lines[0]), err
    if case.lines is not None:
        assert len(lines) == case.lines, err


def test_moons_help_names_every_impl_it_accepts():
    """`gelulab moons --impl` accepts every impl of the catalogue (MoonsConfig checks core.activations.IMPLS, and the
    kernel trains: its derivatives are the framework's custom ones, docs/kernels.md); --help names each of them."""
    import argparse

    from gelulab.core.activations import IMPLS
    from gelulab.experiments.moons.command import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    (action,) = [a for a in parser._actions if "--impl" in a.option_strings]
    assert all(re.search(rf"\b{impl}\b", action.help) for impl in IMPLS), action.help
    assert parser.parse_args(["--impl", "kernel"]).impl == "kernel"


# ----------------------------------------------------------------------------------------- what a line says

GiB = 2**30
_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": GiB, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}


def _bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * _UNITS[unit]


@pytest.mark.parametrize("option,value", [("--samples", 10**11), ("--hidden", 10**11), ("--epochs", 10**11)])
def test_memory_figures_are_the_sizes_own(option, value, tmp_path, capsys):
    """The bytes the line says are needed are at least what the sizes make certain (20 seeds, float64), and the
    machine's are its physical memory or less (a container's limit)."""
    assert gelulab.main(["moons", option, str(value), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    needed, has = re.search(r"needs at least (\S+ \S+) of memory; this machine has (\S+ \S+)$", err.strip()).groups()
    seeds, n_train = 20, 1400  # the defaults: 20 seeds, 2000 points of which 1400 train
    floor = {"--samples": seeds * value * 3 * 8,  # the points (x, y) and labels of every seed, float64
             "--hidden": seeds * (2 + 1 + 1) * value * 8,  # the weights into and out of the layer, and its biases
             "--epochs": seeds * value * n_train * 4}[option]  # one int32 index per train point and epoch
    assert _bytes(needed) >= floor * 0.995  # the line rounds to 3 digits
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < _bytes(has) <= physical * 1.005


def test_a_merge_goes_on_without_its_damaged_input(tmp_path, capsys):
    for d, text in (("a", _PARITY_NO_IMPL), ("b", _PARITY), ("c", _PARITY)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "parity.json").write_text(text)
    argv = ["merge", *(str(tmp_path / d) for d in "abc"), "--out", str(tmp_path / "m")]
    assert gelulab.main(argv) == 0
    merged = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert [r["label"] for r in merged["runs"]] == ["B", "C"]
    assert merged["damaged"] == [{"path": str(tmp_path / "a" / "parity.json"), "kind": "parity",
                                  "problem": "a record lacks the field 'impl'"}]
    text = (tmp_path / "m" / "merge.md").read_text()
    assert f"- {tmp_path / 'a' / 'parity.json'}: a record lacks the field 'impl'" in text
    assert (tmp_path / "a" / "parity.json").read_text() == _PARITY_NO_IMPL  # left as it was


def test_reference_store_entries_swapped_between_keys_are_named_and_computed_again(tmp_path, monkeypatch, capsys):
    """Two entries of the reference store (GELULAB_REFERENCE_CACHE) swapped: each passes its own checksum but holds
    another key's reference. Both are named as damaged in one line each and computed again, so the parity numbers
    equal those of a run on the undamaged store (each cell's max ULP), and the run exits 0."""
    from gelulab.experiments.parity import engine

    monkeypatch.setenv("GELULAB_REFERENCE_CACHE", str(tmp_path / "S"))
    argv = ["parity", "--backend", "numpy", "--activation", "gelu_none", "--dtype", "float32", "--impl", "formula",
            "--order", "0,1", "--no-plots", "--out"]
    engine.expected.cache_clear()  # the references this process holds: each run reads the store
    assert gelulab.main([*argv, str(tmp_path / "A")]) == 0
    (d0,), (d1,) = (list((tmp_path / "S").glob(f"gelu_none-d{k}-float32-*.npz")) for k in (0, 1))
    b0, b1 = d0.read_bytes(), d1.read_bytes()
    d0.write_bytes(b1)
    d1.write_bytes(b0)
    capsys.readouterr()
    engine.expected.cache_clear()
    assert gelulab.main([*argv, str(tmp_path / "B")]) == 0
    damaged = re.findall(r"gelulab: reference store entry (\S+) is damaged \(it holds the reference of another key: "
                         r"order \d, expected \d\); set aside as \S+; computed again", capsys.readouterr().err)
    assert sorted(damaged) == sorted([str(d0), str(d1)])

    def max_ulp(out):
        cells = json.loads((tmp_path / out / "parity.json").read_text())["cells"]
        return {(c["order"], c["region"]): c["max_ulp"] for c in cells}

    assert max_ulp("B") == max_ulp("A") and len(max_ulp("A")) > 2


# ----------------------------------------------------------------------------------------------------- Ray


def test_a_lost_ray_task_is_one_line_naming_what_was_kept():
    ray = pytest.importorskip("ray")
    e = X.lost_workers(ray.exceptions.WorkerCrashedError(), 4, 24, 7)
    assert isinstance(e, ValueError)  # the command line's one line, exit 2
    assert str(e).startswith("--executor ray: Ray lost task 5 of 24 after its retries (WorkerCrashedError: ")
    assert str(e).endswith("; 7 of 24 tasks had finished and are kept; rerun the same command to run the rest")
    assert "\n" not in str(e)


def test_the_cluster_line_names_address_dashboard_and_nodes():
    # what ray.init returns: a RayContext with address_info and dashboard_url
    context = SimpleNamespace(address_info={"gcs_address": "10.0.0.5:6379", "address": "10.0.0.5:6379",
                                            "webui_url": "10.0.0.5:8265"}, dashboard_url="10.0.0.5:8265")
    nodes = [{"Alive": True}, {"Alive": True}, {"Alive": False}]
    line = X.cluster_line("auto", context, nodes, {"CPU": 48.0})
    assert line == ("--executor ray --address auto: joined the Ray cluster at 10.0.0.5:6379 (dashboard "
                    "http://10.0.0.5:8265; 2 nodes alive, 48 CPUs)")


def _dies_on_task_one(i):
    if i == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # the worker process killed, every time Ray retries it
    return i


@pytest.mark.slow
def test_ray_workers_all_killed_end_in_one_error_after_the_finished_task(tmp_path):
    """A real local Ray instance (1 CPU): task 0 finishes, task 1 kills its worker on every retry. About 20 s."""
    ray = pytest.importorskip("ray")
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import the tests
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    context = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        line = X.cluster_line("auto", context, ray.nodes(), ray.cluster_resources())
        assert f"at {context.address_info['gcs_address']} " in line and "1 node alive, 1 CPU)" in line
        got = []
        with pytest.raises(X.WorkersLost, match=r"Ray lost task 2 of 2 after its retries \(WorkerCrashedError: "
                                                r".*\); 1 of 2 tasks had finished and are kept"):
            for i, result in X.run_tasks(_dies_on_task_one, [(0,), (1,)], "ray", jobs=1):
                got.append((i, result))
        assert got == [(0, 0)]
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])

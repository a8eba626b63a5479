"""`gelulab parity` on the command line: filters checked before any framework loads, repeats dropped, empty values
and empty matrices refused with the option named and nothing overwritten, absent devices reported in one line
with exit code 2. Fast: numpy backend, one dtype and order."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import readme_blocks

from gelulab import cli as gelulab
from gelulab.core.activations import IMPLS

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--backend", "numpy", "--order", "0", "--activation", "relu", "--no-plots"]


def _main(capsys, *argv):
    rc = gelulab.main(["parity", *argv])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--dtype", ""], "--dtype '' is empty"),
    (["--backend", " , "], "--backend ' , ' is empty"),
    (["--order", "1.0"], "--order '1.0' is not valid"),
    (["--activation", "swish"], "--activation 'swish' is not valid"),
    (["--impl", "fast"], "--impl 'fast' is not valid"),
    (["--mode", "graph"], "--mode 'graph' is not valid"),
    (["--device", ""], "--device '': expected one of"),
    (["--device", "npu"], "--device 'npu': expected one of"),
])
def test_bad_or_empty_filter_is_refused(argv, message, capsys, tmp_path):
    rc, err = _main(capsys, *SMALL, "--out", str(tmp_path / "p"), *argv)
    assert rc == 2
    assert err.startswith("gelulab parity: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "p").exists()


@pytest.mark.subprocess
def test_filters_are_checked_before_any_framework_is_imported():
    code = ("import sys; from gelulab import cli; rc = cli.main(['parity', '--backend', 'torch,jax,tensorflow', "
            "'--dtype', 'float8']); print(rc, sorted(m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=120)
    assert p.stdout.split() == ["2", "[]"], p.stdout + p.stderr
    assert "--dtype 'float8' is not valid" in p.stderr


def test_empty_matrix_is_refused_and_the_old_report_kept(capsys, tmp_path):
    (tmp_path / "report.md").write_text("previous report\n")
    rc, err = _main(capsys, "--backend", "numpy", "--mode", "compiled", "--out", str(tmp_path))
    assert rc == 2 and "--mode compiled" in err and "'numpy': ['eager']" in err
    assert (tmp_path / "report.md").read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_the_command_line_puts_the_callers_signal_handlers_back(capsys, tmp_path):
    """gelulab.cli.main, called in-process, takes SIGINT and SIGTERM while the command runs (tests/test_resume.py
    sends them to a real process) and leaves the caller's own handlers as they were."""
    def mine(signum, frame):
        raise AssertionError("not called")

    before = {s: signal.signal(s, mine) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc, _ = _main(capsys, "--backend", "numpy", "--mode", "compiled", "--out", str(tmp_path))
        assert rc == 2
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_a_handler_installed_outside_python_is_left_in_place(capsys, tmp_path, monkeypatch):
    """signal.getsignal gives None for a handler a C host installed: the command line cannot put such a handler
    back, so it does not replace it (and does not fail on return)."""
    real_get, real_set, mine = signal.getsignal, signal.signal, signal.getsignal(signal.SIGTERM)

    def as_from_c(get_or_set):  # Python's view of a handler it did not install: None
        def wrapped(s, *handler):
            out = get_or_set(s, *handler)
            return None if s == signal.SIGTERM and out is mine else out

        return wrapped

    monkeypatch.setattr(signal, "getsignal", as_from_c(real_get))
    monkeypatch.setattr(signal, "signal", as_from_c(real_set))
    rc, _ = _main(capsys, "--backend", "numpy", "--mode", "compiled", "--out", str(tmp_path))
    assert rc == 2 and real_get(signal.SIGTERM) is mine


def test_ctrl_c_before_the_command_starts_is_one_line_and_exit_130(capsys, tmp_path, monkeypatch):
    import contextlib

    from gelulab.core.plumbing import output

    @contextlib.contextmanager
    def ctrl_c_while_starting():
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(output, "quiet_frameworks", ctrl_c_while_starting)
    assert gelulab.main(["parity", "--backend", "numpy", "--out", str(tmp_path / "p")]) == 130
    err = capsys.readouterr().err
    assert err == "gelulab parity: interrupted before the command started; nothing was written\n"
    assert not (tmp_path / "p").exists()


def test_repeated_values_give_the_same_cells(capsys, tmp_path):
    cells = {}
    for tag, argv in {"once": ["--dtype", "float16"],
                      "twice": ["--backend", "numpy,numpy", "--dtype", "float16, float16", "--order", "0,0"]}.items():
        assert gelulab.main(["parity", *SMALL, *argv, "--out", str(tmp_path / tag)]) == 0
        rows = json.loads((tmp_path / tag / "parity.json").read_text())["cells"]
        cells[tag] = sorted((r["backend"], r["impl"], r["activation"], r["dtype"], r["mode"], r["order"],
                             r["region"]) for r in rows)
    assert cells["twice"] == cells["once"]
    assert len(set(cells["once"])) == len(cells["once"])
    # numpy: ReLU in every implementation, float16, eager, order 0, one cell per region
    assert {c[1] for c in cells["once"]} == set(IMPLS) and {c[3] for c in cells["once"]} == {"float16"}


@pytest.mark.subprocess
def test_absent_device_is_one_line_and_exit_code_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "gelulab", "parity", *SMALL, "--device", "gpu", "--out", str(tmp_path)],
                       check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert p.returncode == 2
    assert p.stderr.startswith("gelulab parity: error: ") and "'gpu'" in p.stderr and p.stderr.count("\n") == 1
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "report.md").exists()


@pytest.mark.subprocess
def test_an_option_argparse_refuses_is_one_line_and_exit_code_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "gelulab", "moons", "--seeds", "abc", "--out", str(tmp_path / "m")],
                       check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert p.returncode == 2
    assert p.stderr == "gelulab moons: error: argument --seeds: invalid int value: 'abc'; see gelulab moons --help\n"
    assert p.stdout == "" and not (tmp_path / "m").exists()


def test_missing_framework_is_a_clean_error(capsys, monkeypatch, tmp_path):
    from gelulab import backends

    def unavailable(name, device=None):
        raise backends.BackendUnavailable(f"backend {name!r} is not available; install it with: pip install x")

    monkeypatch.setattr("gelulab.experiments.parity.command.get_backend", unavailable)
    rc, err = _main(capsys, *SMALL, "--dtype", "float16", "--out", str(tmp_path))
    assert rc == 2
    assert err == "gelulab parity: error: backend 'numpy' is not available; install it with: pip install x\n"


def test_filtered_plot_has_only_the_selected_panels(tmp_path):
    import matplotlib.image

    argv = ["parity", "--backend", "numpy", "--activation", "gelu_tanh", "--dtype", "float16", "--order", "0",
            "--out", str(tmp_path)]
    assert gelulab.main(argv) == 0
    from gelulab.experiments.parity.command import DPI, HEADER_H, LEGEND_W, PANEL_H, PANEL_W

    h, w = matplotlib.image.imread(tmp_path / "errors_order0.png").shape[:2]
    # one GELU form x one dtype: one panel, the legend beside it and the title above (plot_errors' layout)
    assert (w, h) == (round((PANEL_W + LEGEND_W) * DPI), round((PANEL_H + HEADER_H) * DPI))
    assert "errors_order1.png" not in (tmp_path / "report.md").read_text()


# ------------------------------------------------------------------------ summaries, fault kinds, --fail-on-new


def _parity_json(tmp_path, *argv):
    assert gelulab.main(["parity", *argv, "--no-plots", "--out", str(tmp_path)]) == 0
    return json.loads((tmp_path / "parity.json").read_text())


def _summary_row(md: str, *cells) -> list[str]:
    head = [c.strip() for c in md.splitlines()[0].strip("|").split("|")]
    for line in md.splitlines()[2:]:
        row = [c.strip() for c in line.strip("|").split("|")]
        if row[:len(cells)] == list(cells):
            return dict(zip(head, row))
    raise AssertionError(f"no summary row {cells}")


def test_summary_of_one_derivative_order_covers_exactly_the_cells_that_ran(tmp_path):
    data = _parity_json(tmp_path, "--backend", "numpy", "--impl", "builtin", "--activation", "gelu_tanh",
                        "--dtype", "float64", "--order", "1")
    head = data["summary_md"].splitlines()[0]
    assert "max ULP f' |" in head and "max ULP f |" not in head and "max ULP f''" not in head
    row = _summary_row(data["summary_md"], "numpy", "builtin", "gelu(tanh)", "float64")
    flagged = [c for c in data["cells"] if not c["passed"]]
    assert flagged and int(row["flagged"]) == len(flagged)  # not a silent 0 for cells that were flagged
    worst = max(c["max_ulp_normal"] for c in data["cells"])
    assert worst > 0 and float(row["max ULP f'"]) == pytest.approx(worst, rel=1e-2)


COMPILED = next((b for b in ("jax", "tensorflow") if b in __import__("conftest").SELECTED), None)


@pytest.mark.compile
@pytest.mark.skipif(COMPILED is None, reason="needs jax or tensorflow (a compiled mode that compiles quickly)")
def test_summary_of_compiled_mode_alone_is_not_zero(tmp_path):
    data = _parity_json(tmp_path, "--backend", COMPILED, "--mode", "compiled", "--impl", "builtin",
                        "--activation", "gelu_tanh", "--dtype", "float32", "--order", "0")
    assert {c["mode"] for c in data["cells"]} == {"compiled"}
    row = _summary_row(data["summary_md"], COMPILED, "builtin", "gelu(tanh)", "float32")
    # the tanh builtin cancels in the negative tail (a known fault): its error is large, and so is the summary
    assert float(row["max ULP f"]) == pytest.approx(max(c["max_ulp_normal"] for c in data["cells"]), rel=1e-2)
    assert float(row["max ULP f"]) > 1000 and int(row["flagged"]) > 0


def test_flagged_cells_are_split_by_kind(tmp_path):
    data = _parity_json(tmp_path, "--backend", "numpy", "--activation", "gelu_none,gelu_tanh", "--dtype",
                        "float64", "--order", "0,1")
    kinds = {(c["impl"], c["activation"], c["order"], c["region"]): c["flag"] for c in data["cells"] if c["flag"]}
    # numpy's builtin is PyTorch OpInfo's reference: a known fault with no upstream report
    assert kinds[("builtin", "gelu_none", 0, "negative_tail")] == "unreported"
    # gelulab's float64 formula meets its goal in every cell, its tails included (no cell of gelulab's own)
    assert not [k for k in kinds if k[0] == "formula"]
    assert data["n_flagged"] == data["n_upstream"] + data["n_unreported"] + data["n_own"] + data["n_new"]
    assert data["n_new"] == 0 and data["n_own"] == 0 and data["n_unreported"] >= 1
    text = (tmp_path / "report.md").read_text()
    assert "0 of gelulab's own formula or kernel" in text


def test_fault_kind_defaults_for_new_entries():
    from gelulab.core.parity.known_faults import KnownFault

    assert KnownFault("r", "https://github.com/pytorch/pytorch/issues/1").classification == "upstream"
    assert KnownFault("r", "no upstream report found (2026-11)").classification == "unreported"
    assert KnownFault("r", "https://x", impl="formula").classification == "gelulab"
    assert KnownFault("r", "https://x", kind="unreported").classification == "unreported"


def test_fail_on_new_exits_1_only_for_a_cell_no_known_fault_explains(tmp_path, monkeypatch, capsys):
    argv = ["parity", "--backend", "numpy", "--impl", "builtin", "--activation", "gelu_tanh", "--dtype", "float32",
            "--order", "0", "--no-plots", "--fail-on-new"]
    assert gelulab.main([*argv, "--out", str(tmp_path / "known")]) == 0  # flagged, but every cell is known
    monkeypatch.setattr("gelulab.experiments.parity.engine.known_fault", lambda group, region: None)
    capsys.readouterr()
    assert gelulab.main([*argv, "--out", str(tmp_path / "new")]) == 1
    last = capsys.readouterr().err.splitlines()[-1]  # after the progress bar: one line
    assert last.startswith("gelulab parity: ") and \
        "cells beyond tolerance match no known fault (numpy/builtin/gelu_tanh/float32" in last
    data = json.loads((tmp_path / "new" / "parity.json").read_text())
    assert data["n_new"] == data["n_flagged"] > 0


# ------------------------------------------------------------------------------------------ an early Ctrl-C


def _gelulab_command() -> list[str]:
    """The `gelulab` console script of this environment (else `python -m gelulab`)."""
    script = Path(sys.executable).with_name("gelulab")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gelulab"]


def _caught(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for signal `signum` (Linux: the SigCgt mask of /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    return bool(int(mask, 16) >> (signum - 1) & 1)


def _sigint_caught(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGINT."""
    return _caught(pid, signal.SIGINT)


def _state(pid: int) -> str:
    """The state letter of process `pid` (Linux: /proc/<pid>/stat; "T" stopped, "Z" ended, "" gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


@contextlib.contextmanager
def _stopped(p: subprocess.Popen):
    """Hold process `p` stopped (SIGSTOP) for the block, so what the block reads of it (its handlers) is still so
    when the block signals it, however late this process is scheduled; it goes on (SIGCONT) when the block ends.
    Yields whether it is stopped (False: it has ended)."""
    p.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while _state(p.pid) not in ("T", "t", "Z", "X", ""):  # SIGSTOP takes effect when the process next runs
            assert time.monotonic() < deadline, "the process did not stop"
            time.sleep(0.001)
        yield _state(p.pid) in ("T", "t")
    finally:
        p.send_signal(signal.SIGCONT)


def _start_with_sigint_ignored(argv: list[str]) -> subprocess.Popen:
    """Start argv with SIGINT ignored from its first instruction, as a shell leaves it for `cmd &` in a script
    (an ignored disposition is inherited across exec)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    finally:
        signal.signal(signal.SIGINT, previous)


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status")


@linux_only
def test_an_ignored_sigint_before_the_handlers_are_in_place_is_lost_as_documented():
    """SIGINT 0.02 s after launch, inherited ignored: before gelulab.cli.main has put its handlers in place the
    signal is lost (Python keeps an inherited SIG_IGN) and the command runs to its end as if it had not been sent
    (README, "Results folders, interrupts and exit codes"); once they are in place it is the one line and 130.
    The process is stopped while its handlers are read and the signal is sent, so the branch checked is the one
    the signal met (a late look could see the handlers of a later moment: in place, or put back at the end)."""
    from gelulab.experiments.moons.grid import DEFAULT_GRID

    p = _start_with_sigint_ignored([*_gelulab_command(), "moons", "--print-grid"])
    try:
        time.sleep(0.02)
        with _stopped(p) as running:
            in_place = running and _sigint_caught(p.pid)
            p.send_signal(signal.SIGINT)  # where SIGINT is ignored, the kernel drops it now
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "Traceback" not in err, err
    if in_place:
        # wherever the handlers met it: before the command line was read, or in the command
        assert p.returncode == 130, (p.returncode, err)
        assert err in ("gelulab: interrupted before the command started; nothing was written\n",
                       "gelulab moons: interrupted before the command started; nothing was written\n",
                       "gelulab moons: interrupted; nothing was being written\n"), err
    else:
        assert (p.returncode, out, err) == (0, DEFAULT_GRID, "")


@linux_only
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_once_the_handlers_are_in_place_stops_with_130(tmp_path, signum):
    """The end of the window: as soon as the process has a handler for the signal (gelulab.cli.main's, the first
    thing it does), a SIGINT that the process inherited ignored, or a SIGTERM, ends the command with one line and
    exit 128 + the signal (130, 143), also when it lands in the imports that follow (where Python drops a
    KeyboardInterrupt raised in a module lock's callback: core.plumbing.interrupts sends it again)."""
    p = _start_with_sigint_ignored([*_gelulab_command(), "parity", *SMALL, "--dtype", "float32", "--mode", "eager",
                                    "--out", str(tmp_path / "p")])
    try:
        deadline = time.monotonic() + 300
        while True:
            with _stopped(p) as running:
                if running and _caught(p.pid, signum):  # sent while the handler is in place, never after
                    p.send_signal(signum)
                    break
            assert p.poll() is None, f"the command ended (exit {p.returncode}) before the signal could be sent"
            assert time.monotonic() < deadline, "the command never put its handler in place"
            time.sleep(0.001)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and not line.startswith("parity:")]
    assert p.returncode == 128 + signum, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(("gelulab: interrupted before the command started", "gelulab parity: interrupted")), err


def test_the_readme_names_every_namespace_identify_accepts():
    """The allow-list of `gelulab identify` expressions (experiments/identify/expression.py NAMESPACES, what
    `gelulab identify --help` describes) is the one docs/in-your-model.md's "Which GELU is this?" lists: every
    namespace, written with the alias `tf` for tensorflow, and each member of the namespaces that accept five or
    fewer."""
    import re

    from gelulab.experiments.identify.expression import NAMESPACES

    text = readme_blocks.text()  # README.md and docs/
    start = text.index("From the command line, A and B are expressions")
    listed = " ".join(text[start:text.index("Only the modules named are imported", start)].split())
    missing = []
    for ns in NAMESPACES:
        written = re.sub(r"^tensorflow\b", "tf", ns.path)
        if not re.search(rf"`{re.escape(written)}[`.]|(?<![\w.`]){re.escape(written)}'s ", listed):
            missing.append(ns.path)
        if len(ns.names) <= 5:
            missing += [f"{ns.path}.{n}" for n in ns.names if not re.search(rf"\b{re.escape(n)}\b", listed)]
    assert missing == []



def test_the_run_reports_note_on_ulps_next_to_f_prime_zero_is_true(tmp_path, capsys):
    """`gelulab run`'s report says that max ULP f′ includes the inputs next to f′'s zero, judged absolutely. Checked
    against mpmath (the zero of exact GELU's f′ = Φ(x) + x·φ(x)), IEEE float64 (4 eps = 4 · 2**-52) and a real
    float64 parity cell of the numpy formula: its max ULP lies above 2048 at an input inside the stated window,
    with an absolute error within the stated bound, and the cell passes."""
    import re

    import mpmath

    from gelulab.experiments.run.command import root_note

    note = root_note()
    zero = float(mpmath.findroot(lambda x: mpmath.ncdf(x) + x * mpmath.npdf(x), -0.75))
    stated = re.search(r"x ≈ −(\d\.\d+), window \[(-?[\d.]+), (-?[\d.]+)\]", note)
    assert stated and round(zero, 4) == -float(stated[1]) and float(stated[2]) < zero < float(stated[3])
    bound = float(re.search(r"\|error\| ≤ ([\d.e+-]+)\)", note)[1])
    assert bound == float(f"{4 * 2.0**-52:.2g}") == 8.9e-16 and "2048-ULP goal" in note

    out = tmp_path / "p"
    assert gelulab.main(["parity", "--backend", "numpy", "--impl", "formula", "--activation", "gelu_none",
                         "--dtype", "float64", "--order", "1", "--no-plots", "--out", str(out)]) == 0
    capsys.readouterr()
    cells = json.loads((out / "parity.json").read_text())["cells"]
    worst = max(cells, key=lambda c: c["max_ulp"])
    assert worst["max_ulp"] > 2048 and worst["passed"] and float(stated[2]) <= worst["x_at_max_ulp"] <= float(stated[3])
    assert worst["max_abs"] <= 4 * 2.0**-52


def test_the_dropped_interrupt_hook_is_in_place_before_the_handlers(monkeypatch):
    """From the moment the command line's SIGINT/SIGTERM handlers are in place, a KeyboardInterrupt that Python
    drops (one raised in an import's module-lock callback: "Exception ignored in: <function
    _get_module_lock.<locals>.cb>") is sent again, so no interrupt is lost in the imports that follow: each handler
    is put in place while gelulab's sys.unraisablehook is already installed."""
    import signal as _signal

    from gelulab.cli import _interrupt_handlers

    before, seen, real = sys.unraisablehook, [], _signal.signal

    def recording(signum, handler):
        if handler in (_signal.default_int_handler,) or getattr(handler, "__name__", "") == "on_sigterm":
            seen.append((signum, sys.unraisablehook is not before))
        return real(signum, handler)

    monkeypatch.setattr(_signal, "signal", recording)
    with _interrupt_handlers():
        pass
    first = {}
    for signum, hooked in seen:  # the installs; a later call puts the caller's handler back
        first.setdefault(signum, hooked)
    assert first == {_signal.SIGINT: True, _signal.SIGTERM: True}, seen
    assert sys.unraisablehook is before


# the one option name of each concept, in every command that offers it (an earlier name may stay as a hidden alias)
CONCEPTS = {"backend": "--backend", "activation": "--activation", "dtype": "--dtype", "mode": "--mode",
            "device": "--device", "impl": "--impl", "order": "--order", "out": "--out", "verbose": "--verbose"}


def _visible_options():
    """{command: {dest: [option strings shown by --help]}} of every subcommand of `gelulab`."""
    import argparse

    from gelulab.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {a.dest: list(a.option_strings) for a in p._actions
                   if a.option_strings and a.help != argparse.SUPPRESS} for name, p in sub.choices.items()}


def test_the_same_concept_has_the_same_option_name_in_every_command():
    """Each command's --help, read from the parser: an option for a backend list is --backend everywhere (not
    --backends in some), an activation list --activation, and so on; a dest that is a plural of a concept is the
    same concept. Every command refuses abbreviations (allow_abbrev=False)."""
    seen = {}
    for command, options in _visible_options().items():
        for dest, strings in options.items():
            concept = dest[:-1] if dest.endswith("s") and dest[:-1] in CONCEPTS else dest
            if concept in CONCEPTS:
                seen.setdefault(concept, set()).update(s for s in strings if s.startswith("--"))
                assert CONCEPTS[concept] in strings, (command, dest, strings)
    assert seen["backend"] == {"--backend"} and seen["activation"] == {"--activation"}, seen
    for command in _visible_options():
        assert _subparser(command).allow_abbrev is False, command


def _subparser(command):
    import argparse

    from gelulab.cli import build_parser

    parser = build_parser()
    assert parser.allow_abbrev is False
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def test_an_abbreviated_option_is_refused_in_one_line(capsys):
    """`gelulab moons --seed 3` is not `--seeds 3`: argparse's abbreviations are off, so the mistyped option is
    refused in one line, exit 2, before any work."""
    assert gelulab.main(["moons", "--seed", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gelulab moons: error: unrecognized arguments: --seed 3; see gelulab moons --help"], err


def test_the_earlier_option_names_still_work_but_are_not_shown():
    from gelulab.cli import build_parser

    args = build_parser().parse_args(["moons", "--backends", "numpy"])
    assert tuple(args.backends) == ("numpy",)
    args = build_parser().parse_args(["swap", "--backends", "numpy", "--activations", "relu"])
    assert (args.backends, args.activations) == ("numpy", "relu")


def test_the_run_report_starts_with_the_question_and_the_answer():
    """The first screen of `gelulab run`'s report: the question, the article's setting, the paired GELU - ReLU
    difference with its 95 % CI and verdict, and the seeds a difference of the size seen would need. The paired
    differences here are made up; their mean and t interval are computed with numpy and scipy.stats."""
    import numpy as np
    from scipy import stats as sps

    from gelulab.core.activations import HEADLINE
    from gelulab.experiments.moons.config import MoonsConfig
    from gelulab.experiments.run.command import answer

    diffs = np.array([0.005, -0.0025, 0.0, 0.0075, 0.0])  # five seeds' accuracy differences
    lo, hi = sps.t.interval(0.95, len(diffs) - 1, loc=diffs.mean(), scale=sps.sem(diffs))
    row = {"metric": "test_acc", "regime": "matched", "backend": "torch", "arm": "gelu_none", "n": 5,
           "mean_diff": diffs.mean(), "sd_diff": diffs.std(ddof=1), "ci_low": lo, "ci_high": hi,
           "ci_method": "Student t", "wins": 2, "losses": 1, "ties": 2, "verdict": "no significant difference",
           "kind": "underpowered", "t_p": sps.ttest_1samp(diffs, 0.0).pvalue}
    cfg = MoonsConfig(seeds=tuple(range(5)), epochs=100, arms=HEADLINE)
    text = answer(cfg, {"paired": [row]}, "3500 cells.")
    head = "\n".join(text.splitlines()[:25])
    assert "Does exact GELU beat ReLU" in head and "2000 samples" in head and "Adam lr 0.001, 100 epochs" in head
    assert (f"**Verdict: not settled.** GELU − ReLU test accuracy {100 * diffs.mean():+.2f} pp, 95 % CI "
            f"[{100 * lo:+.2f}, {100 * hi:+.2f}] pp") in head
    assert "GELU better on 2, ReLU on 1, tied on 2 of 5 seeds" in head
    assert ("paired tests on the same seeds: the Wilcoxon test cannot reach p < 0.05 with 5 seeds (paired t-test p "
            f"= {sps.ttest_1samp(diffs, 0.0).pvalue:.2g})") in head
    need = int(((sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) * diffs.std(ddof=1) / diffs.mean()) ** 2) + 1
    assert f"would need about {need} seeds: `gelulab moons --backend torch --seeds {need}`" in head


def test_the_run_verdict_is_equivalence_by_tost_gelu_or_relu_better_or_not_settled():
    """TOST (Schuirmann 1987) at the stated margin: both one-sided t-tests computed here with scipy.stats.ttest_1samp
    on the made-up paired differences; equivalence when both p < 0.05. A significant paired comparison (the
    study's kind "higher" / "lower") is GELU / ReLU better."""
    import numpy as np
    from scipy import stats as sps

    from gelulab.experiments.run.command import MARGIN_PP, verdict

    def study(diffs, kind="tie"):
        d = np.asarray(diffs)
        return {"paired": [{"metric": "test_acc", "regime": "matched", "n": d.size, "mean_diff": d.mean(),
                            "sd_diff": d.std(ddof=1), "kind": kind}]}

    m = MARGIN_PP / 100
    tight = np.random.default_rng(0).normal(0.0005, 0.002, 30)  # differences well inside ±0.5 pp
    p_low = sps.ttest_1samp(tight, -m, alternative="greater").pvalue
    p_high = sps.ttest_1samp(tight, m, alternative="less").pvalue
    v = verdict(study(tight))
    assert v["verdict"] == f"equivalent within ±{MARGIN_PP:g} pp" and max(p_low, p_high) < 0.05
    assert v["tost_p"] == pytest.approx(max(p_low, p_high), rel=1e-9)
    wide = np.random.default_rng(1).normal(0.0, 0.03, 5)  # five noisy seeds: neither equivalent nor different
    assert verdict(study(wide))["verdict"] == "not settled"
    assert verdict(study(tight + 0.01, kind="higher"))["verdict"] == "GELU better"
    assert verdict(study(tight - 0.01, kind="lower"))["verdict"] == "ReLU better"


def _help(capsys, monkeypatch, *argv) -> str:
    """What `gelulab <argv> --help` prints (80 columns), checking that it exits 0."""
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as e:
        gelulab.main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _listed_commands(capsys, monkeypatch) -> list[str]:
    """The subcommands `gelulab --help` lists, in its `{run,parity,...}` choice."""
    import re

    text = _help(capsys, monkeypatch)
    return re.search(r"\{([a-z,]+)\}", text).group(1).split(",")


def test_every_commands_help_starts_with_what_it_does_writes_and_its_exit_codes(capsys, monkeypatch):
    """After the usage block, each subcommand's --help starts with 2 to 6 lines (of at most 80 characters) of at
    least one sentence: what the command does, what it writes (or that it writes nothing) and its exit codes,
    0 and 2 among them (2: bad input, docs/results-and-exit-codes.md)."""
    import re

    commands = _listed_commands(capsys, monkeypatch)
    assert {"run", "parity", "moons", "bench", "swap", "identify", "merge", "verify", "warmup"} <= set(commands)
    for command in commands:
        text = _help(capsys, monkeypatch, command)
        usage, description, *_ = text.split("\n\n")
        assert usage.startswith(f"usage: gelulab {command} "), (command, usage)
        lines = description.splitlines()
        assert 2 <= len(lines) <= 6 and max(map(len, lines)) <= 80, (command, lines)
        assert not lines[0].endswith(":"), (command, lines)  # a description, not a section heading
        prose = " ".join(lines)
        assert re.search(r"[A-Z][^.]{20,}\.( |$)", prose), (command, prose)  # at least one sentence
        assert re.search(r"\b[Ww]rites\b", prose), (command, prose)
        codes = re.search(r"Exit codes?: (.*)", prose)
        assert codes and re.search(r"\b0\b", codes.group(1)) and re.search(r"\b2\b", codes.group(1)), (command, prose)


def _bare_tokens(usage: str) -> list[str]:
    """The tokens of a usage block outside every [...] and (...) group, after `usage: gelulab <command>`."""
    import re

    text = " ".join(usage.split())
    while re.search(r"\[[^\[\]]*\]|\([^()]*\)", text):
        text = re.sub(r"\[[^\[\]]*\]|\([^()]*\)", "", text)
    return text.split()[3:]


def test_no_usage_shows_an_optional_positional_as_required(capsys, monkeypatch):
    """In every subcommand's usage line, what stands outside brackets is a positional the command requires:
    `gelulab bench` runs without `compare` (it is a subcommand you may add), so its usage shows `[compare ...]`;
    identify's B is optional (`A [B]`), merge takes one DIR or more (`DIR [DIR ...]`)."""
    import argparse

    from gelulab.cli import build_parser

    assert build_parser().parse_args(["bench", "--quick"]).bench_command is None  # compare is optional in fact
    for command in _listed_commands(capsys, monkeypatch):
        parser = _subparser(command)
        required = {a.metavar or a.dest for a in parser._actions
                    if not a.option_strings and a.required and a.help != argparse.SUPPRESS}
        usage = _help(capsys, monkeypatch, command).split("\n\n")[0]
        assert set(_bare_tokens(usage)) <= required, (command, _bare_tokens(usage), required)
    bench_usage = " ".join(_help(capsys, monkeypatch, "bench").split("\n\n")[0].split())
    assert bench_usage.endswith("[compare ...]"), bench_usage
    assert _bare_tokens(_help(capsys, monkeypatch, "identify").split("\n\n")[0]) == ["A"]
    assert _bare_tokens(_help(capsys, monkeypatch, "merge").split("\n\n")[0]) == ["DIR"]

"""A command killed with SIGKILL leaves no process behind: its workers, their manager and the log filter end with it
(core.plumbing.interrupts.die_with_parent), so nothing goes on burning the cores after the command is gone.

Each test starts `python -m gelulab ...` in a session of its own, waits until its children run, kills the command
with SIGKILL, and counts the processes left in that session (psutil) until none is left or 5 s have passed. A
process that has ended but is not yet reaped (a zombie: its parent, the command, is gone, so it waits for the
machine's init process, which reaps on its own schedule, every 2 s on some) runs nothing and is not counted.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import SELECTED

from gelulab.backends import capabilities

ROOT = Path(__file__).resolve().parents[1]
TRAINABLE = [b for b in SELECTED if capabilities(b).autodiff]
pytestmark = pytest.mark.subprocess


def _left_after_sigkill(argv, ready, timeout=300) -> list[str]:
    """Start gelulab with `argv`, SIGKILL it once ready(process) is true, and return the command lines of the
    processes of its session still alive 5 s later (then killed, so a failing test leaves nothing either); [] as
    soon as none is."""
    p = subprocess.Popen([sys.executable, "-m", "gelulab", *argv], cwd=ROOT, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    try:
        while not ready(psutil.Process(p.pid)):
            assert p.poll() is None, f"gelulab ended (exit {p.returncode}) before its workers started"
            assert time.monotonic() - start < timeout, "the workers did not start"
            time.sleep(0.1)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
    # a session none of whose processes is alive gets no new one: two looks 0.1 s apart that find none end the wait
    # (one look could miss a child forked by a parent that died while the look ran)
    deadline, empty = time.monotonic() + 5, 0
    while time.monotonic() < deadline:
        left = _in_session(p.pid)
        empty = 0 if left else empty + 1
        if empty == 2:
            break
        time.sleep(0.1)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    return [" ".join(proc.info["cmdline"] or [])[:200] for proc in left]


def _in_session(sid: int) -> list[psutil.Process]:
    """The processes of session `sid` that still run (with their "cmdline" info); a zombie has ended."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            pass
    return found


def _children(n):
    return lambda proc: len(proc.children(recursive=True)) >= n


def _spawned(n):
    """Ready once n processes started by multiprocessing's spawn (workers, a manager) run under the command."""
    def ready(proc):
        found = 0
        for c in proc.children(recursive=True):
            try:
                found += "spawn_main" in " ".join(c.cmdline())
            except psutil.Error:
                pass
        return found >= n
    return ready


@pytest.mark.slow
def test_sigkill_of_parity_leaves_no_process(tmp_path):
    out = tmp_path / "parity"
    backend = "torch" if "torch" in SELECTED else SELECTED[0]  # torch's kernels start compile workers too
    argv = ["parity", "--backend", backend, "--impl", "kernel", "--no-plots", "--out", str(out)]
    assert _left_after_sigkill(argv, lambda proc: _children(1)(proc) and list(out.glob("groups/*.npz"))) == []


@pytest.mark.training
@pytest.mark.slow
@pytest.mark.skipif(len(TRAINABLE) < 2, reason="needs two backends with autodiff")
def test_sigkill_of_moons_on_two_backends_leaves_no_process(tmp_path):
    argv = ["moons", "--backend", ",".join(TRAINABLE[:2]), "--jobs", "2", "--seeds", "4", "--epochs", "200",
            "--samples", "300", "--no-progress", "--out", str(tmp_path / "moons")]
    assert _left_after_sigkill(argv, _spawned(3)) == []  # the queue's manager and two workers


@pytest.mark.training
@pytest.mark.slow
@pytest.mark.skipif(not TRAINABLE, reason="the grid needs a backend with autodiff")
def test_sigkill_of_the_grid_leaves_no_process(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text('[base]\nseeds = 2\nn_samples = 200\narms = ["relu", "gelu_none"]\n'
                    '[axes]\ndepth = [1, 2]\nlr = [0.01]\nepochs = [400]\n')
    argv = ["moons", "--grid", str(grid), "--backend", TRAINABLE[0], "--jobs", "2", "--no-progress",
            "--out", str(tmp_path / "grid")]
    assert _left_after_sigkill(argv, _spawned(2)) == []  # two cell workers

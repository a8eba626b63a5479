"""One run at a time per results folder (core.plumbing.lock): a second run into a held folder is refused at once with
one line naming the holder (exit code 2), the holder goes on and completes; the lock is released on every exit (an
exception, SIGTERM); a lock left by a process that died without releasing it (SIGKILL) is taken over with one
note.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import SELECTED

import gelulab
from gelulab import cli
from gelulab.backends import capabilities
from gelulab.core.plumbing import lock

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(Path(gelulab.__file__).parent.parent), os.environ.get("PYTHONPATH")) if p)}
TRAINABLE = [b for b in SELECTED if capabilities(b).autodiff]
# holds the folder until killed or until its stdin closes (this test process gone), never for a fixed time
HOLD_AND_WAIT = ("import sys\nfrom gelulab.core.plumbing.lock import hold\nwith hold(sys.argv[1]):\n"
                 "    print('held', flush=True)\n    sys.stdin.read()\n")


def _holder_process(folder: Path) -> subprocess.Popen:
    """A process holding `folder` (core.plumbing.lock.hold) until killed; returns once it holds it."""
    p = subprocess.Popen([sys.executable, "-c", HOLD_AND_WAIT, str(folder)], env=ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
    except BaseException:
        p.kill()
        p.wait()
        raise
    return p


def _wait_for_holder(folder: Path, pid: int, proc: subprocess.Popen, timeout: float = 120) -> dict:
    start = time.monotonic()
    while True:
        rec = lock.read_holder(folder)
        if rec and rec.get("pid") == pid:
            return rec
        assert proc.poll() is None, "the first run ended before it held the folder"
        assert time.monotonic() - start < timeout, "the first run never held the folder"
        time.sleep(0.02)


@pytest.mark.subprocess
def test_a_held_folder_is_refused_naming_the_holder_and_free_again_after_it(tmp_path):
    folder = tmp_path / "out"
    p = _holder_process(folder)
    try:
        with pytest.raises(lock.FolderInUse) as e, lock.hold(folder):
            pytest.fail("a held folder was taken")
        assert str(e.value) == (f"--out {folder} is in use by pid {p.pid} on host {socket.gethostname()} (`-c "
                                f"{folder}`, started {lock.read_holder(folder)['started']}); wait for that run to "
                                "end or use another --out")
    finally:
        p.kill()
        p.wait()
    # killed (SIGKILL): the kernel released its lock; its record is taken over with one note
    with lock.hold(folder):
        assert lock.read_holder(folder)["pid"] == os.getpid()


@pytest.mark.subprocess
def test_lock_is_released_on_an_exception_and_the_folders_it_made_are_removed(tmp_path):
    folder = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError), lock.hold(folder):
        assert (folder / lock.LOCK_NAME).exists()
        raise RuntimeError("failed before writing anything")
    assert not (tmp_path / "a").exists()  # nothing left behind
    with lock.hold(folder):
        (folder / "result.json").write_text("{}")
    assert not (folder / lock.LOCK_NAME).exists()  # released, and the lock file it made is gone
    assert (folder / "result.json").exists()
    # and another process takes it at once
    p = _holder_process(folder)
    p.kill()
    p.wait()


def test_the_same_thread_may_hold_a_folder_twice_another_thread_may_not(tmp_path):
    folder = tmp_path / "out"
    errors = []

    def other():
        try:
            with lock.hold(folder):
                errors.append("taken")
        except lock.FolderInUse as e:
            errors.append(str(e))

    with lock.hold(folder), lock.hold(folder):  # a command and the library function it calls
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert len(errors) == 1 and errors[0].startswith(f"--out {folder} is in use by another thread of this process")
    with lock.hold(folder):  # both levels were released
        pass


@pytest.mark.subprocess
def test_a_stale_lock_of_a_dead_process_is_taken_over_with_one_note(tmp_path, capsys):
    folder = tmp_path / "out"
    # a process that took the lock and was killed without releasing it
    killed = subprocess.run([sys.executable, "-c", ("import os, sys\nfrom gelulab.core.plumbing.lock import hold\n"
                             "with hold(sys.argv[1]):\n    os.kill(os.getpid(), 9)\n"), str(folder)],
                            env=ENV, check=False)
    assert killed.returncode == -signal.SIGKILL
    left = json.loads((folder / lock.LOCK_NAME).read_text())
    assert left["host"] == socket.gethostname() and left["command"].startswith("-c")
    dead = left["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(dead, 0)
    argv = ["parity", "--backend", "numpy", "--activation", "relu", "--dtype", "float16", "--order", "0",
            "--no-plots", "--out", str(folder)]
    capsys.readouterr()
    assert cli.main(argv) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "ended without releasing it" in line]
    assert notes == [(f"gelulab: {folder}: the run that held this folder, pid {dead} on host {left['host']} "
                     f"(`{left['command']}`, started {left['started']}), ended without releasing it (pid {dead} is "
                     "not running); taking the folder over")]
    assert (folder / lock.LOCK_NAME).read_text() == ""  # released again at the end
    assert cli.main(argv) == 0 and "ended without releasing" not in capsys.readouterr().err


@pytest.mark.subprocess
def test_sigterm_releases_the_lock(tmp_path):
    folder = tmp_path / "out"
    # holds the folder until SIGTERM (or its stdin closes: an exit 0 the test refuses), never for a fixed time
    code = ("import sys\nfrom gelulab import cli\nfrom gelulab.core.plumbing.lock import hold\n"
            "with cli._interrupt_handlers():\n    try:\n        with hold(sys.argv[1]):\n"
            "            print('held', flush=True)\n            sys.stdin.read()\n"
            "    except KeyboardInterrupt:\n        sys.exit(143)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(folder)], env=ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 143
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert lock.read_holder(folder) is None  # released (emptied), not left for the next run to take over
    assert not folder.exists()  # it made the folder and wrote nothing: removed


@pytest.mark.training
@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.skipif(not TRAINABLE, reason="moons needs a backend with autodiff")
def test_two_concurrent_moons_runs_into_one_folder_the_second_is_refused_the_first_completes(tmp_path):
    env = {**ENV, "GELULAB_BACKEND": TRAINABLE[0]}
    out = tmp_path / "out"
    small = ["moons", "--seeds", "1", "--epochs", "3", "--samples", "200", "--compare-dtype", "none",
             "--arms", "relu,gelu_none", "--no-progress", "--jobs", "1", "--out", str(out)]
    first = subprocess.Popen([sys.executable, "-m", "gelulab", *small, "--lr", "0.01"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        rec = _wait_for_holder(out, first.pid, first)
        first.send_signal(signal.SIGSTOP)  # holds the folder for as long as the second run takes, however slow
        try:
            second = subprocess.run([sys.executable, "-m", "gelulab", *small, "--lr", "0.001"], cwd=ROOT, env=env,
                                    capture_output=True, text=True, timeout=300, check=False)
        finally:
            first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert second.stderr.splitlines() == [
        (f"gelulab moons: error: --out {out} is in use by pid {first.pid} on host {socket.gethostname()} "
        f"(`{rec['command']}`, started {rec['started']}); wait for that run to end or use another --out")]
    assert "--lr 0.01" in rec["command"]
    assert first.returncode == 0, err[-2000:]
    runs = [json.loads(p.read_text()) for p in out.glob("runs/**/seed*.json")]
    assert len(runs) == 2 and {r["key"]["lr"] for r in runs} == {0.01}  # one run's results, whole
    assert json.loads((out / "results.json").read_text())["config"]["lr"] == 0.01


@pytest.mark.parametrize("make", ["dangling link", "link to a file", "folder"])
def test_a_lock_file_that_is_a_link_or_a_folder_is_refused_naming_it(tmp_path, make):
    folder = tmp_path / "out"
    folder.mkdir()
    file = folder / lock.LOCK_NAME
    if make == "folder":
        file.mkdir()
        what = "a folder"
    else:
        target = tmp_path / ("victim.txt" if make == "link to a file" else "nonexistent")
        if make == "link to a file":
            target.write_text("keep me\n")
        file.symlink_to(target)
        what = "a symbolic link"
    with pytest.raises(lock.LockFileUnusable) as e, lock.hold(folder):
        pytest.fail("the block ran without a lock")
    assert str(e.value) == f"--out {folder}: its lock file {file} is {what}; remove it and rerun"
    if make == "link to a file":
        assert (tmp_path / "victim.txt").read_text() == "keep me\n"  # the link's target is left alone


def test_the_command_line_refuses_a_linked_lock_file_in_one_line(tmp_path, capsys):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / lock.LOCK_NAME).symlink_to("/nonexistent")
    argv = ["parity", "--backend", "numpy", "--activation", "relu", "--dtype", "float16", "--order", "0",
            "--no-plots", "--out", str(folder)]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"gelulab parity: error: --out {folder}: its lock file {folder / lock.LOCK_NAME} is a symbolic link; "
         "remove it and rerun")]
    assert sorted(p.name for p in folder.iterdir()) == [lock.LOCK_NAME]  # nothing computed, nothing written


@pytest.mark.parametrize("code", [errno.ELOOP, errno.EIO, errno.ENOLCK, errno.EOPNOTSUPP])
def test_only_a_file_system_without_flock_runs_unlocked_any_other_lock_error_refuses(tmp_path, monkeypatch,
                                                                                    capsys, code):
    def fail(self, *a, **k):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(lock.filelock.FileLock, "acquire", fail)
    folder = tmp_path / "out"
    ran = []
    if code in (errno.ENOLCK, errno.EOPNOTSUPP):
        with lock.hold(folder):
            ran.append(True)
        assert ran and capsys.readouterr().err == (
            f"gelulab: {folder}: cannot lock the results folder ({os.strerror(code)}); running without a lock: "
            "run one command at a time in it\n")
    else:
        with pytest.raises(lock.LockFileUnusable) as e, lock.hold(folder):
            ran.append(True)
        assert not ran and str(e.value) == (
            f"--out {folder}: cannot lock its lock file {folder / lock.LOCK_NAME} ({os.strerror(code)}); remove it "
            "and rerun, or use another --out")
    assert not folder.exists()  # the folder this hold made is removed again

"""A results folder belongs to one command, and a run whose folder vanished stops (core.plumbing.lock).

A command into a folder holding another command's results is refused in one line (exit 2) before any work, the
results there left byte for byte; the same command again resumes. A run whose folder (with its lock) is deleted
while it runs stops at its next write with one line, and writes nothing unguarded; a run that finds the folder
made again by another run leaves that run's lock alone. And the check behind the docs' sentence on JAX's
compilation cache: JAX reads past a damaged entry (a warning naming it) and compiles again.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SELECTED

import gelulab
from gelulab import cli
from gelulab.backends import capabilities
from gelulab.core.plumbing import lock
from gelulab.core.plumbing.report import atomic_write_text
from gelulab.experiments.moons import study as S

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(Path(gelulab.__file__).parent.parent), os.environ.get("PYTHONPATH")) if p)}
TRAINABLE = [b for b in SELECTED if capabilities(b).autodiff]
PARITY = ["parity", "--backend", "numpy", "--activation", "relu", "--dtype", "float16", "--order", "0", "--no-plots"]


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` but its lock file, by relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != lock.LOCK_NAME}


@pytest.mark.skipif(not TRAINABLE, reason="moons needs a backend with autodiff")
@pytest.mark.parametrize("record", ["recorded", "written by an older gelulab"])
def test_moons_into_a_folder_of_parity_results_is_refused_in_one_line(record, tmp_path, capsys, monkeypatch):
    out = tmp_path / "X"
    assert cli.main([*PARITY, "--out", str(out)]) == 0
    assert json.loads((out / lock.RECORD_NAME).read_text()) == {"command": "gelulab parity"}
    if record != "recorded":
        (out / lock.RECORD_NAME).unlink()  # judged by the files only parity writes (parity.json, groups/)
    before = _files(out)
    capsys.readouterr()
    monkeypatch.setenv("GELULAB_BACKEND", TRAINABLE[0])
    monkeypatch.setattr(S, "run_study", lambda *a, **k: pytest.fail("the moons study started"))
    argv = ["moons", "--seeds", "1", "--epochs", "2", "--no-progress", "--out", str(out)]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"gelulab moons: error: --out {out} holds results of `gelulab parity` (groups/, parity.json, report.md); "
         "choose another --out for `gelulab moons`")]
    assert _files(out) == before  # parity's results, byte for byte


def test_the_same_command_twice_into_one_folder_is_allowed(tmp_path, capsys):
    out = tmp_path / "X"
    assert cli.main([*PARITY, "--out", str(out)]) == 0
    first = (out / "parity.json").read_bytes()
    assert cli.main([*PARITY, "--out", str(out)]) == 0
    assert "error" not in capsys.readouterr().err
    assert json.loads((out / "parity.json").read_bytes())["cells"] == json.loads(first)["cells"]
    assert json.loads((out / lock.RECORD_NAME).read_text()) == {"command": "gelulab parity"}


# a parity run whose group writes wait until the test says go (a file appearing), so the folder can be deleted
# while it holds it, however fast the machine; it says it waits by making the file go.waiting
GATED_PARITY = """
import sys, time
from pathlib import Path
from gelulab import cli
from gelulab.experiments.parity import store
go, out = Path(sys.argv[1]), sys.argv[2]
real = store.save
def save(*args, **kwargs):
    go.with_suffix(".waiting").touch()
    while not go.exists():
        time.sleep(0.01)
    return real(*args, **kwargs)
store.save = save
sys.exit(cli.main(["parity", "--backend", "numpy", "--activation", "relu", "--dtype", "float16", "--order", "0",
                   "--no-plots", "--out", out]))
"""


def _delete_then_go(p: subprocess.Popen, waiting, out, go) -> tuple[int, str]:
    """Wait (polling, at most 120 s) until the gated run `p` is `waiting()`, delete its folder `out`, let it go on
    (touch `go`); returns its exit code and stderr. The run is killed if the test fails first."""
    try:
        start = time.monotonic()
        while not waiting():
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() - start < 120, "the run never reached the gate"
            time.sleep(0.02)
        shutil.rmtree(out)
        go.touch()
        _, err = p.communicate(timeout=120)  # stderr read while it runs: a full pipe cannot block it
        return p.returncode, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.subprocess
def test_a_run_whose_folder_is_deleted_stops_at_its_next_write_in_one_line(tmp_path):
    out, go = tmp_path / "X", tmp_path / "go"
    p = subprocess.Popen([sys.executable, "-c", GATED_PARITY, str(go), str(out)], env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # polled: the run holds the folder and waits before its first write
    rc, err = _delete_then_go(p, go.with_suffix(".waiting").exists, out, go)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("parity:")]  # tqdm's bar
    assert rc == 2, err
    assert len(lines) == 1 and re.fullmatch(
        rf"gelulab parity: error: --out {re.escape(str(out))}: the results folder or its lock file was removed or "
        r"replaced while this run held it; stopped before writing numpy-\S+\.npz so that nothing is written "
        r"unguarded; rerun the command to start again", lines[0]), err
    assert not out.exists()  # nothing was written unguarded: the folder was not made again


def test_a_folder_removed_as_its_lock_is_taken_stops_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    # the folder goes at the moment this run's holder record is written, the first moment another process can see
    # the run holding it
    out = tmp_path / "X"
    real = lock.holder_record

    def record_then_remove():
        rec = real()
        shutil.rmtree(out)
        return rec

    monkeypatch.setattr(lock, "holder_record", record_then_remove)
    assert cli.main([*PARITY, "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("parity:")]
    assert len(err) == 1 and err[0].startswith(f"gelulab parity: error: --out {out}: the results folder or its lock "
                                               "file was removed or replaced while this run held it; stopped "), err
    assert not out.exists()


def test_a_read_that_fails_because_the_held_folder_went_is_said_as_that(tmp_path):
    folder = tmp_path / "X"
    with pytest.raises(lock.FolderVanished, match=r"^--out .*/X: the results folder or its lock file was removed or "
                       r"replaced while this run held it; stopped at a\.json \(No such file or directory\)"), \
            lock.hold(folder, kind="gelulab parity"):
        shutil.rmtree(folder)
        (folder / "a.json").read_text()
    with pytest.raises(FileNotFoundError), lock.hold(folder, kind="gelulab parity"):  # the folder is there: as is
        (folder / "b.json").read_text()


# holds the folder until killed or until its stdin closes (this test process gone), never for a fixed time
HOLD_AND_WAIT = ("import sys\nfrom gelulab.core.plumbing.lock import hold\nwith hold(sys.argv[1]):\n"
                 "    print('held', flush=True)\n    sys.stdin.read()\n")


@pytest.mark.subprocess
def test_a_run_whose_folder_was_made_again_by_another_run_stops_and_leaves_that_run_alone(tmp_path):
    folder = tmp_path / "X"
    other = None
    try:
        with pytest.raises(lock.FolderVanished, match="removed or replaced while this run held it"), \
                lock.hold(folder, kind="gelulab parity"):
            atomic_write_text(folder / "a.json", "1\n")
            shutil.rmtree(folder)
            other = subprocess.Popen([sys.executable, "-c", HOLD_AND_WAIT, str(folder)], env=ENV,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert other.stdout.readline().strip() == "held"  # the folder made again, held by another run
            atomic_write_text(folder / "b.json", "2\n")
        assert not (folder / "b.json").exists()
        assert lock.read_holder(folder)["pid"] == other.pid  # its lock file is left as it is, still holding
    finally:
        if other is not None:
            other.kill()
            other.wait()


@pytest.mark.subprocess
def test_jax_compiles_again_over_a_damaged_compilation_cache_entry(tmp_path):
    pytest.importorskip("jax")
    code = ("import jax, jax.numpy as jnp\njax.config.update('jax_enable_x64', True)\n"
            "f = jax.jit(lambda x: x * jax.scipy.special.erfc(-x / 2 ** 0.5) / 2)\nprint(repr(float(f(-1.25))))\n")
    env = {**ENV, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert first.returncode == 0, first.stderr
    entries = [p for p in (tmp_path / "cache").iterdir() if p.is_file()]
    assert entries, "JAX stored no entry"
    for p in entries:
        p.write_bytes(b"not an entry\x00" * 7)
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert again.returncode == 0, again.stderr
    # GELU(-1.25) = -1.25 * Phi(-1.25) = -0.132062217083569072... (mpmath.ncdf, 30 digits)
    assert abs(float(again.stdout) - -0.132062217083569072) < 1e-15
    assert again.stdout == first.stdout
    assert "Error reading persistent compilation cache entry" in again.stderr


# a verify run whose second float32 chunk waits, once the first is logged, until the test says go (a file appearing;
# "ready" appears when it starts waiting); every chunk computed is counted in "calls"
GATED_VERIFY = """
import sys, time
from pathlib import Path
from gelulab import cli
from gelulab.experiments.verify import command
go, ready, calls, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
real = command.Runner.chunk
def chunk(self, x, dtype):
    if dtype == "float32":
        with open(calls, "a") as f:
            f.write("chunk\\n")
        if len(calls.read_text().split()) == 2:
            ready.touch()
            while not go.exists():
                time.sleep(0.01)
    return real(self, x, dtype)
command.Runner.chunk = chunk
sys.exit(cli.main(["verify", "--stride", str(2**24), "--chunk", "16", "--backend", "numpy", "--activation", "relu",
                   "--order", "0", "--out", out]))
"""


@pytest.mark.subprocess
def test_a_verify_run_whose_folder_is_deleted_stops_at_its_next_chunk_in_one_line(tmp_path):
    out, go, ready, calls = tmp_path / "V", tmp_path / "go", tmp_path / "ready", tmp_path / "calls"
    p = subprocess.Popen([sys.executable, "-c", GATED_VERIFY, str(go), str(ready), str(calls), str(out)], env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rc, err = _delete_then_go(p, ready.exists, out, go)  # polled: the first chunk logged, the second waits
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and re.fullmatch(
        rf"gelulab verify: error: --out {re.escape(str(out))}: the results folder or its lock file was removed or "
        r"replaced while this run held it; stopped before writing chunks\.jsonl so that nothing is written "
        r"unguarded; rerun the command to start again", lines[0]), err
    assert calls.read_text().split() == ["chunk", "chunk"]  # 2**32 / 2**24 / 16 = 16 chunks: it stopped at the 2nd
    assert not out.exists()



@pytest.mark.parametrize("record, problem", [(b"\x00\xffnot a record", "not JSON"),
                                             (b"[1, 2]\n", 'JSON, but not a record {"command": ...}')])
def test_a_damaged_results_record_is_named_set_aside_and_written_again(record, problem, tmp_path, capsys):
    """A .gelulab-results.json that is not a record (garbage bytes, JSON of another shape) is named in one line,
    set aside as .gelulab-results.json.damaged-1 (its bytes kept), the folder judged by its files (parity's: the
    rerun resumes) and the record written again."""
    out = tmp_path / "X"
    assert cli.main([*PARITY, "--out", str(out)]) == 0
    (out / lock.RECORD_NAME).write_bytes(record)
    capsys.readouterr()
    assert cli.main([*PARITY, "--out", str(out)]) == 0
    named = [line for line in capsys.readouterr().err.splitlines() if lock.RECORD_NAME in line]
    assert named == [(f"gelulab: {out / lock.RECORD_NAME} is damaged ({problem}); set aside as {lock.RECORD_NAME}"
                      ".damaged-1; the folder is judged by its files")]
    assert (out / f"{lock.RECORD_NAME}.damaged-1").read_bytes() == record
    assert json.loads((out / lock.RECORD_NAME).read_text()) == {"command": "gelulab parity"}


def test_a_folder_where_the_results_record_belongs_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "X"
    (out / lock.RECORD_NAME).mkdir(parents=True)
    assert cli.main([*PARITY, "--out", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"gelulab parity: error: --out {out}: {out / lock.RECORD_NAME} is a folder; expected the file where "
         "gelulab records the command whose results the folder holds; remove it or use another --out")]
    assert sorted(p.name for p in out.iterdir()) == [lock.RECORD_NAME]  # nothing written, no lock file left

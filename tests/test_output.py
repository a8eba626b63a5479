"""Results folders and the command line's errors: every command checks --out before any work (a path under a
regular file; a read-only folder) and fails with one line and exit code 2, no traceback; a damaged file is set
aside, never deleted; clear errors naming the value for an unknown device, an absurd GELULAB_THREADS and integer
input to relu; the frameworks' start-up log lines are dropped on the command line only (--verbose keeps them);
every report carries gelulab's version, git commit and command line.

The read-only folder is real: as a non-root user a folder with mode 0555; as root (which ignores modes) a
read-only tmpfs mounted on the folder, else the folder made immutable with `chattr +i`; the test is skipped where
none of these is possible.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import SELECTED, array_namespace

import gelulab
from gelulab import cli
from gelulab.backends import capabilities, get_backend
from gelulab.core.plumbing import config, output, provenance

ROOT = Path(__file__).resolve().parents[1]
# subprocesses import the same gelulab as this test session (the folder holding it first on their path)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(Path(gelulab.__file__).parent.parent), os.environ.get("PYTHONPATH")) if p)}
COMMANDS = {  # the cheapest options of each command that still reach its output
    "parity": ["--backend", "numpy", "--activation", "relu", "--dtype", "float16", "--order", "0", "--no-plots"],
    "moons": ["--seeds", "1", "--epochs", "1", "--no-progress"],
    "bench": ["--quick", "--backend", "numpy", "--no-plots"],
    "swap": ["--backend", "numpy", "--activation", "relu"],
    "run": ["--seeds", "1", "--epochs", "1"],
    "verify": ["--stride", "1048577", "--backend", "numpy", "--activation", "relu", "--order", "0"],
    "merge": ["missing-a", "missing-b"],  # --out is checked before the inputs are read
}
TRAINABLE = [b for b in SELECTED if capabilities(b).autodiff]
# The backend moons and run train with here: the cheapest one selected (torch trains the moons MLP op by op
# without compiling; jax compiles every group first), as what these tests check is the command's, not a backend's.
TRAIN = "torch" if "torch" in TRAINABLE else next(iter(TRAINABLE), None)


def _env_for(command):
    env = dict(ENV)
    if command in ("moons", "run"):
        if not TRAINABLE:
            pytest.skip("moons and run need a backend with autodiff")
        env["GELULAB_BACKEND"] = TRAIN
    return env


def _gelulab(*argv, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "gelulab", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env or ENV, timeout=timeout, check=False)


@contextlib.contextmanager
def read_only_folder(path: Path):
    """Make `path` (an empty folder) truly unwritable for this process; yields the way used."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield "mode 0555"
        finally:
            path.chmod(0o755)
        return
    if shutil.which("mount") and subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
                                                capture_output=True, check=False).returncode == 0:
        try:
            yield "read-only tmpfs"
        finally:
            subprocess.run(["umount", str(path)], check=False)
        return
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(path)], capture_output=True,
                                                 check=False).returncode == 0:
        try:
            yield "chattr +i"
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=False)
        return
    pytest.skip("no way to make a read-only folder here (root without mount or chattr)")


# The command whose refusals run in a real `python -m gelulab` process. The other commands run through the
# command line's main() in this process (their exit code is what main() returns, their stderr is read at the file
# descriptor): the process around main() (Python's start-up, the import of every command module to build the
# parser) is the same for every command, so one command shows it.
IN_A_PROCESS = "parity"


def _refusal(command, out: Path, monkeypatch, capfd):
    """`gelulab <command> <its cheapest options> --out <out>` as a CompletedProcess (returncode, stderr): in a
    real process for IN_A_PROCESS, else through cli.main in this process under the same GELULAB_BACKEND."""
    env = _env_for(command)
    if command == IN_A_PROCESS:
        return _gelulab(command, *COMMANDS[command], "--out", str(out), env=env)
    if "GELULAB_BACKEND" in env:
        monkeypatch.setenv("GELULAB_BACKEND", env["GELULAB_BACKEND"])
    capfd.readouterr()
    code = cli.main([command, *COMMANDS[command], "--out", str(out)])
    captured = capfd.readouterr()
    return subprocess.CompletedProcess([command], code, captured.out, captured.err)


def _commands():
    return [pytest.param(c, marks=pytest.mark.subprocess) if c == IN_A_PROCESS else c for c in COMMANDS]


def _one_line_error(p, command, *fragments):
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"gelulab {command}: error: --out "), lines[0]
    for f in fragments:
        assert f in lines[0], lines[0]


# --------------------------------------------------------------------------------------- the output folder


@pytest.mark.parametrize("command", _commands())
def test_out_under_a_file_is_refused_before_any_work(command, tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "results.txt"
    blocker.write_text("a file, not a folder\n")
    p = _refusal(command, blocker / "out", monkeypatch, capfd)
    _one_line_error(p, command, str(blocker), "a file, not a folder")
    assert blocker.read_text() == "a file, not a folder\n"


@pytest.mark.parametrize("command", _commands())
def test_read_only_out_is_refused_before_any_work(command, tmp_path, monkeypatch, capfd):
    folder = tmp_path / "ro"
    with read_only_folder(folder) as how:
        p = _refusal(command, folder / "new", monkeypatch, capfd)
        again = _refusal(command, folder, monkeypatch, capfd) if command == "parity" else None
    reason = {"read-only tmpfs": os.strerror(errno.EROFS), "chattr +i": os.strerror(errno.EPERM),
              "mode 0555": os.strerror(errno.EACCES)}[how]
    _one_line_error(p, command, f"cannot create {folder / 'new'}", reason)
    if again is not None:  # the folder itself exists but cannot be written
        _one_line_error(again, command, f"cannot write in {folder}", reason)


GRID = "[base]\nseeds = 1\nn_samples = 200\n[axes]\ndepth = [1, 2]\nlr = [0.01, 0.001]\nepochs = [3]\n"


@pytest.mark.parametrize("where", ["under a file", "read-only"])
def test_grid_out_is_checked_before_the_first_cell_is_trained(where, tmp_path, monkeypatch, capsys):
    from gelulab.experiments.moons import grid_study

    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    monkeypatch.setattr(grid_study, "train_cell", lambda *a, **k: pytest.fail("a cell was trained"))
    if not TRAINABLE:
        pytest.skip("a grid needs a backend with autodiff")
    argv = ["moons", "--grid", str(grid), "--backend", TRAIN, "--jobs", "1", "--no-progress", "--out"]
    if where == "under a file":
        blocker = tmp_path / "results.txt"
        blocker.write_text("x")
        assert cli.main([*argv, str(blocker / "out")]) == 2
        expected = f"gelulab moons: error: --out {blocker / 'out'}: lies under {blocker}, which is a file, not a folder"
    else:
        with read_only_folder(tmp_path / "ro"):
            assert cli.main([*argv, str(tmp_path / "ro")]) == 2
        expected = f"gelulab moons: error: --out {tmp_path / 'ro'}: cannot write in {tmp_path / 'ro'} ("
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(expected), err


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(("gelulab-cell-", "pymp-")))


def _session_ended(sid: int, timeout: float = 60) -> None:
    """Wait until no process of session `sid` (the command's, started with start_new_session) runs: then none is
    left to write in TMPDIR, and what is there stays. Fails naming those still running after `timeout` s."""
    from test_sigkill import _in_session  # running processes only: a zombie has ended

    deadline = time.monotonic() + timeout
    while left := _in_session(sid):
        if time.monotonic() > deadline:
            for proc in left:
                with contextlib.suppress(Exception):
                    proc.kill()
            pytest.fail(f"still running {timeout:g} s after the command ended: "
                        f"{[' '.join(proc.info['cmdline'] or [])[:120] for proc in left]}")
        time.sleep(0.1)


@pytest.mark.training
@pytest.mark.subprocess
@pytest.mark.slow
def test_an_interrupted_grid_leaves_no_temporary_folder(tmp_path):
    """Its workers are terminated mid-cell; nothing of theirs is left in TMPDIR."""
    from conftest import gelulab_argv

    env = _env_for("moons")
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    grid = tmp_path / "g.toml"
    grid.write_text(GRID)
    out = tmp_path / "out"
    p = subprocess.Popen([*gelulab_argv("terminal"), "moons", "--grid", str(grid), "--jobs", "2", "--no-progress",
                          "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        for _ in range(6000):  # at most 10 min; until the first cell is stored, the second worker mid-cell
            if p.poll() is not None or list(out.glob("cells/*/runs/**/seed0.json")):
                break
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err[-2000:]
    _session_ended(p.pid)  # the terminated workers are gone
    assert _entries(tmp_path / "tmp") == []


@pytest.mark.training
@pytest.mark.subprocess
@pytest.mark.slow
def test_a_killed_two_backend_study_leaves_no_temporary_folder(tmp_path):
    """SIGKILL of `gelulab moons` with two backends in worker processes: its manager process dies with it and had
    no socket folder (pymp-*) to leave."""
    if len(TRAINABLE) < 2:
        pytest.skip("needs two backends with autodiff")
    env = {**ENV, "TMPDIR": str(tmp_path / "tmp"), "GELULAB_BACKEND": ",".join(TRAINABLE[:2])}
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "out"
    # 20 epochs: the first group's runs are stored within seconds, and each backend has four groups still to train
    p = subprocess.Popen([sys.executable, "-m", "gelulab", "moons", "--seeds", "1", "--epochs", "20", "--samples",
                          "200", "--compare-dtype", "none", "--jobs", "2", "--no-progress", "--out", str(out)],
                         cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        for _ in range(6000):  # until the workers train: the first run file is stored
            if p.poll() is not None or list(out.glob("runs/**/seed0.json")):
                break
            time.sleep(0.1)
        assert p.poll() is None, "the study ended before it could be killed"
        p.kill()
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    _session_ended(p.pid)  # its workers and manager die with it (SIGKILL from the kernel)
    assert _entries(tmp_path / "tmp") == []


def test_check_writable_leaves_nothing_behind(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    assert output.check_writable(target) == target
    assert list(tmp_path.iterdir()) == []  # the folders it created to test are gone again
    (tmp_path / "f").write_text("x")
    with pytest.raises(output.OutputUnwritable, match="is a file, not a folder"):
        output.check_writable(tmp_path / "f")
    assert isinstance(output.OutputUnwritable("x"), ValueError)  # the command line prints it as one line


def test_set_aside_keeps_every_version(tmp_path):
    p = tmp_path / "seed0.json"
    for text in ("{}", "[1, 2]"):
        p.write_text(text)
        output.set_aside(p, "damaged")
    assert not p.exists()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["seed0.json.damaged-1", "seed0.json.damaged-2"]
    assert (tmp_path / "seed0.json.damaged-2").read_text() == "[1, 2]"


def test_atomic_write_interrupted_keeps_the_old_file(tmp_path, monkeypatch):
    path = output.atomic_write_bytes(tmp_path / "r.json", b"old")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(output.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        output.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old" and sorted(f.name for f in tmp_path.iterdir()) == ["r.json"]


# ------------------------------------------------------------------------------------- errors naming the value


def test_unknown_device_names_the_value():
    with pytest.raises(ValueError, match=r"device 'cuda'; expected one of \['cpu', 'gpu', 'tpu'\]"):
        get_backend("jax", "cuda")
    with pytest.raises(ValueError, match="device 'cuda'"):
        get_backend("numpy", "cuda")


def test_threads_are_bounded(monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setenv("GELULAB_THREADS", "100000")
    with pytest.raises(ValueError, match=rf"GELULAB_THREADS='100000'; expected at most {4 * cores} "):
        config.threads()
    monkeypatch.setenv("GELULAB_THREADS", str(4 * cores))
    assert config.threads() == 4 * cores


@pytest.mark.subprocess
def test_threads_error_on_the_command_line_is_one_line(tmp_path):
    p = _gelulab("parity", *COMMANDS["parity"], "--out", str(tmp_path), env={**ENV, "GELULAB_THREADS": "100000"})
    assert p.returncode == 2 and "Traceback" not in p.stderr and "MemoryError" not in p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "GELULAB_THREADS='100000'" in p.stderr


def _integer_array(backend_name, dtype):
    if backend_name == "numpy":
        return np.arange(-2, 3, dtype=dtype)
    if backend_name == "jax":
        import jax.numpy as jnp

        return jnp.arange(-2, 3, dtype=dtype)
    if backend_name == "torch":
        import torch

        return torch.arange(-2, 3, dtype=getattr(torch, dtype))
    if backend_name == "tensorflow":
        import tensorflow as tf

        return tf.range(-2, 3, dtype=getattr(tf, dtype))
    xp = array_namespace(backend_name)  # an Array API library's namespace: its asarray
    return xp.asarray(np.arange(-2, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_relu_of_integer_input_is_a_type_error_naming_the_dtype(backend, dtype):
    x = _integer_array(backend.name, dtype) if dtype != "bool" else _integer_array(backend.name, "int32") > 0
    for f in (backend.relu, backend.gelu):
        with pytest.raises(TypeError, match=rf"{f.__name__}: {backend.name} array of dtype (torch\.)?{dtype}; "
                                            "expected a floating dtype"):
            f(x)
    y = backend.relu(backend.asarray(np.array([-2.0, 0.5], np.float32)))  # floats are unaffected
    assert backend.to_numpy(y).tolist() == [0.0, 0.5]


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("impl", ["formula", "kernel", "builtin"])
def test_numpy_relu_of_nan_is_nan_and_warns_nothing(dtype, impl):
    """IEEE 754: max(NaN, 0) and ReLU(NaN) are NaN; numpy's comparison `NaN <= 0` sets the invalid flag (numpy
    warns for bfloat16), which the numpy backend's formula scope keeps quiet, and the host's error state is left
    as it was."""
    from gelulab.core.numerics.dtypes import get_dtype

    backend = get_backend("numpy")
    x = np.array([np.nan, -2.0, 0.5], get_dtype(dtype).np_dtype)
    before = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = backend.to_numpy(backend.relu(backend.asarray(x), impl=impl)).astype(np.float64)
    assert np.isnan(y[0]) and y[1:].tolist() == [0.0, 0.5]
    assert np.geterr() == before


# -------------------------------------------------------------------------------------- framework log noise

NOISE = re.compile(output.NOISE_PATTERN, re.MULTILINE)


@pytest.mark.subprocess
def test_noise_filter_drops_only_the_known_lines():
    sample = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
              "I0000 00:00:1796115349.388213    6950 port.cc:153] oneDNN custom operations are on.\n"
              "E0000 00:00:1796115351.800174    6950 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n"
              "E0000 00:00:1796115352.101763    6950 onednn_env_vars.cc:63] oneDNN supports DT_HALF only on "
              "platforms with AVX-512. Falling back to the default Eigen-based implementation if present.\n"
              "E0000 00:00:1796115351.800174    6950 other.cc:1] a real error\n"
              "E0000 00:00:1796115352.101763    6950 mkl_util.h:9] oneDNN primitive creation failed\n"
              "gelulab parity: error: something\n\rprogress 50%\rprogress 100%\n")
    code = f"PATTERN = {output.NOISE_PATTERN!r}\nPARENT = {os.getpid()}\n{output._FILTER_CODE}"
    p = subprocess.run([sys.executable, "-c", code], input=sample.encode(), capture_output=True, timeout=30,
                       check=True)
    assert p.stdout.decode() == ("E0000 00:00:1796115351.800174    6950 other.cc:1] a real error\n"
                                 "E0000 00:00:1796115352.101763    6950 mkl_util.h:9] oneDNN primitive creation "
                                 "failed\n"
                                 "gelulab parity: error: something\n\rprogress 50%\rprogress 100%\n")


@pytest.mark.subprocess
@pytest.mark.skipif("tensorflow" not in SELECTED, reason="TensorFlow prints the start-up lines this filters")
def test_command_line_is_quiet_unless_verbose_and_the_library_leaves_its_host_alone(tmp_path):
    args = ["parity", "--backend", "tensorflow", "--activation", "relu", "--dtype", "float32", "--order", "0",
            "--mode", "eager", "--no-plots", "--out", str(tmp_path)]
    env = {k: v for k, v in ENV.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    quiet = _gelulab(*args, env=env)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert not NOISE.search(quiet.stderr), quiet.stderr[-2000:]
    probe = "; print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'), logging.getLogger('absl').level)"
    runs = {}
    for what, code in (("tensorflow alone", "import logging, os, tensorflow"),
                       ("gelulab", "import logging, os, gelulab; gelulab.get_backend('tensorflow')")):
        runs[what] = subprocess.run([sys.executable, "-c", code + probe], capture_output=True, text=True, cwd=ROOT,
                                    env=env, timeout=300, check=True)
    lib = runs["gelulab"]
    assert lib.stdout == runs["tensorflow alone"].stdout  # gelulab added no setting of its own to its host
    if NOISE.search(lib.stderr):  # this machine's TensorFlow prints such lines: --verbose must keep them
        verbose = _gelulab(*args, "--verbose", env=env)
        assert verbose.returncode == 0 and NOISE.search(verbose.stderr)


# ------------------------------------------------------------------------------------------------ provenance


def test_reports_carry_version_commit_and_command(tmp_path):
    argv = ["parity", *COMMANDS["parity"], "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    from gelulab import __version__

    text = (tmp_path / "report.md").read_text()
    assert f"gelulab {__version__}" in text and "gelulab parity --backend numpy" in text
    env = json.loads((tmp_path / "parity.json").read_text())["environment"]
    assert env["gelulab"] == __version__ and env["command"].startswith("gelulab parity --backend numpy")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False)
    if head.returncode == 0:
        assert env["git_commit"].split()[0] == head.stdout.strip()
    assert provenance.package_version("numpy") == np.__version__


@pytest.mark.subprocess
def test_run_without_a_trainable_backend_is_refused_before_any_work(tmp_path):
    p = _gelulab("run", "--out", str(tmp_path / "r"), env={**ENV, "GELULAB_BACKEND": "numpy"})
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "needs a backend with autodiff" in p.stderr
    assert not (tmp_path / "r").exists()

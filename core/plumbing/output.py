"""Results folders and interrupts, shared by every command: the output folder is checked before any work, files
are written atomically as results finish, a damaged file is set aside (kept, renamed), and Ctrl-C ends with one
line saying what was kept.

check_writable(path)      create-and-write test of a results folder before any work (OutputUnwritable, a
                          ValueError, naming the path and the reason: a path under a file, a read-only folder)
atomic_write_bytes        temp file in the same folder, then os.replace: a crash leaves the old file or none
                          (one run at a time per folder: core.plumbing.lock.hold, taken right after check_writable;
                          a results folder holds one command's results, and a write into a held folder that was
                          removed meanwhile stops the run: core.plumbing.lock.check_held, FolderVanished)
set_aside(path, why)      rename a file that cannot be used to `<name>.<why>-<n>`, never deleting it
Interrupted               raised by a command stopped by Ctrl-C (SIGINT) or SIGTERM: its message says what was
                          kept and how to resume; the command line prints it as one line (exit 130 / 143)
quiet_frameworks()        the command line's default: the frameworks' start-up log lines (TensorFlow and absl
                          C++ logs, `E0000 ... failed call to cuInit` on a machine without CUDA, `E0000 ... oneDNN
                          supports DT_HALF only on platforms with AVX-512` (a kernel-choice note), jax's "no GPU"
                          notice) are dropped from stderr; everything else passes. Never applied on
                          `import gelulab`.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from gelulab.core.plumbing.lock import check_held


class OutputUnwritable(ValueError):
    """The results folder cannot be created or written; the message names the path and the reason."""


class Interrupted(Exception):
    """A command stopped by Ctrl-C or SIGTERM after keeping its finished results; str() is the one line to print
    (what was kept, and that the same command resumes). `signum`: the signal (signal.SIGINT by default)."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = signum


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def check_writable(path: str | os.PathLike, option: str = "--out") -> Path:
    """Check, before any work, that the folder `path` can be created (where missing) and written.

    Creates the missing folders, creates and deletes a temporary file in the deepest one, then removes the folders
    it created (nothing is left behind; the command creates them again when it writes). Returns Path(path).
    Raises OutputUnwritable (a ValueError) naming `option`, the path and the reason: a path that is not valid
    UTF-8 (the reports name it), a part of the path is a file, the file system is read-only, permission denied.
    """
    p = Path(path)
    try:
        os.fspath(p).encode("utf-8")  # reports and JSON name the folder in UTF-8
    except UnicodeEncodeError:
        shown = os.fsencode(p).decode("utf-8", "backslashreplace")
        raise OutputUnwritable(f"{option} {shown}: the path is not valid UTF-8; expected a path whose name can be "
                               "written into the reports (UTF-8)") from None
    created = []
    probe = p
    missing = []
    while not probe.exists():
        if probe.is_symlink():  # a dangling link
            raise OutputUnwritable(f"{option} {p}: {probe} is a broken symbolic link")
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        what = "is a file, not a folder" if probe == p else f"lies under {probe}, which is a file, not a folder"
        raise OutputUnwritable(f"{option} {p}: {what}")
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except OSError as e:
                raise OutputUnwritable(f"{option} {p}: cannot create {folder} ({_reason(e)})") from e
            created.append(folder)
        try:
            fd, tmp = tempfile.mkstemp(dir=p, prefix=".gelulab-write-check-")
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            raise OutputUnwritable(f"{option} {p}: cannot write in {p} ({_reason(e)})") from e
    finally:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
    return p


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically (temp file in the same folder, then os.replace); creates parent folders.
    A crash or Ctrl-C mid-write leaves the old file (or none), never a truncated one. Returns the Path.
    Raises core.plumbing.lock.FolderVanished (a ValueError), writing nothing, when `path` lies in a results folder
    held by this run that was removed or replaced meanwhile (core.plumbing.lock.check_held)."""
    path = Path(path)
    check_held(path)  # before the folder would be made again
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a result is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def set_aside(path: str | os.PathLike, why: str) -> Path:
    """Rename `path` to `<name>.<why>-<n>` in the same folder (n = 1, 2, ...: the first free one) and return the
    new Path. The name no longer ends in the file's suffix, so no reader takes it for a result. Never deletes.
    Raises core.plumbing.lock.FolderVanished as atomic_write_bytes does."""
    path = Path(path)
    check_held(path)
    n = 1
    while (path.parent / f"{path.name}.{why}-{n}").exists():
        n += 1
    target = path.parent / f"{path.name}.{why}-{n}"
    os.replace(path, target)
    return target


# ------------------------------------------------------------------------------------------- framework noise

# Lines dropped by quiet_frameworks: absl/TensorFlow C++ INFO and WARNING lines (`I0000 00:00:17...  123
# port.cc:153] oneDNN custom operations are on...`), absl's pre-initialisation notice, the `E0000 ... failed call
# to cuInit` of a CUDA probe on a machine without a GPU driver, TensorFlow's `E0000 ... oneDNN supports DT_HALF
# only on platforms with AVX-512. Falling back to the default Eigen-based implementation` (a note on which kernel
# runs, logged at ERROR level: the run is unaffected), jax's notice that it runs on the CPU, and Ray's
# notices of a worker lost and its task retried (a task lost beyond its retries is one line of the command's).
NOISE_PATTERN = (
    r"^(?:WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./+-]+:\d+\] "
    r"|E\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./+-]+:\d+\] (?:failed call to cuInit"
    r"|oneDNN supports \w+ only on platforms with )"
    r"|An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed"
    r"|(?:\x1b\[\d+m)?\(raylet\)(?:\x1b\[0m)? (?:A worker died or was killed while executing a task"
    r"|Task \S+ failed\. There are \d+ retries remaining))"
)

# The filter runs in its own small process (so a crash of the command still reaches the terminal through it):
# stdin = the command's stderr pipe, stdout = the real stderr. A partial line that may start a noise line is held
# until its newline or for 0.2 s (progress bars redraw with carriage returns and no newline).
_FILTER_CODE = r"""
import ctypes, os, re, select, signal, sys
gone = []  # the command has ended, however (SIGKILL included): drain what it wrote, then end too
signal.signal(signal.SIGHUP, lambda signum, frame: gone.append(signum))
if sys.platform.startswith("linux"):  # the kernel sends SIGHUP when the command ends (interrupts.die_with_parent)
    ctypes.CDLL(None).prctl(1, int(signal.SIGHUP), 0, 0, 0)
if os.getppid() != PARENT:
    gone.append(0)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
noise = re.compile(PATTERN.encode())
pending = b""
def out(b):
    while b:
        b = b[os.write(1, b):]
while True:
    ready, _, _ = select.select([0], [], [], 0.2 if pending else 0.5)
    if not ready:
        out(pending)
        pending = b""
        if gone or os.getppid() != PARENT:  # nothing left to read from a command that has ended
            break
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b"\n")
    out(b"".join(line + b"\n" for line in lines if not noise.match(line)))
    if pending and pending[:1] not in (b"I", b"W", b"E", b"A"):
        out(pending)
        pending = b""
if pending and not noise.match(pending):
    out(pending)
"""


def _stderr_is_fd2() -> bool:
    try:
        return sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False  # replaced by a capture object (pytest, an IDE): nothing to filter at the fd level


@contextlib.contextmanager
def quiet_frameworks():
    """Within the block: TF_CPP_MIN_LOG_LEVEL=2 unless set (TensorFlow's own INFO and WARNING lines off), the
    `absl` and jax platform Python loggers at ERROR, and file descriptor 2 passed through a filter process that
    drops the lines of NOISE_PATTERN (child processes inherit it). For the command line only: it changes this
    process's environment and stderr, which a library must not do."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for name in ("absl", "jax._src.xla_bridge"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if not _stderr_is_fd2():
        yield
        return
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    saved = os.dup(2)
    try:
        proc = subprocess.Popen([sys.executable, "-c",
                                 f"PATTERN = {NOISE_PATTERN!r}\nPARENT = {os.getpid()}\n{_FILTER_CODE}"],
                                stdin=read_end, stdout=saved, stderr=saved, close_fds=True)
    except OSError:
        os.close(read_end)
        os.close(write_end)
        os.close(saved)
        yield
        return
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

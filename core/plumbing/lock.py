"""One run at a time per results folder.

    with hold(out):            # after check_writable(out), before the first result is computed
        ...                    # only this run writes in `out`

`hold` takes an exclusive lock on `<out>/.gelulab.lock` (fcntl.flock through the filelock package, taken at once or
refused, never waited for) and writes the holder into the lock file: pid, host, command line and start time. A
second run into the same folder is refused at once with FolderInUse (a ValueError: one line, exit code 2 on the
command line) naming that holder, before it computes anything, so two runs can never mix their results in one
folder. The lock is released when the block ends, however it ends (an exception, Ctrl-C, SIGTERM turned into
KeyboardInterrupt by the command line); the kernel releases it when the process dies (SIGKILL included), and the
holder record such a process leaves behind is taken over by the next run with one note on stderr. A clean release
empties the lock file (an empty file holds no one) and removes it when this hold created it; a folder the hold
created and left holding only the lock file is removed again.

The same thread may hold one folder several times (a command's run and the library function it calls); another
thread or process is refused. Where the file system offers no flock, the run goes on unlocked after one note.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

from gelulab.core.plumbing.provenance import command_line

LOCK_NAME = ".gelulab.lock"

_held: dict[str, list] = {}  # realpath of a folder -> [thread id, depth], the holds of this process
_held_guard = threading.Lock()


class FolderInUse(ValueError):
    """The results folder is held by another run; the message names the folder and the holder."""


class LockFileUnusable(ValueError):
    """The lock file of a results folder cannot serve as a lock (a symbolic link, a folder, unreadable, ...); the
    message names the lock file and what to do."""


# errors of flock itself that mean "this file system offers no locks": the run goes on unguarded after one note
NO_FLOCK = frozenset(e for e in (getattr(errno, n, None) for n in ("ENOSYS", "EOPNOTSUPP", "ENOTSUP", "ENOLCK"))
                     if e is not None)


def _unusable_lock(option: str, path: Path) -> str | None:
    """Why `path`'s lock file cannot be used as one (a symbolic link, not a regular file), or None when it is
    missing or a regular file."""
    file = path / LOCK_NAME
    if file.is_symlink():
        return f"{option} {path}: its lock file {file} is a symbolic link; remove it and rerun"
    if file.exists() and not file.is_file():
        kind = "a folder" if file.is_dir() else "not a regular file"
        return f"{option} {path}: its lock file {file} is {kind}; remove it and rerun"
    return None


def holder_record() -> dict:
    """This process as a lock holder: {"pid", "host", "command", "started"} (started: local time, ISO 8601)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": command_line(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def read_holder(folder: str | os.PathLike) -> dict | None:
    """The holder record in `folder`'s lock file, or None when there is none (no file, empty, not a record)."""
    try:
        rec = json.loads((Path(folder) / LOCK_NAME).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def describe(rec: dict | None) -> str:
    """A holder record in words: "pid 123 on host h (`gelulab moons ...`, started 2026-...)"."""
    if not rec:
        return "another process (no holder record yet)"
    return (f"pid {rec.get('pid', '?')} on host {rec.get('host', '?')} (`{rec.get('command', '?')}`, started "
            f"{rec.get('started', '?')})")


def _pid_running(pid) -> bool | None:
    """Whether a process with this pid runs on this host (None: cannot tell)."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _stale_note(folder: Path, rec: dict) -> str:
    """The note printed when a lock left by a process that no longer holds it is taken over."""
    gone = ""
    if rec.get("host") == socket.gethostname() and _pid_running(rec.get("pid")) is False:
        gone = f" (pid {rec.get('pid')} is not running)"
    return (f"gelulab: {folder}: the run that held this folder, {describe(rec)}, ended without releasing it"
            f"{gone}; taking the folder over")


@contextlib.contextmanager
def hold(folder: str | os.PathLike, option: str = "--out") -> Iterator[Path]:
    """Hold the results folder `folder` for the block (see the module docstring); yields Path(folder).

    Creates the folder (and its parents) when missing. Raises FolderInUse (a ValueError), before the block runs,
    when another process or thread holds it: "<option> <folder> is in use by pid N on host H (`command`, started
    T); wait for that run to end or use another <option>". Raises OSError when the folder cannot be created or
    the lock file cannot be opened (check the folder with core.plumbing.output.check_writable first for a clearer line).
    Raises LockFileUnusable (a ValueError) when the lock file is a symbolic link or a folder, or the lock fails
    for any reason but a file system without flock (ENOSYS, EOPNOTSUPP, ENOLCK: then one note and no lock).
    Prints one note on stderr when it takes over the lock of a process that ended without releasing it."""
    path = Path(folder)
    key = os.path.realpath(path)
    me = threading.get_ident()
    with _held_guard:
        entry = _held.get(key)
        if entry is not None and entry[0] == me:
            entry[1] += 1
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield path
        finally:
            with _held_guard:
                _held[key][1] -= 1
        return
    with _held_guard:
        busy = key in _held  # another thread of this process holds it
    if busy:
        raise FolderInUse(f"{option} {path} is in use by another thread of this process "
                          f"({describe(read_holder(path))}); wait for that run to end or use another {option}")
    created = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
    fresh = not (path / LOCK_NAME).exists()  # no lock file before this hold: none is left after it
    path.mkdir(parents=True, exist_ok=True)
    unusable = _unusable_lock(option, path)
    if unusable:
        _remove_created(path, created)
        raise LockFileUnusable(unusable)
    previous: list[bytes] = []

    def on_acquired(fd: int) -> None:  # the lock is ours: read what the last holder left, write ourselves
        os.lseek(fd, 0, os.SEEK_SET)
        previous.append(os.read(fd, 1 << 16))
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder_record()) + "\n").encode(), 0)

    lock = filelock.FileLock(path / LOCK_NAME, timeout=0, on_acquired=on_acquired, fallback_to_soft=False)
    locked = True
    try:
        lock.acquire()
    except filelock.Timeout:
        raise FolderInUse(f"{option} {path} is in use by {describe(read_holder(path))}; wait for that run to end "
                          f"or use another {option}") from None
    except OSError as e:
        if e.errno not in NO_FLOCK:
            _remove_created(path, created)
            reason = _unusable_lock(option, path)  # made a link or a folder meanwhile
            if reason:
                raise LockFileUnusable(reason) from None
            if isinstance(e, (PermissionError, FileNotFoundError, NotADirectoryError)):
                raise
            raise LockFileUnusable(f"{option} {path}: cannot lock its lock file {path / LOCK_NAME} "
                                   f"({e.strerror or e}); remove it and rerun, or use another {option}") from None
        # a file system without flock (ENOSYS, EOPNOTSUPP, ENOLCK): the run goes on, unguarded
        print(f"gelulab: {path}: cannot lock the results folder ({e.strerror or e}); running without a lock: "
              "run one command at a time in it", file=sys.stderr)
        locked = False
    except BaseException:
        _remove_created(path, created)
        raise
    if previous and previous[0].strip():
        try:
            rec = json.loads(previous[0])
        except (UnicodeDecodeError, json.JSONDecodeError):
            rec = None
        print(_stale_note(path, rec if isinstance(rec, dict) else {}), file=sys.stderr)
    with _held_guard:
        _held[key] = [me, 1]
    try:
        yield path
    finally:
        with _held_guard:
            _held.pop(key, None)
        if locked:
            _release(lock, path, created, fresh)
        else:
            _remove_created(path, created)


def _release(lock: filelock.FileLock, path: Path, created: list[Path], fresh: bool) -> None:
    """Empty the lock file (no holder), unlock, and remove the folders this hold created when they hold nothing
    else than the lock file; a lock file this hold created (`fresh`) is removed too, so a run leaves the folder
    as it found it but for its results (the lock file is unlinked while still held, so a run that opened it
    meanwhile finds it gone and opens the path afresh). Never raises for the clean-up (the kernel releases the
    lock at exit)."""
    with contextlib.suppress(OSError):
        os.truncate(path / LOCK_NAME, 0)
        if fresh:
            (path / LOCK_NAME).unlink()
    try:
        _remove_created(path, created, rmdir=False)
        lock.release()
    finally:
        _remove_created(path, created)


def _remove_created(path: Path, created: list[Path], rmdir: bool = True) -> None:
    """Unlink the lock file of `path` when `created` (the folders this hold made, deepest first, `path` among
    them) is not empty and the folder holds nothing else; then (rmdir) remove each of those folders while it is
    empty, stopping at the first that is not. Raises nothing."""
    if not created:
        return
    with contextlib.suppress(OSError):
        if [p.name for p in path.iterdir()] == [LOCK_NAME]:
            (path / LOCK_NAME).unlink()
        if rmdir:
            for folder in created:
                folder.rmdir()  # OSError (not empty) ends the clean-up

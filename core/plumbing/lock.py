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

One folder, one command. A results folder holds the results of one command (`gelulab parity`, `gelulab moons`,
`gelulab moons --grid`, `gelulab bench`, `gelulab bench --model`, ...: KINDS, from the module that takes the hold).
The first result a run writes also writes `<out>/.gelulab-results.json`, {"command": the kind}; a run of another
command into that folder is refused by `hold`, before the block runs, with FolderOfAnotherCommand (a ValueError:
one line naming the command whose results are there and some of its files, exit 2). A rerun or resume of the same
command is allowed. A folder written by an older gelulab, without that record, is judged by the files only one
command writes (SIGNATURES: parity.json and groups/ are `gelulab parity`'s, runs/ and results.json `gelulab
moons`', ...); a folder holding none of them (empty, or files of the user's own) is free. A record that is not
one (not UTF-8 JSON, or no {"command": text}: damaged or edited) is named in one line on stderr, set aside as
`.gelulab-results.json.damaged-<n>` (core.plumbing.output.set_aside), the folder judged by its files and the
record written again with the run's first result; where the record should be, a folder (or anything but a file)
or a file that cannot be read is refused with RecordUnusable (a ValueError: one line, exit 2).

A vanished folder stops the run. Every result written through core.plumbing.output (atomic_write_bytes, and so
every report and JSON file) first calls check_held(path): when the path lies in a held folder whose lock file is
gone or is no longer the one this run locked (the folder was deleted, perhaps made again by another run), it
raises FolderVanished (a ValueError: one line, exit 2) instead of writing, so nothing is written unguarded; a file
operation that fails inside the block because the folder went (a read or listing, not only a write) is turned into
the same FolderVanished, and so is a folder removed while the lock was being taken. Worker
processes a run starts inherit the held folders through the environment (HELD_ENV) and are checked the same way.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

from gelulab.core.plumbing.provenance import command_line

LOCK_NAME = ".gelulab.lock"
RECORD_NAME = ".gelulab-results.json"  # {"command": "gelulab parity"}: the command whose results the folder holds
HELD_ENV = "_GELULAB_HELD_FOLDERS"  # the held folders, passed on to the worker processes a run starts (JSON)

_held: dict[str, list] = {}  # realpath of a folder -> [thread id, depth], the holds of this process
_held_guard = threading.Lock()
_guards: dict[str, dict] = {}  # realpath of a held folder -> its identity, kind and option (see _Guard below)

# the command whose results a folder holds, from the module that holds it (the longest matching prefix; a module
# of gelulab.experiments.<name> not listed is `gelulab <name>`); hold(kind=...) names it explicitly
KINDS = {
    "gelulab.experiments.moons.grid_cli": "gelulab moons --grid",
    "gelulab.experiments.moons.grid_study": "gelulab moons --grid",
    "gelulab.benchmarks.model": "gelulab bench --model",
    "gelulab.benchmarks": "gelulab bench",
}

# what a folder without a record holds, judged by the files one command alone writes (first match wins; a name
# ending in "/" is a folder)
SIGNATURES = (
    ("gelulab run", ("parity/", "moons/", "moons-agreement/")),
    ("gelulab parity", ("parity.json", "groups/")),
    ("gelulab moons --grid", ("grid.json", "cells/")),
    ("gelulab moons", ("runs/", "results.json")),
    ("gelulab bench --model", ("model.json", "model.partial.json")),
    ("gelulab bench", ("bench.json", "bench.partial.json")),
    ("gelulab swap", ("swap.json", "parts/")),
    ("gelulab verify", ("summary.json", "chunks.jsonl")),
    ("gelulab merge", ("merge.json",)),
)


class FolderInUse(ValueError):
    """The results folder is held by another run; the message names the folder and the holder."""


class FolderOfAnotherCommand(ValueError):
    """The results folder holds the results of another command; the message names the folder, that command and
    some of its files."""


class FolderVanished(ValueError):
    """The results folder, or its lock file, was removed or replaced while this run held it; the run stops before
    its next write. The message names the folder."""


class LockFileUnusable(ValueError):
    """The lock file of a results folder cannot serve as a lock (a symbolic link, a folder, unreadable, ...); the
    message names the lock file and what to do."""


class RecordUnusable(ValueError):
    """Where a results folder's record (RECORD_NAME) belongs there is a folder, something else than a file, or a
    file that cannot be read; the message names it and what to do."""


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


def kind_of(module: str | None) -> str | None:
    """The command whose results a folder held from `module` (a module's __name__) holds: KINDS' longest matching
    prefix, else `gelulab <name>` for a module of gelulab.experiments.<name>, else None (not a command's)."""
    if not module:
        return None
    for prefix in sorted(KINDS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return KINDS[prefix]
    parts = module.split(".")
    if parts[:2] == ["gelulab", "experiments"] and len(parts) > 2:
        return f"gelulab {parts[2]}"
    return None


def read_kind(folder: str | os.PathLike) -> str | None:
    """The command whose results `folder` holds: its record (RECORD_NAME) or, without one, the first of SIGNATURES
    whose files it holds; None when it holds neither (a free folder)."""
    folder = Path(folder)
    rec = None
    if (folder / RECORD_NAME).is_file():
        with contextlib.suppress(OSError, UnicodeDecodeError, ValueError, RecursionError):
            rec = json.loads((folder / RECORD_NAME).read_bytes().decode("utf-8"))
    if isinstance(rec, dict) and isinstance(rec.get("command"), str):
        return rec["command"]
    for kind, names in SIGNATURES:
        for name in names:
            if (folder / name).is_dir() if name.endswith("/") else (folder / name).is_file():
                return kind
    return None


def _listing(folder: Path, most: int = 4) -> str:
    """The names in `folder` but gelulab's own lock and record, sorted: "a, b, c, d and 3 more"."""
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir()
                       if p.name not in (LOCK_NAME, RECORD_NAME))
    except OSError:
        return ""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _check_record(path: Path, option: str) -> None:
    """Check `path`/RECORD_NAME before the folder is judged (see the module docstring): a damaged record is named in
    one line on stderr and set aside; a folder, anything else than a file, or an unreadable file there raises
    RecordUnusable. Nothing happens without a record."""
    where = path / RECORD_NAME
    try:
        mode = os.stat(where).st_mode
        if stat.S_ISDIR(mode):
            what = "a folder"
        elif not stat.S_ISREG(mode):
            what = "not a regular file"
        else:
            data, what = where.read_bytes(), None
    except FileNotFoundError:
        return
    except OSError as e:
        data, what = None, f"a file that cannot be read ({e.strerror or type(e).__name__})"
    if what is not None:
        raise RecordUnusable(f"{option} {path}: {where} is {what}; expected the file where gelulab records the "
                             f"command whose results the folder holds; remove it or use another {option}")
    try:
        rec = json.loads(data.decode("utf-8"))
        ok = isinstance(rec, dict) and isinstance(rec.get("command"), str)
        problem = None if ok else 'JSON, but not a record {"command": ...}'
    except (UnicodeDecodeError, ValueError, RecursionError):
        problem = "not JSON"
    if problem is None:
        return
    from gelulab.core.plumbing.output import set_aside  # output imports this module

    new = set_aside(where, "damaged")
    with _held_guard:  # set_aside checked the folder as a write does: the record is to be written again
        if os.path.realpath(path) in _guards:
            _guards[os.path.realpath(path)]["recorded"] = False
    print(f"gelulab: {where} is damaged ({problem}); set aside as {new.name}; the folder is judged by its files",
          file=sys.stderr)


def _check_kind(path: Path, option: str, kind: str | None) -> None:
    """Raise FolderOfAnotherCommand when `path` holds the results of a command other than `kind`; a damaged record
    is set aside first, a record that is a folder refused (_check_record)."""
    if kind is None:
        return
    _check_record(path, option)
    there = read_kind(path)
    if there is not None and there != kind:
        files = _listing(path)
        raise FolderOfAnotherCommand(f"{option} {path} holds results of `{there}`" + (f" ({files})" if files else "")
                                     + f"; choose another {option} for `{kind}`")


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino]


def _publish() -> None:
    """Pass the held folders on to the worker processes this process starts (HELD_ENV); called with _held_guard."""
    if _guards:
        os.environ[HELD_ENV] = json.dumps(_guards)
    else:
        os.environ.pop(HELD_ENV, None)


def _inherited() -> dict[str, dict]:
    """The held folders of the process that started this one (HELD_ENV), {} when none or unreadable."""
    try:
        held = json.loads(os.environ.get(HELD_ENV, "") or "{}")
    except json.JSONDecodeError:
        return {}
    return {k: v for k, v in held.items() if isinstance(v, dict)} if isinstance(held, dict) else {}


def _vanished(guard: dict) -> bool:
    """Whether a held folder, or the lock file this run locked in it, is gone or no longer the same file."""
    path = Path(guard["path"])
    try:
        if _identity(os.stat(path)) != guard["folder"]:
            return True
        if guard["lock"] is not None and _identity(os.stat(path / LOCK_NAME)) != guard["lock"]:
            return True
    except OSError:
        return True
    return False


def _write_record(folder: Path, kind: str) -> None:
    """Write `folder`/RECORD_NAME, {"command": kind}, atomically (temp file, then os.replace); raises nothing."""
    target = folder / RECORD_NAME
    tmp = folder / f"{RECORD_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        tmp.write_text(json.dumps({"command": kind}) + "\n")
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _vanished_error(option: str, folder, where: str) -> FolderVanished:
    """The one line of FolderVanished for `folder`; `where` says where the run stopped ("before writing x.json")."""
    return FolderVanished(f"{option} {folder}: the results folder or its lock file was removed or replaced while "
                          f"this run held it; stopped {where} so that nothing is written unguarded; rerun the "
                          "command to start again")


def check_held(path: str | os.PathLike) -> None:
    """Before a result is written to `path`: when it lies in a folder held by this run (or by the run that started
    this worker process), check that the folder and its lock file are still the ones locked, and record the
    folder's command (RECORD_NAME) with its first result. Raises FolderVanished (a ValueError, one line) naming the
    folder when they were removed or replaced (see the module docstring); does nothing for a path outside every
    held folder."""
    if not _guards and HELD_ENV not in os.environ:
        return
    target = os.path.realpath(path)
    with _held_guard:
        guards = {**_inherited(), **_guards}
    for key, guard in sorted(guards.items(), key=lambda kv: len(kv[0])):  # the outermost folder first
        if not (target == key or target.startswith(key.rstrip(os.sep) + os.sep)):
            continue
        if _vanished(guard):
            raise _vanished_error(guard["option"], guard["path"], f"before writing {Path(path).name}")
        if guard.get("kind") and not guard.get("recorded"):
            folder = Path(guard["path"])
            if not (folder / RECORD_NAME).exists():
                _write_record(folder, guard["kind"])
            with _held_guard:
                if key in _guards:
                    _guards[key]["recorded"] = True


def hold(folder: str | os.PathLike, option: str = "--out", kind: str | None = None):
    """Hold the results folder `folder` for the block (a context manager; see the module docstring); yields
    Path(folder). `kind`: the command whose results the folder is to hold (default: kind_of the calling module;
    None for a module that is not a command's, whose folders are neither recorded nor checked).

    Raises FolderOfAnotherCommand (a ValueError), before the block runs, when the folder holds the results of
    another command (read_kind): "<option> <folder> holds results of `gelulab parity` (parity.json, report.md);
    choose another <option> for `gelulab moons`".

    Creates the folder (and its parents) when missing. Raises FolderInUse (a ValueError), before the block runs,
    when another process or thread holds it: "<option> <folder> is in use by pid N on host H (`command`, started
    T); wait for that run to end or use another <option>". Raises OSError when the folder cannot be created or
    the lock file cannot be opened (check the folder with core.plumbing.output.check_writable first for a clearer line).
    Raises LockFileUnusable (a ValueError) when the lock file is a symbolic link or a folder, or the lock fails
    for any reason but a file system without flock (ENOSYS, EOPNOTSUPP, ENOLCK: then one note and no lock).
    Prints one note on stderr when it takes over the lock of a process that ended without releasing it."""
    if kind is None:
        kind = kind_of(sys._getframe(1).f_globals.get("__name__"))
    return _hold(folder, option, kind)


@contextlib.contextmanager
def _hold(folder: str | os.PathLike, option: str, kind: str | None) -> Iterator[Path]:
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
    locked_file: list[list[int]] = []
    folder_id: list[list[int]] = []

    def on_acquired(fd: int) -> None:  # the lock is ours: read what the last holder left, write ourselves
        # the folder's identity first: whoever sees this run's holder record sees a folder already guarded
        folder_id.append(_identity(os.stat(path)))
        locked_file.append(_identity(os.fstat(fd)))
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
            if isinstance(e, FileNotFoundError) and not path.is_dir():
                raise _vanished_error(option, path, "before it began") from None
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
    try:
        ident = folder_id[0] if locked and folder_id else _identity(os.stat(path))
    except OSError:  # removed since it was locked (or, unlocked, since it was made)
        if locked:
            with contextlib.suppress(Exception):
                lock.release()
        raise _vanished_error(option, path, "before it began") from None
    guard = {"path": os.fspath(path), "option": option, "kind": kind, "recorded": False,
             "folder": ident, "lock": locked_file[0] if locked and locked_file else None}
    with _held_guard:
        _held[key] = [me, 1]
        _guards[key] = guard
        _publish()
    try:
        _check_kind(path, option, kind)
        yield path
    except OSError as e:  # a file of the folder missing because the folder went: said as that, in one line
        if _vanished(guard):
            raise _vanished_error(option, path, f"at {Path(e.filename).name if e.filename else 'a file'} "
                                  f"({e.strerror or e})") from e
        raise
    finally:
        with _held_guard:
            _held.pop(key, None)
            _guards.pop(key, None)
            _publish()
        if _vanished(guard):  # removed or replaced meanwhile: what is there now is not this run's to clean up
            if locked:
                with contextlib.suppress(Exception):
                    lock.release()
        elif locked:
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

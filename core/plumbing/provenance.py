"""Where a result comes from: gelulab's version and git commit, the command line, and installed package versions.

Every report carries provenance() (through core.plumbing.report.environment); resumable results store
package_versions() in their key, so results of other versions are never mixed with new ones.
"""
from __future__ import annotations

import functools
import importlib.metadata
import shlex
import subprocess
import sys
from pathlib import Path

_state: dict = {"command": None}


def set_command(argv) -> None:
    """Record the command line being run (the `gelulab` entry point calls it with ["gelulab", *arguments])."""
    _state["command"] = [str(a) for a in argv]


def command_line() -> str:
    """The command line recorded by set_command, else this process's sys.argv, shell-quoted."""
    argv = _state["command"] or sys.argv
    return " ".join(shlex.quote(a) for a in argv)


def gelulab_version() -> str:
    """gelulab.__version__."""
    from gelulab import __version__

    return __version__


@functools.cache
def git_commit() -> str | None:
    """The git commit of gelulab's source folder, with " (modified)" when tracked files differ from it; None when
    gelulab is not run from a git checkout (an installed wheel) or git is absent."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=False)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + (" (modified)" if dirty.stdout.strip() else "")


def provenance() -> dict:
    """{"gelulab": version, "git_commit": commit or None, "command": the command line}."""
    return {"gelulab": gelulab_version(), "git_commit": git_commit(), "command": command_line()}


@functools.cache
def _distributions() -> dict:
    return importlib.metadata.packages_distributions()


def package_version(import_name: str) -> str:
    """The installed version of the distribution providing the top-level module `import_name` (e.g. "torch",
    "jaxlib", "sklearn"), read from the package metadata without importing it; "not installed" when absent."""
    for dist in _distributions().get(import_name, [import_name]):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def package_versions(import_names) -> dict:
    """{"gelulab": gelulab's version, name: package_version(name) for each of `import_names`} — the versions part
    of a resume key."""
    return {"gelulab": gelulab_version(), **{n: package_version(n) for n in import_names}}


def version_changes(stored: dict | None, current: dict) -> list[str]:
    """The differences between two package_versions() dicts as "name stored -> now" strings (empty: the same);
    a missing stored dict is one change, "no version record"."""
    if not isinstance(stored, dict):
        return ["no version record"]
    names = list(dict.fromkeys([*current, *stored]))
    return [f"{n} {stored.get(n, 'absent')} -> {current.get(n, 'absent')}" for n in names
            if stored.get(n) != current.get(n)]

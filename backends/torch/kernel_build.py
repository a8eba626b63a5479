"""The child process that builds one float32 kernel's loop (backends.torch.kernels.build_package), started by
backends.torch.kernels with `python -m gelulab.backends.torch.kernel_build KEY ORDERS DEVICE PATH PARENT_PID
main|thread`: the build's tracing and compiling (torch.export, AOTInductor) change process-wide state, which
must never happen in the user's process. It dies with its parent (core.plumbing.interrupts.die_with_parent;
`thread`: started from a thread that may end first, so it watches the parent's pid instead of PR_SET_PDEATHSIG).
Builds of one kernel are one at a time on a machine (a file lock beside PATH): a child that waited finds PATH
written and ends. Exit status 0 when PATH is written; otherwise 1, with the reason as the last line on stderr."""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    key, orders, device, path, parent, starter = argv
    from gelulab.core.plumbing.interrupts import die_with_parent

    die_with_parent(int(parent), starter_may_end=starter != "main")
    import torch

    torch.set_num_threads(1)  # the loop runs on the calling thread; the build uses one core
    import os

    from filelock import FileLock

    from gelulab.backends.torch.kernels import build_package

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with FileLock(f"{path}.lock"):  # one build of a kernel at a time on this machine (test workers, scripts)
            if not os.path.exists(path):  # another process built it while this one waited
                build_package(key, tuple(int(o) for o in orders.split(",")), device, path)
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"{type(e).__name__}: {first}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

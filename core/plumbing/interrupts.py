"""Interrupts that reach the command whatever it is running.

held_interrupts()                  SIGINT/SIGTERM held during a block (a framework's import), delivered after it
dropped_interrupts_sent_again()    a KeyboardInterrupt Python drops (in a gc callback, a destructor) sent again
die_with_parent(pid)               a worker process ends when the process that started it dies, even by SIGKILL

A KeyboardInterrupt raised inside a framework's import (its C++ extension initialising: jaxlib's MLIR bindings,
TensorFlow's, torch's) can leave the extension half-built: the process then ends with SIGSEGV or SIGABRT, or the
framework reports itself unavailable, and the command cannot print what it kept. `held_interrupts()` holds SIGINT
and SIGTERM during such a block; they arrive when it ends, where a KeyboardInterrupt is safe.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def held_interrupts():
    """Within the block, a SIGINT or SIGTERM sent to this process is noted, not acted on; when the block ends
    (also by an exception) the handlers in place before it are put back and each noted signal is raised again
    (signal.raise_signal), so its handler (KeyboardInterrupt for Ctrl-C, the default action, or nothing where it
    is ignored) runs after the block, never inside it. Python runs signal handlers in the main thread whichever
    thread the signal reaches, so this holds them for the whole process. A signal whose handler was installed
    outside Python (signal.getsignal gives None) is left alone. Only the main thread may install handlers:
    elsewhere it holds nothing. Raises nothing of its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def note(signum, frame):
        arrived.append(signum)

    previous = {s: signal.getsignal(s) for s in HELD}
    previous = {s: signal.signal(s, note) for s, h in previous.items() if h is not None}
    try:
        yield
    finally:
        try:
            restore_handlers(list(previous.items()))
        finally:
            _raise_each(list(dict.fromkeys(arrived)))


def restore_handlers(handlers: list[tuple[int, object]]) -> None:
    """Put back signal handlers: signal.signal(signum, handler) for each (signum, handler) pair, in order, even
    where a signal arriving between two of them runs a restored handler that raises (KeyboardInterrupt): the rest
    are still put back, so no temporary handler is left behind; that exception then propagates. Main thread only
    (signal.signal raises ValueError elsewhere)."""
    if handlers:
        try:
            signal.signal(*handlers[0])
        finally:
            restore_handlers(handlers[1:])


def _raise_each(signums: list[int]) -> None:
    """signal.raise_signal for each, in order, even where an earlier handler raises (KeyboardInterrupt): then the
    last exception propagates, chained to the earlier ones."""
    if signums:
        try:
            signal.raise_signal(signums[0])
        finally:
            _raise_each(signums[1:])


def _signal_of(exc: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: SIGINT, or N where the handler raised KeyboardInterrupt("signal N")
    (the command line's SIGTERM handler does)."""
    head, _, number = (str(exc.args[0]) if exc.args else "").partition(" ")
    return int(number) if head == "signal" and number.isdigit() else signal.SIGINT


@contextlib.contextmanager
def dropped_interrupts_sent_again(delay_s: float = 0.02):
    """Within the block, a KeyboardInterrupt that Python has to drop is not lost: its signal is sent to this
    process again after `delay_s` seconds, until it lands where it can be raised.

    Python drops (prints as "Exception ignored in ...") an exception raised inside a garbage-collector callback or
    a destructor; a Ctrl-C that arrives while one runs would be lost, and the command would run on. jax registers
    such a callback (`_xla_gc_callback`), which runs often while jax traces. The hook is sys.unraisablehook: a
    dropped KeyboardInterrupt is sent again (SIGINT, or N for KeyboardInterrupt("signal N")), anything else goes
    to the hook in place before. The hook is put back, and no signal is sent, once the block has ended. For a
    process's own entry point (the command line, a worker process): it replaces a process-wide hook."""
    previous = sys.unraisablehook
    active, timers, lock = [True], [], threading.Lock()

    def send(signum):
        with lock:  # never after the block has ended
            if active[0]:
                os.kill(os.getpid(), signum)

    def hook(unraisable):
        if active[0] and isinstance(unraisable.exc_value, KeyboardInterrupt):
            t = threading.Timer(delay_s, send, (_signal_of(unraisable.exc_value),))
            t.daemon = True
            timers.append(t)
            t.start()
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        with lock:
            active[0] = False
        for t in timers:
            t.cancel()
        sys.unraisablehook = previous


def die_with_parent(parent_pid: int, *, starter_may_end: bool = False) -> None:
    """Make this process (a worker, a filter) end when `parent_pid`, the process that started it, dies by any means,
    SIGKILL included, so no worker is left burning the cores after its command is gone. On Linux it asks the kernel
    for SIGKILL at the parent's death (prctl PR_SET_PDEATHSIG, man 2 prctl; the kernel sends it when the parent's
    starting thread ends, so start workers from a thread that lives as long as they do); elsewhere, and with
    starter_may_end (the parent started it from a thread that may end before the process does, e.g. a user's
    worker thread), a daemon thread checks os.getppid() every 0.5 s instead. Exits at once (os._exit(1)) when the
    parent has already died. Call it first thing in the child (a ProcessPoolExecutor initializer with
    initargs=(os.getpid(),)). Raises nothing."""
    if sys.platform.startswith("linux") and not starter_may_end:
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            _watch_parent(parent_pid)
    else:
        _watch_parent(parent_pid)
    if os.getppid() != parent_pid:
        os._exit(1)


def _watch_parent(parent_pid: int) -> None:
    import time

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="gelulab-parent-watch", daemon=True).start()

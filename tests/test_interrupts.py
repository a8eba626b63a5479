"""Ctrl-C held back while a framework starts (gelulab.core.plumbing.interrupts): a SIGINT or SIGTERM sent inside
held_interrupts() runs its handler when the block ends, never inside it, whichever thread receives it, and the
handlers afterwards are those before. The signals are real ones, sent with os.kill or, to one thread, with
signal.pthread_kill."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from gelulab.core.plumbing.interrupts import dropped_interrupts_sent_again, held_interrupts


def _handlers() -> dict:
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


def _wait_for_python_handlers():
    for _ in range(50):  # Python runs a handler at its next check in the main thread: a few bytecodes at most
        time.sleep(0.001)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_inside_the_block_arrives_when_it_ends(signum):
    seen, reached = [], []

    def handler(s, frame):
        seen.append(s)
        raise KeyboardInterrupt

    previous = signal.signal(signum, handler)
    before = _handlers()
    try:
        with pytest.raises(KeyboardInterrupt), held_interrupts():
            os.kill(os.getpid(), signum)
            _wait_for_python_handlers()
            assert seen == []
            reached.append("the end of the block")
        assert reached == ["the end of the block"] and seen == [signum] and _handlers() == before
    finally:
        signal.signal(signum, previous)


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX threads")
def test_a_signal_that_another_thread_receives_is_held_too():
    seen, reached = [], []
    previous = signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
    try:
        with held_interrupts():
            t = threading.Thread(target=lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT))
            t.start()
            t.join()
            _wait_for_python_handlers()
            assert seen == []
            reached.append(True)
        _wait_for_python_handlers()
        assert reached == [True] and seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_handlers_are_put_back_when_the_block_raises_and_nested_blocks_unwind():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
    before = _handlers()
    try:
        with pytest.raises(ValueError), held_interrupts():
            with held_interrupts():
                os.kill(os.getpid(), signal.SIGINT)
                _wait_for_python_handlers()
            _wait_for_python_handlers()
            assert seen == []  # the outer block still holds it
            raise ValueError("inside")
        _wait_for_python_handlers()
        assert seen == [signal.SIGINT] and _handlers() == before
    finally:
        signal.signal(signal.SIGINT, previous)


def test_both_signals_held_both_arrive():
    seen = []

    def handler(s, frame):
        seen.append(s)
        raise KeyboardInterrupt(f"signal {s}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(KeyboardInterrupt), held_interrupts():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            _wait_for_python_handlers()
        assert sorted(seen) == sorted([signal.SIGINT, signal.SIGTERM])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def test_an_ignored_signal_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with held_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            _wait_for_python_handlers()
        _wait_for_python_handlers()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_the_main_thread_nothing_is_held():
    inside = {}

    def work():
        with held_interrupts():
            inside.update(_handlers())

    before = _handlers()
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert inside == before


def test_ctrl_c_during_a_backends_import_arrives_after_the_import(monkeypatch):
    """gelulab.backends imports a framework under held_interrupts: Ctrl-C in the middle of the import raises
    KeyboardInterrupt only once the module is imported."""
    from gelulab import backends

    package = backends.PACKAGES["numpy"]
    real, imported = package.load_activations, []

    def import_with_ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for_python_handlers()
        module = real()
        imported.append(module.__name__)
        return module

    monkeypatch.setattr(package, "load_activations", import_with_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            backends.activations_module("numpy", apply=False)
            _wait_for_python_handlers()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert imported == ["gelulab.backends.numpy.activations"]


def _ctrl_c_inside_a_gc_callback():
    """Send SIGINT while a garbage-collector callback runs (as jax's `_xla_gc_callback` does), so Python raises
    the KeyboardInterrupt inside the callback, where it can only drop it."""
    import gc

    def callback(phase, info):
        if phase == "start" and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs here, inside the callback
                pass

    fired = []
    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)
    assert fired == [True]


def _a_while():
    for _ in range(200):  # 0.2 s: ten times the delay before a dropped signal is sent again
        time.sleep(0.001)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # pytest's report of the drop
def test_a_ctrl_c_python_drops_in_a_gc_callback_is_sent_again():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    hook = sys.unraisablehook
    try:
        _ctrl_c_inside_a_gc_callback()  # the premise: without the block, the Ctrl-C is lost
        _a_while()
        with pytest.raises(KeyboardInterrupt), dropped_interrupts_sent_again():
            _ctrl_c_inside_a_gc_callback()
            deadline = time.monotonic() + 10  # sent again after 0.02 s; the margin is for a busy machine
            while time.monotonic() < deadline:
                time.sleep(0.001)
        assert sys.unraisablehook is hook
        _a_while()  # and nothing is sent once the block has ended
    finally:
        signal.signal(signal.SIGINT, previous)


# ----------------------------------------------------------------------------- a command's Ctrl-C: one line


def test_ctrl_c_in_bench_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    """A real SIGINT while `gelulab bench` times its first group: the terminal shows exactly the one line saying
    what was kept (the cells measured, in bench.partial.json), exit code 130 (128 + SIGINT)."""
    from gelulab import cli
    from gelulab.benchmarks import activations as bench

    def ctrl_c(*a, **k):
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for_python_handlers()
        pytest.fail("SIGINT did not stop the benchmark")

    monkeypatch.setattr(bench, "run_group", ctrl_c)
    out = tmp_path / "b"
    rc = cli.main(["bench", "--quick", "--backend", "numpy", "--activation", "relu", "--no-train-step",
                   "--no-plots", "--copy-mib", "8", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 128 + signal.SIGINT == 130, err
    # what a terminal shows: the progress bar (redrawn with carriage returns) is cleared before the line
    shown = [line.rsplit("\r", 1)[-1] for line in err.split("\n")]
    assert shown[-1] == "" and err.endswith("\n"), err
    assert shown[:-1] == [(f"gelulab bench: interrupted; the 0 cells measured are in {out / 'bench.partial.json'} "
                           "(marked partial); bench does not resume: the same command measures every cell "
                           "again, so that all cells of one result share the machine's state")], err
    assert (out / "bench.partial.json").is_file() and not (out / "bench.json").exists()


def test_a_ctrl_c_while_the_handlers_go_back_leaves_no_held_handler_behind(monkeypatch):
    # SIGINT's handler is put back first; a Ctrl-C arriving right then raises KeyboardInterrupt before SIGTERM's is:
    # SIGTERM must still get its own handler back, or the process would ignore SIGTERM from then on
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = _handlers()
    real = signal.signal

    def ctrl_c_once_sigint_is_back(s, handler):
        out = real(s, handler)
        if s == signal.SIGINT and handler is signal.default_int_handler:
            os.kill(os.getpid(), signal.SIGINT)
            _wait_for_python_handlers()
        return out

    try:
        monkeypatch.setattr(signal, "signal", ctrl_c_once_sigint_is_back)
        with pytest.raises(KeyboardInterrupt), held_interrupts():
            pass
        monkeypatch.undo()
        assert _handlers() == before
    finally:
        monkeypatch.undo()
        signal.signal(signal.SIGINT, previous)

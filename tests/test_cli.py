"""`gelulab parity` on the command line: filters checked before any framework loads, repeats dropped, empty values
and empty matrices refused with the option named and nothing overwritten, absent devices reported in one line
with exit code 2. Fast: numpy backend, one dtype and order."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gelulab import cli as gelulab
from gelulab.core.activations import IMPLS

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--backend", "numpy", "--order", "0", "--activation", "relu", "--no-plots"]


def _main(capsys, *argv):
    rc = gelulab.main(["parity", *argv])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--dtype", ""], "--dtype '' is empty"),
    (["--backend", " , "], "--backend ' , ' is empty"),
    (["--order", "1.0"], "--order '1.0' is not valid"),
    (["--activation", "swish"], "--activation 'swish' is not valid"),
    (["--impl", "fast"], "--impl 'fast' is not valid"),
    (["--mode", "graph"], "--mode 'graph' is not valid"),
    (["--device", ""], "--device '': expected one of"),
    (["--device", "npu"], "--device 'npu': expected one of"),
])
def test_bad_or_empty_filter_is_refused(argv, message, capsys, tmp_path):
    rc, err = _main(capsys, *SMALL, "--out", str(tmp_path / "p"), *argv)
    assert rc == 2
    assert err.startswith("gelulab parity: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "p").exists()


def test_filters_are_checked_before_any_framework_is_imported():
    code = ("import sys; from gelulab import cli; rc = cli.main(['parity', '--backend', 'torch,jax,tensorflow', "
            "'--dtype', 'float8']); print(rc, sorted(m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert p.stdout.split() == ["2", "[]"], p.stdout + p.stderr
    assert "--dtype 'float8' is not valid" in p.stderr


def test_empty_matrix_is_refused_and_the_old_report_kept(capsys, tmp_path):
    (tmp_path / "report.md").write_text("previous report\n")
    rc, err = _main(capsys, "--backend", "numpy", "--mode", "compiled", "--out", str(tmp_path))
    assert rc == 2 and "--mode compiled" in err and "'numpy': ['eager']" in err
    assert (tmp_path / "report.md").read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_repeated_values_give_the_same_cells(capsys, tmp_path):
    cells = {}
    for tag, argv in {"once": ["--dtype", "float16"],
                      "twice": ["--backend", "numpy,numpy", "--dtype", "float16, float16", "--order", "0,0"]}.items():
        assert gelulab.main(["parity", *SMALL, *argv, "--out", str(tmp_path / tag)]) == 0
        rows = json.loads((tmp_path / tag / "parity.json").read_text())["cells"]
        cells[tag] = sorted((r["backend"], r["impl"], r["activation"], r["dtype"], r["mode"], r["order"],
                             r["region"]) for r in rows)
    assert cells["twice"] == cells["once"]
    assert len(set(cells["once"])) == len(cells["once"])
    # numpy: ReLU in every implementation, float16, eager, order 0, one cell per region
    assert {c[1] for c in cells["once"]} == set(IMPLS) and {c[3] for c in cells["once"]} == {"float16"}


def test_absent_device_is_one_line_and_exit_code_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "gelulab", "parity", *SMALL, "--device", "gpu", "--out", str(tmp_path)],
                       check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert p.returncode == 2
    assert p.stderr.startswith("gelulab parity: error: ") and "'gpu'" in p.stderr and p.stderr.count("\n") == 1
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "report.md").exists()


def test_missing_framework_is_a_clean_error(capsys, monkeypatch, tmp_path):
    from gelulab import backends

    def unavailable(name, device=None):
        raise backends.BackendUnavailable(f"backend {name!r} is not available; install it with: pip install x")

    monkeypatch.setattr("gelulab.experiments.parity.command.get_backend", unavailable)
    rc, err = _main(capsys, *SMALL, "--dtype", "float16", "--out", str(tmp_path))
    assert rc == 2 and err == "gelulab parity: error: backend 'numpy' is not available; install it with: pip install x\n"


def test_filtered_plot_has_only_the_selected_panels(tmp_path):
    import matplotlib.image

    argv = ["parity", "--backend", "numpy", "--activation", "gelu_tanh", "--dtype", "float16", "--order", "0",
            "--out", str(tmp_path)]
    assert gelulab.main(argv) == 0
    h, w = matplotlib.image.imread(tmp_path / "errors_order0.png").shape[:2]
    # one GELU form x one dtype: one panel of 4.2 x 3.0 inches at 90 dpi (plot_errors' figsize per panel)
    assert (w, h) == (round(4.2 * 90), round(3.0 * 90))
    assert "errors_order1.png" not in (tmp_path / "report.md").read_text()

"""Stored results carry a checksum verified on resume: a stored parity group with one flipped output bit, a
hand-edited moons run file and an edited `verify` chunk line are never reported as measured; each is set aside
(or skipped) with a line naming the file, and its part is computed again, giving the numbers of the first run.
"""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from conftest import SELECTED

from gelulab import cli
from gelulab.backends import capabilities
from gelulab.core.plumbing import report
from gelulab.experiments.moons import config as M
from gelulab.experiments.moons import study as X

TRAINABLE = [b for b in SELECTED if capabilities(b).autodiff]


def test_record_checksum_follows_the_values_not_the_layout():
    text = report.json_text({"a": 1.5, "b": float("nan"), "c": [1, 2]}, checksum=True)
    rec = json.loads(text)
    assert list(rec) == ["a", "b", "c", "sha256"] and report.verify_checksum(rec) is None
    assert report.verify_checksum(json.loads(json.dumps(rec))) is None  # re-indented: the same record
    assert report.verify_checksum({**rec, "a": 1.25}) == ("its checksum does not match its contents (the file "
                                                          "was edited or damaged)")
    assert report.verify_checksum({k: v for k, v in rec.items() if k != "sha256"}) == "has no checksum"


PARITY = ["parity", "--backend", "numpy", "--activation", "gelu_none", "--dtype", "float32", "--order", "0",
          "--no-plots"]


def test_a_flipped_bit_in_a_stored_parity_group_is_set_aside_and_measured_again(tmp_path, capsys):
    out = tmp_path / "p"
    assert cli.main([*PARITY, "--out", str(out)]) == 0
    first = json.loads((out / "parity.json").read_text())["cells"]
    path = min((out / "groups").glob("*.npz"))
    with np.load(path) as z:
        meta, bits = str(z["meta"]), z["bits"].copy()
    bits[len(bits) // 2] ^= 1  # one output bit, in the lowest place
    buf = io.BytesIO()
    np.savez_compressed(buf, meta=np.array(meta), bits=bits)
    path.write_bytes(buf.getvalue())
    capsys.readouterr()
    assert cli.main([*PARITY, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert (f"gelulab parity: {path} (ValueError: its checksum does not match its contents (the file was edited or "
            f"damaged)); moved to {path.name}.damaged-1; measuring its group again") in err
    assert (path.parent / f"{path.name}.damaged-1").exists() and path.exists()  # kept aside, and measured anew
    again = json.loads((out / "parity.json").read_text())
    assert again["cells"] == first and again["store"]["measured"] == 1


@pytest.mark.training
@pytest.mark.slow
@pytest.mark.skipif(not TRAINABLE, reason="moons needs a backend with autodiff")
def test_a_hand_edited_moons_run_file_is_set_aside_and_its_group_retrained(tmp_path, capsys):
    backend = TRAINABLE[0]
    cfg = M.MoonsConfig(n_samples=200, lr=1e-2, epochs=3, seeds=(0,), arms=("relu", "gelu_none"),
                        compare_dtype=None, grid_size=10)
    out = tmp_path / "m"
    first = X.run_study(cfg, out, [backend], jobs=1, progress=False)
    path = X.run_path(out, backend, "matched", cfg.dtype, "gelu_none", 0)
    rec = json.loads(path.read_text())
    true_acc = rec["metrics"]["test_acc"]
    rec["metrics"]["test_acc"] = 1.0 if true_acc != 1.0 else 0.5  # valid JSON, every field there: a hand edit
    edited = json.dumps(rec, indent=2)
    path.write_text(edited)
    capsys.readouterr()
    again = X.run_study(cfg, out, [backend], jobs=1, progress=False)
    err = capsys.readouterr().err
    kept = path.parent / f"{path.name}.damaged-1"
    assert (f"moons: {path} is damaged (its checksum does not match its contents (the file was edited or "
            f"damaged)); kept as {kept.name}, its group is retrained") in err
    assert kept.read_text() == edited
    assert again["resumed_groups"] == 1  # relu's group read back, gelu_none's trained again

    def numbers(res):
        return {(r["arm"], r["seed"]): (r["metrics"], r["curves"]) for r in res["runs"]}

    assert numbers(again) == numbers(first)
    assert numbers(again)[("gelu_none", 0)][0]["test_acc"] == true_acc


def test_an_edited_verify_chunk_line_is_not_reused(tmp_path, capsys):
    argv = ["verify", "--stride", "1048577", "--chunk", "1024", "--backend", "numpy", "--activation", "relu",
            "--order", "0", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    log = tmp_path / "chunks.jsonl"
    lines = log.read_text().splitlines()
    summary = json.loads((tmp_path / "summary.json").read_text())
    number, line = next((i, s) for i, s in enumerate(lines, 1) if json.loads(s)["dtype"] == "float32")
    rec = json.loads(line)
    cell = next(iter(rec["cells"].values()))
    cell["n"] += 1  # a count changed by hand
    lines[number - 1] = json.dumps(rec)
    log.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert (f"gelulab verify: {log} line {number}: its checksum does not match its contents (the file was edited "
            "or damaged); its chunk is verified again") in captured.err
    assert "2 to run" not in captured.out and ", 1 to run;" in captured.out
    again = json.loads((tmp_path / "summary.json").read_text())
    assert again["cells"] == summary["cells"]


def test_a_fifo_in_a_stored_results_place_is_damaged_and_never_read(tmp_path):
    """A FIFO where a moons run file should be would block a read forever: it is reported as damaged unread."""
    import os

    fifo = tmp_path / "seed0.json"
    os.mkfifo(fifo)
    rec, status, problem = X.read_run(fifo, M.MoonsConfig(), ("torch", "matched", "float64", "relu", 0))
    assert (rec, status, problem) == (None, "damaged", "is not a regular file")

"""`gelulab verify` on a fixed stride of float32 bit patterns (what CI runs of the exhaustive check), every
bfloat16 and float16 input, per selected backend: every normal result within 1 ULP of the correctly rounded value,
the special values as specified; the log resumes by chunk; bad options are one line and exit code 2."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import gelulab_argv

from gelulab import cli as gelulab

ROOT = Path(__file__).resolve().parents[1]
STRIDE = str((1 << 16) + 1)  # 65536 float32 inputs spread over every exponent and sign


@pytest.mark.backend_needs("kernels")  # gelulab verify checks the kernels
def test_stride_run_is_within_one_ulp(backend_name, tmp_path, capsys):
    assert gelulab.main(["verify", "--stride", STRIDE, "--backend", backend_name, "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["passed"] and summary["complete"]
    cells = summary["cells"]
    assert {k.split("|")[1] for k in cells} == {"float32", "bfloat16", "float16"}
    for k, v in cells.items():
        assert v["max_ulp"] <= 1 and v["special_bad"] == 0, (k, v)
        assert v["n"] == 65536, k
    assert summary["float64_bound_checked"] and summary["float64_bound_check_worst"] < 1  # the bound held
    report = (tmp_path / "report.md").read_text()
    assert "max ULP" in report
    assert f"one bit pattern in {STRIDE} (stride {STRIDE})" in report
    assert f"One backend ran ({backend_name}): nothing to compare." in report  # no table of one backend against itself


def test_interrupted_run_resumes_by_chunk(tmp_path, capsys):
    args = ["verify", "--stride", STRIDE, "--chunk", "2048", "--backend", "numpy", "--activation", "relu",
            "--out", str(tmp_path)]
    assert gelulab.main([*args, "--max-chunks", "1"]) == 0
    assert "32 chunks, 1 to run" in capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert not summary["complete"] and summary["float32_chunks_done"] == 1
    assert gelulab.main(args) == 0
    assert "32 chunks, 31 to run" in capsys.readouterr().out  # only the missing chunks
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["complete"] and summary["cells"]["numpy|float32|relu|0"]["n"] == 65536


BAD_OPTIONS = [(["--stride", "0"], "--stride 0"),
               (["--stride", str((1 << 32) + 1)], f"--stride {(1 << 32) + 1}"),
               (["--exhaustive", "--chunk", "1"], "--chunk 1"),
               (["--stride", "7", "--max-chunks", "-1"], "--max-chunks -1")]


@pytest.mark.parametrize("bad,named", BAD_OPTIONS)
def test_bad_option_is_one_line_and_exit_code_2(tmp_path, capsys, bad, named):
    assert gelulab.main(["verify", *bad, "--backend", "numpy", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gelulab verify: error: {named}") and err.count("\n") == 1, err
    assert not (tmp_path / "chunks.jsonl").exists()


@pytest.mark.subprocess
def test_bad_option_is_one_line_and_exit_code_2_from_python_m_gelulab(tmp_path):
    """The same refusal from a fresh `python -m gelulab`: its whole stderr is the one line (nothing printed while
    the command line starts)."""
    bad, named = BAD_OPTIONS[0]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    p = subprocess.run([sys.executable, "-m", "gelulab", "verify", *bad, "--backend", "numpy",
                        "--out", str(tmp_path)], check=False, capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=120)
    assert p.returncode == 2
    assert p.stderr.startswith(f"gelulab verify: error: {named}") and p.stderr.count("\n") == 1, p.stderr
    assert not (tmp_path / "chunks.jsonl").exists()


@pytest.mark.subprocess
def test_sigint_keeps_finished_chunks_and_resumes_to_the_same_figures(tmp_path):
    out, whole = tmp_path / "v", tmp_path / "whole"
    common = ["verify", "--stride", STRIDE, "--backend", "numpy", "--activation", "gelu_none"]
    args = [*common, "--chunk", "64"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    p = subprocess.Popen([*gelulab_argv("terminal"), *args, "--out", str(out)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log, start = out / "chunks.jsonl", time.monotonic()
    while p.poll() is None and not (log.exists() and log.read_text().count("\n") >= 4):
        assert time.monotonic() - start < 300, "no chunk was written"
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    kept = sum(1 for line in log.read_text().splitlines() if json.loads(line)["dtype"] == "float32")
    assert p.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (f"gelulab verify: interrupted; {kept} of 1024 float32 chunks are kept in "
                                            f"{log}; run the same command again to resume")
    assert 1 <= kept < 1024 and not (out / "summary.json").exists()
    assert gelulab.main([*args, "--out", str(out)]) == 0
    # the uninterrupted reference in chunks of 4096 (16 chunks, not 1024 written one by one): the figures do not
    # depend on the chunking either
    assert gelulab.main([*common, "--chunk", "4096", "--out", str(whole)]) == 0
    resumed, fresh = (json.loads((d / "summary.json").read_text()) for d in (out, whole))
    assert (resumed["float32_chunks"], fresh["float32_chunks"]) == (1024, 16)
    assert resumed["complete"] and resumed["cells"] == fresh["cells"]
    assert resumed["backends_differ"] == fresh["backends_differ"]

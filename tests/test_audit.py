"""gelulab.identify(model), `gelulab identify A [B]` on model files, and gelulab.testing.assert_same_activations:
the activation sites of a torch nn.Module, its torch.export program and .pt2 file, its ONNX exports as onnxruntime
runs them (fused com.microsoft kernels included), a Hugging Face folder; comparisons; refused inputs.

Expected variants come from how each model is built, by each library's documentation: nn.GELU('tanh') and
F.gelu(approximate='tanh') are the tanh form, F.gelu and nn.GELU() exact, x * sigmoid(1.702 x) the sigmoid form;
ONNX's Gelu without `approximate` is exact (ONNX operator docs, opset 20); onnxruntime's com.microsoft.Gelu and
BiasGelu are exact GELU, QuickGelu x sigmoid(alpha x) (onnxruntime's ContribOperators.md); transformers' hidden_act
'gelu_new' is NewGELUActivation, the tanh formula (transformers/activations.py). Never from gelulab's own output.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import readme_blocks
from conftest import requires

torch = requires("torch")
nn = torch.nn
F = torch.nn.functional

from gelulab import identify
from gelulab.api import audit
from gelulab.testing import assert_same_activations

FOUR = ["gelu_tanh", "gelu_none", "gelu_sigmoid", "relu"]


class Four(nn.Module):
    """nn.GELU('tanh'), F.gelu in forward, x * sigmoid(1.702 x) by hand and nn.ReLU; a residual add and a division
    by a constant, which are no activation."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3, self.l4 = (nn.Linear(8, 8) for _ in range(4))
        self.act, self.relu = nn.GELU(approximate="tanh"), nn.ReLU()

    def forward(self, x):
        h = F.gelu(self.l2(self.act(self.l1(x))))
        h = self.l3(h)
        h = h * torch.sigmoid(1.702 * h)
        return self.relu(self.l4(h)) + x / 2.0


def variants(report):
    return [s.variant for s in report.sites]


def _onnx():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    return __import__("onnx")


def _export_onnx(model, x, path, dynamo, **kw):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(model, (x,), str(path), dynamo=True, verbose=False, **kw)
        else:
            torch.onnx.export(model, (x,), str(path), dynamo=False, **kw)
    return path


def _cli(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "gelulab", "identify", *map(str, argv)], capture_output=True,
                          text=True, cwd=cwd, timeout=600, check=False,
                          env={**os.environ, "GELULAB_BACKEND": os.environ.get("GELULAB_BACKEND", "torch")})


# --- torch ----------------------------------------------------------------------------------------------------------


def test_a_torch_module_gives_its_four_sites_modules_and_functional_calls():
    report = identify(Four().eval())  # an activation-laden model, its example input from the first Linear
    assert isinstance(report, audit.ModelReport)
    assert variants(report) == FOUR  # the residual add and x / 2 are no site
    ops = [s.op for s in report.sites]
    assert ops[0] == "aten.gelu.default(approximate='tanh')" and ops[1] == "aten.gelu.default"
    assert ops[2] == "aten.mul, aten.sigmoid, aten.mul" and ops[3] == "aten.relu.default"
    assert report.sites[0].path.startswith("act:") and report.sites[3].path.startswith("relu:")
    assert "torch.export" in report.format and report.runtime.startswith(f"torch {torch.__version__}")
    text = str(report)
    assert "4 activation sites" in text and "| gelu_sigmoid |" in text


def test_an_activation_module_is_still_a_callable_not_a_model():
    assert not audit.is_model(nn.GELU("tanh")) and not audit.is_model(nn.Tanh())
    assert audit.is_model(Four())
    assert identify(nn.GELU("tanh")).variant == "gelu_tanh"  # api.probe's Identification, as before


def test_export_program_and_pt2_file(tmp_path):
    model = Four().eval()
    program = torch.export.export(model, (torch.randn(2, 8),))
    assert variants(identify(program)) == FOUR
    torch.export.save(program, tmp_path / "four.pt2")
    report = identify(tmp_path / "four.pt2")
    assert variants(report) == FOUR and report.format.startswith(".pt2")
    comparison = identify(model, tmp_path / "four.pt2")
    assert isinstance(comparison, audit.ModelComparison) and comparison.changed == 0
    assert [d.status for d in comparison.diffs] == ["same variant"] * 4


def test_a_pt2_with_a_pickled_part_is_refused_without_allow_pickle(tmp_path):
    program = torch.export.export(Four().eval(), (torch.randn(2, 8),))
    torch.export.save(program, tmp_path / "four.pt2")
    with zipfile.ZipFile(tmp_path / "four.pt2") as src, zipfile.ZipFile(tmp_path / "pickled.pt2", "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("model_weights_config.json"):
                config = json.loads(data)
                first = next(iter(config["config"]))
                config["config"][first]["use_pickle"] = True
                data = json.dumps(config).encode()
            dst.writestr(item, data)
    with pytest.raises(ValueError, match="unpickles the pickled tensor .* --allow-pickle") as e:
        audit.audit(tmp_path / "pickled.pt2")
    assert "\n" not in str(e.value)


def test_a_model_whose_input_cannot_be_inferred_needs_an_example():
    model = nn.Sequential(nn.Conv1d(1, 4, 3), nn.GELU(), nn.Flatten(), nn.Linear(24, 4), nn.ReLU()).eval()
    with pytest.raises(ValueError, match=r"example= .*--example FILE\.npy"):
        identify(model)
    report = identify(model, example=np.zeros((2, 1, 8), np.float32))
    assert variants(report) == ["gelu_none", "relu"]


@pytest.mark.slow
def test_a_hugging_face_folder_with_gelu_new(tmp_path):
    transformers = requires("transformers")
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32, hidden_act="gelu_new")
    transformers.BertModel(config).save_pretrained(tmp_path, safe_serialization=True)
    assert (tmp_path / "model.safetensors").is_file()
    report = identify(tmp_path)
    assert "hidden_act='gelu_new' -> NewGELUActivation, tanh GELU" in report.format and "BertModel" in report.format
    # two layers of NewGELUActivation (its tanh formula written out in transformers' code), then the pooler's tanh
    assert variants(report) == ["gelu_tanh", "gelu_tanh", None]
    assert "aten.tanh" in report.sites[0].op and "aten.pow" in report.sites[0].op
    assert report.sites[0].path.startswith("encoder.layer.0.intermediate.intermediate_act_fn")


# --- ONNX, run by onnxruntime ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_an_onnx_export_as_onnxruntime_runs_it(tmp_path, dynamo):
    _onnx()
    model = Four().eval()
    path = _export_onnx(model, torch.randn(2, 8), tmp_path / "four.onnx", dynamo)
    report = identify(path)
    assert variants(report) == FOUR
    assert report.runtime.endswith("ORT_ENABLE_ALL")
    # onnxruntime fuses x * sigmoid(1.702 x) into its contrib QuickGelu, and Gemm + Relu into FusedGemm
    assert report.sites[2].op.startswith("com.microsoft.QuickGelu")
    assert report.sites[3].op.startswith("com.microsoft.FusedGemm(activation='Relu'")
    assert "weight 1 and bias 0" in report.sites[3].how
    assert identify(model, path).changed == 0
    unfused = audit.audit(path, audit.Options(ort_level="disable"))
    assert variants(unfused) == FOUR and unfused.sites[2].op == "Mul, Sigmoid, Mul"


def test_onnxruntime_fuses_a_bert_like_linear_gelu_into_its_contrib_kernels(tmp_path):
    onnx = _onnx()
    from onnx import TensorProto, helper, numpy_helper

    # opset 17 (no Gelu op): torch's exporter writes the Erf pattern, which onnxruntime fuses into com.microsoft.Gelu
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU()).eval()
    path = _export_onnx(model, torch.randn(2, 3, 8), tmp_path / "lg.onnx", False, opset_version=17)
    assert "Erf" in [n.op_type for n in onnx.load(path).graph.node]
    report = identify(path)
    assert [s.op for s in report.sites] == ["com.microsoft.Gelu"] and variants(report) == ["gelu_none"]
    assert variants(audit.audit(path, audit.Options(ort_level="disable"))) == ["gelu_none"]  # the Erf region
    # MatMul + Add(bias) + the Erf pattern -> com.microsoft.BiasGelu; its bias set to 0 in the probe
    rng = np.random.default_rng(0)
    c = {"W": rng.standard_normal((8, 8)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32),
         "sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32), "half": np.array(.5, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["pre"]),
             helper.make_node("Div", ["pre", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["pre", "e1"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 8])],
                              [numpy_helper.from_array(v, k) for k, v in c.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "bias.onnx")
    report = identify(tmp_path / "bias.onnx")
    assert [s.op for s in report.sites] == ["com.microsoft.BiasGelu"] and variants(report) == ["gelu_none"]
    assert "bias set to 0" in report.sites[0].how


# --- the README's cases ----------------------------------------------------------------------------------------------


def test_readme_torch_export_block():
    ns = readme_blocks.run("Model audit: torch.export")
    assert [s.variant for s in ns["report"].sites] == FOUR


@pytest.mark.slow
def test_readme_bert_against_both_onnx_exports():
    requires("transformers")
    _onnx()
    ns = readme_blocks.run("Model audit: BERT and ONNX")
    for comparison in (ns["legacy"], ns["dynamo"]):
        # exact GELU on both sides; torch's and onnxruntime's kernels differ in accuracy (bulk ULPs, f(+inf))
        assert [(d.a.variant, d.b.variant) for d in comparison.diffs[:6]] == [("gelu_none", "gelu_none")] * 6
        assert all(d.status.startswith("same variant") for d in comparison.diffs[:6])
        assert comparison.diffs[6].status == audit.SAME_FUNCTION  # the pooler's tanh on both sides
        assert comparison.a.sites[0].path.startswith("encoder.layer.0.intermediate.intermediate_act_fn")
        assert all(s.op.startswith("Gelu(approximate='none')") for s in comparison.b.sites[:6])


@pytest.mark.subprocess
def test_readme_wrong_conversion_is_caught_by_the_command_line_and_the_assertion(tmp_path):
    _onnx()
    ns = readme_blocks.run("Model audit: a wrong conversion")
    right, wrong = ns["tmp"] / "right.onnx", ns["tmp"] / "wrong.onnx"
    assert "gelu_tanh in A, gelu_none in B" in ns["message"] and "largest difference 0.00047" in ns["message"]
    p = _cli(right, wrong, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last == "The variant changed at 1 of 2 sites; the first is site 0 (/1/Gelu): VARIANT CHANGED.", last
    p = _cli(right, right, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip().endswith("The variant is the same at all 2 sites."), p.stderr
    p = _cli(right, wrong, "--json", cwd=tmp_path)
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["changed"] == 1 and doc["comparison"][0]["status"] == "VARIANT CHANGED"
    assert [s["variant"] for s in doc["b"]["sites"]] == ["gelu_none", "relu"]
    with pytest.raises(AssertionError, match=r"activation site 0 changed: .*\(A: /1/Gelu; B: /1/Gelu\)"):
        assert_same_activations(right, wrong)
    assert_same_activations(ns["model"], right)


# --- refused inputs: exit code 2, one line ----------------------------------------------------------------------------


@pytest.mark.subprocess
def test_refused_model_inputs_exit_2_with_one_line(tmp_path):
    _onnx()
    (tmp_path / "model.xyz").write_bytes(b"\x00" * 16)
    (tmp_path / "corrupt.onnx").write_bytes(b"this is not a protobuf" * 4)
    torch.save(nn.Sequential(nn.Linear(4, 4), nn.GELU()).state_dict(), tmp_path / "weights.bin")
    torch.save(nn.Sequential(nn.Conv1d(1, 2, 3), nn.GELU()), tmp_path / "conv.pt")
    np.save(tmp_path / "x.npy", np.zeros((2, 1, 8), np.float32))
    cases = [
        (["model.xyz"], "not a model gelulab reads"),
        (["corrupt.onnx"], "not an ONNX model"),
        (["weights.bin"], "--allow-pickle"),
        (["missing.onnx"], "no such file"),
        (["conv.pt", "--allow-pickle"], "--example FILE.npy"),
        (["corrupt.onnx", "torch.nn.GELU()"], "give two models"),
    ]
    for argv, said in cases:
        p = _cli(*argv, cwd=tmp_path)
        assert p.returncode == 2, (argv, p.stdout, p.stderr)
        assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)
        assert said in p.stderr, (argv, p.stderr)
    p = _cli("conv.pt", "--allow-pickle", "--example", "x.npy", cwd=tmp_path)
    assert p.returncode == 0 and "| gelu_none |" in p.stdout, p.stderr
    # a text file given as --example is no .npy (np.load would call it pickled data); a garbage .keras is no zip
    (tmp_path / "text.npy").write_text("hello")
    (tmp_path / "garbage.keras").write_bytes(b"garbage" * 8)
    for argv, said in [(["conv.pt", "--allow-pickle", "--example", "text.npy"], "not a .npy file"),
                       (["conv.pt", "--allow-pickle", "--example", "none.npy"], "cannot read it"),
                       (["garbage.keras"], "not a .keras file")]:
        p = _cli(*argv, cwd=tmp_path)
        assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)
        assert said in p.stderr, (argv, p.stderr)


def test_gelulab_kernel_and_formula_layers_are_one_site_each():
    # impl="kernel" traces to hundreds of aten ops (bit casts, masks, shifts): still one site per layer call, the
    # variant its constructor names, within the kernel's documented 1 ULP (docs/in-your-model.md)
    from gelulab.layers.torch import GELU, ReLU, SiLU

    shared = GELU("tanh", impl="kernel")
    model = nn.Sequential(nn.Linear(4, 4), shared, nn.Linear(4, 4), GELU(impl="kernel"), SiLU(impl="kernel"),
                          GELU("sigmoid", impl="kernel"), ReLU(impl="formula"), GELU(impl="formula"), nn.Linear(4, 4),
                          shared)
    report = identify(model.eval())
    assert variants(report) == ["gelu_tanh", "gelu_none", "silu", "gelu_sigmoid", "relu", "gelu_none", "gelu_tanh"]
    for s in report.sites[:4] + report.sites[6:]:
        assert s.ulps["bulk"].max <= 1.0, (s.path, s.ulps)

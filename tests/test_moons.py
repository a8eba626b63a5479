"""The moons study: config validation, data/split/order, the Adam formula, statistics
against scipy and textbook values, cross-backend agreement in float64 against an independent numpy backprop
reference, batched-vs-single seeds, resume after an interrupt, the native regime, and the report.

The training tests share one small study (600 samples, lr 1e-2, 20 epochs = 280 steps, 3 seeds, every arm) per
selected backend; the default study's own numbers (20 seeds, 4400 steps) are in its report.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import json
import math
import shutil

import numpy as np
import pytest
from conftest import requires
from scipy import stats as sps
from sklearn.datasets import make_moons

from gelulab import cli as gelulab
from gelulab.backends import BACKEND_NAMES, capabilities, installed_backends, selected_backends
from gelulab.backends.numpy import activations as npx
from gelulab.core import stats
from gelulab.core.activations import ACTIVATIONS
from gelulab.core.contracts import training
from gelulab.experiments.moons import config as M
from gelulab.experiments.moons import study as X

TRAINABLE = [b for b in BACKEND_NAMES if capabilities(b).autodiff]

SMALL = M.MoonsConfig(n_samples=600, lr=1e-2, epochs=20, seeds=(0, 1, 2), compare_dtype=None, grid_size=20)


def _skip_numpy(backend_name):
    if not capabilities(backend_name).autodiff:
        pytest.skip("numpy has no autodiff: the moons study skips it (see test_numpy_backend_is_skipped)")


# ---------------------------------------------------------------------------------------------- configuration


def test_defaults_are_the_articles_setting():
    cfg = M.MoonsConfig()
    # the article's setting: 2000 samples, noise 0.2, 2-64-64-1, Adam lr 1e-3 (0.9, 0.999) eps 1e-8, batch
    # 32,
    # 100 epochs, 20 seeds, every catalogue arm, matched regime
    assert (cfg.n_samples, cfg.noise, cfg.hidden, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.batch_size,
            cfg.epochs) == (2000, 0.2, (64, 64), 1e-3, 0.9, 0.999, 1e-8, 32, 100)
    assert cfg.seeds == tuple(range(20)) and cfg.regimes == ("matched",)
    assert cfg.arms == tuple(ACTIVATIONS)
    # 70/15/15 split: 1400 train points, ceil(1400/32) = 44 minibatches, 4400 steps
    assert cfg.sizes == (1400, 300, 300)
    assert cfg.steps_per_epoch * cfg.epochs == 4400


BAD = [
    ({"seeds": ()}, "seeds"),
    ({"seeds": (0, 0)}, "seeds"),
    ({"seeds": (-1,)}, "seeds"),
    ({"arms": ("relu", "swish")}, "arms"),
    ({"arms": ()}, "arms"),
    ({"noise": -0.1}, "noise"),
    ({"noise": float("nan")}, "noise"),
    ({"batch_size": 1401}, "batch_size"),
    ({"batch_size": 0}, "batch_size"),
    ({"epochs": 0}, "epochs"),
    ({"n_samples": 10}, "n_samples"),
    ({"hidden": ()}, "hidden"),
    ({"hidden": (64, 0)}, "hidden"),
    ({"lr": 0.0}, "lr"),
    ({"beta1": 1.0}, "beta1"),
    ({"beta2": -0.1}, "beta2"),
    ({"eps": 0.0}, "eps"),
    ({"val_fraction": 0.0}, "val_fraction"),
    ({"val_fraction": 0.5, "test_fraction": 0.5}, "val_fraction"),
    ({"impl": "fast"}, "impl"),
    ({"regimes": ("default",)}, "regimes"),
    ({"dtype": "float16"}, "dtype"),
    ({"compare_dtype": "float64"}, "compare_dtype"),
    ({"boundary_seed": 99}, "boundary_seed"),
]


@pytest.mark.parametrize("kwargs,field", BAD, ids=[f"{f}={list(k.values())[-1]!r}" for k, f in BAD])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        M.MoonsConfig(**kwargs)


@pytest.mark.parametrize("argv,field", [
    (["--seeds", "0"], "seeds"), (["--arms", "relu,swish"], "arms"), (["--noise", "-1"], "noise"),
    (["--batch-size", "5000"], "batch_size"), (["--epochs", "0"], "epochs"),
])
def test_cli_bad_config_fails_before_any_training(tmp_path, monkeypatch, capsys, argv, field):
    def no_training(*a, **k):
        raise AssertionError("training started")

    monkeypatch.setattr(X, "train_groups", no_training)
    assert gelulab.main(["moons", "--out", str(tmp_path / "out"), "--no-progress", *argv]) == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_results_folder_of_other_settings_is_refused_before_training(tmp_path, monkeypatch):
    cfg = dataclasses.replace(SMALL, arms=("relu",), seeds=(0,))
    backend = next((b for b in TRAINABLE if b in installed_backends()), None)
    if backend is None:
        pytest.skip("no trainable backend installed")
    path = X.run_path(tmp_path, backend, "matched", "float64", "relu", 0)
    stored = json.loads(json.dumps(dataclasses.replace(cfg, noise=0.1).run_key()))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"key": stored}))
    monkeypatch.setattr(X, "train_groups", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(ValueError, match="noise"):
        X.run_study(cfg, tmp_path, [backend], jobs=1, progress=False)


def test_numpy_backend_is_skipped(capsys, tmp_path):
    names, skipped = X.check_backends(["numpy"])
    assert names == [] and "no autodiff" in skipped["numpy"]
    with pytest.raises(ValueError, match="valid backends"):
        X.check_backends(["nosuch"])
    assert gelulab.main(["moons", "--backend", "numpy", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "numpy" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------- data, split, order


def test_split_is_stratified_disjoint_and_complete():
    cfg = M.MoonsConfig()
    d = M.make_data(cfg, 3)
    # make_moons draws n // 2 points per class (sklearn docs); stratification keeps 50 % in every split
    for x, y, n in ((d.x_train, d.y_train, 1400), (d.x_val, d.y_val, 300), (d.x_test, d.y_test, 300)):
        assert x.shape == (n, 2) and y.shape == (n,) and x.dtype == np.float64
        assert y.sum() == n // 2
    x_all, _ = make_moons(n_samples=2000, noise=0.2, random_state=M.seed_streams(3).data)
    got = np.concatenate([d.x_train, d.x_val, d.x_test])
    assert np.array_equal(np.sort(got, axis=0), np.sort(x_all, axis=0))  # disjoint and complete
    assert len(np.unique(got, axis=0)) == 2000


def test_seed_fixes_data_init_and_order():
    cfg = dataclasses.replace(SMALL, epochs=3)
    a, b, c = M.make_data(cfg, 5), M.make_data(cfg, 5), M.make_data(cfg, 6)
    assert np.array_equal(a.x_train, b.x_train) and not np.array_equal(a.x_train, c.x_train)
    assert np.array_equal(M.glorot_uniform_init(cfg, 5)[1][0], M.glorot_uniform_init(cfg, 5)[1][0])
    assert not np.array_equal(M.glorot_uniform_init(cfg, 5)[1][0], M.glorot_uniform_init(cfg, 6)[1][0])
    assert not np.array_equal(M.epoch_orders(cfg, 5), M.epoch_orders(cfg, 6))


def test_epoch_orders_and_batch_weights():
    cfg = M.MoonsConfig(epochs=3)
    order, w = M.epoch_orders(cfg, 0), M.batch_weights(cfg)
    assert order.shape == (3, 44, 32) and w.shape == (44, 32)
    for e in range(3):
        flat = order[e].ravel()
        assert sorted(flat[:1400]) == list(range(1400))  # each epoch visits every train point once
    assert not np.array_equal(order[0], order[1])
    # 1400 = 43 * 32 + 24: 43 full minibatches (weights 1/32) and a last one of 24 (1/24), padding weight 0
    assert np.allclose(w[:43], 1 / 32) and np.allclose(w[43, :24], 1 / 24) and np.all(w[43, 24:] == 0)


def test_glorot_uniform_init():
    cfg = M.MoonsConfig()
    layers = M.glorot_uniform_init(cfg, 0)
    assert [w.shape for w, _ in layers] == [(2, 64), (64, 64), (64, 1)]
    for (w, b), (fan_in, fan_out) in zip(layers, cfg.layer_sizes):
        a = math.sqrt(6 / (fan_in + fan_out))  # Glorot & Bengio 2010, eq. 16
        assert np.abs(w).max() <= a and np.all(b == 0)
    w = layers[1][0]
    assert np.var(w) == pytest.approx((6 / 128) / 3, rel=0.1)  # U(-a, a) has variance a^2 / 3


# ----------------------------------------------------------------------------------------------- Adam formula


def _adam_numpy(grads, cfg):
    """Apply experiments.moons.config.adam_step to `grads` in turn from p = 0; one step per epoch (70 train points,
    batch 70)."""
    c1, c2 = M.adam_bias_corrections(dataclasses.replace(cfg, n_samples=100, batch_size=70, epochs=len(grads)))
    assert c1.shape == (len(grads), 1)
    p, m, v, out = np.zeros_like(grads[0]), np.zeros_like(grads[0]), np.zeros_like(grads[0]), []
    for t, g in enumerate(grads):
        d, m, v = training.adam_step(g, m, v, c1[t, 0], c2[t, 0], cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, np.sqrt)
        p = p - d
        out.append(p)
    return out


def test_adam_first_step_is_lr_times_sign():
    # Kingma & Ba 2015, sec. 2.1: at t = 1, m_hat = g and v_hat = g^2, so the step is lr * g / (|g| + eps)
    g = np.array([3.0, -0.5, 1e-3, -2e4])
    cfg = M.MoonsConfig()
    (p,) = _adam_numpy([g], cfg)
    assert np.allclose(p, -cfg.lr * g / (np.abs(g) + cfg.eps), rtol=1e-15, atol=0)


@pytest.mark.parametrize("reference", ["torch.optim.Adam", "optax.adam"])
def test_adam_step_matches_torch_and_optax(reference):
    backend = "torch" if reference.startswith("torch") else "jax"
    if backend not in selected_backends():
        pytest.skip(f"{reference} is the reference; backend {backend!r} is not selected (GELULAB_BACKEND)")
    cfg = M.MoonsConfig()
    rng = np.random.default_rng(1)
    grads = [rng.normal(size=7) * 10.0 ** rng.integers(-6, 2) for _ in range(60)]
    ours = _adam_numpy(grads, cfg)
    if reference == "torch.optim.Adam":
        torch = requires("torch")
        p = torch.zeros(7, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([p], lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
        theirs = []
        for g in grads:
            p.grad = torch.as_tensor(g)
            opt.step()
            theirs.append(p.detach().numpy().copy())
    else:
        requires("optax")
        from gelulab.backends import get_backend

        get_backend("jax")  # x64 on
        import jax.numpy as jnp
        import optax

        tx = optax.adam(cfg.lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps)
        p = jnp.zeros(7, jnp.float64)
        state, theirs = tx.init(p), []
        for g in grads:
            u, state = tx.update(jnp.asarray(g), state, p)
            p = optax.apply_updates(p, u)
            theirs.append(np.asarray(p))
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-12, atol=1e-18)


# ------------------------------------------------------------------------------------------------- statistics

# Student's sleep data (Cushny & Peebles 1905; R's `sleep`): extra hours of sleep under two drugs, same 10
# patients.
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_paired_t_against_textbook_sleep_data():
    # R: t.test(extra ~ group, data = sleep, paired = TRUE): t = -4.0621, df = 9, p-value = 0.002833,
    # 95 percent CI -2.4598858 -0.7001142, mean difference -1.58
    r = stats.paired(SLEEP_1, SLEEP_2)
    assert r["t_stat"] == pytest.approx(-4.0621, abs=1e-4)
    assert r["t_p"] == pytest.approx(0.002833, abs=1e-6)
    assert (r["t_ci_low"], r["t_ci_high"]) == pytest.approx((-2.4598858, -0.7001142), abs=1e-7)
    assert r["mean_diff"] == pytest.approx(-1.58, abs=1e-12)
    assert (r["wins"], r["ties"], r["losses"]) == (0, 1, 9)  # group 1 higher on no patient, tied on one
    d = stats.describe(np.subtract(SLEEP_1, SLEEP_2))  # the same interval as the one-sample CI of the differences
    assert (d["ci_low"], d["ci_high"]) == pytest.approx((-2.4598858, -0.7001142), abs=1e-7)
    assert d["sd"] == pytest.approx(1.229995, abs=1e-6)  # R: sd(sleep$extra[1:10] - sleep$extra[11:20])
    assert stats.verdict({**r, "w_p": 0.01}, "drug 1", "drug 2", "sleep").startswith(
        "drug 1 has significantly lower sleep than drug 2")


def _wilcoxon_exact_by_enumeration(d):
    """Two-sided exact Wilcoxon signed-rank p from the definition: all 2^n sign patterns of the ranks."""
    ranks = sps.rankdata(np.abs(d))
    w_obs = ranks[np.asarray(d) > 0].sum()
    mean = ranks.sum() / 2
    totals = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product((0, 1), repeat=len(d))]
    return np.mean([abs(t - mean) >= abs(w_obs - mean) for t in totals])


@pytest.mark.parametrize("d", [
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],  # all positive: p = 2 / 2^10
    [1, -2, 3, -4, 5, -6, 7, -8, 9, -10],
    [0.5, 1.5, -0.25, 2.0, 3.0, -1.25, 4.0, 0.75],
])
def test_wilcoxon_against_its_definition(d):
    r = stats.paired(np.asarray(d, float), np.zeros(len(d)))
    assert r["w_p"] == pytest.approx(_wilcoxon_exact_by_enumeration(d), rel=1e-12)
    if all(v > 0 for v in d):
        assert r["w_p"] == pytest.approx(2 / 2 ** len(d), rel=1e-12)


def test_describe_and_degenerate_cases():
    d = stats.describe([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])  # mean 5, sample sd sqrt(32/7)
    assert d["mean"] == 5.0 and d["sd"] == pytest.approx(math.sqrt(32 / 7), rel=1e-14)
    half = sps.t.ppf(0.975, 7) * math.sqrt(32 / 7) / math.sqrt(8)
    assert (d["ci_low"], d["ci_high"]) == pytest.approx((5 - half, 5 + half), rel=1e-14)
    same = stats.paired([0.9, 0.95], [0.9, 0.95])
    assert same["w_p"] == 1.0 and "same" in stats.verdict(same, "a", "b", "accuracy")
    assert math.isnan(stats.describe([1.0])["sd"])
    with pytest.raises(ValueError, match="one pair per seed"):
        stats.paired([1.0, 2.0], [1.0])


def test_no_significant_difference_verdict():
    rng = np.random.default_rng(0)
    a = rng.normal(size=20)
    r = stats.paired(a, a + rng.normal(scale=1e-3, size=20) - 0.0)
    assert r["w_p"] > 0.05 and r["t_p"] > 0.05
    assert stats.verdict(r, "gelu", "relu", "test accuracy").startswith("no significant difference")


def test_benjamini_hochberg_by_hand():
    # sorted p 0.005, 0.01, 0.03, 0.04 -> p_(i) m / i = 0.02, 0.02, 0.04, 0.04 (already monotone)
    assert stats.adjust_bh([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert math.isnan(stats.adjust_bh([math.nan, 0.5])[0])


# --------------------------------------------------------------------------------------------------- training


@functools.cache  # one reference per (config, arm), shared by every backend's check
def _numpy_reference(cfg: M.MoonsConfig, arm: str) -> dict[int, np.ndarray]:
    """Running training loss per epoch of each of cfg.seeds, {seed: (epochs,) array}, by hand in numpy float64:
    explicit backprop with the catalogue's closed-form derivative (no autodiff), experiments.moons.config.adam_step,
    the shared init and order. The seeds are trained side by side on a leading axis (weights (S, fan_in, fan_out),
    each seed with its own data, init and order; nothing mixes them), for fewer numpy calls.
    Cached: callers must not change the arrays."""
    act = ACTIVATIONS[arm]
    data = [M.make_data(cfg, s) for s in cfg.seeds]
    x_train, y_train = np.stack([d.x_train for d in data]), np.stack([d.y_train for d in data])  # (S, n, 2), (S, n)
    order = np.stack([M.epoch_orders(cfg, s) for s in cfg.seeds])  # (S, epochs, steps, batch)
    weights = M.batch_weights(cfg)
    shares = (weights > 0).sum(1) / (weights > 0).sum()
    c1, c2 = M.adam_bias_corrections(cfg)
    inits = [[a for wb in M.glorot_uniform_init(cfg, s) for a in wb] for s in cfg.seeds]
    params = [np.stack(arrays) for arrays in zip(*inits)]  # W (S, fan_in, fan_out), b (S, fan_out)
    m, v = [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params]
    rows = np.arange(len(cfg.seeds))[:, None]
    curve = []
    for e in range(cfg.epochs):
        running = np.zeros(len(cfg.seeds))
        for k in range(cfg.steps_per_epoch):
            idx, w = order[:, e, k], weights[k]
            x, y = x_train[rows, idx], y_train[rows, idx]  # (S, batch, 2), (S, batch)
            pre, post = [], [x]
            for i in range(0, len(params), 2):
                pre.append(post[-1] @ params[i] + params[i + 1][:, None, :])
                post.append(act.formula(npx, pre[-1]) if i + 2 < len(params) else pre[-1])
            z = post[-1][..., 0]
            running += shares[k] * np.sum(w * (np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))), axis=1)
            delta = (w * (1 / (1 + np.exp(-z)) - y))[..., None]  # d loss / d z, (S, batch, 1)
            grads = [None] * len(params)
            for i in range(len(params) - 2, -1, -2):
                grads[i], grads[i + 1] = np.swapaxes(post[i // 2], 1, 2) @ delta, delta.sum(1)
                if i:
                    delta = (delta @ np.swapaxes(params[i], 1, 2)) * act.d1(npx, pre[i // 2 - 1])
            for j, g in enumerate(grads):
                d, m[j], v[j] = training.adam_step(g, m[j], v[j], c1[e, k], c2[e, k], cfg.lr, cfg.beta1, cfg.beta2,
                                            cfg.eps, np.sqrt)
                params[j] = params[j] - d
        curve.append(running)
    return dict(zip(cfg.seeds, np.array(curve).T))


@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    """The small study, trained once per selected trainable backend, in one results folder."""
    names = [b for b in selected_backends() if b in TRAINABLE]
    if not names:
        pytest.skip("no selected backend can train (numpy has no autodiff)")
    out = tmp_path_factory.mktemp("moons_small")
    return X.run_study(SMALL, out, names, jobs=1, progress=False), out


@pytest.mark.training
@pytest.mark.slow
def test_matched_float64_backends_agree_with_each_other_and_numpy(small_study, backend_name):
    _skip_numpy(backend_name)
    results, _ = small_study
    runs = [r for r in results["runs"] if r["dtype"] == "float64" and r["regime"] == "matched"]
    mine = {(r["arm"], r["seed"]): r for r in runs if r["backend"] == backend_name}
    assert sorted(mine) == sorted(itertools.product(SMALL.arms, SMALL.seeds))  # every arm and seed
    for (arm, seed), r in mine.items():
        ref = _numpy_reference(SMALL, arm)[seed]
        assert np.max(np.abs(np.array(r["curves"]["train_loss"]) - ref)) <= 1e-6, (arm, seed)
        for other in (o for o in runs if (o["arm"], o["seed"]) == (arm, seed) and o["backend"] != backend_name):
            traj = np.abs(np.subtract(r["curves"]["train_loss"], other["curves"]["train_loss"]))
            assert traj.max() <= 1e-6, (arm, seed, other["backend"])
            assert abs(r["metrics"]["train_loss"] - other["metrics"]["train_loss"]) <= 1e-6


@pytest.mark.training
@pytest.mark.slow
def test_small_study_learns_the_moons(small_study, backend_name):
    _skip_numpy(backend_name)
    results, _ = small_study
    # identical backends share one summary row, labelled "jax = torch = tensorflow"
    acc = {r["arm"]: r["test_acc"]["mean"] for r in results["summary"] if backend_name in r["backend"].split(" = ")}
    # a logistic regression (a straight boundary) reaches about 0.87 on these splits; 0.93 needs the curve
    assert acc["relu"] >= 0.93 and acc["gelu_none"] >= 0.93, acc
    runs = [r for r in results["runs"] if r["backend"] == backend_name]
    # the article's pair halves its training loss in these 20 epochs; every catalogue arm at least lowers it (how
    # fast depends on the activation: a flatter one near 0 learns more slowly at this learning rate)
    assert all(r["curves"]["train_loss"][-1] < 0.5 * r["curves"]["train_loss"][0] for r in runs
               if r["arm"] in ("relu", "gelu_none"))
    assert all(r["curves"]["train_loss"][-1] < r["curves"]["train_loss"][0] for r in runs)


@pytest.mark.training
@pytest.mark.slow
def test_batched_seeds_equal_one_seed_training(backend_name):
    _skip_numpy(backend_name)
    module = importlib.import_module(f"gelulab.backends.{backend_name}.moons")
    X.get_backend(backend_name)
    data = {s: M.make_data(SMALL, s) for s in SMALL.seeds}
    together = module.train(M.train_spec(SMALL, "gelu_none", "matched", "float64", SMALL.seeds, data))
    alone = module.train(M.train_spec(SMALL, "gelu_none", "matched", "float64", (1,), data))
    for name in ("train_loss", "val_loss", "logits_test"):
        np.testing.assert_allclose(getattr(together, name)[1], getattr(alone, name)[0], rtol=0, atol=1e-10)


@pytest.mark.training
@pytest.mark.slow
def test_resume_after_interrupt_gives_identical_numbers(small_study, tmp_path, monkeypatch, backend_name):
    _skip_numpy(backend_name)
    results, out = small_study
    cfg = dataclasses.replace(SMALL, arms=("relu", "gelu_tanh"))  # the fixture's groups: compiled already
    module = importlib.import_module(f"gelulab.backends.{backend_name}.moons")
    real, calls = module.train, []

    def interrupted(spec):
        calls.append(spec.arm)
        if len(calls) == 2:
            raise KeyboardInterrupt  # stop in the middle of the study, after one group
        return real(spec)

    monkeypatch.setattr(module, "train", interrupted)
    with pytest.raises(KeyboardInterrupt):
        X.run_study(cfg, tmp_path, [backend_name], jobs=1, progress=False)
    assert len(list(tmp_path.rglob("seed*.json"))) == len(cfg.seeds)  # the first group is on disk
    monkeypatch.setattr(module, "train", real)
    resumed = X.run_study(cfg, tmp_path, [backend_name], jobs=1, progress=False)
    assert resumed["resumed_groups"] == 1

    def numbers(res):
        return {(r["arm"], r["seed"]): (r["metrics"], r["curves"]) for r in res["runs"]
                if r["backend"] == backend_name and r["arm"] in cfg.arms}

    assert numbers(resumed) == numbers(results)  # identical to the uninterrupted study, not merely close
    # deleting finished runs retrains their group only, again with the same numbers
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for p in list(copy.rglob(f"runs/matched/float64/{backend_name}/gelu_tanh/seed1.json")):
        p.unlink()
    again = X.run_study(SMALL, copy, [backend_name], jobs=1, progress=False)
    assert numbers(again) == numbers(results)


@pytest.mark.training
@pytest.mark.slow
def test_native_regime_uses_framework_defaults(small_study, backend_name):
    _skip_numpy(backend_name)
    results, _ = small_study
    module = importlib.import_module(f"gelulab.backends.{backend_name}.moons")
    data = {s: M.make_data(SMALL, s) for s in SMALL.seeds}
    out = module.train(M.train_spec(SMALL, "relu", "native", "float64", SMALL.seeds, data))
    matched = np.array([r["curves"]["train_loss"] for r in sorted(results["runs"], key=lambda r: r["seed"])
                        if (r["backend"], r["arm"], r["dtype"]) == (backend_name, "relu", "float64")])
    assert out.train_loss.shape == matched.shape == (3, SMALL.epochs)
    assert np.all(out.train_loss[:, -1] < 0.5 * out.train_loss[:, 0])  # it learns
    assert not np.allclose(out.train_loss, matched)  # another init and order: other numbers
    expected = {"jax": "optax.adam eps=1e-8", "torch": "torch.optim.Adam eps=1e-8", "tensorflow": "epsilon=1e-7"}
    assert expected[backend_name] in out.recipe


@pytest.mark.training
@pytest.mark.slow
def test_report_json_and_plots(small_study, tmp_path):
    results, _ = small_study
    paths = X.write_report(results, tmp_path)
    saved = json.loads(paths["json"].read_text())
    assert saved["environment"]["frameworks"] and saved["environment"]["threads"] >= 1
    assert len(saved["runs"]) == len(results["backends"]) * len(SMALL.arms) * len(SMALL.seeds)
    assert {"test_acc", "test_loss", "train_loss", "val_loss"} <= set(saved["runs"][0]["metrics"])
    text = paths["report"].read_text()
    for heading in ("Test accuracy and loss", "Paired differences", "Time per backend", "Conclusions",
                    "How fast each arm trains"):
        assert heading in text
    # the threads in force where the runs trained (GELULAB_THREADS=1, conftest) and the CPU level, never "{}"
    env = saved["environment"]
    assert {b: t["intra_op"] for b, t in env["threads_in_effect"].items()} == {b: 1 for b in results["backends"]}
    assert "{}" not in text and "- threads in effect: " in text
    for name in ("loss_curves", "decision_boundaries", "test_accuracy"):
        assert paths[name].stat().st_size > 10_000


def _diverged_results(cfg):
    """Results of a study whose ReLU runs all blew up (loss 1e18, accuracy at chance), from the report's own
    analysis: what run_study returns after an absurd --lr."""
    from gelulab.experiments.moons import report as R

    runs = []
    for arm in cfg.arms:
        for s in cfg.seeds:
            bad = arm == "relu"
            loss, acc = (1e18, 0.5) if bad else (0.3, 0.9)
            curve = [0.7, 1e9, 1e18] if bad else [0.6, 0.4, 0.3]
            runs.append({"backend": "torch", "regime": "matched", "dtype": "float64", "arm": arm, "seed": s,
                         "metrics": {"train_loss": curve[-1], "train_acc": acc, "val_loss": loss, "val_acc": acc,
                                     "test_loss": loss, "test_acc": acc},
                         "curves": {"train_loss": curve, "val_loss": curve}})
    return {"timing": {}, **R.analyse(cfg, runs)}


@pytest.mark.parametrize("flag, code", [([], 0), (["--fail-on-divergence"], 1)])
def test_divergence_is_on_the_terminal_and_can_fail_the_command(tmp_path, monkeypatch, capsys, flag, code):
    backend = next((b for b in TRAINABLE if b in installed_backends()), None)
    if backend is None:
        pytest.skip("no trainable backend installed")
    cfg = M.MoonsConfig(n_samples=200, epochs=3, seeds=(0, 1, 2), arms=("relu", "gelu_none"), compare_dtype=None)
    results = _diverged_results(cfg)
    assert len(results["divergence"]) == 3  # the three ReLU runs
    monkeypatch.setattr(X, "run_study", lambda *a, **k: results)
    monkeypatch.setattr(X, "write_report", lambda res, out: {"report": tmp_path / "out" / "report.md"})
    argv = ["moons", "--backend", backend, "--seeds", "3", "--out", str(tmp_path / "out"), "--no-progress", *flag]
    assert gelulab.main(argv) == code
    err = capsys.readouterr().err
    assert "gelulab moons: WARNING: 3 runs diverged or did not learn — torch/matched/float64/relu 3 runs" in err

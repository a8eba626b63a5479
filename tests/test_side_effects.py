"""gelulab leaves its host alone: importing it, loading a backend and calling its activation API change no
framework-wide setting, and the settings it needs come from one explicit call, gelulab.reproducible.

The check runs in a fresh Python process (this suite's own process runs under reproducible(), see conftest.py):
it imports the selected frameworks, records their global settings, calls gelulab's activation API in each (every
entry of CALLS, on a float32 array), records them again, and every setting must be unchanged. One such process
serves every mode the session tests (eager calls, then compiled ones, the settings recorded after each). The float32
results must equal, bit for bit, those of this process (x64 on, one thread): with JAX's x64 off, gelulab's
formulas still widen to float64 in a thread-local scope instead of silently computing in float32.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gelulab.backends import BACKEND_NAMES, get_backend, selected_backends

FRAMEWORKS = [n for n in BACKEND_NAMES if n in selected_backends() and n != "numpy"]

# The script of the fresh process. CALLS: (label, function of (backend, x, mode) -> framework array); a new entry
# point of the activation API is one more line here.
SCRIPT = r'''
import json, os, sys
import numpy as np

names, modes = json.loads(sys.argv[1]), json.loads(sys.argv[2])

import gelulab, gelulab.backends, gelulab.core.activations, gelulab.core.contracts.interface
framework_modules = {c.package for c in gelulab.backends.REGISTRY.values()} - {"numpy"} | {"jaxlib", "keras"}
imported_early = sorted(m for m in sys.modules if m.split(".")[0] in framework_modules)

for n in names:  # the user's own imports, torch before tensorflow
    __import__(gelulab.backends.REGISTRY[n].package)


def settings():
    import signal
    s = {"XLA_FLAGS": os.environ.get("XLA_FLAGS"), "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
         "signals blocked": sorted(int(v) for v in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
         "SIGINT handler": repr(signal.getsignal(signal.SIGINT)),
         "SIGTERM handler": repr(signal.getsignal(signal.SIGTERM))}
    if "jax" in names:
        import jax, jax.numpy as jnp
        s["jax_enable_x64"] = bool(jax.config.jax_enable_x64)
        s["jnp.ones(3).dtype"] = str(jnp.ones(3).dtype)
        s["jax.numpy.array(1.0).dtype"] = str(jnp.array(1.0).dtype)
        s["jax_default_matmul_precision"] = jax.config.jax_default_matmul_precision
    if "torch" in names:
        import torch, torch._dynamo
        s["torch.get_num_threads"] = torch.get_num_threads()
        s["torch.get_num_interop_threads"] = torch.get_num_interop_threads()
        s["torch.backends.cuda.matmul.allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        s["torch.backends.cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
        s["torch.get_float32_matmul_precision"] = torch.get_float32_matmul_precision()
        s["torch.get_default_dtype"] = str(torch.get_default_dtype())
        cfg = torch._dynamo.config
        s["dynamo.recompile_limit"] = cfg.recompile_limit
        s["dynamo.accumulated_recompile_limit"] = cfg.accumulated_recompile_limit
        s["dynamo.fail_on_recompile_limit_hit"] = getattr(cfg, "fail_on_recompile_limit_hit", None)
    if "tensorflow" in names:
        import tensorflow as tf
        s["tf.intra_op_parallelism_threads"] = tf.config.threading.get_intra_op_parallelism_threads()
        s["tf.inter_op_parallelism_threads"] = tf.config.threading.get_inter_op_parallelism_threads()
        s["tf.tensor_float_32_execution_enabled"] = tf.config.experimental.tensor_float_32_execution_enabled()
    return s


before, after = settings(), {}
CALLS = [
    ("gelu formula", lambda b, x, m: b.function("gelu_none", "formula", 0, m)(x)),
    ("gelu builtin", lambda b, x, m: b.function("gelu_none", "builtin", 0, m)(x)),
    ("relu formula", lambda b, x, m: b.function("relu", "formula", 0, m)(x)),
    ("relu builtin", lambda b, x, m: b.function("relu", "builtin", 0, m)(x)),
    ("gelu formula'", lambda b, x, m: b.function("gelu_none", "formula", 1, m)(x)),
    ("gelu builtin'", lambda b, x, m: b.function("gelu_none", "builtin", 1, m)(x)),
    ("Backend.gelu", lambda b, x, m: b.gelu(x)),
    ("Backend.relu", lambda b, x, m: b.relu(x, impl="builtin")),
]
BUILTIN_OF = {"gelu builtin": "gelu_none", "gelu builtin'": "gelu_none", "relu builtin": "relu", "Backend.relu": "relu"}
a = np.linspace(-9.0, 5.0, 301).astype(np.float32)
results = {}


def run(n, mode):
    b = gelulab.get_backend(n)
    x = b.asarray(a)
    if mode in b.modes:  # a backend without a compiler has no compiled calls
        for label, call in CALLS:
            builtin = BUILTIN_OF.get(label)  # a backend without the framework's own function skips its calls
            if builtin is not None and not b.has_builtin(builtin):
                continue
            y = b.to_numpy(call(b, x, mode))
            assert y.dtype == np.float32, (n, mode, label, y.dtype)
            results[f"{n} {mode} {label}"] = y.view(np.uint32).tolist()
for mode in modes:  # the modes one after the other: the settings after each, against those before any call
    for n in names:
        run(n, mode)
    after[mode] = settings()
print(json.dumps({"imported_early": imported_early, "before": before, "after": after, "results": results}))
'''


def _fresh_process(names, modes) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")}  # their defaults
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(names), json.dumps(modes)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


MODES = [pytest.param("eager", id="eager"),
         pytest.param("compiled", id="compiled", marks=[pytest.mark.slow, pytest.mark.compile])]
_TEST = "test_activation_api_changes_no_framework_setting"


@pytest.fixture(scope="module")
def fresh_process(request) -> dict:
    """One fresh process for every mode of MODES that this session runs (eager first): the frameworks' imports
    and the kernels' builds are paid once. Its "after" holds the settings after each mode's calls."""
    if not FRAMEWORKS:
        pytest.skip("no framework backend selected")
    chosen = {item.callspec.params["mode"] for item in request.session.items
              if item.module is request.module and item.originalname == _TEST}
    return _fresh_process(FRAMEWORKS, [m.values[0] for m in MODES if m.values[0] in chosen])


@pytest.mark.subprocess
@pytest.mark.parametrize("mode", MODES)
def test_activation_api_changes_no_framework_setting(fresh_process, mode):
    out = {**fresh_process, "after": fresh_process["after"][mode]}
    assert out["imported_early"] == [], "importing gelulab imported a framework"
    changed = {k: (v, out["after"].get(k)) for k, v in out["before"].items() if out["after"].get(k) != v}
    assert changed == {}, f"settings changed by gelulab's activation API (before, after): {changed}"
    if "jax" in FRAMEWORKS:  # the frameworks' defaults: a change by an import would already show above
        assert out["before"]["jax_enable_x64"] is False and out["before"]["jnp.ones(3).dtype"] == "float32"
    # the same bits as in this process, which runs under reproducible() (x64 on, one thread per framework)
    a = np.linspace(-9.0, 5.0, 301).astype(np.float32)
    for key, bits in out["results"].items():
        name, key_mode, label = key.split(" ", 2)
        if key_mode != mode or not label.startswith(("gelu formula", "relu formula")):
            continue
        b = get_backend(name)
        order = 1 if label.endswith("'") else 0
        fn = b.function(label.split()[0].replace("gelu", "gelu_none"), "formula", order, mode)
        mine = b.to_numpy(fn(b.asarray(a))).view(np.uint32).tolist()
        assert bits == mine, f"{key}: differs from the result with the experiments' settings"


def test_jax_without_x64_refuses_float64_and_names_the_setting():
    if "jax" not in FRAMEWORKS:
        pytest.skip("jax not selected")
    import jax
    import mpmath

    b = get_backend("jax")
    xs = np.array([-6.0, -1.0, 0.5, 3.0], np.float32)
    with jax.enable_x64(False):  # a scope with x64 off, as in a user's process that never turned it on
        with pytest.raises(ValueError, match="jax_enable_x64.*gelulab.reproducible"):
            b.asarray(np.ones(3))
        with pytest.raises(ValueError, match="jax_enable_x64"):
            b.module.astype(b.asarray(np.ones(3, np.float32)), "float64")
        off = [b.to_numpy(b.function("gelu_none", "formula", k)(b.asarray(xs))) for k in (0, 1)]
    on = [b.to_numpy(b.function("gelu_none", "formula", k)(b.asarray(xs))) for k in (0, 1)]
    assert all(np.array_equal(u.view(np.uint32), v.view(np.uint32)) for u, v in zip(off, on))
    with mpmath.workdps(30):  # x Phi(x), within 1 ULP of float32 (gelulab's goal)
        want = np.array([float(mpmath.mpf(float(v)) * mpmath.ncdf(float(v))) for v in xs], np.float32)
    assert off[0].dtype == np.float32
    assert np.all(np.abs(off[0].view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64)) <= 1)


@pytest.mark.subprocess
def test_reproducible_sets_what_its_docstring_says():
    """In a fresh process: gelulab.reproducible(threads=1) sets torch's threads, TF's pools, XLA_FLAGS, JAX x64 and
    matmul precision and the TF32 flags; a later thread count that can no longer apply is a RuntimeWarning."""
    if not FRAMEWORKS:
        pytest.skip("no framework backend selected")
    script = r'''
import json, os, sys, warnings
names = json.loads(sys.argv[1])
import gelulab
done = gelulab.reproducible(threads=1, backends=names)
s = {"done": {k: sorted(v) for k, v in done.items()}, "XLA_FLAGS": os.environ.get("XLA_FLAGS")}
if "jax" in names:
    import jax, jax.numpy as jnp
    s["x64"], s["prec"] = jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision
    s["ones"] = str(jnp.ones(3).dtype)
if "torch" in names:
    import torch
    s["torch"] = [torch.get_num_threads(), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32]
if "tensorflow" in names:
    import tensorflow as tf
    tf.constant(1.0) + 1.0  # the runtime starts with the pools set above
    s["tf"] = [tf.config.threading.get_intra_op_parallelism_threads(),
               tf.config.threading.get_inter_op_parallelism_threads(),
               tf.config.experimental.tensor_float_32_execution_enabled()]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        gelulab.reproducible(threads=2, backends=["tensorflow"])
    s["tf_late"] = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    s["tf_threads"] = gelulab.get_backend("tensorflow").module.threads()
print(json.dumps(s))
'''
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(FRAMEWORKS)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads(proc.stdout.strip().splitlines()[-1])
    if "jax" in FRAMEWORKS:
        assert "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" in s["XLA_FLAGS"]
        assert (s["x64"], s["prec"], s["ones"]) == (True, "highest", "float64")
    if "torch" in FRAMEWORKS:
        assert s["torch"] == [1, False, False]
    if "tensorflow" in FRAMEWORKS:
        assert s["tf"] == [1, 1, False]
        assert sum("TensorFlow's runtime has already started" in m for m in s["tf_late"]) == 1, s["tf_late"]
        assert s["tf_threads"]["intra_op"] == 1 and s["tf_threads"]["applied"] is False


# One script per framework: its default layers, gelulab.gelu and swap on a model, forward and backward on an
# activation of 65536 floats (above any size at which a kernel would build a loop); then what the process left.
DEFAULT_PATH = {
    "torch": r'''
import torch, gelulab
from gelulab.layers.torch import GELU, ReLU, SiLU
model = torch.nn.Sequential(torch.nn.Linear(64, 256), GELU(), torch.nn.Linear(256, 256), GELU("tanh"),
                            torch.nn.Linear(256, 256), ReLU(), SiLU(), torch.nn.Linear(256, 1))
x = torch.randn(256, 64)
for _ in range(3):
    model(x).sum().backward()
big = torch.randn(1 << 20)
for _ in range(100):  # seconds of calls: a kernel policy that builds after a while would have started by now
    for mode in ("none", "tanh", "sigmoid"):
        gelulab.gelu(big, approximate=mode)
gelulab.silu(torch.randn(65536)); gelulab.relu(torch.randn(65536))
hf = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 1))
assert len(gelulab.swap(hf, to="gelu_tanh")) == 1
hf(x).sum().backward()
''',
    "tensorflow": r'''
import keras, numpy as np, gelulab
from gelulab.layers.keras import GELU
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256), GELU(),
                          keras.layers.Dense(256, activation="gelu"), keras.layers.Dense(1)])
assert len(gelulab.swap(model, to="gelu_tanh")) == 1
model.compile(optimizer="adam", loss="mse")
model.fit(np.random.rand(256, 64), np.random.rand(256, 1), epochs=1, verbose=0)
gelulab.gelu(keras.ops.convert_to_tensor(np.random.rand(65536).astype("float32")))
''',
    "jax": r'''
import jax, jax.numpy as jnp, flax.linen as nn, gelulab
from gelulab.layers.flax import GELU
model = nn.Sequential([nn.Dense(256), GELU(), nn.Dense(1)])
params = model.init(jax.random.PRNGKey(0), jnp.ones((256, 64)))
jax.grad(lambda p: model.apply(p, jnp.ones((256, 64))).sum())(params)
gelulab.gelu(jnp.linspace(-3, 3, 65536), approximate="tanh")
''',
}
TAIL = r'''
import json, os, sys, threading
cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
written = [os.path.join(d, f) for root in (cache, os.path.join(os.environ["XDG_CACHE_HOME"], "gelulab"))
           for d, _, fs in os.walk(root) for f in fs]
print(json.dumps({"threads": [t.name for t in threading.enumerate()], "written": written,
                  "compiled": sorted(m for m in sys.modules if m.startswith("torch._inductor.codegen"))}))
'''


@pytest.mark.subprocess
@pytest.mark.parametrize("name", list(DEFAULT_PATH))
def test_the_default_path_starts_no_thread_and_compiles_nothing(name, tmp_path):
    """A process that imports gelulab and uses its defaults (layers, gelulab.gelu, swap; the framework's own op)
    ends with its main thread alone and wrote nothing into the inductor cache or gelulab's caches (both pointed at
    empty folders; Keras' own import writes matplotlib's font list beside them); under torch, inductor's code
    generators were never imported."""
    if name not in FRAMEWORKS:
        pytest.skip(f"{name} not selected")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    env.pop("GELULAB_KERNEL_COMPILE", None)  # the user's default policy
    proc = subprocess.run([sys.executable, "-c", DEFAULT_PATH[name] + TAIL], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["threads"] == ["MainThread"], out["threads"]
    assert out["written"] == [], out["written"]
    assert out["compiled"] == [], out["compiled"]

"""Which GELU is this? `gelulab.identify(fn)` probes a callable and names the catalogue variant it computes.

A port's most common silent fault is a GELU that is not the one the weights were trained with (exact where the
original used tanh, plain GELU where it used x sigmoid(1.702 x)). `identify` evaluates the callable once on a
fixed float32 probe and compares the values with the correctly rounded reference of every catalogue variant
(core.parity.reference, computed once per process and cached):

* separating points: x in [-8, 8] in steps of 1/32, plus 8.5 ... 1000. The variants differ most on the negative
  side, where |f| < 1: tanh form vs exact by 4.7e-4 at x = -2.7 (and +2.7), sigmoid form vs exact by 2.0e-2 at
  x = -2.27, ReLU vs exact by 0.17 at x = +-0.75. The distance to a variant is the largest
  |f(x) - ref(x)| / max(1, |ref(x)|) over these points (an absolute error where |f| < 1, relative beyond); the
  callable is that variant when the distance is within `tolerance`, one eighth of the smallest distance between
  two variants (5.9e-5 with the catalogue of GELU forms and ReLU), and none of them (None) otherwise. A float32
  implementation of the right variant is within about 1e-6.
* the negative tail, x <= -3: the separating points there and x in [-60, -8) (steps of 1/16 to -16, then 1/4),
  where every variant is small but, down to its underflow (x ~ -13 exact, -10 tanh form, -53.5 sigmoid form), a
  normal float32: the relative error there tells 1 + erf(x/sqrt 2) from erfc (the sum cancels below x ~ -4.5) and
  1 + tanh(u) from sigmoid(2u), and shows tails lost to a flushed subnormal intermediate or an overflowing exp.
* -inf, +inf and NaN, against the catalogue's limits.

Where the framework computes float64 without a global setting being changed (numpy, torch, TensorFlow; jax only
when the caller enabled jax_enable_x64), the separating points are probed in float64 too (`distances64`).

The framework is chosen from the callable (a torch.nn.Module, a Keras layer, or the module that defines the
function: torch, transformers, jax, flax, tensorflow, keras, numpy); for anything else (a lambda) each framework
already imported is tried in turn with a small array, numpy first. Only frameworks the caller has imported are used.
"""
from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gelulab.backends.tools import loaded, tool, with_tool
from gelulab.core.activations import ACTIVATIONS
from gelulab.core.parity.reference import reference

_STEP = 1.0 / 32
SEPARATING = np.concatenate([np.arange(-8.0, 8.0 + _STEP / 2, _STEP),
                             [8.5, 10.0, 12.0, 16.0, 24.0, 32.0, 64.0, 100.0, 1000.0]])
TAIL = np.concatenate([np.arange(-60.0, -16.0, 0.25), np.arange(-16.0, -8.0, 1.0 / 16)])
SPECIAL = np.array([-np.inf, np.inf, np.nan])
PROBE = np.concatenate([SEPARATING, TAIL, SPECIAL])  # every value exact in float32
_N_SEP, _N_TAIL = len(SEPARATING), len(TAIL)
TOLERANCE_FRACTION = 1.0 / 8  # of the smallest distance between two catalogue variants
LOST = 0.01  # a tail value more than 1 % off (relative) is lost
NEAR_TAIL = (-9.0, -3.0)  # where 1 + erf and 1 + tanh cancel in float32 (they reach 0 by x ~ -6)
# float64 distance beyond which a float64 result was not computed in float64 throughout: a float64 implementation of
# the formula is within ~4e-16, tf.nn.gelu (float32 constants) 5e-9; FastGELU's 10-digit sqrt(2/pi) gives 9e-13.
FLOAT64_GOAL = 1e-10


class CallableFailed(ValueError):
    """The callable under identification raised (ZeroDivisionError, MemoryError, ...) on the array it was given.
    The message names the exception, the array (dtype, framework, shape) and the callable; `what` is the message
    without the callable's name; the exception is the cause."""

    def __init__(self, message: str, what: str):
        super().__init__(message)
        self.what = what


@dataclass(frozen=True)
class Fault:
    """A known-fault signature seen in the probe: name (e.g. "1+erf cancellation") and what was measured."""

    name: str
    detail: str


@dataclass(frozen=True)
class Identification:
    """What `identify` found for one callable.

    name: the callable's repr (shortened); framework: the backend name it was probed in ("torch", "jax",
    "tensorflow", "numpy"); variant: the catalogue key it computes ("gelu_none", "gelu_tanh", "gelu_sigmoid",
    "relu", "silu", ...) or None; distances: {catalogue key: distance on the float32 separating points} (see the
    module docstring; dimensionless, absolute where |f| < 1); tolerance: the largest distance accepted as the
    variant; faults: known-fault signatures seen (tail cancellation, NaN at +-inf, ...), only for an identified
    variant; distances64: the same distances from a float64 probe, or None with `note64` saying why;
    seconds: wall time of the probe; values: the callable's float32 outputs at SEPARATING (as float64).
    """

    name: str
    framework: str
    variant: str | None
    distances: dict[str, float]
    tolerance: float
    faults: tuple[Fault, ...] = ()
    distances64: dict[str, float] | None = None
    note64: str = ""
    seconds: float = 0.0
    values: np.ndarray = field(default=None, repr=False, compare=False)  # float32 outputs at SEPARATING

    @property
    def nearest(self) -> str:
        """The catalogue key at the smallest float32 distance (the variant when identified)."""
        return min(self.distances, key=self.distances.get)

    def __str__(self) -> str:
        what = self.variant if self.variant is not None else f"none of the variants (nearest {self.nearest})"
        faults = "; ".join(f"{f.name}: {f.detail}" for f in self.faults) or "no known fault seen"
        return (f"{self.name} [{self.framework}]: {what}, distance {self.distances[self.nearest]:.2g} "
                f"(tolerance {self.tolerance:.2g}); {faults}")


@dataclass(frozen=True)
class Comparison:
    """`identify(a, b)`: both identifications, whether they are the same catalogue variant (`same`: False when
    either is None), and `difference`, the largest |f_a - f_b| / max(1, |f_a|) on the float32 separating points."""

    a: Identification
    b: Identification
    same: bool
    difference: float

    def __str__(self) -> str:
        verdict = (f"the same variant ({self.a.variant})" if self.same else
                   f"different: {self.a.variant} vs {self.b.variant}")
        return f"{self.a}\n{self.b}\n{verdict}; they differ by up to {self.difference:.2g} on the probe"


@dataclass(frozen=True)
class Signature:
    """A known-fault signature: name, the catalogue keys it applies to (None: all), check(probe) -> detail
    string when the probe shows it, else None, and `unless`: names of signatures that, when seen first, explain it
    already."""

    name: str
    variants: tuple[str, ...] | None
    check: Callable = field(repr=False)
    unless: tuple[str, ...] = ()


def identify(fn, other=None, *, framework: str | None = None, example=None, ort_level: str = "all",
             allow_pickle: bool = False, params=None):
    """Identify the GELU variant (or ReLU, SiLU, any catalogue entry) a callable computes, or every activation
    site of a model.

    A model (api.audit.is_model: the path of a model file or folder, a torch nn.Module with submodules or
    parameters, a torch.export program, an onnx.ModelProto, a Keras model, ...) is audited instead: the result is
    an api.audit.ModelReport (printing as its site table), or with `other` an api.audit.ModelComparison. example,
    ort_level, allow_pickle, params: api.audit.Options (an example input where none can be inferred; onnxruntime's
    optimization level; allow files that need pickle, which runs code that came with the file; a Flax module's
    variables). An activation module (torch.nn.GELU(), transformers' GELUActivation) is a callable, not a model.

    fn, other: elementwise callables of one array argument: a framework function (torch.nn.functional.gelu,
    jax.nn.gelu, tf.nn.gelu, keras.activations.gelu, functools.partial of one), a layer (torch.nn.GELU("tanh"),
    a transformers activation module, a Keras layer), or a user's lambda. framework: "torch", "jax",
    "tensorflow" or "numpy" to force the array type fed to the callables (default: chosen per callable).
    Returns an Identification, or with `other` a Comparison of the two. Raises TypeError when a callable is not
    callable or no imported framework can call it (naming what each one raised), CallableFailed (a ValueError)
    when the callable raises on the probe (its exception is the cause), ValueError when it returns another shape,
    an unknown framework.
    """
    from gelulab.api import audit

    options = audit.Options(example=example, ort_level=ort_level, allow_pickle=allow_pickle, params=params)
    if audit.is_model(fn, options) or (other is not None and audit.is_model(other, options)):
        if other is None:
            return audit.audit(fn, options)
        return audit.audit_pair(fn, other, options)
    if other is not None:
        return compare(identify(fn, framework=framework), identify(other, framework=framework))
    if not callable(fn):
        raise TypeError(f"identify: {fn!r} is not callable; expected a function or a layer")
    start = time.perf_counter()
    fw = _framework(fn, framework)
    y = _call(fn, fw, PROBE.astype(np.float32)).astype(np.float64)
    refs = _references("float32")
    distances = {key: _distance(y[:_N_SEP], r[:_N_SEP]) for key, r in refs.items()}
    tol = tolerance()
    nearest = min(distances, key=distances.get)
    variant = nearest if distances[nearest] <= tol else None
    d64, note64 = _float64(fn, fw)
    faults = ()
    if variant is not None:
        probe = _Probe(y, refs[variant], variant, d64)
        seen = []
        for s in SIGNATURES:
            if (s.variants is None or variant in s.variants) and not {f.name for f in seen} & set(s.unless):
                detail = s.check(probe)
                if detail is not None:
                    seen.append(Fault(s.name, detail))
        faults = tuple(seen)
    return Identification(_short(fn), fw, variant, distances, tol, faults, d64, note64,
                          time.perf_counter() - start, y[:_N_SEP])


def compare(a: Identification, b: Identification) -> Comparison:
    """The Comparison of two identifications: same variant (False when either is None), and the largest
    |f_a - f_b| / max(1, |f_a|) on the float32 separating points (inf where exactly one is NaN)."""
    with np.errstate(invalid="ignore"):
        diff = np.abs(a.values - b.values) / np.maximum(1.0, np.abs(a.values))
    difference = float(np.max(np.where(np.isnan(diff), np.inf, diff)))
    return Comparison(a, b, a.variant is not None and a.variant == b.variant, difference)


def tolerance() -> float:
    """TOLERANCE_FRACTION of the smallest float32 distance between two catalogue variants on the separating
    points (from the references alone)."""
    refs = _references("float32")
    keys = list(refs)
    gaps = [_distance(refs[a][:_N_SEP], refs[b][:_N_SEP]) for i, a in enumerate(keys) for b in keys[i + 1:]]
    return TOLERANCE_FRACTION * min(gaps) if gaps else math.inf


@functools.cache
def _references(dtype: str) -> dict[str, np.ndarray]:
    """{catalogue key: correctly rounded reference at PROBE in `dtype`} (mpmath, core.parity.reference), cached."""
    return {key: reference(key, PROBE, dtype).astype(np.float64) for key in ACTIVATIONS}


def _distance(y: np.ndarray, r: np.ndarray) -> float:
    with np.errstate(invalid="ignore"):
        e = np.abs(y - r) / np.maximum(1.0, np.abs(r))
    return float(np.max(np.where(np.isnan(e), np.inf, e)))


# --- frameworks: which one a callable belongs to, arrays in and out ---------------------------------------------

# The frameworks a callable can be probed in: the backends whose record lists a `probe` tool module
# (backends/<name>/probe.py, gelulab.backends.tools), in the registry's order; the trials of a callable of unknown
# framework take numpy first (it is always imported, and cheap).
FRAMEWORKS = with_tool("probe")
_TRIAL_ORDER = tuple(sorted(FRAMEWORKS, key=lambda n: n != "numpy"))


def _probe(name: str):
    """backends/<name>/probe.py."""
    return tool(name, "probe")


def _loaded_probes() -> list:
    """(name, probe module) of every framework the caller has imported, in the registry's order."""
    return [(n, _probe(n)) for n in FRAMEWORKS if loaded(n)]


def module_frameworks() -> dict[str, str]:
    """{top-level module name: backend name}: the framework whose arrays a callable defined in that module takes
    (each probe module's MODULES: "transformers" -> "torch", "flax" -> "jax", "scipy" -> "numpy", ...)."""
    return {module: name for name in FRAMEWORKS for module in _probe(name).MODULES}


def _framework(fn, forced: str | None) -> str:
    if forced is not None:
        if forced not in FRAMEWORKS:
            raise ValueError(f"framework={forced!r}; expected one of {list(FRAMEWORKS)}")
        if not loaded(forced):
            raise TypeError(f"identify: framework={forced!r} is not imported; import it first")
        return forced
    for _, probe in _loaded_probes():  # a model or layer object (torch.nn.Module, Keras layer) says its framework
        owner = probe.owner(fn)
        if owner is not None:
            return owner if owner in FRAMEWORKS else "numpy"  # Keras on a backend without a probe: numpy arrays
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    module = getattr(target, "__module__", None) or type(target).__module__ or ""
    hint = module_frameworks().get(module.split(".")[0])
    if hint is not None and loaded(hint):
        return hint
    sample = np.array([-1.0, 0.5], np.float32)
    errors, own = {}, None
    for name in _TRIAL_ORDER:
        if not loaded(name):
            continue
        try:
            y = _raw_call(fn, name, sample)
        except Exception as e:  # noqa: BLE001 - a framework whose arrays fn cannot take is simply not this one
            errors[name] = e
            if own is None and not _wrong_array(e):
                own = (name, e)
            continue
        _check_output(fn, y, sample)  # fn ran: a wrong shape or dtype is an error of fn, not of the framework
        return name
    if own is not None:  # e.g. ZeroDivisionError, MemoryError: the callable failed, whatever the array
        raise _failed(fn, own[0], sample, own[1]) from own[1]
    said = "; ".join(f"{n}: {_error_text(e, 80)}" for n, e in errors.items())
    raise TypeError(f"identify: {_short(fn)} could not be called on an array of any imported framework "
                    f"({said}); import its framework or pass framework=")


# what a framework's function raises for another framework's array (or an array method it lacks) ...
_WRONG_ARRAY = (TypeError, AttributeError, ValueError, RuntimeError, NotImplementedError)
# ... and what says the callable itself failed, whatever the array (RecursionError is a RuntimeError)
_OWN_FAILURES = (ArithmeticError, MemoryError, LookupError, RecursionError, AssertionError, NameError, OSError)


def _wrong_array(e: BaseException) -> bool:
    """Whether an exception of a trial call says the array was of the wrong framework (TypeError and the like,
    or a framework's own error class) rather than that the callable itself failed (_OWN_FAILURES, or an exception
    class of no framework)."""
    if isinstance(e, _OWN_FAILURES):
        return False
    module = type(e).__module__.split(".")[0]
    return isinstance(e, _WRONG_ARRAY) or module in module_frameworks()


def _error_text(e: BaseException, limit: int = 200) -> str:
    """"Type: message" in one line, the type the first public class of its MRO (numpy's _ArrayMemoryError is a
    MemoryError), the message cut to `limit` characters."""
    name = next((c.__name__ for c in type(e).__mro__ if not c.__name__.startswith("_")), type(e).__name__)
    text = " ".join(str(e).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return f"{name}: {text}" if text else name


def _failed(fn, name: str, a: np.ndarray, e: BaseException) -> CallableFailed:
    what = f"the callable raised {_error_text(e)} on a {a.dtype} {_probe(name).ARRAY_KIND} of shape {a.shape}"
    return CallableFailed(f"identify: {what} ({_short(fn)})", what)


def native(name: str, a: np.ndarray):
    """The numpy array `a` as framework `name`'s array (one of FRAMEWORKS, imported by the caller), the same dtype
    and shape, as the probe feeds it (backends/<name>/probe.py's native)."""
    return _probe(name).native(a)


def _to_numpy(y) -> np.ndarray:
    """A callable's output as numpy: converted by the probe module of the framework it belongs to, else
    np.asarray."""
    for _, probe in _loaded_probes():
        out = probe.as_numpy(y)
        if out is not None:
            return out
    return np.asarray(y)


def _call(fn, name: str, a: np.ndarray) -> np.ndarray:
    """fn on `a` as framework `name`'s array; the output as numpy (its dtype kept). Raises CallableFailed when fn
    raises, ValueError for another shape, TypeError for a non-floating output."""
    try:
        y = _raw_call(fn, name, a)
    except Exception as e:  # whatever the user's callable raises is reported as its failure
        raise _failed(fn, name, a, e) from e
    return _check_output(fn, y, a)


def _raw_call(fn, name: str, a: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"), contextlib.ExitStack() as stack:
        for _, probe in _loaded_probes():  # e.g. torch.no_grad(), also for a torch module fed another array
            stack.enter_context(probe.context())
        return _to_numpy(fn(_probe(name).native(a)))


def _check_output(fn, y: np.ndarray, a: np.ndarray) -> np.ndarray:
    if y.shape != a.shape:
        raise ValueError(f"identify: {_short(fn)} returned shape {y.shape} for an input of shape {a.shape}; "
                         "expected an elementwise function")
    if not np.issubdtype(y.dtype, np.floating) and y.dtype.name != "bfloat16":
        raise TypeError(f"identify: {_short(fn)} returned dtype {y.dtype}; expected a floating dtype")
    return y


def _float64(fn, name: str) -> tuple[dict[str, float] | None, str]:
    note = _probe(name).float64_note()
    if note:
        return None, note
    try:
        y = _call(fn, name, SEPARATING.astype(np.float64))
    except Exception as e:  # noqa: BLE001 - e.g. a module whose parameters are float32
        cause = e.__cause__ if isinstance(e, CallableFailed) and e.__cause__ is not None else e
        return None, f"float64 input failed: {_error_text(cause, 120)}"
    if y.dtype != np.float64:
        return None, f"float64 input gave dtype {y.dtype}"
    refs = _references("float64")
    return {key: _distance(y, r[:_N_SEP]) for key, r in refs.items()}, ""


def _short(fn) -> str:
    text = " ".join(repr(fn).split())
    return text if len(text) <= 80 else text[:77] + "..."


# --- known-fault signatures --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Probe:
    """The float32 outputs and the identified variant's reference at PROBE, split by region."""

    y: np.ndarray
    ref: np.ndarray
    variant: str
    distances64: dict | None

    def tail(self):
        """(x, y, ref, relative error) at the finite probe points left of NEAR_TAIL's upper end where the
        reference is a normal float32."""
        sl = slice(0, _N_SEP + _N_TAIL)
        x, y, r = PROBE[sl], self.y[sl], self.ref[sl]
        keep = (np.abs(r) >= np.finfo(np.float32).tiny) & (x <= NEAR_TAIL[1])
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.abs(y[keep] - r[keep]) / np.abs(r[keep])
        return x[keep], y[keep], r[keep], np.where(np.isnan(rel), np.inf, rel)

    def special(self, value: float) -> tuple[float, float]:
        i = _N_SEP + _N_TAIL + (0 if value == -np.inf else 1 if value == np.inf else 2)
        return float(self.y[i]), float(self.ref[i])


def _lost(probe: _Probe, lo: float, hi: float) -> str | None:
    """Where the tail in [lo, hi] is more than LOST off: the first such x (closest to 0), its error, and where the
    output becomes 0 while the reference is a normal float32."""
    x, y, r, rel = probe.tail()
    sel = (x >= lo) & (x <= hi) & (rel > LOST)
    if not sel.any():
        return None
    i = int(np.argmax(np.where(sel, x, -np.inf)))
    text = f"{rel[i]:.0%} off at x = {x[i]:g}"
    zero = np.flatnonzero(sel & (y == 0))
    if zero.size:
        j = zero[np.argmax(x[zero])]
        text += f"; 0 from x = {x[j]:g}, where the value is {r[j]:.2g}"
    return text


def _near_tail(probe: _Probe) -> str | None:
    return _lost(probe, *NEAR_TAIL)


def _any_tail(probe: _Probe) -> str | None:
    return _lost(probe, -np.inf, NEAR_TAIL[1])


def _at(value: float) -> Callable:
    def check(probe: _Probe) -> str | None:
        got, want = probe.special(value)
        if got == want or (math.isnan(got) and math.isnan(want)):
            return None
        return f"f({value:g}) = {got:g}, the limit is {want:g}"

    return check


def _float64_precision(probe: _Probe) -> str | None:
    if probe.distances64 is None or probe.distances64[probe.variant] <= FLOAT64_GOAL:
        return None
    return (f"float64 distance {probe.distances64[probe.variant]:.2g}, float64 resolution 1.1e-16 "
            "(a constant or an intermediate rounded to float32)")


# the near-tail losses each catalogue unit names (`tail_signatures`: "1+erf cancellation" for exact GELU,
# "1+tanh cancellation" for the tanh form), then those of any entry
_TAIL_SIGNATURES = tuple(Signature(name, (key,), _near_tail)
                         for key, a in ACTIVATIONS.items() for name in a.tail_signatures)
SIGNATURES = (
    *_TAIL_SIGNATURES,
    Signature("negative tail lost", None, _any_tail,  # subnormal intermediate flushed, exp overflow, ...
              unless=tuple(s.name for s in _TAIL_SIGNATURES)),
    Signature("wrong at -inf", None, _at(-np.inf)),  # e.g. NaN from -inf * 0
    Signature("wrong at +inf", None, _at(np.inf)),
    Signature("NaN not propagated", None, _at(np.nan)),
    Signature("float64 imprecise", None, _float64_precision),  # constants or intermediates rounded to float32
)

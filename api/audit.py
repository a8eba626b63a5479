"""What does this model compute? The activation sites of a model or an exported file, each identified as its own
runtime computes it, and two models compared site by site.

A *site* is one place in a model where an activation is computed: a maximal elementwise region of the graph whose
only varying input is one tensor (constants aside) and that holds a nonlinear op (an activation module, `aten.gelu`,
an Erf or Tanh subgraph, onnxruntime's fused `com.microsoft` Gelu / FastGelu / BiasGelu / QuickGelu, TFLite's
GELU, a jaxpr's `erf` / `tanh` / `logistic` with the multiplies around them). Each format's reader (the `sites`
function of `backends/<framework>/audit.py`, or of `experiments/audit/onnx.py` for files run by onnxruntime) finds
them and gives, per site, either

* `probe`: the region cut out of the graph and run by the model's own runtime (the same kernels, fusions and
  precision its deployment runs), a function of one float32 numpy array of any shape returning the float32 numpy
  array of the same shape; gelulab's probe points (api.probe.PROBE: the separating points, the negative tail,
  +-inf and NaN) go through it, or
* `pairs`: (pre-activation, post-activation) float32 arrays read from a real forward pass, where the runtime cannot
  cut a region out (TFLite's interpreter): the evidence is then only as wide as the values that pass.

`report` identifies every site (api.probe: the catalogue variant within the probe's tolerance, or none with the
nearest; its distance to each variant; the known faults it shows) and measures its error in ULPs against the
correctly rounded reference of that variant (core.parity.reference, mpmath) per region: the bulk
(x >= -3), the negative tail (x < -3, where sums cancel and subnormals flush) and the specials (+-inf, NaN). `compare`
aligns the sites of two reports in their order and says, per pair, "same variant", "VARIANT CHANGED" (with the largest
difference and the input where it is) or "same variant, accuracy differs" (a tail lost, a larger error in the bulk, a
special value wrong).
"""
from __future__ import annotations

import importlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from gelulab.api import probe as P
from gelulab.backends import READER_FOLDERS, REGISTRY
from gelulab.backends.onnx import audit as onnx_audit
from gelulab.backends.tools import tool, with_tool
from gelulab.core.activations import ACTIVATIONS
from gelulab.core.contracts.audit import (
    Site,  # defined in core so that the readers (backends) can build sites
)
from gelulab.core.numerics.metrics import ulp_distance
from gelulab.core.parity.reference import reference

# Regions of an input x, as the reports name them: the bulk (x >= -3, where every variant is at least 4e-3 of |x|
# and a float32 implementation of the right variant is within a few ULP), the negative tail (x < -3, where
# 1 + erf(x / sqrt 2) and 1 + tanh(u) cancel and subnormal intermediates flush), the specials (+-inf, NaN).
TAIL_BELOW = P.NEAR_TAIL[1]


def _regions(x: np.ndarray) -> dict:
    """{region name: boolean mask of x}."""
    finite = np.isfinite(x)
    return {"bulk": finite & (x >= TAIL_BELOW), "negative tail": finite & (x < TAIL_BELOW), "specials": ~finite}
# "same variant, accuracy differs": the larger max ULP of the bulk or the tail exceeds the smaller by more than this
# (a float32 implementation of the right variant is within a few ULP in the bulk; a lost tail is thousands)
ULP_SLACK = 4.0


@dataclass(frozen=True)
class UlpStats:
    """ULP distances of one region's outputs to the correctly rounded float32 reference of the site's variant
    (core.numerics.metrics.ulp_distance; inf where exactly one is NaN): median, 99th percentile, max, and the
    number of points."""

    median: float
    p99: float
    max: float
    n: int


@dataclass(frozen=True)
class SiteReport:
    """What one site computes.

    path, op, how: as the Site's; variant: the catalogue key it computes, or None ("none of the variants");
    nearest: the catalogue key at the smallest distance; distances: {catalogue key: distance on the probe's
    separating points (api.probe: |f - ref| / max(1, |ref|)), or on the pairs}; ulps: {region: UlpStats} against
    the reference of `variant` (else `nearest`); faults: the known-fault signatures seen (api.probe.SIGNATURES:
    "name: detail"), () for pairs; evidence: "probe" or "pairs"; values: the float32 outputs at the probe's
    separating points (float64), None for pairs."""

    path: str
    op: str
    how: str
    variant: str | None
    nearest: str
    distances: dict
    ulps: dict
    faults: tuple = ()
    evidence: str = "probe"
    values: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def computes(self) -> str:
        """The variant in words: "gelu_tanh", or "none of the variants (nearest gelu_none)"."""
        return self.variant or f"none of the variants (nearest {self.nearest})"

    def to_json(self) -> dict:
        """A JSON-ready dict (without the values)."""
        d = asdict(self)
        d.pop("values")
        d["ulps"] = {k: asdict(v) if isinstance(v, UlpStats) else v for k, v in self.ulps.items()}
        return _finite(d)


@dataclass(frozen=True)
class ModelReport:
    """The sites of one model or file: source (its path or repr), format ("torch nn.Module", "ONNX", "TFLite",
    ...), runtime (what ran the sites, with its version: "onnxruntime 1.22.0, ORT_ENABLE_ALL"), sites in the
    model's order."""

    source: str
    format: str
    runtime: str
    sites: tuple

    def to_json(self) -> dict:
        return {"source": self.source, "format": self.format, "runtime": self.runtime,
                "sites": [s.to_json() for s in self.sites]}


# two sites computing none of the catalogue's variants (a pooler's tanh) but the same function: they differ by no
# more than api.probe's tolerance on the separating points
SAME_FUNCTION = "same function (not a catalogue variant)"


@dataclass(frozen=True)
class SiteDiff:
    """One aligned pair of sites of two reports (index: its place in both, from 0): status "same variant",
    "VARIANT CHANGED", "same variant, accuracy differs" or "only in A" / "only in B"; difference: the largest
    |f_a - f_b| / max(1, |f_a|) on the probe's separating points (or at the pairs' inputs through the variants'
    references) and `at`, the input x where it is; why: for "accuracy differs", what differs. Two sites that both
    compute none of the variants but differ by at most api.probe's tolerance are SAME_FUNCTION (not changed)."""

    index: int
    a: SiteReport | None
    b: SiteReport | None
    status: str
    difference: float = 0.0
    at: float = math.nan
    why: str = ""

    @property
    def changed(self) -> bool:
        """Whether the variant changed (or a site is missing on one side)."""
        return self.status not in ("same variant", "same variant, accuracy differs", SAME_FUNCTION)


def report_site(site: Site) -> SiteReport:
    """Identify one site: from its probe (api.probe's points through site.probe) or its pairs. Raises
    api.probe.CallableFailed (a ValueError) when the probe raises, ValueError when it returns another shape."""
    if site.probe is not None:
        x = P.PROBE.astype(np.float32)
        try:
            y = np.asarray(site.probe(x))
        except Exception as e:
            raise P.CallableFailed(f"site {site.path}: the runtime raised {type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:200] if str(e) else ''}", str(e)) from e
        if y.shape != x.shape:
            raise ValueError(f"site {site.path}: the cut-out region returned shape {y.shape} for {x.shape}")
        y = y.astype(np.float64)
        refs = P._references("float32")
        sep = slice(0, P._N_SEP)
        distances = {k: P._distance(y[sep], r[sep]) for k, r in refs.items()}
        nearest = min(distances, key=distances.get)
        variant = nearest if distances[nearest] <= P.tolerance() else None
        faults = ()
        if variant is not None:
            pr = P._Probe(y, refs[variant], variant, None)
            seen = []
            for s in P.SIGNATURES:
                if s.name == "float64 imprecise":
                    continue
                if (s.variants is None or variant in s.variants) and not {f.name for f in seen} & set(s.unless):
                    detail = s.check(pr)
                    if detail is not None:
                        seen.append(P.Fault(s.name, detail))
            faults = tuple(f"{f.name}: {f.detail}" for f in seen)
        ref = refs[variant or nearest]
        ulps = {name: _stats(y[m], ref[m]) for name, m in _regions(P.PROBE).items()}
        return SiteReport(site.path, site.op, site.how, variant, nearest, distances, ulps, faults, "probe",
                          y[sep])
    x, y = (np.asarray(v, np.float32).ravel() for v in site.pairs)
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"site {site.path}: pairs of shapes {x.shape} and {y.shape}; expected one nonempty shape")
    ok = np.isfinite(x)
    x, y = x[ok], y[ok].astype(np.float64)
    refs = {k: reference(k, x.astype(np.float64), "float32").astype(np.float64) for k in ACTIVATIONS}
    distances = {k: P._distance(y, r) for k, r in refs.items()}
    nearest = min(distances, key=distances.get)
    variant = nearest if distances[nearest] <= P.tolerance() else None
    ref = refs[variant or nearest]
    ulps = {name: _stats(y[m], ref[m]) for name, m in _regions(x).items() if name != "specials"}
    return SiteReport(site.path, site.op, site.how, variant, nearest, distances, ulps, (), "pairs")


def report(sites: Sequence[Site], source: str, format: str, runtime: str) -> ModelReport:
    """The ModelReport of a reader's sites (report_site each). Raises ValueError when there is no site ("no
    activation found in SOURCE"), and as report_site."""
    if not sites:
        raise ValueError(f"no activation found in {source} ({format}): no elementwise region with a nonlinear op")
    return ModelReport(source, format, runtime, tuple(report_site(s) for s in sites))


def compare(a: ModelReport, b: ModelReport) -> tuple[SiteDiff, ...]:
    """The sites of `a` and `b` aligned in their order, one SiteDiff per place (module paths and node names
    differ between a model and its conversion, the order of the activations does not)."""
    out = []
    for i in range(max(len(a.sites), len(b.sites))):
        sa = a.sites[i] if i < len(a.sites) else None
        sb = b.sites[i] if i < len(b.sites) else None
        if sa is None or sb is None:
            out.append(SiteDiff(i, sa, sb, "only in A" if sb is None else "only in B"))
            continue
        diff, at = _difference(sa, sb)
        if sa.variant is None and sb.variant is None and sa.nearest == sb.nearest and diff <= P.tolerance():
            # tanh in BERT's pooler: no catalogue variant, and the same function on both sides
            out.append(SiteDiff(i, sa, sb, SAME_FUNCTION, diff, at))
            continue
        if sa.variant is None or sa.variant != sb.variant:
            out.append(SiteDiff(i, sa, sb, "VARIANT CHANGED", diff, at))
            continue
        why = _accuracy_differs(sa, sb)
        out.append(SiteDiff(i, sa, sb, "same variant, accuracy differs" if why else "same variant", diff, at, why))
    return tuple(out)


def _difference(a: SiteReport, b: SiteReport) -> tuple[float, float]:
    """The largest |f_a - f_b| / max(1, |f_a|) and the x where it is: on the probe's separating points, each
    side's own outputs (a site known by pairs contributes its variant's (or nearest's) reference there)."""
    x = P.SEPARATING
    ya, yb = (s.values if s.values is not None else P._references("float32")[s.variant or s.nearest][: P._N_SEP]
              for s in (a, b))
    with np.errstate(invalid="ignore"):
        d = np.abs(ya - yb) / np.maximum(1.0, np.abs(ya))
    d = np.where(np.isnan(ya) != np.isnan(yb), np.inf, np.nan_to_num(d, nan=0.0))
    i = int(np.argmax(d))
    return float(d[i]), float(x[i])


def _accuracy_differs(a: SiteReport, b: SiteReport) -> str:
    """Why two sites of one variant differ in accuracy ("" when they do not, or when one is known by pairs and the
    other by the probe): a region's max ULP apart by more than ULP_SLACK, or a fault seen on one side only."""
    parts = []
    if a.evidence != b.evidence:  # pairs cover only the values a forward pass gave: not comparable with the probe
        return ""
    for region in ("bulk", "negative tail", "specials"):
        ua, ub = a.ulps.get(region), b.ulps.get(region)
        if ua is None or ub is None or not ua.n or not ub.n:
            continue
        lo, hi = sorted((ua.max, ub.max))
        if hi > lo + ULP_SLACK:
            parts.append(f"{region}: max {_ulp(ua.max)} vs {_ulp(ub.max)} ULP")
    fa, fb = ({f.split(":")[0] for f in s.faults} for s in (a, b))
    if a.evidence == "probe" and fa != fb:
        parts += [f"{n} in A only" for n in sorted(fa - fb)] + [f"{n} in B only" for n in sorted(fb - fa)]
    return "; ".join(parts)


def _stats(y: np.ndarray, ref: np.ndarray) -> UlpStats:
    if y.size == 0:
        return UlpStats(0.0, 0.0, 0.0, 0)
    u = ulp_distance(y.astype(np.float32), ref.astype(np.float32), "float32")
    finite = u[np.isfinite(u)]
    p = (float(np.median(finite)), float(np.percentile(finite, 99))) if finite.size else (math.inf, math.inf)
    return UlpStats(p[0], p[1], float(u.max()), int(u.size))


def _ulp(v: float) -> str:
    return "inf" if not math.isfinite(v) else f"{v:.3g}"


def _finite(obj):
    """obj with every non-finite float written as a string ("inf", "nan"), for strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


# --- rendering ---------------------------------------------------------------------------------------------------


def _cell(text) -> str:
    """A Markdown table cell: newlines and pipes escaped, so a name from a file cannot forge a row."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def table(r: ModelReport) -> str:
    """The sites of one report as a Markdown table, with a heading naming the source, format and runtime."""
    n = len(r.sites)
    lines = [f"{r.source} ({r.format}; {r.runtime}): {n} activation site{'s' if n != 1 else ''}", "",
             ("| # | site | op | computes | distance | ULP x >= -3: median / p99 / max | ULP x < -3: max | faults "
              "| probed |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for i, s in enumerate(r.sites):
        bulk, tail = s.ulps.get("bulk"), s.ulps.get("negative tail")
        lines.append("| " + " | ".join(_cell(c) for c in (
            i, s.path, s.op, s.computes, f"{s.distances[s.variant or s.nearest]:.2g}",
            f"{_ulp(bulk.median)} / {_ulp(bulk.p99)} / {_ulp(bulk.max)}" if bulk and bulk.n else "-",
            _ulp(tail.max) if tail and tail.n else "-", "; ".join(s.faults) or "-", s.how)) + " |")
    return "\n".join(lines)


def comparison_table(a: ModelReport, b: ModelReport, diffs: Sequence[SiteDiff]) -> str:
    """The aligned sites of two reports as a Markdown table, then one line with the count of changed sites."""
    lines = [f"A: {a.source} ({a.format}; {a.runtime})", f"B: {b.source} ({b.format}; {b.runtime})", "",
             "| # | site in A | site in B | A computes | B computes | verdict | largest difference (at x) |",
             "|---|---|---|---|---|---|---|"]
    for d in diffs:
        verdict = d.status + (f" ({d.why})" if d.why else "")
        lines.append("| " + " | ".join(_cell(c) for c in (
            d.index, d.a.path if d.a else "-", d.b.path if d.b else "-", d.a.computes if d.a else "-",
            d.b.computes if d.b else "-", verdict,
            f"{d.difference:.2g} (x = {d.at:g})" if d.a and d.b else "-")) + " |")
    changed = [d for d in diffs if d.changed]
    lines += ["", _summary(len(diffs), changed)]
    return "\n".join(lines)


def _summary(n: int, changed: Sequence[SiteDiff]) -> str:
    if not changed:
        return f"The variant is the same at {'the one site' if n == 1 else f'all {n} sites'}."
    first = changed[0]
    where = first.a.path if first.a else first.b.path
    return (f"The variant changed at {len(changed)} of {n} site{'s' if n != 1 else ''}; the first is site "
            f"{first.index} ({where}): {first.status}.")


def to_json(a: ModelReport, b: ModelReport | None = None, diffs: Sequence[SiteDiff] = ()) -> str:
    """One report, or two and their comparison, as a JSON document."""
    doc = {"a": a.to_json()}
    if b is not None:
        doc["b"] = b.to_json()
        doc["comparison"] = [_finite({"index": d.index, "status": d.status, "difference": d.difference, "at": d.at,
                                      "why": d.why}) for d in diffs]
        doc["changed"] = sum(d.changed for d in diffs)
    return json.dumps(doc, indent=2)


# --- the readers, and the dispatch of a model or a path to one ---------------------------------------------------

# reader name -> its module: every backend whose record lists an `audit` tool module (torch: nn.Module, torch.export
# programs and .pt2, Hugging Face folders; tensorflow: Keras models, .keras, SavedModel folders, .tflite; jax: jax
# functions and Flax modules, their jaxpr), then the readers of gelulab.backends.READER_FOLDERS (onnx: .onnx run by
# onnxruntime). Each reader module imports its framework inside its functions only, and provides
#   reads_path(path: pathlib.Path) -> bool      whether it reads this file or folder (by suffix or content)
#   reads_object(obj) -> bool                   whether obj is a model of its framework (asking sys.modules only)
#   read(source, options: Options) -> tuple[list[Site], str, str]   (sites, format, runtime with its version)
# and raises ValueError (one line: the file, what is wrong, what would do) for a file that does not load, a model
# whose example input cannot be inferred, or a file that would run code (pickle, Keras unsafe mode).
READERS = {
    **{name: f"gelulab.backends.{name}.audit" for name in with_tool("audit")},  # the backends' `audit` tool modules
    **{name: f"gelulab.backends.{name}.audit" for name in READER_FOLDERS},  # readers of a runtime's files (onnx)
}
ORT_LEVELS = onnx_audit.ORT_LEVELS  # onnxruntime's graph optimization levels (the onnx reader's names)


@dataclass(frozen=True)
class Options:
    """How to read a model. example: an example input (a numpy array, or a tuple of them) where the reader cannot
    infer one (a jax function, a torch model whose first layer is neither Linear nor Embedding); ort_level:
    onnxruntime's graph optimization level ("all" is onnxruntime's default, so what a deployment runs;
    "disable", "basic", "extended"); allow_pickle: load files that need Python's pickle (a `.bin` checkpoint, a
    `.pt2` whose weights are pickled), which runs code that came with the file; params: a Flax module's
    variables."""

    example: object = None
    ort_level: str = "all"
    allow_pickle: bool = False
    params: object = None

    def __post_init__(self):
        if self.ort_level not in ORT_LEVELS:
            raise ValueError(f"ort_level={self.ort_level!r}; expected one of {list(ORT_LEVELS)}")


@dataclass(frozen=True)
class ModelComparison:
    """Two reports and their sites aligned (compare). changed: the number of sites whose variant changed or that
    one side lacks."""

    a: ModelReport
    b: ModelReport
    diffs: tuple

    @property
    def changed(self) -> int:
        return sum(d.changed for d in self.diffs)

    def __str__(self) -> str:
        return comparison_table(self.a, self.b, self.diffs)


def _reader(name: str):
    """The reader module `name`, or None when it is not installed (a checkout without that reader yet)."""
    try:
        return importlib.import_module(READERS[name])
    except ModuleNotFoundError as e:
        if e.name == READERS[name]:
            return None
        raise


def _readers():
    """(name, module) of every reader present, in READERS' order."""
    return [(n, m) for n in READERS if (m := _reader(n)) is not None]


def is_model(obj, options: Options | None = None) -> bool:
    """Whether obj is a model file or folder (an existing path) or a model object a reader recognises, rather than
    an activation callable (api.probe.identify's subject): not an activation module (_activation_module), and a
    plain function (jax.nn.gelu, a lambda) only when options give it an example input or params (a jax function
    audited through its jaxpr)."""
    from pathlib import Path

    if isinstance(obj, (str, Path)):
        try:
            return Path(obj).exists()
        except (OSError, ValueError):  # a name too long for a path, a NUL
            return False
    if _activation_module(obj):
        return False
    if _plain_function(obj) and (options is None or (options.example is None and options.params is None)):
        return False
    return any(m.reads_object(obj) for _, m in _readers())  # each asks sys.modules only


def _plain_function(obj) -> bool:
    """A function rather than a model object: a Python function or builtin, a functools.partial, a jitted jax
    function."""
    import functools
    import types

    function_types = {t for name in with_tool("probe") for t in getattr(tool(name, "probe"), "FUNCTION_TYPES", ())}
    return isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)) \
        or type(obj).__name__ in function_types


def _activation_module(obj) -> bool:
    """An activation module or layer, not a model (api.surgery.activation_module: a torch module whose class swap
    recognises or that has no submodules and no parameters, a Keras layer without weights that is not a Model)."""
    from gelulab.api.surgery import activation_module

    return activation_module(obj)


def audit(source, options: Options | None = None) -> ModelReport:
    """The ModelReport of a model object or a model file or folder (see READERS for what each reader takes).
    Raises ValueError in one line for a path no reader takes (naming the formats), a file that does not load, a
    model with no activation, or an example input that is needed and missing (saying how to pass one)."""
    from pathlib import Path

    options = options or Options()
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise ValueError(f"{path}: no such file or folder")
        for name, reader in _readers():
            if reader.reads_path(path):
                _register_layers(name)
                sites, fmt, runtime = reader.read(path, options)
                return report(sites, str(path), fmt, runtime)
        raise ValueError(f"{path}: not a model gelulab reads; expected an .onnx, .tflite, .keras or .pt2 file, a "
                         "SavedModel folder or a Hugging Face model folder (config.json and model.safetensors)")
    for name, reader in _readers():
        if reader.reads_object(source):
            sites, fmt, runtime = reader.read(source, options)
            return report(sites, _short_repr(source), fmt, runtime)
    raise TypeError(f"gelulab.identify: got a {type(source).__module__}.{type(source).__qualname__}; expected an "
                    "activation callable, a model (torch.nn.Module, torch.export program, Keras model, Flax module "
                    "with params=, jax function with example=) or the path of a model file or folder")


def _register_layers(name: str) -> None:
    """Import gelulab's layers of the backend whose reader is about to load a file (its record's `layers`), so that a
    file naming them loads (a .keras file names gelulab's serializable Keras layers); nothing for a reader without
    a backend record (onnx)."""
    caps = REGISTRY.get(name)
    if caps is not None and caps.layers is not None:
        importlib.import_module(f"gelulab.layers.{caps.layers}")


def audit_pair(a, b, options: Options | None = None) -> ModelComparison:
    """Both reports and their comparison (compare)."""
    ra, rb = audit(a, options), audit(b, options)
    return ModelComparison(ra, rb, compare(ra, rb))


def _short_repr(obj) -> str:
    """How a report names a model object: "torch.Sequential", "keras.Sequential", or the class's own name where it
    was defined in __main__ or exec'd code ("MLP")."""
    name, module = type(obj).__qualname__, type(obj).__module__.split(".")[0]
    if name.startswith("<"):
        return repr(obj)[:60]
    return name if module in ("builtins", "__main__") else f"{module}.{name}"


ModelReport.__str__ = table  # a report prints as its table

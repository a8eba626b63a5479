"""The activation sites of jax functions and Flax modules (api.audit's reader "jax"; see api/audit.py for the reader
contract). jax and flax are imported inside the functions.

What is read: the jaxpr of the model on the example input (jax.make_jaxpr), with the calls it holds (jit,
custom_jvp_call, custom_vjp_call, closed_call, remat) inlined and the parameters folded in as constants. The sites
are its elementwise regions (core.contracts.regions.elementwise_regions: erf, erfc, tanh, logistic, max, exp,
... with the mul / add / integer_pow around them, one varying input, scalar constants aside). Each is cut out: its
equations bound again (eqn.primitive.bind(*invals, **eqn.params)) on a jax float32 array, under jax.jit, as the
user's jit runs it (XLA fuses the region; eager dispatch would run op by op).

* a jax function (a jax.jit-wrapped one is recognised as a model; any callable can be passed to `read`):
  options.example is needed (a numpy array or a tuple of them);
* a Flax linen module: options.params (its variables, as from module.init) and options.example;
* a flax.nnx module: options.example (its state is read from the module itself).
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from gelulab.core.contracts.audit import Site
from gelulab.core.contracts.regions import Node, elementwise_regions

NONLINEAR = {"erf", "erfc", "erf_inv", "tanh", "logistic", "max", "min", "exp", "exp2", "expm1", "log1p", "log",
             "select_n", "abs"}
ELEMENTWISE = {"add", "sub", "mul", "div", "neg", "integer_pow", "pow", "sqrt", "rsqrt", "cbrt", "sign", "square",
               "convert_element_type", "copy", "copy_p", "reduce_precision", "gt", "ge", "lt", "le", "eq", "ne",
               "not", "and", "or", "is_finite", "clamp", "nextafter", "add_any"}
# call primitives whose inner jaxpr is inlined: param name of the (closed) jaxpr
_CALLS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
_GENERIC_CALLS = {"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "closed_call", "pjit", "jit",
                  "remat", "checkpoint", "core_call"}
_FOLD_LIMIT = 1 << 20  # constant equations with outputs up to this many elements are folded (broadcast scalars)


def reads_path(path) -> bool:
    return False  # jax has no model file format gelulab reads (a Flax checkpoint holds weights, not the model)


def reads_object(obj) -> bool:
    """A Flax linen or nnx module, or a jax.jit-wrapped function (a plain Python function cannot be told from an
    activation callable: pass it to `read` with options.example)."""
    if "jax" not in sys.modules:
        return False
    linen = sys.modules.get("flax.linen")
    nnx = sys.modules.get("flax.nnx")
    if linen is not None and isinstance(obj, linen.Module):
        return True
    if nnx is not None and isinstance(obj, nnx.Module):
        return True
    return callable(obj) and type(obj).__module__.split(".")[0] in ("jax", "jaxlib") and hasattr(obj, "lower")


def runtime(flax: bool = False) -> str:
    import jax

    flax = sys.modules.get("flax") if flax else None
    return (f"jax {jax.__version__} ({jax.default_backend()}), regions under jax.jit"
            + (f", Flax {flax.__version__}" if flax is not None else ""))


def read(source, options) -> tuple[list[Site], str, str]:
    """(sites, format, runtime) of a jax function or Flax module (see the module docstring). Raises ValueError in
    one line when options.example (or a linen module's options.params) is missing."""
    import jax

    fn, fmt = _function(source, options)
    example = options.example
    args = example if isinstance(example, tuple) else (example,)
    args = tuple(np.asarray(a) if isinstance(a, (list, float, int)) else a for a in args)
    try:
        closed = jax.make_jaxpr(fn)(*args)
    except Exception as e:
        raise ValueError(f"{fmt}: tracing it on the example failed: {type(e).__name__}: "
                         f"{' '.join(str(e).split())[:200]}") from e
    return sites_of(closed), fmt, runtime(flax=fmt.startswith(("Flax", "flax")))


def _function(source, options) -> tuple[Callable, str]:
    linen = sys.modules.get("flax.linen")
    nnx = sys.modules.get("flax.nnx")
    name = type(source).__qualname__
    if linen is not None and isinstance(source, linen.Module):
        if options.params is None or options.example is None:
            raise ValueError(f"Flax linen module {name}: pass its variables and an example input, "
                             "audit(model, Options(params=variables, example=x)); a linen module holds neither")
        params = options.params
        return (lambda *a: source.apply(params, *a)), "Flax linen module"
    if options.example is None:
        what = "flax.nnx module" if nnx is not None and isinstance(source, nnx.Module) else "jax function"
        raise ValueError(f"{what} {getattr(source, '__name__', name)}: pass an example input, "
                         "audit(model, Options(example=x)); its input shape cannot be inferred")
    if nnx is not None and isinstance(source, nnx.Module):
        return (lambda *a: source(*a)), "flax.nnx module"
    if not callable(source):
        raise TypeError(f"jax reader: {name} is not callable")
    return source, "jax function"


class _Flat:
    """The jaxpr's equations with calls inlined: nodes (backends.tensorflow.audit.Node, inputs and outputs as
    integer tokens), the equation of each node, the constants' values {token: numpy array}, the outputs."""

    def __init__(self, closed):
        self.nodes: list[Node] = []
        self.eqns: list = []
        self.values: dict[int, np.ndarray] = {}
        self._next = 0
        env = {}
        for v, c in zip(closed.jaxpr.constvars, closed.consts):
            env[v] = self._const(c)
        for v in closed.jaxpr.invars:
            env[v] = self._token()
        self._inline(closed.jaxpr, env, "", None)
        self.outputs = [self._atom(env, v) for v in closed.jaxpr.outvars]

    def _token(self) -> int:
        self._next += 1
        return self._next

    def _const(self, value) -> int:
        t = self._token()
        self.values[t] = np.asarray(value)
        return t

    def _atom(self, env, a) -> int:
        from jax.extend.core import Literal

        if isinstance(a, Literal):
            return self._const(a.val)
        return env[a]

    def _inline(self, jaxpr, env, scope: str, call) -> None:
        """Append jaxpr's equations, its calls inlined; `call`: the outermost call equation they are inside (its
        source and name stack are the user's), None at the top."""
        for k, eqn in enumerate(jaxpr.eqns):
            inner = next((eqn.params[p] for p in _CALLS if p in eqn.params), None)
            ins = [self._atom(env, a) for a in eqn.invars]
            if inner is not None:
                closed_inner = inner if hasattr(inner, "jaxpr") else None
                body = closed_inner.jaxpr if closed_inner is not None else inner
                sub = {}
                if closed_inner is not None:
                    for v, c in zip(body.constvars, closed_inner.consts):
                        sub[v] = self._const(c)
                invars = body.invars
                if len(invars) == len(ins):
                    for v, t in zip(invars, ins):
                        sub[v] = t
                    name = eqn.params.get("name", eqn.primitive.name)
                    self._inline(body, sub, f"{scope}/{name}#{len(self.nodes)}", call or eqn)
                    for v, o in zip(eqn.outvars, body.outvars):
                        env[v] = self._atom(sub, o)
                    continue
            outs = [self._token() for _ in eqn.outvars]
            for v, t in zip(eqn.outvars, outs):
                env[v] = t
            if ins and all(t in self.values for t in ins) and all(
                    int(np.prod(v.aval.shape)) <= _FOLD_LIMIT for v in eqn.outvars if hasattr(v.aval, "shape")):
                try:
                    res = eqn.primitive.bind(*(self.values[t] for t in ins), **eqn.params)
                except Exception:  # noqa: BLE001 - not foldable here (an effect, a call): a boundary
                    res = None
                if res is not None:
                    res = res if eqn.primitive.multiple_results else [res]
                    for t, r in zip(outs, res):
                        self.values[t] = np.asarray(r)
                    continue
            prim = eqn.primitive.name
            kind = "nonlinear" if prim in NONLINEAR else "elementwise" if prim in ELEMENTWISE else None
            if kind is not None and not self._same_shape(eqn):
                kind = None
            src = call or eqn
            stack = str(src.source_info.name_stack)
            named = [seg.split("#")[0] for seg in scope.split("/") if seg]
            called = next((n for n in reversed(named) if n not in _GENERIC_CALLS), None)
            self.nodes.append(Node(stack, prim, ins, outs, kind, {"eqn": eqn, "src": src, "call": called},
                                   scope=f"{stack}{scope}"))

    @staticmethod
    def _same_shape(eqn) -> bool:
        """Whether an equation maps arrays of one shape to that shape (scalar operands aside)."""
        shapes = {tuple(v.aval.shape) for v in eqn.outvars}
        if len(shapes) != 1:
            return False
        (shape,) = shapes
        return all(tuple(getattr(a.aval, "shape", ())) in (shape, ()) for a in eqn.invars)

    def uniform(self, t) -> bool:
        v = self.values.get(t)
        return v is not None and v.size > 0 and bool(np.all(v == v.flat[0]))


def sites_of(closed) -> list[Site]:
    """The sites of a ClosedJaxpr (see the module docstring)."""
    from jax._src import source_info_util

    flat = _Flat(closed)
    regions = elementwise_regions(flat.nodes, flat.uniform, flat.outputs)
    sites = []
    for r in regions:
        members = [flat.nodes[i] for i in r.nodes]
        first = next(m for m in members if m.kind == "nonlinear")
        where = (source_info_util.summarize(first.extra["src"].source_info)
                 or source_info_util.summarize(first.extra["eqn"].source_info))
        stack = first.name
        path = f"{stack} ({where})" if stack else where
        calls = list(dict.fromkeys(m.extra["call"] for m in members if m.extra["call"]))
        ops = (f"{', '.join(calls)}: " if calls else "") + ", ".join(m.op for m in members)
        sites.append(Site(path, f"jaxpr {ops}", "cut out of the jaxpr (its equations bound again), run under "
                          "jax.jit", _probe(flat, members, r)))
    return sites


def _probe(flat: _Flat, members, region) -> Callable:
    import jax
    import jax.numpy as jnp

    in_aval = None
    for m in members:
        for a, t in zip(m.extra["eqn"].invars, m.inputs):
            if t == region.input:
                in_aval = a.aval
    dtype = np.dtype(in_aval.dtype) if in_aval is not None else np.dtype(np.float32)
    consts = {t: flat.values[t] for m in members for t in m.inputs if t in flat.values}

    def run(x):
        env = {region.input: x}
        for m in members:
            eqn = m.extra["eqn"]
            vals = []
            for a, t in zip(eqn.invars, m.inputs):
                if t in env:
                    vals.append(env[t])
                else:
                    c = consts[t]
                    value = jnp.asarray(c.reshape(-1)[0], c.dtype)
                    vals.append(value if not getattr(a.aval, "shape", ()) else jnp.broadcast_to(value, x.shape))
            out = eqn.primitive.bind(*vals, **eqn.params)
            for t, o in zip(m.outputs, out if eqn.primitive.multiple_results else [out]):
                env[t] = o
        return env[region.output]

    jitted = jax.jit(run)

    def probe(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        y = jitted(jnp.asarray(x.reshape(-1).astype(dtype)))
        return np.asarray(y, np.float32).reshape(x.shape)

    return probe

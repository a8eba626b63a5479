"""`gelulab identify A [B]`: which GELU (or ReLU, SiLU) a callable computes, and whether two are the same.

A and B are expressions that give a callable, in a restricted form of Python that names activations only: the
activation functions and classes of torch (torch.nn.functional, torch.nn's activation Modules, torch's and
torch.special's elementwise functions), jax (jax.nn, jax.numpy's ufuncs, jax.scipy.special, jax.lax), tensorflow
(tf.nn, tf.math), keras (keras.activations, keras.layers' activation layers), flax.linen, transformers.activations,
numpy's ufuncs, scipy.special, math and gelulab (aliases tf, np, jnp, F); calls with literal keyword values,
functools.partial and lambda over them, e.g.

    gelulab identify torch.nn.functional.gelu
    gelulab identify "torch.nn.GELU('tanh')" "functools.partial(jax.nn.gelu, approximate=True)"
    gelulab identify "lambda x: x * torch.sigmoid(1.702 * x)" "transformers.activations.QuickGELUActivation()"
    gelulab identify tf.nn.gelu keras.activations.gelu

Only the namespaces an expression names are imported (torch first); it is evaluated without Python's builtins
(abs, min, max, float, int, bool, round and pow only). Other names (os, open, __import__), other dotted names
(numpy.load, transformers.AutoConfig.from_pretrained), attributes of anything else (x.sum, '...'.format) or after an
activation (keras.layers.ReLU.from_config), strings over 32 characters or with { / \\ :, expressions over 1000
characters and other constructs are refused in one line before anything is called; --allow-python evaluates A and
B as Python instead, which runs arbitrary code. Exit code: 0, or 1 when A and B are not the same
variant; 2 for an expression that is refused or does not give a callable, or a callable that fails on the probe
(the line names its exception and the array it was given).
"""
from __future__ import annotations

import argparse
import json

from gelulab.experiments.identify import expression as identify_expression


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab identify`."""
    parser.description = __doc__.split("\n\n")[0]
    parser.epilog = "\n\n".join(__doc__.split("\n\n")[1:])
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("a", metavar="A", help="expression giving the callable to identify")
    parser.add_argument("b", metavar="B", nargs="?", default=None,
                        help="a second callable: are A and B the same variant?")
    parser.add_argument("--framework", choices=("torch", "jax", "tensorflow", "numpy"), default=None,
                        help="array type fed to the callables (default: chosen from each callable)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(identify_expression.FLAG, dest="allow_python", action="store_true",
                        help="evaluate A and B as Python with every builtin, importing any module they name: runs "
                             "arbitrary Python code (only for expressions you wrote yourself)")


def evaluate(expression: str, allow_python: bool = False):
    """The callable an expression gives: the restricted form (identify_expression.evaluate), or any Python with
    allow_python (identify_expression.evaluate_python, which runs arbitrary code). Raises ValueError naming the
    expression (identify_expression.Refused for a construct outside the restricted form)."""
    if allow_python:
        return identify_expression.evaluate_python(expression)
    return identify_expression.evaluate(expression)


def _identify(expression: str, fn, framework):
    """probe.identify(fn), its errors (a callable that cannot be called or fails on the probe) as ValueError
    naming the expression."""
    from gelulab.api.probe import CallableFailed, identify

    try:
        return identify(fn, framework=framework)
    except CallableFailed as e:
        raise ValueError(f"{expression!r}: {e.what}") from e
    except (TypeError, ValueError) as e:
        raise ValueError(f"{expression!r}: {str(e).removeprefix('identify: ')}") from e


def run(args) -> int:
    """Identify A (and compare with B); print the result; returns 0, or 1 when A and B differ in variant.
    Raises ValueError (the command line prints it, exit code 2) for an expression that is refused, fails or is not
    a callable, and for a callable that cannot be called on an array or fails on the probe, naming the
    expression."""
    from gelulab.api.probe import compare

    expressions = [e for e in (args.a, args.b) if e is not None]
    fns = [evaluate(e, getattr(args, "allow_python", False)) for e in expressions]  # both before any probe
    found = [_identify(e, fn, args.framework) for e, fn in zip(expressions, fns)]
    result = found[0] if args.b is None else compare(*found)
    pairs = [(args.a, result)] if args.b is None else [(args.a, result.a), (args.b, result.b)]
    if args.json:
        out = {"callables": [_as_dict(e, r) for e, r in pairs]}
        if args.b is not None:
            out.update(same=result.same, difference=result.difference)
        print(json.dumps(out, indent=2))
    else:
        print(_table(pairs))
        if args.b is not None:
            print(f"\n{'same variant' if result.same else 'different'}: {result.a.variant} vs {result.b.variant}; "
                  f"A and B differ by up to {result.difference:.2g} on the float32 probe")
    return 0 if args.b is None or result.same else 1


def _as_dict(expression, r) -> dict:
    return {"expression": expression, "framework": r.framework, "variant": r.variant, "distances": r.distances,
            "tolerance": r.tolerance, "distances64": r.distances64, "note64": r.note64,
            "faults": [{"name": f.name, "detail": f.detail} for f in r.faults], "seconds": r.seconds}


def _table(pairs) -> str:
    keys = list(pairs[0][1].distances)
    head = ["callable", "framework", "variant", *[f"d({k})" for k in keys], "faults", "s"]
    rows = [[f"`{e}`", r.framework, r.variant or "none",
             *[f"{r.distances[k]:.2g}" for k in keys],
             "; ".join(f"{f.name} ({f.detail})" for f in r.faults) or "-", f"{r.seconds:.3f}"] for e, r in pairs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    tol = pairs[0][1].tolerance
    return "\n".join(lines) + f"\n\nd(key): distance to the variant on the float32 probe; identified when <= {tol:.2g}."

"""`gelulab identify A [B]`: which GELU (or ReLU, SiLU) a callable computes, and whether two are the same.

A and B are Python expressions that evaluate to a callable, e.g.

    gelulab identify torch.nn.functional.gelu
    gelulab identify "torch.nn.GELU('tanh')" "functools.partial(jax.nn.gelu, approximate=True)"
    gelulab identify "lambda x: x * torch.sigmoid(1.702 * x)" transformers.activations.QuickGELUActivation()
    gelulab identify tf.nn.gelu keras.activations.gelu

Every name the expression uses that is an importable module is imported first (torch before the others), and
dotted names import their submodules (transformers.activations); the aliases tf (tensorflow), np (numpy),
jnp (jax.numpy) and F (torch.nn.functional) are known. Exit code: 0, or 1 when A and B are not the same variant;
2 for an expression that does not evaluate to a callable.
"""
from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import importlib.util
import json

ALIASES = {"tf": "tensorflow", "np": "numpy", "jnp": "jax.numpy", "F": "torch.nn.functional"}
_FIRST = ("torch",)  # imported before any other framework (importing TensorFlow first can break torch's import)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab identify`."""
    parser.description = __doc__.split("\n\n")[0]
    parser.epilog = "\n\n".join(__doc__.split("\n\n")[1:])
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("a", metavar="A", help="Python expression giving the callable to identify")
    parser.add_argument("b", metavar="B", nargs="?", default=None,
                        help="a second callable: are A and B the same variant?")
    parser.add_argument("--framework", choices=("torch", "jax", "tensorflow", "numpy"), default=None,
                        help="array type fed to the callables (default: chosen from each callable)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def evaluate(expression: str):
    """The value of a Python expression, with the modules it names imported (see the module docstring).
    Raises ValueError naming the expression when it does not parse, fails, or is not callable."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"{expression!r} is not a Python expression ({e.msg}); expected e.g. "
                         "torch.nn.functional.gelu or \"torch.nn.GELU('tanh')\"") from e
    namespace = {"__builtins__": builtins}
    def first(name):
        return ALIASES.get(name.split(".")[0], name).split(".")[0] not in _FIRST, name

    for name in sorted(_module_names(tree), key=first):
        root = name.split(".")[0]
        target = ALIASES.get(root, root)
        if root not in namespace and _importable(target):
            namespace[root] = importlib.import_module(target)
        if root in ALIASES or root not in namespace:
            continue
        for depth in range(2, name.count(".") + 2):  # submodules: transformers.activations, flax.linen
            sub = ".".join([target, *name.split(".")[1:depth]])
            if _importable(sub):
                importlib.import_module(sub)
    try:  # the user's own expression, from their own command line
        value = eval(compile(tree, "<identify>", "eval"), namespace)
    except Exception as e:  # any failure of the expression is reported in one line
        raise ValueError(f"{expression!r} failed: {type(e).__name__}: {e}") from e
    if not callable(value):
        raise ValueError(f"{expression!r} gives a {type(value).__name__}, not a callable")  # noqa: TRY004 - exit 2
    return value


def _module_names(tree) -> set[str]:
    """Dotted names (a, a.b, a.b.c) read in the expression, lambda bodies included."""
    names = set()
    for node in ast.walk(tree):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            names.add(".".join([node.id, *reversed(parts)]))
    return names


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def run(args) -> int:
    """Identify A (and compare with B); print the result; returns 0, or 1 when A and B differ in variant.
    Raises ValueError for an expression that is not a callable (the command line prints it, exit code 2)."""
    from gelulab.probe import identify

    fns = [evaluate(e) for e in (args.a, args.b) if e is not None]
    result = identify(*fns, framework=args.framework)
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

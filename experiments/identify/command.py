"""`gelulab identify A [B]`: which GELU (or ReLU, SiLU) a callable computes, or every activation site of a model
file, and whether two are the same.

A and B are model files or folders, or expressions that give a callable. A path that exists is a model: an .onnx
file (run by onnxruntime, --ort-level), a .pt2 file (torch.export.save), a Hugging Face folder (config.json and
model.safetensors), or what another installed reader takes (.keras, .tflite, a SavedModel folder); every
activation site of its graph is cut out, probed in the model's own runtime and named (gelulab.api.audit), and with
B the sites are compared in their order:

    gelulab identify model.onnx
    gelulab identify original.onnx converted.onnx     exit code 1 when a site's variant changed
    gelulab identify ./all-MiniLM-L6-v2 model.onnx    a Hugging Face folder against its export

--example FILE.npy gives the example input of a model whose input cannot be inferred; --allow-pickle loads files
that need Python's pickle (a .bin checkpoint, a .pt2 with pickled parts), which runs code that came with the file.

Otherwise A and B are expressions that give a callable, in a restricted form of Python that names activations only: the
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
activation (keras.layers.ReLU.from_config), strings over 32 characters or with { / \\ :, a power or shift whose
right operand is not a number literal of at most 16 (x ** 3 is accepted, 9 ** 9 ** 9 is not: its size has no
bound), a power, shift or product of literals over 4096 bits (((2**16)**16)**16, worked out from the literals
before it is computed), a list, tuple or string repeated or joined to over 10**6 items ([0]*10**9), a call of a
lambda or of its parameter ((lambda f: f(f(2)))(lambda y: y ** 16)), expressions
over 1000 characters and other constructs are refused in one line before anything is called;
--allow-python evaluates A and B as Python instead, which runs arbitrary code. Exit code: 0, or 1 when A and B are not
the same variant (for models: when a site's variant changed, the last line naming the first such site); 2 for an
expression that is refused or does not give a callable, or a callable that fails on the probe (the line names its
exception and the array it was given), and for a model that is refused (a format gelulab does not read, a file
that does not load or needs --allow-pickle, no activation found, an example input needed): one line, nothing
else printed.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from gelulab.backends.onnx.audit import ORT_LEVELS
from gelulab.backends.tools import with_tool
from gelulab.experiments.identify import expression as identify_expression

# suffixes that name a model file: a missing one is "no such file", not an expression
MODEL_SUFFIXES = (".onnx", ".pt2", ".bin", ".pt", ".pth", ".keras", ".tflite", ".h5", ".safetensors", ".npy")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab identify`."""
    parser.epilog = "\n\n".join(__doc__.split("\n\n")[1:])  # the details, after cli.DESCRIPTIONS' summary
    parser.add_argument("a", metavar="A", help="a model file or folder, or an expression giving the callable to "
                        "identify")
    parser.add_argument("b", metavar="B", nargs="?", default=None,
                        help="a second model (compared site by site) or callable: are A and B the same variant?")
    parser.add_argument("--example", metavar="FILE.npy", default=None,
                        help="models: the example input (a .npy array, read without pickle) for a model whose "
                             "input cannot be inferred")
    parser.add_argument("--ort-level", choices=ORT_LEVELS, default="all",
                        help="models: onnxruntime's graph optimization level for .onnx files (default: all, "
                             "onnxruntime's default, i.e. what a deployment runs)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="models: load files that need Python's pickle (a .bin checkpoint, a .pt2 with pickled "
                             "parts); this runs code that came with the file, so only for files you trust")
    parser.add_argument("--framework", choices=with_tool("probe"), default=None,
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
    models = [_is_path(e) for e in expressions]
    if any(models):
        if not all(models):
            raise ValueError("give two models (files or folders) or two expressions; A and B mix a model and an "
                             "expression")
        return _run_models(args, expressions)
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


def _is_path(text: str) -> bool:
    """Whether A or B names a model: a path that exists; a missing path with a model's suffix is an error."""
    path = Path(text)
    try:
        if path.exists():
            return True
    except (OSError, ValueError):  # a name too long for a path, a NUL: an expression, not a file
        return False
    if path.suffix.lower() in MODEL_SUFFIXES:
        raise ValueError(f"{text}: no such file")
    return False


def _run_models(args, paths) -> int:
    """The audit of one or two model paths (api.audit): the site table(s), and for two the comparison table, whose
    last line names the first changed site. Everything is computed before anything is printed."""
    from gelulab.api import audit

    example = None
    if getattr(args, "example", None):
        import numpy as np

        try:
            with open(args.example, "rb") as f:
                magic = f.read(6)
        except OSError as e:
            raise ValueError(f"--example {args.example}: cannot read it ({' '.join(str(e).split())[:120]})") from e
        if magic != b"\x93NUMPY":  # np.load would take a text file for a pickle
            raise ValueError(f"--example {args.example}: not a .npy file (np.save writes one)")
        try:
            example = np.load(args.example, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise ValueError(f"--example {args.example}: not a .npy array numpy loads without pickle "
                             f"({' '.join(str(e).split())[:120]})") from e
    options = audit.Options(example=example, ort_level=getattr(args, "ort_level", "all"),
                            allow_pickle=getattr(args, "allow_pickle", False))
    reports = [audit.audit(p, options) for p in paths]
    if len(reports) == 1:
        print(audit.to_json(reports[0]) if args.json else audit.table(reports[0]))
        return 0
    diffs = audit.compare(*reports)
    if args.json:
        text = audit.to_json(reports[0], reports[1], diffs)
    else:
        text = "\n\n".join([audit.table(reports[0]), audit.table(reports[1]),
                             audit.comparison_table(reports[0], reports[1], diffs)])
    print(text)
    return 1 if any(d.changed for d in diffs) else 0

"""The expressions `gelulab identify` reads: a restricted form of Python, checked with `ast` before anything is
imported or run.

Accepted:

* dotted names of the allowed modules (ROOTS: torch, jax, tensorflow, keras, flax, transformers, numpy, scipy,
  math, functools, gelulab) and their aliases (tf, np, jnp, F): `torch.nn.functional.gelu`, `jax.nn.gelu`,
  `tf.nn.gelu`, `scipy.special.erf`, `gelulab.gelu`;
* calls whose arguments are accepted expressions (literals: numbers, strings, True/False/None, tuples, lists and
  dicts of them; names; calls; lambdas): `torch.nn.GELU(approximate='tanh')`,
  `functools.partial(jax.nn.gelu, approximate=False)`, `transformers.activations.ClippedGELUActivation(-10, 10)`;
* lambda over them, with arithmetic, comparisons, `and`/`or`/`not`, `a if c else b`, subscripts and the builtins
  of SAFE_BUILTINS: `lambda x: x * torch.sigmoid(1.702 * x)`.

Refused before any import, in one line naming the construct: any other name (`os`, `open`, `__import__`, `eval`),
an attribute starting with "_" (dunders, private members), an attribute whose name is one of file, process or
import access (BLOCKED_WORDS: load, save, open, file, write, system, ...), and every other construct
(comprehensions, f-strings, `:=`, `*args`, `**kwargs`, ...). When evaluated, an attribute that leads to a module
outside the allowed ones (`torch.os`), to one of gelulab's modules other than its public ones (`gelulab.cli`), to a
module of file, process or data access inside them (`torch.utils`, `tf.io`), or to a Python builtin outside
SAFE_BUILTINS is refused the same way. Only the top-level modules the expression names are imported (torch first:
importing TensorFlow before torch can break torch's import), plus the submodules its dotted names spell
(`transformers.activations`, `scipy.special`); the expression is evaluated with `{'__builtins__': {}}` and those
names only.

The restriction keeps a command line from running code it was not meant to (a script that passes someone else's
text); the frameworks' own functions can still spend memory and time. `evaluate_python` (`--allow-python`) evaluates
any Python expression, with every builtin and every module it names imported: it runs arbitrary code.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import types

ROOTS = ("torch", "jax", "tensorflow", "keras", "flax", "transformers", "numpy", "scipy", "math", "functools",
         "gelulab")
ALIASES = {"tf": "tensorflow", "np": "numpy", "jnp": "jax.numpy", "F": "torch.nn.functional"}
_FIRST = ("torch",)  # imported before any other framework (importing TensorFlow first can break torch's import)
SAFE_BUILTINS = {name: getattr(builtins, name) for name in ("abs", "bool", "float", "int", "max", "min", "pow",
                                                             "round")}
# words of file, process, import or network access: an attribute (or a module name part) containing one is refused
BLOCKED_WORDS = ("load", "save", "open", "file", "write", "read", "dump", "pickle", "exec", "system", "popen",
                 "spawn", "fork", "process", "shell", "environ", "import", "remove", "unlink", "rmtree", "mkdir",
                 "rename", "chdir", "chmod", "symlink", "memmap", "download", "url", "socket", "export", "serial",
                 "hub")
# modules inside the allowed ones that read or write files, start processes or run other code
BLOCKED_MODULE_PARTS = ("io", "gfile", "npyio", "utils", "data", "datasets", "distributed", "testing", "saved_model",
                        "saving", "summary", "profiler", "debugging", "package", "callbacks", "onnx", "distutils",
                        "f2py", "ctypeslib", "compat", "cli")
GELULAB_MODULES = ("gelulab.api", "gelulab.layers")  # gelulab's public modules (with layers.*), beside gelulab
_GUARD = "__gelulab_attribute__"  # the evaluator's attribute function (user names cannot start with "_")
_CONSTRUCTS = {
    ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension", ast.DictComp: "a dict comprehension",
    ast.GeneratorExp: "a generator expression", ast.NamedExpr: "an assignment expression (:=)",
    ast.JoinedStr: "an f-string", ast.FormattedValue: "an f-string", ast.Starred: "a starred argument (*)",
    ast.Set: "a set display", ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from",
}
_ALLOWED_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Call, ast.keyword, ast.Constant, ast.Lambda,
                  ast.arguments, ast.arg, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Tuple,
                  ast.List, ast.Dict, ast.Subscript, ast.Slice, ast.Load, ast.operator, ast.unaryop, ast.cmpop,
                  ast.boolop)
FLAG = "--allow-python"


class Refused(ValueError):
    """An expression outside the restricted form; the message names the construct and the flag that evaluates
    it as Python."""


def evaluate(expression: str):
    """The value of a restricted expression (see the module docstring), with the modules it names imported.

    Raises Refused naming the first construct outside the restricted form (nothing is imported or run then),
    ValueError naming the expression when it does not parse, when evaluating it fails (the exception's type and
    message), or when its value is not callable."""
    tree = _parse(expression)
    roots, chains = _check(tree, expression)
    namespace = {"__builtins__": {}, **SAFE_BUILTINS}
    for name in sorted(roots, key=lambda n: (ALIASES.get(n, n).split(".")[0] not in _FIRST, n)):
        namespace[name] = importlib.import_module(ALIASES.get(name, name))
    for chain in sorted(chains):
        _import_submodules(chain)
    namespace[_GUARD] = lambda obj, name: _attribute(obj, name, expression)
    code = compile(ast.fix_missing_locations(_Guarded().visit(tree)), "<identify>", "eval")

    def run():
        for chain in sorted(chains):  # every dotted name, lambda bodies included, is checked before any call
            root, *rest = chain.split(".")
            value = namespace[root]
            for part in rest:
                value = _attribute(value, part, expression)
        return eval(code, namespace)  # checked against the allow-list, no builtins

    return _callable(expression, run)


def evaluate_python(expression: str):
    """The value of any Python expression, evaluated with every builtin, after importing each importable module
    that a name in it spells (dotted names import their submodules; torch first). Runs arbitrary code: for
    `--allow-python` only. Raises ValueError as `evaluate` does (without the restriction)."""
    tree = _parse(expression)
    namespace = {"__builtins__": builtins}
    names = set()
    for node in ast.walk(tree):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            names.add(".".join([node.id, *reversed(parts)]))
    for name in sorted(names, key=lambda n: (ALIASES.get(n.split(".")[0], n).split(".")[0] not in _FIRST, n)):
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
    code = compile(tree, "<identify>", "eval")
    return _callable(expression, lambda: eval(code, namespace))  # the user asked for Python


def _parse(expression: str) -> ast.Expression:
    try:
        return ast.parse(expression, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"{expression!r} is not a Python expression ({e.msg}); expected e.g. "
                         "torch.nn.functional.gelu or \"torch.nn.GELU('tanh')\"") from e


def _callable(expression: str, run):
    try:  # the user's own expression
        value = run()
    except Refused:
        raise
    except Exception as e:  # any failure of the expression is reported in one line
        raise ValueError(f"{expression!r} failed: {_public_name(type(e))}: {' '.join(str(e).split())}") from e
    if not callable(value):
        raise ValueError(f"{expression!r} gives a {type(value).__name__}, not a callable")  # noqa: TRY004 - exit 2
    return value


def _public_name(cls: type) -> str:
    """The first class of cls's MRO whose name does not start with "_" (numpy's _ArrayMemoryError: MemoryError)."""
    return next((c.__name__ for c in cls.__mro__ if not c.__name__.startswith("_")), cls.__name__)


def _refuse(expression: str, what: str) -> Refused:
    names = ", ".join(ROOTS) + " and the aliases " + ", ".join(ALIASES)
    return Refused(f"{expression!r}: {what} is not accepted in an identify expression (dotted names of {names}, "
                   f"calls with literal arguments, functools.partial, lambda over them); {FLAG} evaluates it as "
                   "Python, which runs arbitrary code")


def _check(tree: ast.Expression, expression: str) -> tuple[set[str], set[str]]:
    """Walk the tree against the allow-list. Returns (the names of modules and aliases read, the dotted names
    rooted at them, e.g. "scipy.special.erf"). Raises Refused naming the first construct outside it."""
    roots: set[str] = set()
    chains: set[str] = set()

    def visit(node, bound: frozenset):
        if not isinstance(node, _ALLOWED_NODES):
            raise _refuse(expression, _CONSTRUCTS.get(type(node), f"a {type(node).__name__} expression"))
        if isinstance(node, ast.Name):
            if node.id in bound:
                return
            if node.id.startswith("_"):
                raise _refuse(expression, f"the name {node.id!r}")
            if node.id in ROOTS or node.id in ALIASES:
                roots.add(node.id)
            elif node.id not in SAFE_BUILTINS:
                raise _refuse(expression, f"the name {node.id!r}")
            return
        if isinstance(node, ast.Attribute):
            visit(node.value, bound)  # the innermost construct is named first: __import__ in __import__('os').system
            if node.attr.startswith("_"):
                raise _refuse(expression, f"the attribute {node.attr!r}")
            if _blocked(node.attr):
                raise _refuse(expression, f"the attribute {node.attr!r} (file, process or import access)")
            chain = _dotted(node)
            if chain is not None and chain.split(".")[0] not in bound:
                chains.add(chain)
            return
        if isinstance(node, ast.keyword) and node.arg is None:
            raise _refuse(expression, "a ** argument")
        if isinstance(node, ast.Lambda):
            params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                      *(a for a in (node.args.vararg, node.args.kwarg) if a is not None)]
            for p in params:
                if p.arg.startswith("_"):
                    raise _refuse(expression, f"the parameter name {p.arg!r}")
            for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                visit(default, bound)
            visit(node.body, bound | {p.arg for p in params})
            return
        for child in ast.iter_child_nodes(node):
            visit(child, bound)

    visit(tree, frozenset())
    return roots, chains


def _dotted(node: ast.Attribute) -> str | None:
    """"a.b.c" for an attribute chain on a name, else None (an attribute of a call's result)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _blocked(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in BLOCKED_WORDS)


def _module_allowed(name: str) -> bool:
    """Whether a module reached by an attribute may be used: inside ROOTS (or jax's jaxlib, Keras's tf_keras), no
    part of its name in BLOCKED_MODULE_PARTS or containing a BLOCKED_WORDS word, and for gelulab one of
    GELULAB_MODULES."""
    parts = name.split(".")
    if parts[0] not in (*ROOTS, "jaxlib", "tf_keras"):
        return False
    if parts[0] == "gelulab" and name != "gelulab" and not any(name == m or name.startswith(m + ".") for m in GELULAB_MODULES):
        return False
    return not any(p.lstrip("_") in BLOCKED_MODULE_PARTS or _blocked(p) for p in parts[1:])


_UNSAFE_BUILTINS = {id(v) for k, v in vars(builtins).items() if k not in SAFE_BUILTINS and callable(v)}


def _attribute(obj, name: str, expression: str):
    """getattr(obj, name), refused (Refused) for a module outside the allowed ones or a Python builtin outside
    SAFE_BUILTINS; every attribute of an identify expression is read through this."""
    if name.startswith("_") or _blocked(name):  # checked when parsed; again for the record
        raise _refuse(expression, f"the attribute {name!r}")
    value = getattr(obj, name)
    if isinstance(value, types.ModuleType) and not _module_allowed(value.__name__):
        raise _refuse(expression, f"the module {value.__name__} (the attribute {name!r})")
    if id(value) in _UNSAFE_BUILTINS:
        raise _refuse(expression, f"the attribute {name!r}, Python's builtin {getattr(value, '__name__', name)!r}")
    return value


class _Guarded(ast.NodeTransformer):
    """Every `a.b` becomes `__gelulab_attribute__(a, "b")` (see _attribute)."""

    def visit_Attribute(self, node: ast.Attribute):
        value = self.visit(node.value)
        return ast.copy_location(ast.Call(ast.Name(_GUARD, ast.Load()), [value, ast.Constant(node.attr)], []),
                                 node)


def _import_submodules(chain: str) -> None:
    """Import the submodules a dotted name of the allowed modules spells (scipy.special for scipy.special.erf),
    leaving out any that _module_allowed refuses (they are refused when reached)."""
    root, *rest = chain.split(".")
    target = ALIASES.get(root, root)
    for depth in range(1, len(rest)):
        sub = ".".join([target, *rest[:depth]])
        if not _module_allowed(sub):
            return
        if _importable(sub):
            importlib.import_module(sub)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False

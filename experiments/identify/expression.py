"""The expressions `gelulab identify` reads: a restricted form of Python, checked with `ast` before anything is
imported or run, that can only name elementwise activation functions and classes.

Accepted:

* a dotted name that is a member of one of the activation namespaces of NAMESPACES (with the aliases tf, np, jnp
  and F; a framework's namespaces and aliases are its backend's NAMESPACES and ALIASES, backends/<name>/probe.py):
  `torch.nn.functional.gelu`, `torch.nn.GELU`, `jax.nn.gelu`, `tf.nn.gelu`, `keras.activations.gelu`,
  `keras.layers.Activation`, `transformers.activations.QuickGELUActivation`, `numpy.tanh` (numpy's ufuncs),
  `scipy.special.erf`, `math.erf`, `functools.partial`, `gelulab.gelu`, `gelulab.layers.torch.GELU`; each
  namespace takes either a fixed list of names or the members of one kind (a function, an activation class, a
  numpy ufunc);
* calls of accepted expressions whose positional arguments are accepted expressions and whose keyword values are
  literals (numbers, True/False/None, strings): `torch.nn.GELU(approximate='tanh')`,
  `functools.partial(jax.nn.gelu, approximate=False)`, `transformers.activations.ClippedGELUActivation(-10, 10)`;
* lambda over them, with arithmetic, comparisons, `and`/`or`/`not`, `a if c else b`, tuples, lists, subscripts
  and the builtins of SAFE_BUILTINS: `lambda x: x * torch.sigmoid(1.702 * x)`.

Powers and shifts take a number literal of at most 16 as their right operand; a power, shift or product of
literals (folded before anything runs) has at most 4096 bits and a list, tuple or string repeated or joined at most
10**6 items: ((2**16)**16)**16 and [0]*10**9 are refused. String literals are at most 32 characters, without
'{', '/', '\\' or ':' (no paths, URLs or format fields); an expression is at most 1000 characters. Refused in one
line naming the construct: any other name (`os`, `open`,
`__import__`), any other dotted name (`numpy.load`, `transformers.AutoConfig.from_pretrained`), an attribute of
anything but such a dotted name (`x.sum`, `'...'.format`, `f(x).y`) or after an accepted member
(`keras.layers.ReLU.from_config`), and every other construct (comprehensions, f-strings, dicts, `:=`, `*args`,
`**kwargs`, ...). Names of a fixed list are refused before anything is imported; the members of a kind after
their namespace's module is imported and before anything is called. Only the namespaces' modules the expression
names are imported (in the backends' registry order, torch before TensorFlow: importing TensorFlow before torch
can break torch's import); every dotted name is resolved once, and the expression is evaluated with
`{'__builtins__': {}}`, SAFE_BUILTINS and those values only.

The restriction keeps a command line from running code it was not meant to (a script that passes someone else's
text); the activations themselves can still spend memory and time. `evaluate_python` (`--allow-python`) evaluates
any Python expression, with every builtin and every module it names imported: it runs arbitrary code.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import types
from collections.abc import Callable
from dataclasses import dataclass

from gelulab.backends import REGISTRY
from gelulab.backends.tools import tool, with_tool

SAFE_BUILTINS = {name: getattr(builtins, name) for name in ("abs", "bool", "float", "int", "max", "min", "pow",
                                                             "round")}
MAX_LENGTH = 1000  # characters of an expression
MAX_STRING = 32  # characters of a string literal
MAX_EXPONENT = 16  # the largest literal right operand of ** and << (x ** 3, 2 ** -0.5; not 9 ** 9 ** 9)
MAX_BITS = 4096  # the most bits of an integer a power, shift or product of literals gives ((2**16)**16 has 257)
MAX_ITEMS = 10**6  # the most items of a list, tuple or string repeated (*) or joined (+) from literals
_STRING_BANNED = "{/\\:"  # format fields, paths and URLs
FLAG = "--allow-python"

_GELULAB = ("gelu", "relu", "silu", "apply", "activation")  # gelulab's own functions an expression may name


def _function(name: str, value) -> bool:
    """A function (not a class, not a module)."""
    return callable(value) and not isinstance(value, (type, types.ModuleType))


def _defined_in(module: str) -> Callable[[str, object], bool]:
    """A class defined in `module` (torch.nn's activation Modules, gelulab's layers)."""
    return lambda name, value: isinstance(value, type) and value.__module__ == module


def _numpy_ufunc(name: str, value) -> bool:
    import numpy

    return isinstance(getattr(numpy, name, None), numpy.ufunc) and callable(value)


@dataclass(frozen=True)
class Namespace:
    """Where accepted dotted names live: `path.<member>` with member in `names` (checked before any import) or,
    when `kind` is set, any public member for which `kind(member, value)` holds (checked once `module` is imported);
    `path` below `module` is reached by attributes (scipy.stats.norm); `denied` names are never accepted."""
    path: str
    names: tuple[str, ...] = ()
    kind: Callable[[str, object], bool] | None = None
    described: str = ""
    module: str = ""
    denied: tuple[str, ...] = ()

    def import_name(self) -> str:
        return self.module or self.path


def _from_record(spec: dict) -> Namespace:
    """A Namespace from one entry of a backend's probe.NAMESPACES (kind "function", "ufunc" or "class" defined in
    spec["defined_in"])."""
    kind = {"function": lambda: _function, "ufunc": lambda: _numpy_ufunc,
            "class": lambda: _defined_in(spec["defined_in"]), None: lambda: None}[spec.get("kind")]()
    return Namespace(spec["path"], tuple(spec.get("names", ())), kind, spec.get("described", ""),
                     spec.get("module", ""), tuple(spec.get("denied", ())))


_PROBES = tuple(tool(name, "probe") for name in with_tool("probe"))  # the backends' probe modules, registry order
ALIASES = {alias: path for probe in _PROBES for alias, path in probe.ALIASES.items()}
# the rank of a top-level module in the order of imports: its backend's place in the registry (torch before
# TensorFlow), then every other module
_RANK = {root: i for i, probe in enumerate(_PROBES) for root in probe.MODULES}
NAMESPACES = (
    *(_from_record(spec) for probe in _PROBES for spec in probe.NAMESPACES),
    Namespace("math", kind=_function, described="functions"),
    Namespace("functools", ("partial",)),
    Namespace("gelulab", _GELULAB),
    *(Namespace(f"gelulab.layers.{fw}", kind=_defined_in(f"gelulab.layers.{fw}"), described="classes")
      for fw in (record.layers for record in REGISTRY.values() if record.layers)),
)
_BY_PATH = {ns.path: ns for ns in NAMESPACES}
_NAMED = [r for r in dict.fromkeys(ns.path.split(".")[0] for ns in NAMESPACES) if r != "functools"]
_LISTED = f"{', '.join(_NAMED[:-1])} and {_NAMED[-1]}, aliases {', '.join(ALIASES)}"  # what a refusal lists
_ROOTS = {ns.path.split(".")[0] for ns in NAMESPACES} | set(ALIASES)
_MEMBER = "__gelulab_member_{}__"  # the names the resolved dotted names get (user names cannot start with "_")
_CONSTRUCTS = {
    ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension", ast.DictComp: "a dict comprehension",
    ast.GeneratorExp: "a generator expression", ast.NamedExpr: "an assignment expression (:=)",
    ast.JoinedStr: "an f-string", ast.FormattedValue: "an f-string", ast.Starred: "a starred argument (*)",
    ast.Set: "a set display", ast.Dict: "a dict display", ast.Await: "await", ast.Yield: "yield",
    ast.YieldFrom: "yield from",
}
_ALLOWED_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Call, ast.keyword, ast.Constant, ast.Lambda,
                  ast.arguments, ast.arg, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Tuple,
                  ast.List, ast.Subscript, ast.Slice, ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


class Refused(ValueError):
    """An expression outside the restricted form; the message names the construct and the flag that evaluates
    it as Python."""


def evaluate(expression: str):
    """The value of a restricted expression (see the module docstring), with the namespaces it names imported.

    Raises Refused naming the first construct outside the restricted form (nothing is imported or run then; a
    member of a kind is refused after its module is imported and before anything is called), ValueError naming the
    expression when it is longer than MAX_LENGTH, too deeply nested or does not parse, when evaluating it fails
    (the exception's type and message), or when its value is not callable."""
    if len(expression) > MAX_LENGTH:
        raise ValueError(f"{expression[:40]!r}... has {len(expression)} characters; expected an identify "
                         f"expression of at most {MAX_LENGTH}")
    try:
        tree = _parse(expression)
        chains = _check(tree, expression)
        _fold(tree.body, expression, frozenset())
        tree = _Resolved(chains).visit(tree)
        code = compile(ast.fix_missing_locations(tree), "<identify>", "eval")
    except (RecursionError, MemoryError) as e:
        raise ValueError(f"{_short(expression)}: expression too deeply nested") from e
    namespace = {"__builtins__": {}, **SAFE_BUILTINS}
    for (ns, member), index in sorted(chains.items(), key=lambda c: (_rank(c[0][0].path), c[1])):
        namespace[_MEMBER.format(index)] = _member(ns, member, expression)  # every member before any call
    return _callable(expression, lambda: eval(code, namespace))  # only the resolved members, no builtins


def evaluate_python(expression: str):
    """The value of any Python expression, evaluated with every builtin, after importing each importable module
    that a name in it spells (dotted names import their submodules; torch first). Runs arbitrary code: for
    `--allow-python` only. Raises ValueError as `evaluate` does (without the restriction)."""
    try:
        tree = _parse(expression)
    except (RecursionError, MemoryError) as e:
        raise ValueError(f"{_short(expression)}: expression too deeply nested") from e
    namespace = {"__builtins__": builtins}
    names = set()
    for node in ast.walk(tree):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            names.add(".".join([node.id, *reversed(parts)]))
    for name in sorted(names, key=lambda n: (_rank(ALIASES.get(n.split(".")[0], n)), n)):
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


def _rank(path: str) -> int:
    """Where a dotted name's module comes in the order of imports: its backend's place in the registry (torch
    before TensorFlow), every other module after them."""
    return _RANK.get(path.split(".")[0], len(_PROBES))


def _short(expression: str) -> str:
    return repr(expression) if len(expression) <= 60 else repr(expression[:40]) + "..."


def _parse(expression: str) -> ast.Expression:
    try:
        return ast.parse(expression, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"{_short(expression)} is not a Python expression ({e.msg}); expected e.g. "
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
    return Refused(f"{expression!r}: {what} is not accepted in an identify expression (the activation functions "
                   f"and classes of {_LISTED}; calls with literal keyword values; functools.partial; lambda "
                   f"over them); {FLAG} evaluates it as Python, which runs arbitrary code")


def _namespace_of(chain: str) -> tuple[Namespace, str] | None:
    """(the namespace, the member) of a dotted name (aliases expanded) that names one member of a namespace."""
    path, _, member = chain.rpartition(".")
    ns = _BY_PATH.get(path)
    return (ns, member) if ns is not None and not member.startswith("_") else None


def _dotted(node: ast.Attribute) -> tuple[list[str], ast.expr]:
    """(["a", "b", "c"], the innermost node) for an attribute chain a.b.c on a name; the innermost node is what
    the chain's first attribute is read from (a Name, a Call, a Constant, ...)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return list(reversed(parts)), node


def _describe(node: ast.expr, bound: frozenset) -> str:
    if isinstance(node, ast.Name):
        return f"the parameter {node.id!r}" if node.id in bound else f"the name {node.id!r}"
    if isinstance(node, ast.Constant):
        return f"a {type(node.value).__name__} literal"
    if isinstance(node, ast.Call):
        return "a call's result"
    if isinstance(node, ast.Lambda):
        return "a lambda"
    return f"a {type(node).__name__} expression"


def _literal(node: ast.expr) -> bool:
    """A number, True/False/None or a string (a signed number too)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
        return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool)
    return isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (int, float, str)))


def _check(tree: ast.Expression, expression: str) -> dict[tuple[Namespace, str], int]:
    """Walk the tree against the allow-list. Returns {(namespace, member): index} for the dotted names it reads,
    and records each dotted name's (namespace, member) on its node (`_gelulab_member`). Raises Refused naming the
    first construct outside it."""
    chains: dict[tuple[Namespace, str], int] = {}

    def visit(node, bound: frozenset):
        if not isinstance(node, _ALLOWED_NODES):
            raise _refuse(expression, _CONSTRUCTS.get(type(node), f"a {type(node).__name__} expression"))
        if isinstance(node, ast.Name):
            if node.id in bound or node.id in SAFE_BUILTINS:
                return
            if node.id in _ROOTS:
                raise _refuse(expression, f"the module name {node.id!r} alone (expected an activation in it, e.g. "
                                          "torch.nn.functional.gelu)")
            raise _refuse(expression, f"the name {node.id!r}")
        if isinstance(node, ast.Call) and (isinstance(node.func, ast.Lambda)
                                           or (isinstance(node.func, ast.Name) and node.func.id in bound)):
            # a lambda applied to itself grows without bound: (lambda f: f(f(2)))(lambda y: y ** 16)
            raise _refuse(expression, f"a call of {_describe(node.func, bound)} (only the listed functions and "
                                      "classes are called, so that no expression runs without bound)")
        exponent = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.LShift)):
            exponent, what = node.right, "**" if isinstance(node.op, ast.Pow) else "<<"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "pow"
              and node.func.id not in bound):
            exponent, what = (node.args[1] if len(node.args) > 1 else ast.Constant(None)), "pow()"
        if exponent is not None:
            right = exponent.operand if isinstance(exponent, ast.UnaryOp) else exponent
            if not (isinstance(right, ast.Constant) and isinstance(right.value, (int, float))
                    and not isinstance(right.value, bool) and abs(right.value) <= MAX_EXPONENT):
                raise _refuse(expression, f"{what} with the right operand {ast.unparse(exponent)[:40]!r} (a power "
                                          f"or shift takes a number literal of at most {MAX_EXPONENT}, e.g. x ** 3, "
                                          "so that no expression runs without bound)")
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, str) and (len(value) > MAX_STRING or any(c in value for c in _STRING_BANNED)):
                shown = f"{value[:MAX_STRING]!r}{'...' if len(value) > MAX_STRING else ''}"
                raise _refuse(expression, f"the string {shown} "
                                          f"(strings have at most {MAX_STRING} characters, none of "
                                          f"{' '.join(_STRING_BANNED)})")
            if not (value is None or value is ... or isinstance(value, (bool, int, float, complex, str))):
                raise _refuse(expression, f"a {type(value).__name__} literal")
            return
        if isinstance(node, ast.Attribute):
            parts, inner = _dotted(node)
            if not isinstance(inner, ast.Name) or inner.id in bound or inner.id not in _ROOTS:
                visit(inner, bound)  # the innermost construct is named first: __import__ in __import__('os').x
                raise _refuse(expression, f"the attribute {parts[0]!r} of {_describe(inner, bound)} (attributes "
                                          "only in the dotted names of the activation namespaces)")
            for part in parts:
                if part.startswith("_"):
                    raise _refuse(expression, f"the attribute {part!r}")
            root = ALIASES.get(inner.id, inner.id)
            chain = ".".join([root, *parts])
            found = _namespace_of(chain)
            if found is None or found[1] in found[0].denied or (found[1] not in found[0].names
                                                                 and found[0].kind is None):
                for depth in range(len(parts) - 1, 0, -1):  # after an activation of a fixed list
                    prefix = _namespace_of(".".join([root, *parts[:depth]]))
                    if prefix is not None and prefix[1] in prefix[0].names:
                        raise _refuse(expression, f"the attribute {parts[depth]!r} of {prefix[0].path}."
                                                  f"{prefix[1]} (nothing may follow an activation)")
                raise _refuse(expression, f"the dotted name {chain!r} (not an activation of an allowed namespace)")
            node._gelulab_member = found
            chains.setdefault(found, len(chains))
            return
        if isinstance(node, ast.keyword):
            if node.arg is None:
                raise _refuse(expression, "a ** argument")
            visit(node.value, bound)
            if not _literal(node.value):
                raise _refuse(expression, f"the value of the keyword argument {node.arg!r} (keyword values are "
                                          "literals: numbers, True, False, None, strings)")
            return
        if isinstance(node, ast.Lambda):
            params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                      *(a for a in (node.args.vararg, node.args.kwarg) if a is not None)]
            for p in params:
                if p.arg.startswith("_"):
                    raise _refuse(expression, f"the parameter name {p.arg!r}")
            for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                visit(default, bound)
                if not _literal(default):
                    raise _refuse(expression, "a default value that is not a literal")
            visit(node.body, bound | {p.arg for p in params})
            return
        for child in ast.iter_child_nodes(node):
            visit(child, bound)

    visit(tree, frozenset())
    return chains


class _Items:
    """A list, tuple or string of `n` items whose items _fold does not follow."""

    def __init__(self, n: int):
        self.n = n


_FOLDED_CALLS = {"int": int, "float": float, "abs": abs, "max": max, "min": min, "round": round}


def _fold(node: ast.expr, expression: str, bound: frozenset):
    """The value of node when it is made of literals (numbers exactly, a list, tuple or string as its number of
    items), else None; computed only after its size is known to stay within MAX_BITS bits (**, <<, * of integers)
    or MAX_ITEMS items (* and + of lists, tuples and strings). Raises Refused naming the first subexpression beyond
    them, before it is computed: (2**16)**16 has 257 bits, ((2**16)**16)**16 4097, [0]*10**9 10**9 items."""
    def refuse(size: str):
        text = ast.unparse(node)
        return _refuse(expression, f"{text[:40]!r}{'...' if len(text) > 40 else ''} ({size}; powers, shifts and "
                                   f"products of literals have at most {MAX_BITS} bits, repeated or joined lists, "
                                   f"tuples and strings at most {MAX_ITEMS} items, so that no expression runs "
                                   "without bound)")

    def fold_children():
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                _fold(child, expression, bound)

    if isinstance(node, ast.Constant):
        value = node.value
        return _Items(len(value)) if isinstance(value, str) else value if isinstance(value, (int, float)) else None
    if isinstance(node, (ast.List, ast.Tuple)):
        fold_children()
        return _Items(len(node.elts))
    if isinstance(node, ast.Lambda):
        params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                  *(a for a in (node.args.vararg, node.args.kwarg) if a is not None)]
        _fold(node.body, expression, bound | {p.arg for p in params})
        return None
    if isinstance(node, ast.UnaryOp):
        value = _fold(node.operand, expression, bound)
        if isinstance(value, (int, float)) and not isinstance(node.op, ast.Not):
            try:
                return {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Invert: lambda v: ~v}[type(node.op)](value)
            except TypeError:  # ~ of a float: the evaluation says so
                return None
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in bound and \
            node.func.id in (*_FOLDED_CALLS, "pow"):
        args = [_fold(a, expression, bound) for a in node.args]
        for k in node.keywords:
            _fold(k.value, expression, bound)
        if node.keywords or not args or not all(isinstance(a, (int, float)) for a in args):
            return None
        if node.func.id == "pow":
            return _power(args, refuse) if len(args) == 2 else None
        try:
            return _FOLDED_CALLS[node.func.id](*args)
        except (ValueError, OverflowError, TypeError):  # the evaluation reports it
            return None
    if not isinstance(node, ast.BinOp):
        fold_children()
        return None
    left, right = _fold(node.left, expression, bound), _fold(node.right, expression, bound)
    if isinstance(node.op, ast.Mult) and (isinstance(left, _Items) or isinstance(right, _Items)):
        items, times = (left, right) if isinstance(left, _Items) else (right, left)
        if isinstance(times, int):  # a bool too
            if items.n * times > MAX_ITEMS:
                raise refuse(f"{items.n} × {times} = {items.n * times} items")
            return _Items(items.n * max(times, 0))
        return None
    if isinstance(node.op, ast.Add) and isinstance(left, _Items) and isinstance(right, _Items):
        if left.n + right.n > MAX_ITEMS:
            raise refuse(f"{left.n + right.n} items")
        return _Items(left.n + right.n)
    if not (isinstance(left, (int, float)) and isinstance(right, (int, float))):
        return None
    if isinstance(node.op, ast.Pow):
        return _power([left, right], refuse)
    if isinstance(left, int) and isinstance(right, int):
        if isinstance(node.op, ast.LShift) and right > 0 and left.bit_length() + right > MAX_BITS:
            raise refuse(f"{left.bit_length() + right} bits")
        if isinstance(node.op, ast.Mult) and left.bit_length() + right.bit_length() > MAX_BITS:
            raise refuse(f"about {left.bit_length() + right.bit_length()} bits")
    operations = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
                  ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
                  ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b, ast.BitAnd: lambda a, b: a & b,
                  ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b}
    try:
        return operations[type(node.op)](left, right) if type(node.op) in operations else None
    except (ArithmeticError, TypeError, ValueError):  # 1/0, 1.0 << 2: the evaluation reports it
        return None


def _power(args: list, refuse):
    """base ** exponent of two folded numbers, after its size is checked (see _fold)."""
    base, exponent = args
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        bits = (abs(base).bit_length() - 1) * exponent + 1  # at least this many: 2**16 has 17
        if bits > MAX_BITS:
            raise refuse(f"at least {bits} bits")
    try:
        value = base ** exponent
    except (ArithmeticError, TypeError, ValueError):
        return None
    return value if isinstance(value, (int, float)) else None


class _Resolved(ast.NodeTransformer):
    """Every accepted dotted name becomes the name its resolved value gets in the evaluation namespace."""

    def __init__(self, chains: dict):
        self.chains = chains

    def visit_Attribute(self, node: ast.Attribute):
        found = getattr(node, "_gelulab_member", None)
        if found is None:  # cannot happen after _check: every attribute is an accepted dotted name
            raise AssertionError("an attribute outside a checked dotted name")
        return ast.copy_location(ast.Name(_MEMBER.format(self.chains[found]), ast.Load()), node)


def _member(ns: Namespace, member: str, expression: str):
    """The value of ns.path.member, after importing ns's module (torch first, see evaluate). Raises Refused for a
    member outside ns's kind, ValueError when the module is missing or lacks the member."""
    name = f"{ns.path}.{member}"
    try:
        value = importlib.import_module(ns.import_name())
        for part in ns.path.split(".")[len(ns.import_name().split(".")):]:
            value = getattr(value, part)
        value = getattr(value, member)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{expression!r} failed: {_public_name(type(e))}: {' '.join(str(e).split())}") from e
    if member in ns.names:
        return value
    if ns.kind is None or isinstance(value, types.ModuleType) or not ns.kind(member, value):
        raise _refuse(expression, f"the dotted name {name!r} (not one of the {ns.described} of {ns.path}"
                                  f"{' or ' + ', '.join(ns.names) if ns.names else ''})")
    return value


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False

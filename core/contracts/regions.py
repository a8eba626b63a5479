"""A graph's elementwise regions, framework-free: the candidate activation sites every model reader of api.audit
looks for (backends/<framework>/audit.py), nodes in and regions out. A region is a maximal connected set of
elementwise nodes that depend on exactly one varying input (constants whose values are all equal aside) and that
holds a nonlinear op; a node with two varying inputs (a gate, a residual add, a bias vector) ends regions."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Node:
    """One op of a graph in topological order: name (for paths), op (its type in the runtime's words), inputs and
    outputs (tensor ids, hashable), kind: "nonlinear" (an activation op: Erf, Tanh, Logistic, Relu, GELU, ...),
    "elementwise" (Mul, Add, Pow, Cast, ... with one shape in and out) or None (anything else: a boundary);
    scope: nodes of different scopes are never in one region (a name scope "model/dense/Gelu", a jitted call, a
    single-op activation of its own), so that two activations applied one after the other are two sites."""

    name: str
    op: str
    inputs: list
    outputs: list
    kind: str | None
    extra: dict = field(default_factory=dict)
    scope: object = ""


@dataclass
class Region:
    """An elementwise region: nodes (indices into the node list, in order), input (the one varying tensor it
    reads), output (the tensor it gives the rest of the graph: the last one produced that is read outside or is a
    graph output)."""

    nodes: list
    input: object
    output: object


def elementwise_regions(nodes: Sequence[Node], is_constant: Callable[[object], bool],
                        graph_outputs: Sequence = ()) -> list[Region]:
    """The activation sites of a graph: the maximal connected sets of elementwise nodes of one scope whose only
    non-constant input is one tensor (constants aside: is_constant(tensor) says which tensors are uniform
    constants, a scalar or a scalar broadcast) and that hold a "nonlinear" node. A node that depends on two varying
    tensors (x * gate) or on a non-uniform constant (a bias vector) is not part of a region; the nodes it depends
    on still are. In the order of their first node."""
    produced = {}
    for i, n in enumerate(nodes):
        if n.kind is not None:
            for t in n.outputs:
                produced[t] = i
    deps: dict[int, frozenset] = {}
    for i, n in enumerate(nodes):
        if n.kind is None:
            continue
        d = set()
        for t in n.inputs:
            if t is None or is_constant(t):
                continue
            j = produced.get(t)
            # a node of two varying inputs (a gate, a bias vector) starts new regions at its output
            d |= deps[j] if j is not None and j < i and len(deps[j]) == 1 else {t}
        deps[i] = frozenset(d)
    single = {i for i, d in deps.items() if len(d) == 1}
    parent = {i: i for i in single}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in sorted(single):
        for t in nodes[i].inputs:
            j = produced.get(t)
            if j in single and nodes[j].scope == nodes[i].scope:
                parent[find(i)] = find(j)
    groups: dict[int, list] = {}
    for i in sorted(single):
        groups.setdefault(find(i), []).append(i)
    outputs = set(graph_outputs)
    readers: dict = {}
    for i, n in enumerate(nodes):
        for t in n.inputs:
            readers.setdefault(t, set()).add(i)
    regions = []
    for members in groups.values():
        if not any(nodes[i].kind == "nonlinear" for i in members):
            continue
        inside = set(members)
        out = None
        for i in members:
            for t in nodes[i].outputs:
                if t in outputs or readers.get(t, set()) - inside:
                    out = t
        if out is None:  # read by nothing: the last node's output
            out = nodes[members[-1]].outputs[0]
        # keep only the nodes the output depends on (a side branch read elsewhere is not this activation)
        need, keep = {out}, []
        for i in reversed(members):
            if set(nodes[i].outputs) & need:
                keep.append(i)
                need |= set(nodes[i].inputs)
        keep.reverse()
        made = {t for i in keep for t in nodes[i].outputs}
        varying = {t for i in keep for t in nodes[i].inputs if t is not None and t not in made and not is_constant(t)}
        if len(varying) == 1 and any(nodes[i].kind == "nonlinear" for i in keep):
            regions.append(Region(keep, varying.pop(), out))
    return sorted(regions, key=lambda r: r.nodes[0])


def connected(start, neighbours: Callable, joins: Callable) -> dict:
    """{id(node): node} of the nodes reachable from `start` (included) through neighbours(node), each neighbour k
    followed where joins(k): the connected component of the readers that walk a runtime's own graph objects
    (torch.fx nodes, ONNX NodeProtos, which need not be hashable)."""
    comp, stack = {}, [start]
    while stack:
        m = stack.pop()
        if id(m) in comp:
            continue
        comp[id(m)] = m
        stack.extend(k for k in neighbours(m) if id(k) not in comp and joins(k))
    return comp


def needed_by(out, inputs_of: Callable, inside: Callable) -> dict:
    """{id(node): node}: `out` and the nodes it depends on through inputs_of(node) while inside(node) holds (a
    region trimmed to its output: a side branch read elsewhere is not this activation)."""
    return connected(out, inputs_of, inside)


def scope(names: Sequence[str]) -> str:
    """The common "/"-scope of node names ("model/dense/Gelu"), else the names joined by ", "."""
    parts = [n.split("/") for n in names]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    if len(names) > 1 and len(common) == len(min(parts, key=len)):
        common = common[:-1]
    return "/".join(common) if common else ", ".join(names)

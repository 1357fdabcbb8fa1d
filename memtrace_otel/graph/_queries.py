"""Whole-graph queries on the memory evolution graph. Each takes the graph first (networkx style).

Op nodes are keyed by span id, variable nodes by ref; see ``docs/graph.md`` for the schema.
Queries never modify the graph they are given; those returning graphs return independent copies.
Lookups of one node's neighbours (what an op read and wrote, who wrote or read a variable, a
case's ops, the failed cases) are :class:`~memtrace_otel.graph.GraphIndex`'s, the one vocabulary
the methods, the job and the report use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import networkx as nx

from memtrace_otel._shim import nodes_of, pred_of, succ_of
from memtrace_otel.errors import GraphError
from memtrace_otel.graph._build import WRITE, op_order_key

__all__ = [
    "canonical_form",
    "case_subgraph",
    "execution_order",
    "is_op",
    "is_variable",
    "linked_trace_ids",
]

OrderKey = tuple[int, int, str, str, int, str]


def is_op(G: nx.MultiDiGraph, node: str) -> bool:
    """Whether ``node`` is an op node of ``G``.

    >>> from memtrace_otel.graph import example_graph
    >>> G = example_graph()
    >>> is_op(G, "a000000000000001"), is_op(G, "msg:1@1"), is_op(G, "nope")
    (True, False, False)
    """
    return bool(nodes_of(G).get(node, {}).get("type") == "op")


def is_variable(G: nx.MultiDiGraph, node: str) -> bool:
    """Whether ``node`` is a variable node of ``G``.

    >>> from memtrace_otel.graph import example_graph
    >>> is_variable(example_graph(), "msg:1@1")
    True
    """
    return bool(nodes_of(G).get(node, {}).get("type") == "variable")


def case_subgraph(G: nx.MultiDiGraph, case_id: str) -> nx.MultiDiGraph:
    """Everything the answer of one case depends on, across traces, as a new graph (a copy).

    Holds the ops whose ``case`` is ``case_id``, the variables they wrote, and every node upstream
    of those ops through read, write and version edges (so earlier versions of a memory are in,
    with the ops that wrote them). ``G.graph`` is copied with ``case_id`` added and the anomalies
    narrowed to those about nodes in the subgraph.

    Raises:
        GraphError: no op of ``G`` belongs to ``case_id``.

    >>> from memtrace_otel.graph import example_graph
    >>> H = case_subgraph(example_graph(), "c1")
    >>> sorted(n for n in H if is_op(H, n))  # doctest: +NORMALIZE_WHITESPACE
    ['a000000000000001', 'a000000000000002', 'a000000000000003', 'b000000000000001',
     'b000000000000002', 'c000000000000001', 'c000000000000002', 'c000000000000003']
    >>> "mem:1@1" in H, "q:2@1" in H, H.graph["case_id"]
    (True, False, 'c1')
    """
    roots = [
        n for n, d in nodes_of(G).items() if d.get("type") == "op" and d.get("case") == case_id
    ]
    if not roots:
        raise GraphError(f"no op belongs to case {case_id!r}")
    keep: set[str] = set(roots)
    for op in roots:
        keep.update(v for v, keyed in succ_of(G)[op].items() if WRITE in keyed)
    stack = list(roots)
    while stack:
        for upstream in pred_of(G)[stack.pop()]:
            if upstream not in keep:
                keep.add(upstream)
                stack.append(upstream)
    return _subgraph_copy(G, keep, case_id=case_id)


def execution_order(G: nx.MultiDiGraph, nodes: Iterable[str] | None = None) -> list[str]:
    """``nodes`` (default: all) in execution order.

    Ops are sorted by ``(start, end, trace_id, span_id)``, so ties are broken deterministically.
    A variable is placed right after the op that wrote it (its first writer); external
    variables, which no loaded op wrote, come first, sorted by ref. Nodes not in ``G`` raise
    :class:`GraphError`.

    >>> from memtrace_otel.graph import example_graph
    >>> G = example_graph()
    >>> execution_order(G, ["c000000000000002", "pred:1@1", "q:1@1", "a000000000000001"])
    ['q:1@1', 'a000000000000001', 'c000000000000002', 'pred:1@1']
    """
    chosen = list(nodes_of(G)) if nodes is None else list(nodes)
    return sorted(chosen, key=lambda node: _order_key(G, node))


def linked_trace_ids(G: nx.MultiDiGraph) -> list[str]:
    """Trace ids that ops link to but that are not loaded in ``G``: the traces to fetch next.

    >>> from memtrace_otel.graph import example_graph
    >>> linked_trace_ids(example_graph())
    ['000000000000000000000000000000ff']
    """
    loaded = set(G.graph.get("trace_ids", ()))
    linked = {
        link["trace_id"]
        for data in nodes_of(G).values()
        if data.get("type") == "op"
        for link in data.get("links", ())
    }
    return sorted(linked - loaded)


def canonical_form(G: nx.MultiDiGraph) -> dict[str, Any]:
    """A plain, sorted description of ``G``: equal graphs give equal forms (for tests and diffs).

    Holds ``nodes`` (sorted ``[key, attributes]`` pairs), ``edges`` (sorted
    ``[source, target, key, attributes]``) and ``graph`` (``G.graph``).

    >>> from memtrace_otel.graph import example_graph
    >>> canonical_form(example_graph()) == canonical_form(example_graph())
    True
    """
    return {
        "nodes": sorted([node, data] for node, data in G.nodes(data=True)),
        "edges": sorted(
            ([u, v, k, data] for u, v, k, data in G.edges(keys=True, data=True)),
            key=lambda edge: (edge[0], edge[1], edge[2]),
        ),
        "graph": G.graph,
    }


def _order_key(G: nx.MultiDiGraph, node: str) -> OrderKey:
    data = nodes_of(G).get(node)
    if data is None:
        raise GraphError(f"{node!r} is not a node of the graph")
    if data.get("type") == "op":
        return (*op_order_key(data), 0, "")
    writer = data.get("writer")
    if writer is None or writer not in nodes_of(G):
        return (-1, -1, "", "", 1, node)
    return (*op_order_key(nodes_of(G)[writer]), 1, node)


def _subgraph_copy(G: nx.MultiDiGraph, keep: set[str], **extra: Any) -> nx.MultiDiGraph:
    H: nx.MultiDiGraph = G.subgraph(keep).copy()
    graph = dict(G.graph)
    graph["anomalies"] = [
        a
        for a in G.graph.get("anomalies", ())
        if a.get("ref") in keep or any(s in keep for s in a.get("span_ids", ()))
    ]
    graph["non_op_spans"] = dict(G.graph.get("non_op_spans", {}))
    graph["trace_ids"] = list(G.graph.get("trace_ids", ()))
    graph.update(extra)
    H.graph = graph
    return H

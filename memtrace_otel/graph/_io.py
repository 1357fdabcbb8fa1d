"""Writing and reading evolution graphs: node-link JSON (round-trips), GraphML and Graphviz DOT.

Node-link JSON keeps everything: :func:`from_node_link_json` gives back a graph equal to the one
written, which :func:`~memtrace_otel.graph.add_records` can extend. GraphML and DOT are for other
tools (Gephi, yEd, Graphviz): GraphML stores lists and dictionaries as JSON strings and leaves out
``None`` values; DOT keeps only what a picture needs.
"""

from __future__ import annotations

import json
import os
from typing import Any

import networkx as nx

from memtrace_otel.errors import DecodeError

__all__ = ["from_node_link_json", "to_dot", "to_node_link_json", "write_graphml"]

# Node keys go under "node": variables have an attribute called "id" of their own.
_NODE_LINK_NAMES: dict[str, str] = {
    "source": "source",
    "target": "target",
    "name": "node",
    "key": "key",
    "edges": "edges",
    "nodes": "nodes",
}


def to_node_link_json(G: nx.MultiDiGraph, *, indent: int | None = None) -> str:
    """``G`` as node-link JSON (nodes under ``"node"``, edges under ``"edges"``, with keys).

    >>> from memtrace_otel.graph import canonical_form, example_graph
    >>> G = example_graph()
    >>> canonical_form(from_node_link_json(to_node_link_json(G))) == canonical_form(G)
    True
    """
    data = nx.node_link_data(G, **_NODE_LINK_NAMES)
    return json.dumps(data, indent=indent, ensure_ascii=False, sort_keys=True)


def from_node_link_json(text: str | bytes, *, path: str = "") -> nx.MultiDiGraph:
    """Read a graph written by :func:`to_node_link_json`.

    Args:
        text: the JSON document.
        path: where it came from, for error messages.

    Raises:
        DecodeError: the text is not JSON or not a node-link graph.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DecodeError(f"not JSON: {exc}", path=path) from exc
    if not isinstance(data, dict):
        raise DecodeError("expected a JSON object", path=path)
    for field in ("nodes", "edges", "graph"):
        if field not in data:
            raise DecodeError("not a node-link graph", path=path, field=field)
    try:
        G: nx.MultiDiGraph = nx.node_link_graph(
            data, directed=True, multigraph=True, **_NODE_LINK_NAMES
        )
    except (KeyError, TypeError, nx.NetworkXError) as exc:
        raise DecodeError(f"not a node-link graph: {exc!r}", path=path) from exc
    if not isinstance(G, nx.MultiDiGraph):
        raise DecodeError("expected a directed multigraph", path=path, field="directed")
    return G


def write_graphml(G: nx.MultiDiGraph, path: str | os.PathLike[str]) -> None:
    """Write ``G`` as GraphML; lists and dictionaries become JSON strings, ``None`` is left out.

    >>> import tempfile, pathlib
    >>> from memtrace_otel.graph import example_graph
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = pathlib.Path(tmp, "g.graphml")
    ...     write_graphml(example_graph(), out)
    ...     H = nx.read_graphml(out, force_multigraph=True)
    >>> H.nodes["mem:1@2"]["value"], H.nodes["mem:1@2"]["version"]
    ('lives in Lisbon', 2)
    """
    flat = nx.MultiDiGraph()
    flat.graph.update(_flat(G.graph))
    for node, data in G.nodes(data=True):
        flat.add_node(node, **_flat(data))
    for u, v, key, data in G.edges(keys=True, data=True):
        flat.add_edge(u, v, key=key, kind=key, **_flat(data))
    nx.write_graphml(flat, os.fspath(path), named_key_ids=True)


def to_dot(G: nx.MultiDiGraph, *, max_label: int = 40) -> str:
    """``G`` in Graphviz DOT: ops as boxes, variables as ellipses (dashed when external).

    Args:
        G: the graph.
        max_label: longest value excerpt shown under a variable's ref.

    >>> from memtrace_otel.graph import example_graph
    >>> print(to_dot(example_graph()).splitlines()[0])
    digraph memtrace {
    """
    lines = ["digraph memtrace {", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    for node, data in sorted(G.nodes(data=True)):
        if data.get("type") == "op":
            label = f"{data.get('kind')}\n{data.get('name')}"
            style = ", color=red" if data.get("status") == "ERROR" else ""
            lines.append(f"  {_quote(node)} [shape=box, label={_quote(label)}{style}];")
        else:
            label = node
            value = data.get("value")
            if isinstance(value, str):
                excerpt = value if len(value) <= max_label else value[: max_label - 1] + "…"
                label += "\n" + excerpt
            style = ", style=dashed" if data.get("external") else ""
            lines.append(f"  {_quote(node)} [shape=ellipse, label={_quote(label)}{style}];")
    for u, v, key in sorted(G.edges(keys=True)):
        style = " [style=dotted]" if key == "version" else ""
        lines.append(f"  {_quote(u)} -> {_quote(v)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in data.items():
        if value is None:
            continue
        if isinstance(value, str | bool | int | float):
            flat[name] = value
        else:
            flat[name] = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return flat

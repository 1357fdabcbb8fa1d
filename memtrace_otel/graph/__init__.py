"""The memory evolution graph: building, querying and writing it.

The graph is a ``networkx.MultiDiGraph`` with op nodes (keyed by span id) and variable nodes
(keyed by ref ``<id>@<version>``); edges run variable -> op (key ``"read"``), op -> variable
(``"write"``) and ``<id>@v -> <id>@v+1`` (``"version"``). ``docs/graph.md`` describes every
attribute. :func:`build_graph` and :func:`add_records` (``_build.py``) are the one builder, shared
with the live :class:`~memtrace_otel.processing.EvolutionGraphProcessor`.

Lookups go through one index per graph, :func:`graph_index` (``_index.py``), built once and
cached while the graph does not grow; whole-graph queries (a case's subgraph, execution order,
linked traces) are functions taking the graph first (``_queries.py``).

>>> from memtrace_otel.graph import example_graph, graph_index
>>> G = example_graph()  # the index holds its graph weakly: keep it
>>> index = graph_index(G)
>>> index.writer("mem:1@2"), index.readers("mem:1@1"), sorted(index.failed)
('b000000000000002', ['b000000000000002'], ['c1'])
"""

from memtrace_otel.graph._build import (
    READ,
    VERSION,
    WRITE,
    add_records,
    build_graph,
    new_graph,
    op_order_key,
    remove_ops,
)
from memtrace_otel.graph._case import Case
from memtrace_otel.graph._example import example_graph, example_records
from memtrace_otel.graph._index import GraphIndex, graph_index
from memtrace_otel.graph._io import from_node_link_json, to_dot, to_node_link_json, write_graphml
from memtrace_otel.graph._queries import (
    canonical_form,
    case_subgraph,
    execution_order,
    is_op,
    is_variable,
    linked_trace_ids,
)

__all__ = [
    "READ",
    "VERSION",
    "WRITE",
    "Case",
    "GraphIndex",
    "add_records",
    "build_graph",
    "canonical_form",
    "case_subgraph",
    "example_graph",
    "example_records",
    "execution_order",
    "from_node_link_json",
    "graph_index",
    "is_op",
    "is_variable",
    "linked_trace_ids",
    "new_graph",
    "op_order_key",
    "remove_ops",
    "to_dot",
    "to_node_link_json",
    "write_graphml",
]

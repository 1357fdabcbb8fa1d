"""The memory evolution graph: building, querying and writing it.

The graph is a ``networkx.MultiDiGraph`` with op nodes (keyed by span id) and variable nodes
(keyed by ref ``<id>@<version>``); edges run variable -> op (key ``"read"``), op -> variable
(``"write"``) and ``<id>@v -> <id>@v+1`` (``"version"``). ``docs/graph.md`` describes every
attribute. :func:`build_graph` and :func:`add_records` (``_build.py``) are the one builder, shared
with the live :class:`~memtrace_otel.processing.EvolutionGraphProcessor`.

>>> from memtrace_otel.graph import example_graph, lineage, writers_of
>>> G = example_graph()
>>> writers_of(G, "mem:1@2")
['b000000000000002']
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
    failed_case_ids,
    is_op,
    is_variable,
    lineage,
    linked_trace_ids,
    readers_of,
    writers_of,
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
    "failed_case_ids",
    "from_node_link_json",
    "graph_index",
    "is_op",
    "is_variable",
    "lineage",
    "linked_trace_ids",
    "new_graph",
    "op_order_key",
    "readers_of",
    "remove_ops",
    "to_dot",
    "to_node_link_json",
    "write_graphml",
    "writers_of",
]

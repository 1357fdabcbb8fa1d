"""Folding spans into the memory evolution graph: the one builder and the live span processor.

:func:`build_graph` and :func:`add_records` turn neutral :class:`~memtrace_otel.semconv.SpanRecord`
objects into a ``networkx.MultiDiGraph`` (schema in ``docs/graph.md``); offline sources and the
live :class:`EvolutionGraphProcessor` both use them.
"""

from memtrace_otel.processing._fold import (
    READ,
    VERSION,
    WRITE,
    add_records,
    build_graph,
    new_graph,
    op_order_key,
    remove_ops,
)
from memtrace_otel.processing._processor import (
    DEFAULT_FOLD_INTERVAL,
    DEFAULT_MAX_BUFFER,
    DEFAULT_MAX_OPS,
    EvolutionGraphProcessor,
)

__all__ = [
    "DEFAULT_FOLD_INTERVAL",
    "DEFAULT_MAX_BUFFER",
    "DEFAULT_MAX_OPS",
    "READ",
    "VERSION",
    "WRITE",
    "EvolutionGraphProcessor",
    "add_records",
    "build_graph",
    "new_graph",
    "op_order_key",
    "remove_ops",
]

"""The live span processor: folding spans into the memory evolution graph as the app runs.

:class:`EvolutionGraphProcessor` feeds finished spans to the one builder in
:mod:`memtrace_otel.graph` (``build_graph``/``add_records``, still importable from here).
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

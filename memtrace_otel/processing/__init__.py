"""The live span processor: folding spans into the memory evolution graph as the app runs.

:class:`EvolutionGraphProcessor` feeds finished spans to the one builder in
:mod:`memtrace_otel.graph`; the builder's own names (``build_graph``, ``add_records``, ...) are
imported from there.
"""

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
    "EvolutionGraphProcessor",
]

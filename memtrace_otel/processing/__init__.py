"""The live span processor: folding spans into the memory evolution graph as the app runs.

:class:`EvolutionGraphProcessor` feeds finished spans to the one builder in
:mod:`memtrace_otel.graph`. The builder's names (``build_graph``, ``add_records``, ...) used to be
exported here; they still import from here, with a ``DeprecationWarning``.
"""

from typing import Any

from memtrace_otel._internal import lazy_names
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

_moved = lazy_names(
    __name__,
    {
        **dict.fromkeys(
            ["READ", "VERSION", "WRITE", "add_records", "build_graph", "new_graph", "remove_ops"],
            "memtrace_otel.graph",
        ),
        "op_order_key": "memtrace_otel.graph._build",
    },
)


def __getattr__(name: str) -> Any:
    return _moved(name)

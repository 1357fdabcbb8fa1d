"""The live span processor: folding spans into the memory evolution graph as the app runs.

:class:`EvolutionGraphProcessor` feeds finished spans to the one builder in
:mod:`memtrace_otel.graph`; the builder's own names (``build_graph``, ``add_records``, ...) are
imported from there. The graph is a networkx one: ``pip install 'memtrace-otel[graph]'`` in an app
(``[batch]`` has it too).
"""

try:
    from memtrace_otel.processing._processor import (
        DEFAULT_FOLD_INTERVAL,
        DEFAULT_MAX_BUFFER,
        DEFAULT_MAX_OPS,
        EvolutionGraphProcessor,
    )
except ModuleNotFoundError as exc:  # an app installed without the graph
    if exc.name != "networkx":
        raise
    raise ModuleNotFoundError(
        "memtrace_otel.processing keeps the app's memory evolution graph in networkx, which the "
        "app-side install leaves out: pip install 'memtrace-otel[graph]'",
        name=exc.name,
    ) from exc

__all__ = [
    "DEFAULT_FOLD_INTERVAL",
    "DEFAULT_MAX_BUFFER",
    "DEFAULT_MAX_OPS",
    "EvolutionGraphProcessor",
]

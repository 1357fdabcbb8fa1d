"""memtrace-otel: LLM memory systems as memory evolution graphs on OpenTelemetry.

The manual API lives in :mod:`memtrace_otel.instrumentation`; the most used names are
re-exported here. Importing the package needs only ``opentelemetry-api``: :func:`configure`
(from :mod:`memtrace_otel.export`, which needs the SDK) is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtrace_otel._internal import lazy_names
from memtrace_otel._version import __version__
from memtrace_otel.instrumentation import (
    CaptureConfig,
    MemTracer,
    Variable,
    current_op,
    suppress_tracing,
)

if TYPE_CHECKING:
    from memtrace_otel.export import configure


__all__ = [
    "CaptureConfig",
    "MemTracer",
    "Variable",
    "__version__",
    "configure",
    "current_op",
    "suppress_tracing",
]

_lazy = lazy_names(__name__, {"configure": "memtrace_otel.export"})


def __getattr__(name: str) -> Any:
    return _lazy(name)

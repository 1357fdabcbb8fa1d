"""memtrace-otel: LLM memory systems as memory evolution graphs on OpenTelemetry.

The manual API lives in :mod:`memtrace_otel.instrumentation`; the most used names are
re-exported here.
"""

from __future__ import annotations

__version__ = "0.1.0"

from memtrace_otel.export import configure
from memtrace_otel.instrumentation import (
    CaptureConfig,
    MemTracer,
    Variable,
    current_op,
    suppress_tracing,
)

__all__ = [
    "CaptureConfig",
    "MemTracer",
    "Variable",
    "__version__",
    "configure",
    "current_op",
    "suppress_tracing",
]

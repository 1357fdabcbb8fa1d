"""Auto-instrumentation of LangGraph's long-term memory store (``BaseStore`` implementations).

Enabled by ``opentelemetry-instrument`` (entry point ``memtrace_langgraph``) or in code::

    from memtrace_otel.instrumentors.langgraph import LangGraphInstrumentor
    LangGraphInstrumentor().instrument(tracer_provider=provider)

See :mod:`memtrace_otel.instrumentors.langgraph.patch`. Importing this module does not import
langgraph.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from memtrace_otel.instrumentors._base import PatchingInstrumentor
from memtrace_otel.instrumentors._common import make_tracer
from memtrace_otel.instrumentors.langgraph.package import _instruments


class LangGraphInstrumentor(PatchingInstrumentor):
    """Records store puts, gets, searches and deletes as memory ops with versions.

    ``instrument()`` options: ``tracer_provider``, ``capture``, ``registry``. An installed
    langgraph outside :data:`_instruments` gets a warning and is not patched.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments  # read at call time: tests patch it

    def _instrument(self, **kwargs: Any) -> None:
        if self._supported_version() is None:
            return
        from memtrace_otel.instrumentors.langgraph.patch import (
            SYSTEM,
            TARGETS,
            LangGraphTelemetry,
        )

        telemetry = LangGraphTelemetry(make_tracer(SYSTEM, kwargs))
        self._install(TARGETS, telemetry)


__all__ = ["LangGraphInstrumentor"]

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

# The module opts out of type checking (``# type: ignore`` at its top): BaseInstrumentor is Any.
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from memtrace_otel.instrumentors._common import Patcher, make_tracer, supported_version
from memtrace_otel.instrumentors.langgraph.package import _instruments


class LangGraphInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records store puts, gets, searches and deletes as memory ops with versions.

    ``instrument()`` options: ``tracer_provider``, ``capture``, ``registry``. An installed
    langgraph outside :data:`_instruments` gets a warning and is not patched.
    """

    _patcher: Patcher | None = None
    _telemetry: Any = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _check_dependency_conflicts(self) -> None:
        return None  # checked in _instrument, with a warning (see Mem0Instrumentor)

    def _instrument(self, **kwargs: Any) -> None:
        if supported_version(self.instrumentation_dependencies(), type(self).__name__) is None:
            return
        from memtrace_otel.instrumentors.langgraph.patch import (
            SYSTEM,
            TARGETS,
            LangGraphTelemetry,
        )

        telemetry = LangGraphTelemetry(make_tracer(SYSTEM, kwargs))
        patcher = Patcher(TARGETS, telemetry.wrapper)
        self._telemetry, self._patcher = telemetry, patcher
        patcher.apply()

    def _uninstrument(self, **kwargs: Any) -> None:
        patcher, telemetry = self._patcher, self._telemetry
        self._patcher = self._telemetry = None
        if patcher is not None:
            patcher.undo()
        if telemetry is not None:
            telemetry.close()


__all__ = ["LangGraphInstrumentor"]

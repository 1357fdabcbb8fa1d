"""Auto-instrumentation of OpenAI chat completions as ``generate`` ops (sync, async, streaming).

Enabled by ``opentelemetry-instrument`` (entry point ``memtrace_openai``) or in code::

    from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
    OpenAIInstrumentor().instrument(tracer_provider=provider)

See :mod:`memtrace_otel.instrumentors.openai.patch`. Importing this module does not import openai.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# The module opts out of type checking (``# type: ignore`` at its top): BaseInstrumentor is Any.
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from memtrace_otel.instrumentors._common import Patcher, make_tracer, supported_version
from memtrace_otel.instrumentors.openai.package import _instruments


class OpenAIInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records chat completions as ``generate`` ops reading the memories in their prompt.

    ``instrument()`` options: ``tracer_provider``, ``capture``, ``registry``, ``system`` (the
    ``memtrace.system`` of the ops; default none). An installed openai outside
    :data:`_instruments` gets a warning and is not patched.
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
        from memtrace_otel.instrumentors.openai.patch import TARGETS, OpenAITelemetry

        system = kwargs.get("system")
        telemetry = OpenAITelemetry(
            make_tracer(system if isinstance(system, str) else None, kwargs)
        )
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


__all__ = ["OpenAIInstrumentor"]

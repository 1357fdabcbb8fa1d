"""Auto-instrumentation of OpenAI chat completions as ``generate`` ops (sync, async, streaming).

Enabled by ``opentelemetry-instrument`` (entry point ``memtrace_openai``) or in code::

    from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
    OpenAIInstrumentor().instrument(tracer_provider=provider)

See :mod:`memtrace_otel.instrumentors.openai.patch`. Importing this module does not import openai.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from memtrace_otel.instrumentors._base import PatchingInstrumentor
from memtrace_otel.instrumentors._common import make_tracer
from memtrace_otel.instrumentors.openai.package import _instruments


class OpenAIInstrumentor(PatchingInstrumentor):
    """Records chat completions as ``generate`` ops reading the memories in their prompt.

    ``instrument()`` options: ``tracer_provider``, ``capture``, ``registry``, ``system`` (the
    ``memtrace.system`` of the ops; default none). An installed openai outside
    :data:`_instruments` gets a warning and is not patched.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments  # read at call time: tests patch it

    def _instrument(self, **kwargs: Any) -> None:
        if self._supported_version() is None:
            return
        from memtrace_otel.instrumentors.openai.patch import TARGETS, OpenAITelemetry

        system = kwargs.get("system")
        telemetry = OpenAITelemetry(
            make_tracer(system if isinstance(system, str) else None, kwargs)
        )
        self._install(TARGETS, telemetry)


__all__ = ["OpenAIInstrumentor"]

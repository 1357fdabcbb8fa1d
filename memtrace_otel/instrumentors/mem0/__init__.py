"""Auto-instrumentation of Mem0 (``mem0ai``): ``Memory`` and ``AsyncMemory``.

Enabled by ``opentelemetry-instrument`` (entry point ``memtrace_mem0``) or in code::

    from memtrace_otel.instrumentors.mem0 import Mem0Instrumentor
    Mem0Instrumentor().instrument(tracer_provider=provider)

What it records is described in :mod:`memtrace_otel.instrumentors.mem0.patch` and
``docs/instrumentors.md``. Importing this module does not import mem0.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# The module opts out of type checking (``# type: ignore`` at its top): BaseInstrumentor is Any.
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from memtrace_otel.instrumentors._common import Patcher, make_tracer, supported_version
from memtrace_otel.instrumentors.mem0.package import _instruments


class Mem0Instrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records Mem0's public methods, pipeline phases and record writes as memory ops.

    ``instrument()`` options: ``tracer_provider``, ``capture`` (a ``CaptureConfig``; content
    capture is off unless the environment turns it on), ``registry`` (a ``WriterRegistry``).
    An installed mem0ai outside :data:`_instruments` gets a warning and is not patched.
    """

    _patcher: Patcher | None = None
    _telemetry: Any = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _check_dependency_conflicts(self) -> None:
        # Checked in _instrument instead, so that an unsupported version is one warning on
        # both paths (opentelemetry-instrument skips the check; a manual call would log an error).
        return None

    def _instrument(self, **kwargs: Any) -> None:
        version = supported_version(self.instrumentation_dependencies(), type(self).__name__)
        if version is None:
            return
        from memtrace_otel.instrumentors.mem0.patch import (
            MODULE,
            SYSTEM,
            TARGETS,
            Mem0Telemetry,
            patch_thread_pools,
            pipeline_of,
        )

        telemetry = Mem0Telemetry(make_tracer(SYSTEM, kwargs), pipeline_of(version))
        patcher = Patcher(TARGETS, telemetry.wrapper, {MODULE: patch_thread_pools})
        self._telemetry, self._patcher = telemetry, patcher
        patcher.apply()

    def _uninstrument(self, **kwargs: Any) -> None:
        patcher, telemetry = self._patcher, self._telemetry
        self._patcher = self._telemetry = None
        if patcher is not None:
            patcher.undo()
        if telemetry is not None:
            telemetry.close()


__all__ = ["Mem0Instrumentor"]

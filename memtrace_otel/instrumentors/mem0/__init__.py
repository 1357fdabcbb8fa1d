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

from memtrace_otel.instrumentors._base import PatchingInstrumentor
from memtrace_otel.instrumentors._common import make_tracer
from memtrace_otel.instrumentors.mem0.package import _instruments


class Mem0Instrumentor(PatchingInstrumentor):
    """Records Mem0's public methods, pipeline phases and record writes as memory ops.

    ``instrument()`` options: ``tracer_provider``, ``capture`` (a ``CaptureConfig``; content
    capture is off unless the environment turns it on), ``registry`` (a ``WriterRegistry``).
    An installed mem0ai outside :data:`_instruments` gets a warning and is not patched.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments  # read at call time: tests patch it

    def _instrument(self, **kwargs: Any) -> None:
        version = self._supported_version()
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
        self._install(TARGETS, telemetry, {MODULE: patch_thread_pools})


__all__ = ["Mem0Instrumentor"]

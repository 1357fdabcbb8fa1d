"""The ``memtrace_file`` span exporter for ``opentelemetry-instrument``.

``OTEL_TRACES_EXPORTER=memtrace_file`` makes the OpenTelemetry distro append OTLP JSON Lines
(the Collector file exporter's format) to ``MEMTRACE_TRACES_FILE`` (default
``./memtrace-traces.jsonl``), which ``memtrace attribute`` reads with no server running.
"""

from __future__ import annotations

import os

from memtrace_otel.export._configure import DEFAULT_TRACES_FILE
from memtrace_otel.export._otlp_json import OtlpJsonLinesExporter
from memtrace_otel.semconv.env import ENV_MEMTRACE_TRACES_FILE


class TracesFileExporter(OtlpJsonLinesExporter):
    """An :class:`OtlpJsonLinesExporter` built with no arguments, as exporter entry points are."""

    def __init__(self) -> None:
        super().__init__(os.environ.get(ENV_MEMTRACE_TRACES_FILE) or DEFAULT_TRACES_FILE)


__all__ = ["TracesFileExporter"]

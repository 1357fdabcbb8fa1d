"""The SDK side: turning finished spans into records and files, and setting up a provider.

Everything here needs ``opentelemetry-sdk``; the manual API (:mod:`memtrace_otel.instrumentation`)
and the instrumentors need only ``opentelemetry-api``, as in opentelemetry-python-contrib. An app
opts in to these pieces:

- :func:`configure`: a ``TracerProvider`` from the standard ``OTEL_*`` variables, or one that
  appends OTLP JSON Lines to a local file;
- :class:`OtlpJsonLinesExporter`: that file exporter (the Collector file exporter's format), and
  :class:`TracesFileExporter`, the same built from ``MEMTRACE_TRACES_FILE`` for
  ``OTEL_TRACES_EXPORTER=memtrace_file``;
- :func:`span_to_record`: an SDK ``ReadableSpan`` as the neutral
  :class:`~memtrace_otel.semconv.SpanRecord` the graph builder reads.
"""

from memtrace_otel.export._batch import CountingBatchSpanProcessor
from memtrace_otel.export._configure import DEFAULT_TRACES_FILE, configure, resolve_exporter
from memtrace_otel.export._file import TracesFileExporter
from memtrace_otel.export._otlp_json import (
    OtlpJsonLinesExporter,
    dumps_request,
    encode_request,
    span_to_record,
)

__all__ = [
    "DEFAULT_TRACES_FILE",
    "CountingBatchSpanProcessor",
    "OtlpJsonLinesExporter",
    "TracesFileExporter",
    "configure",
    "dumps_request",
    "encode_request",
    "resolve_exporter",
    "span_to_record",
]

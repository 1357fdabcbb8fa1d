"""The manual instrumentation API: memory operations as OpenTelemetry spans.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> mt = MemTracer(tracer_provider=TracerProvider(), system="rag", store_id="user-1")
>>> doc = mt.variable("doc:1", "Ana moved to Porto in May.", category="memory")
>>> with mt.create("rag.store", inputs=[doc]) as op:
...     rec = op.output(doc.next("Ana moved to Porto in May."))
>>> rec.ref
'doc:1@2'
"""

from memtrace_otel.export import (
    DEFAULT_TRACES_FILE,
    CountingBatchSpanProcessor,
    OtlpJsonLinesExporter,
    configure,
    dumps_request,
    encode_request,
    resolve_exporter,
    span_to_record,
)
from memtrace_otel.instrumentation._capture import (
    DEFAULT_MAX_VALUE_LENGTH,
    CaptureConfig,
    canonical_value,
    digest,
    parse_capture_mode,
    redact_pii,
)
from memtrace_otel.instrumentation._feedback import (
    AnswerRef,
    last_answer,
    note_answer,
    send_feedback,
)
from memtrace_otel.instrumentation._registry import (
    WriterRegistry,
    format_traceparent,
    parse_traceparent,
)
from memtrace_otel.instrumentation._suppress import is_tracing_suppressed, suppress_tracing
from memtrace_otel.instrumentation._tracer import InputLike, MemTracer, Op, current_op
from memtrace_otel.instrumentation._variables import Variable

__all__ = [
    "DEFAULT_MAX_VALUE_LENGTH",
    "DEFAULT_TRACES_FILE",
    "AnswerRef",
    "CaptureConfig",
    "CountingBatchSpanProcessor",
    "InputLike",
    "MemTracer",
    "Op",
    "OtlpJsonLinesExporter",
    "Variable",
    "WriterRegistry",
    "canonical_value",
    "configure",
    "current_op",
    "digest",
    "dumps_request",
    "encode_request",
    "format_traceparent",
    "is_tracing_suppressed",
    "last_answer",
    "note_answer",
    "parse_capture_mode",
    "parse_traceparent",
    "redact_pii",
    "resolve_exporter",
    "send_feedback",
    "span_to_record",
    "suppress_tracing",
]

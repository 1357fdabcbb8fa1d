"""The manual instrumentation API: memory operations as OpenTelemetry spans.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> mt = MemTracer(tracer_provider=TracerProvider(), system="rag", store_id="user-1")
>>> doc = mt.variable("doc:1", "Ana moved to Porto in May.", category="memory")
>>> with mt.create("rag.store", inputs=[doc]) as op:
...     rec = op.output(doc.next("Ana moved to Porto in May."))
>>> rec.ref
'doc:1@2'

Only ``opentelemetry-api`` is needed here, as in opentelemetry-python-contrib: the SDK pieces
(``configure``, the file exporter, ``span_to_record``) live in :mod:`memtrace_otel.export`.
"""

from memtrace_otel.instrumentation._capture import (
    DEFAULT_MAX_VALUE_LENGTH,
    CaptureConfig,
    canonical_value,
    digest,
    parse_capture_mode,
    redact_pii,
    redact_secrets,
)
from memtrace_otel.instrumentation._feedback import (
    MAX_FEEDBACK_TEXT_BYTES,
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
from memtrace_otel.instrumentation._signing import FeedbackKey
from memtrace_otel.instrumentation._suppress import is_tracing_suppressed, suppress_tracing
from memtrace_otel.instrumentation._tracer import InputLike, MemTracer, Op, current_op
from memtrace_otel.instrumentation._variables import Variable

__all__ = [
    "DEFAULT_MAX_VALUE_LENGTH",
    "MAX_FEEDBACK_TEXT_BYTES",
    "AnswerRef",
    "CaptureConfig",
    "FeedbackKey",
    "InputLike",
    "MemTracer",
    "Op",
    "Variable",
    "WriterRegistry",
    "canonical_value",
    "current_op",
    "digest",
    "format_traceparent",
    "is_tracing_suppressed",
    "last_answer",
    "note_answer",
    "parse_capture_mode",
    "parse_traceparent",
    "redact_pii",
    "redact_secrets",
    "send_feedback",
    "suppress_tracing",
]

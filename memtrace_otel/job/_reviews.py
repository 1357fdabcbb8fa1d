"""People reviewing verdicts (contract v0.3, section 5), and the measured precision of verdicts.

A review is a short ``memtrace.review`` span parented to the verdict span it judges, carrying one
``gen_ai.evaluation.result`` event named ``memtrace.review`` whose score label is ``confirmed``,
``rejected`` or ``other_op`` (then ``memtrace.review.op_id`` names the right op). Reviews travel
like any other span, so they are read back from the same sources as the app's traces, and the
precision of verdicts, confirmed / (confirmed + rejected + other_op), is measured where the verdicts
were made: in production.

A review is read as a review, never as an answer's evaluation or as activity of a store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from memtrace_otel.semconv import ReviewLabel, SpanRecord
from memtrace_otel.semconv import attributes as A

__all__ = [
    "Review",
    "is_review_span",
    "review_of",
    "review_precision",
    "send_review",
    "verdict_span_index",
]

REVIEW_SERVICE = "memtrace-review"


@dataclass(frozen=True)
class Review:
    """One person's review of one verdict span."""

    verdict_trace_id: str
    verdict_span_id: str
    label: str
    op_id: str | None
    time: int


def is_review_span(record: SpanRecord) -> bool:
    """Whether ``record`` is a review of a verdict (``memtrace.review``)."""
    return record.name == A.MEMTRACE_REVIEW_SPAN


def review_of(record: SpanRecord) -> Review | None:
    """The review ``record`` carries, or ``None`` (not a review span, no review event, a label
    outside :class:`ReviewLabel`, or no verdict span as its parent)."""
    if not is_review_span(record) or not record.parent_span_id:
        return None
    for event in record.events:
        attrs = event.attributes
        if event.name != A.GEN_AI_EVALUATION_RESULT_EVENT:
            continue
        if attrs.get(A.GEN_AI_EVALUATION_NAME) != A.MEMTRACE_REVIEW_SPAN:
            continue
        label = attrs.get(A.GEN_AI_EVALUATION_SCORE_LABEL)
        if label not in {str(v) for v in ReviewLabel}:
            return None
        op_id = attrs.get(A.MEMTRACE_REVIEW_OP_ID)
        return Review(
            record.trace_id,
            record.parent_span_id,
            str(label),
            str(op_id) if op_id else None,
            int(event.time_unix_nano or record.start_time_unix_nano or 0),
        )
    return None


def verdict_span_index(records: Iterable[SpanRecord]) -> dict[str, dict[str, Any]]:
    """Verdict spans by span id: their trace id, case id and error type."""
    index: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.name != A.MEMTRACE_ATTRIBUTION_SPAN:
            continue
        attrs = record.attributes
        index[record.span_id] = {
            "trace_id": record.trace_id,
            "span_id": record.span_id,
            "case_id": attrs.get(A.MEMTRACE_ATTRIBUTION_CASE_ID),
            "error_type": attrs.get(A.MEMTRACE_ATTRIBUTION_ERROR_TYPE),
            "op_id": attrs.get(A.MEMTRACE_ATTRIBUTION_OP_ID),
            "confidence": attrs.get(A.MEMTRACE_ATTRIBUTION_CONFIDENCE),
            "time": record.start_time_unix_nano or 0,
        }
    return index


def review_precision(
    verdicts: Mapping[str, Mapping[str, Any]], reviews: Iterable[Review]
) -> dict[str, Any]:
    """Precision of reviewed verdicts, overall and by error type.

    ``verdicts`` is :func:`verdict_span_index`'s result; a verdict's latest review counts (a
    person changing their mind); reviews of verdict spans not loaded are counted apart.

    >>> v = {"s1": {"error_type": "UpdateError"}, "s2": {"error_type": "RetrievalError"}}
    >>> r = [Review("t", "s1", "confirmed", None, 1), Review("t", "s2", "rejected", None, 1)]
    >>> p = review_precision(v, r)
    >>> p["precision"], p["reviews"], p["by_error_type"]["UpdateError"]["precision"]
    (0.5, 2, 1.0)
    """
    latest: dict[str, Review] = {}
    orphans = 0
    for review in reviews:
        if review.verdict_span_id not in verdicts:
            orphans += 1
            continue
        held = latest.get(review.verdict_span_id)
        if held is None or review.time >= held.time:
            latest[review.verdict_span_id] = review

    def share(items: list[Review]) -> dict[str, Any]:
        counts = {str(label): 0 for label in ReviewLabel}
        for item in items:
            counts[item.label] += 1
        total = len(items)
        stated = [
            float(c)
            for c in (verdicts[i.verdict_span_id].get("confidence") for i in items)
            if isinstance(c, int | float)
        ]
        return {
            "reviews": total,
            **counts,
            "precision": counts[ReviewLabel.CONFIRMED] / total if total else None,
            # What the verdicts claimed, beside what people measured.
            "mean_confidence": sum(stated) / len(stated) if stated else None,
        }

    by_type: dict[str, list[Review]] = {}
    for span_id, review in latest.items():
        by_type.setdefault(str(verdicts[span_id].get("error_type") or "(none)"), []).append(review)
    result = share(list(latest.values()))
    result["by_error_type"] = {t: share(items) for t, items in sorted(by_type.items())}
    result["reviews_of_verdicts_not_loaded"] = orphans
    return result


def send_review(
    exporter: SpanExporter,
    *,
    verdict_trace_id: str,
    verdict_span_id: str,
    label: str,
    op_id: str | None = None,
    service_name: str = REVIEW_SERVICE,
) -> bool:
    """Export one review span, parented to the verdict span, synchronously; return whether the
    endpoint accepted it.

    Raises:
        ValueError: a label outside :class:`ReviewLabel`, ``other_op`` without ``op_id``, or ids
            that are not hex trace/span ids.
    """
    if label not in {str(v) for v in ReviewLabel}:
        raise ValueError(f"review label {label!r}: expected one of {', '.join(ReviewLabel)}")
    if label == ReviewLabel.OTHER_OP and not op_id:
        raise ValueError("an other_op review names the right op (op_id)")
    try:
        if len(verdict_trace_id) != 32 or len(verdict_span_id) != 16:
            raise ValueError
        parent = SpanContext(
            int(verdict_trace_id, 16),
            int(verdict_span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    except ValueError:
        raise ValueError(
            f"verdict span {verdict_trace_id}/{verdict_span_id}: not a trace and span id"
        ) from None
    from memtrace_otel import __version__

    collected = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({A.SERVICE_NAME: service_name}), sampler=ALWAYS_ON
    )
    provider.add_span_processor(SimpleSpanProcessor(collected))
    try:
        tracer = provider.get_tracer("memtrace_otel.attribution", __version__)
        event: dict[str, Any] = {
            A.GEN_AI_EVALUATION_NAME: A.MEMTRACE_REVIEW_SPAN,
            A.GEN_AI_EVALUATION_SCORE_LABEL: label,
        }
        if op_id:
            event[A.MEMTRACE_REVIEW_OP_ID] = op_id
        span = tracer.start_span(
            A.MEMTRACE_REVIEW_SPAN,
            context=set_span_in_context(NonRecordingSpan(parent), Context()),
        )
        span.add_event(A.GEN_AI_EVALUATION_RESULT_EVENT, event)
        span.end()
        try:
            return exporter.export(collected.get_finished_spans()) == SpanExportResult.SUCCESS
        except Exception:  # an exporter bug is a refused review, said as such by the caller
            return False
    finally:
        provider.shutdown()

"""People reviewing verdicts (contract v0.3, section 5), and the measured precision of verdicts.

A review is a short ``memtrace.review`` span parented to the verdict span it judges, carrying one
``gen_ai.evaluation.result`` event named ``memtrace.review`` whose score label is ``confirmed``,
``rejected`` or ``other_op`` (then ``memtrace.review.op_id`` names the right op). Reviews travel
like any other span, so they are read back from the same sources as the app's traces, and the
precision of verdicts, confirmed / (confirmed + rejected + other_op), is measured where the verdicts
were made: in production.

A review is read as a review, never as an answer's evaluation or as activity of a store.

Reviews follow the feedback trust policy (:class:`~memtrace_otel.sources.TrustPolicy`, threat
model in docs/feedback.md), with the same settings, the same signature attribute and the same
refusal reasons: with ``MEMTRACE_FEEDBACK_KEY`` set only reviews whose
``memtrace.feedback.signature`` verifies count (``memtrace serve`` signs what it sends); a review
timestamped past the run's start plus the skew bound is refused (``future``); and an unverified
review that names its verdict span only by id, from a trace that is not the verdict's
(``id_only``), counts only from an allowed service. Refusals are counted, never used.
"""

from __future__ import annotations

import json
import time as _time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memtrace_otel.errors import MemtraceError
from memtrace_otel.instrumentation._signing import (
    FeedbackKey,
    answer_traceparent,
    canonical_review,
)
from memtrace_otel.semconv import ReviewLabel, SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.sources import decode_document, expand_paths, open_source
from memtrace_otel.sources._files import open_binary
from memtrace_otel.sources._limits import DEFAULT_MAX_LINE_BYTES
from memtrace_otel.sources._outcomes import is_verdict_span
from memtrace_otel.sources._trust import DEFAULT_POLICY, UNVERIFIED, TrustPolicy

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "Review",
    "is_review_span",
    "precision_of",
    "read_verdict_spans",
    "review_of",
    "review_precision",
    "send_review",
    "verdict_span_index",
]

REVIEW_SERVICE = "memtrace-review"


@dataclass(frozen=True)
class Review:
    """One person's review of one verdict span.

    ``service``, ``signature``, ``signed`` (the canonical JSON its signature would cover),
    ``origin`` (the review span, ``trace/span``) and ``source`` are what the trust policy reads;
    ``trust`` is what it decided (``verified``, ``allowed`` or ``unverified``).
    """

    verdict_trace_id: str
    verdict_span_id: str
    label: str
    op_id: str | None
    time: int
    service: str | None = None
    trust: str = UNVERIFIED
    signature: str | None = field(default=None, repr=False)
    signed: str | None = field(default=None, repr=False)
    origin: str = field(default="", repr=False)
    source: str = field(default="", repr=False)

    @property
    def time_unix_nano(self) -> int:
        """When it was given (the review event's time), as the trust policy reads it."""
        return self.time


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
        when = int(event.time_unix_nano or record.start_time_unix_nano or 0)
        signature = attrs.get(A.MEMTRACE_FEEDBACK_SIGNATURE)
        signature = str(signature) if signature else None
        service = record.resource_attributes.get(A.SERVICE_NAME)
        return Review(
            record.trace_id,
            record.parent_span_id,
            str(label),
            str(op_id) if op_id else None,
            when,
            service=str(service) if service is not None else None,
            signature=signature,
            signed=canonical_review(
                traceparent=answer_traceparent(record.trace_id, record.parent_span_id),
                label=str(label),
                op_id=str(op_id) if op_id else None,
                time_unix_nano=when,
            )
            if signature
            else None,
            origin=f"{record.trace_id}/{record.span_id}",
            source=record.source or record.span_id,
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
    verdicts: Mapping[str, Mapping[str, Any]],
    reviews: Iterable[Review],
    trust: TrustPolicy = DEFAULT_POLICY,
) -> dict[str, Any]:
    """Precision of reviewed verdicts, overall and by error type.

    ``verdicts`` is :func:`verdict_span_index`'s result; a verdict's latest review counts (a
    person changing their mind); reviews of verdict spans not loaded are counted apart.
    ``trust`` screens the reviews first, as it screens feedback (see the module docstring):
    ``refused`` counts what it refused by reason, ``unverified`` the reviews used without a
    verified signature, ``signed`` whether a key was set.

    >>> v = {"s1": {"trace_id": "t", "error_type": "UpdateError"},
    ...      "s2": {"trace_id": "t", "error_type": "RetrievalError"}}
    >>> r = [Review("t", "s1", "confirmed", None, 1), Review("t", "s2", "rejected", None, 1)]
    >>> p = review_precision(v, r)
    >>> p["precision"], p["reviews"], p["by_error_type"]["UpdateError"]["precision"]
    (0.5, 2, 1.0)
    """
    used, refused, sample = trust.screen(reviews)
    latest: dict[str, Review] = {}
    orphans = 0
    unverified = 0
    for review in used:
        if review.verdict_span_id not in verdicts:
            orphans += 1
            continue
        if (
            review.trust == UNVERIFIED
            and verdicts[review.verdict_span_id].get("trace_id") != review.verdict_trace_id
        ):
            # It names the verdict span by id alone, from another trace: a guessed (or copied)
            # id must not decide a verdict's precision.
            refused["id_only"] = refused.get("id_only", 0) + 1
            if len(sample) < 5:
                sample.append(f"id_only: {review.source or review.origin}")
            continue
        unverified += review.trust == UNVERIFIED
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
    result["refused"] = refused
    result["refused_sample"] = sample
    result["unverified"] = unverified
    result["signed"] = trust.key is not None
    return result


def precision_of(
    spans: Sequence[SpanRecord], trust: TrustPolicy = DEFAULT_POLICY
) -> dict[str, Any] | None:
    """:func:`review_precision` of the verdict and review spans read, screened by ``trust``;
    ``None`` when they hold no review at all."""
    reviews = [r for r in map(review_of, spans) if r is not None]
    if not reviews:
        return None
    return review_precision(verdict_span_index(spans), reviews, trust)


_NAMES = (A.MEMTRACE_ATTRIBUTION_SPAN.encode(), A.MEMTRACE_REVIEW_SPAN.encode())


def read_verdict_spans(
    sources: Sequence[str], scanned: Mapping[str, Sequence[tuple[int, Any]]] | None = None
) -> Iterator[SpanRecord]:
    """The verdict and review spans of file sources, for runs that stream everything else by
    store (those never hold every record, and drop verdict spans from the stores' graphs).

    A plain JSON Lines file is read line by line, and only the lines that mention a verdict or
    review span name are decoded (a pass at the speed of reading the file); other files
    (compressed, protobuf, whole documents) are decoded whole, keeping only those spans. Bad
    lines and records are skipped here without a count: the run's own reading counts them.

    ``scanned``: per file, the ``(line number, parsed value)`` of its lines that a scaled run's
    scan found holding such spans (``Plan.verdict_lines``): those files are not read again.
    """
    for spec in sources:
        for path in expand_paths(spec):
            found: list[SpanRecord] | None
            if scanned is not None and path in scanned:
                found = _decoded_verdict_spans(path, scanned[path])
            else:
                found = _json_lines_verdict_spans(path)
            if found is None:
                found = [r for r in open_source(path).records() if is_verdict_span(r)]
            yield from found


def _decoded_verdict_spans(path: str, lines: Iterable[tuple[int, Any]]) -> list[SpanRecord]:
    """The verdict and review spans of parsed lines, decoded as :func:`_json_lines_verdict_spans`
    decodes a line."""
    found: list[SpanRecord] = []
    for number, value in lines:
        try:
            records = decode_document(value, path=path, line=number, errors=[])
        except (ValueError, MemtraceError):
            continue
        found += [r for r in records if is_verdict_span(r)]
    return found


def _json_lines_verdict_spans(path: str) -> list[SpanRecord] | None:
    """The verdict and review spans of a plain JSON Lines file; ``None`` when it is not one
    (its first non-blank line is not a whole JSON object or array)."""
    found: list[SpanRecord] = []
    sniffed = False
    with open_binary(path) as stream:
        for number, raw in enumerate(iter(lambda: stream.readline(DEFAULT_MAX_LINE_BYTES), b""), 1):
            if len(raw) >= DEFAULT_MAX_LINE_BYTES and not raw.endswith(b"\n"):
                if not sniffed:
                    return None
                while raw and not raw.endswith(b"\n"):  # the loaders skip an over-long line
                    raw = stream.readline(1 << 20)
                continue
            if not sniffed:
                if not raw.strip():
                    continue
                try:
                    if type(json.loads(raw)) not in (dict, list):
                        return None
                except ValueError:
                    return None
                sniffed = True
            if not any(name in raw for name in _NAMES):
                continue
            try:
                value = json.loads(raw)
                records = decode_document(value, path=path, line=number, errors=[])
            except (ValueError, MemtraceError):
                continue
            found += [r for r in records if is_verdict_span(r)]
    return found


def send_review(
    exporter: SpanExporter,
    *,
    verdict_trace_id: str,
    verdict_span_id: str,
    label: str,
    op_id: str | None = None,
    service_name: str = REVIEW_SERVICE,
    key: FeedbackKey | None = None,
) -> bool:
    """Export one review span, parented to the verdict span, synchronously; return whether the
    endpoint accepted it. With ``key`` (the shared feedback key) the review is signed
    (``memtrace.feedback.signature`` over :func:`canonical_review`).

    Raises:
        ValueError: a label outside :class:`ReviewLabel`, ``other_op`` without ``op_id``, or ids
            that are not hex trace/span ids.
    """
    # The SDK is imported by the run that sends a review, not by every batch run (0.03 s).
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

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
        when = _time.time_ns()
        if key is not None:
            event[A.MEMTRACE_FEEDBACK_SIGNATURE] = key.sign(
                canonical_review(
                    traceparent=answer_traceparent(verdict_trace_id, verdict_span_id),
                    label=label,
                    op_id=op_id or None,
                    time_unix_nano=when,
                )
            )
        span = tracer.start_span(
            A.MEMTRACE_REVIEW_SPAN,
            context=set_span_in_context(NonRecordingSpan(parent), Context()),
            start_time=when,
        )
        span.add_event(A.GEN_AI_EVALUATION_RESULT_EVENT, event, timestamp=when)
        span.end()
        try:
            return exporter.export(collected.get_finished_spans()) == SpanExportResult.SUCCESS
        except Exception:  # an exporter bug is a refused review, said as such by the caller
            return False
    finally:
        provider.shutdown()

"""Feedback as telemetry: mark an answer wrong (or right), now or days later, from any service.

:func:`send_feedback` emits a short ``memtrace.feedback`` span carrying the upstream
``gen_ai.evaluation.result`` event (contract section 5). It is parented to the answer's span (so
it shows in the answer's trace in Jaeger or Tempo, and a backend query for that trace returns it)
and linked to it; given only a case id it starts a trace of its own and names the case in
``memtrace.case.id``. The expected answer is content: it is recorded only when content capture
allows (``memtrace.feedback.expected``), redacted and cut like every captured value. The comment
is recorded as ``gen_ai.evaluation.explanation``.

:func:`last_answer` gives the app what its thumbs-up/down button needs: the case id and the
``traceparent`` of the last answer produced in the current context (by the auto-instrumentors or
the manual API), to store next to the answer and send back with the feedback.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> ctx = send_feedback("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
...     correct=False, comment="wrong city", tracer_provider=TracerProvider())
>>> f"{ctx.trace_id:032x}"
'0af7651916cd43dd8448eb211c80319c'
"""

from __future__ import annotations

import math
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TracerProvider,
)
from opentelemetry.util.types import AttributeValue

from memtrace_otel._internal import internal_error
from memtrace_otel.instrumentation._capture import CaptureConfig
from memtrace_otel.instrumentation._registry import format_traceparent, parse_traceparent
from memtrace_otel.instrumentation._signing import (
    FeedbackKey,
    answer_traceparent,
    canonical_feedback,
)
from memtrace_otel.instrumentation._suppress import is_tracing_suppressed
from memtrace_otel.semconv import Category, JudgeVerdict
from memtrace_otel.semconv import attributes as A

DEFAULT_EVALUATION_NAME = "user_feedback"
"""``gen_ai.evaluation.name`` of feedback sent through this API unless told otherwise."""

MAX_FEEDBACK_TEXT_BYTES = 4096
"""Longest comment or expected answer (UTF-8 bytes) a feedback carries; longer ones are cut and
marked (:func:`cut_text`): a Collector may reject a huge span together with its whole batch."""


def cut_text(text: str, limit: int = MAX_FEEDBACK_TEXT_BYTES) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes (on a character boundary) and marked, when longer.

    >>> cut_text("abcdef", 4)
    'abcd…[cut: 6 bytes, 4 kept]'
    >>> cut_text("short")
    'short'
    """
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    kept = raw[:limit].decode("utf-8", "ignore")
    return f"{kept}…[cut: {len(raw)} bytes, {len(kept.encode('utf-8'))} kept]"


@dataclass(frozen=True)
class AnswerRef:
    """What a feedback button needs to name an answer later.

    Attributes:
        case_id: the answer's ``memtrace.case.id`` (its trace id when the app set none).
        traceparent: the W3C ``traceparent`` of the answer's span.
    """

    case_id: str
    traceparent: str


_Noted = tuple[str, SpanContext]
"""A noted answer: its case id and span context (made an :class:`AnswerRef` only when asked for:
every question-serving op notes one, few are asked for)."""
_last: ContextVar[_Noted | None] = ContextVar("memtrace_last_answer", default=None)
_last_in_thread = threading.local()


def note_answer(case_id: str, span_context: SpanContext) -> None:
    """Remember an answer (or a question-serving op) for :func:`last_answer` (never raises)."""
    try:
        if not span_context.is_valid:
            return
        noted = (case_id, span_context)
        _last.set(noted)
        _last_in_thread.ref = noted
    except Exception:
        internal_error("feedback.note_answer")


def last_answer() -> AnswerRef | None:
    """The current or last answer of this context: its case id and ``traceparent``.

    "This context" is the running thread or asyncio task (an answer produced in a child task is
    visible there and, once it returns, in the thread that ran the event loop). ``None`` when no
    traced answer was produced here.
    """
    found = _last.get()
    if found is None:
        found = getattr(_last_in_thread, "ref", None)
    if found is None:
        return None
    case_id, span_context = found
    return AnswerRef(case_id, format_traceparent(span_context))


def forget_answers() -> None:
    """Forget the last answer of this context (tests)."""
    _last.set(None)
    _last_in_thread.ref = None


def send_feedback(
    answer: str | SpanContext | None = None,
    *,
    correct: bool | None = None,
    case_id: str | None = None,
    label: str | None = None,
    score: float | None = None,
    expected: str | None = None,
    comment: str | None = None,
    evaluation_name: str = DEFAULT_EVALUATION_NAME,
    tracer_provider: TracerProvider | None = None,
    capture: CaptureConfig | None = None,
    key: FeedbackKey | None = None,
) -> SpanContext | None:
    """Record that an answer was wrong (or right) as a ``memtrace.feedback`` span.

    Args:
        answer: the answer's span: a ``traceparent`` string (from :func:`last_answer`, an HTTP
            header, a database row) or a :class:`SpanContext`. Optional when ``case_id`` is given.
        correct: ``False`` marks the answer wrong (label ``incorrect``, score 0), ``True`` right
            (``correct``, 1).
        case_id: the answer's case id (``memtrace.case.id``), instead of or besides ``answer``.
        label: a label of your own vocabulary instead of ``correct`` (read it with a matching
            rule: ``memtrace attribute --failure-labels``).
        score: a score of your own instead of ``correct``.
        expected: the right answer, when known; recorded only when content capture allows it
            for category ``gold`` (``MEMTRACE_CAPTURE_CONTENT``, ``PRODUCTION`` included, or
            the upstream variable), redacted and cut like every captured value.
        comment: a free-text explanation (``gen_ai.evaluation.explanation``; under
            ``REFERENCE`` capture it goes to the content store, ``memtrace.feedback.comment_ref``).
        evaluation_name: ``gen_ai.evaluation.name`` (``user_feedback`` by default).
        tracer_provider: where the span goes; ``None``: the global provider.
        capture: content capture for ``expected``; ``None`` reads the environment.
        key: the shared key that signs the feedback (``memtrace.feedback.signature``, contract
            section 6); ``None`` reads ``MEMTRACE_FEEDBACK_KEY`` (unset: unsigned).

    A comment or an expected answer longer than :data:`MAX_FEEDBACK_TEXT_BYTES` is cut and marked.

    Returns:
        The feedback span's context, or ``None`` when tracing is suppressed.

    Raises:
        ValueError: neither ``answer`` nor ``case_id``, an ``answer`` that is not a valid
            ``traceparent``, or no verdict (``correct``, ``label`` or ``score``). These are the
            caller's arguments: once they are valid, nothing raises into the app.
    """
    parent = _answer_context(answer)
    if parent is None and not case_id:
        raise ValueError("say which answer: give its traceparent (answer=...) or case_id=...")
    if correct is None and label is None and score is None:
        raise ValueError("say what the feedback is: correct=True/False, label=... or score=...")
    if score is not None and (
        isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score)
    ):
        raise ValueError(f"score must be a finite number, got {score!r}")
    config = capture if capture is not None else CaptureConfig()
    if key is None:
        key = FeedbackKey.from_env()
    if is_tracing_suppressed():
        return None
    try:
        return _emit(
            parent,
            correct=correct,
            case_id=case_id,
            label=label,
            score=score,
            expected=expected,
            comment=comment,
            evaluation_name=evaluation_name,
            tracer_provider=tracer_provider,
            capture=config,
            key=key,
        )
    except Exception:
        internal_error("feedback.send")
        return None


def _answer_context(answer: str | SpanContext | None) -> SpanContext | None:
    if answer is None or answer == "":
        return None
    if isinstance(answer, SpanContext):
        if not answer.is_valid:
            raise ValueError("answer: an invalid span context")
        return answer
    if isinstance(answer, str):
        parsed = parse_traceparent(answer)
        if parsed is None:
            raise ValueError(
                f"answer: not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>): {answer[:80]!r}"
            )
        return parsed
    raise ValueError(f"answer: expected a traceparent string or a SpanContext, got {answer!r}")


def _emit(
    parent: SpanContext | None,
    *,
    correct: bool | None,
    case_id: str | None,
    label: str | None,
    score: float | None,
    expected: str | None,
    comment: str | None,
    evaluation_name: str,
    tracer_provider: TracerProvider | None,
    capture: CaptureConfig,
    key: FeedbackKey | None,
) -> SpanContext:
    event: dict[str, AttributeValue] = {A.GEN_AI_EVALUATION_NAME: evaluation_name}
    if label is None and correct is not None:
        label = (JudgeVerdict.CORRECT if correct else JudgeVerdict.INCORRECT).value
    if score is None and correct is not None:
        score = 1.0 if correct else 0.0
    if label is not None:
        event[A.GEN_AI_EVALUATION_SCORE_LABEL] = label
    if score is not None:
        event[A.GEN_AI_EVALUATION_SCORE_VALUE] = float(score)
    comment = cut_text(comment) if comment else None
    signed_comment = comment or None  # the signature covers what the event carries
    if comment:
        if capture.reference:  # the comment is the user's text too: to the store, by reference
            ref, _ = capture.record(comment, Category.GOLD)
            signed_comment = None
            if ref is not None:
                signed_comment = str(ref)
                event[A.MEMTRACE_FEEDBACK_COMMENT_REF] = signed_comment
        else:
            event[A.GEN_AI_EVALUATION_EXPLANATION] = comment
    recorded: str | None = None
    if expected is not None:
        # the one place deciding what leaves
        value, _ = capture.record(cut_text(expected), Category.GOLD)
        if value is not None:
            recorded = str(value)
            name = (
                A.MEMTRACE_FEEDBACK_EXPECTED_REF
                if capture.reference
                else A.MEMTRACE_FEEDBACK_EXPECTED
            )
            event[name] = recorded
    attributes: dict[str, AttributeValue] = {}
    if case_id:
        case_id = capture.pseudonym(case_id)  # as the answer's op sent it (and signed so)
        attributes[A.MEMTRACE_CASE_ID] = case_id
        event[A.MEMTRACE_CASE_ID] = case_id
    when = time.time_ns()
    if key is not None:
        event[A.MEMTRACE_FEEDBACK_SIGNATURE] = key.sign(
            canonical_feedback(
                traceparent=None
                if parent is None
                else answer_traceparent(f"{parent.trace_id:032x}", f"{parent.span_id:016x}"),
                case_id=case_id or None,
                label=label,
                score=None if score is None else float(score),
                expected=recorded,
                comment=signed_comment,
                time_unix_nano=when,
            )
        )
    from memtrace_otel._version import __version__

    tracer = trace.get_tracer("memtrace_otel", __version__, tracer_provider)
    context = Context()  # a case id only: a trace of its own, never the caller's request
    links: list[Link] = []
    if parent is not None:
        context = trace.set_span_in_context(NonRecordingSpan(parent))
        links.append(Link(parent))
    span = tracer.start_span(
        A.MEMTRACE_FEEDBACK_SPAN,
        context=context,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=links,
    )
    try:
        span.add_event(A.GEN_AI_EVALUATION_RESULT_EVENT, event, timestamp=when)
    finally:
        span.end()
    return span.get_span_context()


__all__ = [
    "DEFAULT_EVALUATION_NAME",
    "MAX_FEEDBACK_TEXT_BYTES",
    "AnswerRef",
    "cut_text",
    "forget_answers",
    "last_answer",
    "note_answer",
    "send_feedback",
]

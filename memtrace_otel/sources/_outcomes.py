"""Outcomes: which answers someone found wrong (or right), read from telemetry (contract section 5).

An outcome is one ``gen_ai.evaluation.result`` evaluation of an answer, wherever it was found:

- ``feedback``: on a ``memtrace.feedback`` span (what :func:`memtrace_otel.instrumentation.send_feedback`
  and ``memtrace feedback`` emit). The answer is the span's first link, else its parent.
- ``event``: on any other span, from any evaluator. The answer is that span.
- ``log``: an OTLP log record of that event (``eventName``, or the older ``event.name``
  attribute), e.g. in the Collector's file exporter's logs file. The answer is the span the record
  names (``traceId``/``spanId``).

Whether it marks a failure is decided by an :class:`OutcomeRule`: by default a score label
``incorrect`` or a score value ``0`` is a failure, ``correct`` or ``1`` a success, and anything
else is left undecided (counted, never guessed). The label decides when it is in the rule's
vocabulary; otherwise the score does.

Several outcomes about one answer: the latest (event time, then the order read) wins, see
:func:`latest_outcomes`. Turning an outcome into a case id needs the loaded graph and is the
batch job's business (:mod:`memtrace_otel.attribution`); here an outcome only says what it names:
an explicit ``memtrace.case.id``, and the answer's trace and span.

>>> from memtrace_otel.semconv import EventRecord, SpanRecord
>>> from memtrace_otel.semconv import attributes as A
>>> event = EventRecord(A.GEN_AI_EVALUATION_RESULT_EVENT, 7, {
...     A.GEN_AI_EVALUATION_SCORE_LABEL: "incorrect", A.MEMTRACE_FEEDBACK_EXPECTED: "Porto"})
>>> span = SpanRecord("a" * 32, "f" * 16, A.MEMTRACE_FEEDBACK_SPAN, parent_span_id="b" * 16,
...     events=(event,))
>>> [(o.via, o.failed, o.span_id, o.expected) for o in read_outcomes([span])]
[('feedback', True, 'bbbbbbbbbbbbbbbb', 'Porto')]
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from memtrace_otel.instrumentation._signing import answer_traceparent, canonical_feedback
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv.record import Attributes
from memtrace_otel.sources._common import Bad, otlp_span_id, otlp_trace_id, time_nanos
from memtrace_otel.sources._otlp_json import any_value, attributes
from memtrace_otel.sources._trust import (
    ALLOWED,
    DEFAULT_POLICY,
    UNVERIFIED,
    VERIFIED,
    TrustPolicy,
)

FEEDBACK = "feedback"
EVENT = "event"
LOG = "log"
EVENT_NAME_ATTRIBUTE = "event.name"
"""Older OTLP log records name their event in this attribute (newer ones in ``eventName``)."""


def _words(value: str | Iterable[str]) -> frozenset[str]:
    items = value.split(",") if isinstance(value, str) else value
    return frozenset(w.strip().casefold() for w in items if w and w.strip())


@dataclass(frozen=True, init=False)
class OutcomeRule:
    """Which evaluations count as a failure, which as a success (contract section 5).

    Args:
        failure_labels: score labels that mark a failure (case-insensitive).
        success_labels: score labels that mark a success.
        threshold: ``None`` (default): a score value of exactly 0 is a failure and exactly 1 a
            success, any other value undecided. A number: a score below it is a failure, at or
            above it a success.
        names: count only evaluations whose ``gen_ai.evaluation.name`` is one of these
            (``None``: every evaluation).
        trust: the trust policy that screens outcomes before they decide anything
            (:class:`~memtrace_otel.sources.TrustPolicy`; default: no key, 5 minutes of skew).

    Raises:
        ValueError: a label in both vocabularies, or a threshold that is not a finite number.

    >>> rule = OutcomeRule()
    >>> rule.classify("Incorrect", None), rule.classify(None, 1.0), rule.classify(None, 0.4)
    (True, False, None)
    >>> OutcomeRule(failure_labels="thumbs_down,bad", threshold=0.5).classify("meh", 0.2)
    True
    """

    failure_labels: frozenset[str] = frozenset({"incorrect"})
    success_labels: frozenset[str] = frozenset({"correct"})
    threshold: float | None = None
    names: frozenset[str] | None = None
    trust: TrustPolicy = DEFAULT_POLICY

    def __init__(
        self,
        failure_labels: str | Iterable[str] = ("incorrect",),
        success_labels: str | Iterable[str] = ("correct",),
        threshold: float | None = None,
        names: str | Iterable[str] | None = None,
        trust: TrustPolicy | None = None,
    ) -> None:
        failures, successes = _words(failure_labels), _words(success_labels)
        both = failures & successes
        if both:
            raise ValueError(f"labels both failure and success: {sorted(both)}")
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not math.isfinite(threshold)
        ):
            raise ValueError(f"threshold must be a finite number, got {threshold!r}")
        object.__setattr__(self, "failure_labels", failures)
        object.__setattr__(self, "success_labels", successes)
        object.__setattr__(self, "threshold", threshold)
        object.__setattr__(self, "names", None if names is None else _words(names))
        object.__setattr__(self, "trust", trust if trust is not None else DEFAULT_POLICY)

    def apply(self, outcome: Outcome) -> Outcome | None:
        """``outcome`` judged by this rule (``None`` when the rule does not read its name)."""
        if not self.counts(outcome.name):
            return None
        failed = self.classify(outcome.label, outcome.score)
        return outcome if failed == outcome.failed else replace(outcome, failed=failed)

    def counts(self, name: str | None) -> bool:
        """Whether an evaluation called ``name`` is one this rule reads."""
        return self.names is None or (name is not None and name.casefold() in self.names)

    def classify(self, label: str | None, score: float | None) -> bool | None:
        """``True``: a failure; ``False``: a success; ``None``: the rule cannot tell."""
        if label is not None:
            word = label.strip().casefold()
            if word in self.failure_labels:
                return True
            if word in self.success_labels:
                return False
        if score is None:
            return None
        if self.threshold is not None:
            return score < self.threshold
        if score == 0:
            return True
        if score == 1:
            return False
        return None


DEFAULT_RULE = OutcomeRule()


@dataclass(frozen=True)
class Outcome:
    """One evaluation of one answer.

    Attributes:
        failed: ``True`` a failure, ``False`` a success, ``None`` undecided by the rule.
        case_id: the ``memtrace.case.id`` it names explicitly (on the event, else its span).
        trace_id: the answer's trace id, when it names the answer's span context.
        span_id: the answer's span id, when known.
        label: ``gen_ai.evaluation.score.label``.
        score: ``gen_ai.evaluation.score.value``.
        name: ``gen_ai.evaluation.name``.
        expected: the expected answer (``memtrace.feedback.expected``), when given and captured.
        explanation: ``gen_ai.evaluation.explanation`` (a person's comment).
        time_unix_nano: when it was given (event time, else the span's end, else log time).
        via: ``feedback``, ``event`` or ``log``.
        source: where it was read (a span id, or ``file:line``), for reports.
        service: the ``service.name`` of the resource that sent it (forgeable: a hint for
            people and for an allow-list, never a proof).
        trust: ``verified`` (signed with the shared key), ``allowed`` (unsigned, from a service
            the policy allows) or ``unverified``; set by :class:`~memtrace_otel.sources.TrustPolicy`.
        signature: ``memtrace.feedback.signature``, when it carries one.
        signed: the canonical JSON its signature would cover (contract section 6), when signed.
        origin: the span (``trace/span``) or log record that carried it: the same record read
            twice is one outcome, a signature carried by two records is a replay.
    """

    failed: bool | None
    case_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    label: str | None = None
    score: float | None = None
    name: str | None = None
    expected: str | None = None
    explanation: str | None = None
    time_unix_nano: int = 0
    via: str = EVENT
    source: str = field(default="", compare=False)
    service: str | None = None
    trust: str = UNVERIFIED
    signature: str | None = field(default=None, compare=False, repr=False)
    signed: str | None = field(default=None, compare=False, repr=False)
    origin: str = field(default="", compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """Plain data (for reports and ``summary.json``; the signature material left out)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in _PRIVATE}


_PRIVATE = frozenset({"signature", "signed", "origin"})


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


_EXPECTED_IN_TEXT = re.compile(
    r"(?:\bexpected(?:\s+answer)?|\b(?:the\s+)?(?:correct|right)\s+answer|"
    r"\bshould\s+(?:have\s+)?(?:been|be|said|say))\s*(?:is|was|:|=|-)?\s*",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"[\"“‘'](?P<answer>[^\"”’'\n]{1,200})[\"”’']")
_ABBREVIATIONS = frozenset({"dr", "mr", "mrs", "ms", "st", "prof", "jr", "sr", "mt", "no"})


def expected_from_explanation(text: str | None) -> str | None:
    """The expected answer an evaluator wrote in free text, when it says it plainly.

    Evaluators other than ``memtrace feedback`` often have only ``gen_ai.evaluation.explanation``
    ("Expected answer: Porto", "the correct answer is Porto", "should be Porto"). A phrase that
    does not parse gives ``None``: attribution then works without an expected answer.

    >>> expected_from_explanation("Wrong city. Expected answer: Porto.")
    'Porto'
    >>> expected_from_explanation('The correct answer is "Dr. Okafor", not Novak')
    'Dr. Okafor'
    >>> expected_from_explanation("It should have been Dr. Okafor. Please fix.")
    'Dr. Okafor'
    >>> expected_from_explanation("The assistant got it wrong.") is None
    True
    """
    if not text:
        return None
    match = _EXPECTED_IN_TEXT.search(text)
    if match is None:
        return None
    rest = text[match.end() :]
    quoted = _QUOTED.match(rest)
    if quoted is not None:
        return quoted.group("answer").strip() or None
    answer = re.split(r"[\n;!?]", rest, maxsplit=1)[0]
    for stop in re.finditer(r"\.(?:\s|$)", answer):
        words = answer[: stop.start()].split()
        if not words or words[-1].casefold() not in _ABBREVIATIONS:
            answer = answer[: stop.start()]
            break
    answer = answer.strip(" ,:-.")
    return answer[:200] or None


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _outcome(
    attrs: Attributes,
    fallback: Attributes,
    *,
    rule: OutcomeRule,
    trace_id: str | None,
    span_id: str | None,
    time_unix_nano: int,
    via: str,
    source: str,
    service: str | None = None,
    origin: str = "",
) -> Outcome | None:
    def get(key: str) -> Any:
        value = attrs.get(key)
        return value if value is not None else fallback.get(key)

    name = _text(get(A.GEN_AI_EVALUATION_NAME))
    if not rule.counts(name):
        return None
    label = _text(get(A.GEN_AI_EVALUATION_SCORE_LABEL))
    score = _score(get(A.GEN_AI_EVALUATION_SCORE_VALUE))
    case_id = _text(get(A.MEMTRACE_CASE_ID))
    explanation = _text(get(A.GEN_AI_EVALUATION_EXPLANATION))
    given = _text(get(A.MEMTRACE_FEEDBACK_EXPECTED))
    expected = given or expected_from_explanation(explanation)
    signature = _text(get(A.MEMTRACE_FEEDBACK_SIGNATURE))
    signed = None
    if signature:
        signed = canonical_feedback(
            traceparent=answer_traceparent(trace_id, span_id) if trace_id and span_id else None,
            case_id=case_id or None,
            label=label,
            score=score,
            # under REFERENCE capture the sender signed the refs it sent, which name the content
            expected=_text(get(A.MEMTRACE_FEEDBACK_EXPECTED_REF)) or given,
            comment=_text(get(A.MEMTRACE_FEEDBACK_COMMENT_REF)) or explanation,
            time_unix_nano=time_unix_nano,
        )
    return Outcome(
        failed=rule.classify(label, score),
        case_id=case_id or None,
        trace_id=trace_id or None,
        span_id=span_id or None,
        label=label,
        score=score,
        name=name,
        expected=expected,
        explanation=explanation,
        time_unix_nano=time_unix_nano,
        via=via,
        source=source,
        service=service,
        signature=signature or None,
        signed=signed,
        origin=origin,
    )


def is_verdict_span(record: SpanRecord) -> bool:
    """Whether ``record`` is a verdict written back by the batch job (``memtrace.attribution``) or
    a person's review of one (``memtrace.review``, parented to the verdict span).

    Verdict spans may sit inside the culprit's trace, as children of the culprit op span; they
    and their reviews are read as verdicts and reviews, never as activity of the memory store:
    no op, no case, no lineage.

    >>> is_verdict_span(SpanRecord("a" * 32, "f" * 16, A.MEMTRACE_ATTRIBUTION_SPAN))
    True
    """
    return record.name in (A.MEMTRACE_ATTRIBUTION_SPAN, A.MEMTRACE_REVIEW_SPAN)


def outcomes_of(record: SpanRecord, rule: OutcomeRule = DEFAULT_RULE) -> list[Outcome]:
    """The evaluations one span carries (none for most spans)."""
    if record.name == A.MEMTRACE_REVIEW_SPAN:
        return []  # a person's review of a verdict, not an evaluation of an answer
    events = [e for e in record.events if e.name == A.GEN_AI_EVALUATION_RESULT_EVENT]
    if not events:
        return []
    trace_id: str | None
    span_id: str | None
    if record.name == A.MEMTRACE_FEEDBACK_SPAN:
        via = FEEDBACK
        if record.links:
            trace_id, span_id = record.links[0].trace_id, record.links[0].span_id
        else:
            trace_id, span_id = record.trace_id, record.parent_span_id
        if not span_id:  # a root feedback span: it names its case by id only
            trace_id = None
    else:
        via, trace_id, span_id = EVENT, record.trace_id, record.span_id
    fallback = record.attributes
    service = _text(record.resource_attributes.get(A.SERVICE_NAME))
    found = []
    for event in events:
        outcome = _outcome(
            event.attributes,
            fallback,
            rule=rule,
            trace_id=trace_id,
            span_id=span_id,
            time_unix_nano=event.time_unix_nano or record.end_time_unix_nano,
            via=via,
            source=record.source or record.span_id,
            service=service,
            origin=f"{record.trace_id}/{record.span_id}",
        )
        if outcome is not None:
            found.append(outcome)
    return found


def read_outcomes(records: Iterable[SpanRecord], rule: OutcomeRule = DEFAULT_RULE) -> list[Outcome]:
    """Every evaluation the spans carry, in the order read (feedback spans and events)."""
    found: list[Outcome] = []
    for record in records:
        if record.events:
            found.extend(outcomes_of(record, rule))
    return found


def decode_outcome_logs(
    blocks: Any, *, rule: OutcomeRule = DEFAULT_RULE, path: str = "", line: int | None = None
) -> tuple[list[Outcome], list[tuple[str, str]]]:
    """The evaluations among the log records of an OTLP/JSON ``resourceLogs`` list.

    Log records of other events are ignored (they are not ours to read); a malformed log record
    is skipped and described in the second list as ``(field path, reason)``.
    """
    outcomes: list[Outcome] = []
    errors: list[tuple[str, str]] = []
    where = f"{path}:{line}" if line is not None else path
    if not isinstance(blocks, list):
        return outcomes, [("resourceLogs", "expected a list")]
    for ri, block in enumerate(blocks):
        scopes = block.get("scopeLogs") if isinstance(block, dict) else None
        service = _resource_service(block)
        for si, scope in enumerate(scopes if isinstance(scopes, list) else ()):
            logs = scope.get("logRecords") if isinstance(scope, dict) else None
            for li, log in enumerate(logs if isinstance(logs, list) else ()):
                field_path = f"resourceLogs[{ri}].scopeLogs[{si}].logRecords[{li}]"
                try:
                    outcome = _log_outcome(log, rule, f"{where} {field_path}", service)
                except Bad as bad:
                    errors.append((f"{field_path}.{bad.field}".rstrip("."), bad.reason))
                    continue
                if outcome is not None:
                    outcomes.append(outcome)
    return outcomes, errors


def _resource_service(block: Any) -> str | None:
    resource = block.get("resource") if isinstance(block, dict) else None
    if not isinstance(resource, dict):
        return None
    try:
        return _text(attributes(resource.get("attributes") or []).get(A.SERVICE_NAME))
    except Bad:
        return None


def _log_outcome(
    log: Any, rule: OutcomeRule, source: str, service: str | None = None
) -> Outcome | None:
    if not isinstance(log, dict):
        raise Bad("", "expected a LogRecord object")
    attrs = attributes(log.get("attributes") or [])
    name = log.get("eventName") or attrs.get(EVENT_NAME_ATTRIBUTE)
    if name != A.GEN_AI_EVALUATION_RESULT_EVENT:
        return None
    body: Mapping[str, Any] = {}
    if isinstance(log.get("body"), dict):
        decoded = any_value(log["body"])
        if isinstance(decoded, Mapping):
            body = decoded
    trace_id = otlp_trace_id(log["traceId"], "traceId") if log.get("traceId") else None
    span_id = otlp_span_id(log["spanId"], "spanId") if log.get("spanId") else None
    raw_time = log.get("timeUnixNano") or log.get("observedTimeUnixNano") or 0
    return _outcome(
        attrs,
        body,
        rule=rule,
        trace_id=trace_id,
        span_id=span_id,
        time_unix_nano=time_nanos(raw_time, "timeUnixNano") if raw_time else 0,
        via=LOG,
        source=source,
        service=service,
        origin=f"log {source}",
    )


def outcome_key(outcome: Outcome) -> str:
    """What an outcome is about, before case ids are resolved: its case id, else its answer span.

    >>> outcome_key(Outcome(True, case_id="q1")), outcome_key(Outcome(True, trace_id="t", span_id="s"))
    ('case:q1', 'span:t/s')
    """
    if outcome.case_id:
        return f"case:{outcome.case_id}"
    return f"span:{outcome.trace_id}/{outcome.span_id}"


def latest_outcomes(outcomes: Iterable[Outcome], key: Any = outcome_key) -> dict[str, Outcome]:
    """One outcome per key: the latest, by time; at equal times the one read last.

    Undecided outcomes (``failed is None``) never replace a decided one: a later "maybe" does not
    cancel a thumbs-down.

    >>> a = Outcome(True, case_id="q", time_unix_nano=1)
    >>> b = Outcome(False, case_id="q", time_unix_nano=2)
    >>> latest_outcomes([b, a])["case:q"].failed
    False
    """
    chosen: dict[str, Outcome] = {}
    for outcome in outcomes:
        k = key(outcome)
        previous = chosen.get(k)
        if previous is None:
            chosen[k] = outcome
            continue
        if outcome.failed is None and previous.failed is not None:
            continue
        if previous.failed is None and outcome.failed is not None:
            chosen[k] = outcome
            continue
        if outcome.time_unix_nano >= previous.time_unix_nano:
            chosen[k] = outcome
    return chosen


__all__ = [
    "ALLOWED",
    "DEFAULT_RULE",
    "EVENT",
    "FEEDBACK",
    "LOG",
    "UNVERIFIED",
    "VERIFIED",
    "Outcome",
    "OutcomeRule",
    "TrustPolicy",
    "decode_outcome_logs",
    "latest_outcomes",
    "outcome_key",
    "outcomes_of",
    "read_outcomes",
]

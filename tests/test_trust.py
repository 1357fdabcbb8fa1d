"""The feedback trust policy (issue 32, item 1): forged, altered, replayed, future and id-only
feedback, through the real SDK, real OTLP JSON files and the real CLI (``main([...])``)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, NonRecordingSpan

from memtrace_otel.attribution import EvidenceMethod
from memtrace_otel.cli import main
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import (
    MAX_FEEDBACK_TEXT_BYTES,
    AnswerRef,
    CaptureConfig,
    FeedbackKey,
    parse_traceparent,
    send_feedback,
)
from memtrace_otel.job import run_batch
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import OutcomeRule, TrustPolicy, open_source, read_outcomes
from tests._pipeline import write_workload

KEY = FeedbackKey(b"the shared feedback key", "k1")
SECOND = 10**9
YEAR_2100 = 4_102_444_800 * SECOND


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, AnswerRef]]:
    answers: dict[str, AnswerRef] = {}
    traces, _ = write_workload(tmp_path_factory.mktemp("trust"), judge=False, answers=answers)
    return traces, answers


def _provider(path: Path, service: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({A.SERVICE_NAME: service}))
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(path)))
    return provider


def _forge(
    path: Path,
    *,
    answer: str | None,
    label: str,
    when: int,
    case_id: str | None = None,
    service: str = "attacker",
    extra: dict[str, str] | None = None,
) -> None:
    """What anyone who reaches the Collector can send: a feedback span written by hand."""
    provider = _provider(path, service)
    tracer = provider.get_tracer("forger")
    context = None
    links = []
    if answer is not None:
        parent = parse_traceparent(answer)
        assert parent is not None
        context = trace.set_span_in_context(NonRecordingSpan(parent))
        links = [Link(parent)]
    span = tracer.start_span(A.MEMTRACE_FEEDBACK_SPAN, context=context, links=links)
    event = {
        A.GEN_AI_EVALUATION_NAME: "user_feedback",
        A.GEN_AI_EVALUATION_SCORE_LABEL: label,
        **({A.MEMTRACE_CASE_ID: case_id} if case_id else {}),
        **(extra or {}),
    }
    span.add_event(A.GEN_AI_EVALUATION_RESULT_EVENT, event, timestamp=when)
    span.end()
    provider.shutdown()


def _send(path: Path, service: str = "support-desk", **kwargs: object) -> None:
    provider = _provider(path, service)
    send_feedback(tracer_provider=provider, **kwargs)  # type: ignore[arg-type]
    provider.shutdown()


def test_a_forged_correct_cannot_hide_a_signed_failure(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    """Break 1a: a forged ``correct`` from another service, a second after the real
    ``incorrect``, made the failure disappear with exit 0."""
    traces, answers = production
    feedback = tmp_path / "feedback.jsonl"
    _send(feedback, answer=answers["deletion"].traceparent, correct=False, key=KEY)
    _forge(
        feedback,
        answer=answers["deletion"].traceparent,
        label="correct",
        when=time.time_ns() + SECOND,
    )
    signed = OutcomeRule(trust=TrustPolicy(KEY))
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod(), rule=signed)
    assert [v.case_id for v in verdicts] == ["case-deletion"]
    assert summary.feedback["refused"] == {"unsigned": 1}
    assert summary.feedback["unverified"] == 0
    assert not summary.ok  # a refusal is reported, never a silent success
    # without a key the forgery still wins (latest wins, as documented), but marked unverified
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod())
    assert verdicts == [] and summary.feedback["unverified"] == 2


def test_the_cli_refuses_the_forgery_and_exits_1(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces, answers = production
    monkeypatch.setenv(E.ENV_MEMTRACE_FEEDBACK_KEY, "the shared feedback key")
    feedback = tmp_path / "feedback.jsonl"
    argv = ["feedback", "--traceparent", answers["update"].traceparent, "--wrong"]
    assert main([*argv, "--traces-file", str(feedback)]) == 0
    (line,) = feedback.read_text().splitlines()
    assert A.MEMTRACE_FEEDBACK_SIGNATURE in line and "hmac-sha256:" in line
    _forge(feedback, answer=answers["update"].traceparent, label="correct", when=time.time_ns())
    report = tmp_path / "report"
    code = main(["attribute", str(traces), str(feedback), "--report", str(report), "--quiet"])
    assert code == 1
    summary = json.loads((report / "summary.json").read_text())
    assert summary["feedback"]["refused"] == {"unsigned": 1}
    assert summary["attributed"] + summary["unattributed"] == 1


@pytest.mark.parametrize("signed", [True, False])
def test_a_feedback_from_the_future_is_refused(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path, signed: bool
) -> None:
    """Break 1b: a feedback timestamped in 2100 beat every later real one, for ever."""
    traces, answers = production
    feedback = tmp_path / "feedback.jsonl"
    _forge(feedback, answer=answers["retrieval"].traceparent, label="correct", when=YEAR_2100)
    _send(feedback, answer=answers["retrieval"].traceparent, correct=False, key=KEY)
    rule = OutcomeRule(trust=TrustPolicy(KEY if signed else None))
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod(), rule=rule)
    assert [v.case_id for v in verdicts] == ["case-retrieval"]
    assert summary.feedback["refused"] == {"future": 1}


def test_late_feedback_within_the_skew_is_kept(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    traces, answers = production
    feedback = tmp_path / "feedback.jsonl"
    _forge(
        feedback,
        answer=answers["retrieval"].traceparent,
        label="incorrect",
        when=time.time_ns() + 60 * SECOND,  # a clock one minute fast: within 5 minutes
    )
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod())
    assert [v.case_id for v in verdicts] == ["case-retrieval"]
    assert summary.feedback["refused"] == {}


def test_guessed_case_ids_in_a_random_trace_flag_nothing(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    """Break 1c: feedback in a random trace naming guessed case ids flagged 5 of 5 cases."""
    traces, answers = production
    feedback = tmp_path / "feedback.jsonl"
    rng = random.Random(32)
    for fault in answers:
        random_answer = f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"
        _forge(
            feedback,
            answer=random_answer,
            label="incorrect",
            when=time.time_ns(),
            case_id=f"case-{fault}",
        )
        _forge(
            feedback, answer=None, label="incorrect", when=time.time_ns(), case_id=f"case-{fault}"
        )
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod())
    assert verdicts == []
    assert summary.feedback["refused"] == {"id_only": 2 * len(answers)}
    # an allow-list (a convenience on a trusted network) lets one service name cases by id
    rule = OutcomeRule(trust=TrustPolicy(allowed_services=frozenset({"attacker"})))
    verdicts, _ = run_batch([str(traces), str(feedback)], EvidenceMethod(), rule=rule)
    assert {v.case_id for v in verdicts} == {f"case-{fault}" for fault in answers}


def test_signed_feedback_by_case_id_is_accepted(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    traces, _ = production
    feedback = tmp_path / "feedback.jsonl"
    _send(feedback, case_id="case-response", correct=False, key=KEY)
    rule = OutcomeRule(trust=TrustPolicy(KEY))
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod(), rule=rule)
    assert [v.case_id for v in verdicts] == ["case-response"]
    assert summary.feedback["refused"] == {}


def _rewrite(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_altered_and_replayed_signed_feedback_is_refused(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    traces, answers = production
    altered = tmp_path / "altered.jsonl"
    _send(altered, answer=answers["extraction"].traceparent, correct=False, key=KEY)
    _rewrite(altered, '"incorrect"', '"correct"')  # the label changed after signing
    rule = OutcomeRule(trust=TrustPolicy(KEY))
    verdicts, summary = run_batch([str(traces), str(altered)], EvidenceMethod(), rule=rule)
    assert verdicts == [] and summary.feedback["refused"] == {"altered": 1}

    other_key = tmp_path / "other.jsonl"
    _send(
        other_key,
        answer=answers["extraction"].traceparent,
        correct=False,
        key=FeedbackKey(b"not the shared key", "k2"),
    )
    _, summary = run_batch([str(traces), str(other_key)], EvidenceMethod(), rule=rule)
    assert summary.feedback["refused"] == {"unknown_key": 1}

    # a signed "correct" copied, signature and all, into another span: one counts, one is refused
    replayed = tmp_path / "replayed.jsonl"
    _send(replayed, answer=answers["extraction"].traceparent, correct=True, key=KEY)
    (line,) = replayed.read_text().splitlines()
    span_id = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"]
    replayed.write_text(line + "\n" + line.replace(span_id, "f" * 16) + "\n")
    _, summary = run_batch([str(traces), str(replayed)], EvidenceMethod(), rule=rule)
    assert summary.feedback["refused"] == {"replayed": 1}


def test_signature_covers_the_contract_fields(tmp_path: Path) -> None:
    """The reader recomputes the canonical JSON from what it read, and the sender's signature
    verifies over it (contract section 6), with content capture on and a cut comment."""
    path = tmp_path / "fb.jsonl"
    answer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03"  # flags other than 01
    _send(
        path,
        answer=answer,
        case_id="q-9",
        label="thumbs_down",
        score=0.25,
        expected="Porto",
        comment="x" * (MAX_FEEDBACK_TEXT_BYTES + 10),
        capture=CaptureConfig(mode="SPAN_AND_EVENT"),
        key=KEY,
    )
    (outcome,) = read_outcomes(open_source(path).records())
    assert outcome.signature is not None and outcome.signature.startswith("hmac-sha256:k1:")
    assert KEY.verify(outcome.signed, outcome.signature) is None
    assert outcome.service == "support-desk"
    assert outcome.explanation is not None and outcome.explanation.endswith(
        f"…[cut: {MAX_FEEDBACK_TEXT_BYTES + 10} bytes, {MAX_FEEDBACK_TEXT_BYTES} kept]"
    )
    body = json.loads(outcome.signed or "")
    assert set(body) == {"traceparent", "case_id", "label", "score", "expected", "comment", "time"}
    assert body["traceparent"].endswith("-01") and body["expected"] == "Porto"


def test_the_report_marks_unverified_flags_and_who_sent_them(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    traces, answers = production
    feedback = tmp_path / "feedback.jsonl"
    _send(feedback, service="support-desk", answer=answers["deletion"].traceparent, correct=False)
    report = tmp_path / "report"
    code = main(["attribute", str(traces), str(feedback), "--report", str(report), "--quiet"])
    assert code == 0
    summary = json.loads((report / "summary.json").read_text())
    assert summary["feedback"]["unverified"] == 1 and summary["feedback"]["signed"] is False
    (page,) = (report / "cases").glob("*.js")
    view = json.loads(page.read_text().removeprefix("window.__memtraceCase(").rstrip(");\n"))
    (flag,) = view["question"]["feedback"]
    assert (flag["trust"], flag["service"]) == ("unverified", "support-desk")
    assert "signature" not in flag and "signed" not in flag
    assert "f.trust" in (report / "assets" / "report.js").read_text()

"""People's reviews of verdicts under the feedback trust policy (issues 32 and 33): forged,
future-dated, guessed, altered and replayed reviews, through the real SDK, real OTLP JSON files,
the real CLI (``main([...])``, in memory and streamed) and ``memtrace serve`` posting to a real
OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import json
import random
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from memtrace_otel.attribution import EvidenceMethod
from memtrace_otel.cli import build_parser, main
from memtrace_otel.cli.serve import prepare
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import FeedbackKey
from memtrace_otel.job import run_batch
from memtrace_otel.job._reviews import (
    read_verdict_spans,
    review_of,
    send_review,
    verdict_span_index,
)
from memtrace_otel.job._writeback import send_verdicts
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import OutcomeRule, TrustPolicy, open_source
from tests._otlp_receiver import otlp_receiver
from tests._pipeline import write_workload

SECRET = "the shared feedback key"
KEY = FeedbackKey(SECRET.encode(), "k1")
SECOND = 10**9
YEAR_2100 = 4_102_444_800 * SECOND


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, dict[str, Any]]:
    """The app's traces and cases, the verdict spans written back next to them, and the verdict
    span of each case (``trace_id``, ``span_id``)."""
    folder = tmp_path_factory.mktemp("trust-reviews")
    traces, cases = write_workload(folder)
    first, _ = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    written = folder / "verdict-spans.jsonl"
    assert send_verdicts(first, OtlpJsonLinesExporter(written)).failed == 0
    spans = verdict_span_index(open_source(str(written)).records())
    return traces, cases, written, {s["case_id"]: s for s in spans.values()}


def _review(
    path: Path, span: dict[str, Any], label: str, *, key: FeedbackKey | None = None
) -> None:
    """A review as ``memtrace serve`` sends it (signed with ``key``)."""
    assert send_review(
        OtlpJsonLinesExporter(path),
        verdict_trace_id=span["trace_id"],
        verdict_span_id=span["span_id"],
        label=label,
        key=key,
    )


def _forge(
    path: Path,
    *,
    trace_id: str,
    parent_span_id: str,
    label: str,
    when: int,
    service: str = "attacker",
) -> None:
    """What anyone who reaches the Collector can send: a review span written by hand."""
    provider = TracerProvider(resource=Resource.create({A.SERVICE_NAME: service}))
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(path)))
    parent = SpanContext(
        int(trace_id, 16), int(parent_span_id, 16), True, TraceFlags(TraceFlags.SAMPLED)
    )
    span = provider.get_tracer("forger").start_span(
        A.MEMTRACE_REVIEW_SPAN, context=set_span_in_context(NonRecordingSpan(parent), Context())
    )
    event = {A.GEN_AI_EVALUATION_NAME: A.MEMTRACE_REVIEW_SPAN}
    event[A.GEN_AI_EVALUATION_SCORE_LABEL] = label
    span.add_event(A.GEN_AI_EVALUATION_RESULT_EVENT, event, timestamp=when)
    span.end()
    provider.shutdown()


def _precision(
    verdicts: tuple[Path, Path, Path, dict[str, Any]], reviews: Path, trust: TrustPolicy
) -> tuple[dict[str, Any], bool]:
    traces, cases, written, _ = verdicts
    _, summary = run_batch(
        [str(traces), str(written), str(reviews)],
        EvidenceMethod(),
        cases_file=str(cases),
        rule=OutcomeRule(trust=trust),
    )
    assert summary.review_precision is not None
    return summary.review_precision, summary.ok


def test_a_forged_rejection_from_another_service_cannot_undo_a_signed_review(
    verdicts: tuple[Path, Path, Path, dict[str, Any]], tmp_path: Path
) -> None:
    span = verdicts[3]["case-retrieval"]
    reviews = tmp_path / "reviews.jsonl"
    _review(reviews, span, "confirmed", key=KEY)
    _forge(
        reviews,
        trace_id=span["trace_id"],
        parent_span_id=span["span_id"],
        label="rejected",
        when=time.time_ns() + SECOND,
    )
    precision, ok = _precision(verdicts, reviews, TrustPolicy(KEY))
    assert (precision["reviews"], precision["confirmed"], precision["precision"]) == (1, 1, 1.0)
    assert precision["refused"] == {"unsigned": 1} and precision["unverified"] == 0
    assert precision["signed"] is True
    assert not ok  # a refusal is reported, never a silent success
    # without a key the later forgery wins (latest wins, as for feedback), but marked unverified
    precision, ok = _precision(verdicts, reviews, TrustPolicy())
    assert (precision["reviews"], precision["rejected"], precision["precision"]) == (1, 1, 0.0)
    assert precision["unverified"] == 2 and precision["refused"] == {} and ok


@pytest.mark.parametrize("signed", [True, False])
def test_a_review_from_the_future_is_refused(
    verdicts: tuple[Path, Path, Path, dict[str, Any]], tmp_path: Path, signed: bool
) -> None:
    span = verdicts[3]["case-update"]
    reviews = tmp_path / "reviews.jsonl"
    _forge(
        reviews,
        trace_id=span["trace_id"],
        parent_span_id=span["span_id"],
        label="rejected",
        when=YEAR_2100,
    )
    _review(reviews, span, "confirmed", key=KEY)
    precision, _ = _precision(verdicts, reviews, TrustPolicy(KEY if signed else None))
    assert (precision["reviews"], precision["precision"]) == (1, 1.0)
    assert precision["refused"] == {"future": 1}


def test_an_unsigned_review_naming_a_guessed_verdict_counts_for_nothing(
    verdicts: tuple[Path, Path, Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A review in a trace of its own, naming a verdict span by its (guessed or copied) id."""
    spans = verdicts[3]
    reviews = tmp_path / "reviews.jsonl"
    rng = random.Random(33)
    for span in spans.values():
        _forge(
            reviews,
            trace_id=f"{rng.getrandbits(128):032x}",
            parent_span_id=span["span_id"],
            label="rejected",
            when=time.time_ns(),
        )
    precision, ok = _precision(verdicts, reviews, TrustPolicy())
    assert precision["reviews"] == 0 and precision["precision"] is None
    assert precision["refused"] == {"id_only": len(spans)} and not ok
    # an allow-list (a convenience on a trusted network) lets one service do so
    allowed = TrustPolicy(allowed_services=frozenset({"attacker"}))
    precision, _ = _precision(verdicts, reviews, allowed)
    assert (precision["reviews"], precision["rejected"]) == (len(spans), len(spans))
    assert precision["refused"] == {} and precision["unverified"] == 0
    # with a key, unsigned is unsigned wherever it sits
    precision, _ = _precision(verdicts, reviews, TrustPolicy(KEY))
    assert precision["reviews"] == 0 and precision["refused"] == {"unsigned": len(spans)}


def test_altered_replayed_and_other_key_reviews_are_refused(
    verdicts: tuple[Path, Path, Path, dict[str, Any]], tmp_path: Path
) -> None:
    span = verdicts[3]["case-filter"]
    altered = tmp_path / "altered.jsonl"
    _review(altered, span, "confirmed", key=KEY)
    text = altered.read_text()
    assert '"confirmed"' in text
    altered.write_text(text.replace('"confirmed"', '"rejected"'))  # changed after signing
    precision, _ = _precision(verdicts, altered, TrustPolicy(KEY))
    assert precision["reviews"] == 0 and precision["refused"] == {"altered": 1}

    other = tmp_path / "other.jsonl"
    _review(other, span, "rejected", key=FeedbackKey(b"not the shared key", "k2"))
    precision, _ = _precision(verdicts, other, TrustPolicy(KEY))
    assert precision["refused"] == {"unknown_key": 1}

    # a signed review copied, signature and all, into another span: one counts, one is refused
    replayed = tmp_path / "replayed.jsonl"
    _review(replayed, span, "rejected", key=KEY)
    (line,) = replayed.read_text().splitlines()
    span_id = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"]
    replayed.write_text(line + "\n" + line.replace(span_id, "f" * 16) + "\n")
    precision, _ = _precision(verdicts, replayed, TrustPolicy(KEY))
    assert precision["reviews"] == 1 and precision["refused"] == {"replayed": 1}

    # what a review's signature covers names it a review: a feedback's never verifies as one
    (review,) = [r for r in map(review_of, open_source(str(other)).records()) if r]
    assert review.signed is not None and json.loads(review.signed)["evaluation"] == (
        A.MEMTRACE_REVIEW_SPAN
    )


def _attribute(argv: list[str], report: Path) -> tuple[int, dict[str, Any]]:
    code = main(["attribute", *argv, "--report", str(report), "--quiet"])
    return code, json.loads((report / "summary.json").read_text())


@pytest.mark.parametrize("streamed", [False, True], ids=["in-memory", "streamed"])
def test_the_cli_refuses_forged_reviews_and_exits_1_in_memory_and_streamed(
    verdicts: tuple[Path, Path, Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    streamed: bool,
) -> None:
    traces, cases, written, spans = verdicts
    monkeypatch.setenv(E.ENV_MEMTRACE_FEEDBACK_KEY, SECRET)
    monkeypatch.setenv(E.ENV_MEMTRACE_FEEDBACK_KEY_ID, "k1")
    reviews = tmp_path / "reviews.jsonl"
    _review(reviews, spans["case-retrieval"], "confirmed", key=KEY)
    _review(reviews, spans["case-update"], "rejected", key=KEY)
    _forge(
        reviews,
        trace_id=spans["case-update"]["trace_id"],
        parent_span_id=spans["case-update"]["span_id"],
        label="confirmed",
        when=time.time_ns(),
    )
    argv = [str(traces), str(written), str(reviews), "--cases", str(cases)]
    if streamed:
        argv += ["--executor", "inline"]
    capsys.readouterr()
    code, summary = _attribute(argv, tmp_path / "report")
    err = capsys.readouterr().err
    assert "verdict precision from people's reviews: 1/2 confirmed = 50.0%" in err
    assert "reviews refused by the trust policy (not used): 1 (unsigned 1); e.g. unsigned: " in err
    precision = summary["review_precision"]
    assert code == 1
    assert (precision["reviews"], precision["confirmed"], precision["rejected"]) == (2, 1, 1)
    assert precision["refused"] == {"unsigned": 1}
    assert precision["refused_sample"][0].startswith("unsigned: ")
    assert summary["ok"] is False
    page = (tmp_path / "report" / "index.html").read_text()
    data = re.search(r'id="memtrace-report">(.*?)</script>', page, re.S)
    assert data and json.loads(data.group(1))["summary"]["review_precision"]["refused"] == {
        "unsigned": 1
    }
    assert "reviews_refused" in (tmp_path / "report" / "assets" / "report.js").read_text()


def test_streamed_reading_finds_the_same_verdict_and_review_spans(
    verdicts: tuple[Path, Path, Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The pass a streamed run makes for reviews reads what the in-memory loaders read, from
    one JSON Lines file holding the app's spans, the verdict spans and the reviews."""
    traces, _, written, spans = verdicts
    reviews = tmp_path / "reviews.jsonl"
    _review(reviews, spans["case-retrieval"], "confirmed")
    mixed = tmp_path / "all.jsonl"
    mixed.write_text(traces.read_text() + written.read_text() + reviews.read_text())
    key = lambda r: (r.trace_id, r.span_id, r.name)  # noqa: E731
    streamed = sorted(map(key, read_verdict_spans([str(mixed)])))
    loaded = sorted(
        key(r)
        for r in open_source(str(mixed)).records()
        if r.name in (A.MEMTRACE_ATTRIBUTION_SPAN, A.MEMTRACE_REVIEW_SPAN)
    )
    assert streamed == loaded and len(streamed) == len(spans) + 1
    # a compressed copy is not JSON Lines by the byte: it is decoded whole, with the same result
    import gzip

    packed = tmp_path / "all.jsonl.gz"
    packed.write_bytes(gzip.compress(mixed.read_bytes()))
    assert sorted(map(key, read_verdict_spans([str(packed)]))) == loaded


def test_a_streamed_run_takes_the_reviews_from_its_scan_without_reading_the_file_again(
    verdicts: tuple[Path, Path, Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scan of a streamed run parses every line already: it keeps the lines holding verdict
    and review spans (those spans alone, on a line shared with the app's spans), so the reviews
    need no third pass over a scanned file, and the precision equals the in-memory run's."""
    from memtrace_otel.job import _reviews

    traces, cases, written, spans = verdicts
    reviews = tmp_path / "reviews.jsonl"
    _review(reviews, spans["case-retrieval"], "confirmed")
    _review(reviews, spans["case-update"], "rejected")
    # one line holding an app span and a review span: only the review is kept for the pass
    app_line = json.loads(traces.read_text().splitlines()[0])
    review_line = json.loads(reviews.read_text().splitlines()[0])
    app_line["resourceSpans"] += review_line["resourceSpans"]
    mixed = tmp_path / "all.jsonl"
    mixed.write_text(
        traces.read_text() + written.read_text() + reviews.read_text().splitlines()[1] + "\n"
        + json.dumps(app_line) + "\n"
    )  # fmt: skip
    in_memory, loaded = run_batch([str(mixed)], EvidenceMethod(), cases_file=str(cases))

    def no_second_read(path: str) -> None:
        raise AssertionError(f"{path} read again for its reviews")

    monkeypatch.setattr(_reviews, "_json_lines_verdict_spans", no_second_read)
    streamed, summary = run_batch(
        [str(mixed)], EvidenceMethod(), cases_file=str(cases), executor="inline"
    )
    assert summary.review_precision is not None
    assert summary.review_precision == loaded.review_precision
    assert summary.review_precision["reviews"] == 2
    assert streamed == in_memory


def test_serve_signs_the_reviews_it_sends_when_a_key_is_set(
    verdicts: tuple[Path, Path, Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces, cases, written, spans = verdicts
    monkeypatch.setenv(E.ENV_MEMTRACE_FEEDBACK_KEY, SECRET)
    monkeypatch.setenv(E.ENV_MEMTRACE_FEEDBACK_KEY_ID, "k1")
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        args = build_parser().parse_args(
            ["serve", str(traces), str(written), "--cases", str(cases), "--port", "0"]
        )
        app, server = prepare(args)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            body = json.dumps({"case_id": "case-retrieval", "label": "confirmed"}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.server_address[1]}/api/review",
                data=body,
                headers={"Content-Type": "application/json", "X-Memtrace-Token": app.token},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200
        finally:
            server.shutdown()
            server.server_close()
            app.close()
    (sent,) = [s for s in receiver.spans if s.name == A.MEMTRACE_REVIEW_SPAN]
    (event,) = sent.events
    attrs = {a.key: a.value.string_value for a in event.attributes}
    signature = attrs[A.MEMTRACE_FEEDBACK_SIGNATURE]
    assert signature.startswith("hmac-sha256:k1:")
    verdict = spans["case-retrieval"]
    assert sent.trace_id.hex() == verdict["trace_id"]
    assert sent.parent_span_id.hex() == verdict["span_id"]
    # the reader recomputes the payload from the span it reads, and the signature verifies
    from memtrace_otel.instrumentation._signing import answer_traceparent, canonical_review

    payload = canonical_review(
        traceparent=answer_traceparent(verdict["trace_id"], verdict["span_id"]),
        label="confirmed",
        op_id=None,
        time_unix_nano=event.time_unix_nano,
    )
    assert KEY.verify(payload, signature) is None

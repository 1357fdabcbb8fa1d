"""Feedback as telemetry: marking answers wrong, reading outcomes, and failed cases without a cases file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.attribution import EvidenceMethod
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import AnswerRef, CaptureConfig, FeedbackKey, send_feedback
from memtrace_otel.job import run_batch
from memtrace_otel.semconv import EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import Outcome, OutcomeRule, TrustPolicy, open_source, read_outcomes
from memtrace_otel.sources._outcomes import latest_outcomes
from tests._pipeline import EXPECTED, write_workload

TRACE = "0af7651916cd43dd8448eb211c80319c"
ANSWER = "b7ad6b7169203331"
HOSTILE = '<script>alert("x")</script> & </pre>\u202e'


def _feedback_file(path: Path, *sends: dict[str, object]) -> Path:
    """Send each feedback through the real SDK into an OTLP JSON Lines file."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(path)))
    for kwargs in sends:
        send_feedback(tracer_provider=provider, **kwargs)  # type: ignore[arg-type]
    provider.shutdown()
    return path


# --- the reader ------------------------------------------------------------------------------


def test_feedback_span_names_its_answer_by_link_and_parent(tmp_path: Path) -> None:
    path = _feedback_file(
        tmp_path / "fb.jsonl",
        {
            "answer": f"00-{TRACE}-{ANSWER}-01",
            "correct": False,
            "expected": HOSTILE,
            "comment": HOSTILE,
            "capture": CaptureConfig(mode="SPAN_AND_EVENT"),
        },
    )
    records = list(open_source(path).records())
    (span,) = records
    assert span.name == A.MEMTRACE_FEEDBACK_SPAN
    assert (span.trace_id, span.parent_span_id) == (TRACE, ANSWER)  # in the answer's trace
    assert [(link.trace_id, link.span_id) for link in span.links] == [(TRACE, ANSWER)]
    (outcome,) = read_outcomes(records)
    assert outcome.via == "feedback" and outcome.failed is True
    assert (outcome.trace_id, outcome.span_id) == (TRACE, ANSWER)
    assert (outcome.label, outcome.score, outcome.name) == ("incorrect", 0.0, "user_feedback")
    assert outcome.expected == HOSTILE and outcome.explanation == HOSTILE  # data, kept verbatim


def test_expected_answer_follows_content_capture(tmp_path: Path) -> None:
    path = _feedback_file(
        tmp_path / "fb.jsonl",
        {
            "answer": f"00-{TRACE}-{ANSWER}-01",
            "correct": False,
            "expected": "Porto",
            "comment": "wrong city",
            "capture": CaptureConfig(mode="NO_CONTENT"),
        },
    )
    (outcome,) = read_outcomes(open_source(path).records())
    assert outcome.expected is None and outcome.explanation == "wrong city"


def test_feedback_by_case_id_only_starts_its_own_trace(tmp_path: Path) -> None:
    path = _feedback_file(tmp_path / "fb.jsonl", {"case_id": "q-7", "correct": True})
    (span,) = list(open_source(path).records())
    assert span.parent_span_id is None and not span.links
    (outcome,) = read_outcomes([span])
    assert (outcome.case_id, outcome.trace_id, outcome.failed) == ("q-7", None, False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"correct": False}, "say which answer"),
        ({"answer": "not-a-traceparent", "correct": False}, "not a W3C traceparent"),
        ({"case_id": "q", "score": float("nan")}, "finite"),
        ({"case_id": "q"}, "say what the feedback is"),
    ],
)
def test_bad_feedback_arguments_raise_value_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        send_feedback(tracer_provider=TracerProvider(), **kwargs)  # type: ignore[arg-type]


def test_evaluation_events_on_any_span_are_outcomes() -> None:
    event = EventRecord(
        A.GEN_AI_EVALUATION_RESULT_EVENT,
        5,
        {A.GEN_AI_EVALUATION_NAME: "correctness", A.GEN_AI_EVALUATION_SCORE_VALUE: 0},
    )
    span = SpanRecord(TRACE, ANSWER, "chat gpt-4o", events=(event,))
    (outcome,) = read_outcomes([span])
    assert (outcome.via, outcome.trace_id, outcome.span_id, outcome.failed) == (
        "event",
        TRACE,
        ANSWER,
        True,
    )
    assert read_outcomes([span], OutcomeRule(names=["relevance"])) == []


def test_rule_vocabularies() -> None:
    default = OutcomeRule()
    assert default.classify("INCORRECT", None) is True
    assert default.classify("correct", 0.0) is False  # the label decides when it is known
    assert default.classify("thumbs_down", None) is None  # never guessed
    assert default.classify(None, 0.5) is None
    custom = OutcomeRule(failure_labels="thumbs_down, bad", success_labels=["thumbs_up"])
    assert (
        custom.classify("Thumbs_Down", None) is True and custom.classify("incorrect", None) is None
    )
    graded = OutcomeRule(threshold=0.7)
    assert graded.classify(None, 0.69) is True and graded.classify(None, 0.7) is False
    with pytest.raises(ValueError, match="both"):
        OutcomeRule(failure_labels="x", success_labels="x")
    with pytest.raises(ValueError, match="finite"):
        OutcomeRule(threshold=float("inf"))


def test_latest_outcome_wins_and_undecided_never_cancels() -> None:
    wrong = Outcome(True, case_id="q", time_unix_nano=1)
    right = Outcome(False, case_id="q", time_unix_nano=2)
    maybe = Outcome(None, case_id="q", time_unix_nano=3)
    assert latest_outcomes([right, wrong, maybe])["case:q"] is right
    assert latest_outcomes([wrong])["case:q"] is wrong


def _log_line(records: list[dict[str, object]]) -> str:
    return json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]})


def test_log_records_from_a_collector_logs_file(tmp_path: Path) -> None:
    good = {
        "timeUnixNano": "9",
        "eventName": A.GEN_AI_EVALUATION_RESULT_EVENT,
        "traceId": TRACE,
        "spanId": ANSWER,
        "attributes": [
            {"key": A.GEN_AI_EVALUATION_SCORE_LABEL, "value": {"stringValue": "incorrect"}},
            {"key": A.GEN_AI_EVALUATION_EXPLANATION, "value": {"stringValue": HOSTILE}},
        ],
    }
    old_style = {
        "attributes": [
            {"key": "event.name", "value": {"stringValue": A.GEN_AI_EVALUATION_RESULT_EVENT}},
            {"key": A.MEMTRACE_CASE_ID, "value": {"stringValue": "q-2"}},
            {"key": A.GEN_AI_EVALUATION_SCORE_VALUE, "value": {"doubleValue": 1.0}},
        ]
    }
    other = {"eventName": "gen_ai.client.inference.operation.details", "attributes": []}
    bad = {"eventName": A.GEN_AI_EVALUATION_RESULT_EVENT, "traceId": "xyz"}
    path = tmp_path / "logs.jsonl"
    path.write_text(_log_line([good, old_style, other, bad]) + "\n")
    source = open_source(path)
    assert list(source.records()) == []
    first, second = source.outcomes
    assert (first.via, first.trace_id, first.span_id, first.failed) == ("log", TRACE, ANSWER, True)
    assert first.explanation == HOSTILE and first.time_unix_nano == 9
    assert (second.case_id, second.failed) == ("q-2", False)
    assert source.stats.skipped == 1 and "traceId" in source.stats.errors[0]


# --- failed cases without a cases file -------------------------------------------------------


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, AnswerRef]]:
    """The hand-written workload without judge ops: nothing says which answers are wrong."""
    answers: dict[str, AnswerRef] = {}
    traces, _ = write_workload(tmp_path_factory.mktemp("production"), judge=False, answers=answers)
    return traces, answers


def test_without_feedback_nothing_is_found(production: tuple[Path, dict[str, AnswerRef]]) -> None:
    traces, _ = production
    verdicts, summary = run_batch([str(traces)], EvidenceMethod())
    assert verdicts == [] and summary.cases == 0


def test_feedback_flags_failed_cases_by_traceparent(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    traces, answers = production
    with_expected = ("update", "deletion", "extraction")
    sends: list[dict[str, object]] = [
        {
            "answer": answers[f].traceparent,
            "correct": False,
            "expected": "Porto",
            "comment": HOSTILE,
            "capture": CaptureConfig(mode="SPAN_AND_EVENT"),
        }
        for f in with_expected
    ]
    sends.append({"answer": answers["response"].traceparent, "correct": False})  # no expected
    sends.append({"answer": answers["none"].traceparent, "correct": True})
    feedback = _feedback_file(tmp_path / "feedback.jsonl", *sends)
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod())
    by_case = {v.case_id: v for v in verdicts}
    assert set(by_case) == {f"case-{f}" for f in (*with_expected, "response")}
    # the expected answer given with the feedback is the gold answer attribution follows
    for fault in with_expected:
        verdict = by_case[f"case-{fault}"]
        assert (verdict.error_type, verdict.op_name) == EXPECTED[fault], verdict.reason
    assert summary.cases_by_source == {"judge": 0, "feedback": 4}
    assert summary.feedback["failures"] == 4 and summary.feedback["successes"] == 1
    assert summary.feedback["unknown"] == []


def test_failed_case_carries_question_prediction_expected_and_feedback(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    from memtrace_otel.job import BatchSummary, failed_cases, load_store_graphs

    traces, answers = production
    feedback = _feedback_file(
        tmp_path / "feedback.jsonl",
        {
            "answer": answers["response"].traceparent,
            "correct": False,
            "expected": "Porto",
            "comment": "it said Lisbon",
            "capture": CaptureConfig(mode="SPAN_AND_EVENT"),
        },
    )
    outcomes: list[Outcome] = []
    graphs = load_store_graphs([str(traces), str(feedback)], outcomes=outcomes)
    ((store, case),) = failed_cases(graphs, None, BatchSummary(), outcomes)
    assert store == "user-response" and case.case_id == "case-response"
    assert case.question == "Where does Ana live?" and case.prediction == "Lisbon"
    assert case.gold_answers[0] == "Porto" and case.verdict == "incorrect"
    assert case.feedback[-1].explanation == "it said Lisbon" and case.source == "feedback"
    # feedback spans are outcomes, not graph nodes
    assert all(
        d.get("span_name") != A.MEMTRACE_FEEDBACK_SPAN
        for G in graphs.values()
        for _, d in G.nodes(data=True)
    )


def _signed_feedback(tmp_path: Path, answers: dict[str, AnswerRef], key: FeedbackKey) -> Path:
    """Signed feedback by case id and by answer, one case's latest saying it was right."""
    return _feedback_file(
        tmp_path / "feedback.jsonl",
        {"case_id": "case-retrieval", "correct": False, "key": key},
        {"answer": answers["filter"].traceparent, "correct": False, "key": key},
        {"case_id": "case-filter", "correct": True, "key": key},  # later: "it was right"
        {"answer": answers["assemble"].traceparent, "correct": True, "key": key},
        {"answer": answers["assemble"].traceparent, "label": "incorrect", "key": key},
    )


def test_feedback_by_case_id_and_latest_wins(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    # Feedback naming a case by id alone, in a trace of its own, counts only when signed (or
    # from an allowed service): the sender and the job share a key here.
    traces, answers = production
    key = FeedbackKey(b"shared secret", "k1")
    feedback = _signed_feedback(tmp_path, answers, key)
    rule = OutcomeRule(trust=TrustPolicy(key))
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod(), rule=rule)
    assert {v.case_id for v in verdicts} == {"case-retrieval", "case-assemble"}
    assert summary.feedback["read"] == 5
    assert summary.feedback["refused"] == {} and summary.feedback["unverified"] == 0
    # unsigned, the two by-id feedbacks are refused: the rest still decides
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod())
    assert summary.feedback["refused"] == {"id_only": 2}
    assert {v.case_id for v in verdicts} == {"case-filter", "case-assemble"}


def test_feedback_for_unknown_cases_is_counted_not_raised(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    traces, _ = production
    feedback = _feedback_file(
        tmp_path / "feedback.jsonl",
        {"case_id": "no-such-case", "correct": False},
        {"answer": f"00-{TRACE}-{ANSWER}-01", "correct": False},
    )
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod())
    assert verdicts == [] and summary.cases == 0
    assert summary.feedback["unknown"] == ["case:no-such-case", f"span:{TRACE}/{ANSWER}"]
    assert summary.ok  # not an error: the answers may arrive later


def test_feedback_before_its_answer_is_picked_up_on_the_next_run(tmp_path: Path) -> None:
    answers: dict[str, AnswerRef] = {}
    traces, _ = write_workload(tmp_path, judge=False, answers=answers, faults=("deletion",))
    feedback = _feedback_file(
        tmp_path / "feedback.jsonl", {"answer": answers["deletion"].traceparent, "correct": False}
    )
    out = tmp_path / "verdicts.jsonl"
    # first run: only the feedback has arrived
    verdicts, summary = run_batch([str(feedback)], EvidenceMethod(), out=out)
    assert verdicts == [] and len(summary.feedback["unknown"]) == 1
    # next run: the answer's trace is there too; nothing was marked done
    verdicts, summary = run_batch([str(traces), str(feedback)], EvidenceMethod(), out=out)
    assert [(v.case_id, v.error_type) for v in verdicts] == [("case-deletion", "DeletionError")]
    assert summary.resumed == 0


def test_cases_file_wins_over_feedback(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    traces, answers = production
    feedback = _feedback_file(
        tmp_path / "feedback.jsonl", {"answer": answers["update"].traceparent, "correct": False}
    )
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"case_id": "case-deletion", "gold_answers": ["Porto"]}) + "\n")
    verdicts, summary = run_batch(
        [str(traces), str(feedback)], EvidenceMethod(), cases_file=str(cases)
    )
    assert [v.case_id for v in verdicts] == ["case-deletion"]
    assert summary.cases_by_source == {"cases-file": 1}


def test_answers_without_case_ids_take_their_trace_id(tmp_path: Path) -> None:
    from memtrace_otel.graph import build_graph

    gen = SpanRecord(
        TRACE,
        ANSWER,
        "memtrace.generate app.answer",
        attributes={A.MEMTRACE_OP_KIND: "generate", A.MEMTRACE_OP_NAME: "app.answer"},
    )
    store_op = SpanRecord(
        TRACE,
        "c" * 16,
        "create_memory",
        attributes={A.MEMTRACE_OP_KIND: "create", A.MEMTRACE_OP_NAME: "app.add"},
    )
    G = build_graph([gen, store_op])
    assert G.nodes[ANSWER]["case"] == TRACE  # a response-stage op: the trace is its case
    assert G.nodes["c" * 16]["case"] is None  # construction ops serve no one question
    feedback = SpanRecord(
        "d" * 32,
        "e" * 16,
        A.MEMTRACE_FEEDBACK_SPAN,
        links=(LinkRecord(TRACE, ANSWER),),
        events=(
            EventRecord(
                A.GEN_AI_EVALUATION_RESULT_EVENT, 1, {A.GEN_AI_EVALUATION_SCORE_LABEL: "incorrect"}
            ),
        ),
    )
    from memtrace_otel.job import feedback_cases

    decided, stats = feedback_cases({"": G}, read_outcomes([feedback]))
    assert list(decided) == [TRACE] and stats.failures == 1


# --- the CLI ---------------------------------------------------------------------------------


def test_cli_feedback_then_attribute(
    production: tuple[Path, dict[str, AnswerRef]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memtrace_otel.cli import EXIT_NOTHING_TO_ATTRIBUTE, main

    traces, answers = production
    assert main(["attribute", str(traces), "--quiet"]) == EXIT_NOTHING_TO_ATTRIBUTE
    err = capsys.readouterr().err
    assert "nothing to attribute" in err and "memtrace feedback --traceparent" in err

    monkeypatch.setenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, "SPAN_AND_EVENT")
    # signed: feedback by case id alone counts only when verified (or from an allowed service)
    monkeypatch.setenv(E.ENV_MEMTRACE_FEEDBACK_KEY, "shared secret")
    feedback = tmp_path / "feedback.jsonl"
    code = main(
        [
            "feedback",
            "--traceparent",
            answers["deletion"].traceparent,
            "--wrong",
            "--expected",
            "Porto",
            "--comment",
            HOSTILE,
            "--traces-file",
            str(feedback),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("00-" + answers["deletion"].traceparent.split("-")[1])
    lines = tmp_path / "more.jsonl"
    lines.write_text(
        json.dumps({"case_id": "case-update", "correct": False})
        + "\n"
        + json.dumps({"case_id": "nobody", "correct": False})
        + "\n"
    )
    assert main(["feedback", "--from", str(lines), "--traces-file", str(feedback)]) == 0
    out = tmp_path / "verdicts.jsonl"
    code = main(["attribute", str(traces), str(feedback), "--out", str(out), "--quiet"])
    assert code == 0
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert {v["case_id"] for v in verdicts} == {"case-deletion", "case-update"}
    deletion = next(v for v in verdicts if v["case_id"] == "case-deletion")
    assert (deletion["error_type"], deletion["op_name"]) == EXPECTED["deletion"]
    err = capsys.readouterr().err
    assert "feedback: 3 read, 2 cases flagged wrong" in err and "1 for cases not in these" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--wrong"], "say which answer"),
        (["--traceparent", "00-zz-01", "--wrong"], "not a W3C traceparent"),
        (["--case-id", "q"], "say what the feedback is"),
    ],
)
def test_cli_feedback_bad_arguments_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memtrace_otel.cli import main

    assert main(["feedback", *argv, "--traces-file", str(tmp_path / "f.jsonl")]) == 2
    assert message in capsys.readouterr().err


def test_cli_feedback_bad_line_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memtrace_otel.cli import main

    lines = tmp_path / "in.jsonl"
    lines.write_text('{"case_id": "q", "correct": false}\n{"case_id": "q", "correct": "no"}\n')
    assert main(["feedback", "--from", str(lines), "--traces-file", str(tmp_path / "f")]) == 2
    assert f"{lines}:2" in capsys.readouterr().err


def test_cli_rule_options(production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path) -> None:
    from memtrace_otel.cli import EXIT_NOTHING_TO_ATTRIBUTE, main

    traces, answers = production
    feedback = tmp_path / "feedback.jsonl"
    argv = ["--traceparent", answers["deletion"].traceparent, "--traces-file", str(feedback)]
    assert main(["feedback", *argv, "--label", "thumbs_down"]) == 0
    base = ["attribute", str(traces), str(feedback), "--quiet"]
    assert main(base) == EXIT_NOTHING_TO_ATTRIBUTE  # not in the default vocabulary
    assert main([*base, "--failure-labels", "thumbs_down,bad"]) == 0
    assert main([*base, "--failure-labels", "x", "--success-labels", "x"]) == 2


def test_report_case_page_leads_with_question_answers_and_feedback(
    production: tuple[Path, dict[str, AnswerRef]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memtrace_otel.cli import main

    traces, answers = production
    monkeypatch.setenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, "SPAN_AND_EVENT")
    feedback = tmp_path / "feedback.jsonl"
    argv = ["--traces-file", str(feedback), "--wrong", "--comment", HOSTILE]
    main(
        ["feedback", "--traceparent", answers["response"].traceparent, *argv, "--expected", HOSTILE]
    )
    report = tmp_path / "report"
    code = main(["attribute", str(traces), str(feedback), "--report", str(report), "--quiet"])
    assert code == 0
    (page,) = (report / "cases").glob("*.js")
    text = page.read_text()
    assert "<script>" not in text and "</pre>" not in text  # escaped for the page
    prefix, suffix = "window.__memtraceCase(", ");\n"
    view = json.loads(text[len(prefix) : -len(suffix)])
    question = view["question"]
    assert question["question"] == "Where does Ana live?"
    assert question["expected"][0] == HOSTILE and question["prediction"] == "Lisbon"
    (flag,) = question["feedback"]
    assert (flag["label"], flag["via"], flag["explanation"]) == ("incorrect", "feedback", HOSTILE)
    assert view["verdict"]["case_id"] == "case-response"


def test_a_store_decided_alone_from_the_outcome_index_picks_as_from_every_outcome(
    production: tuple[Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    # A partition decides each store's failed cases alone; it takes only the outcomes that name
    # one of the store's cases, answer spans or traces (OutcomeIndex), not every outcome of the
    # export each time. The picks must be those of every outcome: by answer, by case id (signed)
    # and in the upstream app's traces (cases named by their trace), right and wrong alike.
    from dataclasses import replace

    from memtrace_otel.job import load_store_graphs
    from memtrace_otel.job._feedback import OutcomeIndex, StoreCases, decide_failed
    from tests._upstream_app import run_app

    traces, answers = production
    key = FeedbackKey(b"shared secret", "k1")
    feedback = _signed_feedback(tmp_path, answers, key)
    upstream = run_app(tmp_path / "upstream", seed=3).traces
    outcomes: list[Outcome] = []
    graphs = load_store_graphs([str(traces), str(feedback), str(upstream)], outcomes=outcomes)
    # And outcomes that name an answer span alone, or a trace alone.
    wrong = next(o for o in outcomes if o.failed)
    for G in graphs.values():
        view = StoreCases.of(G)
        for span_id in list(view.span_case)[:2]:
            outcomes.append(replace(wrong, case_id=None, trace_id=None, span_id=span_id))
        for trace_id in list(view.trace_cases)[-2:]:
            outcomes.append(replace(wrong, case_id=None, trace_id=trace_id, span_id=None))
    picked = 0
    for rule in (OutcomeRule(), OutcomeRule(trust=TrustPolicy(key=key))):
        index = OutcomeIndex(outcomes, rule)
        assert len(graphs) > 5 and len(index.used) > 2
        for store, G in graphs.items():
            everything = {store: StoreCases.of(G, outcomes)}
            alone = {store: StoreCases.of(G, index)}
            assert alone == everything
            want = decide_failed(everything, outcomes, rule)
            got = decide_failed(alone, index, rule)
            assert (got[0], got[2], got[3]) == (want[0], want[2], want[3])
            assert len(index.relevant(alone.values())) < len(index.used)
            picked += len(got[0])
    assert picked > 30

"""Unbounded output (issue 32, item 8): a case page of about 5 MB at most, with the graph collapsed
beyond it and the cut stated; at most 50 feedback listed per case; comments and expected answers
cut at 4 KiB where they are sent. Real SDK, real OTLP files, the real CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from memtrace_otel.cli import EXIT_OK, main
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import (
    MAX_FEEDBACK_TEXT_BYTES,
    CaptureConfig,
    MemTracer,
    WriterRegistry,
    send_feedback,
)
from memtrace_otel.reporting._view import MAX_CASE_PAGE_BYTES, MAX_FEEDBACK_LISTED
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import open_source, read_outcomes
from tests._pipeline import write_workload

CHAIN = 2500
FILLER = "x" * 1500


def _chain(folder: Path) -> tuple[Path, Path]:
    """One case whose record is updated ``CHAIN`` times in its own trace before the answer."""
    traces = folder / "traces.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(OtlpJsonLinesExporter(traces), max_queue_size=CHAIN * 4)
    )
    mt = MemTracer(
        tracer_provider=provider,
        system="test",
        store_id="user-chain",
        capture=CaptureConfig(mode="SPAN_AND_EVENT"),
        registry=WriterRegistry(),
    )
    case = "case-chain"
    message = mt.variable("msg:1", "My sister Ana moved to Porto last May.", category="message")
    question = mt.variable("query:1", "Where does Ana live?", category="query")
    with provider.get_tracer("app").start_as_current_span("POST /answer"):
        with mt.create("test.add", inputs=[message], case_id=case) as op:
            record = op.output(mt.variable("mem:1", "Ana lives in Porto", category="memory"))
        for i in range(CHAIN):
            text = "Ana lives abroad " if i == CHAIN // 2 else "Ana lives in Porto "
            with mt.update("test.merge", inputs=[record], case_id=case) as op:
                record = op.output(record.next(text + f"{i} {FILLER}"))
        with mt.retrieve("test.search", inputs=[question, record], case_id=case) as op:
            hits = op.output(mt.variable("cands:1", [record.value], category="candidates"))
        with mt.generate("test.answer", inputs=[hits, question], case_id=case) as op:
            prediction = op.output(mt.variable("pred:1", "abroad", category="prediction"))
        with mt.judge("test.judge", inputs=[prediction], case_id=case) as op:
            op.set_verdict(False)
    provider.shutdown()
    cases = folder / "cases.jsonl"
    cases.write_text(
        json.dumps({"case_id": case, "question": "Where does Ana live?", "gold_answers": ["Porto"]})
        + "\n"
    )
    return traces, cases


def test_a_huge_case_page_is_collapsed_and_says_so(tmp_path: Path) -> None:
    """Break 8a: a 100k-op chain in one trace produced a 136 MB case page."""
    traces, cases = _chain(tmp_path)
    report = tmp_path / "report"
    argv = ["attribute", str(traces), "--cases", str(cases), "--report", str(report), "--quiet"]
    assert main(argv) == EXIT_OK
    (page,) = (report / "cases").glob("*.js")
    size = page.stat().st_size
    assert size <= MAX_CASE_PAGE_BYTES * 1.1, size
    view = json.loads(page.read_text().removeprefix("window.__memtraceCase(").rstrip(");\n"))
    cut = view["cut"]
    assert cut is not None and cut["nodes_shown"] < cut["nodes"] and cut["bytes"] > size
    assert "larger than the page bound" in cut["reason"]
    shown = {n["id"] for n in view["nodes"]}
    if view["verdict"]["op_id"]:
        assert view["verdict"]["op_id"] in shown  # the culprit is never cut
    assert all(e["source"] in shown and e["target"] in shown for e in view["edges"])


def test_a_small_case_page_is_not_cut(tmp_path: Path) -> None:
    traces, cases = write_workload(tmp_path, faults=("update",))
    report = tmp_path / "report"
    argv = ["attribute", str(traces), "--cases", str(cases), "--report", str(report), "--quiet"]
    assert main(argv) == EXIT_OK
    (page,) = (report / "cases").glob("*.js")
    assert '"cut":null' in page.read_text()


def test_at_most_50_feedback_are_listed_the_rest_counted(tmp_path: Path) -> None:
    """Break 8b: 10k feedback spans on one answer gave a 5 MB page listing every comment."""
    answers: dict[str, object] = {}
    traces, _ = write_workload(tmp_path, judge=False, answers=answers, faults=("deletion",))  # type: ignore[arg-type]
    feedback = tmp_path / "feedback.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OtlpJsonLinesExporter(feedback)))
    answer = answers["deletion"].traceparent  # type: ignore[attr-defined]
    for i in range(300):
        send_feedback(answer, correct=False, comment=f"wrong #{i}", tracer_provider=provider)
    provider.shutdown()
    report = tmp_path / "report"
    code = main(["attribute", str(traces), str(feedback), "--report", str(report), "--quiet"])
    assert code == EXIT_OK
    (page,) = (report / "cases").glob("*.js")
    view = json.loads(page.read_text().removeprefix("window.__memtraceCase(").rstrip(");\n"))
    listed = view["question"]["feedback"]
    assert len(listed) == MAX_FEEDBACK_LISTED == 50
    assert view["question"]["feedback_omitted"] == 250
    assert listed[-1]["explanation"] == "wrong #299"  # the latest, which decides, is last


@pytest.mark.parametrize("field", ["comment", "expected"])
def test_a_10_mb_comment_or_expected_answer_is_cut_where_it_is_sent(
    tmp_path: Path, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Break 8c: a 10 MB --comment became a 10 MB span, which a Collector may reject together
    with its whole batch."""
    monkeypatch.setenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, "PRODUCTION")
    monkeypatch.setenv(
        E.ENV_MEMTRACE_MAX_VALUE_LENGTH, str(10**8)
    )  # capture's own cut out of the way
    out = tmp_path / "fb.jsonl"
    huge = "é" * (5 * 2**20)  # 10 MiB of UTF-8
    started = time.perf_counter()
    argv = ["feedback", "--case-id", "q-1", "--wrong", f"--{field}", huge]
    assert main([*argv, "--traces-file", str(out)]) == EXIT_OK
    assert time.perf_counter() - started < 60  # bounded, not a hang (the bound is the size)
    assert out.stat().st_size < 3 * MAX_FEEDBACK_TEXT_BYTES + 4096
    (outcome,) = read_outcomes(open_source(out).records())
    text = outcome.explanation if field == "comment" else outcome.expected
    assert text is not None and text.endswith(
        f"…[cut: {len(huge.encode())} bytes, {MAX_FEEDBACK_TEXT_BYTES} kept]"
    )
    assert len(text.split("…[cut")[0].encode()) == MAX_FEEDBACK_TEXT_BYTES


def test_simple_processor_writes_a_feedback_under_the_bound(tmp_path: Path) -> None:
    out = tmp_path / "fb.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(out)))
    send_feedback(case_id="q", correct=False, comment="y" * 10**6, tracer_provider=provider)
    provider.shutdown()
    assert out.stat().st_size < 2 * MAX_FEEDBACK_TEXT_BYTES + 4096

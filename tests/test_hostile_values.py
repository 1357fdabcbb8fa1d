"""Hostile values in real OTLP files (issue 32, items 2, 3 and 5): a NaN or infinite double, a
time beyond uint64 and an invalid UTF-8 byte are counted skips, never a crash, and the report
and a strict ``summary.json`` are still written. Files come from the real SDK and exporter."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from memtrace_otel.cli import main
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import AnswerRef, send_feedback
from memtrace_otel.sources import open_source
from tests._pipeline import write_workload


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture()
def flagged(tmp_path: Path) -> tuple[Path, Path, dict[str, AnswerRef]]:
    """A production workload and feedback flagging its deletion case."""
    answers: dict[str, AnswerRef] = {}
    traces, _ = write_workload(tmp_path, judge=False, answers=answers)
    feedback = tmp_path / "feedback.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(feedback)))
    send_feedback(answers["deletion"].traceparent, correct=False, tracer_provider=provider)
    provider.shutdown()
    return traces, feedback, answers


def _span_in_answer_trace(path: Path, answer: AnswerRef, attributes: dict[str, Any]) -> None:
    """One more span in the answer's trace, written by the real SDK (which allows NaN)."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan

    from memtrace_otel.instrumentation import parse_traceparent

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(path)))
    parent = parse_traceparent(answer.traceparent)
    assert parent is not None
    context = trace.set_span_in_context(NonRecordingSpan(parent))
    with provider.get_tracer("app").start_as_current_span(
        "app.rerank", context=context, attributes=attributes
    ):
        pass
    provider.shutdown()


def _with_attribute(traces: Path, answer: AnswerRef, span_name: str, value_json: str) -> None:
    """Add a double attribute, written as ``value_json``, to one op span of the answer's trace."""
    trace_id = answer.traceparent.split("-")[1]
    lines = traces.read_text().splitlines()
    for i, line in enumerate(lines):
        span = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        if span["traceId"] == trace_id and span["name"] == span_name:
            marker = '"attributes":['
            at = line.index(marker, line.index('"spanId"')) + len(marker)
            extra = '{"key":"rerank.score","value":{"doubleValue":' + value_json + "}},"
            lines[i] = line[:at] + extra + line[at:]
            break
    else:
        raise AssertionError(f"no {span_name} span in the answer's trace")
    traces.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("value_json", ['"NaN"', "NaN", '"Infinity"', "-Infinity"])
def test_a_non_finite_double_is_a_counted_skip_and_the_report_is_written(
    flagged: tuple[Path, Path, dict[str, AnswerRef]], tmp_path: Path, value_json: str
) -> None:
    """Break 2: one NaN double on an op of a flagged case crashed ``memtrace attribute
    --report`` (no index.html, no summary.json, every resumed run crashing again)."""
    traces, feedback, answers = flagged
    _with_attribute(traces, answers["deletion"], "memtrace.filter test.rerank", value_json)
    report, out = tmp_path / "report", tmp_path / "verdicts.jsonl"
    argv = ["attribute", str(traces), str(feedback), "--report", str(report), "--quiet"]
    for _ in range(2):  # and a resumed run
        assert main([*argv, "--out", str(out)]) == 1  # 1: some records skipped
        summary = _strict((report / "summary.json").read_text())
        assert summary["skipped_records"] == 1
        assert any("non-finite double" in e for e in summary["source_errors"])
        assert (report / "index.html").is_file()
    assert [_strict(line)["case_id"] for line in out.read_text().splitlines()] == ["case-deletion"]


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_the_exporter_writes_non_finite_doubles_as_proto3_json_strings(
    tmp_path: Path, value: float
) -> None:
    path = tmp_path / "t.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(path)))
    with provider.get_tracer("app").start_as_current_span("s", attributes={"x": value}):
        pass
    provider.shutdown()
    text = path.read_text()
    _strict(text)
    assert '"doubleValue":"NaN"' in text or '"doubleValue":"Infinity"' in text


def test_a_time_beyond_uint64_is_a_counted_skip(
    flagged: tuple[Path, Path, dict[str, AnswerRef]], tmp_path: Path
) -> None:
    """Break 3: a start time above the uint64 range was accepted and crashed the report with
    an OverflowError (and turned the newest version of a record "stale")."""
    traces, feedback, answers = flagged
    extra = tmp_path / "extra.jsonl"
    _span_in_answer_trace(extra, answers["deletion"], {})
    line = extra.read_text()
    start = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"]
    for huge in (f'"{2**64 + 7}"', str(2**70)):  # a JSON string and a JSON number
        with traces.open("a") as handle:
            handle.write(line.replace(f'"{start}"', huge))
    report = tmp_path / "report"
    code = main(["attribute", str(traces), str(feedback), "--report", str(report), "--quiet"])
    assert code == 1
    summary = _strict((report / "summary.json").read_text())
    assert summary["skipped_records"] == 2
    assert all("uint64" in e for e in summary["source_errors"])
    assert summary["attributed"] + summary["unattributed"] == 1
    assert (report / "index.html").is_file()


def test_one_bad_byte_loses_one_span_not_its_line(tmp_path: Path) -> None:
    """Break 5: one invalid UTF-8 byte dropped a whole line: 200 spans lost, "1 skipped"."""
    path = tmp_path / "batch.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(
            OtlpJsonLinesExporter(path), max_export_batch_size=512, schedule_delay_millis=60_000
        )
    )
    tracer = provider.get_tracer("app")
    for i in range(200):
        with tracer.start_as_current_span(f"op-{i:03d}"):
            pass
    provider.shutdown()
    (line,) = path.read_bytes().splitlines()
    assert line.count(b'"name":"op-') == 200
    path.write_bytes(line.replace(b'"op-057"', b'"op-\xff57"') + b"\n")
    source = open_source(path)
    names = {r.name for r in source.records()}
    assert len(names) == 199 and "op-057" not in names
    assert source.stats.skipped == 1
    (error,) = source.stats.errors
    assert "not UTF-8" in error and "spans[57]" in error


def test_a_bad_byte_outside_any_span_counts_every_span_of_the_line(tmp_path: Path) -> None:
    path = tmp_path / "batch.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(
            OtlpJsonLinesExporter(path), max_export_batch_size=512, schedule_delay_millis=60_000
        )
    )
    for i in range(5):
        with provider.get_tracer("app").start_as_current_span(f"op-{i}"):
            pass
    provider.shutdown()
    line = path.read_bytes().replace(b'"python"', b'"py\xffthon"', 1)  # a resource attribute
    path.write_bytes(line)
    source = open_source(path)
    assert list(source.records()) == []
    assert source.stats.skipped == 5


def test_the_sdk_time_is_far_below_the_bound() -> None:
    # the bound is 2**64 - 1 ns (year 2554): real clocks are nowhere near it
    assert time.time_ns() < 2**64 // 10

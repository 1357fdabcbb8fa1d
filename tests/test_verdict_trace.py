"""Verdict spans inside the culprit's trace: parented to the culprit, linked to it, and read back
by later runs as verdicts, never as activity of the memory store.

The OTLP endpoint is a real HTTP server on loopback (tests/_otlp_receiver.py) fed by the SDK's
own OTLP exporter; the Jaeger v2 variant is in tests/test_e2e_backends.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtrace_otel.attribution import EvidenceMethod
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.job import read_verdicts, run_batch
from memtrace_otel.job._batch import load_store_graphs
from memtrace_otel.job._writeback import send_verdicts, verdict_span_writer
from memtrace_otel.semconv import attributes as A
from tests._otlp_receiver import otlp_receiver
from tests._pipeline import write_workload


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_workload(tmp_path_factory.mktemp("verdict-trace"))


def _write_back(
    workload: tuple[Path, Path], out: Path, monkeypatch: pytest.MonkeyPatch, *extra: str
) -> list[object]:
    from memtrace_otel.cli import main

    traces, cases = workload
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        args = ["attribute", str(traces), "--cases", str(cases), "--out", str(out)]
        assert main([*args, "--write-back", "--quiet", *extra]) == 0
    return [s for s in receiver.spans if s.name == A.MEMTRACE_ATTRIBUTION_SPAN]


def test_verdict_span_is_a_child_of_the_culprit_and_keeps_its_link(
    workload: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "v.jsonl"
    spans = _write_back(workload, out, monkeypatch)
    verdicts = {v.case_id: v for v in read_verdicts(out)}
    assert len(spans) == len(verdicts) == 7
    for span in spans:
        attrs = {a.key: a.value for a in span.attributes}
        verdict = verdicts[attrs[A.MEMTRACE_ATTRIBUTION_CASE_ID].string_value]
        assert verdict.op_id and verdict.trace_id
        assert span.trace_id.hex() == verdict.trace_id  # inside the culprit's trace
        assert span.parent_span_id.hex() == verdict.op_id  # the culprit op is its parent
        [link] = span.links
        assert (link.trace_id.hex(), link.span_id.hex()) == (verdict.trace_id, verdict.op_id)


def test_verdict_trace_new_keeps_a_trace_of_its_own(
    workload: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "v.jsonl"
    spans = _write_back(workload, out, monkeypatch, "--verdict-trace", "new")
    verdicts = {v.case_id: v for v in read_verdicts(out)}
    assert len(spans) == 7
    for span in spans:
        attrs = {a.key: a.value for a in span.attributes}
        verdict = verdicts[attrs[A.MEMTRACE_ATTRIBUTION_CASE_ID].string_value]
        assert span.trace_id.hex() != verdict.trace_id and not span.parent_span_id
        [link] = span.links
        assert link.span_id.hex() == verdict.op_id


def test_a_verdict_without_a_span_id_culprit_has_no_parent_and_no_link(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from memtrace_otel.attribution import Verdict

    collected = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(collected))
    write = verdict_span_writer(provider)
    # An imported MemTraceBench file names ops "op-3": no span id to parent to or link.
    write(
        Verdict(
            case_id="c",
            method="evidence",
            error_type="UpdateError",
            op_id="op-3",
            op_name="x",
            confidence=0.5,
            reason="r",
            trace_id="ab" * 16,
        )
    )
    [span] = collected.get_finished_spans()
    assert span.parent is None and not span.links
    with pytest.raises(ValueError, match="trace='sideways'"):
        verdict_span_writer(provider, trace="sideways")


def test_later_runs_read_verdict_spans_as_verdicts_not_store_activity(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    out = tmp_path / "v.jsonl"
    first, _ = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases), out=out)
    # The verdict spans as a Collector writes them next to the app's spans: in the culprits' traces.
    written = tmp_path / "verdict-spans.jsonl"
    result = send_verdicts(first, OtlpJsonLinesExporter(written))
    assert len(result.sent) == len(first) == 7 and result.failed == 0
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    in_culprit_traces = {
        s["traceId"]
        for r in rows
        for rs in r["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    }
    assert in_culprit_traces == {v.trace_id for v in first}

    alone = load_store_graphs([str(traces)], outcomes=[])
    both = load_store_graphs([str(traces), str(written)], outcomes=[])
    assert {s: sorted(G.nodes) for s, G in alone.items()} == {
        s: sorted(G.nodes) for s, G in both.items()
    }

    # --redo-stale: the verdict spans, newer than every verdict, are no newer op of any store.
    again, summary = run_batch(
        [str(traces), str(written)],
        EvidenceMethod(),
        cases_file=str(cases),
        out=out,
        redo_stale=True,
    )
    assert again == [] and summary.redone == 0 and summary.resumed == 7

    fresh, _ = run_batch([str(traces), str(written)], EvidenceMethod(), cases_file=str(cases))
    key = lambda v: (v.case_id, v.error_type, v.op_id, v.confidence)  # noqa: E731
    assert sorted(map(key, fresh)) == sorted(map(key, first))


def test_verdict_spans_in_an_upstream_apps_culprit_traces_change_nothing(tmp_path: Path) -> None:
    # Upstream GenAI traces (no memtrace names): the adapter reads a trace's case id from any
    # span in it, so a verdict span in a construction trace must not make it a case's trace.
    from tests._upstream_app import run_app

    run = run_app(tmp_path, users=2, seed=3)
    first, _ = run_batch([str(run.traces)], EvidenceMethod())
    culprits = [v for v in first if v.op_id]
    assert culprits and {v.trace_id for v in culprits} - set(run.failed)  # construction traces
    written = tmp_path / "verdict-spans.jsonl"
    assert send_verdicts(first, OtlpJsonLinesExporter(written)).failed == 0

    again, _ = run_batch([str(run.traces), str(written)], EvidenceMethod())
    key = lambda v: (v.case_id, v.error_type, v.op_id, v.confidence)  # noqa: E731
    assert sorted(map(key, again)) == sorted(map(key, first))
    alone = load_store_graphs([str(run.traces)], outcomes=[])
    both = load_store_graphs([str(run.traces), str(written)], outcomes=[])
    assert {s: sorted(G.nodes(data="case")) for s, G in alone.items()} == {
        s: sorted(G.nodes(data="case")) for s, G in both.items()
    }


def test_reviews_in_files_give_precision_and_change_no_verdict(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    from memtrace_otel.job._reviews import send_review, verdict_span_index
    from memtrace_otel.sources import open_source

    traces, cases = workload
    first, _ = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    written = tmp_path / "verdict-spans.jsonl"
    assert send_verdicts(first, OtlpJsonLinesExporter(written)).failed == 0
    spans = verdict_span_index(open_source(str(written)).records())
    by_case = {s["case_id"]: s for s in spans.values()}
    reviews = tmp_path / "reviews.jsonl"
    labels = {"case-retrieval": "confirmed", "case-update": "confirmed", "case-filter": "rejected"}
    for case_id, label in labels.items():
        span = by_case[case_id]
        assert send_review(
            OtlpJsonLinesExporter(reviews),
            verdict_trace_id=span["trace_id"],
            verdict_span_id=span["span_id"],
            label=label,
        )
    with pytest.raises(ValueError, match="other_op"):
        send_review(
            OtlpJsonLinesExporter(tmp_path / "x.jsonl"),
            verdict_trace_id="a" * 32,
            verdict_span_id="b" * 16,
            label="other_op",
        )
    again, summary = run_batch(
        [str(traces), str(written), str(reviews)], EvidenceMethod(), cases_file=str(cases)
    )
    key = lambda v: (v.case_id, v.error_type, v.op_id, v.confidence)  # noqa: E731
    assert sorted(map(key, again)) == sorted(map(key, first))  # reviews are no evidence
    precision = summary.review_precision
    assert precision is not None
    assert (precision["reviews"], precision["confirmed"], precision["rejected"]) == (3, 2, 1)
    assert precision["precision"] == pytest.approx(2 / 3)
    assert precision["by_error_type"]["RetrievalError"]["reviews"] == 2  # search and rerank
    assert precision["by_error_type"]["UpdateError"]["precision"] == 1.0

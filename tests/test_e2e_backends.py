"""End to end on the real programs: reference systems -> OTLP -> Collector -> files and Jaeger v2.

The batch job must give the same verdicts on the Collector's files and on `jaeger+http://`, and
verdicts written back over OTLP must show up in Jaeger linked to the culprit op span.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from memtrace_bench.systems import generate_benchmark, generate_workload
from memtrace_otel.cli import main
from tests._backends import CollectorServer, JaegerServer, http_get, wait_until


@pytest.fixture(scope="module")
def bench(collector: CollectorServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two systems, two users each, with injected faults, exported to the Collector as they run."""
    out = tmp_path_factory.mktemp("bench")
    exporter = OTLPSpanExporter(endpoint=collector.otlp_grpc_endpoint, insecure=True)
    generate_benchmark(
        out,
        workload=generate_workload(2, 5),
        systems=["rag", "mem0"],
        seed=5,
        faults="all=0.05",
        extra_processors=[BatchSpanProcessor(exporter, max_queue_size=65536)],
    )
    return out


def _verdicts(path: Path) -> dict[str, tuple[Any, Any, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["case_id"]: (r["error_type"], r["op_id"], r["op_name"]) for r in rows}


def _wait_for_judges(collector: CollectorServer, count: int) -> None:
    def probe() -> bool | None:
        judges = [
            s
            for s in collector.file_spans()
            if any(
                a["key"] == "memtrace.judge.verdict"
                and a["value"].get("stringValue") == "incorrect"
                for a in s.get("attributes", [])
            )
        ]
        return True if len(judges) >= count else None

    wait_until(
        probe, timeout=60, interval=0.5, what=f"{count} failed judge spans in the Collector files"
    )


def test_files_and_jaeger_give_the_same_verdicts_and_write_back_reaches_jaeger(
    bench: Path,
    collector: CollectorServer,
    jaeger: JaegerServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cases = [json.loads(line) for line in (bench / "cases.jsonl").read_text().splitlines()]
    failed = [c for c in cases if c["verdict"] == "incorrect"]
    assert failed, "the seeded workload must fail some cases"
    _wait_for_judges(collector, len(failed))
    time.sleep(2)  # the last batches of construction spans

    files = [str(p) for p in collector.traces_files()]
    from_files = tmp_path / "files.jsonl"
    assert (
        main(
            [
                "attribute",
                *files,
                "--cases",
                str(bench / "cases.jsonl"),
                "--out",
                str(from_files),
                "--quiet",
            ]
        )
        == 0
    )

    source = f"jaeger+{jaeger.query_url}?service=memtrace-bench&lookback=1h&limit=1000"
    from_jaeger = tmp_path / "jaeger.jsonl"
    code = main(
        [
            "attribute",
            source,
            "--cases",
            str(bench / "cases.jsonl"),
            "--out",
            str(from_jaeger),
            "--quiet",
        ]
    )
    assert code == 0
    a, b = _verdicts(from_files), _verdicts(from_jaeger)
    assert len(a) == len(failed)
    assert a == b

    # Write-back: verdict spans go to the Collector, which keeps them (tail sampling) for Jaeger.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.otlp_http_url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    again = tmp_path / "again.jsonl"
    assert (
        main(
            [
                "attribute",
                *files,
                "--cases",
                str(bench / "cases.jsonl"),
                "--out",
                str(again),
                "--write-back",
                "--quiet",
            ]
        )
        == 0
    )
    culprits = {op_id for (_, op_id, _) in a.values() if op_id}

    def found() -> set[str] | None:
        status, body = http_get(
            f"{jaeger.query_url}/api/v3/traces?query.service_name=memtrace-attribution"
            f"&query.start_time_min={_rfc3339(time.time() - 3600)}&query.start_time_max={_rfc3339(time.time() + 60)}"
            "&query.num_traces=1000&query.search_depth=1000"
        )
        if status != 200:
            return None
        linked = {
            link["spanId"]
            for rs in json.loads(body)["result"]["resourceSpans"]
            for ss in rs["scopeSpans"]
            for span in ss["spans"]
            if span["name"] == "memtrace.attribution"
            for link in span.get("links", [])
        }
        return linked if culprits <= linked else None

    linked = wait_until(found, timeout=60, interval=1.0, what="verdict spans in Jaeger")
    assert culprits <= linked


def test_verdict_span_is_inside_the_culprits_trace_in_jaeger(
    jaeger: JaegerServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--write-back (default --verdict-trace culprit): Jaeger shows each verdict span in the
    culprit's trace, its parent the culprit op span, its link to the culprit kept."""
    import urllib.request

    from tests._pipeline import write_workload

    traces, cases = write_workload(tmp_path)
    for line in traces.read_text().splitlines():  # the app's spans, as the app sent them
        request = urllib.request.Request(
            f"{jaeger.otlp_http_url}/v1/traces",
            data=line.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_http_url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    out = tmp_path / "verdicts.jsonl"
    args = ["attribute", str(traces), "--cases", str(cases), "--out", str(out)]
    assert main([*args, "--write-back", "--quiet"]) == 0
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert verdicts and all(v["op_id"] and v["trace_id"] for v in verdicts)

    for verdict in verdicts:

        def in_trace(v: dict[str, Any] = verdict) -> list[dict[str, Any]] | None:
            doc = jaeger.get_trace_v3(v["trace_id"])
            spans = [
                span
                for rs in (doc or {}).get("result", {}).get("resourceSpans", [])
                for ss in rs["scopeSpans"]
                for span in ss["spans"]
            ]
            names = {span["name"] for span in spans}
            return spans if "memtrace.attribution" in names and len(names) > 1 else None

        spans = wait_until(in_trace, timeout=30, interval=0.5, what="the verdict in its trace")
        culprit = [s for s in spans if s["spanId"] == verdict["op_id"]]
        assert culprit, "the culprit op span is in the trace"
        [span] = [
            s
            for s in spans
            if s["name"] == "memtrace.attribution"
            and any(
                a["key"] == "memtrace.attribution.case_id"
                and a["value"].get("stringValue") == verdict["case_id"]
                for a in s.get("attributes", [])
            )
        ]
        assert span["parentSpanId"] == verdict["op_id"]
        assert [link["spanId"] for link in span.get("links", [])] == [verdict["op_id"]]


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))

"""configure(), the embedded OTLP JSON Lines file, and the exporter it picks from OTEL_* variables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

from memtrace_otel.export import OtlpJsonLinesExporter, configure, resolve_exporter
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E

OTEL_VARS = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    E.ENV_MEMTRACE_TRACES_FILE,
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in OTEL_VARS:
        monkeypatch.delenv(var, raising=False)


def test_embedded_default_writes_collector_style_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "out" / "traces.jsonl"
    provider = configure(service_name="svc", traces_file=path, batch=False, set_global=False)
    mt = MemTracer(
        tracer_provider=provider,
        store_id="u1",
        capture=CaptureConfig(mode="SPAN_ONLY"),
        registry=WriterRegistry(),
    )
    with mt.create("c") as op:
        op.output(mt.variable("mem:1", "v", category="memory"))
    with mt.retrieve("r", inputs=["mem:1@1"]):
        pass
    provider.shutdown()
    lines = path.read_text().splitlines()
    assert len(lines) == 2  # one ExportTraceServiceRequest per export call
    first, second = (json.loads(line) for line in lines)
    rs = first["resourceSpans"][0]
    assert {"key": "service.name", "value": {"stringValue": "svc"}} in rs["resource"]["attributes"]
    span = rs["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
    int(span["traceId"], 16)  # hex, not base64
    assert span["kind"] == 1 and isinstance(span["startTimeUnixNano"], str)
    attrs = {a["key"]: a["value"] for a in span["attributes"]}
    assert attrs[A.MEMTRACE_OP_OUTPUTS] == {"arrayValue": {"values": [{"stringValue": "mem:1@1"}]}}
    reader = second["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert reader["links"][0]["spanId"] == span["spanId"]


def test_default_file_name_and_env_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    exporter = resolve_exporter()
    assert isinstance(exporter, OtlpJsonLinesExporter)
    exporter.shutdown()
    assert (tmp_path / "memtrace-traces.jsonl").exists()
    monkeypatch.setenv(E.ENV_MEMTRACE_TRACES_FILE, str(tmp_path / "elsewhere.jsonl"))
    resolve_exporter().shutdown()
    assert (tmp_path / "elsewhere.jsonl").exists()


def test_otlp_endpoint_selects_the_otlp_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert isinstance(resolve_exporter(), HttpExporter)  # spec default: http/protobuf
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert isinstance(resolve_exporter(), GrpcExporter)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    assert isinstance(resolve_exporter(), HttpExporter)  # the traces-specific variable wins
    assert isinstance(resolve_exporter(protocol="grpc"), GrpcExporter)  # the argument wins


def test_unsupported_protocol_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="unsupported OTLP protocol 'http/json'"):
        resolve_exporter()


def test_file_exporter_needs_exactly_one_target(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        OtlpJsonLinesExporter()
    with pytest.raises(ValueError, match="exactly one"):
        OtlpJsonLinesExporter(tmp_path / "x", stream=open(tmp_path / "y", "w"))  # noqa: SIM115

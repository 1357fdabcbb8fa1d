"""Trace files: every shared fixture, content sniffing, round trips and bad input.

The fixtures are verbatim files from jaegertracing/jaeger, jaegertracing/jaeger-ui,
open-telemetry/opentelemetry-proto and grafana/tempo (Apache-2.0; origins in
``../shared/fixtures/SOURCES.md``).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from memtrace_otel.errors import DecodeError, SourceError, UnsupportedFormatError
from memtrace_otel.export import OtlpJsonLinesExporter, dumps_request, span_to_record
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.sources import (
    SourceStats,
    _files,
    decode_document,
    decode_otlp_json,
    decode_otlp_proto,
    iter_records,
    open_source,
)
from memtrace_otel.sources._source import FileSource
from memtrace_otel.sources._stores import NO_STORE, line_stores, prune_stores, raw_store
from tests.conftest import shared_path

# file -> (records in lenient mode, skipped by kind, what strict mode raises or None)
FIXTURES: dict[str, tuple[int, dict[str, int], type[Exception] | None]] = {
    # The same span twice, byte for byte: an exact duplicate, dropped and counted, not skipped.
    "jaeger/otlp2jaeger-in.json": (1, {}, None),
    "jaeger/otlp2jaeger-out.json": (1, {}, None),
    "jaeger/apiv3-GetTrace.json": (1, {}, None),
    "jaeger/apiv3-FindTraceSummaries.json": (0, {"unsupported_format": 1}, UnsupportedFormatError),
    "jaeger/uimodel-ui_01.json": (4, {"duplicate_span": 1}, DecodeError),
    "jaeger/uimodel-domain_01.json": (0, {"unsupported_format": 1}, UnsupportedFormatError),
    "jaeger/integration-example_trace.json": (5, {}, None),
    "jaeger/integration-link_attributes_trace.json": (1, {}, None),
    "jaeger/integration-scope_attributes_trace.json": (1, {}, None),
    "jaeger/memory-otel_traces_01.json": (4, {}, None),
    "jaeger/anonymizer-trace_success.json": (2, {}, None),
    "jaeger-ui/follows-from-orphan.legacy.json": (2, {}, None),
    "jaeger-ui/multi-reference.legacy.json": (4, {}, None),
    "jaeger-ui/parent-cycle.legacy.json": (2, {}, None),
    "jaeger-ui/multiple-orphans.legacy.json": (5, {}, None),
    "jaeger-ui/v3-getTrace-response.json": (40, {}, None),
    "jaeger-ui/tracegraph-testTrace.json": (0, {"invalid_span": 11}, DecodeError),
    "jaeger-ui/genaiTestTrace.json": (57, {}, None),
    "jaeger-ui/otlp2jaeger-multi-in-combined.json": (4, {}, None),
    "otel-proto/examples-trace.json": (1, {}, None),
    "tempo/tempopb-trace-batches.json": (1, {}, None),
}


@pytest.fixture(params=["orjson", "stdlib"])
def json_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the optional orjson accelerator and with the standard parser alone."""
    if request.param == "stdlib":
        monkeypatch.setattr(_files, "_fast_loads", None)
    elif _files._fast_loads is None:
        pytest.skip("orjson is not installed (pip install 'memtrace-otel[fast]')")
    return str(request.param)


def fixture(name: str) -> Path:
    return shared_path("fixtures", name)


def load(path: str | Path, *, strict: bool = False) -> tuple[list[SpanRecord], SourceStats]:
    source = open_source(str(path), strict=strict)
    return list(source.records()), source.stats


def by_name(records: list[SpanRecord]) -> dict[str, SpanRecord]:
    return {r.name: r for r in records}


# --- every shared fixture --------------------------------------------------------------------
def test_the_table_covers_every_fixture() -> None:
    root = shared_path("fixtures")
    present = {str(p.relative_to(root)) for p in root.rglob("*.json")}
    assert present == set(FIXTURES)


@pytest.mark.usefixtures("json_parser")
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_loads_leniently(name: str) -> None:
    count, skipped, _ = FIXTURES[name]
    records, stats = load(fixture(name))
    assert len(records) == count
    assert stats.skipped_by_kind == skipped
    assert stats.records == count and stats.files == 1
    for record in records:
        assert len(record.trace_id) == 32 and int(record.trace_id, 16)
        assert len(record.span_id) == 16 and int(record.span_id, 16)
        assert record.source.startswith(str(fixture(name)) + ":")


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_in_strict_mode(name: str) -> None:
    _, _, error = FIXTURES[name]
    if error is None:
        records, stats = load(fixture(name), strict=True)
        assert stats.skipped == 0 and records
    else:
        with pytest.raises(error) as info:
            load(fixture(name), strict=True)
        assert str(fixture(name)) in str(info.value)


def test_jaeger_domain_json_is_rejected_with_a_reason() -> None:
    with pytest.raises(UnsupportedFormatError, match="domain/proto JSON") as info:
        load(fixture("jaeger/uimodel-domain_01.json"), strict=True)
    assert "/api/traces/{id}" in info.value.reason


def test_non_hex_ids_name_the_field_in_strict_mode() -> None:
    with pytest.raises(DecodeError) as info:
        load(fixture("jaeger-ui/tracegraph-testTrace.json"), strict=True)
    assert info.value.field == "spans[0].traceID"
    assert "trace-123" in info.value.reason


def test_otlp_spec_example_uppercase_ids_and_number_times() -> None:
    [span] = load(fixture("otel-proto/examples-trace.json"))[0]
    assert span.trace_id == "5b8efff798038103d269b633813fc60c"
    assert span.span_id == "eee19b7ec3c1b174"
    assert span.parent_span_id == "eee19b7ec3c1b173"
    assert span.kind == "SERVER"
    assert (span.start_time_unix_nano, span.end_time_unix_nano) == (
        1544712660000000000,
        1544712661000000000,
    )
    assert span.resource_attributes == {"service.name": "my.service"}
    assert (span.scope_name, span.scope_version) == ("my.library", "1.0.0")
    assert span.scope_attributes == {"my.scope.attribute": "some scope attribute"}
    assert span.attributes == {"my.span.attr": "some value"}


def test_tempo_batches_envelope_equals_resource_spans() -> None:
    [tempo] = load(fixture("tempo/tempopb-trace-batches.json"))[0]
    [otlp] = load(fixture("otel-proto/examples-trace.json"))[0]
    assert tempo == otlp


def test_link_attributes_of_every_scalar_type() -> None:
    [span] = load(fixture("jaeger/integration-link_attributes_trace.json"))[0]
    assert len(span.links) == 3
    first = span.links[0]
    assert first.trace_id == "000000000000000000000000000000ff"
    assert first.attributes == {
        "opentracing.ref_type": "child_of",
        "sameplacelinkattribute1": "sameplacevalue",
        "sameplacelinkattribute2": 123,
        "sameplacelinkattribute4": True,
        "sameplacelinkattribute3": 72.5,
        "linkblob": base64.b64decode("AAAwOQ=="),
    }


def test_two_traces_in_one_document_with_state_status_and_kinds() -> None:
    records, _ = load(fixture("jaeger/memory-otel_traces_01.json"))
    assert len({r.trace_id for r in records}) == 2
    assert {r.kind for r in records} == {"SERVER", "CLIENT", "PRODUCER", "CONSUMER"}
    assert any(r.trace_state for r in records)
    assert {r.status_code for r in records} <= {"UNSET", "OK", "ERROR"}
    assert sum(len(r.links) for r in records) == 8
    assert sum(len(r.events) for r in records) == 8


def test_api_v3_capture_with_many_resources() -> None:
    records, _ = load(fixture("jaeger-ui/v3-getTrace-response.json"))
    assert len({r.resource_attributes["service.name"] for r in records}) == 6
    assert sum(len(r.events) for r in records) == 52
    roots = [r for r in records if r.parent_span_id is None]
    assert len(roots) == 1


# --- envelopes and field dialects ------------------------------------------------------------
def _span(**fields: Any) -> dict[str, Any]:
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "op",
    }
    span.update(fields)
    return span


def _request(*spans: dict[str, Any], resource: list[Any] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"scopeSpans": [{"scope": {"name": "s"}, "spans": list(spans)}]}
    if resource is not None:
        block["resource"] = {"attributes": resource}
    return {"resourceSpans": [block]}


@pytest.mark.parametrize(
    "wrap",
    [
        lambda r: r,
        lambda r: {"result": r},
        lambda r: {"batches": r["resourceSpans"]},
        lambda r: {"trace": r, "status": "COMPLETE"},
        lambda r: {"trace": {"batches": r["resourceSpans"]}, "status": "PARTIAL"},
    ],
    ids=["resourceSpans", "api_v3 result", "tempo batches", "tempo v2 trace", "tempo v2 batches"],
)
def test_envelopes(wrap: Any) -> None:
    [record] = decode_otlp_json(wrap(_request(_span())))
    assert record.span_id == "b7ad6b7169203331"


def test_protobuf_json_dialect_base64_ids_enum_names() -> None:
    hex_doc = _request(
        _span(
            parentSpanId="00f067aa0ba902b7",
            kind=3,
            status={"code": 2, "message": "boom"},
            links=[{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00f067aa0ba902b7"}],
        )
    )
    b64 = {
        "traceId": base64.b64encode(bytes.fromhex("0af7651916cd43dd8448eb211c80319c")).decode(),
        "spanId": base64.b64encode(bytes.fromhex("b7ad6b7169203331")).decode(),
        "parentSpanId": base64.b64encode(bytes.fromhex("00f067aa0ba902b7")).decode(),
        "name": "op",
        "kind": "SPAN_KIND_CLIENT",
        "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
        "links": [
            {
                "traceId": base64.b64encode(
                    bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
                ).decode(),
                "spanId": base64.b64encode(bytes.fromhex("00f067aa0ba902b7")).decode(),
            }
        ],
    }
    assert decode_otlp_json(_request(b64)) == decode_otlp_json(hex_doc)
    [record] = decode_otlp_json(hex_doc)
    assert (record.kind, record.status_code, record.status_message) == ("CLIENT", "ERROR", "boom")


def test_ids_in_any_case_and_times_as_strings_or_numbers() -> None:
    upper = _span(
        traceId="0AF7651916CD43DD8448EB211C80319C", startTimeUnixNano=5, endTimeUnixNano="7"
    )
    [record] = decode_otlp_json(_request(upper))
    assert record.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert (record.start_time_unix_nano, record.end_time_unix_nano) == (5, 7)


def test_every_any_value_shape_and_unknown_fields() -> None:
    attrs = [
        {"key": "s", "value": {"stringValue": "x"}},
        {"key": "b", "value": {"boolValue": False}},
        {"key": "i", "value": {"intValue": "-9223372036854775808"}},
        {"key": "i2", "value": {"intValue": 42}},
        {"key": "d", "value": {"doubleValue": 1.5}},
        {"key": "d2", "value": {"doubleValue": "-2.5e3"}},
        {"key": "d3", "value": {"doubleValue": 3}},
        {"key": "by", "value": {"bytesValue": "AAE="}},
        {
            "key": "a",
            "value": {"arrayValue": {"values": [{"stringValue": "a@1"}, {"intValue": "2"}]}},
        },
        {"key": "empty_array", "value": {"arrayValue": {}}},
        {
            "key": "kv",
            "value": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": True}}]}},
        },
        {"key": "nested", "value": {"arrayValue": {"values": [{"arrayValue": {"values": []}}]}}},
        {"key": "unset", "value": {}},
        {"key": "no_value"},
    ]
    doc = _request(_span(attributes=attrs, futureField={"x": 1}), resource=[])
    doc["resourceSpans"][0]["futureBlockField"] = 1
    [record] = decode_otlp_json(doc)
    values = dict(record.attributes)
    assert values["s"] == "x" and values["b"] is False
    assert values["i"] == -(2**63) and values["i2"] == 42
    assert values["d"] == 1.5 and values["d2"] == -2500.0 and values["d3"] == 3.0
    assert values["by"] == b"\x00\x01"
    assert values["a"] == ("a@1", 2) and values["empty_array"] == ()
    assert values["kv"] == {"k": True} and values["nested"] == ((),)
    assert values["unset"] is None and values["no_value"] is None


@pytest.mark.parametrize("double", ['"NaN"', '"Infinity"', '"-Infinity"', "NaN"])
def test_a_non_finite_double_is_a_bad_span_naming_the_field(double: str) -> None:
    # read as NaN or infinity, then refused: no report, strict JSON or comparison can hold it
    attrs = [{"key": "ok", "value": {"intValue": 1}}, {"key": "score", "value": {}}]
    doc = _request(_span(attributes=attrs))
    text = json.dumps(doc).replace('"value": {}}', '"value": {"doubleValue": ' + double + "}}")
    with pytest.raises(DecodeError, match=r"attributes\[1\]\.value\.doubleValue: non-finite"):
        decode_otlp_json(json.loads(text))


def test_old_instrumentation_library_field_names() -> None:
    doc = {
        "resourceSpans": [
            {
                "instrumentationLibrarySpans": [
                    {"instrumentationLibrary": {"name": "lib", "version": "1"}, "spans": [_span()]}
                ]
            }
        ]
    }
    [record] = decode_otlp_json(doc)
    assert (record.scope_name, record.scope_version) == ("lib", "1")


def test_document_decoder_is_strict_by_default_and_collects_when_asked() -> None:
    doc = _request(_span(), _span(spanId="not-an-id"))
    with pytest.raises(DecodeError) as info:
        decode_document(doc, path="x.json")
    assert info.value.field == "resourceSpans[0].scopeSpans[0].spans[1].spanId"
    errors: list[DecodeError] = []
    assert len(decode_document(doc, path="x.json", errors=errors)) == 1
    assert len(errors) == 1 and errors[0].path == "x.json"


# --- files: lines, documents, directories, globs, compression, proto -------------------------
def _lines(*docs: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(d).encode() + b"\n" for d in docs)


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _span_n(n: int, trace: int = 1) -> dict[str, Any]:
    return _span(traceId=f"{trace:032x}", spanId=f"{n:016x}", name=f"op{n}")


def test_json_lines_file_and_a_trace_split_across_lines_and_files(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "one.jsonl", _lines(_request(_span_n(1)), _request(_span_n(2))))
    _write(tmp_path / "a" / "two.log", _lines(_request(_span_n(3))))  # any name: sniffed
    records, stats = load(tmp_path)
    assert [r.name for r in records] == ["op1", "op2", "op3"]
    assert {r.trace_id for r in records} == {f"{1:032x}"}
    assert stats.files == 2
    assert records[1].source == f"{tmp_path / 'a' / 'one.jsonl'}:2"


def test_pretty_printed_document(tmp_path: Path) -> None:
    path = _write(tmp_path / "doc", json.dumps(_request(_span_n(1), _span_n(2)), indent=2).encode())
    records, _ = load(path)
    assert [r.name for r in records] == ["op1", "op2"]
    assert records[0].source == f"{path}:1"


def test_glob_and_hidden_files(tmp_path: Path) -> None:
    _write(tmp_path / "x1.json", _lines(_request(_span_n(1))))
    _write(tmp_path / "x2.json", _lines(_request(_span_n(2))))
    _write(tmp_path / ".hidden.json", b"garbage")
    assert [r.name for r in load(tmp_path)[0]] == ["op1", "op2"]
    assert [r.name for r in load(str(tmp_path / "x2*"))[0]] == ["op2"]
    with pytest.raises(SourceError, match="matches no file"):
        load(str(tmp_path / "nothing*"))
    with pytest.raises(SourceError, match="no such file"):
        load(tmp_path / "missing.json")


def test_iter_records_over_several_paths_with_stats(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", _lines(_request(_span_n(1))))
    b = _write(tmp_path / "b.jsonl", _lines(_request(_span_n(2))) + b"{oops\n")
    stats = SourceStats()
    assert [r.name for r in iter_records([a, b], stats=stats)] == ["op1", "op2"]
    assert (stats.records, stats.files, stats.skipped_by_kind) == (2, 2, {"invalid_json": 1})


def test_gzip_and_zstd_compressed_files(tmp_path: Path) -> None:
    data = _lines(_request(_span_n(1)), _request(_span_n(2)))
    gz = _write(tmp_path / "t.gz", gzip.compress(data))
    zst = _write(tmp_path / "t.zst", zstandard.ZstdCompressor().compress(data))
    # The Collector's native zstd compression with rotation: one frame per write.
    frames = b"".join(
        zstandard.ZstdCompressor().compress(line + b"\n") for line in data.splitlines()
    )
    multi = _write(tmp_path / "t2.zst", frames)
    for path in (gz, zst, multi):
        assert [r.name for r in load(path, strict=True)[0]] == ["op1", "op2"]


def _framed(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def _sdk_spans() -> list[Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "svc", "memtrace.system": "rag"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("memtrace-test", "1.2.3")
    with tracer.start_as_current_span(
        "create_memory",
        kind=SpanKind.CLIENT,
        attributes={
            "memtrace.op.kind": "create",
            "memtrace.op.inputs": ["message:1@1", "message:2@1"],
            "memtrace.op.outputs": ["memory:1@1"],
            "count": 3,
            "score": 0.25,
            "flag": True,
        },
    ) as parent:
        parent.add_event(
            "memtrace.variable",
            {
                "memtrace.variable.ref": "memory:1@1",
                "memtrace.variable.value": "Ana lives in Porto",
            },
        )
        context = parent.get_span_context()
        with tracer.start_as_current_span(
            "search_memory", links=[Link(context, {"memtrace.variable.ref": "memory:1@1"})]
        ) as child:
            child.set_status(Status(StatusCode.ERROR, "no hit"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


@pytest.mark.usefixtures("json_parser")
def test_round_trip_sdk_spans_through_our_file_writer(tmp_path: Path) -> None:
    spans = _sdk_spans()
    path = tmp_path / "traces.jsonl"
    exporter = OtlpJsonLinesExporter(path)
    exporter.export(spans[:1])
    exporter.export(spans[1:])
    exporter.shutdown()
    expected = [span_to_record(s) for s in spans]
    records, stats = load(path, strict=True)
    assert records == expected
    assert stats.records == 2
    created = by_name(records)["create_memory"]
    assert created.attributes["memtrace.op.inputs"] == ("message:1@1", "message:2@1")


def test_round_trip_through_the_collector_proto_format(tmp_path: Path) -> None:
    spans = _sdk_spans()
    expected = [span_to_record(s) for s in spans]
    payloads = [encode_spans([s]).SerializeToString() for s in spans]
    plain = _write(tmp_path / "plain.bin", _framed(*payloads))
    zstd_frames = _write(
        tmp_path / "zstd.bin", _framed(*(zstandard.ZstdCompressor().compress(p) for p in payloads))
    )
    # Native compression (feature gate): a zstd stream around the length-prefixed records.
    native = _write(
        tmp_path / "native.zst", zstandard.ZstdCompressor().compress(_framed(*payloads))
    )
    # format: json with legacy compression: length-prefixed zstd frames of JSON.
    json_frames = _write(
        tmp_path / "json.zst.bin",
        _framed(
            *(zstandard.ZstdCompressor().compress(dumps_request([r]).encode()) for r in expected)
        ),
    )
    for path in (plain, zstd_frames, native, json_frames):
        records, _ = load(path, strict=True)
        assert records == expected, path
        assert records[1].source == f"{path}:2"  # record number


def test_decode_otlp_proto_directly() -> None:
    spans = _sdk_spans()
    data = encode_spans(spans).SerializeToString()
    assert decode_otlp_proto(data) == [span_to_record(s) for s in spans]
    with pytest.raises(DecodeError):
        decode_otlp_proto(b"\x0a\xff\xff\xff")
    errors: list[DecodeError] = []
    assert decode_otlp_proto(b"\x0a\xff", errors=errors) == [] and len(errors) == 1


# --- bad input -------------------------------------------------------------------------------
def _bad_file(tmp_path: Path, middle: bytes) -> Path:
    return _write(
        tmp_path / "bad.jsonl", _lines(_request(_span_n(1))) + middle + _lines(_request(_span_n(2)))
    )


@pytest.mark.parametrize(
    ("middle", "kind", "field"),
    [
        (b'{"resourceSpans": [{"scopeSpans": [\n', "invalid_json", None),
        (json.dumps(_request(_span(name=5))).encode() + b"\n", "invalid_span", "name"),
        (
            json.dumps(_request({"spanId": "b7ad6b7169203331"})).encode() + b"\n",
            "invalid_span",
            "traceId",
        ),
        (
            json.dumps(_request(_span(startTimeUnixNano="soon"))).encode() + b"\n",
            "invalid_span",
            "startTimeUnixNano",
        ),
        (
            json.dumps(_request(_span(attributes=[{"key": 1}]))).encode() + b"\n",
            "invalid_span",
            "attributes[0].key",
        ),
        (
            json.dumps(
                _request(_span(attributes=[{"key": "k", "value": {"intValue": "x"}}]))
            ).encode()
            + b"\n",
            "invalid_span",
            "attributes[0].value.intValue",
        ),
        (
            json.dumps(_request(_span(events=[{"name": "e", "timeUnixNano": "-3"}]))).encode()
            + b"\n",
            "invalid_span",
            "events[0].timeUnixNano",
        ),
        (
            json.dumps(
                _request(_span(events=[{"name": "e", "attributes": [{"key": "k", "value": 3}]}]))
            ).encode()
            + b"\n",
            "invalid_span",
            "events[0].attributes[0].value",
        ),
        (
            json.dumps(
                _request(_span(links=[{"traceId": "0af7651916cd43dd8448eb211c80319c"}]))
            ).encode()
            + b"\n",
            "invalid_span",
            "links[0].spanId",
        ),
        (
            json.dumps(_request(_span(startTimeUnixNano=-5))).encode() + b"\n",
            "invalid_span",
            "startTimeUnixNano",
        ),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "\xff"}]}]}]}\n',
            "invalid_utf8",
            None,
        ),
        (b"\n", "empty_line", None),
        (b'{"resourceSpans": 3}\n', "invalid_record", "resourceSpans"),
        (b'{"something": "else"}\n', "unsupported_format", None),
        (b"[1, 2]\n", "unsupported_format", None),
    ],
    ids=[
        "truncated json",
        "wrong type",
        "missing trace id",
        "bad time",
        "bad key",
        "bad int",
        "bad event time",
        "bad event attribute",
        "link without span id",
        "negative time",
        "non-utf8",
        "empty line",
        "not a list",
        "unknown object",
        "array of numbers",
    ],
)
def test_bad_line_in_the_middle(
    tmp_path: Path, middle: bytes, kind: str, field: str | None
) -> None:
    path = _bad_file(tmp_path, middle)
    records, stats = load(path)
    assert [r.name for r in records] == ["op1", "op2"]
    assert stats.skipped_by_kind == {kind: 1}
    assert stats.errors[0].startswith(f"{path}:2")
    with pytest.raises(DecodeError) as info:
        load(path, strict=True)
    assert (info.value.path, info.value.line) == (str(path), 2)
    if field is not None:
        assert info.value.field is not None and info.value.field.endswith(field)


@pytest.mark.usefixtures("json_parser")
def test_nul_bytes_line_is_a_typed_error(tmp_path: Path) -> None:
    path = _bad_file(tmp_path, b"\x00\x00\x00\x00\x00\x00\n")
    records, stats = load(path)
    assert len(records) == 2 and stats.skipped == 1
    assert set(stats.skipped_by_kind) <= {"invalid_json", "invalid_utf8"}


def test_trailing_blank_lines_are_fine(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", _lines(_request(_span_n(1))) + b"\n\n")
    assert load(path, strict=True)[1].skipped == 0


@pytest.mark.usefixtures("json_parser")
def test_truncated_last_line(tmp_path: Path) -> None:
    whole = _lines(_request(_span_n(1)), _request(_span_n(2)))
    path = _write(tmp_path / "t.jsonl", whole[:-20])
    records, stats = load(path)
    assert [r.name for r in records] == ["op1"]
    assert "truncated JSON" in stats.errors[0]


def test_empty_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty.jsonl", b"")
    records, stats = load(path)
    assert records == [] and stats.skipped_by_kind == {"empty_file": 1}
    with pytest.raises(DecodeError, match="empty"):
        load(path, strict=True)


def test_unknown_binary_and_truncated_proto_and_corrupt_gzip(tmp_path: Path) -> None:
    unknown = _write(tmp_path / "x.bin", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    payload = encode_spans(_sdk_spans()).SerializeToString()
    truncated = _write(tmp_path / "t.bin", _framed(payload)[:-5])
    corrupt = _write(tmp_path / "c.gz", gzip.compress(_lines(_request(_span_n(1))))[:-12])
    assert load(unknown)[1].skipped_by_kind == {"unsupported_format": 1}
    assert load(truncated)[1].skipped_by_kind == {"truncated": 1}
    assert load(corrupt)[1].skipped_by_kind == {"truncated": 1}
    for path in (unknown, truncated, corrupt):
        with pytest.raises(DecodeError):
            load(path, strict=True)


def test_duplicates_across_files_and_the_bounded_window(tmp_path: Path) -> None:
    _write(tmp_path / "1.jsonl", _lines(_request(_span_n(1), _span_n(2))))
    _write(tmp_path / "2.jsonl", _lines(_request(_span_n(2), _span_n(3))))  # Collector retry
    records, stats = load(tmp_path)
    assert [r.name for r in records] == ["op1", "op2", "op3"]
    assert stats.skipped_by_kind == {} and stats.duplicates == 1  # exact: dropped, not a skip
    assert load(tmp_path, strict=True)[1].duplicates == 1
    # The same span id with other content is a conflict: skipped, reported, raised when strict.
    changed = _span_n(3)
    changed["name"] = "op3-rewritten"
    _write(tmp_path / "3.jsonl", _lines(_request(changed)))
    records, stats = load(tmp_path)
    assert [r.name for r in records] == ["op1", "op2", "op3"]
    assert stats.skipped_by_kind == {"duplicate_span": 1} and stats.duplicates == 1
    assert "conflicting span" in stats.errors[0] and "2.jsonl:1" in stats.errors[0]
    with pytest.raises(DecodeError, match="conflicting span"):
        load(tmp_path, strict=True)
    # The window bounds memory: a repeat older than two generations is no longer recognised.
    spans = [_span_n(n) for n in range(1, 8)] + [_span_n(1)]
    path = _write(tmp_path / "w" / "w.jsonl", _lines(_request(*spans)))
    assert len(list(FileSource(path, dedupe_window=2).records())) == 8
    assert len(list(FileSource(path, dedupe_window=100).records())) == 7
    assert len(list(FileSource(path, dedupe_window=0).records())) == 8


def test_lenient_stats_keep_only_the_first_messages(tmp_path: Path) -> None:
    path = _write(tmp_path / "many.jsonl", b"{bad\n" * 25 + _lines(_request(_span_n(1))))
    records, stats = load(path)
    assert len(records) == 1
    assert stats.skipped == 25 and len(stats.errors) == 10
    assert "25 skipped (invalid_json: 25)" in stats.summary()


def test_open_source_rejects_plain_http_and_http_options_for_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jaeger\\+http"):
        open_source("http://localhost:16686")
    from memtrace_otel.sources import HttpOptions

    with pytest.raises(ValueError, match="backend"):
        open_source(str(tmp_path), http=HttpOptions())


def _iter_lines(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        yield from f


def test_records_stream_one_line_at_a_time(tmp_path: Path) -> None:
    # The loader must yield the first line's records before it reads the whole file: we append
    # a line after taking the first record and still see it.
    path = _write(tmp_path / "grow.jsonl", _lines(_request(_span_n(1))))
    records = open_source(str(path)).records()
    assert next(records).name == "op1"
    with open(path, "ab") as f:
        f.write(_lines(_request(_span_n(2))))
    assert [r.name for r in records] == ["op2"]
    assert os.path.getsize(path) > 0 and len(list(_iter_lines(path))) == 2


# --- the store-id scan (what the scaled batch job plans with) ----------------------------------
def _raw_span(store: str | None, case: str | None = None) -> dict[str, Any]:
    attributes = []
    if store is not None:
        attributes.append({"key": "gen_ai.memory.store.id", "value": {"stringValue": store}})
    if case is not None:
        attributes.append({"key": "memtrace.case.id", "value": {"stringValue": case}})
    return {"spanId": "00000000000000a1", "attributes": attributes}


def _raw_line(*resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]} for spans in resources]}


def test_line_stores_counts_each_stores_spans_without_decoding() -> None:
    line = _raw_line([_raw_span("u1", case="q1"), _raw_span("u1")], [_raw_span("u2")])
    case_stores: set[str] = set()
    assert line_stores(line, case_stores) == {"u1": 2, "u2": 1}
    assert case_stores == {"u1"}
    # Two stores in one resource, a store id that is not a plain string: decode to tell.
    assert line_stores(_raw_line([_raw_span("u1"), _raw_span("u2")]), set()) is None
    odd = {"key": "gen_ai.memory.store.id", "value": {"intValue": "3"}}
    assert raw_store({"attributes": [odd]}) is None
    assert raw_store(_raw_span(None)) == NO_STORE
    prune_stores(line, {"u2"})
    assert line_stores(line, set()) is None  # u1's resource is empty now
    assert [s for r in line["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]] == [
        _raw_span("u2")
    ]


def _resource_line(span_id: str, resource: list[dict[str, Any]]) -> str:
    span = {
        "traceId": "0" * 31 + "1",
        "spanId": span_id,
        "name": "s",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
    }
    request = {"resource": {"attributes": resource}, "scopeSpans": [{"spans": [span]}]}
    return json.dumps({"resourceSpans": [request]}) + "\n"


def test_a_files_repeated_resource_is_decoded_once_and_shared(tmp_path: Path) -> None:
    """An exporter writes its one resource on every line: the records share one mapping
    (a copy each was a few hundred bytes a span), and a resource that differs gets its own."""
    service = [{"key": "service.name", "value": {"stringValue": "app"}}]
    other = [{"key": "service.name", "value": {"stringValue": "other"}}]
    path = tmp_path / "t.jsonl"
    path.write_text(
        _resource_line("00000000000000a1", service)
        + _resource_line("00000000000000a2", service)
        + _resource_line("00000000000000a3", other)
    )
    records, _ = load(path)
    first, second, third = (r.resource_attributes for r in records)
    assert first is second
    assert dict(first) == {"service.name": "app"} and dict(third) == {"service.name": "other"}


def test_a_bad_resource_value_after_an_equal_looking_good_one_is_still_reported(
    tmp_path: Path,
) -> None:
    """1 == True: a boolValue of 1 compares equal to a good one, and is still refused."""
    good = [{"key": "flag", "value": {"boolValue": True}}]
    bad = [{"key": "flag", "value": {"boolValue": 1}}]
    path = tmp_path / "t.jsonl"
    path.write_text(
        _resource_line("00000000000000b1", good) + _resource_line("00000000000000b2", bad)
    )
    records, stats = load(path)
    assert [r.span_id for r in records] == ["00000000000000b1"]
    assert stats.skipped == 1

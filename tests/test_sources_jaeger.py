"""Jaeger v1 JSON -> records: what Jaeger's OTLP conversion did is undone where it can be."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memtrace_otel.errors import DecodeError, UnsupportedFormatError
from memtrace_otel.semconv import attributes as attr
from memtrace_otel.sources import ARRAY_ATTRIBUTES, decode_jaeger, open_source
from tests.conftest import shared_path

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _tag(key: str, value: Any, kind: str = "string") -> dict[str, Any]:
    return {"key": key, "type": kind, "value": value}


def _span(span_id: str = "00f067aa0ba902b7", **fields: Any) -> dict[str, Any]:
    span = {
        "traceID": TRACE,
        "spanID": span_id,
        "operationName": "op",
        "references": [],
        "startTime": 1_700_000_000_000_000,
        "duration": 1500,
        "tags": [],
        "logs": [],
        "processID": "p1",
    }
    span.update(fields)
    return span


def _trace(*spans: dict[str, Any], tags: list[Any] | None = None) -> dict[str, Any]:
    return {
        "traceID": TRACE,
        "spans": list(spans),
        "processes": {"p1": {"serviceName": "rag-app", "tags": tags or []}},
    }


def test_fields_times_and_process() -> None:
    [record] = decode_jaeger(_trace(_span(), tags=[_tag("host.name", "h1")]))
    assert record.trace_id == TRACE and record.span_id == "00f067aa0ba902b7"
    assert record.start_time_unix_nano == 1_700_000_000_000_000_000
    assert record.end_time_unix_nano == 1_700_000_000_001_500_000
    assert record.resource_attributes == {"service.name": "rag-app", "host.name": "h1"}
    assert record.parent_span_id is None and record.kind == "UNSPECIFIED"


def test_tag_types_and_derived_span_fields() -> None:
    tags = [
        _tag("s", "x"),
        _tag("b", True, "bool"),
        _tag("b2", "false", "bool"),
        _tag("i", 7, "int64"),
        _tag("big", "9223372036854775222", "int64"),
        _tag("f", 72.5, "float64"),
        _tag("blob", "AAAwOQ==", "binary"),
        _tag("span.kind", "client"),
        _tag("otel.status_code", "ERROR"),
        _tag("otel.status_description", "boom"),
        _tag("error", True, "bool"),
        _tag("otel.scope.name", "memtrace_otel"),
        _tag("otel.scope.version", "0.1.0"),
        _tag("w3c.tracestate", "k=v"),
    ]
    [record] = decode_jaeger(_trace(_span(tags=tags)))
    assert dict(record.attributes) == {
        "s": "x",
        "b": True,
        "b2": False,
        "i": 7,
        "big": 9223372036854775222,
        "f": 72.5,
        "blob": b"\x00\x0009",
    }
    assert (record.kind, record.status_code, record.status_message) == ("CLIENT", "ERROR", "boom")
    assert (record.scope_name, record.scope_version, record.trace_state) == (
        "memtrace_otel",
        "0.1.0",
        "k=v",
    )


def test_error_tag_alone_means_error_status_and_old_library_tags() -> None:
    tags = [_tag("error", "true", "bool"), _tag("otel.library.name", "old-lib")]
    [record] = decode_jaeger(_trace(_span(tags=tags)))
    assert record.status_code == "ERROR" and "error" not in record.attributes
    assert record.scope_name == "old-lib"


def test_logs_become_events_named_by_their_event_field() -> None:
    logs = [
        {
            "timestamp": 1_700_000_000_000_100,
            "fields": [_tag("event", "memtrace.variable"), _tag("k", 1, "int64")],
        },
        {"timestamp": 1_700_000_000_000_200, "fields": [_tag("message", "no name")]},
    ]
    [record] = decode_jaeger(_trace(_span(logs=logs)))
    first, second = record.events
    assert (first.name, first.time_unix_nano, dict(first.attributes)) == (
        "memtrace.variable",
        1_700_000_000_000_100_000,
        {"k": 1},
    )
    assert (second.name, dict(second.attributes)) == ("", {"message": "no name"})


def test_references_first_child_of_in_the_trace_is_the_parent_the_rest_are_links() -> None:
    refs = [
        {"refType": "CHILD_OF", "traceID": "ff", "spanID": "ff"},  # another trace: a link
        {"refType": "CHILD_OF", "traceID": TRACE, "spanID": "0000000000000002"},
        {"refType": "FOLLOWS_FROM", "traceID": TRACE, "spanID": "0000000000000003"},
        {"refType": "CHILD_OF", "traceID": TRACE, "spanID": "0000000000000004"},
    ]
    [record] = decode_jaeger(_trace(_span(references=refs)))
    assert record.parent_span_id == "0000000000000002"
    assert [(li.trace_id[-2:], li.span_id[-1], dict(li.attributes)) for li in record.links] == [
        ("ff", "f", {"opentracing.ref_type": "child_of"}),
        ("36", "3", {"opentracing.ref_type": "follows_from"}),
        ("36", "4", {"opentracing.ref_type": "child_of"}),
    ]


def test_short_ids_are_left_padded() -> None:
    span = _span(span_id="2", traceID="2be38093ead7a083")
    [record] = decode_jaeger([{**span, "process": {"serviceName": "s"}}])
    assert record.trace_id == "00000000000000002be38093ead7a083"
    assert record.span_id == "0000000000000002"


def test_api_response_envelope_and_bare_span_array() -> None:
    response = {"data": [_trace(_span())], "total": 0, "limit": 0, "offset": 0, "errors": None}
    assert len(decode_jaeger(response)) == 1
    bare = [{**_span(), "process": {"serviceName": "s", "tags": []}}]
    [record] = decode_jaeger(bare)
    assert record.resource_attributes == {"service.name": "s"}


def test_contract_arrays_come_back_from_json_string_tags() -> None:
    # Jaeger has no array tag type: OTLP arrays arrive as JSON strings.
    tags = [
        _tag(attr.MEMTRACE_OP_INPUTS, json.dumps(["message:1@1", "memory:U1:D1:3@2"])),
        _tag(attr.MEMTRACE_OP_OUTPUTS, "[]"),
        _tag("user.note", '["stays", "a string"]'),
        _tag(attr.MEMTRACE_ATTRIBUTION_EVIDENCE_REFS, "not json ["),
    ]
    [record] = decode_jaeger(_trace(_span(tags=tags)))
    assert record.attributes[attr.MEMTRACE_OP_INPUTS] == ("message:1@1", "memory:U1:D1:3@2")
    assert record.attributes[attr.MEMTRACE_OP_OUTPUTS] == ()
    assert record.attributes["user.note"] == '["stays", "a string"]'
    assert record.attributes[attr.MEMTRACE_ATTRIBUTION_EVIDENCE_REFS] == "not json ["
    assert {attr.MEMTRACE_OP_INPUTS, attr.MEMTRACE_OP_OUTPUTS} <= ARRAY_ATTRIBUTES


@pytest.mark.parametrize(
    ("span", "field"),
    [
        (_span(span_id="span-1"), "spans[0].spanID"),
        (_span(traceID=None), "spans[0].traceID"),
        (_span(startTime="yesterday"), "spans[0].startTime"),
        (_span(tags=[_tag("n", "x", "int64")]), "spans[0].tags[0].value"),
        (_span(tags=[_tag("n", 1, "weird")]), "spans[0].tags[0].type"),
        (_span(processID="p9"), "spans[0].processID"),
        (
            _span(references=[{"refType": "SIBLING_OF", "spanID": "1"}]),
            "spans[0].references[0].refType",
        ),
        (_span(logs=[{"timestamp": "x", "fields": []}]), "spans[0].logs[0].timestamp"),
    ],
    ids=[
        "non-hex id",
        "missing id",
        "bad time",
        "bad int tag",
        "bad tag type",
        "unknown process",
        "bad ref",
        "bad log",
    ],
)
def test_bad_spans_name_the_field(span: dict[str, Any], field: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_jaeger(_trace(span), path="t.json")
    assert info.value.field == field
    errors: list[DecodeError] = []
    assert decode_jaeger(_trace(span, _span(span_id="0000000000000009")), errors=errors)
    assert len(errors) == 1


def test_not_jaeger_and_domain_json_are_rejected() -> None:
    with pytest.raises(UnsupportedFormatError, match="not Jaeger v1"):
        decode_jaeger({"resourceSpans": []})
    domain = shared_path("fixtures", "jaeger", "uimodel-domain_01.json")
    with pytest.raises(UnsupportedFormatError, match="domain/proto JSON"):
        decode_jaeger(json.loads(domain.read_text()))


def test_ui_fixture_details() -> None:
    path = shared_path("fixtures", "jaeger", "uimodel-ui_01.json")
    records = list(open_source(str(path)).records())
    by_id = {r.span_id[-1]: r for r in records}
    general = by_id["2"]  # first of the two spans sharing id 2 (the second is a duplicate)
    assert general.name == "test-general-conversion"
    assert [e.name for e in general.events] == ["some-event", ""]
    assert general.resource_attributes == {"service.name": "service-x"}
    ref = by_id["4"]
    assert ref.parent_span_id == "0000000000000002"
    assert ref.resource_attributes == {"service.name": "service-y"}
    assert {li.attributes["opentracing.ref_type"] for li in ref.links} == {
        "child_of",
        "follows_from",
    }
    assert all(r.trace_id == "00000000000000000000000000000001" for r in records)


def test_anonymizer_fixture_embedded_processes_and_string_bools() -> None:
    path = shared_path("fixtures", "jaeger", "anonymizer-trace_success.json")
    server, client = list(open_source(str(path), strict=True).records())
    assert (server.kind, client.kind) == ("SERVER", "CLIENT")
    assert client.status_code == "ERROR"
    assert server.resource_attributes == {"service.name": "16af988c443cff37"}
    assert client.parent_span_id == server.span_id

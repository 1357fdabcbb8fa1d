"""Fuzzing the decoders: whatever the input, only the typed errors of memtrace_otel.errors escape.

Inputs are shaped like the real formats (so the fuzzer reaches deep fields) with any field
replaced by junk, plus arbitrary JSON and arbitrary bytes.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtrace_otel.errors import MemtraceError
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.sources import (
    decode_document,
    decode_jaeger,
    decode_memtracebench,
    decode_otlp_json,
    decode_otlp_proto,
    iter_records,
)

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a valid value, sometimes junk."""
    return st.one_of(valid, valid, valid, json_values)


hex_ids = st.sampled_from(
    [
        "0af7651916cd43dd8448eb211c80319c",
        "0AF7651916CD43DD8448EB211C80319C",
        "CvdlGRbNQ92ESOshHIAxnA==",
        "",
        "00000000000000000000000000000000",
        "xyz",
    ]
)
span_ids = st.sampled_from(["b7ad6b7169203331", "t61rcWkgMzE=", "0000000000000000", "b7ad", "zz"])
any_values = st.recursive(
    st.one_of(
        st.builds(lambda v: {"stringValue": v}, maybe(st.text(max_size=5))),
        st.builds(
            lambda v: {"intValue": v},
            maybe(st.sampled_from(["1", "-9223372036854775808", "1.5", "x", 3])),
        ),
        st.builds(
            lambda v: {"doubleValue": v}, maybe(st.sampled_from([1.5, "NaN", "-Infinity", "x"]))
        ),
        st.builds(lambda v: {"boolValue": v}, maybe(st.booleans())),
        st.builds(lambda v: {"bytesValue": v}, maybe(st.sampled_from(["AAE=", "!!", "AA"]))),
        st.just({}),
    ),
    lambda inner: st.one_of(
        st.builds(lambda vs: {"arrayValue": {"values": vs}}, st.lists(inner, max_size=3)),
        st.builds(
            lambda kvs: {"kvlistValue": {"values": kvs}},
            st.lists(
                st.builds(lambda k, v: {"key": k, "value": v}, maybe(st.text(max_size=4)), inner),
                max_size=3,
            ),
        ),
    ),
    max_leaves=6,
)
key_values = st.lists(
    st.builds(lambda k, v: {"key": k, "value": v}, maybe(st.text(max_size=6)), maybe(any_values)),
    max_size=4,
)
otlp_spans = st.fixed_dictionaries(
    {
        "traceId": maybe(hex_ids),
        "spanId": maybe(span_ids),
        "name": maybe(st.text(max_size=6)),
    },
    optional={
        "parentSpanId": maybe(span_ids),
        "kind": maybe(st.sampled_from([0, 2, 9, "SPAN_KIND_CLIENT", "SPAN_KIND_NOPE"])),
        "startTimeUnixNano": maybe(st.sampled_from(["1", 5, "-1", "1e3", 1.5])),
        "endTimeUnixNano": maybe(st.sampled_from(["2", 7])),
        "attributes": maybe(key_values),
        "events": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {"name": maybe(st.text(max_size=4)), "attributes": maybe(key_values)}
                ),
                max_size=2,
            )
        ),
        "links": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "traceId": maybe(hex_ids),
                        "spanId": maybe(span_ids),
                        "attributes": maybe(key_values),
                    }
                ),
                max_size=2,
            )
        ),
        "status": maybe(
            st.fixed_dictionaries({"code": maybe(st.sampled_from([0, 1, 2, "STATUS_CODE_OK", 7]))})
        ),
        "traceState": maybe(st.text(max_size=4)),
    },
)
otlp_requests = st.builds(
    lambda envelope, blocks: (
        {envelope: blocks} if envelope != "result" else {"result": {"resourceSpans": blocks}}
    ),
    st.sampled_from(["resourceSpans", "batches", "result"]),
    maybe(
        st.lists(
            st.fixed_dictionaries(
                {
                    "resource": maybe(st.fixed_dictionaries({"attributes": maybe(key_values)})),
                    "scopeSpans": maybe(
                        st.lists(
                            st.fixed_dictionaries(
                                {
                                    "scope": maybe(
                                        st.fixed_dictionaries({"name": maybe(st.text(max_size=3))})
                                    ),
                                    "spans": maybe(st.lists(otlp_spans, max_size=3)),
                                }
                            ),
                            max_size=2,
                        )
                    ),
                }
            ),
            max_size=2,
        )
    ),
)
jaeger_tags = st.lists(
    st.fixed_dictionaries(
        {
            "key": maybe(
                st.sampled_from(
                    ["k", "span.kind", "error", "otel.status_code", "memtrace.op.inputs"]
                )
            ),
            "type": maybe(
                st.sampled_from(["string", "bool", "int64", "float64", "binary", "weird"])
            ),
            "value": json_values,
        }
    ),
    max_size=3,
)
jaeger_spans = st.fixed_dictionaries(
    {
        "traceID": maybe(st.sampled_from(["2be38093ead7a083", "trace-1", "", "0"])),
        "spanID": maybe(st.sampled_from(["7606ddfe69932d34", "span-1", "1"])),
        "operationName": maybe(st.text(max_size=4)),
    },
    optional={
        "references": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "refType": maybe(st.sampled_from(["CHILD_OF", "FOLLOWS_FROM", "X"])),
                        "traceID": maybe(st.just("2be38093ead7a083")),
                        "spanID": maybe(st.just("1")),
                    }
                ),
                max_size=2,
            )
        ),
        "startTime": maybe(st.integers(min_value=-5, max_value=2**53)),
        "duration": maybe(st.integers(min_value=-5, max_value=10**9)),
        "tags": maybe(jaeger_tags),
        "logs": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {"timestamp": maybe(st.integers(0, 10**15)), "fields": maybe(jaeger_tags)}
                ),
                max_size=2,
            )
        ),
        "processID": maybe(st.sampled_from(["p1", "p2"])),
        "process": maybe(
            st.fixed_dictionaries(
                {"serviceName": maybe(st.text(max_size=3)), "tags": maybe(jaeger_tags)}
            )
        ),
    },
)
jaeger_docs = st.one_of(
    st.lists(jaeger_spans, max_size=3),
    st.builds(
        lambda spans, processes: {"traceID": "1", "spans": spans, "processes": processes},
        maybe(st.lists(jaeger_spans, max_size=3)),
        maybe(
            st.fixed_dictionaries(
                {
                    "p1": maybe(
                        st.fixed_dictionaries(
                            {"serviceName": maybe(st.text(max_size=3)), "tags": maybe(jaeger_tags)}
                        )
                    )
                }
            )
        ),
    ),
    st.builds(
        lambda traces: {"data": traces},
        st.lists(
            st.fixed_dictionaries({"spans": maybe(st.lists(jaeger_spans, max_size=2))}), max_size=2
        ),
    ),
)


def _check(records: list[SpanRecord]) -> None:
    for record in records:
        assert len(record.trace_id) == 32 and len(record.span_id) == 16


@FUZZ
@given(otlp_requests)
def test_otlp_json(doc: Any) -> None:
    with contextlib.suppress(MemtraceError):
        _check(decode_otlp_json(doc))
    errors: list[Any] = []
    _check(decode_otlp_json(doc, errors=errors))  # lenient: never raises
    assert all(isinstance(e, MemtraceError) for e in errors)


@FUZZ
@given(jaeger_docs)
def test_jaeger(doc: Any) -> None:
    with contextlib.suppress(MemtraceError):
        _check(decode_jaeger(doc))
    _check(decode_jaeger(doc, errors=[]))


@FUZZ
@given(json_values)
def test_any_json_document(doc: Any) -> None:
    with contextlib.suppress(MemtraceError):
        _check(decode_document(doc))
    _check(decode_document(doc, errors=[]))


@FUZZ
@given(st.binary(max_size=200))
def test_otlp_proto_bytes(data: bytes) -> None:
    with contextlib.suppress(MemtraceError):
        _check(decode_otlp_proto(data))
    _check(decode_otlp_proto(data, errors=[]))


_SAMPLE = {
    "graph_id": "g",
    "project_id": "rag",
    "user_id": "u",
    "data": {
        "nodes": [
            {
                "name": "q",
                "class_name": "query",
                "version": 1,
                "value": "'why?'",
                "category": "query",
                "metadata": {"evidence": ["m"]},
            },
            {
                "name": "m",
                "version": 1,
                "value": '{"a": 1}',
                "category": "message",
                "created_at": "2026-01-01 00:00:00.000",
            },
        ],
        "operations": [
            {
                "op_id": "op-1",
                "op_name": "memory_system.retrieve",
                "category": "retrieval",
                "session_id": "s",
            }
        ],
        "edges": [
            {"op_id": "op-1", "source_full_node_id": "query:q@1", "target_full_node_id": "m@1"}
        ],
        "sessions": [{"session_id": "s", "category": "memory_search"}],
        "annotations": [
            {"query_id": "query:q@1", "final_error_type": "RetrievalError", "final_op_id": "op-1"}
        ],
    },
}


@FUZZ
@given(
    st.sampled_from(["nodes", "operations", "edges", "sessions", "annotations"]),
    st.integers(0, 4),
    json_values,
)
def test_memtracebench(section: str, index: int, junk: Any) -> None:
    doc = json.loads(json.dumps(_SAMPLE))
    items = doc["data"][section]
    if index < len(items) and isinstance(items[index], dict) and isinstance(junk, dict):
        items[index].update(junk)
    elif index < len(items):
        items[index] = junk
    else:
        doc["data"][section] = junk
    with contextlib.suppress(MemtraceError):
        _check(list(decode_memtracebench(doc).records))
    _check(list(decode_memtracebench(doc, on_error=lambda kind, error: None).records))


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=60),
            st.sampled_from(
                [
                    b"\n",
                    b"\x00\x00",
                    b"{",
                    b'{"resourceSpans": []}',
                    b"\x1f\x8b",
                    b"\x28\xb5\x2f\xfd",
                    b"\x00\x00\x00\x05\x0a\x03abc",
                ]
            ),
        ),
        max_size=5,
    )
)
def test_files_of_arbitrary_bytes(parts: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.bin"
        path.write_bytes(b"".join(parts))
        with contextlib.suppress(MemtraceError):
            _check(list(iter_records(path, strict=True)))
        _check(list(iter_records(path)))

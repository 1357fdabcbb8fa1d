"""Size caps: attribute values cut and counted in ``stats.truncated_values``; line and document
caps; both configurable (argument > environment > default).

The size bombs themselves (a 200 MB line, oversized HTTP bodies) are in
``test_reliability_bombs.py``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from memtrace_otel.export import dumps_request
from memtrace_otel.semconv import EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import LineReader, ValueLimits, open_source
from memtrace_otel.sources._limits import (
    DEFAULT_MAX_ARRAY_ITEMS,
    DEFAULT_MAX_ATTRIBUTE_BYTES,
    DEFAULT_MAX_DOCUMENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    ReadLimits,
    cap_value,
    cut_text,
)
from memtrace_otel.sources._source import FileSource

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _record(span_id: str, **attrs: object) -> SpanRecord:
    return SpanRecord(TRACE, span_id, "op", attributes=MappingProxyType(dict(attrs)))  # type: ignore[arg-type]


def _write(path: Path, *records: SpanRecord) -> Path:
    path.write_text("".join(dumps_request([r]) + "\n" for r in records), encoding="utf-8")
    return path


def test_long_strings_bytes_and_arrays_are_cut_and_counted(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.jsonl",
        _record("00f067aa0ba902b7", s="x" * 101, b=b"\x01" * 101, arr=tuple(range(12)), ok="y"),
        _record("00f067aa0ba902b8", short="x" * 100, arr=tuple(range(10))),
    )
    source = open_source(path, max_attribute_bytes=100, max_array_items=10)
    first, second = list(source.records())
    assert first.attributes["s"] == "x" * 100
    assert first.attributes["b"] == b"\x01" * 100
    assert first.attributes["arr"] == tuple(range(10))
    assert first.attributes["ok"] == "y"
    assert second.attributes == {"short": "x" * 100, "arr": tuple(range(10))}  # at the cap: kept
    assert source.stats.truncated_values == 3
    assert source.stats.skipped == 0 and source.stats.records == 2
    assert "3 attribute values truncated" in source.stats.summary()


def test_events_links_and_resource_values_are_capped_and_a_shared_resource_counted_once(
    tmp_path: Path,
) -> None:
    resource = MappingProxyType({"service.name": "s", "big": "r" * 50})
    event = EventRecord("memtrace.variable", 1, MappingProxyType({"v": "e" * 50}))
    link = LinkRecord(TRACE, "00f067aa0ba902b7", MappingProxyType({"l": ("a", "b" * 50)}))
    records = [
        SpanRecord(
            TRACE,
            f"00f067aa0ba902c{i}",
            "op",
            events=(event,),
            links=(link,),
            resource_attributes=resource,
        )
        for i in range(3)
    ]
    path = tmp_path / "t.jsonl"
    path.write_text(dumps_request(records) + "\n", encoding="utf-8")
    source = FileSource(path.as_posix(), max_attribute_bytes=10)
    out = list(source.records())
    assert [r.resource_attributes["big"] for r in out] == ["r" * 10] * 3
    assert [r.events[0].attributes["v"] for r in out] == ["e" * 10] * 3
    assert [r.links[0].attributes["l"] for r in out] == [("a", "b" * 10)] * 3
    # 1 resource value (shared by the three records) + 3 event values + 3 link array elements.
    assert source.stats.truncated_values == 7


def test_a_jaeger_tag_value_is_capped(tmp_path: Path) -> None:
    span = {
        "traceID": TRACE,
        "spanID": "00f067aa0ba902b7",
        "operationName": "op",
        "references": [],
        "startTime": 1_700_000_000_000_000,
        "duration": 1500,
        "tags": [{"key": "a", "type": "string", "value": "z" * 5000}],
        "logs": [],
        "processID": "p1",
    }
    trace = {"traceID": TRACE, "spans": [span], "processes": {"p1": {"serviceName": "s"}}}
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps({"data": [trace]}), encoding="utf-8")
    source = open_source(path, max_attribute_bytes=1000)
    [record] = list(source.records())
    assert record.attributes["a"] == "z" * 1000
    assert source.stats.truncated_values == 1


def test_utf8_is_cut_on_a_character_boundary_by_bytes_not_characters() -> None:
    assert cut_text("é" * 10, 5) == "éé"  # 2 bytes each: 4 bytes fit, a half character does not
    assert cut_text("€" * 3, 9) is None and cut_text("€" * 4, 9) == "€€€"
    assert cut_text("\ud800abc", 4) == "\ud800a"  # a lone surrogate (valid in JSON) is 3 bytes
    assert cap_value("é" * 10, ValueLimits(max_bytes=20)) == ("é" * 10, 0)
    assert cap_value("é" * 11, ValueLimits(max_bytes=20)) == ("é" * 10, 1)


def test_nested_kvlist_and_array_elements_are_capped() -> None:
    value = MappingProxyType({"inner": ("x" * 8, "ok"), "n": 1})
    capped, count = cap_value(value, ValueLimits(max_bytes=4, max_items=5))
    assert capped == {"inner": ("xxxx", "ok"), "n": 1} and count == 1


def test_argument_beats_environment_beats_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(E.ENV_MEMTRACE_MAX_ATTRIBUTE_BYTES, raising=False)
    assert ValueLimits.resolve() == ValueLimits(
        DEFAULT_MAX_ATTRIBUTE_BYTES, DEFAULT_MAX_ARRAY_ITEMS
    )
    assert DEFAULT_MAX_ATTRIBUTE_BYTES == 1 << 20 and DEFAULT_MAX_ARRAY_ITEMS == 10_000
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_ATTRIBUTE_BYTES, "2048")
    assert FileSource("x").limits.max_bytes == 2048
    assert FileSource("x", max_attribute_bytes=64).limits.max_bytes == 64


@pytest.mark.parametrize("text", ["lots", "0", "-5"])
def test_a_bad_environment_value_is_a_value_error_at_construction(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_ATTRIBUTE_BYTES, text)
    with pytest.raises(ValueError, match="MEMTRACE_MAX_ATTRIBUTE_BYTES"):
        FileSource("x")


@pytest.mark.parametrize("kwargs", [{"max_attribute_bytes": 0}, {"max_array_items": -1}])
def test_a_bad_cap_argument_is_a_value_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        FileSource("x", **kwargs)


# --- read caps: lines and documents ------------------------------------------------------------


def test_read_caps_argument_beats_environment_beats_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(E.ENV_MEMTRACE_MAX_LINE_BYTES, raising=False)
    monkeypatch.delenv(E.ENV_MEMTRACE_MAX_DOCUMENT_BYTES, raising=False)
    assert FileSource("x").read_limits == ReadLimits(
        DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_DOCUMENT_BYTES
    )
    assert DEFAULT_MAX_LINE_BYTES == 64 << 20 and DEFAULT_MAX_DOCUMENT_BYTES == 256 << 20
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_LINE_BYTES, "4096")
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_DOCUMENT_BYTES, "8192")
    assert FileSource("x").read_limits == ReadLimits(4096, 8192)
    assert FileSource("x", max_line_bytes=10, max_document_bytes=20).read_limits == ReadLimits(
        10, 20
    )


@pytest.mark.parametrize(
    "variable", [E.ENV_MEMTRACE_MAX_LINE_BYTES, E.ENV_MEMTRACE_MAX_DOCUMENT_BYTES]
)
@pytest.mark.parametrize("text", ["64M", "0", "-5", "1e6"])
def test_a_bad_read_cap_in_the_environment_is_a_value_error_at_construction(
    monkeypatch: pytest.MonkeyPatch, variable: str, text: str
) -> None:
    monkeypatch.setenv(variable, text)
    with pytest.raises(ValueError, match=variable):
        FileSource("x")


@pytest.mark.parametrize("kwargs", [{"max_line_bytes": 0}, {"max_document_bytes": -1}])
def test_a_bad_read_cap_argument_is_a_value_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        open_source("x", **kwargs)


@pytest.mark.parametrize(
    ("data", "lines", "skipped"),
    [
        (b"abcd\nabcde\n", [b"abcd\n", b""], [6]),  # 4 bytes fit, 5 do not (newline excluded)
        (b"abcde", [b""], [5]),  # a last line without a newline is measured the same way
        (b"abcd", [b"abcd"], []),
        (b"\n\nabcd\r\n", [b"\n", b"\n", b""], [6]),  # "\r" is content
        (b"x" * 10 + b"\nok\n" + b"y" * 9, [b"", b"ok\n", b""], [11, 9]),
    ],
)
def test_the_line_reader_never_yields_a_line_over_the_cap(
    data: bytes, lines: list[bytes], skipped: list[int]
) -> None:
    reader = LineReader(io.BytesIO(data), 4)
    seen, sizes = [], []
    for line in reader:
        seen.append(line)
        if not line:
            sizes.append(reader.skipped_size)
    assert seen == lines and sizes == skipped


@pytest.mark.parametrize(
    "raw",
    [
        b'{"case_id": "q1", "gold_answers": ["Porto"], "n": 1.5e-7, "k": -0}\n',
        b'{"case_id": "q\\ud800", "a": "\\udfff x"}\n',  # lone surrogates: replaced
        b'{"confidence": NaN, "x": Infinity}\n',  # the standard parser's extensions
        b'{"big": 123456789012345678901234567890}\n',  # over 64 bits
        b'{"a": 1, "a": 2}\n',  # the last duplicate wins
        b"\xef\xbb\xbf{}\n",  # a byte order mark
        b'{"a": "\xff"}\n',  # not UTF-8
        b"[" * 5000 + b"]" * 5000 + b"\n",  # nesting too deep
        b'{"a": 1e400}\n',
        b'{"a": }\n',
    ],
)
def test_json_lines_read_the_same_with_or_without_orjson(
    raw: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cases, labels and verdicts files parse with orjson where installed: every line gives the
    value (or the error) the standard parser gives."""
    from memtrace_otel.errors import DecodeError
    from memtrace_otel.sources import _common

    def read() -> Any:
        try:
            return _common.json_line(raw, path="cases.jsonl", line=3)
        except DecodeError as exc:
            return ("error", str(exc))

    fast = read()
    monkeypatch.setattr(_common, "_fast_loads", None)
    slow = read()
    assert repr(fast) == repr(slow)  # repr: NaN != NaN

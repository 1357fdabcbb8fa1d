"""SDK spans -> neutral records -> OTLP/JSON, and a file exporter writing OTLP JSON Lines.

The file format is the OpenTelemetry Collector file exporter's ``format: json``: one
``ExportTraceServiceRequest`` per line, hex ids, integer enums, int64 as strings. We encode by
hand: protobuf's ``json_format`` writes base64 ids and enum names, which is *not* OTLP/JSON.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import IO, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from memtrace_otel._internal import data_warning, internal_error, reinit_after_fork
from memtrace_otel.semconv import (
    SPAN_KINDS,
    STATUS_CODES,
    Attributes,
    AttrValue,
    EventRecord,
    LinkRecord,
    SpanRecord,
    frozen_attributes,
)
from memtrace_otel.semconv.record import EMPTY_ATTRIBUTES

_KIND_NUMBER = {name: number for number, name in enumerate(SPAN_KINDS)}
_STATUS_NUMBER = {name: number for number, name in enumerate(STATUS_CODES)}


def span_to_record(span: ReadableSpan) -> SpanRecord:
    """Copy an SDK span into a neutral :class:`SpanRecord`."""
    ctx = span.context
    assert ctx is not None, "an ended SDK span always has a context"
    parent = span.parent
    scope = span.instrumentation_scope
    return SpanRecord(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        parent_span_id=format(parent.span_id, "016x") if parent is not None else None,
        name=span.name,
        kind=span.kind.name,
        start_time_unix_nano=span.start_time or 0,
        end_time_unix_nano=span.end_time or 0,
        status_code=span.status.status_code.name,
        status_message=span.status.description or "",
        attributes=_sdk_attributes(span.attributes),
        events=tuple(
            EventRecord(e.name, e.timestamp or 0, _sdk_attributes(e.attributes))
            for e in span.events
        ),
        links=tuple(
            LinkRecord(
                format(link.context.trace_id, "032x"),
                format(link.context.span_id, "016x"),
                _sdk_attributes(link.attributes),
            )
            for link in span.links
        ),
        resource_attributes=_resource_attributes(span.resource),
        scope_name=scope.name if scope is not None else "",
        scope_version=(scope.version or "") if scope is not None else "",
        scope_attributes=frozen_attributes(getattr(scope, "attributes", None)),
        trace_state=ctx.trace_state.to_header() if ctx.trace_state else "",
    )


_FLAT = frozenset([str, bool, int, float, bytes, type(None)])


def _sdk_attributes(attributes: Mapping[str, Any] | None) -> Attributes:
    """:func:`frozen_attributes` of an SDK span's, event's or link's attributes, without walking
    them through the ``Mapping`` protocol: the SDK's ``BoundedAttributes`` copies itself into a
    plain dict (``copy``), and its values are already cleaned (scalars, tuples of scalars), so
    the copy is the frozen mapping. Anything else (a nested kvlist, a mapping of another kind)
    is frozen value by value. This runs for every span the live processor folds."""
    if not attributes:
        return EMPTY_ATTRIBUTES
    copy = getattr(attributes, "copy", None)
    plain = copy() if copy is not None else None
    if type(plain) is not dict:
        return frozen_attributes(attributes)
    for value in plain.values():
        kind = value.__class__
        if kind not in _FLAT and not (kind is tuple and all(v.__class__ in _FLAT for v in value)):
            return frozen_attributes(plain)
    return MappingProxyType(plain)


_resource_cache: tuple[object, Attributes] | None = None


def _resource_attributes(resource: Resource) -> Attributes:
    """Frozen resource attributes; every span of a provider shares one resource, so remember it."""
    global _resource_cache
    cached = _resource_cache
    if cached is not None and cached[0] is resource:
        return cached[1]
    frozen = frozen_attributes(resource.attributes)
    _resource_cache = (resource, frozen)
    return frozen


def encode_any_value(value: AttrValue) -> dict[str, Any]:
    """One attribute value as an OTLP/JSON ``AnyValue``."""
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        if value - value != 0.0:  # NaN and infinities: proto3 JSON writes them as strings
            return {
                "doubleValue": "NaN"
                if value != value
                else ("Infinity" if value > 0 else "-Infinity")
            }
        return {"doubleValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": encode_attributes(value)}}
    if isinstance(value, tuple | list):
        return {"arrayValue": {"values": [encode_any_value(v) for v in value]}}
    return {}


def encode_attributes(attributes: Mapping[str, AttrValue]) -> list[dict[str, Any]]:
    """Attributes as an OTLP/JSON ``KeyValue`` list."""
    return [{"key": k, "value": encode_any_value(v)} for k, v in attributes.items()]


def encode_span(record: SpanRecord) -> dict[str, Any]:
    """One record as an OTLP/JSON ``Span`` object."""
    span: dict[str, Any] = {
        "traceId": record.trace_id,
        "spanId": record.span_id,
        "name": record.name,
        "kind": _KIND_NUMBER.get(record.kind, 0),
        "startTimeUnixNano": str(record.start_time_unix_nano),
        "endTimeUnixNano": str(record.end_time_unix_nano),
    }
    if record.parent_span_id:
        span["parentSpanId"] = record.parent_span_id
    if record.trace_state:
        span["traceState"] = record.trace_state
    if record.attributes:
        span["attributes"] = encode_attributes(record.attributes)
    if record.events:
        span["events"] = [
            {
                "timeUnixNano": str(e.time_unix_nano),
                "name": e.name,
                "attributes": encode_attributes(e.attributes),
            }
            for e in record.events
        ]
    if record.links:
        span["links"] = [
            {
                "traceId": li.trace_id,
                "spanId": li.span_id,
                "attributes": encode_attributes(li.attributes),
            }
            for li in record.links
        ]
    status: dict[str, Any] = {}
    if record.status_code != "UNSET":
        status["code"] = _STATUS_NUMBER.get(record.status_code, 0)
    if record.status_message:
        status["message"] = record.status_message
    span["status"] = status
    return span


def encode_request(records: Iterable[SpanRecord]) -> dict[str, Any]:
    """Records as one OTLP/JSON ``ExportTraceServiceRequest``, grouped by resource and scope."""
    resources: dict[str, tuple[SpanRecord, dict[str, list[dict[str, Any]]]]] = {}
    scopes: dict[tuple[str, str], SpanRecord] = {}
    for record in records:
        rkey = _attr_key(record.resource_attributes)
        skey = json.dumps(
            [record.scope_name, record.scope_version, _attr_key(record.scope_attributes)]
        )
        entry = resources.setdefault(rkey, (record, {}))
        entry[1].setdefault(skey, []).append(encode_span(record))
        scopes.setdefault((rkey, skey), record)
    resource_spans = []
    for rkey, (first, by_scope) in resources.items():
        scope_spans = []
        for skey, spans in by_scope.items():
            head = scopes[(rkey, skey)]
            scope: dict[str, Any] = {"name": head.scope_name}
            if head.scope_version:
                scope["version"] = head.scope_version
            if head.scope_attributes:
                scope["attributes"] = encode_attributes(head.scope_attributes)
            scope_spans.append({"scope": scope, "spans": spans})
        resource_spans.append(
            {
                "resource": {"attributes": encode_attributes(first.resource_attributes)},
                "scopeSpans": scope_spans,
            }
        )
    return {"resourceSpans": resource_spans}


def _attr_key(attributes: Mapping[str, AttrValue]) -> str:
    return json.dumps(encode_attributes(attributes), sort_keys=True)


def dumps_request(records: Iterable[SpanRecord]) -> str:
    """One JSON Lines line (without the newline) holding ``records``."""
    return json.dumps(encode_request(records), separators=(",", ":"), ensure_ascii=False)


_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT_CHARACTER = "\ufffd"


def scrub_surrogates(data: Any) -> tuple[Any, int]:
    """``data`` (JSON-like) with lone surrogates replaced by U+FFFD, and how many strings changed.

    A lone surrogate (``"\\ud800"``, from ``surrogateescape`` decoding or a cut emoji) cannot be
    written as UTF-8; only the strings holding one change, keys included.

    >>> scrub_surrogates({"k": ["ok", "bad\\ud800"]})
    ({'k': ['ok', 'bad\ufffd']}, 1)
    """
    if isinstance(data, str):
        if _SURROGATE.search(data) is None:
            return data, 0
        return _SURROGATE.sub(REPLACEMENT_CHARACTER, data), 1
    if isinstance(data, dict):
        out: dict[Any, Any] = {}
        total = 0
        for key, value in data.items():
            new_key, n_key = scrub_surrogates(key)
            new_value, n_value = scrub_surrogates(value)
            out[new_key] = new_value
            total += n_key + n_value
        return out, total
    if isinstance(data, list | tuple):
        items = []
        total = 0
        for item in data:
            new_item, n = scrub_surrogates(item)
            items.append(new_item)
            total += n
        return items, total
    return data, 0


class OtlpJsonLinesExporter(SpanExporter):
    """Appends each exported batch to a file as one OTLP/JSON line (the Collector's file format).

    A string UTF-8 cannot encode (a lone surrogate) in any field of a span never costs the batch:
    that string alone has the character replaced by U+FFFD, counted in
    ``stats()["replaced_values"]`` and warned about once. A batch that fails for another reason is
    counted in ``failed_spans``. In a forked child the lock is replaced (see
    :func:`memtrace_otel._internal.reinit_after_fork`).

    Args:
        path: the file to append to; its directory is created.
        stream: write to this text stream instead of a file (tests, stdout).
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, stream: IO[str] | None = None
    ) -> None:
        if (path is None) == (stream is None):
            raise ValueError("give exactly one of path or stream")
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._stream: IO[str] | None = stream
        if path is not None:
            directory = os.path.dirname(os.fspath(path))
            if directory:
                os.makedirs(directory, exist_ok=True)
            # A raw O_APPEND descriptor, no Python buffer: each line goes out in whole write()
            # calls, so forked workers appending to one file never interleave half lines, and
            # no buffer lock held by a parent thread at fork() can hang the child.
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._closed = False
        self._exported = 0
        self._failed = 0
        self._replaced = 0
        reinit_after_fork(self)

    def _reinit_after_fork(self) -> None:
        # A parent thread may have held the lock at fork(): without a new one the child's
        # export() and shutdown() would wait forever.
        self._lock = threading.Lock()

    def _write(self, line: str) -> None:
        """Write one line; raises ``UnicodeEncodeError`` before writing anything of it."""
        if self._fd is None:
            assert self._stream is not None
            self._stream.write(line)  # a text stream encodes the whole line before writing
            self._stream.flush()
            return
        data = memoryview(line.encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data) :]

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            with self._lock:
                self._failed += len(spans)
            return SpanExportResult.FAILURE
        try:
            request = encode_request(span_to_record(s) for s in spans)
            line = json.dumps(request, separators=(",", ":"), ensure_ascii=False) + "\n"
            with self._lock:
                try:
                    self._write(line)
                except UnicodeEncodeError:
                    request, replaced = scrub_surrogates(request)
                    self._write(
                        json.dumps(request, separators=(",", ":"), ensure_ascii=False) + "\n"
                    )
                    self._replaced += replaced
                    data_warning(
                        "otlp_json.surrogate",
                        "memtrace-otel: a span value held a lone surrogate (not valid UTF-8); "
                        "the character was replaced by U+FFFD and counted "
                        "(OtlpJsonLinesExporter.stats()['replaced_values'])",
                    )
                self._exported += len(spans)
        except Exception:
            with self._lock:
                self._failed += len(spans)
            internal_error("otlp_json_exporter.export")
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def stats(self) -> dict[str, int]:
        """``exported_spans``, ``failed_spans`` (lost: written nowhere) and ``replaced_values``."""
        with self._lock:
            return {
                "exported_spans": self._exported,
                "failed_spans": self._failed,
                "replaced_values": self._replaced,
            }

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if not self._closed and self._stream is not None:
                self._stream.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
            elif self._stream is not None:
                self._stream.flush()

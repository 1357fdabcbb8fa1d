"""Binary OTLP (``ExportTraceServiceRequest``, the Collector's ``format: proto``) -> records.

Parsing binary protobuf with the generated classes of ``opentelemetry-proto`` is safe; only its
JSON mapping is not (see :mod:`memtrace_otel.sources._otlp_json`).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from google.protobuf.message import DecodeError as ProtobufDecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from memtrace_otel.errors import DecodeError
from memtrace_otel.semconv import AttrValue, EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv.record import EMPTY_ATTRIBUTES, Attributes
from memtrace_otel.sources._common import (
    INVALID_RECORD,
    SPAN_KIND_NAMES,
    STATUS_NAMES,
    ZERO_SPAN_ID,
    ZERO_TRACE_ID,
    Bad,
    OnError,
    collect_into,
    finite_double,
    make_error,
    raise_on_error,
    source_label,
)

_ZERO_PARENT = bytes(8)


def _any_value(value: Any) -> AttrValue:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return tuple(_any_value(v) for v in value.array_value.values)
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    result: AttrValue = getattr(value, which)
    if which == "double_value":
        return finite_double(value.double_value, "double_value")
    return result


def _attributes(kvs: Any) -> Attributes:
    if not kvs:
        return EMPTY_ATTRIBUTES
    return MappingProxyType({kv.key: _any_value(kv.value) for kv in kvs})


def _id(raw: bytes, size: int, name: str) -> str:
    if len(raw) != size:
        raise Bad(name, f"expected {size} bytes, got {len(raw)}")
    text = raw.hex()
    if text in (ZERO_TRACE_ID, ZERO_SPAN_ID):
        raise Bad(name, "the id is all zeros (invalid)")
    return text


def parse_request(data: bytes, *, path: str, line: int | None) -> Any:
    """Parse one binary ``ExportTraceServiceRequest``.

    Raises:
        Bad: the bytes are not a valid message.
    """
    try:
        return ExportTraceServiceRequest.FromString(data)
    except (ProtobufDecodeError, ValueError, RuntimeError) as exc:
        raise Bad("", f"not a valid OTLP protobuf message ({exc})", INVALID_RECORD) from None


def decode_request_message(
    request: Any, *, path: str, line: int | None, on_error: OnError
) -> list[SpanRecord]:
    """The spans of a parsed ``ExportTraceServiceRequest``."""
    source = source_label(path, line)
    records: list[SpanRecord] = []
    for ri, rs in enumerate(request.resource_spans):
        try:
            resource = _attributes(rs.resource.attributes)
        except Bad as bad:  # a bad resource skips its spans with one report
            _report(on_error, bad, path, line, f"resource_spans[{ri}].resource.attributes")
            continue
        for si, ss in enumerate(rs.scope_spans):
            scope = ss.scope
            try:
                scope_attrs = _attributes(scope.attributes)
            except Bad as bad:
                _report(
                    on_error,
                    bad,
                    path,
                    line,
                    f"resource_spans[{ri}].scope_spans[{si}].scope.attributes",
                )
                continue
            for pi, sp in enumerate(ss.spans):
                try:
                    trace_id = _id(sp.trace_id, 16, "trace_id")
                    raw_parent = sp.parent_span_id
                    parent = (
                        _id(raw_parent, 8, "parent_span_id")
                        if raw_parent and raw_parent != _ZERO_PARENT
                        else None
                    )
                    records.append(
                        SpanRecord(
                            trace_id=trace_id,
                            span_id=_id(sp.span_id, 8, "span_id"),
                            name=sp.name,
                            parent_span_id=parent,
                            kind=SPAN_KIND_NAMES[sp.kind] if 0 <= sp.kind < 6 else "UNSPECIFIED",
                            start_time_unix_nano=sp.start_time_unix_nano,
                            end_time_unix_nano=sp.end_time_unix_nano,
                            status_code=(
                                STATUS_NAMES[sp.status.code] if 0 <= sp.status.code < 3 else "UNSET"
                            ),
                            status_message=sp.status.message,
                            attributes=_attributes(sp.attributes),
                            events=tuple(
                                EventRecord(e.name, e.time_unix_nano, _attributes(e.attributes))
                                for e in sp.events
                            ),
                            links=tuple(
                                LinkRecord(
                                    _id(li.trace_id, 16, "links.trace_id"),
                                    _id(li.span_id, 8, "links.span_id"),
                                    _attributes(li.attributes),
                                )
                                for li in sp.links
                            ),
                            resource_attributes=resource,
                            scope_name=scope.name,
                            scope_version=scope.version,
                            scope_attributes=scope_attrs,
                            trace_state=sp.trace_state,
                            source=source,
                        )
                    )
                except Bad as bad:
                    _report(
                        on_error,
                        bad,
                        path,
                        line,
                        f"resource_spans[{ri}].scope_spans[{si}].spans[{pi}]",
                    )
    return records


def decode_otlp_proto(
    data: bytes,
    *,
    path: str = "",
    line: int | None = None,
    errors: list[DecodeError] | None = None,
) -> list[SpanRecord]:
    """The span records of one binary ``ExportTraceServiceRequest``.

    Args:
        data: the serialized message.
        path: where it came from, for ``source`` and error messages.
        line: its record number in a length-prefixed file.
        errors: ``None`` to raise at the first bad span (strict); a list to collect the errors
            into and skip the bad spans (lenient).

    Raises:
        DecodeError: the bytes are not a message, or (strict) a bad span.
    """
    on_error = raise_on_error if errors is None else collect_into(errors)
    try:
        request = parse_request(data, path=path, line=line)
    except Bad as bad:
        on_error(bad.kind, make_error(bad.reason, path=path, line=line))
        return []
    return decode_request_message(request, path=path, line=line, on_error=on_error)


def _report(on_error: OnError, bad: Bad, path: str, line: int | None, at: str) -> None:
    """Report ``bad`` (raised inside the message part ``at``) with its file, line and field."""
    on_error(bad.kind, make_error(bad.reason, path=path, line=line, field=f"{at}.{bad.field}"))

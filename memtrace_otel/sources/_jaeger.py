"""Jaeger v1 JSON (UI download, ``/api/traces`` responses, the anonymizer's span array) -> records.

Jaeger's OTLP -> v1 conversion is undone where it can be: the process becomes the resource
(``serviceName`` -> ``service.name``), tags become attributes, logs become events (field
``event`` = the event name), and the tags Jaeger invents are turned back into span fields
(``span.kind``, ``otel.status_code``/``otel.status_description``/``error``,
``otel.scope.name``/``otel.scope.version`` (or the older ``otel.library.*``), ``w3c.tracestate``).

References follow Jaeger's own rule: the parent is the first ``CHILD_OF`` reference in the same
trace; every other reference becomes a link with ``opentracing.ref_type`` (Jaeger drops all
other link attributes). Jaeger has no array tag type: OTLP arrays arrive as JSON strings, so
the contract's array attributes (``memtrace.op.inputs``/``outputs``, attribution evidence refs)
are decoded back to tuples of strings here.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from memtrace_otel.semconv import AttrValue, EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv.attributes import (
    MEMTRACE_ATTRIBUTION_EVIDENCE_REFS,
    MEMTRACE_OP_INPUTS,
    MEMTRACE_OP_OUTPUTS,
    SERVICE_NAME,
)
from memtrace_otel.semconv.record import EMPTY_ATTRIBUTES, Attributes
from memtrace_otel.sources._common import (
    INVALID_RECORD,
    MAX_UINT64,
    Bad,
    OnError,
    finite_double,
    int64,
    join_field,
    make_error,
    padded_hex_id,
    short_repr,
    source_label,
)

ARRAY_ATTRIBUTES = frozenset(
    {MEMTRACE_OP_INPUTS, MEMTRACE_OP_OUTPUTS, MEMTRACE_ATTRIBUTION_EVIDENCE_REFS}
)
"""Contract attributes whose values are string arrays, restored from Jaeger's JSON-string tags."""

# Tags Jaeger derives from span fields (the names the OTLP -> Jaeger translators write).
_TAG_SPAN_KIND = "span.kind"
_TAG_STATUS_CODE = "otel.status_code"
_TAG_STATUS_DESCRIPTION = "otel.status_description"
_TAG_ERROR = "error"
_TAG_SCOPE_NAME = "otel.scope.name"
_TAG_SCOPE_VERSION = "otel.scope.version"
_TAG_LIBRARY_NAME = "otel.library.name"
_TAG_LIBRARY_VERSION = "otel.library.version"
_TAG_TRACE_STATE = "w3c.tracestate"
_REF_TYPE = "opentracing.ref_type"

_KIND_BY_TAG = {
    "server": "SERVER",
    "client": "CLIENT",
    "producer": "PRODUCER",
    "consumer": "CONSUMER",
    "internal": "INTERNAL",
}


def _tag_value(tag: dict[str, Any]) -> AttrValue:
    kind = tag.get("type")
    value = tag.get("value")
    kind = kind.lower() if type(kind) is str else kind
    if kind == "string" or (kind is None and type(value) is str):
        if isinstance(value, str):
            return value
    elif kind == "bool" or (kind is None and type(value) is bool):
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return bool(value == "true")
    elif kind == "int64" or (kind is None and type(value) is int):
        # Values beyond 2^53 arrive as JSON strings so JavaScript does not round them.
        return int64(value, "value")
    elif kind == "float64" or (kind is None and type(value) is float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return finite_double(float(value), "value")
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
            else:
                return finite_double(number, "value")
    elif kind == "binary":
        if type(value) is str:
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                pass
    else:
        raise Bad("type", f"unknown tag type {short_repr(kind)}")
    raise Bad("value", f"invalid {kind or 'tag'} value {short_repr(value)}")


def _tags(items: Any, name: str) -> dict[str, AttrValue]:
    if items is None:
        return {}
    if type(items) is not list:
        raise Bad(name, "expected a list of tags")
    out: dict[str, AttrValue] = {}
    for i, tag in enumerate(items):
        if type(tag) is not dict or type(tag.get("key")) is not str:
            raise Bad(f"{name}[{i}]", "expected a {key, type, value} tag")
        try:
            out[tag["key"]] = _tag_value(tag)
        except Bad as bad:
            bad.field = join_field(f"{name}[{i}]", bad.field)
            raise
    return out


def _json_array(value: AttrValue) -> AttrValue:
    """A JSON-string tag back to a tuple of strings when it is one (else unchanged)."""
    if type(value) is str and value.startswith("["):
        try:
            items = json.loads(value)
        except ValueError:
            return value
        if type(items) is list and all(type(x) is str for x in items):
            return tuple(items)
    return value


def _process(process: Any, name: str) -> Attributes:
    if type(process) is not dict:
        raise Bad(name, "expected a process object")
    service = process.get("serviceName")
    if service is not None and type(service) is not str:
        raise Bad(f"{name}.serviceName", "expected a string")
    attrs = _tags(process.get("tags"), f"{name}.tags")
    if service is not None:
        attrs = {SERVICE_NAME: service, **attrs}
    return MappingProxyType(attrs) if attrs else EMPTY_ATTRIBUTES


def _events(logs: Any) -> tuple[EventRecord, ...]:
    if not logs:
        return ()
    if type(logs) is not list:
        raise Bad("logs", "expected a list")
    out = []
    for i, log in enumerate(logs):
        if type(log) is not dict:
            raise Bad(f"logs[{i}]", "expected a log object")
        try:
            fields = _tags(log.get("fields"), "fields")
            time_us = int64(log.get("timestamp", 0), "timestamp")
        except Bad as bad:
            bad.field = join_field(f"logs[{i}]", bad.field)
            raise
        name = fields.get("event")
        if type(name) is str:
            del fields["event"]
        else:
            name = ""
        out.append(
            EventRecord(
                name, time_us * 1000, MappingProxyType(fields) if fields else EMPTY_ATTRIBUTES
            )
        )
    return tuple(out)


def _references(refs: Any, trace_id: str) -> tuple[str | None, tuple[LinkRecord, ...]]:
    if not refs:
        return None, ()
    if type(refs) is not list:
        raise Bad("references", "expected a list")
    parent = None
    links = []
    for i, ref in enumerate(refs):
        if type(ref) is not dict:
            raise Bad(f"references[{i}]", "expected a reference object")
        try:
            ref_type = ref.get("refType", "CHILD_OF")
            if ref_type not in ("CHILD_OF", "FOLLOWS_FROM"):
                raise Bad("refType", f"unknown reference type {short_repr(ref_type)}")
            raw_trace = ref.get("traceID")
            ref_trace = trace_id if raw_trace is None else padded_hex_id(raw_trace, 32, "traceID")
            ref_span = padded_hex_id(ref.get("spanID"), 16, "spanID")
        except Bad as bad:
            bad.field = join_field(f"references[{i}]", bad.field)
            raise
        if parent is None and ref_type == "CHILD_OF" and ref_trace == trace_id:
            parent = ref_span
            continue
        links.append(
            LinkRecord(
                ref_trace,
                ref_span,
                MappingProxyType(
                    {_REF_TYPE: "child_of" if ref_type == "CHILD_OF" else "follows_from"}
                ),
            )
        )
    return parent, tuple(links)


def decode_jaeger_span(
    sp: Any, processes: Mapping[str, Attributes] | None, source: str
) -> SpanRecord:
    """One Jaeger v1 span; ``processes`` maps process ids to resources (``None``: embedded)."""
    if type(sp) is not dict:
        raise Bad("", f"expected a span object, got {short_repr(sp)}")
    trace_id = padded_hex_id(sp.get("traceID"), 32, "traceID")
    span_id = padded_hex_id(sp.get("spanID"), 16, "spanID")
    name = sp.get("operationName", "")
    if type(name) is not str:
        raise Bad("operationName", f"expected a string, got {short_repr(name)}")
    parent, links = _references(sp.get("references"), trace_id)
    legacy_parent = sp.get("parentSpanID")
    if parent is None and legacy_parent not in (None, "", "0", "0" * 16):
        parent = padded_hex_id(legacy_parent, 16, "parentSpanID")
    start_us = int64(sp.get("startTime", 0), "startTime")
    duration_us = int64(sp.get("duration", 0), "duration")
    if start_us < 0 or duration_us < 0:
        raise Bad("startTime" if start_us < 0 else "duration", "negative time")
    if (start_us + duration_us) * 1000 > MAX_UINT64:
        raise Bad("startTime", "time beyond the uint64 range of nanoseconds")
    tags = _tags(sp.get("tags"), "tags")

    if "process" in sp:
        resource = _process(sp["process"], "process")
    else:
        pid = sp.get("processID")
        if processes is None or pid is None:
            resource = EMPTY_ATTRIBUTES
        elif type(pid) is str and pid in processes:
            resource = processes[pid]
        else:
            raise Bad("processID", f"unknown process {short_repr(pid)}")

    kind = "UNSPECIFIED"
    tag = tags.pop(_TAG_SPAN_KIND, None)
    if type(tag) is str and tag.lower() in _KIND_BY_TAG:
        kind = _KIND_BY_TAG[tag.lower()]
    elif tag is not None:
        tags[_TAG_SPAN_KIND] = tag
    code = "UNSET"
    status = tags.pop(_TAG_STATUS_CODE, None)
    if type(status) is str and status.upper() in ("OK", "ERROR"):
        code = status.upper()
    elif status is not None:
        tags[_TAG_STATUS_CODE] = status
    error = tags.get(_TAG_ERROR)
    if type(error) is bool:
        del tags[_TAG_ERROR]
        if error and code == "UNSET":
            code = "ERROR"
    message = tags.pop(_TAG_STATUS_DESCRIPTION, "")
    scope_name = tags.pop(_TAG_SCOPE_NAME, None) or tags.pop(_TAG_LIBRARY_NAME, "")
    scope_version = tags.pop(_TAG_SCOPE_VERSION, None) or tags.pop(_TAG_LIBRARY_VERSION, "")
    trace_state = tags.pop(_TAG_TRACE_STATE, "")
    for key in ARRAY_ATTRIBUTES & tags.keys():
        tags[key] = _json_array(tags[key])

    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=name,
        parent_span_id=parent,
        kind=kind,
        start_time_unix_nano=start_us * 1000,
        end_time_unix_nano=(start_us + duration_us) * 1000,
        status_code=code,
        status_message=message if type(message) is str else str(message),
        attributes=MappingProxyType(tags) if tags else EMPTY_ATTRIBUTES,
        events=_events(sp.get("logs")),
        links=links,
        resource_attributes=resource,
        scope_name=scope_name if type(scope_name) is str else str(scope_name),
        scope_version=scope_version if type(scope_version) is str else str(scope_version),
        trace_state=trace_state if type(trace_state) is str else "",
        source=source,
    )


def decode_jaeger_spans(
    spans: Any,
    processes: Any,
    *,
    path: str,
    line: int | None,
    on_error: OnError,
    prefix: str,
) -> list[SpanRecord]:
    """The spans of one Jaeger trace (or the anonymizer's bare list, ``processes=None``)."""
    source = source_label(path, line)
    resources: dict[str, Attributes] | None = None
    if processes is not None:
        if type(processes) is not dict:
            on_error(
                INVALID_RECORD,
                make_error(
                    "expected an object",
                    path=path,
                    line=line,
                    field=join_field(prefix, "processes"),
                ),
            )
            return []
        resources = {}
        for pid, process in processes.items():
            try:
                resources[pid] = _process(process, f"processes.{pid}")
            except Bad as bad:
                on_error(
                    INVALID_RECORD,
                    make_error(
                        bad.reason, path=path, line=line, field=join_field(prefix, bad.field)
                    ),
                )
                return []
    if type(spans) is not list:
        on_error(
            INVALID_RECORD,
            make_error(
                "expected a list of spans", path=path, line=line, field=join_field(prefix, "spans")
            ),
        )
        return []
    records = []
    span_prefix = join_field(prefix, "spans") if processes is not None or prefix else ""
    for i, sp in enumerate(spans):
        try:
            records.append(decode_jaeger_span(sp, resources, source))
        except Bad as bad:
            on_error(
                bad.kind,
                make_error(
                    bad.reason,
                    path=path,
                    line=line,
                    field=join_field(join_field(span_prefix, f"[{i}]"), bad.field),
                ),
            )
    return records


def decode_jaeger_trace(
    trace: dict[str, Any], *, path: str, line: int | None, on_error: OnError, prefix: str = ""
) -> list[SpanRecord]:
    """One Jaeger v1 trace object ``{traceID, spans, processes}``."""
    return decode_jaeger_spans(
        trace.get("spans"),
        trace.get("processes") or {},
        path=path,
        line=line,
        on_error=on_error,
        prefix=prefix,
    )


def is_jaeger_span(obj: Any) -> bool:
    """Whether ``obj`` looks like a Jaeger v1 span (``spanID`` spelled Jaeger's way)."""
    return type(obj) is dict and "spanID" in obj and "operationName" in obj


def is_jaeger_domain_span(obj: Any) -> bool:
    """Whether ``obj`` is a span of Jaeger's internal domain/proto JSON (camelCase ids)."""
    return (
        type(obj) is dict
        and "operationName" in obj
        and ("traceId" in obj or "spanId" in obj)
        and "spanID" not in obj
    )

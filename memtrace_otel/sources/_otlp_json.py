"""OTLP/JSON (and protobuf's JSON mapping, as Tempo writes it) -> :class:`SpanRecord`.

Decoded by hand, never with protobuf's ``json_format``: that reads OTLP/JSON's hex ids as base64
without complaint. Both dialects are accepted field by field: ids as hex or base64, enums as
numbers or names, int64 as strings or numbers, every ``AnyValue`` shape; unknown fields are
ignored. This is the hot path of the batch job, so the success path avoids work that only error
messages need (field paths are built while an error unwinds).
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from memtrace_otel.semconv import AttrValue, EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv.record import EMPTY_ATTRIBUTES, Attributes
from memtrace_otel.sources._common import (
    INVALID_RECORD,
    MAX_UINT64,
    SPAN_KIND_NAMES,
    Bad,
    OnError,
    finite_double,
    join_field,
    make_error,
    otlp_parent_id,
    otlp_span_id,
    otlp_trace_id,
    positional_constructor,
    short_repr,
    source_label,
    span_kind,
    status_code,
    time_nanos,
)

_new_span = positional_constructor(SpanRecord)
_new_event = positional_constructor(EventRecord)
_new_link = positional_constructor(LinkRecord)
_KIND_BY_NUMBER = SPAN_KIND_NAMES
_STATUS_BY_NUMBER = ("UNSET", "OK", "ERROR")
_ZERO_SPAN = "0" * 16


# --- AnyValue ----------------------------------------------------------------------------------
def _string(x: Any) -> AttrValue:
    if isinstance(x, str):
        return x
    raise Bad("stringValue", f"expected a string, got {short_repr(x)}")


def _bool(x: Any) -> AttrValue:
    if isinstance(x, bool):
        return x
    if x == "true" or x == "false":
        return bool(x == "true")
    raise Bad("boolValue", f"expected true or false, got {short_repr(x)}")


def _int(x: Any) -> AttrValue:
    if type(x) is int:
        return x
    if type(x) is str:
        text = x[1:] if x[:1] == "-" else x
        if text.isascii() and text.isdigit() and len(text) <= 20:
            return int(x)
    if type(x) is float and x.is_integer():
        return int(x)
    raise Bad("intValue", f"expected an int64, got {short_repr(x)}")


_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _double(x: Any) -> AttrValue:
    if type(x) is float:
        return finite_double(x, "doubleValue")
    if type(x) is int:
        return finite_double(float(x), "doubleValue")
    if type(x) is str:
        special = _SPECIAL_DOUBLES.get(x)
        if special is not None:
            return finite_double(special, "doubleValue")
        try:
            number = float(x)
        except ValueError:
            pass
        else:
            return finite_double(number, "doubleValue")
    raise Bad("doubleValue", f"expected a number, got {short_repr(x)}")


def _bytes(x: Any) -> AttrValue:
    if type(x) is str:
        text = x.replace("-", "+").replace("_", "/")
        try:
            return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            pass
    raise Bad("bytesValue", f"expected base64, got {short_repr(x)}")


def _array(x: Any) -> AttrValue:
    if type(x) is not dict:
        raise Bad("arrayValue", "expected an object with 'values'")
    values = x.get("values")
    if values is None:  # OTLP/JSON writes an empty array as {}
        return ()
    if type(values) is not list:
        raise Bad("arrayValue.values", "expected a list")
    texts = []
    for item in values:  # fast path: the contract's arrays are lists of ref strings
        text = item.get("stringValue") if item.__class__ is dict else None
        if text.__class__ is not str:
            break
        texts.append(text)
    else:
        return tuple(texts)
    out = []
    for i, item in enumerate(values):
        try:
            out.append(any_value(item))
        except Bad as bad:
            bad.field = join_field(f"arrayValue.values[{i}]", bad.field)
            raise
    return tuple(out)


def _kvlist(x: Any) -> AttrValue:
    if type(x) is not dict:
        raise Bad("kvlistValue", "expected an object with 'values'")
    values = x.get("values")
    if values is None:
        return EMPTY_ATTRIBUTES
    try:
        return attributes(values)
    except Bad as bad:
        bad.field = join_field("kvlistValue.values", bad.field)
        raise


_ANY_DECODERS: dict[str, Callable[[Any], AttrValue]] = {
    "stringValue": _string,
    "boolValue": _bool,
    "intValue": _int,
    "doubleValue": _double,
    "bytesValue": _bytes,
    "arrayValue": _array,
    "kvlistValue": _kvlist,
}


def any_value(value: Any) -> AttrValue:
    """One OTLP ``AnyValue`` as a plain value (``None`` for the empty value ``{}``)."""
    if type(value) is not dict:
        raise Bad("", f"expected an AnyValue object, got {short_repr(value)}")
    text = value.get("stringValue")
    if type(text) is str:
        return text
    for key, x in value.items():
        decode = _ANY_DECODERS.get(key)
        if decode is not None:
            return decode(x)
    return None


def _careful_attributes(kvs: Any) -> Attributes:
    """:func:`attributes` checking every field, to name the one that is wrong."""
    if kvs is None:
        return EMPTY_ATTRIBUTES
    if type(kvs) is not list:
        raise Bad("", f"expected a list of key-value pairs, got {short_repr(kvs)}")
    out: dict[str, AttrValue] = {}
    for i, kv in enumerate(kvs):
        if type(kv) is not dict:
            raise Bad(f"[{i}]", "expected a {key, value} object")
        key = kv.get("key")
        if type(key) is not str:
            raise Bad(f"[{i}].key", f"expected a string key, got {short_repr(key)}")
        value = kv.get("value")
        try:
            out[key] = None if value is None else any_value(value)
        except Bad as bad:
            bad.field = join_field(f"[{i}].value", bad.field)
            raise
    return MappingProxyType(out) if out else EMPTY_ATTRIBUTES


def attributes(kvs: Any) -> Attributes:
    """An OTLP ``KeyValue`` list as a read-only mapping (later duplicates win, as in the SDK).

    The loop is the loader's hottest code: it handles well-formed pairs with as few checks as
    it can, and hands anything unusual (a missing value, a wrong type) to the careful version,
    which decodes it or names the bad field.
    """
    if kvs.__class__ is not list or not kvs:
        return _careful_attributes(kvs)
    out: dict[str, AttrValue] = {}
    for kv in kvs:
        try:
            key = kv["key"]
            value = kv["value"]
            text = value.get("stringValue")
        except (KeyError, TypeError, AttributeError):
            return _careful_attributes(kvs)
        if key.__class__ is not str:
            return _careful_attributes(kvs)
        if text.__class__ is str:
            out[key] = text
        else:
            try:
                out[key] = any_value(value)
            except Bad:
                return _careful_attributes(kvs)
    return MappingProxyType(out)


def _field_attributes(kvs: Any, name: str) -> Attributes:
    try:
        return attributes(kvs)
    except Bad as bad:
        bad.field = join_field(name, bad.field)
        raise


def _text(value: Any, name: str) -> str:
    if value is None:
        return ""
    if type(value) is str:
        return value
    raise Bad(name, f"expected a string, got {short_repr(value)}")


def _nanos(value: Any, name: str) -> int:
    if value.__class__ is str and value.isdigit() and value.isascii() and len(value) < 20:
        return int(value)
    return time_nanos(value, name)


# Ids repeat (a trace id on every span of its trace, a span id as its children's parent):
# remember recent ones instead of validating them again. Cleared when full, so bounded.
_ID_CACHE: dict[str, str] = {}
_ID_CACHE_SIZE = 8192


def _cached_trace_id(value: Any, name: str) -> str:
    found = _ID_CACHE.get(value) if value.__class__ is str else None
    if found is None or len(found) != 32:
        found = otlp_trace_id(value, name)
        if len(_ID_CACHE) >= _ID_CACHE_SIZE:
            _ID_CACHE.clear()
        _ID_CACHE[value] = found
    return found


def _cached_span_id(value: Any, name: str) -> str:
    found = _ID_CACHE.get(value) if value.__class__ is str else None
    if found is None or len(found) != 16:
        found = otlp_span_id(value, name)
        if len(_ID_CACHE) >= _ID_CACHE_SIZE:
            _ID_CACHE.clear()
        _ID_CACHE[value] = found
    return found


# --- Spans -------------------------------------------------------------------------------------
def _careful_events(items: Any) -> tuple[EventRecord, ...]:
    if items.__class__ is not list:
        raise Bad("events", "expected a list")
    out = []
    for i, ev in enumerate(items):
        where = f"events[{i}]"
        if ev.__class__ is not dict:
            raise Bad(where, "expected an event object")
        kvs = ev.get("attributes")
        try:
            name = _text(ev.get("name"), "name")
            time = _nanos(ev.get("timeUnixNano"), "timeUnixNano")
            attrs = _field_attributes(kvs, "attributes") if kvs else EMPTY_ATTRIBUTES
        except Bad as bad:
            bad.field = join_field(where, bad.field)
            raise
        out.append(_new_event(name, time, attrs))
    return tuple(out)


def _events(items: Any) -> tuple[EventRecord, ...]:
    """Span events; anything unusual is handed to the careful version (see :func:`attributes`)."""
    if items.__class__ is not list:
        return _careful_events(items)
    out = []
    for ev in items:
        if ev.__class__ is not dict:
            return _careful_events(items)
        name = ev.get("name")
        time = ev.get("timeUnixNano")
        kvs = ev.get("attributes")
        if (
            name.__class__ is not str
            or time.__class__ is not str
            or not time.isdigit()
            or not time.isascii()
        ):
            return _careful_events(items)
        try:
            attrs = attributes(kvs) if kvs else EMPTY_ATTRIBUTES
        except Bad:
            return _careful_events(items)
        out.append(_new_event(name, int(time), attrs))
    return tuple(out)


def _careful_links(items: Any) -> tuple[LinkRecord, ...]:
    if items.__class__ is not list:
        raise Bad("links", "expected a list")
    out = []
    for i, li in enumerate(items):
        where = f"links[{i}]"
        if li.__class__ is not dict:
            raise Bad(where, "expected a link object")
        kvs = li.get("attributes")
        try:
            link = _new_link(
                otlp_trace_id(li.get("traceId"), "traceId"),
                otlp_span_id(li.get("spanId"), "spanId"),
                _field_attributes(kvs, "attributes") if kvs else EMPTY_ATTRIBUTES,
            )
        except Bad as bad:
            bad.field = join_field(where, bad.field)
            raise
        out.append(link)
    return tuple(out)


def _links(items: Any) -> tuple[LinkRecord, ...]:
    """Span links; anything unusual is handed to the careful version (see :func:`attributes`)."""
    if items.__class__ is not list:
        return _careful_links(items)
    out = []
    cached = _ID_CACHE.get
    try:
        for li in items:
            get = li.get
            trace, span, kvs = get("traceId"), get("spanId"), get("attributes")
            # The id caches inlined: a link names a span seen already, so these mostly hit.
            trace_id = cached(trace) if trace.__class__ is str else None
            if trace_id is None or len(trace_id) != 32:
                trace_id = _cached_trace_id(trace, "traceId")
            span_id = cached(span) if span.__class__ is str else None
            if span_id is None or len(span_id) != 16:
                span_id = _cached_span_id(span, "spanId")
            out.append(_new_link(trace_id, span_id, attributes(kvs) if kvs else EMPTY_ATTRIBUTES))
    except (Bad, AttributeError, TypeError):
        return _careful_links(items)
    return tuple(out)


def decode_span(
    sp: Any,
    resource: Attributes,
    scope_name: str,
    scope_version: str,
    scope_attrs: Attributes,
    source: str,
) -> SpanRecord:
    """One OTLP/JSON ``Span`` object with its resource and scope as a record."""
    if sp.__class__ is not dict:
        raise Bad("", f"expected a span object, got {short_repr(sp)}")
    get = sp.get
    trace_id = _cached_trace_id(get("traceId"), "traceId")
    span_id = _cached_span_id(get("spanId"), "spanId")
    parent = get("parentSpanId")
    if parent:
        parent_id = _ID_CACHE.get(parent) if parent.__class__ is str else None
        if parent_id is None or len(parent_id) != 16:
            parent_id = otlp_parent_id(parent, "parentSpanId")
    else:
        parent_id = None
    name = get("name", "")
    if name.__class__ is not str:
        raise Bad("name", f"expected a string, got {short_repr(name)}")
    kind = get("kind")
    kind_name = (
        _KIND_BY_NUMBER[kind]
        if kind.__class__ is int and 0 <= kind < 6
        else span_kind(kind, "kind")
    )
    kvs = get("attributes")
    if kvs:
        try:
            attrs = attributes(kvs)
        except Bad as bad:
            bad.field = join_field("attributes", bad.field)
            raise
    else:
        attrs = EMPTY_ATTRIBUTES
    events = get("events")
    links = get("links")
    status = get("status")
    code = "UNSET"
    message = ""
    if status:
        if status.__class__ is not dict:
            raise Bad("status", "expected an object")
        number = status.get("code")
        code = (
            _STATUS_BY_NUMBER[number]
            if number.__class__ is int and 0 <= number < 3
            else status_code(number, "status.code")
        )
        message = _text(status.get("message"), "status.message")
    trace_state = get("traceState")
    start = get("startTimeUnixNano")
    if start.__class__ is str and start.isdigit() and start.isascii():
        start = int(start)
    end = get("endTimeUnixNano")
    if end.__class__ is str and end.isdigit() and end.isascii():
        end = int(end)
    return _new_span(
        trace_id,
        span_id,
        name,
        parent_id,
        kind_name,
        start
        if start.__class__ is int and 0 <= start <= MAX_UINT64
        else _nanos(start, "startTimeUnixNano"),
        end if end.__class__ is int and 0 <= end <= MAX_UINT64 else _nanos(end, "endTimeUnixNano"),
        code,
        message,
        attrs,
        _events(events) if events else (),
        _links(links) if links else (),
        resource,
        scope_name,
        scope_version,
        scope_attrs,
        _text(trace_state, "traceState") if trace_state else "",
        source,
    )


_last_resource: tuple[Any, Attributes] = ([], EMPTY_ATTRIBUTES)


def _resource_attributes(resource: dict[str, Any]) -> Attributes:
    """A resource's attributes, decoded once for a run of lines that repeat them (an exporter
    writes its one resource on every line): the last decoding is reused when the raw pairs are
    equal, so the records of a file share one mapping instead of holding a copy each."""
    global _last_resource
    kvs = resource.get("attributes")
    raw, decoded = _last_resource
    if kvs.__class__ is list and kvs == raw:
        return decoded
    decoded = _field_attributes(kvs, "resource.attributes")
    if kvs.__class__ is list and all(_plain_string_pair(kv) for kv in kvs):
        # Only plain string pairs: equal raw pairs then decode alike (1 == True == 1.0 would
        # hide a bad intValue or boolValue behind a good one).
        _last_resource = (kvs, decoded)
    return decoded


def _plain_string_pair(kv: Any) -> bool:
    value = kv.get("value") if kv.__class__ is dict else None
    return (
        value.__class__ is dict
        and len(kv) == 2
        and len(value) == 1
        and kv.get("key").__class__ is str
        and value.get("stringValue").__class__ is str
    )


def _list_field(obj: dict[str, Any], *names: str) -> tuple[str, list[Any]]:
    """The first of ``names`` present in ``obj`` (OTLP renamed some fields over time)."""
    for name in names:
        value = obj.get(name)
        if value is not None:
            if type(value) is not list:
                raise Bad(name, f"expected a list, got {short_repr(value)}")
            return name, value
    return names[0], []


def decode_resource_spans(
    blocks: Any,
    *,
    path: str,
    line: int | None,
    on_error: OnError,
    prefix: str = "resourceSpans",
) -> list[SpanRecord]:
    """The ``resourceSpans`` (or Tempo's ``batches``) list of one request as records.

    A bad span is reported to ``on_error`` and skipped; a bad resource or scope skips its spans
    with one report.
    """
    records: list[SpanRecord] = []
    if type(blocks) is not list:
        on_error(
            INVALID_RECORD,
            make_error(
                f"expected a list, got {short_repr(blocks)}", path=path, line=line, field=prefix
            ),
        )
        return records
    source = source_label(path, line)
    # Field paths ("resourceSpans[0].scopeSpans[1]") are built only when an error names one.
    for ri, rs in enumerate(blocks):
        try:
            if rs.__class__ is not dict:
                raise Bad("", "expected a ResourceSpans object")
            resource = rs.get("resource")
            if resource is not None and resource.__class__ is not dict:
                raise Bad("resource", "expected an object")
            resource_attrs = _resource_attributes(resource) if resource else EMPTY_ATTRIBUTES
            scopes_name, scope_blocks = _list_field(rs, "scopeSpans", "instrumentationLibrarySpans")
        except Bad as bad:
            on_error(
                bad.kind,
                make_error(
                    bad.reason, path=path, line=line, field=join_field(f"{prefix}[{ri}]", bad.field)
                ),
            )
            continue
        for si, ss in enumerate(scope_blocks):
            try:
                scope_name, scope_version, scope_attrs, spans = _scope(ss)
            except Bad as bad:
                swhere = f"{prefix}[{ri}].{scopes_name}[{si}]"
                on_error(
                    bad.kind,
                    make_error(
                        bad.reason, path=path, line=line, field=join_field(swhere, bad.field)
                    ),
                )
                continue
            append = records.append
            for pi, sp in enumerate(spans):
                try:
                    append(
                        decode_span(
                            sp, resource_attrs, scope_name, scope_version, scope_attrs, source
                        )
                    )
                except Bad as bad:
                    swhere = f"{prefix}[{ri}].{scopes_name}[{si}]"
                    on_error(
                        bad.kind,
                        make_error(
                            bad.reason,
                            path=path,
                            line=line,
                            field=join_field(f"{swhere}.spans[{pi}]", bad.field),
                        ),
                    )
    return records


def _scope(ss: Any) -> tuple[str, str, Attributes, list[Any]]:
    """A ``ScopeSpans`` object's scope name, version and attributes, and its spans."""
    if ss.__class__ is not dict:
        raise Bad("", "expected a ScopeSpans object")
    scope = ss.get("scope")
    if scope is None:
        scope = ss.get("instrumentationLibrary")
    if scope is None:
        scope = {}
    if scope.__class__ is not dict:
        raise Bad("scope", "expected an object")
    scope_name = _text(scope.get("name"), "scope.name")
    scope_version = _text(scope.get("version"), "scope.version")
    scope_kvs = scope.get("attributes")
    scope_attrs = (
        _field_attributes(scope_kvs, "scope.attributes") if scope_kvs else EMPTY_ATTRIBUTES
    )
    spans = ss.get("spans")
    if spans is None:
        return scope_name, scope_version, scope_attrs, []
    if spans.__class__ is not list:
        raise Bad("spans", f"expected a list, got {short_repr(spans)}")
    return scope_name, scope_version, scope_attrs, spans

"""The op fields of the trace contract, checked as records leave the decoders.

A span that says it is an op (``memtrace.op.kind`` or ``memtrace.op.name``) but whose kind is
not one of the contract's, or whose ``memtrace.op.inputs`` / ``outputs`` is not a list of
``<id>@<version>`` refs, would be folded into a different graph than the one its app ran: its
reads and writes lost or misread, and the verdicts with them. Such a span is skipped and counted
(``invalid_op``), naming the field, so the run says its verdicts rest on less than the traces.

A list sent as its JSON text (``'["a@1", "b@2"]'``, as Jaeger v1 and Zipkin flatten arrays) is
read as the list it spells.
"""

from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType
from typing import Any

from memtrace_otel.semconv import SpanRecord, is_ref
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv.values import OpKind
from memtrace_otel.sources._memtracebench import OTHER_KIND

INVALID_OP = "invalid_op"
"""Kind of skip (``SourceStats.skipped_by_kind``) of a span that breaks the op contract."""
KINDS = frozenset({*(kind.value for kind in OpKind), OTHER_KIND})
"""The ten kinds, and ``other`` (MemTraceBench's unlabelled steps)."""
_REF_FIELDS = (A.MEMTRACE_OP_INPUTS, A.MEMTRACE_OP_OUTPUTS)

Problem = tuple[str, str]
"""``(field, reason)``: why a span is skipped."""


def check_op(record: SpanRecord) -> SpanRecord | Problem:
    """``record`` if it is not an op or keeps the op contract (refs sent as JSON text read as
    a list), else the field that is wrong and why.

    >>> from memtrace_otel.semconv import SpanRecord
    >>> def op(**attrs):
    ...     return SpanRecord("0" * 31 + "1", "00000000000000a1", "op", attributes=attrs)
    >>> check_op(op(**{A.MEMTRACE_OP_KIND: "teleport"}))
    ('memtrace.op.kind', "unknown op kind 'teleport'")
    >>> read = check_op(op(**{A.MEMTRACE_OP_KIND: "filter", A.MEMTRACE_OP_INPUTS: '["a@1", "b@2"]'}))
    >>> read.attributes[A.MEMTRACE_OP_INPUTS]
    ('a@1', 'b@2')
    >>> check_op(op(**{A.MEMTRACE_OP_KIND: "create", A.MEMTRACE_OP_OUTPUTS: "a@1,b@2"}))
    ('memtrace.op.outputs', "a string, not a list of refs (string[]): 'a@1,b@2'")
    """
    attrs = record.attributes
    kind = attrs.get(A.MEMTRACE_OP_KIND)
    if kind is None and A.MEMTRACE_OP_NAME not in attrs:
        return record  # not an op
    if kind is not None and (type(kind) is not str or kind not in KINDS):
        return A.MEMTRACE_OP_KIND, f"unknown op kind {kind!r}"
    read: dict[str, Any] | None = None
    for field in _REF_FIELDS:
        value = attrs.get(field)
        if value is None:
            continue
        if type(value) is str:
            value = _json_refs(value)
            if value is None:
                return field, f"a string, not a list of refs (string[]): {_short(attrs[field])}"
            read = read or {}
            read[field] = value
        elif not isinstance(value, tuple | list):
            return field, f"not a list of refs (string[]): {_short(value)}"
        for item in value:
            if type(item) is str:
                # is_ref, inlined for the common case: this runs for every ref of every span.
                ident, sep, version = item.rpartition("@")
                if sep and ident and version.isdigit() and version.isascii() and version.strip("0"):
                    continue
            if type(item) is not str or not is_ref(item):
                return field, f"{_short(item)} is not a ref '<id>@<version>' (version >= 1)"
    if read is None:
        return record
    return dataclasses.replace(record, attributes=MappingProxyType({**attrs, **read}))


def _json_refs(text: str) -> tuple[str, ...] | None:
    """The list of strings ``text`` spells as JSON, or ``None``."""
    if not text.lstrip().startswith("["):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if type(value) is list and all(type(item) is str for item in value):
        return tuple(value)
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

"""The neutral span record: what every span becomes before the graph sees it.

The SDK's ``ReadableSpan`` (in the live processor) and every loader (OTLP/JSON, OTLP proto, Jaeger,
Tempo, MemTraceBench) convert into :class:`SpanRecord`; nothing downstream sees a wire or SDK type.
Ids are lowercase hex (32 chars for traces, 16 for spans), times integer nanoseconds since the
epoch, attribute values plain Python scalars, tuples (arrays) or read-only mappings (kvlists).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

AttrValue: TypeAlias = (
    "str | bool | int | float | bytes | tuple[AttrValue, ...] | Mapping[str, AttrValue] | None"
)
Attributes: TypeAlias = Mapping[str, AttrValue]

EMPTY_ATTRIBUTES: Attributes = MappingProxyType({})

SPAN_KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
"""Span kind names, indexed by their OTLP enum number."""
STATUS_CODES = ("UNSET", "OK", "ERROR")
"""Status code names, indexed by their OTLP enum number."""


def _empty() -> Attributes:
    return EMPTY_ATTRIBUTES


def frozen_attributes(attributes: Mapping[str, Any] | None) -> Attributes:
    """A read-only view of ``attributes`` (lists become tuples); the empty mapping for ``None``."""
    if not attributes:
        return EMPTY_ATTRIBUTES
    return MappingProxyType({k: _freeze(v) for k, v in attributes.items()})


_SCALARS = frozenset([str, bool, int, float, bytes, type(None)])


def _freeze(value: Any) -> AttrValue:
    if type(value) in _SCALARS:  # the common case, without the slow ABC check below
        return value  # type: ignore[no-any-return]
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping) and not isinstance(value, MappingProxyType):
        return MappingProxyType({str(k): _freeze(v) for k, v in value.items()})
    return value  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A span event."""

    name: str
    time_unix_nano: int = 0
    attributes: Attributes = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class LinkRecord:
    """A span link to another span, possibly in another trace."""

    trace_id: str
    span_id: str
    attributes: Attributes = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span, independent of where it came from.

    ``source`` says where a loader found it (``file:line``), for error messages; it is not part
    of the span's identity and is ignored by equality.
    """

    trace_id: str
    span_id: str
    name: str
    parent_span_id: str | None = None
    kind: str = "INTERNAL"
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    status_code: str = "UNSET"
    status_message: str = ""
    attributes: Attributes = field(default_factory=_empty)
    events: tuple[EventRecord, ...] = ()
    links: tuple[LinkRecord, ...] = ()
    resource_attributes: Attributes = field(default_factory=_empty)
    scope_name: str = ""
    scope_version: str = ""
    scope_attributes: Attributes = field(default_factory=_empty)
    trace_state: str = ""
    source: str = field(default="", compare=False)

"""Size caps on decoded attribute values, so one huge value cannot fill the batch job's memory.

The JSON parser has already built the value when we see it, so the cap does not bound the peak
while one line is decoded; it bounds what the records *keep*: without it every record holding a
1 GB string keeps 1 GB alive until the graph is built. The cap is applied once, as records leave
the decoders (:meth:`Source.records`), so every format (OTLP JSON and protobuf, Jaeger,
MemTraceBench) is cut the same way and the decoders' hot loops stay untouched.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memtrace_otel.semconv import AttrValue, EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv.record import Attributes
from memtrace_otel.sources._common import SourceStats

DEFAULT_MAX_ATTRIBUTE_BYTES = 1 << 20
"""Longest string (UTF-8 bytes) or bytes attribute value a loader keeps: 1 MiB."""
DEFAULT_MAX_ARRAY_ITEMS = 10_000
"""Most elements an array attribute value keeps."""


def _positive(name: str, value: int) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ValueLimits:
    """The per-value caps of a source.

    Attributes:
        max_bytes: longest string (in UTF-8 bytes) or bytes value kept; longer ones are cut.
        max_items: most elements of an array value kept.

    >>> limits = ValueLimits(max_bytes=4, max_items=2)
    >>> cap_value("héllo", limits), cap_value((1, 2, 3), limits)
    (('hél', 1), ((1, 2), 1))
    """

    max_bytes: int = DEFAULT_MAX_ATTRIBUTE_BYTES
    max_items: int = DEFAULT_MAX_ARRAY_ITEMS

    def __post_init__(self) -> None:
        _positive("max_attribute_bytes", self.max_bytes)
        _positive("max_array_items", self.max_items)

    @classmethod
    def resolve(
        cls, max_attribute_bytes: int | None = None, max_array_items: int | None = None
    ) -> ValueLimits:
        """The caps from the arguments, else ``MEMTRACE_MAX_ATTRIBUTE_BYTES``, else defaults.

        Raises:
            ValueError: a cap (argument or environment variable) is not a positive integer.

        >>> ValueLimits.resolve(100).max_bytes
        100
        """
        if max_attribute_bytes is None:
            text = os.environ.get(A.ENV_MEMTRACE_MAX_ATTRIBUTE_BYTES, "").strip()
            if text:
                max_attribute_bytes = int(text) if text.isdigit() and text.isascii() else 0
                if max_attribute_bytes < 1:
                    raise ValueError(
                        f"{A.ENV_MEMTRACE_MAX_ATTRIBUTE_BYTES} must be a positive integer, "
                        f"got {text!r}"
                    )
            else:
                max_attribute_bytes = DEFAULT_MAX_ATTRIBUTE_BYTES
        return cls(
            max_attribute_bytes,
            DEFAULT_MAX_ARRAY_ITEMS if max_array_items is None else max_array_items,
        )


def cut_text(text: str, max_bytes: int) -> str | None:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes on a character boundary, or ``None``.

    ``None`` means it already fits. Lone surrogates (valid in JSON text) count as 3 bytes.

    >>> cut_text("abc", 3) is None, cut_text("abcd", 3), cut_text("aé", 2)
    (True, 'abc', 'a')
    """
    if len(text) <= max_bytes and text.isascii():
        return None
    head = text[:max_bytes]  # every character is at least one byte: the cut lies inside
    if head.isascii():
        return head if len(head) < len(text) else None
    encoded = head.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes and len(head) == len(text):
        return None
    encoded = encoded[:max_bytes]
    for drop in range(4):  # a cut inside a character leaves up to 3 bytes of it
        try:
            return encoded[: len(encoded) - drop].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            continue
    return ""  # unreachable for valid UTF-8; an empty value is still a cut one


def cap_value(value: Any, limits: ValueLimits) -> tuple[AttrValue, int]:
    """``value`` within ``limits``, and how many values (strings, bytes, arrays) were cut."""
    cls = value.__class__
    if cls is str:
        # Fast exit: a string of at most max_bytes / 4 characters fits whatever it holds.
        if len(value) * 4 <= limits.max_bytes:
            return value, 0
        cut = cut_text(value, limits.max_bytes)
        return (value, 0) if cut is None else (cut, 1)
    if cls is bytes:
        if len(value) <= limits.max_bytes:
            return value, 0
        return value[: limits.max_bytes], 1
    if cls is tuple:
        count = 0
        if len(value) > limits.max_items:
            value = value[: limits.max_items]
            count = 1
        changed: list[Any] | None = None
        for i, item in enumerate(value):
            new, n = cap_value(item, limits)
            if n:
                if changed is None:
                    changed = list(value)
                changed[i] = new
                count += n
        return (tuple(changed) if changed is not None else value), count
    if isinstance(value, Mapping):  # a kvlist value
        return cap_attributes(value, limits)
    return value, 0


def _fits(attrs: Attributes, quarter: int, max_items: int) -> bool:
    """True when every value of ``attrs`` surely fits: the cheap check run on every record.

    A string of at most ``quarter`` (max_bytes / 4) characters fits whatever it holds; arrays of
    short strings (the contract's ref lists) are checked through one ``join``. Anything else
    (long strings, bytes, other arrays, kvlists) goes to the exact check in :func:`cap_value`.
    """
    value: Any  # checked by exact class below (faster than isinstance, opaque to mypy)
    for value in attrs.values():
        cls = value.__class__
        if cls is str:
            if len(value) > quarter:
                return False
        elif cls is tuple:
            if len(value) > max_items:
                return False
            try:
                if len("".join(value)) > quarter:
                    return False
            except TypeError:  # not all strings
                return False
        elif cls is not bool and cls is not int and cls is not float and value is not None:
            return False
    return True


def cap_attributes(attrs: Attributes, limits: ValueLimits) -> tuple[Attributes, int]:
    """``attrs`` with every value within ``limits`` (the same object when nothing was cut)."""
    if _fits(attrs, limits.max_bytes >> 2, limits.max_items):
        return attrs, 0
    out: dict[str, AttrValue] | None = None
    count = 0
    for key, value in attrs.items():
        new, n = cap_value(value, limits)
        if n:
            if out is None:
                out = dict(attrs)
            out[key] = new
            count += n
    return (attrs if out is None else MappingProxyType(out)), count


def _cap_events(
    events: tuple[EventRecord, ...], limits: ValueLimits
) -> tuple[tuple[EventRecord, ...], int]:
    quarter, max_items = limits.max_bytes >> 2, limits.max_items
    changed: list[EventRecord] | None = None
    total = 0
    for i, event in enumerate(events):
        if _fits(event.attributes, quarter, max_items):
            continue
        attrs, n = cap_attributes(event.attributes, limits)
        if n:
            if changed is None:
                changed = list(events)
            changed[i] = EventRecord(event.name, event.time_unix_nano, attrs)
            total += n
    return (events if changed is None else tuple(changed)), total


def _cap_links(
    links: tuple[LinkRecord, ...], limits: ValueLimits
) -> tuple[tuple[LinkRecord, ...], int]:
    quarter, max_items = limits.max_bytes >> 2, limits.max_items
    changed: list[LinkRecord] | None = None
    total = 0
    for i, link in enumerate(links):
        if _fits(link.attributes, quarter, max_items):
            continue
        attrs, n = cap_attributes(link.attributes, limits)
        if n:
            if changed is None:
                changed = list(links)
            changed[i] = LinkRecord(link.trace_id, link.span_id, attrs)
            total += n
    return (links if changed is None else tuple(changed)), total


class RecordCapper:
    """Caps the records of one source, counting each cut value once.

    Records of one resource share its attribute mapping; the last one is remembered so a huge
    resource value is cut (and counted) once, and the records keep sharing the cut copy.

    Args:
        limits: the caps.
        stats: where :meth:`cap_all` counts the cut values (``truncated_values``).
    """

    __slots__ = ("_last_resource", "limits", "stats", "trigger")

    def __init__(self, limits: ValueLimits, stats: SourceStats | None = None) -> None:
        self.limits = limits
        self.stats = stats
        # Input of at most this many bytes cannot hold a value over a cap: a string or bytes
        # value takes at least its UTF-8 (or raw) length in JSON or protobuf, an array at least
        # one byte per element. Readers that know the size of what they decoded skip the check.
        self.trigger = min(limits.max_bytes, limits.max_items)
        self._last_resource: tuple[Attributes, Attributes] | None = None

    def cap_all(self, records: list[SpanRecord], size: int) -> list[SpanRecord]:
        """``records`` decoded from ``size`` bytes of input, within the limits and counted."""
        if size <= self.trigger:
            return records
        out = []
        cut = 0
        for record in records:
            record, n = self.cap(record)
            cut += n
            out.append(record)
        if cut and self.stats is not None:
            self.stats.truncated_values += cut
        return out

    def cap(self, record: SpanRecord) -> tuple[SpanRecord, int]:
        """``record`` within the limits, and how many values were cut."""
        limits = self.limits
        attrs, total = cap_attributes(record.attributes, limits)
        resource = record.resource_attributes
        last = self._last_resource
        if last is not None and last[0] is resource:
            new_resource = last[1]
        else:
            new_resource, n = cap_attributes(resource, limits)
            total += n
            self._last_resource = (resource, new_resource)
        events, n = _cap_events(record.events, limits) if record.events else ((), 0)
        total += n
        links, n = _cap_links(record.links, limits) if record.links else ((), 0)
        total += n
        if (
            attrs is record.attributes
            and new_resource is resource
            and events is record.events
            and links is record.links
        ):
            return record, total
        capped = dataclasses.replace(
            record, attributes=attrs, resource_attributes=new_resource, events=events, links=links
        )
        return capped, total

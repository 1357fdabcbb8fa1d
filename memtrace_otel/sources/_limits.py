"""Size caps, so one huge input cannot fill the batch job's memory.

Two kinds of cap, at two places:

- **Read caps** (:class:`ReadLimits`) bound what is read before it is parsed: a JSON Lines line
  (``max_line_bytes``) and a whole JSON document (``max_document_bytes``). A line over the cap
  is skipped in bounded chunks, never held (:class:`LineReader`), so the peak while a file is
  read no longer scales with its longest line.
- **Value caps** (:class:`ValueLimits`) bound what the records *keep*: without them every
  record holding a 1 MB string keeps it alive until the graph is built. They are applied once,
  as records leave the decoders (:meth:`Source.records`), so every format (OTLP JSON and
  protobuf, Jaeger, MemTraceBench, live backends) is cut the same way and the decoders' hot
  loops stay untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from memtrace_otel._settings import check, positive_int, resolve
from memtrace_otel.semconv import AttrValue, EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import env as E
from memtrace_otel.semconv.record import Attributes
from memtrace_otel.sources._common import SourceStats

DEFAULT_MAX_ATTRIBUTE_BYTES = 1 << 20
"""Longest string (UTF-8 bytes) or bytes attribute value a loader keeps: 1 MiB."""
DEFAULT_MAX_ARRAY_ITEMS = 10_000
"""Most elements an array attribute value keeps."""
DEFAULT_MAX_LINE_BYTES = 64 << 20
"""Longest JSON Lines line (bytes, newline excluded) the file loaders read: 64 MiB.

Three times the largest request the Collector's OTLP/HTTP receiver accepts by default (20 MiB,
its ``max_request_body_size``), and its file exporter writes one request per line; a line of
that size parses in well under a second to a few hundred MB (docs/sources.md)."""
DEFAULT_MAX_DOCUMENT_BYTES = 256 << 20
"""Largest whole JSON document (bytes) the file loaders read: 256 MiB, the live sources'
``max_response_bytes``, so a saved API response is readable wherever the API call was."""
DEFAULT_MAX_DECOMPRESSED_BYTES = 4 << 30
"""Most bytes the file loaders decompress from one compressed file: 4 GiB, all layers counted
(a gzip inside a gzip counts both outputs). A Collector file rotated at 100 MB and compressed
~10 x holds about 1 GB; a decompression bomb (a few hundred KB that expand to terabytes) is
stopped here, after a few seconds, instead of running for hours."""
DEFAULT_MAX_COMPRESSION_RATIO = 1000
"""Most bytes decompressed per byte of a compressed file: 1000, about deflate's own limit
(1032:1), so any one gzip layer passes; OTLP JSON compresses 10-20 x, repetitive test data a
few hundred x. Files that small that 1000 x is under :data:`DECOMPRESSED_FLOOR` get the floor.
A 215 KB zstd bomb of blank lines is stopped after 215 MB (about a minute of reading) instead of
hours."""
DECOMPRESSED_FLOOR = 16 << 20
"""Bytes any compressed file may decompress to, whatever its size (the ratio cap's floor)."""
DEFAULT_MAX_RESPONSE_BYTES = 256 << 20
"""Largest HTTP response body (bytes) the live backends' client reads: 256 MiB."""

_SKIP_CHUNK = 1 << 20
"""Bytes read at a time while skipping an over-long line (the most it ever holds of one)."""


def _count(value: object) -> int:
    # A cap given in code is the number itself, never its text (only variables are parsed).
    if type(value) is not int:
        raise ValueError("expected a positive integer")
    return positive_int(value)


def _positive(name: str, value: int) -> int:
    return check(name, value, _count)


def resolve_cap(name: str, value: int | None, env: str, default: int) -> int:
    """A size cap: ``value`` if given, else the environment variable ``env``, else ``default``.

    Raises:
        ValueError: the value (argument or environment variable) is not a positive integer.

    >>> resolve_cap("max_line_bytes", None, "MEMTRACE_NO_SUCH_VARIABLE", 64)
    64
    >>> resolve_cap("max_line_bytes", 0, "MEMTRACE_NO_SUCH_VARIABLE", 64)
    Traceback (most recent call last):
    ValueError: invalid max_line_bytes 0: expected a positive integer
    """
    if value is not None:
        return _positive(name, value)
    # Offline: a bad cap in the environment stops the job before it reads anything.
    return resolve(name, None, env, default, positive_int, bad_env="raise")


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """The read caps of a file source.

    Attributes:
        max_line_bytes: longest JSON Lines line (or length-prefixed record, after
            decompression) read; a longer one is skipped unread and counted as
            ``line_too_long``.
        max_document_bytes: largest whole JSON document read; a larger file is skipped and
            counted as ``document_too_large``.
        max_decompressed_bytes: most bytes decompressed from one gzip or zstd file, every
            layer counted; the rest of the file is skipped and counted as
            ``decompressed_too_large`` (what was read before is kept).
        max_compression_ratio: most bytes decompressed per byte of the compressed file (but
            at least :data:`DECOMPRESSED_FLOOR`), counted the same way; the smaller of the two
            caps applies.

    >>> ReadLimits(max_line_bytes=10).max_document_bytes == DEFAULT_MAX_DOCUMENT_BYTES
    True
    """

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    max_compression_ratio: int = DEFAULT_MAX_COMPRESSION_RATIO

    def __post_init__(self) -> None:
        _positive("max_line_bytes", self.max_line_bytes)
        _positive("max_document_bytes", self.max_document_bytes)
        _positive("max_decompressed_bytes", self.max_decompressed_bytes)
        _positive("max_compression_ratio", self.max_compression_ratio)

    def decompression_budget(self, compressed_size: int | None) -> int:
        """The bytes a compressed file of ``compressed_size`` bytes (``None``: unknown) may
        decompress to, all layers counted.

        >>> limits = ReadLimits(max_decompressed_bytes=1 << 30, max_compression_ratio=100)
        >>> limits.decompression_budget(2 << 20) == 200 << 20, limits.decompression_budget(10)
        (True, 16777216)
        >>> limits.decompression_budget(None) == 1 << 30
        True
        """
        if compressed_size is None:
            return self.max_decompressed_bytes
        by_ratio = max(DECOMPRESSED_FLOOR, compressed_size * self.max_compression_ratio)
        return min(self.max_decompressed_bytes, by_ratio)

    @classmethod
    def resolve(
        cls,
        max_line_bytes: int | None = None,
        max_document_bytes: int | None = None,
        max_decompressed_bytes: int | None = None,
        max_compression_ratio: int | None = None,
    ) -> ReadLimits:
        """The caps from the arguments, else ``MEMTRACE_MAX_LINE_BYTES`` /
        ``MEMTRACE_MAX_DOCUMENT_BYTES`` / ``MEMTRACE_MAX_DECOMPRESSED_BYTES`` /
        ``MEMTRACE_MAX_COMPRESSION_RATIO``, else the defaults.

        Raises:
            ValueError: a cap (argument or environment variable) is not a positive integer.
        """
        return cls(
            resolve_cap(
                "max_line_bytes",
                max_line_bytes,
                E.ENV_MEMTRACE_MAX_LINE_BYTES,
                DEFAULT_MAX_LINE_BYTES,
            ),
            resolve_cap(
                "max_document_bytes",
                max_document_bytes,
                E.ENV_MEMTRACE_MAX_DOCUMENT_BYTES,
                DEFAULT_MAX_DOCUMENT_BYTES,
            ),
            resolve_cap(
                "max_decompressed_bytes",
                max_decompressed_bytes,
                E.ENV_MEMTRACE_MAX_DECOMPRESSED_BYTES,
                DEFAULT_MAX_DECOMPRESSED_BYTES,
            ),
            resolve_cap(
                "max_compression_ratio",
                max_compression_ratio,
                E.ENV_MEMTRACE_MAX_COMPRESSION_RATIO,
                DEFAULT_MAX_COMPRESSION_RATIO,
            ),
        )


class LineSource(Protocol):
    """A binary stream with a size-limited ``readline`` (files, ``BufferedReader``, ``BytesIO``)."""

    def readline(self, size: int = -1, /) -> bytes: ...


class LineReader:
    """The lines of a binary stream, none longer than ``max_bytes`` ever held in memory.

    Iterating yields each line as ``bytes`` (with its newline). A line longer than ``max_bytes``
    (newline excluded) is read and dropped in 1 MiB chunks up to its newline, and yielded as
    ``b""``: a real line is never empty (it has at least its newline, or one byte at the end
    of the stream). :attr:`skipped_size` then holds its length in bytes, newline included, so
    callers can report it (and keep byte offsets right).

    Args:
        stream: what to read.
        max_bytes: the longest line kept.

    >>> import io
    >>> reader = LineReader(io.BytesIO(b"short\\n" + b"x" * 10 + b"\\nend"), 8)
    >>> [(line, reader.skipped_size) for line in reader]
    [(b'short\\n', 0), (b'', 11), (b'end', 11)]
    """

    __slots__ = ("_limit", "_readline", "skipped_size")

    def __init__(self, stream: LineSource, max_bytes: int) -> None:
        self._readline = stream.readline
        self._limit = _positive("max_line_bytes", max_bytes) + 1
        self.skipped_size = 0

    def __iter__(self) -> Iterator[bytes]:
        readline, limit = self._readline, self._limit
        while True:
            raw = readline(limit)
            if len(raw) < limit or raw[-1] == 10:  # a whole line (b"\n" is 10), or the end
                if not raw:
                    return
                yield raw
                continue
            size = len(raw)
            del raw  # hold no more of it than one chunk from here on
            while True:
                chunk = readline(_SKIP_CHUNK)
                size += len(chunk)
                if not chunk or chunk[-1] == 10:
                    break
            self.skipped_size = size
            yield b""


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
        return cls(
            resolve_cap(
                "max_attribute_bytes",
                max_attribute_bytes,
                E.ENV_MEMTRACE_MAX_ATTRIBUTE_BYTES,
                DEFAULT_MAX_ATTRIBUTE_BYTES,
            ),
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


_Item = TypeVar("_Item", EventRecord, LinkRecord)


def _cap_items(
    items: tuple[_Item, ...],
    limits: ValueLimits,
    rebuild: Callable[[_Item, Attributes], _Item],
) -> tuple[tuple[_Item, ...], int]:
    """Events or links with their attributes within ``limits`` (the same tuple when none is cut)."""
    quarter, max_items = limits.max_bytes >> 2, limits.max_items
    changed: list[_Item] | None = None
    total = 0
    for i, item in enumerate(items):
        if _fits(item.attributes, quarter, max_items):
            continue
        attrs, n = cap_attributes(item.attributes, limits)
        if n:
            if changed is None:
                changed = list(items)
            changed[i] = rebuild(item, attrs)
            total += n
    return (items if changed is None else tuple(changed)), total


def _cap_events(
    events: tuple[EventRecord, ...], limits: ValueLimits
) -> tuple[tuple[EventRecord, ...], int]:
    return _cap_items(events, limits, lambda e, a: EventRecord(e.name, e.time_unix_nano, a))


def _cap_links(
    links: tuple[LinkRecord, ...], limits: ValueLimits
) -> tuple[tuple[LinkRecord, ...], int]:
    return _cap_items(links, limits, lambda k, a: LinkRecord(k.trace_id, k.span_id, a))


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

"""The :class:`Source` interface, file sources and duplicate detection."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from memtrace_otel.errors import DecodeError
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.sources._common import (
    DUPLICATE_SPAN,
    NOT_A_REGULAR_FILE,
    OnError,
    SourceStats,
    make_error,
    policy,
)
from memtrace_otel.sources._contract import INVALID_OP, check_op
from memtrace_otel.sources._documents import BenchSink
from memtrace_otel.sources._files import expand_paths, read_file
from memtrace_otel.sources._limits import ReadLimits, RecordCapper, ValueLimits
from memtrace_otel.sources._memtracebench import BenchCase, BenchLabel
from memtrace_otel.sources._outcomes import Outcome

DEFAULT_DEDUPE_WINDOW = 1 << 18
"""Spans remembered per generation for duplicate detection (two generations are kept)."""


class Source(ABC):
    """Where span records come from: files or a live backend.

    Iterate :meth:`records` once; :attr:`stats` fills in as it goes. MemTraceBench imports also
    fill :attr:`cases` and :attr:`labels` (complete once the records are exhausted).

    Args:
        strict: raise the first :class:`~memtrace_otel.errors.DecodeError` instead of skipping
            and counting bad records.
        dedupe_window: how many recent spans duplicate detection remembers (in each of two
            generations, so memory stays bounded whatever the input size); ``0`` turns it off.
        max_attribute_bytes: longest string (UTF-8 bytes) or bytes attribute value kept; longer
            values are cut and counted in ``stats.truncated_values``. ``None``: the
            ``MEMTRACE_MAX_ATTRIBUTE_BYTES`` environment variable, else 1 MiB.
        max_array_items: most elements an array attribute value keeps (10,000 by default); longer
            arrays are cut and counted the same way.

    Raises:
        ValueError: a negative ``dedupe_window`` or a cap that is not a positive integer.
    """

    def __init__(
        self,
        *,
        strict: bool = False,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        max_attribute_bytes: int | None = None,
        max_array_items: int | None = None,
    ) -> None:
        if dedupe_window < 0:
            raise ValueError(f"dedupe_window must be >= 0, got {dedupe_window}")
        self.limits = ValueLimits.resolve(max_attribute_bytes, max_array_items)
        self.strict = strict
        self.dedupe_window = dedupe_window
        self.stats = SourceStats()
        self._bench = BenchSink()
        self.on_error: OnError = policy(strict, self.stats)

    @property
    def cases(self) -> list[BenchCase]:
        """Cases found in MemTraceBench files read so far."""
        return self._bench.cases

    @property
    def labels(self) -> list[BenchLabel]:
        """Annotated faults (labels) found in MemTraceBench files read so far."""
        return self._bench.labels

    @property
    def outcomes(self) -> list[Outcome]:
        """Evaluations read from OTLP log records (``resourceLogs`` files) so far.

        Evaluations on spans (feedback spans, ``gen_ai.evaluation.result`` events) come with the
        records: read them with :func:`~memtrace_otel.sources.read_outcomes`.
        """
        return self._bench.outcomes

    @abstractmethod
    def _raw_records(self) -> Iterator[SpanRecord]:
        """Every decoded record, duplicates included."""

    def _capped_records(self) -> Iterator[SpanRecord]:
        """:meth:`_raw_records` with every attribute value within :attr:`limits`, counted.

        Checks every record; a source that knows how many bytes each record came from does it
        cheaper (see :class:`FileSource`).
        """
        capper = RecordCapper(self.limits)
        stats = self.stats
        for raw in self._raw_records():
            checked = check_op(raw)
            if isinstance(checked, tuple):
                self._invalid_op(raw, *checked)
                continue
            record, cut = capper.cap(checked)
            if cut:
                stats.truncated_values += cut
            yield record

    def _invalid_op(self, record: SpanRecord, field: str, reason: str) -> None:
        path, _, line = record.source.rpartition(":")
        error = make_error(
            f"span {record.span_id}: {reason}",
            path=path or record.source,
            line=int(line) if line.isdigit() else None,
            field=field,
        )
        self.on_error(INVALID_OP, error)

    def records(self) -> Iterator[SpanRecord]:
        """The span records, streamed, each (trace id, span id) once.

        A span is seen again when its (trace id, span id) was among the last ``dedupe_window``
        to ``2 * dedupe_window`` spans. An exact duplicate (same content: the Collector re-sends
        batches on retry, at-least-once delivery) is dropped and counted in
        ``stats.duplicates``; a span id seen again with different content is a conflict,
        skipped and counted as ``duplicate_span`` (raised when strict).
        """
        stats = self.stats
        window = self.dedupe_window
        if window == 0:
            for record in self._capped_records():
                stats.records += 1
                yield record
            return
        recent: dict[int, tuple[str, int]] = {}
        older: dict[int, tuple[str, int]] = {}
        for record in self._capped_records():
            key = hash((record.trace_id, record.span_id))
            digest = content_digest(record)
            first = recent.get(key)
            if first is None:
                first = older.get(key)
            if first is not None:
                if first[1] == digest:
                    stats.duplicates += 1
                else:
                    self.on_error(DUPLICATE_SPAN, duplicate_span_error(record, first[0]))
                continue
            recent[key] = (record.source, digest)
            if len(recent) >= window:
                older, recent = recent, {}
            stats.records += 1
            yield record

    def __iter__(self) -> Iterator[SpanRecord]:
        return self.records()


class FileSource(Source):
    """Trace files: a file, a directory (recursive) or a glob, or several of them.

    Args:
        paths: one spec or a sequence of specs.
        strict: see :class:`Source`.
        dedupe_window: see :class:`Source`.
        max_attribute_bytes: see :class:`Source`.
        max_array_items: see :class:`Source`.
        max_line_bytes: longest JSON Lines line (or length-prefixed record) read; a longer one
            is skipped without being held in memory and counted as ``line_too_long`` (strict:
            a ``DecodeError`` naming file, line and the cap). ``None``: the
            ``MEMTRACE_MAX_LINE_BYTES`` environment variable, else 64 MiB.
        max_document_bytes: largest whole JSON document read; a larger file is skipped after
            reading at most this much and counted as ``document_too_large``. ``None``:
            ``MEMTRACE_MAX_DOCUMENT_BYTES``, else 256 MiB.
        max_decompressed_bytes: most bytes decompressed from one gzip or zstd file (every
            layer counted); the rest of the file is skipped and counted as
            ``decompressed_too_large``. ``None``: ``MEMTRACE_MAX_DECOMPRESSED_BYTES``, else
            4 GiB.
        max_compression_ratio: most bytes decompressed per compressed byte (at least 16 MiB
            per file), counted the same way. ``None``: ``MEMTRACE_MAX_COMPRESSION_RATIO``, else
            1000.

    Raises:
        SourceError: (when iterating) a spec names nothing.
        ValueError: a bad ``dedupe_window`` or cap (see :class:`Source`).
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        strict: bool = False,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        max_attribute_bytes: int | None = None,
        max_array_items: int | None = None,
        max_line_bytes: int | None = None,
        max_document_bytes: int | None = None,
        max_decompressed_bytes: int | None = None,
        max_compression_ratio: int | None = None,
    ) -> None:
        super().__init__(
            strict=strict,
            dedupe_window=dedupe_window,
            max_attribute_bytes=max_attribute_bytes,
            max_array_items=max_array_items,
        )
        self.read_limits = ReadLimits.resolve(
            max_line_bytes, max_document_bytes, max_decompressed_bytes, max_compression_ratio
        )
        self.specs: list[str | os.PathLike[str]] = (
            [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        )

    def _raw_records(self) -> Iterator[SpanRecord]:
        capper = RecordCapper(self.limits, self.stats)
        for spec in self.specs:
            for path in expand_paths(spec, self._skip_path):
                self.stats.files += 1
                yield from read_file(path, self.on_error, self._bench, capper, self.read_limits)

    def _skip_path(self, path: str, reason: str) -> None:
        self.on_error(NOT_A_REGULAR_FILE, make_error(reason, path=path, line=None))

    def _capped_records(self) -> Iterator[SpanRecord]:
        # The file reader caps as it decodes, skipping lines too short to hold a long value.
        return self._raw_records()

    def __repr__(self) -> str:
        return f"FileSource({self.specs!r}, strict={self.strict})"


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _items(mapping: Mapping[str, Any]) -> frozenset[tuple[str, Any]]:
    try:  # the common case, at C speed: every value hashable
        return frozenset(mapping.items())
    except TypeError:  # a kvlist (a mapping) somewhere: hash its repr instead
        return frozenset((k, _hashable(v)) for k, v in mapping.items())


_last_items: tuple[object, frozenset[tuple[str, Any]]] = (None, frozenset())


def _shared_items(mapping: Mapping[str, Any]) -> frozenset[tuple[str, Any]]:
    """:func:`_items` of a mapping many records share (their resource's), remembered for the
    last one seen."""
    global _last_items
    held, items = _last_items
    if mapping is held:
        return items
    items = _items(mapping)
    _last_items = (mapping, items)
    return items


def content_digest(record: SpanRecord) -> int:
    """A hash of what a span says, ``source`` (where it was read) left out: two copies of one
    span written by a retrying exporter have the same digest."""
    return hash(
        (
            record.name,
            record.parent_span_id,
            record.kind,
            record.start_time_unix_nano,
            record.end_time_unix_nano,
            record.status_code,
            record.status_message,
            _items(record.attributes),
            tuple((e.name, e.time_unix_nano, _items(e.attributes)) for e in record.events),
            tuple((li.trace_id, li.span_id, _items(li.attributes)) for li in record.links),
            _shared_items(record.resource_attributes),
            record.scope_name,
            record.scope_version,
        )
    )


def duplicate_span_error(record: SpanRecord, first: str) -> DecodeError:
    """The error reported for a span id seen again with different content (``first``: where it
    was first seen)."""
    path, _, line = record.source.rpartition(":")
    return make_error(
        f"conflicting span {record.span_id} of trace {record.trace_id}: seen before with "
        f"different content (first at {first})",
        path=path,
        line=int(line) if line.isdigit() else None,
        field="spanId",
    )


def iter_records(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    strict: bool = False,
    stats: SourceStats | None = None,
) -> Iterator[SpanRecord]:
    """Stream the span records of trace files (paths, directories or globs).

    Args:
        paths: one spec or several.
        strict: raise at the first bad record instead of skipping and counting it.
        stats: if given, filled with the counts as the records are read.

    Raises:
        DecodeError: a bad record (strict only), naming file, line and field.
        SourceError: a spec names nothing.
    """
    specs = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    source = FileSource(specs, strict=strict)
    if stats is not None:
        source.stats = stats
        source.on_error = policy(strict, stats)
    return source.records()

"""Planning the scaled batch job: which lines of which files hold each memory store's spans.

Work is partitioned by memory store, never by trace (a case's graph spans the traces that built
its store and the trace that asked the question). Planning happens in two steps:

1. **Scan** (parallel, :func:`scan_range`): a JSON Lines file is cut into byte ranges at line
   starts (:func:`split_ranges`), and each range is read on a worker: every line is parsed, but
   only the store id of each span is looked up in the raw JSON, which is far cheaper than
   decoding spans into records. A line whose stores cannot be told that way (another format, a
   malformed span, a store id that is not a plain string) is decoded fully right there.
2. **Load** (in each partition, :func:`load_partition`): a partition re-reads only the lines
   of its stores, drops the other stores' spans from the parsed JSON and decodes the rest.

Spans written under the upstream GenAI conventions only are the exception to "by store": a chat
call names no store, and becomes an op of the store its trace's memory spans name. Between the
two steps, :func:`route_upstream` gives each store with upstream memory spans the lines holding
its traces' spans that name no store, and the partition keeps those spans and adapts its records
(:func:`adapt_partition`) before building its graphs.

Other files (compressed, length-prefixed, whole documents) and strict runs are planned by
decoding them in the driver (:func:`plan_sources`), as a single-process run reads them.

Counting stays exact: every skip, cut value and record is counted exactly once, by the piece of
work that decoded it (a :class:`Tally`), and the driver adds the tallies up. Line-level problems
(blank lines, invalid JSON, over-long lines) and lines decoded during the scan are counted by
the scan; the spans of the other lines by the partition of their store.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from memtrace_otel._internal import GcPaused
from memtrace_otel.errors import DecodeError, SourceError
from memtrace_otel.job._batch import resolved_outcomes, store_of
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.sources import (
    BACKEND_SCHEMES,
    Outcome,
    RecordCapper,
    SourceStats,
    ValueLimits,
    iter_records,
    open_source,
    outcomes_of,
)
from memtrace_otel.sources._common import (
    DUPLICATE_SPAN,
    MAX_ERROR_MESSAGES,
    SURROGATE_HINT,
    Bad,
    otlp_trace_id,
)
from memtrace_otel.sources._content import ContentResolver, ContentStats
from memtrace_otel.sources._documents import BenchSink
from memtrace_otel.sources._files import FileReader, open_binary
from memtrace_otel.sources._limits import LineReader, ReadLimits
from memtrace_otel.sources._outcomes import is_verdict_span
from memtrace_otel.sources._source import content_digest, duplicate_span_error
from memtrace_otel.sources._stores import NO_STORE, line_stores, prune_stores, raw_store
from memtrace_otel.sources._upstream import adapt_upstream, is_upstream_memory_op


def _stdlib_loads(raw: bytes) -> Any:
    """``json.loads``, refusing (like orjson) what may hold lone surrogates: the reader's
    parser then replaces and counts them."""
    if SURROGATE_HINT.search(raw):
        raise ValueError("may hold lone surrogates")
    return json.loads(raw)


_loads: Callable[[bytes], Any]
try:  # the loaders' optional accelerator
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - the standard parser does the work
    _loads = _stdlib_loads

_GZIP_OR_ZSTD = (b"\x1f\x8b", b"\x28\xb5\x2f\xfd")
_BLOCK = 1 << 20
"""Bytes read at a time while cutting files into ranges."""

Key = tuple[str, int, int, int]
"""Where a message was found: (file, line, phase, sequence); phase 0 is the scan, 1 the load."""


# --- counting ------------------------------------------------------------------------------
@dataclass
class Tally:
    """What one piece of work (a scanned range, a loaded partition) counted.

    ``stats`` counts like a source's :class:`~memtrace_otel.sources.SourceStats`; ``keys`` holds,
    for each of its kept messages, where it was found, so the driver can keep the first ones
    in file order whatever piece found them.
    """

    stats: SourceStats = field(default_factory=SourceStats)
    keys: list[Key] = field(default_factory=list)
    phase: int = 0

    def on_error(self, kind: str, error: DecodeError) -> None:
        """The lenient policy of the sources, remembering where each kept message came from."""
        if len(self.stats.errors) < MAX_ERROR_MESSAGES:
            self.keys.append((error.path, error.line or 0, self.phase, len(self.keys)))
        self.stats.skip(kind, str(error))

    def add_to(self, total: SourceStats, keys: list[Key]) -> None:
        """Add these counts to ``total`` (messages still unsorted: see :func:`first_messages`)."""
        total.records += self.stats.records
        total.skipped += self.stats.skipped
        total.truncated_values += self.stats.truncated_values
        total.replaced_surrogates += self.stats.replaced_surrogates
        total.duplicates += self.stats.duplicates
        for kind, count in self.stats.skipped_by_kind.items():
            total.skipped_by_kind[kind] = total.skipped_by_kind.get(kind, 0) + count
        total.errors.extend(self.stats.errors)
        keys.extend(self.keys)


def first_messages(
    messages: list[str],
    keys: list[Key],
    files: Sequence[str],
    group_of: Mapping[str, int] | None = None,
) -> list[str]:
    """The messages in reading order (file, then line), the first :data:`MAX_ERROR_MESSAGES`
    of each group of files (each source spec, as a single-process run keeps them per source).
    """
    order = {path: number for number, path in enumerate(files)}
    groups = group_of or {}
    ranked = sorted(
        zip(keys, messages, strict=True), key=lambda item: (order.get(item[0][0], 0), item[0][1:])
    )
    kept: list[str] = []
    per_group: dict[int, int] = {}
    for key, message in ranked:
        group = groups.get(key[0], 0)
        if per_group.get(group, 0) < MAX_ERROR_MESSAGES:
            per_group[group] = per_group.get(group, 0) + 1
            kept.append(message)
    return kept


# --- the plan ------------------------------------------------------------------------------
class LineTable:
    """``(byte offset, line number)`` pairs in file order, held in two arrays of 64-bit ints,
    with each line's size in bytes where a scan measured it (``-1``: not known).

    A plan addresses every line of an export (a day's traffic is millions); as tuples of ints
    each pair cost some 100 bytes, here 16 (24 with the size).
    """

    __slots__ = ("numbers", "offsets", "sizes")

    def __init__(self, pairs: Iterable[tuple[int, int]] = (), sizes: Iterable[int] = ()) -> None:
        self.offsets = array("q")
        self.numbers = array("q")
        for offset, number in pairs:
            self.offsets.append(offset)
            self.numbers.append(number)
        self.sizes = array("q", sizes)
        if len(self.sizes) not in (0, len(self.numbers)):
            raise ValueError(f"{len(self.sizes)} sizes for {len(self.numbers)} lines")

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.offsets, self.numbers, strict=True)

    def sized(self) -> Iterator[tuple[int, int, int]]:
        """``(byte offset, line number, size)`` in file order (size ``-1`` where not known)."""
        sizes = self.sizes or array("q", [-1]) * len(self.numbers)
        return zip(self.offsets, self.numbers, sizes, strict=True)

    def __len__(self) -> int:
        return len(self.numbers)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LineTable):
            return NotImplemented
        return (
            self.offsets == other.offsets
            and self.numbers == other.numbers
            and self.sizes == other.sizes
        )

    def __hash__(self) -> int:
        return hash((self.offsets.tobytes(), self.numbers.tobytes(), self.sizes.tobytes()))

    def __repr__(self) -> str:
        return f"LineTable({list(self)!r})"


@dataclass(frozen=True)
class Chunk:
    """Where a partition reads: lines of a JSON Lines file, or (``lines is None``) a whole file.

    ``lines`` holds ``(byte offset, line number)`` pairs in file order. ``counted`` says whether
    the partition counts what it decodes there (the lines found by a scan), and ``decoded``
    names the lines the scan decoded (and counted) already.
    """

    path: str
    lines: LineTable | None
    counted: bool = False
    decoded: frozenset[int] = frozenset()
    mixed: frozenset[int] | None = None
    """The lines that hold spans of several stores (``None``: not known, so any may): only
    those need other stores' spans dropped before decoding (see :func:`prune_stores`)."""


@dataclass(frozen=True)
class Partition:
    """A unit of work: some stores and the chunks that hold their spans."""

    number: int
    stores: tuple[str, ...]
    chunks: tuple[Chunk, ...]
    records: int
    shared: tuple[str, ...] = ()
    """Stores loaded (not counted, not attributed) for the lineage of ``stores``."""
    case_stores: frozenset[str] = frozenset()
    """Which of ``stores`` name cases (the others lend their ops to the rest)."""
    traces: frozenset[str] = frozenset()
    """The traces of ``stores``' upstream GenAI memory spans: their spans that name no store
    (chat calls) are kept too, and the partition's records are adapted into ops
    (:func:`~memtrace_otel.sources.adapt_upstream`) before its graphs are built."""
    unkept: frozenset[str] = frozenset()
    """Stores of ``stores`` whose spans are counted but not kept (spans that name no store when
    none holds an op: they make no graph, and the chat calls among them are kept by the
    partitions of their traces), so that they do not have to fit in one partition's memory."""


@dataclass
class Plan:
    """What planning learnt: per store, which lines of which files hold its spans."""

    files: list[str] = field(default_factory=list)
    """Every file read, in reading order (the order records reach a store's graph)."""
    lines: dict[str, dict[str, array[int] | None]] = field(default_factory=dict)
    """store -> file -> line numbers, in the order they were found (``None``: the file cannot be
    addressed by line; a file read twice repeats its lines, which partitions take once). Arrays,
    not sets: 8 bytes a line instead of some 60."""
    records: dict[str, int] = field(default_factory=dict)
    """store -> number of its spans (to balance the partitions)."""
    offsets: dict[str, Mapping[int, int] | array[int]] = field(default_factory=dict)
    """file -> line number -> byte offset, for the plain JSON Lines files (a scanned file's is an
    array indexed by line number, -1 for the lines holding no span)."""
    sizes: dict[str, array[int]] = field(default_factory=dict)
    """scanned file -> the size in bytes of each line of ``offsets`` (indexed alike), so that a
    partition reads exactly its lines."""
    scanned: set[str] = field(default_factory=set)
    """Files planned by scanning: their partitions count what they decode."""
    decoded: dict[str, set[int]] = field(default_factory=dict)
    """file -> lines a scan decoded and counted already."""
    mixed: dict[str, set[int]] = field(default_factory=dict)
    """scanned file -> its lines found holding spans of more than one store (a scanned line
    that is not here holds one store's spans only)."""
    case_stores: set[str] = field(default_factory=set)
    """Stores with a span naming a case; the others may be shared (see :func:`shared_stores`)."""
    verdict_lines: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    """scanned file -> ``(line number, parsed value)`` of each line holding a verdict or review
    span, in line order (the reviews pass reads these instead of the file again)."""
    upstream: dict[str, set[str]] = field(default_factory=dict)
    """Stores with an upstream GenAI memory span -> the trace ids of those spans (as written):
    :func:`route_upstream` gives each such store the spans of its traces that name no store."""
    traces: dict[str, frozenset[str]] = field(default_factory=dict)
    """Upstream store -> its traces (decoded ids), once :func:`route_upstream` ran."""
    loose_ops: bool = True
    """Whether spans naming no store may hold ops (``False`` once :func:`route_upstream` read
    them all and found none: they are then not shared with every partition)."""
    mates: dict[str, set[str]] = field(default_factory=dict)
    """Upstream store -> the other stores of its traces (a chat call's store is the nearest
    memory span's of its trace, so they are loaded together), once :func:`route_upstream` ran."""

    def add_upstream(self, store: str, trace: str) -> None:
        """Note an upstream GenAI memory span of ``store`` in trace ``trace``."""
        self.upstream.setdefault(store, set()).add(trace)

    def add(
        self, store: str, path: str, line: int | None, spans: int = 1, case: bool = False
    ) -> None:
        """Note that ``line`` of ``path`` (``None``: somewhere in it) holds spans of ``store``
        (``case``: one of them names a case)."""
        if case:
            self.case_stores.add(store)
        per_file = self.lines.setdefault(store, {})
        if line is None:
            per_file[path] = None
        elif path not in per_file:
            per_file[path] = array("q", (line,))
        else:
            held = per_file[path]
            # A line's spans are added one after another (a file read twice repeats its lines:
            # the partitions take each line once).
            if held is not None and held[-1] != line:
                held.append(line)
        self.records[store] = self.records.get(store, 0) + spans

    def add_file(self, path: str) -> None:
        if path not in self.files:
            self.files.append(path)


def plan_sources(
    sources: Sequence[str],
    *,
    strict: bool = False,
    summary_stats: SourceStats | None = None,
    outcomes: list[Outcome] | None = None,
    resolver: ContentResolver | None = None,
) -> Plan:
    """Plan by decoding every source in this process (strict runs, tests, small inputs).

    Args:
        sources: trace files, directories, globs or fsspec URLs.
        strict: raise at the first bad record.
        summary_stats: where to add the sources' counts.
        outcomes: where to add the evaluations found, in the order a single-process run reads
            them.
        resolver: reads the evaluations with their content references resolved.

    Raises:
        SourceError: a backend URL (partitions re-read files; export the traces first).
    """
    plan = Plan()
    for spec in sources:
        check_file_spec(spec)
        source = open_source(spec, strict=strict)
        for record in source.records():
            path, _, number = record.source.rpartition(":")
            plan.add_file(path)
            plan.add(
                store_of(record),
                path,
                int(number) if number.isdigit() else None,
                case=A.MEMTRACE_CASE_ID in record.attributes,
            )
            if outcomes is not None and record.events:
                outcomes += resolved_outcomes(record, resolver)
            if is_upstream_memory_op(record):
                plan.add_upstream(store_of(record), record.trace_id)
        if outcomes is not None:
            outcomes += source.outcomes
        if summary_stats is not None:
            Tally(source.stats).add_to(summary_stats, [])
    address_lines(plan, [path for path in plan.files if path not in plan.scanned])
    return plan


def check_file_spec(spec: str) -> None:
    """Raise :class:`SourceError` for a backend URL: partitions re-read files."""
    if str(spec).startswith(BACKEND_SCHEMES):
        raise SourceError(
            f"{spec}: executors read trace files; export the traces first (memtrace export)"
        )


def address_lines(plan: Plan, paths: Iterable[str]) -> None:
    """Find the byte offsets of the planned lines of ``paths`` (or read those files whole)."""
    for path in paths:
        wanted: set[int] = set()
        for per_file in plan.lines.values():
            wanted.update(per_file.get(path) or ())
        offsets = _line_offsets(path, wanted) if wanted else None
        if offsets is None:  # compressed, framed or a document: partitions read it whole
            for per_file in plan.lines.values():
                if path in per_file:
                    per_file[path] = None
        else:
            plan.offsets[path] = offsets


def _line_offsets(path: str, wanted: set[int]) -> dict[int, int] | None:
    """Byte offsets of ``wanted`` lines of a plain JSON Lines file (``None``: not one).

    Records of a whole document may name a line too (a MemTraceBench file's say ``:1``), so the
    file is sniffed as the loaders do first.
    """
    if not is_json_lines(path):
        return None
    offsets: dict[int, int] = {}
    with open_binary(path) as stream:
        head = stream.read(4)
        if head[:2] in _GZIP_OR_ZSTD or head[:4] in _GZIP_OR_ZSTD:
            return None
        if head.lstrip()[:1] not in (b"{", b"["):
            return None
        stream.seek(0)
        # The loader numbers lines the same way: one per b"\n", counting from 1; an over-long
        # line (skipped by the loader) is stepped over without being held.
        reader = LineReader(stream, ReadLimits.resolve().max_line_bytes)
        position = 0
        for number, raw in enumerate(reader, 1):
            if number in wanted:
                offsets[number] = position
            position += len(raw) or reader.skipped_size
    return offsets if len(offsets) == len(wanted) else None


# --- scanning ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Range:
    """A byte range of a JSON Lines file that starts at a line (never a blank one).

    ``first_line`` is the number of the line at ``start``; ``last`` says whether the range ends
    the file; ``head`` whether it starts it (blank lines before the first value are no error).
    """

    path: str
    start: int
    end: int
    first_line: int
    head: bool
    last: bool


@dataclass
class RangeScan:
    """What a scan found in one range: the lines of each store, and its counts."""

    path: str
    lines: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    """store -> (byte offset, line number, size in bytes) of the lines holding its spans."""
    spans: dict[str, int] = field(default_factory=dict)
    decoded: list[int] = field(default_factory=list)
    """Lines decoded (and counted) by the scan itself."""
    tally: Tally = field(default_factory=Tally)
    case_stores: set[str] = field(default_factory=set)
    """Stores with a span naming a case."""
    outcomes: list[Found] = field(default_factory=list)
    """The evaluations of the range (feedback spans, evaluation events, log records)."""
    verdict_lines: list[tuple[int, Any]] = field(default_factory=list)
    """``(line number, parsed value)`` of the lines holding a verdict or review span (of a
    plain OTLP JSON line, only those spans, with their resources and scopes)."""
    content: ContentStats | None = None
    """What resolving the evaluations' content references did (``None``: nothing)."""
    upstream: dict[str, set[str]] = field(default_factory=dict)
    """Stores with an upstream GenAI memory span -> the trace ids of those spans (as written)."""


Found = tuple[int, int, "tuple[str, str] | None", Outcome]
"""An evaluation found by a scan: (0 on a span, 1 in a log record; line; the span's (trace id,
span id), to drop a duplicate span's; the outcome)."""


def is_json_lines(path: str) -> bool:
    """Whether ``path`` is a plain (uncompressed) JSON Lines file, sniffed as the loaders do.

    The loaders take a file whose first non-blank line is a whole JSON object or array for JSON
    Lines; anything else is read some other way.
    """
    try:
        with open_binary(path) as stream:
            head = stream.read(4)
            if not head or head[:2] in _GZIP_OR_ZSTD or head[:4] in _GZIP_OR_ZSTD:
                return False
            stream.seek(0)
            for raw in iter(lambda: stream.readline(_BLOCK), b""):
                if not raw.strip():
                    continue
                if len(raw) >= _BLOCK and raw[-1] != 10:
                    return False  # a huge first line: let the loader decide
                try:
                    value = _loads(raw)
                except ValueError:
                    return False
                return type(value) in (dict, list)
    except OSError:
        return False
    return False


def split_ranges(path: str, count: int) -> list[Range]:
    """Cut a JSON Lines file into about ``count`` ranges, each starting at a non-blank line.

    Costs one read of the file (counting newlines in 1 MiB blocks) and a few seeks.
    """
    with open_binary(path) as stream:
        size = stream.seek(0, 2)
        starts = [0]
        for k in range(1, max(1, count)):
            target = size * k // count
            if target <= starts[-1]:
                continue
            boundary = _next_line_start(stream, target)
            if boundary is not None and boundary > starts[-1]:
                starts.append(boundary)
        lines = _line_numbers_at(stream, starts)
    ends = [*starts[1:], size]
    return [
        Range(path, start, end, lines[i], head=i == 0, last=i == len(starts) - 1)
        for i, (start, end) in enumerate(zip(starts, ends, strict=True))
        if end > start
    ]


def _next_line_start(stream: IO[bytes], position: int) -> int | None:
    """The offset of the first non-blank line starting after ``position`` (``None``: none)."""
    stream.seek(position - 1)
    if stream.read(1) != b"\n":
        while True:  # skip the rest of this line, in bounded chunks
            chunk = stream.readline(_BLOCK)
            if not chunk:
                return None
            if chunk[-1] == 10:
                break
    while True:
        at = stream.tell()
        raw = stream.readline(_BLOCK)
        if not raw:
            return None
        if raw.strip():
            return at
        if raw[-1] != 10:  # a long run of whitespace without a newline: it is a line's start
            return at


def _line_numbers_at(stream: IO[bytes], offsets: list[int]) -> list[int]:
    """The line number (from 1) of the line starting at each of the sorted ``offsets``."""
    numbers = []
    stream.seek(0)
    position = 0
    newlines = 0
    for offset in offsets:
        while position < offset:
            block = stream.read(min(_BLOCK, offset - position))
            if not block:
                break
            newlines += block.count(b"\n")
            position += len(block)
        numbers.append(newlines + 1)
    return numbers


def scan_range(part: Range, resolver: Callable[[], ContentResolver] | None = None) -> RangeScan:
    """Find the stores of every span in a range of a JSON Lines file (see the module doc).

    Line-level problems are counted here; so are the lines this scan has to decode. With
    ``resolver`` (a factory), evaluations are read with their content references resolved.
    """
    scan = RangeScan(part.path)
    reading = resolver() if resolver is not None else None
    tally = scan.tally
    limits = ValueLimits.resolve()
    capper = RecordCapper(limits, tally.stats)
    logs = BenchSink()  # evaluations in OTLP log records land here
    reader = FileReader(part.path, tally.on_error, logs, capper)
    quiet = FileReader(part.path, _ignore, None, RecordCapper(limits))  # the partitions count
    with GcPaused(), open_binary(part.path) as stream:
        stream.seek(part.start)
        values = reader.json_line_values(
            stream,
            part.first_line - 1,
            offset=part.start,
            end=part.end,
            data_follows=not part.last,
            head=part.head,
        )
        for line, offset, size, value in values:
            stores = line_stores(value, scan.case_stores, scan.upstream)
            if stores is None:  # not plain OTLP JSON: decode it now, and count it here
                scan.decoded.append(line)
                stores = {}
                verdicts = False
                for record in reader.decode(value, line, size):
                    store = store_of(record)
                    stores[store] = stores.get(store, 0) + 1
                    if is_upstream_memory_op(record):
                        scan.upstream.setdefault(store, set()).add(record.trace_id)
                    if A.MEMTRACE_CASE_ID in record.attributes:
                        scan.case_stores.add(store)
                    _evaluations(scan, line, record, reading)
                    verdicts = verdicts or is_verdict_span(record)
                scan.outcomes += [(1, line, None, outcome) for outcome in logs.outcomes]
                logs.outcomes.clear()
                if verdicts:
                    scan.verdict_lines.append((line, value))
            else:
                evaluated, verdict_spans = _evaluated_spans(value)
                if evaluated is not None:  # rare: decode those spans alone, for their outcomes
                    for record in quiet.decode(evaluated, line, size):
                        _evaluations(scan, line, record, reading)
                if verdict_spans is not None:  # for the reviews pass (those spans alone)
                    scan.verdict_lines.append((line, verdict_spans))
            for store, spans in stores.items():
                scan.lines.setdefault(store, []).append((offset, line, size))
                scan.spans[store] = scan.spans.get(store, 0) + spans
    if reading is not None and reading.stats.any:
        scan.content = reading.stats
    return scan


def _ignore(kind: str, error: DecodeError) -> None:
    """Errors of a second decoding: the first one counts them."""


def _evaluations(
    scan: RangeScan, line: int, record: SpanRecord, resolver: ContentResolver | None = None
) -> None:
    found = resolved_outcomes(record, resolver)
    scan.outcomes += [(0, line, (record.trace_id, record.span_id), outcome) for outcome in found]


def _evaluated_spans(value: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """In one pass over the spans of a parsed OTLP JSON line: those that carry an evaluation
    event, and those that are verdict or review spans (by name), each with their resources and
    scopes (``None``: none is)."""
    evaluated: list[dict[str, Any]] = []
    verdicts: list[dict[str, Any]] = []
    for resource in value["resourceSpans"]:
        e_scopes = []
        v_scopes = []
        for scope in resource["scopeSpans"]:
            e_spans = []
            v_spans = []
            for span in scope["spans"]:
                if type(span) is not dict:
                    continue
                name = span.get("name")
                if name in _VERDICT_NAMES:  # a tuple: compared, never hashed
                    v_spans.append(span)
                events = span.get("events")
                if events and type(events) is list and _has_evaluation(events):
                    e_spans.append(span)
            if e_spans:
                e_scopes.append({**scope, "spans": e_spans})
            if v_spans:
                v_scopes.append({**scope, "spans": v_spans})
        if e_scopes:
            evaluated.append({**resource, "scopeSpans": e_scopes})
        if v_scopes:
            verdicts.append({**resource, "scopeSpans": v_scopes})
    return (
        {"resourceSpans": evaluated} if evaluated else None,
        {"resourceSpans": verdicts} if verdicts else None,
    )


_VERDICT_NAMES = (A.MEMTRACE_ATTRIBUTION_SPAN, A.MEMTRACE_REVIEW_SPAN)


def _has_evaluation(events: list[Any]) -> bool:
    # A loop, not any() over a generator: this runs for every span with events (most spans).
    for event in events:  # noqa: SIM110
        if type(event) is dict and event.get("name") == _EVALUATION_EVENT:
            return True
    return False


_EVALUATION_EVENT = A.GEN_AI_EVALUATION_RESULT_EVENT


def merge_scan(plan: Plan, scan: RangeScan) -> None:
    """Add one range's scan to the plan (ranges of a file in any order)."""
    path = scan.path
    plan.add_file(path)
    plan.scanned.add(path)
    offsets = plan.offsets.get(path)
    if not isinstance(offsets, array):
        offsets = plan.offsets[path] = array("q")
    sizes = plan.sizes.setdefault(path, array("q"))
    last = max((line for lines in scan.lines.values() for _, line, _ in lines[-1:]), default=0)
    if last >= len(offsets):
        offsets.extend(array("q", [-1]) * (last + 1 - len(offsets)))
        sizes.extend(array("q", [-1]) * (last + 1 - len(sizes)))
    mixed = plan.mixed.setdefault(path, set())
    for store, lines in scan.lines.items():
        for offset, line, size in lines:
            if offsets[line] >= 0:  # a second store's spans (or a file read twice)
                mixed.add(line)
            offsets[line] = offset
            sizes[line] = size
            plan.add(store, path, line, spans=0)
        plan.records[store] = plan.records.get(store, 0) + scan.spans[store]
    if scan.decoded:
        plan.decoded.setdefault(path, set()).update(scan.decoded)
    if scan.verdict_lines:
        held = plan.verdict_lines.setdefault(path, [])
        held += scan.verdict_lines
        held.sort(key=lambda item: item[0])  # ranges may come in any order
    plan.case_stores |= scan.case_stores
    for store, traces in scan.upstream.items():
        plan.upstream.setdefault(store, set()).update(traces)


SHARED_MAX_RECORDS = 200_000
"""The most spans the stores shared with every partition may hold together."""


def shared_stores(plan: Plan) -> list[str]:
    """Stores no span of which names a case (prompt loads, templates, ops naming no store),
    smallest first, up to :data:`SHARED_MAX_RECORDS` spans in all: every partition loads them
    too, so that its stores' graphs get the ops of theirs they read from (as in one process).
    Spans that name no store and hold no op (upstream chat calls, HTTP spans) are never shared:
    :func:`route_upstream` gives each store those of its traces."""
    chosen: list[str] = []
    total = 0
    for store in sorted(
        (
            s
            for s in plan.records
            if s not in plan.case_stores and (s != NO_STORE or plan.loose_ops)
        ),
        key=lambda s: (plan.records[s], s),
    ):
        total += plan.records[store]
        if total > SHARED_MAX_RECORDS:
            break
        chosen.append(store)
    return chosen


# --- partitions ----------------------------------------------------------------------------
def make_partitions(
    plan: Plan, count: int, stores: Iterable[str] | None = None, shared: Sequence[str] = ()
) -> list[Partition]:
    """Split the stores into at most ``count`` partitions of similar record counts.

    The biggest stores are placed first, each into the lightest partition so far. Every
    partition also loads the ``shared`` stores it does not own (uncounted).
    """
    return list(PlannedPartitions(plan, count, stores, shared))


class PlannedPartitions(Sequence[Partition]):
    """:func:`make_partitions`' partitions, each made when it is asked for.

    A partition's line tables are 24 bytes a line: made all at once they held 10 MB beside the
    plan for the whole of a 440k-span run. A run in this process takes them one at a time, so
    each is made just before it runs and dropped after. (Asked for twice, a partition is made
    twice, equal.)
    """

    def __init__(
        self,
        plan: Plan,
        count: int,
        stores: Iterable[str] | None = None,
        shared: Sequence[str] = (),
    ) -> None:
        chosen = sorted(plan.records if stores is None else stores)
        count = max(1, min(count, len(chosen)))
        heap: list[tuple[int, int]] = [(0, n) for n in range(count)]
        members: list[list[str]] = [[] for _ in range(count)]
        for store in sorted(chosen, key=lambda s: (-plan.records.get(s, 0), s)):
            load, number = heapq.heappop(heap)
            members[number].append(store)
            heapq.heappush(heap, (load + plan.records.get(store, 0), number))
        self.plan = plan
        self.shared = tuple(shared)
        self.groups = [(number, sorted(group)) for number, group in enumerate(members) if group]

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, index: int) -> Partition:  # type: ignore[override]
        number, group = self.groups[index]
        plan = self.plan
        partition = _partition(plan, number, group)
        mates = sorted({m for s in group for m in plan.mates.get(s, ())} - set(group))
        extra = [store for store in self.shared if store not in group]
        extra += [store for store in mates if store not in extra]
        if extra:
            more = _partition(plan, number, extra).chunks
            partition = dataclasses.replace(
                partition,
                chunks=partition.chunks
                + tuple(dataclasses.replace(c, counted=False, decoded=frozenset()) for c in more),
                shared=tuple(extra),
            )
        return partition


def _partition(plan: Plan, number: int, stores: list[str]) -> Partition:
    chunks = []
    for path in plan.files:
        lines: set[int] | None = set()
        used = False
        for store in stores:
            per_file = plan.lines.get(store, {})
            if path not in per_file:
                continue
            used = True
            held = per_file[path]
            if held is None or lines is None:
                lines = None
            else:
                lines.update(held)
        if not used:
            continue
        if lines is None:
            chunks.append(Chunk(path, None))
            continue
        offsets = plan.offsets[path]
        sizes = plan.sizes.get(path)
        decoded = plan.decoded.get(path, set())
        mixed = plan.mixed.get(path) if path in plan.scanned else None
        numbers = sorted(lines)
        chunks.append(
            Chunk(
                path,
                LineTable(
                    ((offsets[n], n) for n in numbers),
                    () if sizes is None else (sizes[n] for n in numbers),
                ),
                counted=path in plan.scanned,
                decoded=frozenset(n for n in lines if n in decoded),
                mixed=None if mixed is None else frozenset(n for n in lines if n in mixed),
            )
        )
    return Partition(
        number,
        tuple(stores),
        tuple(chunks),
        sum(plan.records.get(s, 0) for s in stores),
        case_stores=frozenset(s for s in stores if s in plan.case_stores),
        traces=frozenset(t for s in stores for t in plan.traces.get(s, ())),
        unkept=frozenset({NO_STORE} & set(stores)) if not plan.loose_ops else frozenset(),
    )


def load_partition(
    partition: Partition,
) -> tuple[dict[str, list[SpanRecord]], Tally, list[str]]:
    """The span records of the partition's stores, in the order the single-process run reads them.

    A line can hold spans of several stores: it is parsed whole and the other stores' spans are
    dropped before decoding. Spans seen twice (a Collector retry) are kept once, as the sources
    do. Returns the records by store, what was counted on the way (only for scanned files:
    the others were counted when they were planned), and, for a partition with
    :attr:`Partition.traces`, the store of each record in reading order (else empty), which
    :func:`adapt_partition` takes.
    """
    loader = _Loader(partition.stores, partition.shared, partition.traces, partition.unkept)
    # The records are kept until the graphs are built: with the cyclic collector running, its
    # full collections would traverse all of them again and again (twice the loading time).
    with GcPaused():
        for chunk in partition.chunks:
            loader.load(chunk)
    return loader.by_store, loader.tally, loader.order


def adapt_partition(
    by_store: dict[str, list[SpanRecord]], order: Sequence[str]
) -> dict[str, list[SpanRecord]]:
    """A partition's records with their upstream GenAI spans adapted into ops
    (:func:`~memtrace_otel.sources.adapt_upstream`, over the records in the order one process
    reads them: ``order`` names each one's store), grouped by store again: a chat call joins the
    store it was adapted into. Spans that still name no store are dropped unless they hold an op
    (as in one process).

    >>> from memtrace_otel.semconv import SpanRecord
    >>> t = "0" * 31 + "1"
    >>> search = SpanRecord(t, "00000000000000a1", "search_memory", start_time_unix_nano=1,
    ...     end_time_unix_nano=2, attributes={A.GEN_AI_OPERATION_NAME: "search_memory",
    ...     A.GEN_AI_MEMORY_STORE_ID: "u1"})
    >>> chat = SpanRecord(t, "00000000000000a2", "chat", start_time_unix_nano=3,
    ...     end_time_unix_nano=4, attributes={A.GEN_AI_OPERATION_NAME: "chat"})
    >>> adapted = adapt_partition({"u1": [search], NO_STORE: [chat]}, ["u1", NO_STORE])
    >>> [(r.name, r.attributes[A.MEMTRACE_OP_KIND]) for r in adapted["u1"]], NO_STORE in adapted
    ([('search_memory', 'retrieve'), ('chat', 'generate')], False)
    """
    taken = {store: iter(records) for store, records in by_store.items()}
    records = [next(taken[store]) for store in order]
    regrouped: dict[str, list[SpanRecord]] = {store: [] for store in by_store}
    for record in adapt_upstream(records):
        regrouped.setdefault(store_of(record), []).append(record)
    loose = regrouped.get(NO_STORE)
    if loose is not None and not any(A.MEMTRACE_OP_KIND in r.attributes for r in loose):
        del regrouped[NO_STORE]
    return regrouped


def route_upstream(plan: Plan) -> None:
    """Give each store with upstream GenAI memory spans the spans of its traces that name no
    store (the chat calls), as lines to load, and note its traces and the other stores of those
    traces (:attr:`Plan.traces`, :attr:`Plan.mates`). Such stores count as naming cases: their
    answers get case ids when they are adapted.

    The lines naming no store are read once more here (only when the export holds upstream
    spans), and only them; a file that was not scanned by line (another format, only with an
    executor asked for) is read whole by each such store's partition.
    """
    if not plan.upstream:
        return
    stores_of: dict[str, set[str]] = {}
    for store, written in plan.upstream.items():
        for trace in written:
            try:
                stores_of.setdefault(otlp_trace_id(trace, "traceId"), set()).add(store)
            except Bad:
                continue  # the span is reported by the partition that decodes it
    traces: dict[str, set[str]] = {store: set() for store in plan.upstream}
    for trace, stores in stores_of.items():
        for store in stores:
            traces[store].add(trace)
            plan.mates.setdefault(store, set()).update(stores - {store})
    plan.traces = {store: frozenset(found) for store, found in traces.items()}
    plan.case_stores |= set(plan.upstream)
    ops = False
    for path, held in list(plan.lines.get(NO_STORE, {}).items()):
        if held is None or path not in plan.scanned:  # not scanned by line: read it all
            ops = True  # (and not looked into)
            for store in plan.upstream:
                plan.add(store, path, None, spans=0)
            continue
        offsets, sizes = plan.offsets[path], plan.sizes[path]
        mixed = plan.mixed.setdefault(path, set())
        quiet = FileReader(path, _ignore, None)
        with open_binary(path) as stream:
            fd = _fileno(stream)
            for line in sorted(set(held)):
                if fd >= 0:
                    raw = os.pread(fd, sizes[line], offsets[line])
                else:
                    stream.seek(offsets[line])
                    raw = stream.readline()
                try:
                    value = _loads(raw)
                except ValueError:
                    continue  # reported by the scan, or by the partition that decodes it
                found, has_ops = _loose_traces(value, quiet, line, len(raw))
                ops = ops or has_ops
                for trace in found:
                    for store in stores_of.get(trace, ()):
                        plan.add(store, path, line)
                        mixed.add(line)
    plan.loose_ops = ops


def _raw_loose(value: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any], Any]]:
    """``(resource, scope, span)`` of each span of a parsed OTLP JSON line (``resourceSpans``
    a list) that names no store, or whose store cannot be told undecoded."""
    for resource in value["resourceSpans"]:
        if type(resource) is not dict or type(resource.get("scopeSpans")) is not list:
            continue
        for scope in resource["scopeSpans"]:
            if type(scope) is not dict or type(scope.get("spans")) is not list:
                continue
            for span in scope["spans"]:
                if type(span) is dict and raw_store(span) in (NO_STORE, None):
                    yield resource, scope, span


def _loose_spans(value: Any, traces: frozenset[str]) -> dict[str, Any] | None:
    """A copy of a parsed OTLP JSON line holding only its spans of ``traces`` that name no store
    (or whose store cannot be told undecoded), with their resources and scopes (``None``: none)."""
    if type(value) is not dict or type(value.get("resourceSpans")) is not list:
        return None
    kept: dict[int, tuple[dict[str, Any], dict[int, tuple[dict[str, Any], list[Any]]]]] = {}
    for resource, scope, span in _raw_loose(value):
        if _decoded_trace(span) in traces:
            scopes = kept.setdefault(id(resource), (resource, {}))[1]
            scopes.setdefault(id(scope), (scope, []))[1].append(span)
    resources = [
        {**resource, "scopeSpans": [{**scope, "spans": spans} for scope, spans in scopes.values()]}
        for resource, scopes in kept.values()
    ]
    return {"resourceSpans": resources} if resources else None


def _decoded_trace(span: dict[str, Any]) -> str | None:
    try:
        return otlp_trace_id(span.get("traceId"), "traceId")
    except Bad:
        return None


def _loose_traces(value: Any, reader: FileReader, line: int, size: int) -> tuple[set[str], bool]:
    """The (decoded) trace ids of the spans of a parsed JSON line that name no store (or whose
    store cannot be told undecoded), and whether one of them may be an op (it names an op kind
    or name): looked up in plain OTLP JSON, else decoded by ``reader``."""
    found: set[str] = set()
    ops = False
    if type(value) is not dict or type(value.get("resourceSpans")) is not list:
        loose = [r for r in reader.decode(value, line, size) if store_of(r) == NO_STORE]
        ops = any(
            A.MEMTRACE_OP_KIND in r.attributes or A.MEMTRACE_OP_NAME in r.attributes for r in loose
        )
        return {r.trace_id for r in loose}, ops
    for _, _, span in _raw_loose(value):
        ops = ops or _names_op(span)
        trace = _decoded_trace(span)
        if trace is not None:
            found.add(trace)
    return found, ops


def _names_op(span: dict[str, Any]) -> bool:
    """Whether an undecoded span may be an op (anything unusual counts as may)."""
    attributes = span.get("attributes")
    if attributes is None:
        return False
    if type(attributes) is not list:
        return True
    return any(
        type(item) is not dict or item.get("key") in (A.MEMTRACE_OP_KIND, A.MEMTRACE_OP_NAME)
        for item in attributes
    )


def _fileno(stream: IO[bytes]) -> int:
    """The descriptor of a local file (``-1``: an fsspec URL's stream, read by seeks)."""
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is both
        return -1


class _Loader:
    """One partition's loading: its stores' records, deduplicated, and what it counted."""

    def __init__(
        self,
        stores: Sequence[str],
        shared: Sequence[str] = (),
        traces: frozenset[str] = frozenset(),
        unkept: frozenset[str] = frozenset(),
    ) -> None:
        self.owned = set(stores)
        self.wanted = self.owned | set(shared)
        self.traces = traces
        """Traces whose spans naming no store are kept too (see :attr:`Partition.traces`)."""
        self.by_store: dict[str, list[SpanRecord]] = {store: [] for store in self.wanted}
        if traces:
            self.by_store.setdefault(NO_STORE, [])
        self.order: list[str] = []
        """With ``traces``: the store of each record kept, in reading order (the records are
        adapted in the order one process reads them)."""
        self.seen: dict[tuple[str, str], SpanRecord] = {}
        """The first record of each (trace id, span id): the partition holds them anyway, so
        content digests are computed only when an id comes again (a duplicate or a conflict)."""
        self.unkept = unkept
        self.seen_unkept: dict[tuple[str, str], tuple[int, str]] = {}
        """For the spans of ``unkept`` stores: each one's content digest and where it was read."""
        self.tally = Tally(phase=1)
        self.limits = ValueLimits.resolve()
        self.ignored: list[DecodeError] = []  # counted by the planning already

    def load(self, chunk: Chunk) -> None:
        if chunk.lines is None:
            for record in iter_records(chunk.path):
                self.keep(record, counted=False)
            return
        # Count the spans of this partition's stores only, so each is counted exactly once;
        # lines the scan decoded were counted there (but their records are counted here).
        stats = self.tally.stats
        counting = FileReader(
            chunk.path, self.tally.on_error, None, RecordCapper(self.limits, stats)
        )
        quiet = FileReader(chunk.path, self._ignore, None, RecordCapper(self.limits))
        mixed = chunk.mixed  # a line of one store holds no other store's spans to drop
        with open_binary(chunk.path) as stream:
            fd = _fileno(stream)
            for offset, number, size in chunk.lines.sized():
                if size >= 0 and fd >= 0:  # a scanned line: read exactly it (a seek and a
                    raw = os.pread(fd, size, offset)  # readline read a buffer, 2x its bytes)
                else:
                    stream.seek(offset)
                    raw = stream.readline()
                try:
                    value = _loads(raw)
                except ValueError:
                    value = quiet.parse_or_none(raw)
                    if value is None:
                        continue
                scanned_here = number in chunk.decoded
                loose = None
                if not scanned_here and (mixed is None or number in mixed):
                    if self.traces:  # the spans naming no store of our traces: their owner
                        loose = _loose_spans(value, self.traces)  # counts them
                    prune_stores(value, self.wanted)
                reader = counting if chunk.counted and not scanned_here else quiet
                for record in reader.decode(value, number, len(raw)):
                    self.keep(record, counted=chunk.counted)
                if loose is not None:
                    for record in quiet.decode(loose, number, len(raw)):
                        self.keep(record, counted=False)

    def _ignore(self, kind: str, error: DecodeError) -> None:
        self.ignored.append(error)

    def _count_only(self, record: SpanRecord, key: tuple[str, str], counted: bool) -> None:
        """Count a span of an unkept store as :meth:`keep` counts one, holding its digest alone."""
        first = self.seen_unkept.get(key)
        if first is None:
            self.seen_unkept[key] = (content_digest(record), record.source)
            if counted:
                self.tally.stats.records += 1
        elif not counted:
            pass
        elif first[0] == content_digest(record):
            self.tally.stats.duplicates += 1
        else:
            self.tally.on_error(DUPLICATE_SPAN, duplicate_span_error(record, first[1]))

    def keep(self, record: SpanRecord, counted: bool) -> None:
        store = store_of(record)
        if store not in self.wanted and (store != NO_STORE or record.trace_id not in self.traces):
            return
        counted = counted and store in self.owned  # a shared store is counted by its owner
        key = (record.trace_id, record.span_id)
        if store in self.unkept and record.trace_id not in self.traces:
            self._count_only(record, key, counted)
            return
        first = self.seen.get(key)
        if first is None:
            self.seen[key] = record
            if counted:
                self.tally.stats.records += 1
            if record.name == A.MEMTRACE_FEEDBACK_SPAN and record.events and outcomes_of(record):
                return  # feedback, read by the scan: no op, kept out of the graphs (as in one process)
            if is_verdict_span(record):
                return  # a verdict written back earlier: no op (as in one process)
            self.by_store[store].append(record)
            if self.traces:
                self.order.append(store)
        elif not counted:
            pass
        elif content_digest(first) == content_digest(record):
            self.tally.stats.duplicates += 1
        else:
            self.tally.on_error(DUPLICATE_SPAN, duplicate_span_error(record, first.source))

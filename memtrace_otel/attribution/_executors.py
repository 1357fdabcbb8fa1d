"""The batch job at scale: partitions by memory store, run in a process pool, on Dask, or spilled.

Work is partitioned by memory store (``gen_ai.memory.store.id``), never by trace: a case's graph
spans the traces that built its store and the trace that asked the question. A cheap first pass
over the sources (:func:`plan_sources`) records, per store, the lines of the files that hold its
spans; each partition then re-reads only those lines, keeps its stores' spans, builds one graph
per store and attributes that store's cases. The driver merges the per-store results in the
order of the single-process run, so verdicts and summaries are the same whatever the executor.

Executors (``--executor``):

- ``local[N]`` (``local``: one worker per core): a pool of ``N`` local processes;
- ``dask://HOST:PORT`` (or ``tcp://HOST:PORT``): an existing ``dask.distributed`` scheduler;
  the workers read the files themselves, so sources must be paths every worker sees (a shared
  disk, or fsspec URLs such as ``s3://bucket/traces/``).

A lost worker's partition is run again (Dask reschedules it; the local pool is rebuilt); a
partition that raises (a poison partition) is reported in ``summary.failed`` and the others
complete.

Without an executor, ``memory_bound`` keeps one process's memory bounded: records are spilled
per store to a SQLite file in a temp folder, then one store's graph is built at a time.
"""

from __future__ import annotations

import copyreg
import heapq
import io
import json
import os
import pickle
import re
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

import networkx as nx

from memtrace_otel.attribution._base import Method
from memtrace_otel.attribution._batch import (
    NO_STORE,
    BatchSummary,
    completed_case_ids,
    count_truncated_captured,
    store_of,
)
from memtrace_otel.attribution._index import graph_index
from memtrace_otel.attribution._model import Case, Verdict, load_cases
from memtrace_otel.errors import BackendError, DecodeError, MemtraceError, SourceError
from memtrace_otel.graph import build_graph
from memtrace_otel.semconv import JudgeVerdict, SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.sources import (
    BACKEND_SCHEMES,
    RecordCapper,
    ValueLimits,
    decode_document,
    iter_records,
    open_source,
)

DEFAULT_RETRIES = 2
"""How often a partition whose worker was lost is run again before it is reported."""

PARTITIONS_PER_WORKER = 4
"""More partitions than workers balance uneven stores and make a lost worker cost less."""

_CASE_ERRORS = (MemtraceError, ValueError, KeyError, TypeError, RuntimeError)
"""What a method may raise for one case (the same list as the single-process run)."""

_loads: Callable[[bytes], Any]
try:  # the loaders' optional accelerator
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - the standard parser does the work
    _loads = json.loads

_EXECUTOR = re.compile(r"^local(?:\[(\d+)\])?$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


# --- configuration ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ExecutorSpec:
    """A parsed ``--executor`` value.

    >>> parse_executor("local[3]")
    ExecutorSpec(kind='local', workers=3, address='')
    >>> parse_executor("dask://127.0.0.1:8786").address
    'tcp://127.0.0.1:8786'
    """

    kind: str
    workers: int = 1
    address: str = ""


def parse_executor(spec: str) -> ExecutorSpec:
    """Parse ``local``, ``local[N]``, ``dask://HOST:PORT`` or ``tcp://HOST:PORT``.

    Raises:
        ValueError: anything else.
    """
    text = spec.strip()
    match = _EXECUTOR.match(text)
    if match:
        workers = int(match.group(1)) if match.group(1) else (os.cpu_count() or 1)
        if workers < 1:
            raise ValueError(f"executor {spec!r}: local[N] needs N >= 1")
        return ExecutorSpec("local", workers)
    for scheme in ("dask://", "tcp://"):
        if text.startswith(scheme) and len(text) > len(scheme):
            return ExecutorSpec("dask", address="tcp://" + text[len(scheme) :])
    raise ValueError(f"executor {spec!r}: expected local, local[N] or dask://HOST:PORT")


def parse_size(text: str | int) -> int:
    """Bytes from ``512M``, ``2G``, ``100k`` or a plain number of bytes.

    >>> parse_size("1.5G"), parse_size("64M"), parse_size(4096)
    (1610612736, 67108864, 4096)

    Raises:
        ValueError: not a size, or not positive.
    """
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(text)
        if not match:
            raise ValueError(f"size {text!r}: expected a number with an optional K, M, G or T")
        power = " kmgt".index(match.group(2).lower() or " ")
        value = int(float(match.group(1)) * 1024**power)
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return value


# --- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chunk:
    """Where a partition reads: lines of a JSON Lines file, or (``lines is None``) a whole file.

    ``lines`` holds ``(byte offset, line number)`` pairs in file order.
    """

    path: str
    lines: tuple[tuple[int, int], ...] | None


@dataclass(frozen=True)
class Partition:
    """A unit of work: some stores and the chunks that hold their spans."""

    number: int
    stores: tuple[str, ...]
    chunks: tuple[Chunk, ...]
    records: int


@dataclass
class Plan:
    """What the first pass learnt: per store, which lines of which files hold its spans."""

    files: list[str] = field(default_factory=list)
    """Every file read, in reading order (the order records reach a store's graph)."""
    lines: dict[str, dict[str, set[int] | None]] = field(default_factory=dict)
    """store -> file -> line numbers (``None``: the file cannot be addressed by line)."""
    records: dict[str, int] = field(default_factory=dict)
    """store -> number of its span records."""
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    """file -> line number -> byte offset, for the plain JSON Lines files."""


def plan_sources(
    sources: Sequence[str], *, strict: bool = False, summary: BatchSummary | None = None
) -> Plan:
    """Read the sources once and record, per store, the file lines that hold its spans.

    Raises:
        SourceError: a backend URL (partitions re-read files; export the traces first).
    """
    plan = Plan()
    seen_files: set[str] = set()
    for spec in sources:
        if os.fspath(spec).startswith(BACKEND_SCHEMES):
            raise SourceError(
                f"{spec}: executors read trace files; export the traces first (memtrace export)"
            )
        source = open_source(spec, strict=strict)
        for record in source.records():
            store = store_of(record)
            path, _, number = record.source.rpartition(":")
            if path not in seen_files:
                seen_files.add(path)
                plan.files.append(path)
            per_file = plan.lines.setdefault(store, {})
            if not number.isdigit():
                per_file[path] = None
            elif path not in per_file:
                per_file[path] = {int(number)}
            else:
                held = per_file[path]
                if held is not None:
                    held.add(int(number))
            plan.records[store] = plan.records.get(store, 0) + 1
        if summary is not None:
            _count_source(summary, source.stats)
    for path in plan.files:
        wanted: set[int] = set()
        for per_file in plan.lines.values():
            held = per_file.get(path, set())
            wanted |= held or set()
        offsets = _line_offsets(path, wanted) if wanted else None
        if offsets is None:  # compressed, framed or a document: partitions read it whole
            for per_file in plan.lines.values():
                if path in per_file:
                    per_file[path] = None
        else:
            plan.offsets[path] = offsets
    return plan


def _count_source(summary: BatchSummary, stats: Any) -> None:
    summary.records += stats.records
    summary.skipped_records += stats.skipped
    summary.truncated_values += stats.truncated_values
    for kind, count in stats.skipped_by_kind.items():
        summary.skipped_by_kind[kind] = summary.skipped_by_kind.get(kind, 0) + count
    summary.source_errors.extend(stats.errors[: 20 - len(summary.source_errors)])


def _open(path: str) -> Any:
    from memtrace_otel.sources._files import open_binary

    return open_binary(path)


def _line_offsets(path: str, wanted: set[int]) -> dict[int, int] | None:
    """Byte offsets of ``wanted`` lines of a plain JSON Lines file (``None``: not one)."""
    offsets: dict[int, int] = {}
    with _open(path) as stream:
        head = stream.read(4)
        if head[:2] == b"\x1f\x8b" or head[:4] == b"\x28\xb5\x2f\xfd":
            return None
        if head.lstrip()[:1] not in (b"{", b"["):
            return None
        stream.seek(0)
        # The loader numbers lines the same way: one per b"\n", counting from 1.
        position = 0
        for number, raw in enumerate(stream, 1):
            if number in wanted:
                offsets[number] = position
            position += len(raw)
    return offsets if len(offsets) == len(wanted) else None


def make_partitions(plan: Plan, count: int, stores: Iterable[str] | None = None) -> list[Partition]:
    """Split the stores into at most ``count`` partitions of similar record counts.

    The biggest stores are placed first, each into the lightest partition so far.
    """
    chosen = sorted(plan.records if stores is None else stores)
    count = max(1, min(count, len(chosen)))
    heap: list[tuple[int, int]] = [(0, n) for n in range(count)]
    members: list[list[str]] = [[] for _ in range(count)]
    for store in sorted(chosen, key=lambda s: (-plan.records.get(s, 0), s)):
        load, number = heapq.heappop(heap)
        members[number].append(store)
        heapq.heappush(heap, (load + plan.records.get(store, 0), number))
    partitions = []
    for number, group in enumerate(members):
        if group:
            partitions.append(_partition(plan, number, sorted(group)))
    return partitions


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
                lines |= held
        if not used:
            continue
        if lines is None:
            chunks.append(Chunk(path, None))
        else:
            offsets = plan.offsets[path]
            chunks.append(Chunk(path, tuple((offsets[n], n) for n in sorted(lines))))
    return Partition(
        number, tuple(stores), tuple(chunks), sum(plan.records.get(s, 0) for s in stores)
    )


def load_partition(partition: Partition) -> dict[str, list[SpanRecord]]:
    """The span records of the partition's stores, in the order the single-process run reads them.

    A line can hold spans of several stores: it is decoded whole and filtered by store. Spans
    seen twice (a Collector retry) are kept once, as the sources do.
    """
    wanted = set(partition.stores)
    by_store: dict[str, list[SpanRecord]] = {store: [] for store in partition.stores}
    seen: set[tuple[str, str]] = set()

    def keep(record: SpanRecord) -> None:
        store = store_of(record)
        if store in wanted:
            key = (record.trace_id, record.span_id)
            if key not in seen:
                seen.add(key)
                by_store[store].append(record)

    for chunk in partition.chunks:
        if chunk.lines is None:
            for record in iter_records(chunk.path):
                keep(record)
            continue
        errors: list[DecodeError] = []  # counted by the first pass already
        # The planning pass read these lines through a source, which cut (and counted) long
        # values; cut them the same way here so a partition's graph equals the in-process one.
        capper = RecordCapper(ValueLimits.resolve())
        with _open(chunk.path) as stream:
            for offset, number in chunk.lines:
                stream.seek(offset)
                try:
                    value = _loads(stream.readline())
                except ValueError:
                    continue
                _prune(value, wanted)
                for record in decode_document(value, path=chunk.path, line=number, errors=errors):
                    keep(capper.cap(record)[0])
    return by_store


def _prune(value: Any, wanted: set[str]) -> None:
    """Drop the spans of other stores from a parsed OTLP JSON line before decoding it.

    Lines hold spans of many stores; decoding only ours keeps partitions from repeating each
    other's work. A span whose store cannot be read here is kept (the decoded record is
    filtered again by :func:`store_of`).
    """
    if type(value) is not dict:
        return
    for resource in value.get("resourceSpans") or ():
        if type(resource) is not dict:
            continue
        for scope in resource.get("scopeSpans") or ():
            if type(scope) is dict and type(scope.get("spans")) is list:
                scope["spans"] = [
                    s for s in scope["spans"] if _raw_store(s) in wanted or _raw_store(s) is None
                ]


def _raw_store(span: Any) -> str | None:
    """The store id of an undecoded OTLP JSON span (``None``: cannot tell without decoding)."""
    if type(span) is not dict:
        return None
    attributes = span.get("attributes")
    if attributes is None:
        return NO_STORE
    if type(attributes) is not list:
        return None
    for item in attributes:
        if type(item) is dict and item.get("key") == A.GEN_AI_MEMORY_STORE_ID:
            value = item.get("value")
            if type(value) is dict and type(value.get("stringValue")) is str:
                return str(value["stringValue"])
            return None
    return NO_STORE


# --- attributing a store ---------------------------------------------------------------------
@dataclass
class StoreResult:
    """What a worker learnt about one store: its cases and their verdicts."""

    store: str
    case_ids: list[str]
    """The case ids the store's graph holds ops of (to place each case in one store)."""
    failed: list[str]
    """The cases a judge op marked incorrect, sorted."""
    chosen: list[str] = field(default_factory=list)
    """The cases picked for attribution (resumed ones included), in the order they ran."""
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    truncated_captured: int = 0
    """Variable versions whose value was cut at capture time (``memtrace.variable.truncated``)."""


@dataclass
class PartitionResult:
    """The results of one partition's stores, and the seconds it took."""

    number: int
    stores: list[StoreResult]
    seconds: float


def attribute_store(
    store: str,
    G: nx.MultiDiGraph,
    method: Method,
    cases: dict[str, Case] | None,
    done: frozenset[str] = frozenset(),
    forced: Sequence[Case] = (),
    forget_tokens: bool = False,
) -> StoreResult:
    """Attribute the failed cases of one store's graph.

    Args:
        store: the store id.
        G: its graph.
        method: the attribution method.
        cases: the cases file's cases by id, or ``None`` to take failed cases from judge ops.
        done: case ids to skip (already in the verdicts file).
        forced: cases to attribute against ``G`` whatever its ops (cases found in no store).
        forget_tokens: also empty the evidence method's text cache afterwards (bounded runs).
    """
    index = graph_index(G)
    result = StoreResult(store, list(index.case_ops), sorted(index.failed))
    result.truncated_captured = count_truncated_captured(G)
    todo: list[Case] = list(forced)
    if cases is None:
        todo += [
            Case(case_id=case_id, verdict=JudgeVerdict.INCORRECT, source="trace")
            for case_id in result.failed
        ]
    else:
        for case_id in result.case_ids:
            case = cases.get(case_id)
            if case is None:
                continue
            verdict = case.verdict
            if verdict is None:
                verdict = index.case_from_graph(case_id).verdict
            if verdict != JudgeVerdict.CORRECT:
                todo.append(case)
    result.chosen = [case.case_id for case in todo]
    try:
        for case in todo:
            if case.case_id in done:
                continue
            try:
                result.verdicts[case.case_id] = method.attribute(G, case)
            except _CASE_ERRORS as exc:
                result.errors[case.case_id] = f"{type(exc).__name__}: {exc}"
    finally:
        _forget(G, tokens=forget_tokens)
    return result


def _forget(G: nx.MultiDiGraph, *, tokens: bool) -> None:
    """Drop what the attribution caches hold of a store once its cases are done.

    The graph index cache is weak, but its values point back at their graph, so a graph would
    otherwise live as long as the process; the evidence method's token cache holds the texts
    of the last store's records (they never recur in another store).
    """
    from memtrace_otel.attribution import _evidence, _index

    _index._cache.pop(G, None)
    if tokens:
        _evidence._segment_words.cache_clear()


@dataclass(frozen=True)
class _Shared:
    """What every partition needs: shipped once to each worker."""

    method: Method
    cases: dict[str, Case] | None
    done: frozenset[str]


def run_partition(
    partition: Partition, shared: _Shared, forced: Sequence[Case] = ()
) -> PartitionResult:
    """Load a partition's spans, build its graphs one store at a time and attribute its cases."""
    started = time.perf_counter()
    by_store = load_partition(partition)
    results = []
    for store in partition.stores:
        G = build_graph(by_store.pop(store))
        results.append(attribute_store(store, G, shared.method, shared.cases, shared.done, forced))
    return PartitionResult(partition.number, results, time.perf_counter() - started)


# --- the SQLite spill ------------------------------------------------------------------------
def _read_only(mapping: dict[str, Any]) -> MappingProxyType[str, Any]:
    return MappingProxyType(mapping)


def _reduce_mapping(mapping: MappingProxyType[str, Any]) -> tuple[Any, tuple[dict[str, Any]]]:
    return _read_only, (dict(mapping),)


_DISPATCH: dict[type, Any] = {**copyreg.dispatch_table, MappingProxyType: _reduce_mapping}
"""Records hold read-only attribute mappings, which pickle cannot save by itself."""


class SpillIndex:
    """Span records spilled per store to a SQLite file, read back one store at a time.

    Memory stays near ``bound``: records are pickled as they arrive and written in batches of
    at most ``bound / 8`` bytes; SQLite's page cache gets another eighth.

    Args:
        bound: the memory budget in bytes.
        directory: where the temp file goes (default: the system temp folder).
    """

    def __init__(self, bound: int, directory: str | None = None) -> None:
        handle, self.path = tempfile.mkstemp(
            prefix="memtrace-spill-", suffix=".sqlite", dir=directory
        )
        os.close(handle)
        self._db = sqlite3.connect(self.path)
        cache_kib = max(1024, bound // 8 // 1024)
        for pragma in (
            "journal_mode=OFF",
            "synchronous=OFF",
            "temp_store=FILE",
            f"cache_size=-{cache_kib}",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute("CREATE TABLE spans (store TEXT, seq INTEGER, blob BLOB)")
        self._flush_at = max(1 << 20, bound // 8)
        self._batch: list[tuple[str, int, bytes]] = []
        self._batch_bytes = 0
        self._seq = 0
        self.records: dict[str, int] = {}

    def add(self, record: SpanRecord) -> None:
        """Spill one record under its store."""
        store = store_of(record)
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = _DISPATCH
        pickler.dump(record)
        blob = buffer.getvalue()
        self._seq += 1
        self._batch.append((store, self._seq, blob))
        self._batch_bytes += len(blob) + len(store) + 64
        self.records[store] = self.records.get(store, 0) + 1
        if self._batch_bytes >= self._flush_at:
            self._flush()

    def _flush(self) -> None:
        self._db.executemany("INSERT INTO spans VALUES (?, ?, ?)", self._batch)
        self._db.commit()
        self._batch = []
        self._batch_bytes = 0

    def finish(self) -> None:
        """Write what is buffered and index by store (call once, before :meth:`store_records`)."""
        self._flush()
        self._db.execute("CREATE INDEX spans_by_store ON spans (store, seq)")
        self._db.commit()

    def store_records(self, store: str) -> list[SpanRecord]:
        """The records of one store, in reading order."""
        rows = self._db.execute("SELECT blob FROM spans WHERE store = ? ORDER BY seq", (store,))
        return [pickle.loads(blob) for (blob,) in rows]

    def close(self) -> None:
        """Close and delete the file."""
        self._db.close()
        Path(self.path).unlink(missing_ok=True)


# --- the driver ------------------------------------------------------------------------------
def run_scaled(
    sources: Sequence[str],
    method: Method,
    *,
    executor: str | None = None,
    memory_bound: int | str | None = None,
    cases_file: str | None = None,
    out: str | os.PathLike[str] | None = None,
    strict: bool = False,
    progress: TextIO | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
    retries: int = DEFAULT_RETRIES,
    partitions: int | None = None,
    spill_dir: str | None = None,
) -> tuple[list[Verdict], BatchSummary]:
    """The batch job on an executor, or in one process with bounded memory.

    Same arguments and results as :func:`~memtrace_otel.attribution.run_batch`, plus:

    Args:
        executor: ``local[N]`` or ``dask://HOST:PORT``; ``None`` runs in this process.
        memory_bound: without an executor, spill records per store to SQLite to stay near this
            many bytes (``"512M"``).
        retries: runs of a lost worker's partition beyond the first.
        partitions: how many partitions (default: four per worker).
        spill_dir: where the spill file goes.

    With an executor the verdicts file is written once every partition is done, in the order
    of the single-process run.
    """
    started = time.perf_counter()
    summary = BatchSummary(method=method.name)
    spec = parse_executor(executor) if executor else None
    bound = parse_size(memory_bound) if memory_bound is not None else None
    if spec is None and bound is None:
        raise ValueError("run_scaled needs an executor or a memory bound")
    cases: dict[str, Case] | None = None
    case_order: list[Case] = []
    skipped: list[str] = []
    if cases_file is not None:
        case_order = list(load_cases(cases_file, strict=False, skipped=skipped))
        cases = {}
        for case in case_order:
            cases.setdefault(case.case_id, case)
    out_path = Path(out) if out is not None else None
    done: set[str] = set()
    if out_path is not None:
        done, summary.repaired_out = completed_case_ids(out_path)
    shared = _Shared(method, cases, frozenset(done))
    results: dict[str, StoreResult] = {}
    poison: list[dict[str, str]] = []
    plan: Plan | None = None
    no_store_graph: nx.MultiDiGraph | None = None
    if spec is None:
        assert bound is not None
        no_store_graph = _run_spilled(
            sources, shared, bound, strict, summary, results, spill_dir, progress
        )
    else:
        plan = plan_sources(sources, strict=strict, summary=summary)
        count = partitions or spec.workers * PARTITIONS_PER_WORKER
        work = make_partitions(plan, count)
        _run_executor(spec, work, shared, retries, results, poison, progress)
    summary.source_errors.extend(skipped[:5])
    summary.skipped_cases += len(skipped)

    # Place each case in one store, as the single-process run does: the first store (sorted)
    # whose graph holds its ops.
    where: dict[str, str] = {}
    for store in sorted(results):
        for case_id in results[store].case_ids:
            where.setdefault(case_id, store)
    chosen: list[tuple[str, str]] = []
    leftovers: list[Case] = []
    if cases is not None:
        for case in case_order:
            found = where.get(case.case_id)
            if found is None:
                if case.verdict == JudgeVerdict.CORRECT or poison:
                    # With a poison partition a case may live in its stores: it is reported
                    # with the partition, not as missing from the traces.
                    continue
                summary.cases_not_in_traces.append(case.case_id)
                chosen.append((NO_STORE, case.case_id))
                leftovers.append(case)
                continue
            if case.case_id in results[found].chosen:  # else judged correct in the graph
                chosen.append((found, case.case_id))
    else:
        for store in sorted(results):
            for case_id in results[store].failed:
                if where.get(case_id) == store:
                    chosen.append((store, case_id))

    # Cases found in no store run against the store-less graph, or an empty one.
    extra: StoreResult | None = None
    todo = [case for case in leftovers if case.case_id not in done]
    if todo:
        if spec is not None and plan is not None and NO_STORE in plan.records:
            holder: dict[str, StoreResult] = {}
            no_store = make_partitions(plan, 1, [NO_STORE])
            _run_executor(spec, no_store, shared, retries, holder, poison, None, forced=todo)
            extra = holder.get(NO_STORE)
        else:
            G = no_store_graph if no_store_graph is not None else nx.MultiDiGraph()
            extra = attribute_store(NO_STORE, G, method, cases, frozenset(done), todo)

    summary.cases = len(chosen)
    summary.truncated_captured += sum(r.truncated_captured for r in results.values())
    verdicts: list[Verdict] = []
    for store, case_id in chosen:
        if case_id in done:
            summary.resumed += 1
            continue
        holder_result = extra if case_id not in where else results[store]
        if holder_result is None:  # the store-less partition was poison: reported already
            continue
        if case_id in holder_result.errors:
            summary.failed.append({"case_id": case_id, "error": holder_result.errors[case_id]})
            continue
        verdict = holder_result.verdicts[case_id]
        verdicts.append(verdict)
        summary.add(verdict)
    summary.failed.extend(poison)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with open(out_path, "a", encoding="utf-8") as handle:
            for verdict in verdicts:
                handle.write(verdict.to_json() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    if on_verdict is not None:
        for verdict in verdicts:
            on_verdict(verdict)
    summary.seconds = round(time.perf_counter() - started, 3)
    return verdicts, summary


def _run_spilled(
    sources: Sequence[str],
    shared: _Shared,
    bound: int,
    strict: bool,
    summary: BatchSummary,
    results: dict[str, StoreResult],
    spill_dir: str | None,
    progress: TextIO | None,
) -> nx.MultiDiGraph | None:
    """One process, bounded memory: spill every record, then one store's graph at a time.

    Returns:
        The store-less graph, if any (for cases found in no store).
    """
    no_store_graph = None
    spill = SpillIndex(bound, spill_dir)
    try:
        for spec in sources:
            source = open_source(spec, strict=strict)
            for record in source.records():
                spill.add(record)
            _count_source(summary, source.stats)
        spill.finish()
        stores = sorted(spill.records)
        for number, store in enumerate(stores, 1):
            G = build_graph(spill.store_records(store))
            results[store] = attribute_store(
                store, G, shared.method, shared.cases, shared.done, forget_tokens=True
            )
            if store == NO_STORE:
                no_store_graph = G
            del G
            _progress(progress, number, len(stores))
    finally:
        spill.close()
        if progress is not None and spill.records:
            progress.write("\n")
    return no_store_graph


def _progress(progress: TextIO | None, number: int, total: int) -> None:
    if progress is not None:
        progress.write(f"\rattributing: {number}/{total} partitions")
        progress.flush()


def _run_executor(
    spec: ExecutorSpec,
    work: list[Partition],
    shared: _Shared,
    retries: int,
    results: dict[str, StoreResult],
    poison: list[dict[str, str]],
    progress: TextIO | None,
    forced: Sequence[Case] = (),
) -> None:
    """Run the partitions; store results by store, report poison partitions."""
    finished: Iterator[tuple[Partition, PartitionResult | BaseException]]
    if spec.kind == "dask":
        finished = _run_dask(spec.address, work, shared, retries, forced)
    else:
        finished = _run_pool(spec.workers, work, shared, retries, forced)
    for number, (partition, outcome) in enumerate(finished, 1):
        if isinstance(outcome, BaseException):
            poison.append(
                {
                    "case_id": f"partition {partition.number}",
                    "error": f"{type(outcome).__name__}: {outcome} "
                    f"(stores {', '.join(partition.stores)})",
                }
            )
        else:
            for result in outcome.stores:
                results[result.store] = result
        _progress(progress, number, len(work))
    if progress is not None and work:
        progress.write("\n")


def _run_pool(
    workers: int,
    work: list[Partition],
    shared: _Shared,
    retries: int,
    forced: Sequence[Case],
) -> Iterator[tuple[Partition, PartitionResult | BaseException]]:
    """A local process pool; a dead worker breaks the pool, which is rebuilt for the rest."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    attempts = {p.number: 0 for p in work}
    pending = list(work)
    context = multiprocessing.get_context("fork")
    while pending:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures: dict[Future[PartitionResult], Partition] = {
                pool.submit(run_partition, p, shared, forced): p for p in pending
            }
            pending = []
            while futures:
                ready, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in ready:
                    partition = futures.pop(future)
                    try:
                        yield partition, future.result()
                    except BrokenProcessPool as exc:
                        attempts[partition.number] += 1
                        if attempts[partition.number] > retries:
                            yield partition, exc
                        else:
                            pending.append(partition)
                    except Exception as exc:
                        yield partition, exc


def _run_dask(
    address: str,
    work: list[Partition],
    shared: _Shared,
    retries: int,
    forced: Sequence[Case],
) -> Iterator[tuple[Partition, PartitionResult | BaseException]]:
    """An existing Dask scheduler; it reschedules the tasks of lost workers itself."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise ValueError(
            "the dask executor needs dask.distributed: pip install 'memtrace-otel[dask]'"
        ) from None
    try:
        client: Any = Client(address, set_as_default=False, timeout=30)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as exc:
        raise BackendError(f"cannot reach the Dask scheduler: {exc}", url=address) from None
    with client:
        [payload] = client.scatter([shared], broadcast=True, hash=False)
        futures = {
            client.submit(run_partition, p, payload, forced, retries=retries, pure=False): p
            for p in work
        }
        for future in as_completed(list(futures), loop=client.loop):  # type: ignore[no-untyped-call]
            partition = futures[future]
            try:
                yield partition, future.result()
            except Exception as exc:
                yield partition, exc

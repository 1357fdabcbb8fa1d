"""The batch job at scale: partitions by memory store, run in a process pool, on Dask, or spilled.

Work is partitioned by memory store (``gen_ai.memory.store.id``), never by trace: a case's graph
spans the traces that built its store and the trace that asked the question. The executor first
scans the JSON Lines files in parallel, cut into byte ranges, for the lines that hold each
store's spans (reading only store ids, see :mod:`._partitions`); each partition then re-reads
only those lines, keeps its stores' spans, builds one graph per store and attributes that
store's cases. The driver merges the per-store results in the order of the single-process run,
so verdicts and summaries are the same whatever the executor.

Executors (``--executor``):

- ``inline``: this process, one partition at a time (what ``memtrace attribute`` does by
  default on JSON Lines files: memory is set by the largest partition, not by the export);
- ``local[N]`` (``local``: one worker per core): a pool of ``N`` local processes;
- ``dask://HOST:PORT`` (or ``tcp://HOST:PORT``): an existing ``dask.distributed`` scheduler;
  the workers read the files themselves, so sources must be paths every worker sees (a shared
  disk, or fsspec URLs such as ``s3://bucket/traces/``).

A lost worker's task (a scan or a partition) is run again (Dask reschedules it; the local pool
is rebuilt); a partition that raises (a poison partition) is reported in ``summary.failed`` and
the others complete; a range whose scan keeps failing is scanned in the driver instead.

Without an executor, ``memory_bound`` keeps one process's memory bounded: records are spilled
per store to a SQLite file in a temp folder, then one store's graph is built at a time.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import functools
import io
import os
import pickle
import sqlite3
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO, TypeVar

import networkx as nx

from memtrace_otel._progress import Progress
from memtrace_otel._shim import nodes_of
from memtrace_otel.attribution._base import Method
from memtrace_otel.attribution._model import Case, Verdict, load_cases
from memtrace_otel.errors import BackendError, MemtraceError
from memtrace_otel.graph import build_graph, graph_index
from memtrace_otel.job._batch import (
    ERASED_KEY,
    PREPARE_WINDOW,
    BatchSummary,
    LineageJoin,
    QuietHeap,
    count_truncated_captured,
    erased_verdict,
    is_backend,
    load_with_progress,
    op_refs,
    pending_reason,
    prepare,
    resolved_outcomes,
    store_of,
    take_outcomes,
)
from memtrace_otel.job._feedback import Pick, StoreCases, decide_failed, outcome_index
from memtrace_otel.job._options import (
    ExecutorSpec,
    RunOptions,
    ViewMaker,
    parse_executor,
    parse_size,
)
from memtrace_otel.job._partitions import (
    Found,
    Key,
    Partition,
    Plan,
    PlannedPartitions,
    Range,
    Tally,
    adapt_partition,
    address_lines,
    check_file_spec,
    first_messages,
    is_json_lines,
    load_partition,
    make_partitions,
    merge_scan,
    plan_sources,
    route_upstream,
    scan_range,
    shared_stores,
    split_ranges,
)
from memtrace_otel.job._verdict_log import VerdictLog
from memtrace_otel.semconv import JudgeVerdict, SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.sources import (
    BACKEND_SCHEMES,
    Outcome,
    OutcomeRule,
    SourceStats,
    expand_paths,
    open_source,
)
from memtrace_otel.sources._common import NOT_A_REGULAR_FILE, make_error
from memtrace_otel.sources._content import (
    ContentResolver,
    ContentStats,
    ContentStoreError,
    resolve_records,
)
from memtrace_otel.sources._outcomes import DEFAULT_RULE
from memtrace_otel.sources._stores import NO_STORE
from memtrace_otel.sources._upstream import is_upstream_memory_op

__all__ = [
    "ExecutorSpec",
    "SpillIndex",
    "default_executor",
    "make_partitions",
    "parse_executor",
    "parse_size",
    "plan_sources",
    "run_scaled",
]

PARTITIONS_PER_WORKER = 4
"""More partitions than workers balance uneven stores and make a lost worker cost less."""

PARTITION_SPANS = 12_000
"""About the most spans a partition holds (a bigger store gets a partition of its own): what
bounds a partition's memory (records and one store's graph at a time, some 100-200 MB) whatever
the size of the export."""

_CASE_ERRORS = (MemtraceError, ValueError, KeyError, TypeError, RuntimeError)
"""What a method may raise for one case (the same list as the single-process run)."""


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
    view: StoreCases | None = None
    """What deciding the failed cases needs of the graph (without a cases file)."""
    picks: dict[str, Pick] = field(default_factory=dict)
    """The picks attributed here (without a cases file), by case id."""
    unsure: set[str] = field(default_factory=set)
    """Picked cases whose outcomes other stores' views could resolve otherwise."""
    stale: set[str] = field(default_factory=set)
    """Cases done in ``--out`` but redone here (``--redo-stale``: newer ops arrived)."""
    views: dict[str, Any] = field(default_factory=dict)
    """What ``shared.view`` drew of each case attributed (or resumed) here, by case id."""


@dataclass
class PartitionResult:
    """The results of one partition's stores, what its loading counted, and the seconds it took."""

    number: int
    stores: list[StoreResult]
    seconds: float
    tally: Tally = field(default_factory=Tally)
    content: ContentStats | None = None
    """What resolving its own stores' content references did (``None``: not asked to)."""


def attribute_store(
    store: str,
    G: nx.MultiDiGraph,
    shared: _Shared,
    forced: Sequence[Case] = (),
    forget_tokens: bool = False,
) -> StoreResult:
    """Attribute the failed cases of one store's graph.

    The cases are those of the cases file (``shared.cases``), or the driver's own picks for this
    store (``shared.picks``, a second round), or else this store's share of the one decision of
    :func:`~memtrace_otel.job._feedback.decide_failed` (judge ops and the outcomes),
    taken on this store alone: the driver takes it again over every store's view and redoes
    what differs.

    Args:
        store: the store id.
        G: its graph.
        shared: the method, cases, outcomes and what is done already.
        forced: cases to attribute against ``G`` whatever its ops (cases found in no store).
        forget_tokens: also empty the evidence method's text cache afterwards (bounded runs).
    """
    index = graph_index(G)
    # With a cases file, only its cases are ever placed in a store (the others are skipped).
    wanted = shared.cases
    held = list(index.case_ops) if wanted is None else [c for c in index.case_ops if c in wanted]
    result = StoreResult(store, held, sorted(index.failed))
    result.truncated_captured = count_truncated_captured(G)
    todo: list[Case] = list(forced)
    if shared.picks is not None:
        picks = shared.picks.get(store, [])
        todo += [pick.case(G) for pick in picks]
        result.picks = {pick.case_id: pick for pick in picks}
    elif shared.cases is None:
        outcomes = outcome_index(shared.outcomes, shared.rule)  # judged and screened once
        result.view = StoreCases.of(G, outcomes)
        picks, _, _, result.unsure = decide_failed({store: result.view}, outcomes, shared.rule)
        todo += [pick.case(G) for pick in picks]
        result.picks = {pick.case_id: pick for pick in picks}
    else:
        for case_id in result.case_ids:
            case = shared.cases.get(case_id)
            if case is None:
                continue
            verdict = case.verdict
            if verdict is None:
                verdict = index.case_from_graph(case_id).verdict
            if verdict != JudgeVerdict.CORRECT:
                todo.append(case)
    result.chosen = [case.case_id for case in todo]
    if shared.attributed_at is not None:  # --redo-stale: verdicts older than the store's ops
        newest = max(
            (d.get("end") or 0 for d in nodes_of(G).values() if d.get("type") == "op"), default=0
        )
        result.stale = {
            case.case_id
            for case in todo
            if case.case_id in shared.attributed_at
            and newest > shared.attributed_at[case.case_id] * 1e9
        }
    try:
        pending = [c for c in todo if c.case_id not in shared.done or c.case_id in result.stale]
        for i, case in enumerate(pending):
            if i % PREPARE_WINDOW == 0:
                prepare(shared.method, [(G, c) for c in pending[i : i + PREPARE_WINDOW]])
            try:
                result.verdicts[case.case_id] = erased_verdict(
                    G, case, store, shared.method.name
                ) or shared.method.attribute(G, case)
            except _CASE_ERRORS as exc:
                result.errors[case.case_id] = f"{type(exc).__name__}: {exc}"
        if shared.view is not None:
            earlier = shared.earlier or {}
            for case in todo:
                made = result.verdicts.get(case.case_id) or earlier.get(case.case_id)
                result.views[case.case_id] = shared.view(G, case.case_id, made, case)
    finally:
        _forget(G, tokens=forget_tokens)
    return result


def _forget(G: nx.MultiDiGraph, *, tokens: bool) -> None:
    """Drop what the attribution caches hold of a store once its cases are done.

    The graph index cache is weak, but its values point back at their graph, so a graph would
    otherwise live as long as the process; the evidence method's token cache holds the texts
    of the last store's records (they never recur in another store).
    """
    from memtrace_otel.graph import _index

    _index._cache.pop(G, None)
    if tokens:
        forget_texts()


def forget_texts() -> None:
    """Empty the attribution methods' text caches (tokens, readings of record values).

    They are bounded by entry count, not by size: filled with one store's long values after
    another, they held some 100 MB by the tenth partition. A store's texts never recur in
    another store, so a bounded run empties them after each partition.
    """
    from memtrace_otel.attribution import _evidence, _locate, _text, _tokens

    for cached in (
        _tokens._content_tokens,
        _tokens.count_tokens,
        _text._segmented,
        _text.entity_tokens,
        _evidence._held,
        _evidence._text,
        _locate._read,
    ):
        cached.cache_clear()


@dataclass(frozen=True)
class _Shared:
    """What every partition needs: shipped once to each worker."""

    method: Method
    cases: dict[str, Case] | None
    done: frozenset[str]
    outcomes: tuple[Outcome, ...] = ()
    """Every evaluation the sources hold (without a cases file)."""
    rule: OutcomeRule = DEFAULT_RULE
    attributed_at: dict[str, float] | None = None
    """With ``--redo-stale``: when each final verdict in ``--out`` was made."""
    picks: dict[str, list[Pick]] | None = None
    """A second round: exactly these cases per store (the driver's decision)."""
    view: ViewMaker | None = None
    """Draws each case's report page while its store's graph is held (``--report``)."""
    earlier: dict[str, Verdict] | None = None
    """With ``view``: the verdicts in ``--out`` of cases done already (resumed cases' pages)."""
    content: ContentReading | None = None
    """Whether and where content references are resolved (``None``: they are not)."""


@dataclass(frozen=True)
class ContentReading:
    """How a scaled run resolves content references: from ``url`` (``--content``), or where
    each reference points (``None``). Each partition (each store, spilled) reads with a resolver
    of its own, so what it caches goes with it."""

    url: str | None = None

    def resolver(self) -> ContentResolver:
        return ContentResolver(self.url)


def resolve_stores(
    by_store: dict[str, list[SpanRecord]], owned: Iterable[str], reading: ContentReading
) -> tuple[dict[str, list[SpanRecord]], ContentStats]:
    """Each store's records with their content references resolved (every record of a store is
    in ``by_store``, so a store missing an object keeps its references alone, as in one
    process); and what resolving ``owned`` stores' did (the others are counted by the
    partition that owns them)."""
    mine, others = reading.resolver(), reading.resolver()
    owned = set(owned)
    resolved = {
        store: resolve_records(mine if store in owned else others, records, store_of)
        for store, records in by_store.items()
    }
    return resolved, mine.stats


def mark_erased(G: nx.MultiDiGraph, store: str, stats: ContentStats) -> None:
    """Note on ``G`` that its store's content was erased (its cases then abstain, saying so)."""
    if store in stats.erased:
        G.graph[ERASED_KEY] = stats.erased[store] or "unknown time"


def run_partition(
    partition: Partition, shared: _Shared, forced: Sequence[Case] = ()
) -> PartitionResult:
    """Load a partition's spans, build its graphs one store at a time and attribute its cases."""
    started = time.perf_counter()
    results = []
    content = None
    with QuietHeap() as heap:  # the partition's records stay in memory: keep the collector off
        by_store, tally, order = load_partition(partition)
        if shared.content is not None:
            by_store, content = resolve_stores(by_store, partition.stores, shared.content)
        if partition.traces:  # upstream GenAI spans, with the chat calls of their traces
            by_store = adapt_partition(by_store, order)
            del order
        heap.loaded()
        join = LineageJoin(
            {s: records for s, records in by_store.items() if s not in partition.case_stores}
        )
        for store in partition.stores:
            records = by_store.pop(store)
            if store == NO_STORE and not any(A.MEMTRACE_OP_KIND in r.attributes for r in records):
                records = []  # other instrumentations' spans (HTTP, chat calls): no graph, as in
            G = build_graph(records + join.records_for(store, records))  # one process
            if content is not None:
                mark_erased(G, store, content)
            heap.built()
            del records
            results.append(attribute_store(store, G, shared, forced))
    forget_texts()
    return PartitionResult(partition.number, results, time.perf_counter() - started, tally, content)


STREAM_ABOVE_BYTES = 64 << 20
"""Exports smaller than this (the files' total bytes, compressed or not) are read into memory by
default, where every feature of a run is at hand (upstream GenAI spans adapted); larger ones stream
by store (content references resolved, the report's timelines and review precision the same)."""


def default_executor(
    sources: Sequence[str], stream_above: int | None = None
) -> tuple[str | None, str | None]:
    """How ``memtrace attribute`` runs ``sources`` when told nothing: ``(executor, memory_bound)``.

    Files of less than ``stream_above`` bytes in all (default :data:`STREAM_ABOVE_BYTES`) are read
    into memory. Larger plain JSON Lines files (and folders and globs of them) stream by store in
    this process (``inline``: an index pass, then one partition at a time); other large files
    (compressed, protobuf, whole documents) are spilled per store to SQLite
    (:data:`DEFAULT_SPILL`); a live backend (``jaeger+``/``tempo+`` URLs, bounded by
    ``--max-traces``) or a spec that names nothing is read into memory, where the run reports
    what is wrong with it.
    """
    threshold = STREAM_ABOVE_BYTES if stream_above is None else stream_above
    spilled = False
    total = 0
    for spec in sources:
        if str(spec).startswith(BACKEND_SCHEMES):
            return None, None
        try:
            paths = expand_paths(spec)
            total += sum(os.path.getsize(path) for path in paths)
        except (MemtraceError, OSError):
            return None, None
        spilled = spilled or not all(is_json_lines(path) for path in paths)
    if total < threshold:
        return None, None
    return (None, DEFAULT_SPILL) if spilled else ("inline", None)


DEFAULT_SPILL = "512M"
"""The memory bound of a default run over files that cannot be read by line."""


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
        # ``trace``: set for the records that name no store, which upstream GenAI traces
        # give to the stores of their traces (see :meth:`loose_rows`).
        self._db.execute("CREATE TABLE spans (store TEXT, seq INTEGER, trace TEXT, blob BLOB)")
        self._flush_at = max(1 << 20, bound // 8)
        self._batch: list[tuple[str, int, str | None, bytes]] = []
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
        self._batch.append((store, self._seq, record.trace_id if store == NO_STORE else None, blob))
        self._batch_bytes += len(blob) + len(store) + 64
        self.records[store] = self.records.get(store, 0) + 1
        if self._batch_bytes >= self._flush_at:
            self._flush()

    def _flush(self) -> None:
        self._db.executemany("INSERT INTO spans VALUES (?, ?, ?, ?)", self._batch)
        self._db.commit()
        self._batch = []
        self._batch_bytes = 0

    def finish(self) -> None:
        """Write what is buffered and index by store (call once, before :meth:`store_records`)."""
        self._flush()
        self._db.execute("CREATE INDEX spans_by_store ON spans (store, seq)")
        self._db.execute("CREATE INDEX loose_by_trace ON spans (trace) WHERE trace IS NOT NULL")
        self._db.commit()

    def store_records(self, store: str) -> list[SpanRecord]:
        """The records of one store, in reading order."""
        rows = self._db.execute("SELECT blob FROM spans WHERE store = ? ORDER BY seq", (store,))
        return [pickle.loads(blob) for (blob,) in rows]

    def store_rows(self, store: str) -> list[tuple[int, SpanRecord]]:
        """``(reading order, record)`` of one store's records."""
        rows = self._db.execute(
            "SELECT seq, blob FROM spans WHERE store = ? ORDER BY seq", (store,)
        )
        return [(seq, pickle.loads(blob)) for seq, blob in rows]

    def loose_rows(self, traces: Iterable[str]) -> list[tuple[int, SpanRecord]]:
        """``(reading order, record)`` of the records of ``traces`` that name no store."""
        found: list[tuple[int, SpanRecord]] = []
        wanted = sorted(set(traces))
        for start in range(0, len(wanted), 500):  # under SQLite's limit on parameters
            part = wanted[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(f"SELECT seq, blob FROM spans WHERE trace IN ({marks})", part)
            found += [(seq, pickle.loads(blob)) for seq, blob in rows]
        found.sort(key=lambda row: row[0])
        return found

    def close(self) -> None:
        """Close and delete the file."""
        self._db.close()
        Path(self.path).unlink(missing_ok=True)


# --- the driver ------------------------------------------------------------------------------
def run_scaled(
    sources: Sequence[str],
    method: Method,
    options: RunOptions | None = None,
    *,
    verdict_lines: dict[str, list[tuple[int, Any]]] | None = None,
    **fields: Any,
) -> tuple[list[Verdict], BatchSummary]:
    """The batch job on an executor, or in one process with bounded memory.

    Same arguments and results as :func:`~memtrace_otel.job.run_batch`: ``options`` (or its
    fields as keywords) must name an executor (``executor=None`` runs in this process) or a
    memory bound; ``retries``, ``partitions`` and ``spill_dir`` apply here only.

    Failed cases are found as in one process (feedback spans, evaluation events and log
    records judged by ``rule``, judge ops, or the cases file): the scans collect the
    evaluations, each store takes its share of the decision, and the driver takes the decision
    again over every store's view and redoes, in a second round, the few cases another store's
    view changed (an outcome naming a case of one store from a trace of another).

    Verdicts are appended to ``out`` as each partition (each store, with a memory bound)
    finishes, so a killed run keeps the partitions it finished; a case whose ops turn out to be
    in an earlier store too gets its single-process verdict appended again at the end (the last
    line of a case counts). Verdicts another store's view could change wait for the end.

    ``verdict_lines``, when given, gets the lines the scans found holding verdict or review
    spans, per scanned file (:func:`~memtrace_otel.job._reviews.read_verdict_spans` reads
    those instead of the file again).
    """
    options = RunOptions(**fields) if options is None else dataclasses.replace(options, **fields)
    started = time.perf_counter()
    summary = BatchSummary(method=method.name)
    if not options.scaled:
        raise ValueError("run_scaled needs an executor or a memory bound")
    out = options.out
    with contextlib.ExitStack() as stack:
        log = out if isinstance(out, VerdictLog) or out is None else VerdictLog(out)
        if log is not None and log is not out:
            stack.enter_context(log)
        verdicts = _run_scaled(sources, method, options, log, summary, verdict_lines)
        if log is not None:
            summary.recount(log.entries.values())
    if options.on_verdict is not None:
        for verdict in verdicts:
            options.on_verdict(verdict)
    summary.seconds = round(time.perf_counter() - started, 3)
    return verdicts, summary


def _run_scaled(
    sources: Sequence[str],
    method: Method,
    options: RunOptions,
    log: VerdictLog | None,
    summary: BatchSummary,
    verdict_lines: dict[str, list[tuple[int, Any]]] | None = None,
) -> list[Verdict]:
    spec, bound, cases_file = options.executor_spec, options.bound, options.cases_file
    strict, progress, partitions = options.strict, options.progress, options.partitions
    rule, redo_stale, view, views = options.rule, options.redo_stale, options.view, options.views
    cases: dict[str, Case] | None = None
    case_order: list[Case] = []
    skipped: list[str] = []
    if cases_file is not None:
        case_order, cases = _wanted_cases(load_cases(cases_file, strict=False, skipped=skipped))
    done: set[str] = set()
    attributed_at: dict[str, float] | None = None
    if log is not None:
        done, summary.repaired_out = log.done(), log.repaired
        if redo_stale:
            attributed_at = {c: log.entries[c].attributed_at for c in done}
    earlier = (
        {c: log.entries[c].verdict for c in done} if view is not None and log is not None else None
    )
    shared = _Shared(
        method,
        cases,
        frozenset(done),
        rule=rule,
        attributed_at=attributed_at,
        view=view,
        earlier=earlier,
        content=(
            ContentReading(options.source_options.get("content"))
            if options.resolve_content
            else None
        ),
    )
    content = ContentStats()  # what resolving content references did, over the whole run
    results: dict[str, StoreResult] = {}
    written: dict[str, Verdict] = {}
    picks: list[Pick] = []

    def append(result: StoreResult) -> None:
        """Append a finished store's verdicts (kill -9 keeps them)."""
        if log is None:
            return
        for case_id, verdict in result.verdicts.items():
            if case_id not in written and case_id not in result.unsure:
                written[case_id] = verdict
                log.append(verdict, pending_reason(False, summary))

    def settle(outcomes: Sequence[Outcome]) -> dict[str, list[Pick]]:
        """Without a cases file: the one decision over every store's view; the picks that a
        store's own share got otherwise, to redo by store."""
        if cases is not None:
            return {}
        views = {s: r.view for s, r in results.items() if r.view is not None}
        found, stats, by_source, _ = decide_failed(views, outcomes, rule)
        summary.feedback = stats.to_json()
        summary.cases_by_source.update(by_source)
        picks.extend(found)
        redo: dict[str, list[Pick]] = {}
        for pick in found:
            if results[pick.store].picks.get(pick.case_id) != pick:
                redo.setdefault(pick.store, []).append(pick)
        return redo

    poison: list[dict[str, str]] = []
    with contextlib.ExitStack() as stack:
        engine = stack.enter_context(_engine(spec, options.retries)) if spec is not None else None
        plan: Plan | None = None
        no_store_graph: nx.MultiDiGraph | None = None
        if engine is None:
            assert bound is not None
            no_store_graph, shared = _run_spilled(
                sources,
                shared,
                options,
                summary,
                results,
                on_result=append,
                settle=settle,
                content=content,
            )
        else:
            wanted = partitions or engine.workers * PARTITIONS_PER_WORKER
            counts = _Counts(content=content)
            outcomes: list[Outcome] = []
            plan = _plan(engine, sources, strict, counts, wanted, outcomes, shared.content)
            route_upstream(plan)  # each upstream store gets the chat calls of its traces
            if verdict_lines is not None:
                verdict_lines.update({p: plan.verdict_lines.get(p, []) for p in plan.scanned})
            shared = dataclasses.replace(shared, outcomes=tuple(outcomes))
            if partitions is None:  # enough partitions that none holds much more than its share
                wanted = max(wanted, -(-sum(plan.records.values()) // PARTITION_SPANS))
            work = _work(engine, plan, wanted, shared=shared_stores(plan))
            _run_partitions(engine, work, shared, results, poison, counts, progress, append)
            counts.report(summary, plan.files)
            redo = settle(shared.outcomes)
            if redo:  # a second round, for the picks another store's view changed
                again: dict[str, StoreResult] = {}
                work = _work(engine, plan, len(redo), list(redo), shared_stores(plan))
                second = dataclasses.replace(shared, picks=redo)
                _run_partitions(engine, work, second, again, poison, None, None)
                for store, result in again.items():
                    _merge(results[store], result)
        summary.source_errors.extend(skipped[:5])
        summary.skipped_cases += len(skipped)
        if content.any:
            summary.content = content.to_json()

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
            summary.cases_by_source["cases-file"] = len(chosen)
        else:
            chosen = [(pick.store, pick.case_id) for pick in picks]

        # Cases found in no store run against the store-less graph, or an empty one.
        extra: StoreResult | None = None
        todo = [case for case in leftovers if case.case_id not in done]
        if todo:
            if engine is not None and plan is not None and NO_STORE in plan.records:
                holder: dict[str, StoreResult] = {}
                no_store = _work(engine, plan, 1, [NO_STORE], shared_stores(plan))
                _run_partitions(engine, no_store, shared, holder, poison, None, None, forced=todo)
                extra = holder.get(NO_STORE)
            else:
                G = no_store_graph if no_store_graph is not None else nx.MultiDiGraph()
                extra = attribute_store(NO_STORE, G, shared, todo)

    summary.cases = len(chosen)
    summary.truncated_captured += sum(r.truncated_captured for r in results.values())
    verdicts: list[Verdict] = []
    not_found = set(summary.cases_not_in_traces)
    for store, case_id in chosen:
        holder_result = extra if case_id not in where else results[store]
        if views is not None and holder_result is not None and case_id in holder_result.views:
            views[case_id] = holder_result.views[case_id]
        if case_id in done and (holder_result is None or case_id not in holder_result.stale):
            summary.resumed += 1
            continue
        if holder_result is None:  # the store-less partition was poison: reported already
            continue
        summary.redone += case_id in holder_result.stale
        if case_id in holder_result.errors:
            summary.failed.append({"case_id": case_id, "error": holder_result.errors[case_id]})
            continue
        verdict = holder_result.verdicts[case_id]
        verdicts.append(verdict)
        summary.add(verdict)
        if log is not None and (written.get(case_id) is not verdict or case_id in not_found):
            log.append(verdict, pending_reason(case_id in not_found, summary))
    summary.failed.extend(poison)
    return verdicts


def _wanted_cases(read: Iterable[Case]) -> tuple[list[Case], dict[str, Case]]:
    """The entries of a cases file a streamed run attributes (all but those marking the answer
    correct), in file order, and the first of them of each case id.

    A single-process run skips each correct entry and attributes every other one, so a correct
    entry is never needed (a cases file is mostly correct answers: 34,416 of bench_scale's
    38,400 at 16x; kept, even with their texts dropped, they were most of the run's lasting
    memory), and an id marked correct in one line and not in another is attributed.
    """
    order = [case for case in read if case.verdict != JudgeVerdict.CORRECT]
    cases: dict[str, Case] = {}
    for case in order:
        cases.setdefault(case.case_id, case)
    return order, cases


def _merge(result: StoreResult, again: StoreResult) -> None:
    """Take a second round's verdicts of a store (its picks replace the first round's)."""
    for case_id, pick in again.picks.items():
        result.picks[case_id] = pick
        result.verdicts.pop(case_id, None)
        result.errors.pop(case_id, None)
        result.unsure.discard(case_id)
    result.verdicts.update(again.verdicts)
    result.errors.update(again.errors)
    result.stale |= again.stale
    result.views.update(again.views)


def _run_spilled(
    sources: Sequence[str],
    shared: _Shared,
    options: RunOptions,
    summary: BatchSummary,
    results: dict[str, StoreResult],
    *,
    on_result: Callable[[StoreResult], None],
    settle: Callable[[Sequence[Outcome]], dict[str, list[Pick]]],
    content: ContentStats | None = None,
) -> tuple[nx.MultiDiGraph | None, _Shared]:
    """One process, bounded memory: spill every record (collecting the evaluations), then one
    store's graph at a time; then redo what ``settle`` (the decision over every store) changed.
    With ``shared.content``, each store's content references are resolved as its graph is
    built (what that did is added to ``content``; a redo adds nothing).

    Returns:
        The store-less graph, if any (for cases found in no store), and ``shared`` with the
        evaluations.
    """
    bound, strict, progress = options.bound, options.strict, options.progress
    source_options = options.source_options
    assert bound is not None
    no_store_graph = None
    spill = SpillIndex(bound, options.spill_dir)
    writer_store: dict[str, str] = {}
    case_stores: set[str] = set()
    upstream: dict[str, set[str]] = {}  # store -> the traces of its upstream GenAI memory spans
    mates: dict[str, set[str]] = {}
    loose_ops = False  # whether a span naming no store holds an op
    outcomes: list[Outcome] = []

    reading = shared.content
    outcome_reader = reading.resolver() if reading is not None else None

    def adapted(store: str) -> tuple[dict[str, list[SpanRecord]], list[str]]:
        """An upstream store's records, the other stores' of its traces and the spans of its
        traces that name no store (chat calls), with the stores of each in reading order."""
        rows = {s: spill.store_rows(s) for s in (store, *sorted(mates.get(store, ())))}
        rows[NO_STORE] = spill.loose_rows(upstream[store])
        order = [s for _, s in sorted((seq, s) for s, held in rows.items() for seq, _ in held)]
        return {s: [record for _, record in held] for s, held in rows.items()}, order

    def graph(store: str, first: bool = True) -> nx.MultiDiGraph:
        order = None
        foreign: set[str] = set()
        if store in upstream:
            group, order = adapted(store)
        else:
            # Spans naming no store and holding no op (HTTP, chat calls) make no graph, as in one
            # process: not even read back (upstream traces hold as many as their memory spans).
            records = [] if store == NO_STORE and not loose_ops else spill.store_records(store)
            # Ops of caseless stores that wrote what this one reads join it (one store hop here).
            foreign = {
                writer_store[ref]
                for record in records
                for ref in op_refs(record, A.MEMTRACE_OP_INPUTS)
                if writer_store.get(ref, store) != store
            } - case_stores
            group = {store: records, **{f: spill.store_records(f) for f in foreign}}
        stats = None
        if reading is not None:
            group, stats = resolve_stores(group, (store,), reading)
        if order is not None:
            records = adapt_partition(group, order).get(store, [])
        else:
            records = group[store]
            if foreign:
                records = records + LineageJoin(group).records_for(store, records)
        del group
        G = build_graph(records)
        if stats is not None:
            mark_erased(G, store, stats)
            if first and content is not None:
                content.merge(stats)
        return G

    try:
        for spec in sources:
            source = open_source(
                spec, strict=strict, **(source_options if is_backend(spec) else {})
            )
            for record in load_with_progress(source, spec, progress):
                if not take_outcomes(record, outcomes, outcome_reader):
                    continue
                spill.add(record)
                store = store_of(record)
                if A.MEMTRACE_CASE_ID in record.attributes:
                    case_stores.add(store)
                if is_upstream_memory_op(record):
                    upstream.setdefault(store, set()).add(record.trace_id)
                elif store == NO_STORE and A.MEMTRACE_OP_KIND in record.attributes:
                    loose_ops = True
                for ref in op_refs(record, A.MEMTRACE_OP_OUTPUTS):
                    writer_store.setdefault(ref, store)
            outcomes += source.outcomes
            summary.add_source_stats(source.stats)
        stores_of: dict[str, set[str]] = {}
        for store, traces in upstream.items():
            for trace in traces:
                stores_of.setdefault(trace, set()).add(store)
        for stores_of_trace in stores_of.values():
            for store in stores_of_trace:
                mates.setdefault(store, set()).update(stores_of_trace - {store})
        case_stores.update(upstream)  # their answers get case ids when they are adapted
        spill.finish()
        shared = dataclasses.replace(shared, outcomes=tuple(outcomes))
        stores = sorted(spill.records)
        bar = Progress(progress, "attributing", total=len(stores), unit="store")
        for store in stores:
            G = graph(store)
            results[store] = attribute_store(store, G, shared, forget_tokens=True)
            on_result(results[store])
            if store == NO_STORE:
                no_store_graph = G
            del G
            bar.update(1)
        bar.close()
        redo = settle(shared.outcomes)
        second = dataclasses.replace(shared, picks=redo)
        for store in sorted(redo):
            G = graph(store, first=False)
            _merge(results[store], attribute_store(store, G, second, forget_tokens=True))
    finally:
        spill.close()
    if outcome_reader is not None and content is not None:
        content.merge(outcome_reader.stats)
    return no_store_graph, shared


# --- planning and running on an engine ------------------------------------------------------
@dataclass
class _Counts:
    """What the sources' records counted, added up over the driver, the scans and partitions."""

    stats: SourceStats = field(default_factory=SourceStats)
    keys: list[Key] = field(default_factory=list)
    spec_of: dict[str, int] = field(default_factory=dict)
    """file -> the number of the source spec it came from (messages are kept per spec)."""
    content: ContentStats = field(default_factory=ContentStats)
    """What resolving content references did (the scans' feedback, the partitions' stores)."""

    def add(self, tally: Tally) -> None:
        tally.add_to(self.stats, self.keys)

    def skip_path(self, path: str, reason: str) -> None:
        """Count a path a walk or glob left out (not a regular file)."""
        tally = Tally()
        tally.on_error(NOT_A_REGULAR_FILE, make_error(reason, path=path, line=None))
        self.add(tally)

    def report(self, summary: BatchSummary, files: Sequence[str]) -> None:
        stats = self.stats
        stats.errors = first_messages(stats.errors, self.keys, files, self.spec_of)
        summary.add_source_stats(stats)


def _plan(
    engine: _Engine,
    sources: Sequence[str],
    strict: bool,
    counts: _Counts,
    count: int,
    outcomes: list[Outcome],
    content: ContentReading | None = None,
) -> Plan:
    """Plan the partitions: scan the JSON Lines files on the engine, decode the rest here.
    The evaluations found go to ``outcomes``, in the order a single-process run reads them
    (each spec's spans by file and line, then its log records), a duplicate span's dropped;
    with ``content``, read with their content references resolved (an expected answer).

    A strict run decodes everything here, so the first bad record stops it before any work
    is sent out.
    """
    if strict:
        resolver = content.resolver() if content is not None else None
        plan = plan_sources(
            sources, strict=True, summary_stats=counts.stats, outcomes=outcomes, resolver=resolver
        )
        if resolver is not None:
            counts.content.merge(resolver.stats)
        return plan
    plan = Plan()
    scanned: list[str] = []
    found: list[tuple[tuple[int, int, int, int], tuple[str, str] | None, Outcome]] = []
    order: dict[str, int] = {}
    for number, spec in enumerate(sources):
        check_file_spec(spec)
        for path in expand_paths(spec, counts.skip_path):
            plan.add_file(path)
            counts.spec_of.setdefault(path, number)
            order.setdefault(path, len(order))
            if is_json_lines(path):
                scanned.append(path)
            else:
                for kind, line, key, outcome in _plan_whole_file(plan, path, counts, content):
                    found.append(((number, kind, order[path], line), key, outcome))
    # Ranges pay only where tasks run side by side; cutting a file numbers the lines before
    # each cut (a read of the file), so one engine thread scans each file whole.
    ranges = _cut(scanned, count if engine.workers > 1 else 1)
    factory = content.resolver if content is not None else None
    for part, scan in engine.map(scan_range, ranges, factory):
        if isinstance(scan, BaseException):
            scan = scan_range(part, factory)  # once more, here: a failure now is a real one
        merge_scan(plan, scan)
        counts.add(scan.tally)
        if scan.content is not None:
            counts.content.merge(scan.content)
        number = counts.spec_of[part.path]
        for kind, line, key, outcome in scan.outcomes:
            found.append(((number, kind, order[part.path], line), key, outcome))
    address_lines(plan, [path for path in plan.files if path not in plan.scanned])
    first: dict[tuple[int, str, str], tuple[int, int, int, int]] = {}
    for where, key, outcome in sorted(found, key=lambda item: item[0]):
        # A span read twice (a Collector retry) gives its evaluations once, as a source does.
        if key is None or first.setdefault((where[0], *key), where) == where:
            outcomes.append(outcome)
    return plan


def _plan_whole_file(
    plan: Plan, path: str, counts: _Counts, content: ContentReading | None = None
) -> list[Found]:
    """Plan a file that cannot be cut into ranges by decoding it here; return its evaluations
    (with ``content``, read with their content references resolved)."""
    source = open_source(path)
    found: list[Found] = []
    resolver = content.resolver() if content is not None else None
    for record in source.records():
        source_path, _, number = record.source.rpartition(":")
        line = int(number) if number.isdigit() else None
        plan.add(store_of(record), source_path, line, case=A.MEMTRACE_CASE_ID in record.attributes)
        if is_upstream_memory_op(record):
            plan.add_upstream(store_of(record), record.trace_id)
        if record.events:
            key = (record.trace_id, record.span_id)
            found += [
                (0, line or 0, key, outcome) for outcome in resolved_outcomes(record, resolver)
            ]
    if resolver is not None:
        counts.content.merge(resolver.stats)
    found += [(1, 0, None, outcome) for outcome in source.outcomes]
    counts.add(Tally(source.stats, [(path, 0, 0, n) for n in range(len(source.stats.errors))]))
    return found


_MIN_RANGE = 4 << 20
"""Smallest range worth a task of its own (bytes)."""


def _cut(paths: Sequence[str], count: int) -> list[Range]:
    """About ``count`` ranges over ``paths``, each file's share proportional to its size."""
    sizes = {path: _size(path) for path in paths}
    total = sum(sizes.values()) or 1
    ranges: list[Range] = []
    for path in paths:
        share = max(1, min(round(count * sizes[path] / total), sizes[path] // _MIN_RANGE + 1))
        ranges += split_ranges(path, share)
    return ranges


def _size(path: str) -> int:
    from memtrace_otel.sources._files import open_binary

    with open_binary(path) as stream:
        return int(stream.seek(0, 2))


def _work(
    engine: _Engine,
    plan: Plan,
    count: int,
    stores: Iterable[str] | None = None,
    shared: Sequence[str] = (),
) -> Sequence[Partition]:
    """The partitions to run: made one at a time as this process runs them (their line
    tables are not all held at once), or all made first for workers, which get them together."""
    planned = PlannedPartitions(plan, count, stores, shared)
    return planned if isinstance(engine, _InlineEngine) else list(planned)


def _run_partitions(
    engine: _Engine,
    work: Sequence[Partition],
    shared: _Shared,
    results: dict[str, StoreResult],
    poison: list[dict[str, str]],
    counts: _Counts | None,
    progress: TextIO | None,
    on_result: Callable[[StoreResult], None] | None = None,
    forced: Sequence[Case] = (),
) -> None:
    """Run the partitions; store results by store, add up their counts, report poison ones;
    ``on_result`` gets each store's result as its partition finishes."""
    bar = Progress(progress, "attributing", total=len(work), unit="partition")
    for partition, outcome in engine.map(run_partition, work, shared, forced):
        if isinstance(outcome, ContentStoreError):
            raise outcome  # a store the references name cannot be read at all: as in one process
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
                if on_result is not None:
                    on_result(result)
            if counts is not None:
                counts.add(outcome.tally)
                if outcome.content is not None:
                    counts.content.merge(outcome.content)
        del partition, outcome  # not held while the next partition runs (its line tables)
        bar.update(1)
    bar.close()


_T = TypeVar("_T")


class _Engine(ABC):
    """Runs a function over items on workers, yielding each item with its result or error.

    A task whose worker was lost is run again, up to ``retries`` more times, then yielded with
    the error; a task that raises is yielded with its exception.
    """

    workers: int = 1

    @abstractmethod
    def map(
        self, fn: Callable[..., Any], items: Sequence[_T], *args: Any
    ) -> Iterator[tuple[_T, Any]]:
        """``fn(item, *args)`` for each item, as they finish: ``(item, result or exception)``."""

    @abstractmethod
    def close(self) -> None:
        """Release the workers (or the connection)."""


class _InlineEngine(_Engine):
    """This process, one task at a time (a task that raises is yielded with its exception)."""

    def map(
        self, fn: Callable[..., Any], items: Sequence[_T], *args: Any
    ) -> Iterator[tuple[_T, Any]]:
        for item in items:
            try:
                result = fn(item, *args)
            except Exception as exc:
                result = exc
            yield item, result

    def close(self) -> None:
        pass


class _PoolEngine(_Engine):
    """A local process pool, rebuilt when a dead worker breaks it."""

    def __init__(self, workers: int, retries: int) -> None:
        self.workers = workers
        self.retries = retries
        self._pool: Any = None

    def _executor(self) -> Any:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if self._pool is None:
            context = multiprocessing.get_context("fork")
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=context)
        return self._pool

    def map(
        self, fn: Callable[..., Any], items: Sequence[_T], *args: Any
    ) -> Iterator[tuple[_T, Any]]:
        from concurrent.futures import FIRST_COMPLETED, Future, wait
        from concurrent.futures.process import BrokenProcessPool

        attempts = [0] * len(items)
        pending = list(range(len(items)))
        while pending:
            pool = self._executor()
            futures: dict[Future[Any], int] = {pool.submit(fn, items[i], *args): i for i in pending}
            pending = []
            broken = False
            while futures:
                ready, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in ready:
                    i = futures.pop(future)
                    try:
                        yield items[i], future.result()
                    except BrokenProcessPool as exc:
                        broken = True
                        attempts[i] += 1
                        if attempts[i] > self.retries:
                            yield items[i], exc
                        else:
                            pending.append(i)
                    except Exception as exc:
                        yield items[i], exc
            if broken:
                self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class _DaskEngine(_Engine):
    """An existing Dask scheduler; it reschedules the tasks of lost workers itself."""

    def __init__(self, address: str, retries: int) -> None:
        try:
            from dask.distributed import Client
        except ImportError:
            raise ValueError(
                "the dask executor needs dask.distributed: pip install 'memtrace-otel[dask]'"
            ) from None
        try:
            self._client: Any = Client(address, set_as_default=False, timeout=30)  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as exc:
            raise BackendError(f"cannot reach the Dask scheduler: {exc}", url=address) from None
        self.retries = retries
        self.workers = max(1, len(self._client.scheduler_info().get("workers", {})))
        # Workers import this package while the driver cuts the files into ranges.
        self._client.run(_import_on_worker, wait=False)

    def map(
        self, fn: Callable[..., Any], items: Sequence[_T], *args: Any
    ) -> Iterator[tuple[_T, Any]]:
        from dask.distributed import as_completed

        client = self._client
        shipped = self._scatter(list(args))
        futures = {
            client.submit(fn, item, *shipped, retries=self.retries, pure=False): item
            for item in items
        }
        for future in as_completed(list(futures), loop=client.loop):  # type: ignore[no-untyped-call]
            item = futures[future]
            try:
                yield item, future.result()
            except Exception as exc:
                yield item, exc

    def _scatter(self, args: list[Any]) -> list[Any]:
        """Ship ``args`` to every worker once (not with each task).

        A worker dying during the broadcast breaks it, or leaves it waiting for good (seen with
        a worker killed while the broadcast ran, every worker idle): each try is bounded by
        :data:`_SCATTER_TIMEOUT`; try again on the survivors, and in the end send the arguments
        with each task instead.
        """
        if not args:
            return args
        client = self._client
        # scatter's own timeout bounds only the wait for workers, not the transfer: the
        # asynchronous call run by the client's sync() is cancelled after callback_timeout.
        scatter = functools.partial(client.scatter, asynchronous=True)
        for _ in range(3):
            try:
                shipped = client.sync(
                    scatter, args, broadcast=True, hash=False, callback_timeout=_SCATTER_TIMEOUT
                )
                return list(shipped)
            except OSError:  # distributed's CommClosedError is one, and so is TimeoutError
                time.sleep(0.5)
        return args

    def close(self) -> None:
        self._client.close()


_SCATTER_TIMEOUT = 60.0
"""Seconds one broadcast of a run's shared arguments may take before it is tried again (the
arguments are the method and the run's settings: small, sent once to each worker)."""


async def _import_on_worker() -> None:
    # A coroutine: Dask runs only those without waiting for them.
    import memtrace_otel.job._executors  # noqa: F401  (and everything it imports)


@contextlib.contextmanager
def _engine(spec: ExecutorSpec, retries: int) -> Iterator[_Engine]:
    engine: _Engine
    if spec.kind == "dask":
        engine = _DaskEngine(spec.address, retries)
    elif spec.kind == "inline":
        engine = _InlineEngine()
    else:
        engine = _PoolEngine(spec.workers, retries)
    try:
        yield engine
    finally:
        engine.close()

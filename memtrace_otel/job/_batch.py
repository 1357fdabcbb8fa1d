"""The batch job: exported traces + failed cases in, one verdict line per case out.

Work is grouped by memory store (``gen_ai.memory.store.id``): a case's graph spans the traces that
built the store and the trace that asked the question, and all of them carry the store id.
Verdicts are appended one line at a time as soon as each is known, so a killed run loses nothing
it wrote; a rerun skips the cases already in ``--out`` (after repairing a torn last line).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import time
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

import networkx as nx

from memtrace_otel._internal import GcPaused, finite_json
from memtrace_otel._progress import Progress
from memtrace_otel.attribution._base import Method
from memtrace_otel.attribution._model import Case, Verdict, load_cases
from memtrace_otel.errors import DecodeError, MemtraceError
from memtrace_otel.graph import build_graph, graph_index
from memtrace_otel.job._feedback import StoreCases, decide_failed
from memtrace_otel.job._options import RunOptions
from memtrace_otel.job._reviews import precision_of
from memtrace_otel.job._verdict_log import PENDING_CAPPED, PENDING_NOT_IN_TRACES, Entry, VerdictLog
from memtrace_otel.semconv import JudgeVerdict, SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.sources import (
    BACKEND_SCHEMES,
    ContentResolver,
    Outcome,
    OutcomeRule,
    Source,
    SourceStats,
    adapt_upstream,
    expand_paths,
    open_source,
    outcomes_of,
)
from memtrace_otel.sources._content import keep_complete_stores
from memtrace_otel.sources._outcomes import DEFAULT_RULE, is_verdict_span
from memtrace_otel.sources._source import FileSource
from memtrace_otel.sources._stores import NO_STORE
from memtrace_otel.sources._trust import DEFAULT_POLICY, TrustPolicy

_SHOWN_ERRORS = 5
"""Skip messages the summary table shows (``summary.json`` keeps 20)."""

logger = logging.getLogger(__name__)

PREPARE_WINDOW = 256
"""Cases a method prepares for at once (``EvidenceMethod.prepare`` batches their sentence-model
texts): few enough that their texts stay in the encoder's cache until the cases run."""


def prepare(method: Method, work: Sequence[tuple[nx.MultiDiGraph, Case]]) -> None:
    """Let ``method`` prepare for ``work`` (its optional ``prepare``: one batched pass over the
    texts those cases will need). Only speed depends on it, so a failure there is logged and the
    cases run unprepared."""
    hook = getattr(method, "prepare", None)
    if hook is None or not work:
        return
    try:
        hook(work)
    except (MemtraceError, ValueError, RuntimeError, OSError) as exc:
        logger.warning("memtrace: %s could not prepare %d cases: %s", method.name, len(work), exc)


@dataclass
class BatchSummary:
    """What one run did: counts for the summary table, the exit status and ``summary.json``.

    ``truncated_values`` (attribute values the loaders cut to their size cap) and
    ``truncated_captured`` (variable versions whose value was already cut at capture time,
    ``memtrace.variable.truncated``) are reported but do not fail the run: the records are kept.
    So are ``replaced_surrogates`` (lone surrogates in JSON input, replaced by U+FFFD).
    """

    cases: int = 0
    attributed: int = 0
    resumed: int = 0
    unattributed: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    records: int = 0
    skipped_records: int = 0
    skipped_by_kind: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    truncated_values: int = 0
    truncated_captured: int = 0
    replaced_surrogates: int = 0
    source_errors: list[str] = field(default_factory=list)
    skipped_cases: int = 0
    cases_not_in_traces: list[str] = field(default_factory=list)
    by_system: dict[str, int] = field(default_factory=dict)
    by_error_type: dict[str, int] = field(default_factory=dict)
    by_op_name: dict[str, int] = field(default_factory=dict)
    by_system_error: dict[str, dict[str, int]] = field(default_factory=dict)
    method: str = ""
    seconds: float = 0.0
    repaired_out: bool = False
    model_usage: dict[str, Any] = field(default_factory=dict)
    capped: list[str] = field(default_factory=list)
    """Why a live source stopped before its window was exhausted (its bound was reached)."""
    pages: int = 0
    traces_fetched: int = 0
    new: int = 0
    """Verdicts made by this run (``attributed + unattributed`` count the whole ``--out``)."""
    in_out: int = 0
    """Cases with a verdict in ``--out`` (all runs); 0 without ``--out``."""
    pending: int = 0
    """Verdicts in ``--out`` that are not final (case not in the traces, source capped)."""
    redone: int = 0
    """Final verdicts redone because newer ops arrived (``--redo-stale``)."""
    written_back: int = 0
    write_back_failed: int = 0
    write_back_error: str = ""
    feedback: dict[str, Any] = field(default_factory=dict)
    """What feedback said (:class:`~memtrace_otel.job.FeedbackStats` as data)."""
    cases_by_source: dict[str, int] = field(default_factory=dict)
    """Failed cases by where they were found: ``cases-file``, ``judge``, ``feedback``."""
    content: dict[str, Any] = field(default_factory=dict)
    """What resolving content references did (:class:`~memtrace_otel.sources._content.ContentStats`
    as data); empty when the traces carried none."""

    @property
    def resolved_content(self) -> bool:
        """Whether values were read from a content store (the report then contains content)."""
        return bool(self.content.get("resolved") or self.content.get("upstream"))

    review_precision: dict[str, Any] | None = None
    """People's reviews of verdict spans read with the traces (``review_precision``), or
    ``None`` when the sources held no review. Screened by the trust policy as feedback is:
    its ``refused`` counts the reviews it refused, by reason."""

    @property
    def ok(self) -> bool:
        """No case failed to run, no record or cases-file line was skipped, no source was
        capped, every verdict span was written back and the trust policy refused no feedback
        and no review."""
        return (
            not self.failed
            and self.skipped_records == 0
            and self.skipped_cases == 0
            and not self.capped
            and self.write_back_failed == 0
            and not self.feedback.get("refused")
            and not (self.review_precision or {}).get("refused")
        )

    def recount(self, entries: Iterable[Entry]) -> None:
        """Make the verdict counts and tables describe every verdict in ``--out`` (the latest
        of each case), not only this run's."""
        self.new = self.attributed + self.unattributed
        self.attributed = self.unattributed = self.in_out = self.pending = 0
        self.by_system, self.by_error_type, self.by_op_name = {}, {}, {}
        self.by_system_error = {}
        for entry in entries:
            self.in_out += 1
            self.pending += entry.pending is not None
            self.add(entry.verdict)

    def add(self, verdict: Verdict) -> None:
        """Count one verdict."""
        if verdict.error_type is None:
            self.unattributed += 1
            return
        self.attributed += 1
        system = verdict.system or "?"
        self.by_system[system] = self.by_system.get(system, 0) + 1
        self.by_error_type[verdict.error_type] = self.by_error_type.get(verdict.error_type, 0) + 1
        name = verdict.op_name or "?"
        self.by_op_name[name] = self.by_op_name.get(name, 0) + 1
        per = self.by_system_error.setdefault(system, {})
        per[verdict.error_type] = per.get(verdict.error_type, 0) + 1

    def add_loading(self, loaded: BatchSummary) -> None:
        """Add what another summary counted while loading sources."""
        self.records += loaded.records
        self.skipped_records += loaded.skipped_records
        self.truncated_values += loaded.truncated_values
        self.replaced_surrogates += loaded.replaced_surrogates
        self.duplicates += loaded.duplicates
        self.pages += loaded.pages
        self.traces_fetched += loaded.traces_fetched
        self.capped += loaded.capped
        for kind, count in loaded.skipped_by_kind.items():
            self.skipped_by_kind[kind] = self.skipped_by_kind.get(kind, 0) + count
        self.source_errors[:0] = loaded.source_errors
        if loaded.content:
            self.content = dict(loaded.content)
        if loaded.review_precision is not None:
            self.review_precision = loaded.review_precision

    def add_source_stats(self, stats: SourceStats) -> None:
        """Count what a source read, skipped and cut (keeping the first 20 messages)."""
        self.records += stats.records
        self.skipped_records += stats.skipped
        self.truncated_values += stats.truncated_values
        self.replaced_surrogates += stats.replaced_surrogates
        self.duplicates += stats.duplicates
        self.pages += stats.pages
        self.traces_fetched += stats.traces_fetched
        if stats.capped:
            self.capped.append(stats.capped)
        for kind, count in stats.skipped_by_kind.items():
            self.skipped_by_kind[kind] = self.skipped_by_kind.get(kind, 0) + count
        self.source_errors.extend(stats.errors[: 20 - len(self.source_errors)])

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``summary.json``."""
        data = {k: v for k, v in self.__dict__.items()}
        data["ok"] = self.ok
        return data


def store_of(record: SpanRecord) -> str:
    """The partition key of a record: its memory store id (``""`` when it names none)."""
    value = record.attributes.get(A.GEN_AI_MEMORY_STORE_ID)
    return str(value) if value is not None else NO_STORE


def count_truncated_captured(G: nx.MultiDiGraph) -> int:
    """How many variable versions of ``G`` hold a value cut at capture time.

    >>> G = nx.MultiDiGraph()
    >>> G.add_node("doc@1", type="variable", truncated=True)
    >>> G.add_node("doc@2", type="variable", truncated=False)
    >>> count_truncated_captured(G)
    1
    """
    return sum(
        1
        for _, data in G.nodes(data=True)
        if data.get("type") == "variable" and data.get("truncated") is True
    )


def load_store_graphs(
    sources: Sequence[str],
    *,
    strict: bool = False,
    summary: BatchSummary | None = None,
    outcomes: list[Outcome] | None = None,
    progress: TextIO | None = None,
    options: Mapping[str, Any] | None = None,
    reviews_out: list[SpanRecord] | None = None,
    trust: TrustPolicy = DEFAULT_POLICY,
) -> dict[str, nx.MultiDiGraph]:
    """Read every source and build one evolution graph per memory store.

    Records of ops of shared partitions (no store id, or a store with no case: prompt loads,
    templates) also join every store whose ops read what they wrote (see :class:`LineageJoin`).
    Spans written under the upstream GenAI conventions only are read as contract ops first
    (:func:`adapt_upstream`).

    Args:
        sources: file paths, directories, globs or backend URLs.
        strict: stop at the first bad record.
        summary: counts what the sources read, skipped, dropped and whether one was capped.
        outcomes: when given, collects every evaluation found (feedback spans, evaluation
            events, OTLP log records), judged by the default rule; ``memtrace.feedback`` spans
            then stay out of the graphs.
        progress: where to show the loading progress (see :class:`~memtrace_otel._progress.Progress`).
        options: backend source options (``max_traces``, ``limit``), ignored for files, and
            ``content``: the content store URL references are read from (``--content``; else
            where each reference points).
        reviews_out: when given, collects the verdict spans and review spans read (they join no
            graph); with ``summary``, their reviews also set ``summary.review_precision``.
        trust: the trust policy the reviews are screened by (the one feedback is screened by:
            ``rule.trust``).

    Raises:
        ContentStoreError: a content store the references name cannot be read at all.
    """
    options = dict(options or {})
    resolver = ContentResolver(options.pop("content", None))
    originals: list[SpanRecord] = []
    records: list[SpanRecord] = []
    verdict_spans = reviews_out if reviews_out is not None else []
    for spec in sources:
        source = open_source(spec, strict=strict, **(options if is_backend(spec) else {}))
        for original in load_with_progress(source, spec, progress):
            if is_verdict_span(original):
                # A verdict written back earlier (maybe in the culprit's trace), or a review of
                # one: no op. Reviews measure the verdicts' precision.
                verdict_spans.append(original)
                continue
            record = resolver.resolve(original)
            if outcomes is None or take_outcomes(record, outcomes):
                originals.append(original)
                records.append(record)
        if outcomes is not None:
            outcomes.extend(source.outcomes)
        if summary is not None:
            summary.add_source_stats(source.stats)
    records = keep_complete_stores(resolver.stats, originals, records, store_of)
    del originals
    if summary is not None:
        precision = precision_of(verdict_spans, trust)
        if precision is not None:
            summary.review_precision = precision
    by_store: dict[str, list[SpanRecord]] = defaultdict(list)
    case_stores: set[str] = set()
    for record in adapt_upstream(records):
        store = store_of(record)
        by_store[store].append(record)
        if A.MEMTRACE_CASE_ID in record.attributes:
            case_stores.add(store)
    loose = by_store.get(NO_STORE)
    if loose is not None and not any(A.MEMTRACE_OP_KIND in r.attributes for r in loose):
        # Only other instrumentations' spans (HTTP, embeddings) name no store: no graph of theirs.
        del by_store[NO_STORE]
    if len(by_store) > 1:
        join = LineageJoin({s: r for s, r in by_store.items() if s not in case_stores})
        extra = {store: join.records_for(store, records) for store, records in by_store.items()}
        for store, more in extra.items():
            by_store[store] += more
    graphs = {store: build_graph(records) for store, records in by_store.items()}
    stats = resolver.stats
    if stats.any and summary is not None:
        summary.content = stats.to_json()
    for store, when in stats.erased.items():
        if store in graphs:
            graphs[store].graph[ERASED_KEY] = when or "unknown time"
    return graphs


ERASED_KEY = "content_erased"
"""``G.graph`` key: when the store's content was erased (``memtrace content erase``)."""


def erased_verdict(G: nx.MultiDiGraph, case: Case, store: str, method: str) -> Verdict | None:
    """The abstention of a case whose store's content was erased, else ``None``."""
    when = G.graph.get(ERASED_KEY)
    if when is None:
        return None
    return Verdict(
        case_id=case.case_id,
        error_type=None,
        op_id=None,
        op_name=None,
        method=method,
        confidence=0.0,
        reason=f"the content of store {store!r} was erased ({when}): nothing left to attribute",
        store_id=store or None,
        unchecked=("content erased",),
    )


def take_outcomes(
    record: SpanRecord, outcomes: list[Outcome], resolver: ContentResolver | None = None
) -> bool:
    """Add the evaluations ``record`` carries to ``outcomes``; return whether the record joins
    the graphs (a ``memtrace.feedback`` span carrying evaluations does not: it is no op; nor
    does a written-back verdict span, :func:`~memtrace_otel.sources._outcomes.is_verdict_span`).

    With ``resolver``, the evaluations are read from the record with its content references
    resolved (an expected answer or a comment by reference); the record itself is returned to
    the graphs unresolved (see :func:`~memtrace_otel.sources._content.resolve_records`).
    """
    if is_verdict_span(record):
        return False
    if record.events:
        found = resolved_outcomes(record, resolver)
        if found:
            outcomes.extend(found)
            return record.name != A.MEMTRACE_FEEDBACK_SPAN
    return True


def resolved_outcomes(record: SpanRecord, resolver: ContentResolver | None) -> list[Outcome]:
    """The evaluations ``record`` carries, read (with ``resolver``) with its content references
    resolved: a feedback's expected answer or comment sent by reference (``REFERENCE``)."""
    found = outcomes_of(record)
    if found and resolver is not None:
        resolved = resolver.resolve(record)
        if resolved is not record:
            found = outcomes_of(resolved)
    return found


def is_backend(spec: str) -> bool:
    """Whether ``spec`` names a live backend rather than files."""
    return str(spec).startswith(BACKEND_SCHEMES)


def load_with_progress(source: Source, spec: str, progress: TextIO | None) -> Iterator[SpanRecord]:
    """The records of ``source``, showing spans, bytes (files) or traces and pages (backends),
    rate and ETA on ``progress``."""
    if progress is None:
        yield from source.records()
        return
    stats = source.stats
    sizes: list[int] = []
    if isinstance(source, FileSource):
        sizes = [_file_size(p) for s in source.specs for p in expand_paths(s)]
    bar = Progress(
        progress,
        f"loading {_shown(spec)}",
        total=sum(sizes) if sizes else None,
        unit="B" if sizes else "span",
    )
    files = 0
    count = 0
    try:
        for record in source.records():
            yield record
            count += 1
            if count & 1023 == 0:
                if sizes:
                    while files < stats.files - 1 and files < len(sizes):
                        bar.update(sizes[files], f"{count:,} spans")
                        files += 1
                    bar.update(0, f"{count:,} spans")
                else:
                    bar.update(
                        1024,
                        f"{stats.traces_fetched:,} traces, {stats.pages} pages"
                        if stats.pages or stats.traces_fetched
                        else None,
                    )
        if sizes:
            bar.update(sum(sizes[files:]), f"{count:,} spans")
        else:
            bar.update(count % 1024, f"{stats.traces_fetched:,} traces, {stats.pages} pages")
    finally:
        bar.close()


def _shown(spec: str) -> str:
    """``spec`` without credentials (``user:pass@``), for messages."""
    parts = urllib.parse.urlsplit(str(spec))
    if "@" not in parts.netloc:
        return str(spec)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class LineageJoin:
    """Which records of shared partitions belong with a store's records.

    Shared partitions are those where no span names a case: ops that name no store, or a store
    of the whole system (a prompt template loaded once for every user, a shared instruction).
    Such an op joins a store when one of the store's ops reads a variable version it wrote, and
    so, transitively, do the shared ops that wrote what it read. Then a verdict of that store
    sees the whole lineage instead of claiming a linked trace was not loaded. (Stores that hold
    cases do not lend ops to each other: a partition's verdicts do not depend on another's.)

    >>> from memtrace_otel.graph._example import example_records
    >>> LineageJoin({"s": example_records()}).records_for("s", example_records())
    []
    """

    def __init__(self, by_store: Mapping[str, Sequence[SpanRecord]]) -> None:
        self.writers: dict[str, list[tuple[str, SpanRecord]]] = defaultdict(list)
        for store, records in by_store.items():
            for record in records:
                for ref in op_refs(record, A.MEMTRACE_OP_OUTPUTS):
                    self.writers[ref].append((store, record))

    def records_for(self, store: str, records: Iterable[SpanRecord]) -> list[SpanRecord]:
        """The records of other partitions that ``records`` (``store``'s) read from."""
        joined: dict[int, SpanRecord] = {}
        writers = self.writers
        if not writers:
            return []
        # Only refs some shared op wrote lead anywhere (most of a store's refs are its own).
        queue = [
            ref
            for record in records
            for ref in op_refs(record, A.MEMTRACE_OP_INPUTS)
            if ref in writers
        ]
        seen: set[str] = set()
        while queue:
            ref = queue.pop()
            if ref in seen:
                continue
            seen.add(ref)
            for writer_store, writer in self.writers.get(ref, ()):
                if writer_store != store and id(writer) not in joined:
                    joined[id(writer)] = writer
                    queue.extend(op_refs(writer, A.MEMTRACE_OP_INPUTS))
        return list(joined.values())


def op_refs(record: SpanRecord, key: str) -> tuple[str, ...]:
    """The variable refs of ``record``'s ``memtrace.op.inputs`` or ``...outputs``."""
    value = record.attributes.get(key)
    if isinstance(value, tuple):
        for item in value:  # a tuple of strings (every op's, once checked) is returned as it is
            if type(item) is not str:
                return tuple(v for v in value if isinstance(v, str))
        return cast(tuple[str, ...], value)
    return (value,) if isinstance(value, str) else ()


def note_inferred(G: nx.MultiDiGraph, verdict: Verdict) -> Verdict:
    """``verdict`` with what its case's ops rest on by inference listed under ``unchecked``.

    Ops rebuilt from upstream GenAI spans (:func:`~memtrace_otel.sources.adapt_upstream`) say in
    ``memtrace.op.inferred`` which of their facts were inferred (kind, lineage by record id and
    time); a verdict resting on them says so.
    """
    ops = list(graph_index(G).ops_of(verdict.case_id))
    if verdict.op_id is not None and verdict.op_id in G:
        ops.append(verdict.op_id)
    inferred: set[str] = set()
    for op in ops:
        items = G.nodes[op].get("attributes", {}).get(A.MEMTRACE_OP_INFERRED)
        if isinstance(items, list | tuple):
            inferred.update(str(item) for item in items)
    if not inferred:
        return verdict
    note = "inferred from upstream GenAI spans: " + "; ".join(sorted(inferred))
    return dataclasses.replace(verdict, unchecked=(*verdict.unchecked, note))


def failed_cases(
    graphs: dict[str, nx.MultiDiGraph],
    cases_file: str | None,
    summary: BatchSummary,
    outcomes: Sequence[Outcome] = (),
    rule: OutcomeRule = DEFAULT_RULE,
) -> list[tuple[str, Case]]:
    """``(store, case)`` of every failed case, in a stable order.

    With a cases file: its cases, except those marked (there or by a judge op) ``correct``; the
    cases file wins over feedback. Without: every case whose latest feedback (``outcomes``,
    judged by ``rule``) is a failure, and every case a judge op marked ``incorrect`` unless a
    later feedback says the answer was right (docs/feedback.md).
    """
    where: dict[str, str] = {}
    for store, G in sorted(graphs.items()):
        for case_id in graph_index(G).case_ops:
            where.setdefault(case_id, store)
    chosen: list[tuple[str, Case]] = []
    if cases_file is not None:
        skipped: list[str] = []
        for case in load_cases(cases_file, strict=False, skipped=skipped):
            found = where.get(case.case_id)
            verdict = case.verdict
            if verdict is None and found is not None:
                verdict = graph_index(graphs[found]).case_from_graph(case.case_id).verdict
            if verdict == JudgeVerdict.CORRECT:
                continue
            if found is None:
                summary.cases_not_in_traces.append(case.case_id)
            chosen.append((found if found is not None else NO_STORE, case))
        summary.skipped_cases += len(skipped)
        summary.source_errors.extend(skipped[:5])
        summary.cases_by_source["cases-file"] = len(chosen)
        return chosen
    views = {store: StoreCases.of(G, outcomes) for store, G in graphs.items()}
    picks, stats, counts, _ = decide_failed(views, outcomes, rule)
    summary.feedback = stats.to_json()
    summary.cases_by_source.update(counts)
    return [(pick.store, pick.case(graphs[pick.store])) for pick in picks]


class QuietHeap(GcPaused):
    """Keep Python's cyclic garbage collector off the traces the batch job holds.

    The job keeps every record and graph while it attributes, and each full collection would
    traverse all of them again: on a 300 MB export that was a third of the run. So the collector
    is off while records are loaded and graphs built (they hold no reference cycles), and once
    :meth:`loaded` is called what is in memory is frozen (``gc.freeze``: never scanned again)
    while the collector runs again for the methods' own garbage. Leaving unfreezes it all. A
    collector that was off stays off; objects frozen by someone else are left alone.

    >>> import gc
    >>> with QuietHeap() as heap:
    ...     heap.loaded()
    ...     gc.get_freeze_count() > 0
    True
    >>> gc.get_freeze_count()
    0
    """

    def __enter__(self) -> QuietHeap:  # type: ignore[override]  # returns itself
        super().__enter__()
        self._froze = False
        return self

    def loaded(self) -> None:
        """What is in memory now stays: freeze it, and let the collector run again."""
        if not self._froze and gc.get_freeze_count() == 0:
            gc.freeze()
            self._froze = True
        if self._resume:
            gc.enable()

    def built(self) -> None:
        """A graph was just built (with the collector paused) and stays while its cases are
        attributed: freeze it too, once :meth:`loaded` has frozen the heap. Else the collector's
        next young collections would traverse every object of the graph twice (gen 0, then
        gen 1) before promoting it to the generation that is seldom collected.

        >>> import gc
        >>> with QuietHeap() as heap:
        ...     heap.loaded()
        ...     before = gc.get_freeze_count()
        ...     graph = [{"op": [n]} for n in range(1000)]  # tracked containers
        ...     heap.built()
        ...     gc.get_freeze_count() >= before + 1000
        True
        """
        if self._froze:
            gc.freeze()

    def __exit__(self, *exc_info: object) -> None:
        if self._froze:
            gc.unfreeze()
        super().__exit__(*exc_info)


def _run_in_process(
    heap: QuietHeap,
    sources: Sequence[str],
    method: Method,
    options: RunOptions,
    *,
    graphs: dict[str, nx.MultiDiGraph] | None,
    loaded: BatchSummary | None,
    outcomes: Sequence[Outcome] | None,
) -> tuple[list[Verdict], BatchSummary]:
    cases_file, out, strict, progress = (
        options.cases_file,
        options.out,
        options.strict,
        options.progress,
    )
    on_verdict, redo_stale, rule = options.on_verdict, options.redo_stale, options.rule
    started = time.perf_counter()
    summary = BatchSummary(method=method.name)
    if loaded is not None:
        summary.add_loading(loaded)
    if graphs is None:
        read: list[Outcome] = []
        graphs = load_store_graphs(
            sources,
            strict=strict,
            summary=summary,
            outcomes=read,
            progress=progress,
            options=options.source_options,
            trust=rule.trust,
        )
        outcomes = read
    heap.loaded()
    work = failed_cases(graphs, cases_file, summary, outcomes or (), rule)
    summary.cases = len(work)
    summary.truncated_captured += sum(count_truncated_captured(G) for G in graphs.values())
    with contextlib.ExitStack() as stack:
        log = out if isinstance(out, VerdictLog) or out is None else VerdictLog(out)
        if log is not None and log is not out:
            stack.enter_context(log)
        done: set[str] = set()
        if log is not None:
            summary.repaired_out = summary.repaired_out or log.repaired
            done = log.done()
            if redo_stale:
                done -= stale_cases(log, work, graphs, summary)
        not_found = set(summary.cases_not_in_traces)
        verdicts: list[Verdict] = []
        empty = nx.MultiDiGraph()
        bar = Progress(progress, "attributing", total=len(work), unit="case")
        for i, (store, case) in enumerate(work):
            if i % PREPARE_WINDOW == 0:
                window = work[i : i + PREPARE_WINDOW]
                prepare(
                    method, [(graphs.get(s, empty), c) for s, c in window if c.case_id not in done]
                )
            bar.update(1)
            if case.case_id in done:
                summary.resumed += 1
                continue
            G = graphs.get(store, empty)
            try:
                verdict = erased_verdict(G, case, store, method.name) or note_inferred(
                    G, method.attribute(G, case)
                )
            except (MemtraceError, ValueError, KeyError, TypeError, RuntimeError) as exc:
                summary.failed.append(
                    {"case_id": case.case_id, "error": f"{type(exc).__name__}: {exc}"}
                )
                continue
            verdicts.append(verdict)
            summary.add(verdict)
            pending = pending_reason(case.case_id in not_found, summary)
            if log is not None:
                log.append(verdict, pending)
            if on_verdict is not None:
                on_verdict(verdict)
        bar.close()
        if log is not None:
            summary.recount(log.entries.values())
    summary.seconds = round(time.perf_counter() - started, 3)
    return verdicts, summary


def pending_reason(not_found: bool, summary: BatchSummary) -> str | None:
    """Why a case's verdict is not final (the next run redoes it), or ``None`` when it is.

    Not final: the case was not in the traces read, or a source stopped at its bound. Then any
    case's graph may lack traces, not only those it names by a link: a store's writes need not
    be linked from its questions (the deletion of a record no question read), and a verdict
    made without them can blame the wrong op, with no sign of what is missing.
    """
    if summary.capped:
        return PENDING_CAPPED
    if not_found:
        return PENDING_NOT_IN_TRACES
    return None


def stale_cases(
    log: VerdictLog,
    work: Sequence[tuple[str, Case]],
    graphs: Mapping[str, nx.MultiDiGraph],
    summary: BatchSummary,
) -> set[str]:
    """Cases whose verdict in ``log`` is older than the newest op of their store's graph
    (new traces or new feedback arrived after the verdict was made)."""
    newest: dict[str, int] = {}
    stale: set[str] = set()
    for store, case in work:
        entry = log.entries.get(case.case_id)
        if entry is None or entry.pending is not None:
            continue
        if store not in newest:
            G = graphs.get(store)
            newest[store] = (
                max(
                    (d.get("end") or 0 for _, d in G.nodes(data=True) if d.get("type") == "op"),
                    default=0,
                )
                if G is not None
                else 0
            )
        if newest[store] > entry.attributed_at * 1e9:
            stale.add(case.case_id)
    summary.redone = len(stale)
    return stale


SUMMARY_LINE = re.compile(
    r"(?P<cases>\d+) failed cases; "
    r"(?:(?P<in_out>\d+) verdicts in --out \((?P<new>\d+) new this run, (?P<resumed_out>\d+) "
    r"resumed, (?P<pending>\d+) to retry next run\), (?P<attributed_out>\d+) attributed, "
    r"(?P<unattributed_out>\d+) without a culprit"
    r"|(?P<attributed>\d+) attributed, (?P<unattributed>\d+) without a culprit, "
    r"(?P<resumed>\d+) resumed)"
    r"; (?P<failed>\d+) failed to run; (?P<records>\d+) span records read, "
    r"(?P<skipped>\d+) skipped; "
)
"""The first line of :func:`summary_table` (stderr of ``memtrace attribute``); read it with
:func:`parse_summary_line` (benchmarks and scripts do), never with a pattern of your own."""


def parse_summary_line(text: str) -> dict[str, int] | None:
    """The counts of the summary line found in ``text``: ``cases``, ``attributed``,
    ``unattributed``, ``resumed``, ``failed`` (to run), ``records``, ``skipped`` and, with
    ``--out``, ``in_out``, ``new`` and ``pending``; ``None`` when there is none.

    >>> parse_summary_line(summary_table(BatchSummary(cases=2, attributed=1, records=9)))
    {'cases': 2, 'attributed': 1, 'unattributed': 0, 'resumed': 0, 'failed': 0, 'records': 9, 'skipped': 0}
    """
    match = SUMMARY_LINE.search(text)
    if match is None:
        return None
    found = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    for name in ("attributed", "unattributed", "resumed"):
        if f"{name}_out" in found:
            found[name] = found.pop(f"{name}_out")
    order = ("cases", "attributed", "unattributed", "resumed", "failed", "records", "skipped")
    return {
        **{k: found[k] for k in order},
        **{k: found[k] for k in ("in_out", "new", "pending") if k in found},
    }


def precision_line(precision: Mapping[str, Any]) -> str:
    """The measured precision of verdicts as one line: overall, then by error type."""

    def share(item: Mapping[str, Any]) -> str:
        if not item["reviews"]:
            return "no reviews"
        stated = item.get("mean_confidence")
        return (
            f"{item['confirmed']}/{item['reviews']} confirmed = {100 * item['precision']:.1f}% "
            f"({item['rejected']} rejected, {item['other_op']} other op"
            + (f"; mean stated confidence {stated:.2f}" if stated is not None else "")
            + ")"
        )

    by_type = "; ".join(f"{t} {share(i)}" for t, i in precision["by_error_type"].items())
    unverified = precision.get("unverified")
    return (
        f"verdict precision from people's reviews: {share(precision)}"
        + (f"; by error type: {by_type}" if by_type else "")
        + (f"; {unverified} reviews unverified (no MEMTRACE_FEEDBACK_KEY)" if unverified else "")
    )


def summary_table(summary: BatchSummary) -> str:
    """The summary as a plain-text table (per system, error type and op name)."""
    verdicts = (
        f"{summary.in_out} verdicts in --out ({summary.new} new this run, {summary.resumed} "
        f"resumed, {summary.pending} to retry next run), {summary.attributed} attributed, "
        f"{summary.unattributed} without a culprit"
        if summary.in_out
        else f"{summary.attributed} attributed, {summary.unattributed} without a culprit, "
        f"{summary.resumed} resumed"
    )
    lines = [
        f"{summary.cases} failed cases; {verdicts}; {len(summary.failed)} failed to run; "
        f"{summary.records} span records read, {summary.skipped_records} skipped; "
        f"method {summary.method}, {summary.seconds:.2f} s",
    ]
    if summary.pages or summary.traces_fetched:
        lines.append(
            f"live sources: {summary.traces_fetched} traces fetched, {summary.pages} search pages"
        )
    for capped in summary.capped:
        lines.append(f"INCOMPLETE (exit status 1): {capped}")
    if summary.redone:
        lines.append(f"redone (newer ops than the verdict, --redo-stale): {summary.redone}")
    if summary.review_precision:
        lines.append(precision_line(summary.review_precision))
        review_refused = summary.review_precision.get("refused") or {}
        if review_refused:
            lines.append(
                f"reviews refused by the trust policy (not used): {sum(review_refused.values())} ("
                + ", ".join(f"{reason} {n}" for reason, n in sorted(review_refused.items()))
                + "); e.g. "
                + "; ".join(summary.review_precision.get("refused_sample", [])[:3])
            )
    if summary.written_back or summary.write_back_failed:
        lines.append(
            f"write-back: {summary.written_back} verdict spans sent, "
            f"{summary.write_back_failed} not sent"
            + (f" ({summary.write_back_error})" if summary.write_back_error else "")
        )
    errors = sorted(summary.by_error_type)
    if errors:
        # Every column as wide as its header or its widest cell; counts right-aligned.
        width = max([len("system"), *(len(s) for s in summary.by_system_error)])
        lines.append("")
        lines.append(
            "system".ljust(width) + "  " + "  ".join(e.rjust(len(e)) for e in errors) + "  total"
        )
        for system in sorted(summary.by_system_error):
            row = summary.by_system_error[system]
            lines.append(
                system.ljust(width)
                + "  "
                + "  ".join(str(row.get(e, 0)).rjust(len(e)) for e in errors)
                + f"  {sum(row.values()):>5}"
            )
        lines.append("")
        lines.append("culprit op name".ljust(40) + "  count")
        for name, count in Counter(summary.by_op_name).most_common(15):
            lines.append(name.ljust(40) + f"  {count}")
    if summary.skipped_by_kind:
        lines.append("")
        lines.append(
            "skipped records: "
            + ", ".join(f"{k}: {v}" for k, v in sorted(summary.skipped_by_kind.items()))
        )
        # Say which: the first few messages name the file, line and field (all in summary.json).
        lines.extend(f"  {message}" for message in summary.source_errors[:_SHOWN_ERRORS])
        if len(summary.source_errors) > _SHOWN_ERRORS:
            lines.append("  ... (the first 20 are in summary.json source_errors)")
    if summary.duplicates:
        lines.append(
            f"exact duplicate spans dropped (at-least-once delivery, nothing lost): "
            f"{summary.duplicates}"
        )
    if summary.truncated_values or summary.truncated_captured:
        lines.append(
            f"truncated values (kept, cut): {summary.truncated_values} by the loaders' size cap, "
            f"{summary.truncated_captured} at capture time"
        )
    feedback = summary.feedback
    if feedback.get("read"):
        unknown = len(feedback.get("unknown", ()))
        lines.append(
            f"feedback: {feedback['read']} read, {feedback['failures']} cases flagged wrong, "
            f"{feedback['successes']} right, {feedback['undecided']} undecided by the rule, "
            f"{unknown} for cases not in these traces"
            + (" (not marked done: a later run picks them up)" if unknown else "")
            + (
                f", {feedback['unverified']} unverified (no MEMTRACE_FEEDBACK_KEY)"
                if feedback.get("unverified")
                else ""
            )
        )
    refused = feedback.get("refused") or {}
    if refused:
        lines.append(
            f"feedback refused by the trust policy (not used): {sum(refused.values())} ("
            + ", ".join(f"{reason} {n}" for reason, n in sorted(refused.items()))
            + "); e.g. "
            + "; ".join(feedback.get("refused_sample", [])[:3])
        )
    if summary.replaced_surrogates:
        lines.append(
            f"lone surrogates replaced by U+FFFD (kept, invalid Unicode): "
            f"{summary.replaced_surrogates}"
        )
    if summary.skipped_cases:
        lines.append(f"skipped cases-file lines: {summary.skipped_cases}")
    content = summary.content
    if content:
        lines.append(
            f"content by reference: {content.get('resolved', 0)} objects resolved and verified, "
            f"{content.get('upstream', 0)} upstream gen_ai objects, {content.get('missing', 0)} "
            f"missing, {content.get('mismatched', 0)} not matching their digest (not used), "
            f"{content.get('unverifiable', 0)} keyed by a key this job lacks (not used; set "
            "MEMTRACE_DIGEST_KEY)"
        )
        for name in content.get("missing_objects", [])[:5]:
            lines.append(f"missing content object: {name}")
        for store, when in sorted(content.get("erased_stores", {}).items()):
            lines.append(f"content erased: store {store!r} ({when}): its cases abstain")
        for store, count in sorted(content.get("incomplete_stores", {}).items()):
            lines.append(
                f"content incomplete: store {store!r}: {count} objects missing or not verified; "
                "none of its content is used (attributed as with capture off)"
            )
    if summary.cases_not_in_traces:
        lines.append(f"cases not in the traces: {len(summary.cases_not_in_traces)}")
    for failure in summary.failed[:10]:
        lines.append(f"failed: {failure['case_id']}: {failure['error']}")
    return "\n".join(lines)


def summary_markdown(summary: BatchSummary) -> str:
    """The summary as Markdown (``summary.md``)."""
    table = summary_table(summary)
    notice = f"> {CONTENT_NOTICE}\n\n" if summary.resolved_content else ""
    return "# Attribution summary\n\n" + notice + "```text\n" + table + "\n```\n"


CONTENT_NOTICE = (
    "This report contains memory content resolved from the content store: share it only "
    "where that content may be read."
)


def write_summary(summary: BatchSummary, directory: str | os.PathLike[str]) -> None:
    """Write ``summary.json`` and ``summary.md`` into ``directory``."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(
        json.dumps(finite_json(summary.to_json()), indent=2, sort_keys=True, allow_nan=False) + "\n"
    )
    (folder / "summary.md").write_text(summary_markdown(summary))


def read_verdicts(path: str | os.PathLike[str]) -> Iterable[Verdict]:
    """The verdicts of a verdicts file."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield Verdict.from_json(json.loads(line))
                except (ValueError, TypeError) as exc:
                    raise DecodeError(
                        f"not a verdict ({exc})", path=str(path), line=number
                    ) from None

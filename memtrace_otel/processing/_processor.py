"""The live span processor: keeps the memory evolution graph of the running app up to date.

``on_end`` only appends the ended span (immutable from then on) to a bounded buffer, or counts
it as dropped. Folding (reading the fields the graph uses from each span, then the builder's
:func:`fold_records`) happens in a background thread every ``fold_interval`` seconds, or as
soon as a chunk of 512 spans (or half the buffer, if smaller) is waiting, and on demand in
:meth:`EvolutionGraphProcessor.graph`, ``force_flush`` and ``shutdown``. Memory is bounded:
past ``max_ops`` op nodes, the stores that were active least recently are evicted.
Nothing here raises into the app: faults go to :func:`memtrace_otel._internal.internal_error`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import networkx as nx
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from memtrace_otel._internal import GcPaused, internal_error, logger
from memtrace_otel._settings import positive_int, resolve, seconds
from memtrace_otel._shim import ended_span_parts, event_attributes, nodes_of, pred_of, succ_of
from memtrace_otel.graph._build import FoldIndex, fold_records, new_graph, remove_ops
from memtrace_otel.semconv import attributes as sc
from memtrace_otel.semconv import env as E

__all__ = [
    "DEFAULT_FOLD_INTERVAL",
    "DEFAULT_MAX_BUFFER",
    "DEFAULT_MAX_OPS",
    "EvolutionGraphProcessor",
]

DEFAULT_MAX_BUFFER = 8192
"""Ended spans buffered between folds (``MEMTRACE_PROCESSOR_MAX_BUFFER``)."""
DEFAULT_MAX_OPS = 100_000
"""Op nodes kept before eviction (``MEMTRACE_PROCESSOR_MAX_OPS``)."""
DEFAULT_FOLD_INTERVAL = 1.0
"""Seconds between background folds (``MEMTRACE_PROCESSOR_FOLD_INTERVAL``); 0: on demand only."""

_CHUNK = 512  # spans folded per step: deadlines are checked between steps
_LOW_WATER = 0.9  # eviction frees room down to this share of the limit, so it runs rarely


class EvolutionGraphProcessor(SpanProcessor):
    """An OpenTelemetry ``SpanProcessor`` that folds ended spans into an evolution graph.

    Add it beside the exporting processor::

        provider.add_span_processor(BatchSpanProcessor(exporter))
        graphs = EvolutionGraphProcessor()
        provider.add_span_processor(graphs)
        ...
        G = graphs.graph()  # a snapshot, safe to query while the app goes on

    Each limit is resolved as argument > environment variable > default.

    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from memtrace_otel.instrumentation import MemTracer
    >>> provider = TracerProvider()
    >>> graphs = EvolutionGraphProcessor(fold_interval=0)
    >>> provider.add_span_processor(graphs)
    >>> mt = MemTracer(tracer_provider=provider, store_id="u1")
    >>> with mt.create("store.add") as op:
    ...     fact = op.output(mt.variable("fact:1", "likes tea", category="memory"))
    >>> G = graphs.graph()
    >>> [(d["kind"], d["outputs"]) for _, d in G.nodes(data=True) if d["type"] == "op"]
    [('create', ['fact:1@1'])]
    >>> graphs.stats["received"], graphs.stats["dropped"]
    (1, 0)
    >>> graphs.shutdown()

    Args:
        max_buffer: ended spans held between folds; when full, spans are dropped and counted.
        max_ops: op nodes kept; beyond it the least recently active stores (by the end time of
            their latest op) are evicted whole, oldest first, down to 90% of the limit; a single
            store larger than that loses its oldest ops. Plain (non-op) spans remembered for
            parent checks are bounded by the same number, oldest first.
        fold_interval: seconds between folds in a background daemon thread; ``0`` starts no
            thread and folds only in :meth:`graph`, :meth:`force_flush` and :meth:`shutdown`.

    Raises:
        ValueError: a limit given as an argument is not a positive number (a bad environment
            variable is logged once and its default used).
    """

    def __init__(
        self,
        *,
        max_buffer: int | None = None,
        max_ops: int | None = None,
        fold_interval: float | None = None,
    ) -> None:
        self.max_buffer = resolve(
            "max_buffer",
            max_buffer,
            E.ENV_MEMTRACE_PROCESSOR_MAX_BUFFER,
            DEFAULT_MAX_BUFFER,
            positive_int,
        )
        self.max_ops = resolve(
            "max_ops",
            max_ops,
            E.ENV_MEMTRACE_PROCESSOR_MAX_OPS,
            DEFAULT_MAX_OPS,
            positive_int,
        )
        self.fold_interval = resolve(
            "fold_interval",
            fold_interval,
            E.ENV_MEMTRACE_PROCESSOR_FOLD_INTERVAL,
            DEFAULT_FOLD_INTERVAL,
            seconds,
        )
        # The fold thread is woken as soon as a chunk is buffered (or half the buffer, if
        # smaller), not at half the buffer: fewer ended spans are held at a time, and folding them
        # soon after they end measured a little cheaper in total CPU (bench_graph's total-CPU
        # set-up, three runs comparing both in the same process: 1.76-1.85x -> 1.49-1.78x).
        self._wake_at = min(_CHUNK, (self.max_buffer + 1) // 2)
        self._graph = new_graph()
        # What each fold would otherwise rebuild from the whole graph; G.graph's sorted lists are
        # settled when the graph is read (or evicted from), not after every chunk.
        self._index = FoldIndex(deferred=True)
        self._resource: tuple[object, Mapping[str, Any]] = (None, {})  # the last span's resource
        self._buffer: deque[ReadableSpan] = deque()
        self._buffer_lock = threading.Lock()
        self._graph_lock = threading.RLock()  # held while folding and while reading the graph
        self._wake = threading.Event()
        self._closed = False
        self._op_count = 0
        self._store_activity: dict[Any, int] = {}  # store id -> end time of its latest op
        self._stats: dict[str, int] = dict.fromkeys(
            (
                "received",
                "dropped",
                "folded",
                "conversion_errors",
                "fold_errors",
                "folds",
                "evicted_ops",
                "evicted_stores",
                "evicted_non_op_spans",
            ),
            0,
        )
        self._thread: threading.Thread | None = None
        self._start_thread()
        if hasattr(os, "register_at_fork"):
            weak_self = weakref.WeakMethod(self._at_fork_reinit)
            os.register_at_fork(after_in_child=lambda: (weak_self() or _noop)())

    # --- the SpanProcessor interface -----------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Buffer the ended span, or count it as dropped; O(1), never raises.

        The first drop is logged once (a warning); later drops are only counted in
        :attr:`stats`, so a flood of spans never becomes a flood of log lines.
        """
        try:
            first_drop = wake = False
            with self._buffer_lock:
                closed = self._closed
                dropped = closed or len(self._buffer) >= self.max_buffer
                if dropped:
                    self._stats["dropped"] += 1
                    first_drop = self._stats["dropped"] == 1
                else:
                    self._buffer.append(span)
                    self._stats["received"] += 1
                    wake = len(self._buffer) >= self._wake_at
            # Logged outside the lock: a handler may be slow, or even end a span of its own.
            if first_drop:
                _warn_first_drop(self.max_buffer, closed)
            if wake and self._thread is not None and not self._wake.is_set():
                self._wake.set()  # (is_set first: set() takes a lock, once per span otherwise)
        except Exception:
            internal_error("processor.on_end")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Fold every buffered span, within ``timeout_millis``; False when time ran out."""
        try:
            return self._fold(time.monotonic() + max(timeout_millis, 0) / 1000)
        except Exception:
            internal_error("processor.force_flush")
            return False

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Stop the background thread and fold what is buffered, within ``timeout_millis``.

        Spans ending afterwards are dropped; the graph stays readable.
        """
        try:
            deadline = time.monotonic() + max(timeout_millis, 0) / 1000
            with self._buffer_lock:
                if self._closed:
                    return
                self._closed = True
            self._wake.set()
            thread = self._thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(deadline - time.monotonic(), 0))
            self._fold(deadline)
        except Exception:
            internal_error("processor.shutdown")

    # --- reading the graph ---------------------------------------------------------------------

    def graph(self) -> nx.MultiDiGraph:
        """Fold what is buffered and return a copy of the graph (safe to use while spans go on).

        Returns an empty graph if folding fails (and reports the fault); never raises.
        """
        try:
            with self._graph_lock:
                self._fold(None)
                self._index.settle(self._graph)
                return _snapshot(self._graph)
        except Exception:
            internal_error("processor.graph")
            return new_graph()

    @contextlib.contextmanager
    def locked_graph(self) -> Iterator[nx.MultiDiGraph]:
        """The live graph, folded up to now, without copying; no fold runs inside the block.

        Keep the block short: spans keep being buffered (and dropped once the buffer is full).
        Do not modify the graph.
        """
        with self._graph_lock:
            try:
                self._fold(None)
                self._index.settle(self._graph)
            except Exception:
                internal_error("processor.locked_graph")
            yield self._graph

    @property
    def stats(self) -> dict[str, int]:
        """Counters: ``received``, ``dropped``, ``folded``, ``conversion_errors``, ``fold_errors``,
        ``folds``, ``evicted_ops``, ``evicted_stores``, ``evicted_non_op_spans``, plus the
        current ``buffered`` spans and ``ops`` in the graph."""
        with self._buffer_lock:
            stats = dict(self._stats)
            stats["buffered"] = len(self._buffer)
        stats["ops"] = self._op_count
        return stats

    # --- folding -------------------------------------------------------------------------------

    def _fold(self, deadline: float | None) -> bool:
        """Fold buffered spans chunk by chunk; True when the buffer was emptied in time."""
        with self._graph_lock:
            while True:
                with self._buffer_lock:
                    if not self._buffer:
                        return True
                    count = min(len(self._buffer), _CHUNK)
                    batch = [self._buffer.popleft() for _ in range(count)]
                self._fold_batch(batch)
                if deadline is not None and time.monotonic() >= deadline:
                    with self._buffer_lock:
                        return not self._buffer

    def _fold_batch(self, batch: list[ReadableSpan]) -> None:
        # One chunk (at most _CHUNK spans, some milliseconds) with the cyclic collector paused:
        # the records and graph entries it makes hold no cycles, and with the collector on its
        # collections traversed the whole live graph again and again (twice the fold's cost).
        with GcPaused():
            self._fold_chunk(batch)

    def _fold_chunk(self, batch: list[ReadableSpan]) -> None:
        records: list[_Record] = []
        for span in batch:
            try:
                records.append(self._record(span))
            except Exception:
                self._count("conversion_errors")
                internal_error("processor.convert")
        G = self._graph
        try:
            new_ops = fold_records(G, records, self._index)
            self._op_count += len(new_ops)
            nodes = nodes_of(G)
            activity = self._store_activity
            for span_id in new_ops:
                op = nodes[span_id]
                store = _store_key(op["store"])
                last = activity.get(store, 0)
                end = op["end"]
                activity[store] = end if end > last else last
            self._count("folded", len(records))
            self._count("folds")
            self._evict()
        except Exception:
            self._count("fold_errors")
            internal_error("processor.fold")

    def _record(self, span: ReadableSpan) -> _Record:
        """What the graph reads of an ended span (see :class:`_Record`)."""
        ctx = span.context
        assert ctx is not None, "an ended SDK span always has a context"
        parent = span.parent
        status_code = span.status.status_code
        resource = span.resource
        cached = self._resource
        if cached[0] is not resource:
            cached = self._resource = (resource, _plain_dict(resource.attributes))
        attributes, events, links = ended_span_parts(span)
        return _new(  # type: ignore[no-any-return]
            _Record,
            (
                format(ctx.trace_id, "032x"),
                format(ctx.span_id, "016x"),
                span.name,
                format(parent.span_id, "016x") if parent is not None else None,
                span.start_time or 0,
                span.end_time or 0,
                _STATUS_NAMES.get(status_code) or status_code.name,
                attributes,
                tuple(
                    [
                        _new(_Event, (e.name, e.timestamp or 0, event_attributes(e)))
                        for e in events
                        if e.name == _VARIABLE_EVENT  # the only events the graph reads
                    ]
                )
                if events
                else (),
                tuple(
                    [
                        _new(
                            _Link,
                            (
                                format(link.context.trace_id, "032x"),
                                format(link.context.span_id, "016x"),
                                _plain_dict(link.attributes),
                            ),
                        )
                        for link in links
                    ]
                )
                if links
                else (),
                cached[1],
            ),
        )

    def _evict(self) -> None:
        G = self._graph
        non_op: dict[str, str | None] = G.graph["non_op_spans"]
        if len(non_op) > self.max_ops or self._op_count > self.max_ops:
            self._index.settle(G)  # eviction reads and rewrites G.graph's lists
        if len(non_op) > self.max_ops:
            excess = len(non_op) - int(self.max_ops * _LOW_WATER)
            for span_id in list(itertools.islice(non_op, excess)):
                del non_op[span_id]
            self._count("evicted_non_op_spans", excess)
            self._refresh_trace_ids()
        if self._op_count <= self.max_ops:
            return
        target = int(self.max_ops * _LOW_WATER)
        by_store: dict[Any, list[tuple[int, str]]] = {}
        for node, data in nodes_of(G).items():
            if data.get("type") == "op":
                by_store.setdefault(_store_key(data.get("store")), []).append((data["end"], node))
        victims: list[str] = []
        remaining = self._op_count
        for store in sorted(by_store, key=lambda s: (self._store_activity.get(s, 0), str(s))):
            if remaining <= target:
                break
            ops = by_store[store]
            if remaining - len(ops) >= target:
                del self._store_activity[store]
                self._count("evicted_stores")
            else:
                # Evicting part of this store is enough: its oldest ops go.
                ops = sorted(ops)[: remaining - target]
            victims.extend(span_id for _, span_id in ops)
            remaining -= len(ops)
        removed = remove_ops(G, victims)
        self._op_count -= removed
        self._count("evicted_ops", removed)
        self._refresh_trace_ids()

    def _refresh_trace_ids(self) -> None:
        G = self._graph
        G.graph["trace_ids"] = sorted(
            {data["trace_id"] for data in nodes_of(G).values() if data.get("type") == "op"}
        )

    def _count(self, name: str, amount: int = 1) -> None:
        with self._buffer_lock:
            self._stats[name] += amount

    # --- the background thread -----------------------------------------------------------------

    def _start_thread(self) -> None:
        if self.fold_interval <= 0:
            self._thread = None
            return
        self._thread = threading.Thread(target=self._run, name="memtrace-graph-fold", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.fold_interval)
            self._wake.clear()
            with self._buffer_lock:
                closed = self._closed
            if closed:
                return
            try:
                self._fold(None)
            except Exception:
                internal_error("processor.background_fold")

    def _at_fork_reinit(self) -> None:
        # The child has one thread: locks may be held by threads that no longer exist.
        self._buffer_lock = threading.Lock()
        self._graph_lock = threading.RLock()
        self._wake = threading.Event()
        self._buffer.clear()
        if not self._closed:
            self._start_thread()


_STATUS_NAMES = {code: code.name for code in StatusCode}
_VARIABLE_EVENT = sc.MEMTRACE_VARIABLE_EVENT
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _Event(NamedTuple):
    """A ``memtrace.variable`` event of a span, as the graph reads it."""

    name: str
    time_unix_nano: int
    attributes: Mapping[str, Any]


class _Link(NamedTuple):
    """A span link, as the graph reads it."""

    trace_id: str
    span_id: str
    attributes: Mapping[str, Any]


class _Record(NamedTuple):
    """The fields of an ended SDK span the graph builder reads (its ``FoldInput``), no more.

    ``span_to_record`` makes a complete, frozen :class:`SpanRecord` (kind, scope, trace state,
    status message, every event, each mapping frozen value by value), which the graph never
    reads: for the live fold that copy cost about as much as the fold itself. The attribute
    dicts here are the SDK's own (not copies: an ended span no longer changes, and the builder
    only reads them; see ``memtrace_otel/_shim.py``, entry 4); values the SDK would not produce
    (a span made by hand) are made plain by the builder, as for any record.

    Named tuples, made with ``tuple.__new__`` (:func:`_new`): one C call per record and per
    event, where a class's ``__init__`` ran a Python frame setting each field (a tenth of the
    reading cost); the builder reads the fields by name through C-level getters.
    """

    trace_id: str
    span_id: str
    name: str
    parent_span_id: str | None
    start_time_unix_nano: int
    end_time_unix_nano: int
    status_code: str
    attributes: Mapping[str, Any]
    events: tuple[_Event, ...]
    links: tuple[_Link, ...]
    resource_attributes: Mapping[str, Any]


_new: Any = tuple.__new__
"""``_new(_Record, (field, ...))``: a named tuple without its Python-level ``__new__``."""


def _plain_dict(attributes: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A plain dict of SDK attributes: ``BoundedAttributes.copy`` where it is one (a C-level
    dict copy; reading a ``BoundedAttributes`` key by key, even its ``len``, runs Python code)."""
    try:
        plain = attributes.copy()  # type: ignore[union-attr]
    except AttributeError:
        return dict(attributes) if attributes else _EMPTY
    return plain if type(plain) is dict else dict(attributes)  # type: ignore[arg-type]


def _store_key(store: Any) -> Any:
    """A store id usable as a dict key (the graph keeps array values as lists)."""
    return store if store.__class__ is not list else repr(store)


def _warn_first_drop(max_buffer: int, closed: bool) -> None:
    reason = "it is shut down" if closed else f"its buffer of {max_buffer} spans is full"
    logger.warning(
        "EvolutionGraphProcessor dropped an ended span because %s; further drops are counted "
        "in stats['dropped'] and not logged (raise max_buffer or "
        "MEMTRACE_PROCESSOR_MAX_BUFFER if this happens in normal operation)",
        reason,
    )


def _snapshot(G: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """``G.copy()``, made by filling the new graph's dicts directly (see ``_shim.py``, entry 3).

    The same graph as ``G.copy()``, down to the order of every dict: each node's and each
    edge's attribute dict copied, the successor and predecessor dicts of every node new, the
    edge key dicts shared between them as networkx shares them, predecessors in the order
    ``G.copy()`` adds the edges. ``G.copy()`` adds each node and edge through
    ``add_nodes_from`` / ``add_edges_from``, several Python-level steps per edge: as much CPU as
    folding the spans took in the first place, paid on every call.
    """
    copy: nx.MultiDiGraph = nx.MultiDiGraph()
    nodes = nodes_of(G)
    copy_nodes, copy_succ, copy_pred = nodes_of(copy), succ_of(copy), pred_of(copy)
    copy_nodes.update(zip(nodes, map(dict.copy, nodes.values()), strict=True))
    for node in nodes:
        copy_succ[node] = {}
        copy_pred[node] = {}
    for u, nbrs in succ_of(G).items():
        out = copy_succ[u]
        for v, keydict in nbrs.items():
            keyed = {key: data.copy() for key, data in keydict.items()}
            out[v] = keyed
            copy_pred[v][u] = keyed
    copy.graph.update(G.graph)
    copy.graph["non_op_spans"] = dict(G.graph["non_op_spans"])
    copy.graph["anomalies"] = [dict(a) for a in G.graph["anomalies"]]
    copy.graph["trace_ids"] = list(G.graph["trace_ids"])
    return copy


def _noop() -> None:
    pass

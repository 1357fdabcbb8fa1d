"""The one builder of the memory evolution graph: span records in, a networkx ``MultiDiGraph`` out.

Both the live processor and every offline source fold span records (:class:`SpanRecord`, or
any :class:`FoldInput`) with :func:`add_records`; :func:`build_graph` is the same fold into a
new graph. The schema (node and edge attributes, ``G.graph`` keys) is described in
``docs/graph.md``.

How order independence works. Everything an op contributes is stored where it can be found
again: the op's own attributes on its node, and what its ``memtrace.variable`` event said about
a variable as the attributes of the edge between the op and that variable. A variable's attributes are
then *derived* from its incident edges by a fixed ranking (the writer's output event first, else
the earliest reader's input event), so they do not depend on which span arrived first. Anomalies
are kept in a dictionary keyed by what they are about and written back sorted. Duplicate spans
are detected by span id: identical copies are skipped, differing copies keep the copy with the
smaller canonical form and are reported.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import networkx as nx

from memtrace_otel._internal import GcPaused
from memtrace_otel._shim import nodes_of, pred_of, succ_of
from memtrace_otel.semconv import attributes as sc
from memtrace_otel.semconv.values import DEFAULT_STAGE_BY_KIND, OpKind, Role

__all__ = [
    "READ",
    "VERSION",
    "WRITE",
    "FoldIndex",
    "FoldInput",
    "add_records",
    "build_graph",
    "fold_records",
    "new_graph",
    "op_order_key",
    "remove_ops",
]

READ = "read"
"""Edge key of ``variable -> op`` edges: the op read the variable."""
WRITE = "write"
"""Edge key of ``op -> variable`` edges: the op wrote the variable."""
VERSION = "version"
"""Edge key of the derived ``<id>@v -> <id>@v+1`` edges."""

OP_KIND_OTHER = "other"
_KINDS = frozenset(kind.value for kind in OpKind)
_DEFAULT_STAGE = {kind.value: stage.value for kind, stage in DEFAULT_STAGE_BY_KIND.items()}
_CASE_STAGES = frozenset(["retrieval", "response", "evaluation"])
"""Stages of ops that serve one question: without ``memtrace.case.id`` their case is their trace."""

# Span attributes that get a node attribute of their own; the rest go to ``attributes``.
_DEDICATED = frozenset(
    {
        sc.MEMTRACE_OP_KIND,
        sc.MEMTRACE_OP_NAME,
        sc.MEMTRACE_OP_INPUTS,
        sc.MEMTRACE_OP_OUTPUTS,
        sc.MEMTRACE_STAGE,
        sc.MEMTRACE_SYSTEM,
        sc.GEN_AI_MEMORY_STORE_ID,
        sc.MEMTRACE_CASE_ID,
        sc.MEMTRACE_PROMPT_REF,
        sc.MEMTRACE_JUDGE_VERDICT,
    }
)

# The variable attributes derived from a variable event (and their values without one).
_NO_EVENT: dict[str, Any] = {
    "category": None,
    "digest": None,
    "value": None,
    "truncated": False,
    "deleted": False,
    "meta": None,
}

# The attribute names the fold reads for every span, as module globals (a global lookup is a
# third of a module attribute's).
_MEMTRACE_OP_KIND = sc.MEMTRACE_OP_KIND
_MEMTRACE_OP_NAME = sc.MEMTRACE_OP_NAME
_MEMTRACE_OP_INPUTS = sc.MEMTRACE_OP_INPUTS
_MEMTRACE_OP_OUTPUTS = sc.MEMTRACE_OP_OUTPUTS
_MEMTRACE_STAGE = sc.MEMTRACE_STAGE
_MEMTRACE_SYSTEM = sc.MEMTRACE_SYSTEM
_GEN_AI_MEMORY_STORE_ID = sc.GEN_AI_MEMORY_STORE_ID
_MEMTRACE_CASE_ID = sc.MEMTRACE_CASE_ID
_MEMTRACE_PROMPT_REF = sc.MEMTRACE_PROMPT_REF
_MEMTRACE_JUDGE_VERDICT = sc.MEMTRACE_JUDGE_VERDICT
_MEMTRACE_VARIABLE_REF = sc.MEMTRACE_VARIABLE_REF
_SERVICE_NAME = sc.SERVICE_NAME
_MEMTRACE_VARIABLE_EVENT = sc.MEMTRACE_VARIABLE_EVENT
_MEMTRACE_VARIABLE_ROLE = sc.MEMTRACE_VARIABLE_ROLE
_MEMTRACE_VARIABLE_VALUE = sc.MEMTRACE_VARIABLE_VALUE
_MEMTRACE_VARIABLE_META = sc.MEMTRACE_VARIABLE_META
_MEMTRACE_VARIABLE_CATEGORY = sc.MEMTRACE_VARIABLE_CATEGORY
_MEMTRACE_VARIABLE_DIGEST = sc.MEMTRACE_VARIABLE_DIGEST
_MEMTRACE_VARIABLE_TRUNCATED = sc.MEMTRACE_VARIABLE_TRUNCATED
_MEMTRACE_VARIABLE_DELETED = sc.MEMTRACE_VARIABLE_DELETED

_ROLE_OUTPUT = Role.OUTPUT.value
_NOT_OP: dict[str, Any] = {"type": None}  # what a span id that is not a loaded op looks like
_NO_EDGE: dict[str, Any] = {}  # read only: what a missing edge looks like

Event = dict[str, Any]
AnomalyKey = tuple[str, tuple[str, ...], str]


class _EventInput(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def time_unix_nano(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...


class _LinkInput(Protocol):
    @property
    def trace_id(self) -> str: ...
    @property
    def span_id(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...


class FoldInput(Protocol):
    """The fields of a :class:`SpanRecord` the builder reads: any object that has them can be
    folded (the live processor folds a lighter record of each SDK span; see
    ``memtrace_otel/processing``). Mappings are only read, never kept: values are copied."""

    @property
    def trace_id(self) -> str: ...
    @property
    def span_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def parent_span_id(self) -> str | None: ...
    @property
    def start_time_unix_nano(self) -> int: ...
    @property
    def end_time_unix_nano(self) -> int: ...
    @property
    def status_code(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...
    @property
    def events(self) -> Sequence[_EventInput]: ...
    @property
    def links(self) -> Sequence[_LinkInput]: ...
    @property
    def resource_attributes(self) -> Mapping[str, Any]: ...


def new_graph() -> nx.MultiDiGraph:
    """An empty evolution graph with its ``G.graph`` keys in place.

    >>> sorted(new_graph().graph)
    ['anomalies', 'non_op_spans', 'trace_ids']
    """
    G = nx.MultiDiGraph()
    G.graph.update(anomalies=[], trace_ids=[], non_op_spans={})
    return G


def build_graph(records: Iterable[FoldInput]) -> nx.MultiDiGraph:
    """Build the memory evolution graph of ``records``.

    Only spans carrying ``memtrace.op.kind`` or ``memtrace.op.name`` become op nodes; other spans
    are remembered in ``G.graph["non_op_spans"]`` (span id -> parent span id) so that ops whose
    parent is such a span are not reported as orphans. Bad input never stops the build: it is
    listed in ``G.graph["anomalies"]``.

    Args:
        records: span records in any order; duplicates are folded once.

    Returns:
        A new ``networkx.MultiDiGraph`` (schema in ``docs/graph.md``).

    >>> from memtrace_otel.semconv import SpanRecord, attributes as sc
    >>> extract = SpanRecord(
    ...     trace_id="0" * 31 + "1", span_id="00000000000000a1", name="memtrace.extract fx",
    ...     attributes={sc.MEMTRACE_OP_KIND: "extract", sc.MEMTRACE_OP_NAME: "fx",
    ...                 sc.MEMTRACE_OP_INPUTS: ("msg:1@1",), sc.MEMTRACE_OP_OUTPUTS: ("fact:1@1",)})
    >>> G = build_graph([extract])
    >>> sorted(G.edges(keys=True))
    [('00000000000000a1', 'fact:1@1', 'write'), ('msg:1@1', '00000000000000a1', 'read')]
    >>> G.nodes["msg:1@1"]["external"], G.nodes["fact:1@1"]["writer"]
    (True, '00000000000000a1')
    """
    G = new_graph()
    add_records(G, records)
    return G


def add_records(G: nx.MultiDiGraph, records: Iterable[FoldInput]) -> None:
    """Fold ``records`` into ``G`` in place.

    The result is the graph :func:`build_graph` would make from all records ever folded into
    ``G``, whatever the arrival order; folding the same span again changes nothing.

    Args:
        G: a graph made by :func:`new_graph`, :func:`build_graph` or a JSON round trip.
        records: span records in any order.

    >>> from memtrace_otel.semconv import SpanRecord, attributes as sc
    >>> def op(span_id, kind, inputs, outputs):
    ...     return SpanRecord(trace_id="0" * 31 + "1", span_id=span_id, name=kind, attributes={
    ...         sc.MEMTRACE_OP_KIND: kind, sc.MEMTRACE_OP_NAME: kind,
    ...         sc.MEMTRACE_OP_INPUTS: inputs, sc.MEMTRACE_OP_OUTPUTS: outputs})
    >>> G = new_graph()
    >>> add_records(G, [op("00000000000000b2", "update", ("m@1",), ("m@2",))])
    >>> add_records(G, [op("00000000000000b1", "create", (), ("m@1",))])
    >>> G.has_edge("m@1", "m@2", key="version"), G.nodes["m@1"]["external"]
    (True, False)
    """
    with GcPaused():
        fold_records(G, records)


class FoldIndex:
    """What successive folds into one graph keep between calls: the set of its trace ids and its
    anomalies by key, which every fold otherwise rebuilds from ``G.graph`` (and sorts back), a
    cost that grows with the graph. The live processor folds chunk after chunk into one graph;
    without an index a chunk's cost grew with all the traces seen so far. The index is used only
    while ``G.graph`` still holds the very lists the last fold with it wrote; anything else (an
    eviction, a caller's edit) makes the next fold rebuild.

    With ``deferred=True`` the folds also leave ``G.graph["trace_ids"]`` unsorted and
    ``G.graph["anomalies"]`` as it was, and :meth:`settle` puts them right: for an owner that
    reads the graph less often than it folds (the live processor settles before every read).
    """

    __slots__ = ("anomalies", "anomaly_list", "deferred", "pending", "trace_ids", "trace_list")

    def __init__(self, *, deferred: bool = False) -> None:
        self.deferred = deferred
        self.pending = False  # deferred work not yet settled
        self.anomalies: _Anomalies | None = None
        self.anomaly_list: object = None
        self.trace_ids: set[str] = set()
        self.trace_list: object = None

    def settle(self, G: nx.MultiDiGraph) -> None:
        """Sort ``G.graph["trace_ids"]`` and write the anomalies back, as a fold without
        deferral would have (nothing to do when no deferred fold ran)."""
        graph = G.graph
        anomalies = self.anomalies
        if (
            not self.pending
            or anomalies is None
            or self.trace_list is not graph.get("trace_ids")
            or self.anomaly_list is not graph.get("anomalies")
        ):
            return
        graph["trace_ids"].sort()
        if anomalies.changed:
            graph["anomalies"] = self.anomaly_list = [anomalies[k] for k in sorted(anomalies)]
            anomalies.changed = False
        self.pending = False


class _Anomalies(dict[AnomalyKey, dict[str, Any]]):
    """Anomalies by key, remembering whether a fold changed them (then they are sorted back)."""

    __slots__ = ("changed",)

    def __init__(self, items: Iterable[tuple[AnomalyKey, dict[str, Any]]] = ()) -> None:
        super().__init__(items)
        self.changed = False

    def __setitem__(self, key: AnomalyKey, value: dict[str, Any]) -> None:
        self.changed = True
        super().__setitem__(key, value)

    def __delitem__(self, key: AnomalyKey) -> None:
        self.changed = True
        super().__delitem__(key)


def fold_records(
    G: nx.MultiDiGraph, records: Iterable[FoldInput], index: FoldIndex | None = None
) -> list[str]:
    """:func:`add_records` without pausing the garbage collector (for the live processor).

    Args:
        G: as for :func:`add_records`.
        records: as for :func:`add_records`.
        index: kept by a caller that folds into ``G`` again and again (see :class:`FoldIndex`).

    Returns:
        The span ids of the op nodes that were not in ``G`` before, in arrival order.
    """
    fold = _Fold(G, index)
    add = fold.add
    for record in records:
        add(record)
    fold.finish()
    return fold.added


def remove_ops(G: nx.MultiDiGraph, span_ids: Iterable[str]) -> int:
    """Remove op nodes (and variables no op touches any more), keeping ``G`` consistent.

    Used by the live processor to evict old data. Anomalies about removed spans are dropped;
    ``duplicate_write`` and ``cycle`` anomalies are recomputed around them.

    Returns:
        How many op nodes were removed.

    >>> from memtrace_otel.semconv import SpanRecord, attributes as sc
    >>> G = build_graph([SpanRecord("0" * 31 + "1", "00000000000000c1", "create", attributes={
    ...     sc.MEMTRACE_OP_KIND: "create", sc.MEMTRACE_OP_OUTPUTS: ("m@1",)})])
    >>> remove_ops(G, ["00000000000000c1", "not-there"]), G.number_of_nodes()
    (1, 0)
    """
    fold = _Fold(G)
    removed = 0
    for span_id in span_ids:
        if G.nodes.get(span_id, {}).get("type") == "op":
            fold.remove_op(span_id, forget=True)
            removed += 1
    fold.finish()
    return removed


def op_order_key(op: Mapping[str, Any]) -> tuple[int, int, str, str]:
    """The execution-order key of an op node's attributes: ``(start, end, trace_id, span_id)``.

    >>> op_order_key({"start": 5, "end": 9, "trace_id": "t", "span_id": "s", "kind": "judge"})
    (5, 9, 't', 's')
    """
    return (op["start"], op["end"], op["trace_id"], op["span_id"])


class _Fold:
    """One ``add_records`` call: the changes so far and what must be recomputed at the end."""

    def __init__(self, G: nx.MultiDiGraph, index: FoldIndex | None = None) -> None:
        self.G = G
        # networkx's own dicts (see memtrace_otel/_shim.py): filled and read directly.
        self.nodes, self.succ, self.pred = nodes_of(G), succ_of(G), pred_of(G)
        graph = G.graph
        anomaly_list = graph.get("anomalies", ())
        trace_list = graph.get("trace_ids", ())
        self.index = index
        self.indexed = (
            index is not None
            and index.anomalies is not None
            and index.anomaly_list is anomaly_list
            and index.trace_list is trace_list
        )
        if self.indexed:
            assert index is not None and index.anomalies is not None
            self.anomalies = index.anomalies
            self.trace_ids = index.trace_ids
        else:
            self.anomalies = _Anomalies((_anomaly_key(a), a) for a in anomaly_list)
            self.trace_ids = set(trace_list)
        if index is not None:  # invalid until finish() has written G.graph back
            index.anomaly_list = index.trace_list = None
        self.new_trace_ids: list[str] = []
        self.non_op: dict[str, str | None] = graph.setdefault("non_op_spans", {})
        # Insertion-ordered dicts used as sets: walking them in the order the nodes were made
        # visits memory in allocation order, which keeps large builds linear (a set's hash
        # order jumps around the heap and misses the CPU cache on every node).
        self.touched: dict[str, None] = {}  # variables whose derived attributes must be recomputed
        self.new_vars: dict[str, None] = {}  # variables that may need version edges
        self.cycle_heads: set[str] = set()  # heads of new edges: any new cycle runs through one
        self.new_spans: dict[str, None] = {}  # new plain (non-op) spans
        self.new_ops: dict[str, None] = {}
        self.new_readers: dict[str, list[str]] = {}  # earlier variables -> their new readers
        self.added: list[str] = []  # ops that were not in the graph before (not replacements)
        self.evicted: set[str] = set()  # removed ops whose anomalies must go
        self.writer_counts: dict[str, int] = {}  # of the variables derived in finish()
        # A fresh build (into an empty graph) takes two short cuts: every version edge is found
        # from its newer end (a new variable looks for its predecessor), and the proof that
        # data flow has no cycle is made edge by edge as variables are derived (see _prove).
        self.fresh = not self.nodes
        self.look_ahead = not self.fresh
        self.proving = self.fresh  # no edge has broken both proofs yet
        self.by_end = self.by_start = self.fresh  # no edge has broken this proof yet

    # --- adding ---------------------------------------------------------------------------------

    def add(self, record: FoldInput) -> None:
        attrs = record.attributes
        trace_id = record.trace_id
        if trace_id not in self.trace_ids:
            self.trace_ids.add(trace_id)
            self.new_trace_ids.append(trace_id)
        span_id = record.span_id
        if _MEMTRACE_OP_KIND not in attrs and _MEMTRACE_OP_NAME not in attrs:
            # A span id is an op when any copy of it says so; the op wins whatever the order.
            if span_id not in self.nodes and span_id not in self.non_op:
                self.non_op[span_id] = record.parent_span_id or None
                self.new_spans[span_id] = None
            return
        self.non_op.pop(span_id, None)
        anomalies: list[dict[str, Any]] = []
        op, reads, writes = _op_from_record(record, anomalies)
        existing = self.nodes.get(span_id)
        if existing is None:
            self.added.append(span_id)
        elif not self._replace_duplicate(span_id, existing, op, reads, writes):
            return
        for anomaly in anomalies:
            self.anomalies[_anomaly_key(anomaly)] = anomaly
        self._insert_op(span_id, op, reads, writes)

    def _replace_duplicate(
        self,
        span_id: str,
        existing: dict[str, Any],
        op: dict[str, Any],
        reads: dict[str, Event | None],
        writes: dict[str, Event | None],
    ) -> bool:
        """Whether a second copy of an op's span should replace the one in the graph."""
        old_reads, old_writes = self._edge_events(span_id)
        if existing == op and old_reads == reads and old_writes == writes:
            return False
        anomaly = _anomaly(
            "conflicting_span",
            [span_id],
            None,
            "several different spans share this span id; the graph keeps the one with the "
            "smallest canonical form",
        )
        self.anomalies[_anomaly_key(anomaly)] = anomaly
        if _canonical(existing, old_reads, old_writes) <= _canonical(op, reads, writes):
            return False
        self.remove_op(span_id, forget=False)
        return True

    def _edge_events(self, span_id: str) -> tuple[dict[str, Event | None], dict[str, Event | None]]:
        succ, pred = self.succ, self.pred
        reads = {ref: succ[ref][span_id][READ] or None for ref in pred[span_id]}
        writes = {ref: keyed[WRITE] or None for ref, keyed in succ[span_id].items()}
        return reads, writes

    def _insert_op(
        self,
        span_id: str,
        op: dict[str, Any],
        reads: dict[str, Event | None],
        writes: dict[str, Event | None],
    ) -> None:
        # networkx's own adjacency dictionaries are filled directly: add_node/add_edge copy
        # attribute dicts and re-check keys, which is most of the cost of a large build.
        nodes, succ, pred = self.nodes, self.succ, self.pred
        nodes[span_id] = op
        op_succ: dict[str, dict[str, dict[str, Any]]] = {}
        op_pred: dict[str, dict[str, dict[str, Any]]] = {}
        succ[span_id] = op_succ
        pred[span_id] = op_pred
        self.new_ops[span_id] = None
        touched = self.touched
        new_vars = self.new_vars
        fresh = self.fresh
        for ref, event in reads.items():
            keyed = {READ: event or {}}
            op_pred[ref] = keyed
            if ref not in nodes:
                # A new variable. "x@01": its neighbours cannot name it, so it looks both ways.
                ident, _, version = ref.rpartition("@")
                if version[0] == "0":
                    self.look_ahead = True
                nodes[ref] = {"type": "variable", "id": ident, "version": int(version)}
                succ[ref] = {span_id: keyed}
                pred[ref] = {}
                new_vars[ref] = None
                touched[ref] = None
                continue
            if fresh or ref in new_vars:
                touched[ref] = None
            else:
                # A variable from an earlier fold that gains a reader: see _add_readers.
                self.new_readers.setdefault(ref, []).append(span_id)
            succ[ref][span_id] = keyed
        cycle_heads = self.cycle_heads
        for ref, event in writes.items():
            keyed = {WRITE: event or {}}
            op_succ[ref] = keyed
            if ref not in nodes:
                ident, _, version = ref.rpartition("@")
                if version[0] == "0":
                    self.look_ahead = True
                nodes[ref] = {"type": "variable", "id": ident, "version": int(version)}
                succ[ref] = {}
                pred[ref] = {span_id: keyed}
                new_vars[ref] = None
            else:
                pred[ref][span_id] = keyed
            touched[ref] = None
            cycle_heads.add(ref)

    # --- removing -------------------------------------------------------------------------------

    def remove_op(self, span_id: str, *, forget: bool) -> None:
        """Remove an op; ``forget`` (eviction) also drops the anomalies about it, in finish().

        Without ``forget`` (a conflicting copy replaces it), the anomalies that came from this
        copy go now, before the replacement adds its own; the conflict itself is kept.
        """
        G = self.G
        self.touched.update(dict.fromkeys(self.pred[span_id]))
        self.touched.update(dict.fromkeys(self.succ[span_id]))
        G.remove_node(span_id)
        self.new_ops.pop(span_id, None)
        if forget:
            self.evicted.add(span_id)
            return
        for key, anomaly in list(self.anomalies.items()):
            if span_id in anomaly["span_ids"] and anomaly["type"] not in (
                "conflicting_span",
                "duplicate_write",
            ):
                self._drop_anomaly(key, anomaly, span_id)

    def _drop_anomaly(self, key: AnomalyKey, anomaly: dict[str, Any], span_id: str) -> None:
        if anomaly["type"] == "cycle":
            # The cycle may be broken now; its other ops are rechecked in finish().
            self.cycle_heads.update(s for s in anomaly["span_ids"] if s != span_id)
        del self.anomalies[key]

    def _forget_evicted(self) -> None:
        evicted = self.evicted
        for key, anomaly in list(self.anomalies.items()):
            for span_id in anomaly["span_ids"]:
                if span_id in evicted:
                    self._drop_anomaly(key, anomaly, span_id)
                    break

    # --- finishing ------------------------------------------------------------------------------

    def finish(self) -> None:
        G = self.G
        if self.evicted:
            self._forget_evicted()
        for ref in self.touched:
            if ref in self.nodes:
                self._derive_variable(ref)
        for ref, readers in self.new_readers.items():
            if ref not in self.touched and ref in self.nodes:
                self._add_readers(ref, readers)
        for ref in self.new_vars:
            if ref in self.nodes:
                self._link_versions(ref)
        self._check_parents()
        self._check_duplicate_writes()
        self._check_cycles()
        graph = G.graph
        index = self.index
        deferred = self.indexed and index is not None and index.deferred
        if not self.indexed or (self.anomalies.changed and not deferred):
            graph["anomalies"] = [self.anomalies[k] for k in sorted(self.anomalies)]
            self.anomalies.changed = False
        if not self.indexed:
            graph["trace_ids"] = sorted(self.trace_ids)
        elif self.new_trace_ids:
            trace_list = graph["trace_ids"]
            trace_list.extend(self.new_trace_ids)
            if not deferred:
                trace_list.sort()
        if index is not None:
            index.pending = deferred and (index.pending or bool(self.new_trace_ids))
            index.pending = index.pending or (deferred and self.anomalies.changed)
            index.anomalies = self.anomalies
            index.anomaly_list = graph["anomalies"]
            index.trace_ids = self.trace_ids
            index.trace_list = graph["trace_ids"]

    def _derive_variable(self, ref: str) -> None:
        """Recompute a variable's attributes from its incident edges (or drop an orphan).

        The writer is the first writing op in execution order. The value and the rest come from
        one event: a writer's output event before any reader's input event, then the earliest
        event, then the smallest span id, so the choice does not depend on arrival order.
        """
        G = self.G
        nodes = self.nodes
        writers = []
        # The best event so far, its time and span (compared as the tuple (time, span)).
        best_event: Event | None = None
        best_time: Any = None
        best_op = ""
        for op, keyed in self.pred[ref].items():
            data = keyed.get(WRITE)
            if data is None:
                continue
            writers.append(op)
            if data:
                time = data["time"]
                if best_event is None or time < best_time or (time == best_time and op < best_op):
                    best_event, best_time, best_op = data, time, op
        readers = 0
        if best_event is None:  # no writer's output event: the earliest reader's input event
            for op, keyed in self.succ[ref].items():
                data = keyed.get(READ)
                if data is None:
                    continue
                readers += 1
                if data:
                    time = data["time"]
                    if (
                        best_event is None
                        or time < best_time
                        or (time == best_time and op < best_op)
                    ):
                        best_event, best_time, best_op = data, time, op
        if not writers and not readers:
            G.remove_node(ref)
            return
        node = nodes[ref]
        if best_event is None:
            node.update(_NO_EVENT)
        else:
            node["category"] = best_event["category"]
            node["digest"] = best_event["digest"]
            node["value"] = best_event["value"]
            node["truncated"] = best_event["truncated"]
            node["deleted"] = best_event["deleted"]
            node["meta"] = best_event["meta"]
        if not writers:
            writer = None
            node["time"] = best_event["time"] if best_event is not None else None
        else:
            writer = writers[0]
            if len(writers) > 1:
                writer = min(writers, key=lambda op: op_order_key(nodes[op]))
            node["time"] = nodes[writer]["end"]
        node["writer"] = writer
        node["external"] = writer is None
        node["source_span"] = best_op if best_event is not None else None
        self.writer_counts[ref] = len(writers)
        if self.proving:
            self._prove(ref, node, writers)

    def _add_readers(self, ref: str, readers: list[str]) -> None:
        """:meth:`_derive_variable` for a variable that only gained readers since it was derived.

        A shared variable (a prompt every question reads) gains readers in every fold; deriving
        it again walked all of them each time, so a live graph's fold slowed down as it grew.
        New readers cannot change its writer, and change its event only when no writer left
        one (then the earliest reader's event is the source): one comparison per new reader.
        """
        node = self.nodes[ref]
        succ_ref = self.succ[ref]
        try:
            source = node["source_span"]
            if source is not None and self.pred[ref].get(source, _NO_EDGE).get(WRITE):
                return  # the writer's output event is the source, whatever is read later
            best: tuple[int, str] | None = None
            if source is not None:
                best = (succ_ref[source][READ]["time"], source)
            best_event: Event | None = None
            for op in readers:
                data = succ_ref.get(op, _NO_EDGE).get(READ)
                if data:
                    candidate = (data["time"], op)
                    if best is None or candidate < best:
                        best, best_event = candidate, data
        except (KeyError, TypeError):  # not derived by this module: derive it in full
            self._derive_variable(ref)
            return
        if best_event is None or best is None:
            return
        node["category"] = best_event["category"]
        node["digest"] = best_event["digest"]
        node["value"] = best_event["value"]
        node["truncated"] = best_event["truncated"]
        node["deleted"] = best_event["deleted"]
        node["meta"] = best_event["meta"]
        if node["writer"] is None:
            node["time"] = best_event["time"]
        node["source_span"] = best[1]

    def _prove(self, ref: str, node: dict[str, Any], writers: list[str]) -> None:
        """Check the potentials of :func:`_ordered_by_time` along a variable's read and write edges.

        In a fresh build every variable is derived once, before any version edge exists, so
        this visits every read and write edge; :meth:`_link_versions` checks the version edges.
        If all rise in either potential, there is no cycle and :meth:`_check_cycles` has nothing
        to do; otherwise it runs the exact check.
        """
        nodes = self.nodes
        try:
            if self.by_end:
                here = _variable_potential(node)
                self.by_end = _rises(nodes, writers, self.succ[ref], "end", here)
            if self.by_start:
                here = _variable_start_potential(nodes, node)
                self.by_start = _rises(nodes, writers, self.succ[ref], "start", here)
        except (KeyError, TypeError):
            self.by_end = self.by_start = False
        self.proving = self.by_end or self.by_start

    def _link_versions(self, ref: str) -> None:
        nodes = self.nodes
        node = nodes[ref]
        ident, version = node["id"], node["version"]
        if version > 1:
            before = f"{ident}@{version - 1}"
            if before in nodes:
                self._add_version_edge(before, ref)
        if self.look_ahead:
            after = f"{ident}@{version + 1}"
            if after in nodes:
                self._add_version_edge(ref, after)

    def _add_version_edge(self, older: str, newer: str) -> None:
        succ = self.succ
        keyed = succ[older].get(newer)
        if keyed is None:
            keyed = {}
            succ[older][newer] = keyed
            self.pred[newer][older] = keyed
        if VERSION not in keyed:
            keyed[VERSION] = {}
            self.cycle_heads.add(newer)
        if self.proving:
            nodes = self.nodes
            try:
                old, new = nodes[older], nodes[newer]
                if self.by_end and _variable_potential(old) >= _variable_potential(new):
                    self.by_end = False
                if self.by_start and _variable_start_potential(
                    nodes, old
                ) >= _variable_start_potential(nodes, new):
                    self.by_start = False
            except (KeyError, TypeError):
                self.by_end = self.by_start = False
            self.proving = self.by_end or self.by_start

    def _check_parents(self) -> None:
        nodes, non_op = self.nodes, self.non_op

        def loaded(span_id: str) -> bool:
            return span_id in non_op or nodes.get(span_id, _NOT_OP).get("type") == "op"

        for key, anomaly in list(self.anomalies.items()):
            if anomaly["type"] == "missing_parent" and loaded(anomaly["parent_span_id"]):
                del self.anomalies[key]
        for span_id in self.new_ops:
            parent = nodes[span_id]["parent_span_id"]
            if parent is not None and not loaded(parent):
                anomaly = _anomaly(
                    "missing_parent",
                    [span_id],
                    None,
                    f"parent span {parent} is not loaded",
                    parent_span_id=parent,
                )
                self.anomalies[_anomaly_key(anomaly)] = anomaly
        self._check_parent_cycles()

    def _check_parent_cycles(self) -> None:
        """Report parent chains that loop (seen in broken traces); never walk one twice."""
        nodes, non_op = self.nodes, self.non_op
        done: set[str] = set()
        for start in itertools.chain(self.new_ops, self.new_spans):
            path: dict[str, int] = {}
            span: str | None = start
            while span is not None and span not in done and span not in path:
                if span in non_op:
                    parent = non_op[span]
                else:
                    data = nodes.get(span, _NOT_OP)
                    if data.get("type") != "op":
                        break  # not loaded (or removed): the chain ends here
                    parent = data["parent_span_id"]
                path[span] = len(path)
                span = parent
            if span is not None and span in path:
                cycle = sorted(list(path)[path[span] :])
                anomaly = _anomaly(
                    "parent_cycle", cycle, None, "the spans' parent links form a loop"
                )
                self.anomalies[_anomaly_key(anomaly)] = anomaly
            done.update(path)

    def _check_duplicate_writes(self) -> None:
        touched = self.touched
        for key in [k for k in self.anomalies if k[0] == "duplicate_write" and k[2] in touched]:
            del self.anomalies[key]
        pred = self.pred
        for ref, count in self.writer_counts.items():
            if count > 1:
                writers = sorted(op for op, keyed in pred[ref].items() if WRITE in keyed)
                anomaly = _anomaly(
                    "duplicate_write", writers, ref, f"{count} ops wrote the same version"
                )
                self.anomalies[_anomaly_key(anomaly)] = anomaly

    def _check_cycles(self) -> None:
        """Report data-flow cycles through the new edges (a memory graph should be acyclic)."""
        G = self.G
        nodes = self.nodes
        if self.fresh and self.proving:
            return  # every edge was checked as it was made (see _prove)
        heads = {n for n in self.cycle_heads if n in nodes}
        heads.update(n for n in self.new_ops if n in nodes)
        if not heads:
            return
        succ, pred = self.succ, self.pred
        # A new cycle runs through the head of a new edge, so it lies among their descendants.
        # When most of the graph is new (a fresh build), the whole graph is the region.
        if 2 * len(heads) > len(nodes):
            region = set(nodes)
        else:
            region = set(heads)
            stack = list(heads)
            while stack:
                for nxt in succ[stack.pop()]:
                    if nxt not in region:
                        region.add(nxt)
                        stack.append(nxt)
        for key in [k for k in self.anomalies if k[0] == "cycle" and region.intersection(k[1])]:
            del self.anomalies[key]
        if _ordered_by_time(G, region):
            return
        # Kahn's algorithm peels off every node not on or behind a cycle.
        if len(region) == len(nodes):
            indegree = {n: len(pred[n]) for n in region}
        else:
            indegree = {n: sum(1 for p in pred[n] if p in region) for n in region}
        ready = [n for n, d in indegree.items() if d == 0]
        while ready:
            node = ready.pop()
            del indegree[node]
            for nxt in succ[node]:
                if nxt in indegree:
                    indegree[nxt] -= 1
                    if indegree[nxt] == 0:
                        ready.append(nxt)
        if not indegree:
            return
        for component in nx.strongly_connected_components(G.subgraph(indegree)):
            if len(component) == 1:
                (only,) = component
                if only not in succ[only]:
                    continue
            ops = sorted(n for n in component if self.nodes[n].get("type") == "op")
            refs = sorted(n for n in component if self.nodes[n].get("type") != "op")
            anomaly = _anomaly(
                "cycle", ops, None, "data flow loops through " + ", ".join(refs), refs=refs
            )
            self.anomalies[_anomaly_key(anomaly)] = anomaly


def _ordered_by_time(G: nx.MultiDiGraph, region: Iterable[str]) -> bool:
    """A quick proof that ``region`` has no cycle: a potential that rises along every edge.

    An op's potential is ``3 * end + 1``, a written variable's ``3 * writer's end + 2``, an
    external variable's ``-1``. It rises along a write edge, along a read edge when the reader
    ended after the writer, and along a version edge when the newer version was written later,
    which is how well-formed traces look. An op that writes what the ops nested in it read (an
    ingest span whose children read its messages) ends after its readers: then the same
    potential by start times (``3 * start + 1``, ``3 * writer's start + 2``) is tried, which
    rises when every reader started after the writer. False means "not proven" (clock ties,
    skew, real cycles): the caller then runs the exact check.
    """
    try:
        return _potential_rises(G, region, "end") or _potential_rises(G, region, "start")
    except (KeyError, TypeError):  # a graph not made by this module: use the exact check
        return False


def _rises(
    nodes: Mapping[str, Any], writers: Iterable[str], readers: Iterable[str], key: str, here: int
) -> bool:
    """Whether a variable of potential ``here`` sits between its ops on the potential ``3 *
    op[key] + 1``: above every writer's, below every reader's (loops, not ``all()``: this runs
    for every variable of a fresh build)."""
    for op in writers:
        if 3 * nodes[op][key] + 1 >= here:
            return False
    for op in readers:  # noqa: SIM110
        if 3 * nodes[op][key] + 1 <= here:
            return False
    return True


def _variable_potential(data: Mapping[str, Any]) -> int:
    """A derived variable's potential (see :func:`_ordered_by_time`)."""
    return -1 if data.get("writer") is None else 3 * data["time"] + 2


def _variable_start_potential(nodes: Mapping[str, Any], data: Mapping[str, Any]) -> int:
    """A derived variable's potential by start times (see :func:`_ordered_by_time`)."""
    writer = data.get("writer")
    return -1 if writer is None else 3 * nodes[writer]["start"] + 2


def _potential_rises(G: nx.MultiDiGraph, region: Iterable[str], by: str) -> bool:
    nodes, succ = nodes_of(G), succ_of(G)
    potential: dict[str, int] = {}
    for node in region:
        data = nodes[node]
        if data["type"] == "op":
            potential[node] = 3 * data[by] + 1
        elif data.get("writer") is None:
            potential[node] = -1
        elif by == "end":
            potential[node] = 3 * data["time"] + 2
        else:
            potential[node] = 3 * nodes[data["writer"]]["start"] + 2
    # The region holds every successor of its nodes (a KeyError otherwise: the exact check).
    for node, here in potential.items():
        for nxt in succ[node]:
            if potential[nxt] <= here:
                return False
    return True


# --- span record -> op attributes ---------------------------------------------------------------


def _op_from_record(
    record: FoldInput, anomalies: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Event | None], dict[str, Event | None]]:
    """The op node attributes of a span and the events it recorded per read and written ref."""
    attrs = record.attributes
    get = attrs.get
    span_id = record.span_id
    trace_id = record.trace_id
    span_name = record.name
    raw_kind = get(_MEMTRACE_OP_KIND)
    if raw_kind.__class__ is str and raw_kind in _KINDS:
        kind = raw_kind
    else:
        kind = OP_KIND_OTHER
        if raw_kind is not None and raw_kind != OP_KIND_OTHER:
            anomalies.append(
                _anomaly("unknown_kind", [span_id], None, f"unknown op kind {raw_kind!r}")
            )
    inputs = _refs(get(_MEMTRACE_OP_INPUTS), span_id, anomalies)
    outputs = _refs(get(_MEMTRACE_OP_OUTPUTS), span_id, anomalies)
    values = (
        get(_MEMTRACE_OP_NAME),
        get(_MEMTRACE_STAGE),
        get(_MEMTRACE_SYSTEM),
        get(_GEN_AI_MEMORY_STORE_ID),
        get(_MEMTRACE_CASE_ID),
        get(_MEMTRACE_PROMPT_REF),
        get(_MEMTRACE_JUDGE_VERDICT),
    )
    # All scalars is the rule: checked in C, without a Python frame per span or per value.
    if not _SCALARS.issuperset(map(type, values)):
        values = tuple(_scalar(value) for value in values)
    name, stage, system, store, case, prompt_ref, judge_verdict = values
    if stage is None:
        stage = _DEFAULT_STAGE.get(kind)
    if case is None and stage in _CASE_STAGES:
        case = trace_id  # contract v0.2: no memtrace.case.id, the case is the trace
    links = record.links
    service = record.resource_attributes.get(_SERVICE_NAME)
    op: dict[str, Any] = {
        "type": "op",
        "kind": kind,
        "name": name if name is not None else span_name,
        "span_name": span_name,
        "stage": stage,
        "system": system,
        "store": store,
        "case": case,
        "prompt_ref": prompt_ref,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": record.parent_span_id or None,
        "start": record.start_time_unix_nano,
        "end": record.end_time_unix_nano,
        "status": record.status_code,
        "inputs": inputs,
        "outputs": outputs,
        "judge_verdict": judge_verdict,
        "links": [_link(link) for link in links] if links else [],
        "service": service if service.__class__ is str else _scalar(service),
        "attributes": {
            k: v if v.__class__ in _SCALARS else _plain(v)
            for k, v in attrs.items()
            if k not in _DEDICATED
        },
    }
    reads: dict[str, Event | None] = dict.fromkeys(inputs)
    writes: dict[str, Event | None] = dict.fromkeys(outputs)
    for event in record.events:
        if event.name != _MEMTRACE_VARIABLE_EVENT:
            continue
        ev_attrs = event.attributes
        ev_get = ev_attrs.get
        raw_ref = ev_get(_MEMTRACE_VARIABLE_REF)
        ref = raw_ref if raw_ref.__class__ is str else ""  # unhashable values cannot be looked up
        role = ev_get(_MEMTRACE_VARIABLE_ROLE)
        if ref in writes and (role == _ROLE_OUTPUT or ref not in reads):
            target = writes
        elif ref in reads:
            target = reads
        else:
            _stray_event(raw_ref, ref, span_id, anomalies)
            continue
        # What the event says about ref, as plain data (_event, inlined: once per event).
        value = ev_get(_MEMTRACE_VARIABLE_VALUE)
        if value is not None and value.__class__ is not str:
            value = json.dumps(_plain(value), ensure_ascii=False, sort_keys=True)
        meta: Any = ev_get(_MEMTRACE_VARIABLE_META)
        if meta is not None:
            meta = _parse_meta(meta, span_id, ref, anomalies)
        category = ev_get(_MEMTRACE_VARIABLE_CATEGORY)
        digest = ev_get(_MEMTRACE_VARIABLE_DIGEST)
        time = event.time_unix_nano
        parsed = {
            "role": role if role.__class__ is str else _scalar(role),
            "category": category if category.__class__ is str else _scalar(category),
            "digest": digest if digest.__class__ is str else _scalar(digest),
            "value": value,
            "truncated": ev_get(_MEMTRACE_VARIABLE_TRUNCATED) is True,
            "deleted": ev_get(_MEMTRACE_VARIABLE_DELETED) is True,
            "meta": meta,
            "time": time,
        }
        previous = target[ref]
        if previous is None or _event_rank(parsed) < _event_rank(previous):
            target[ref] = parsed
    return op, reads, writes


def _link(link: _LinkInput) -> dict[str, Any]:
    ref = link.attributes.get(_MEMTRACE_VARIABLE_REF)
    return {
        "trace_id": link.trace_id,
        "span_id": link.span_id,
        "ref": ref if ref.__class__ is str else _scalar(ref),
    }


def _stray_event(raw_ref: Any, ref: str, span_id: str, anomalies: list[dict[str, Any]]) -> None:
    """Report a variable event whose ref is neither an input nor an output of its span."""
    if _valid_ref(ref):
        anomalies.append(
            _anomaly(
                "undeclared_event",
                [span_id],
                ref,
                "a variable event names a ref that is neither an input nor an output",
            )
        )
    else:
        anomalies.append(
            _anomaly(
                "invalid_ref",
                [span_id],
                raw_ref if isinstance(raw_ref, str) else repr(raw_ref),
                "a variable event has no valid memtrace.variable.ref",
            )
        )


def _parse_meta(
    meta: Any, span_id: str, ref: str, anomalies: list[dict[str, Any]]
) -> dict[str, Any] | None:
    if meta.__class__ is str and _orjson_loads is not None:  # the common case, first
        try:
            parsed = _orjson_loads(meta)
        except ValueError:
            parsed = None
        if parsed.__class__ is dict:
            return parsed
    if isinstance(meta, Mapping):
        return _plain(meta)  # type: ignore[no-any-return]
    try:
        parsed = _loads_meta(meta) if isinstance(meta, str) else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    anomalies.append(
        _anomaly(
            "invalid_meta", [span_id], ref, f"{sc.MEMTRACE_VARIABLE_META} is not a JSON object"
        )
    )
    return None


def _loads_meta(text: str) -> Any:
    """``json.loads``, by orjson where installed (most events carry meta: a quarter of the
    build's parsing); what orjson refuses (NaN, lone surrogates, huge ints) goes to the stdlib,
    so the result is the same."""
    if _orjson_loads is not None:
        try:
            return _orjson_loads(text)
        except ValueError:
            pass
    return json.loads(text)


_orjson_loads: Any
try:  # the optional accelerator the loaders use too
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - the standard parser does the work
    _orjson_loads = None


def _event_rank(event: Event) -> tuple[int, str, str]:
    # Two events for one ref in one span is bad input; pick one deterministically.
    return (event["time"], event["digest"] or "", event["value"] or "")


def _refs(raw: Any, span_id: str, anomalies: list[dict[str, Any]]) -> list[str]:
    """Valid refs of an inputs/outputs attribute, deduplicated, in attribute order."""
    if raw is None:
        return []
    items: Sequence[Any]
    if type(raw) is tuple:
        items = raw
    elif type(raw) is str:
        items = (raw,)
    elif isinstance(raw, tuple | list):
        items = raw
    else:
        anomalies.append(
            _anomaly("invalid_ref", [span_id], repr(raw), "inputs/outputs is not a list of refs")
        )
        return []
    refs: list[str] = []
    for item in items:
        if type(item) is str:
            # _valid_ref, inlined: this runs for every ref of every span.
            ident, _, version = item.rpartition("@")
            if ident and version.isdecimal() and version.isascii() and version.lstrip("0"):
                if item not in refs:
                    refs.append(item)
                continue
        anomalies.append(
            _anomaly(
                "invalid_ref",
                [span_id],
                item if isinstance(item, str) else repr(item),
                "expected '<id>@<version>' with an integer version >= 1",
            )
        )
    return refs


def _valid_ref(text: str) -> bool:
    # semconv.parse_ref's rule, inlined: this runs for every ref of every span.
    ident, _, version = text.rpartition("@")
    return bool(ident) and version.isdecimal() and version.isascii() and version.lstrip("0") != ""


_SCALARS = frozenset({str, bool, int, float, type(None)})


def _scalar(value: Any) -> Any:
    return value if type(value) in _SCALARS else _plain(value)


def _plain(value: Any) -> Any:
    """An attribute value as plain JSON-able Python (tuples -> lists, mappings -> dicts)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


# --- anomalies ----------------------------------------------------------------------------------


def _anomaly(
    kind: str, span_ids: list[str], ref: str | None, detail: str, **extra: Any
) -> dict[str, Any]:
    return {"type": kind, "span_ids": span_ids, "ref": ref, "detail": detail, **extra}


def _anomaly_key(anomaly: Mapping[str, Any]) -> AnomalyKey:
    return (anomaly["type"], tuple(anomaly["span_ids"]), anomaly["ref"] or "")


def _canonical(
    op: Mapping[str, Any], reads: Mapping[str, Event | None], writes: Mapping[str, Event | None]
) -> str:
    return json.dumps(
        [op, sorted(reads.items()), sorted(writes.items())], sort_keys=True, default=str
    )

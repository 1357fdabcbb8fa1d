"""The one lookup vocabulary over an evolution graph: :class:`GraphIndex`, from :func:`graph_index`.

What an op read and wrote (``inputs``, ``outputs``), who wrote or read a variable (``writer``,
``readers``), its next version, a case's ops in execution order (``ops_of``), the failed and
judged cases, the records live in a store at a time, what the traces say about a case. The
attribution methods, the batch job, the report and ``memtrace graph`` all ask through it.

Built once per graph (cached weakly, rebuilt when the graph grows), so attributing thousands of
cases does not rescan the whole graph for each.

>>> from memtrace_otel.graph import example_graph
>>> G = example_graph()  # the index holds its graph weakly: keep it
>>> index = graph_index(G)
>>> index.outputs("b000000000000002"), index.next_version("mem:1@1")
(['mem:1@2'], 'mem:1@2')
"""

from __future__ import annotations

import json
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from memtrace_otel._shim import nodes_of, pred_of, succ_of
from memtrace_otel.graph._build import READ, VERSION, WRITE, op_order_key
from memtrace_otel.graph._case import Case
from memtrace_otel.semconv import Category, JudgeVerdict, OpKind

_RECORD_WRITERS = frozenset({OpKind.CREATE.value, OpKind.UPDATE.value, OpKind.DELETE.value})
_NOT_RECORDS = frozenset(
    {Category.OTHER.value, Category.QUERY.value, Category.PROMPT.value, Category.SCORE.value}
)


@dataclass
class GraphIndex:
    """Lookups over one evolution graph.

    ``failed`` holds the cases a judge op marked ``incorrect``, ``judged`` those any judge op
    decided, ``missing_traces`` the linked traces not loaded (:func:`linked_trace_ids`).
    It holds its graph weakly: the index lives in a weak-keyed cache, and a strong reference from
    the value would keep every graph alive for the whole process.
    """

    graph_ref: weakref.ReferenceType[nx.MultiDiGraph]
    size: int
    case_ops: dict[str, list[str]] = field(default_factory=dict)
    store_messages: dict[str | None, list[str]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    judged: set[str] = field(default_factory=set)
    missing_traces: frozenset[str] = frozenset()
    _records: dict[str | None, list[tuple[int, str, str]]] | None = None
    memo: dict[Any, Any] = field(default_factory=dict)
    """Per-graph results the methods compute once (e.g. a store's message texts)."""
    _inputs: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)

    @property
    def G(self) -> nx.MultiDiGraph:
        """The graph (alive as long as its caller holds it)."""
        graph = self.graph_ref()
        if graph is None:
            raise ReferenceError("the graph of this index was garbage-collected")
        return graph

    def ops_of(self, case_id: str) -> list[str]:
        """The case's ops in execution order (empty when the case is not in the graph)."""
        return self.case_ops.get(case_id, [])

    def inputs(self, op: str) -> list[str]:
        """Variables the op read (found once per op: an answer's window is asked for again and
        again, once per variable the evidence is followed through)."""
        found = self._inputs.get(op)
        if found is None:
            found = self._inputs[op] = tuple(
                v for v, keyed in pred_of(self.G)[op].items() if READ in keyed
            )
        return list(found)

    def outputs(self, op: str) -> list[str]:
        """Variables the op wrote."""
        return [v for v, keyed in succ_of(self.G)[op].items() if WRITE in keyed]

    def readers(self, var: str) -> list[str]:
        """Ops that read the variable."""
        return [o for o, keyed in succ_of(self.G)[var].items() if READ in keyed]

    def next_version(self, var: str) -> str | None:
        """The variable's next version, if it is in the graph."""
        for succ, keyed in succ_of(self.G)[var].items():
            if VERSION in keyed:
                return str(succ)
        return None

    def writer(self, var: str) -> str | None:
        """The op that wrote the variable (first writer), if loaded."""
        for pred, keyed in pred_of(self.G)[var].items():
            if WRITE in keyed:
                return str(pred)
        return None

    def live_records(self, store: str | None, before: int) -> dict[str, str]:
        """The records searchable in ``store`` just before time ``before`` (contract 4b).

        A record is a variable some ``create``/``update``/``delete`` op wrote; it is live when
        its latest version written by ``before`` (its writer ended at or before that time) is not
        a tombstone. A write that ended at the very time the search started counts as before it:
        recorders stamp in milliseconds, and ops tie. Returns record id -> the live version's ref.
        """
        if self._records is None:
            self._records = self._record_timeline()
        live: dict[str, str] = {}
        for time, ident, ref in self._records.get(store, ()):
            if time > before:
                break
            live[ident] = ref
        G = self.G
        return {i: r for i, r in live.items() if not nodes_of(G)[r].get("deleted")}

    def _record_timeline(self) -> dict[str | None, list[tuple[int, str, str]]]:
        G = self.G
        out: dict[str | None, list[tuple[int, str, str]]] = defaultdict(list)
        for node, data in nodes_of(G).items():
            if data.get("type") != "op" or data.get("kind") not in _RECORD_WRITERS:
                continue
            for var in self.outputs(node):
                vd = nodes_of(G)[var]
                if vd.get("category") in _NOT_RECORDS or vd.get("id") is None:
                    continue
                out[data.get("store")].append((data["end"], str(vd["id"]), var))
        for items in out.values():
            items.sort(key=lambda t: (t[0], nodes_of(G)[t[2]].get("version") or 0))
        return out

    def case_from_graph(self, case_id: str) -> Case:
        """What the traces say about a case: question, gold answers, prediction, verdict."""
        G = self.G
        question, gold, prediction = "", [], None
        verdict = None
        for op in self.ops_of(case_id):
            data = nodes_of(G)[op]
            if data["kind"] == OpKind.JUDGE and data.get("judge_verdict"):
                verdict = data["judge_verdict"]
            for var in self.inputs(op) + self.outputs(op):
                vd = nodes_of(G)[var]
                value = vd.get("value")
                if value is None:
                    continue
                category = vd.get("category")
                if category == Category.QUERY and not question:
                    question = _as_text(value)
                elif category == Category.GOLD:
                    gold.extend(_as_answers(value))
                elif category == Category.PREDICTION:
                    prediction = _as_text(value)
        return Case(
            case_id=case_id,
            question=question,
            gold_answers=tuple(dict.fromkeys(gold)),
            verdict=verdict,
            prediction=prediction,
            source="trace",
        )


def _as_text(value: str) -> str:
    try:
        decoded = json.loads(value)
    except (ValueError, TypeError):
        return value
    if isinstance(decoded, str):
        return decoded
    if isinstance(decoded, dict):
        for key in ("text", "content", "question", "answer", "query"):
            if isinstance(decoded.get(key), str):
                return str(decoded[key])
    return value


def _as_answers(value: str) -> list[str]:
    try:
        decoded = json.loads(value)
    except (ValueError, TypeError):
        return [value]
    if isinstance(decoded, list):
        return [str(v) for v in decoded]
    if isinstance(decoded, dict):
        answers = decoded.get("answers") or decoded.get("gold_answers") or decoded.get("answer")
        if isinstance(answers, list):
            return [str(v) for v in answers]
        if answers is not None:
            return [str(answers)]
    return [_as_text(value)]


_cache: weakref.WeakKeyDictionary[nx.MultiDiGraph, GraphIndex] = weakref.WeakKeyDictionary()


def graph_index(G: nx.MultiDiGraph) -> GraphIndex:
    """The (cached) index of ``G``."""
    # Nodes only: counting edges walks the whole graph, and a graph grows nodes when it grows.
    size = G.number_of_nodes()
    index = _cache.get(G)
    if index is not None and index.size == size:
        return index
    case_ops: dict[str, list[tuple[tuple[int, int, str, str], str]]] = defaultdict(list)
    messages: dict[str | None, list[str]] = defaultdict(list)
    failed: set[str] = set()
    judged: set[str] = set()
    linked: set[str] = set()  # linked_trace_ids(G), in the same pass over the nodes
    for node, data in nodes_of(G).items():
        if data.get("type") == "op":
            links = data.get("links")
            if links:
                linked.update(link["trace_id"] for link in links)
            case = data.get("case")
            if case is not None:
                case_ops[str(case)].append((op_order_key(data), node))
                if data.get("kind") == OpKind.JUDGE and data.get("judge_verdict"):
                    judged.add(str(case))
                    if data["judge_verdict"] == JudgeVerdict.INCORRECT:
                        failed.add(str(case))
        elif data.get("category") == Category.MESSAGE:
            writer = next((p for p, k in pred_of(G)[node].items() if WRITE in k), None)
            readers = [o for o, k in succ_of(G)[node].items() if READ in k]
            store = None
            for op in ([writer] if writer else []) + readers:
                store = nodes_of(G)[op].get("store")
                if store is not None:
                    break
            messages[store].append(node)
    index = GraphIndex(
        graph_ref=weakref.ref(G),
        size=size,
        case_ops={c: [n for _, n in sorted(ops)] for c, ops in case_ops.items()},
        store_messages={s: sorted(m) for s, m in messages.items()},
        failed=failed,
        judged=judged,
        missing_traces=frozenset(linked.difference(G.graph.get("trace_ids", ()))),
    )
    _cache[G] = index
    return index

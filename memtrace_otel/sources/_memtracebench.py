"""MemTraceBench / smartcomment execution-graph JSON -> span records, cases and labels.

zjunlp's ``smartcomment`` recorder exports a memory system's run as one JSON document of
sessions, operations, variables (``<id>@<version>``) and edges; MemTraceBench adds
``data.annotations`` with the decisive faulty operation of each failed question. This module
turns such a document into what our own instrumentation would have recorded (the trace
contract), so the graph builder and attribution run on MemTraceBench unchanged:

- one span per operation. Its inputs and outputs follow the recorder's semantics (read from
  smartcomment 0.1.2's source): the variables its edges read and none writes are its inputs;
  those its edges write that no edge of the op reads further, or another op reads, are its
  outputs; a chain inside the op (``comment_link``/``comment_mutation``: raw response -> cleaned
  -> extracted facts) is kept as detail (``memtrace.source.chain``); an edge to the shared
  ``delete_marker`` node tombstones its source; a node an earlier op wrote that the op reads and
  "writes" again was left unchanged; a search pointing at stored units selected them. A
  ``memtrace.variable`` event per output and per input no operation wrote, and a lineage link to
  the writer of every other input;
- one trace per session; ids are hashes of the graph id and the op or session id, so importing
  the same file twice gives the same ids; ``memtrace.source.op_id`` keeps the op's own id;
- ``project_id`` -> ``memtrace.system``, ``user_id`` -> ``gen_ai.memory.store.id``, the
  session's category -> ``memtrace.stage``, the op's name and category -> ``memtrace.op.kind``
  (tables below and in ``docs/sources.md``);
- execution order is the position of an op's last edge (a ``comment_fn`` op is stamped before its
  body runs); ``created_at`` (local time without a zone, read as UTC) gives the times, starts
  at least a nanosecond apart in that order (pure-Python ops tie on the millisecond);
- each query variable is a case (``case_id`` = its ref), reached through the ops whose edges read
  it, not through shared downstream nodes (names come from content, so one judge score or answer
  node serves many questions); annotations become labels.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from memtrace_otel.errors import DecodeError, UnsupportedFormatError
from memtrace_otel.instrumentation import canonical_value, digest
from memtrace_otel.semconv import (
    DEFAULT_STAGE_BY_KIND,
    GEN_AI_OPERATION_BY_KIND,
    AttrValue,
    Category,
    ErrorType,
    EventRecord,
    JudgeVerdict,
    LinkRecord,
    OpKind,
    Role,
    SpanRecord,
    Stage,
)
from memtrace_otel.semconv import attributes as attr
from memtrace_otel.semconv import env as E
from memtrace_otel.sources._common import (
    INVALID_RECORD,
    UNSUPPORTED_FORMAT,
    Bad,
    OnError,
    SourceStats,
    make_error,
    policy,
    raise_on_error,
    short_repr,
    source_label,
)
from memtrace_otel.sources._limits import DEFAULT_MAX_DOCUMENT_BYTES, resolve_cap

OTHER_KIND = "other"
"""The op kind of operations whose name and category say nothing we can map (kept, never blamed
by kind: attribution treats it like an unknown step)."""

UNNAMED_OP = "unnamed"
"""``memtrace.op.name`` of smartcomment operations recorded without a name."""

SCOPE_NAME = "memtrace_otel.sources.memtracebench"
"""Instrumentation scope of the imported spans (they were not recorded by an OTel SDK)."""

OP_KIND_BY_NAME: Mapping[str, str] = MappingProxyType(
    {
        # every system
        "question-answering": OpKind.GENERATE,
        "llm-judge": OpKind.JUDGE,
        # rag
        "memory_system.message_buffer_update": OpKind.UPDATE,
        "memory_system.finalize_memory_unit": OpKind.CREATE,
        "memory_system.add": OpKind.CREATE,
        "memory_system.retrieve": OpKind.RETRIEVE,
        # long_context
        "memory_system.memory_update": OpKind.UPDATE,
        # mem0
        "memory_system.extract_facts": OpKind.EXTRACT,
        "memory_system.update_memory_decision": OpKind.UPDATE,
        "memory_system.add_to_vector_store": OpKind.CREATE,
        "memory_system.search_vector_store": OpKind.RETRIEVE,
        # evermemos
        "evermemos.boundary_detection": OpKind.EXTRACT,
        "memory_system.extract_memory": OpKind.EXTRACT,
        "memory_system.hybrid_retrieval": OpKind.RETRIEVE,
        "memory_system.bm25_retrieval": OpKind.RETRIEVE,
        "memory_system.embedding_retrieval": OpKind.RETRIEVE,
        "memory_system.agentic_round1_bundle": OpKind.RETRIEVE,
        "memory_system.agentic_round2_bundle": OpKind.RETRIEVE,
        "memory_system.agentic_final_rerank": OpKind.FILTER,
    }
)
"""Op names of the MemTraceBench harness -> op kind (checked first)."""

OP_KIND_BY_CATEGORY: Mapping[str, str] = MappingProxyType(
    {
        "ingest": OpKind.INGEST,
        "extraction": OpKind.EXTRACT,
        "extract": OpKind.EXTRACT,
        "segmentation": OpKind.EXTRACT,
        "create": OpKind.CREATE,
        "add": OpKind.CREATE,
        "insert": OpKind.CREATE,
        "update": OpKind.UPDATE,
        "memory_update": OpKind.UPDATE,
        "delete": OpKind.DELETE,
        "deletion": OpKind.DELETE,
        "retrieval": OpKind.RETRIEVE,
        "retrieve": OpKind.RETRIEVE,
        "search": OpKind.RETRIEVE,
        "rerank": OpKind.FILTER,
        "filter": OpKind.FILTER,
        "assemble": OpKind.ASSEMBLE,
        "generation": OpKind.GENERATE,
        "generate": OpKind.GENERATE,
        "judge": OpKind.JUDGE,
    }
)
"""Op categories -> op kind, for ops whose name is not in :data:`OP_KIND_BY_NAME`.

smartcomment's generic categories (``operation``, ``evaluation``) say nothing about the role and
are left out: such ops become :data:`OTHER_KIND`.
"""

STAGE_BY_SESSION_CATEGORY: Mapping[str, str] = MappingProxyType(
    {
        "memory_construction": Stage.CONSTRUCTION,
        "memory_search": Stage.RETRIEVAL,
        "memory_evaluation": Stage.EVALUATION,
    }
)
"""Session categories -> the stage of ops whose kind does not decide it."""

CATEGORY_BY_CLASS: Mapping[str, str] = MappingProxyType(
    {
        "query": Category.QUERY,
        "retrieved": Category.CANDIDATES,
        "prediction": Category.PREDICTION,
        "golden_answers": Category.GOLD,
        "judge_score": Category.SCORE,
        "judge_response": Category.OTHER,
        "prompt": Category.PROMPT,
        "context": Category.CONTEXT,
    }
)
"""Variable ``class_name`` -> category (checked first)."""

CATEGORY_BY_NODE_CATEGORY: Mapping[str, str] = MappingProxyType(
    {
        "message": Category.MESSAGE,
        "message & query": Category.QUERY,
        "query": Category.QUERY,
        "message_buffer": Category.MEMORY,
        "memory": Category.MEMORY,
        "memory_entry": Category.MEMORY,
        "memory_unit": Category.MEMORY,
        "fact": Category.MEMORY,
        "retrieval": Category.CANDIDATES,
        "candidates": Category.CANDIDATES,
        "context": Category.CONTEXT,
        "prompt": Category.PROMPT,
        # An LLM reply is the answer, an extracted fact or an intermediate step: by its writer.
        "golden_answers": Category.GOLD,
        "gold": Category.GOLD,
        "score": Category.SCORE,
    }
)
"""Variable ``category`` -> category, for variables whose class says nothing."""

DELETE_MARKER = "delete_marker"
"""The node every deleted unit links to (value ``DELETED``): a tombstone."""

_NONE_NODE = "COMMENT:NONE@1"
_NONE_SESSION = "__none__"
_NONE_OP = "__none_op__"
_SCORED = frozenset(e.value for e in ErrorType)
_CONSTRUCTION = Stage.CONSTRUCTION.value


@dataclass(frozen=True)
class BenchCase:
    """A question of the benchmark, in the shape of the batch job's cases file.

    Attributes:
        case_id: the query variable's ref (``query:<qa id>@1``).
        question: the question text.
        gold_answers: accepted answers.
        evidence_refs: refs of the messages that hold the answer.
        verdict: ``correct``/``incorrect`` when known (annotated failures are ``incorrect``).
        prediction: the system's answer, when recorded.
    """

    case_id: str
    question: str
    gold_answers: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    verdict: str | None = None
    prediction: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The cases-file JSON object (optional fields only when known)."""
        out: dict[str, Any] = {
            "case_id": self.case_id,
            "question": self.question,
            "gold_answers": list(self.gold_answers),
        }
        if self.evidence_refs:
            out["evidence_refs"] = list(self.evidence_refs)
        if self.verdict is not None:
            out["verdict"] = self.verdict
        if self.prediction is not None:
            out["prediction"] = self.prediction
        return out


@dataclass(frozen=True)
class BenchLabel:
    """The annotated decisive fault of one failed case (the attribution ground truth).

    Attributes:
        case_id: the case it labels.
        error_type: ``final_error_type`` as annotated.
        op_id: the span id this import gave ``final_op_id`` (``None`` if the op is not in the
            graph).
        op_name: that op's ``memtrace.op.name``.
        source_op_id: ``final_op_id`` as annotated (smartcomment's op id).
        scored: whether ``error_type`` is one of the five memory labels (the others, such as
            annotation or judge errors, are excluded from scoring by default).
        system: the file's ``project_id``.
    """

    case_id: str
    error_type: str
    op_id: str | None
    op_name: str | None
    source_op_id: str
    scored: bool
    system: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The label as a JSON object (the verdict fields it shares, plus provenance)."""
        return {
            "system": self.system,
            "case_id": self.case_id,
            "error_type": self.error_type,
            "op_id": self.op_id,
            "op_name": self.op_name,
            "source_op_id": self.source_op_id,
            "scored": self.scored,
            "source": "annotation",
        }


@dataclass(frozen=True)
class BenchGraph:
    """One imported smartcomment export.

    Attributes:
        graph_id: smartcomment's graph id.
        system: ``project_id`` (``rag``, ``mem0``, ``evermemos``, ``long_context``).
        store_id: ``user_id`` (the trajectory, e.g. ``locomo-1``).
        records: one span record per operation, in execution order.
        cases: one per query variable.
        labels: one per annotation.
        span_ids: smartcomment op id -> the span id given to it.
    """

    graph_id: str
    system: str
    store_id: str
    records: tuple[SpanRecord, ...]
    cases: tuple[BenchCase, ...]
    labels: tuple[BenchLabel, ...]
    span_ids: Mapping[str, str] = field(default_factory=dict)


def is_smartcomment_export(obj: Any) -> bool:
    """Whether a JSON value is a smartcomment graph export (``graph_id`` and ``data.operations``)."""
    if type(obj) is not dict or "graph_id" not in obj:
        return False
    data = obj.get("data")
    return type(data) is dict and "operations" in data and "edges" in data


def stable_id(*parts: str, width: int) -> str:
    """A deterministic hex id from ``parts`` (never all zeros).

    >>> stable_id("graph-1", "op-1", width=16)
    'c151d9344e43105a'
    """
    text = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:width]
    return text if text.strip("0") else "1".rjust(width, "0")


def parse_created_at(value: Any, field: str) -> int:
    """smartcomment's ``YYYY-MM-DD HH:MM:SS.sss`` (no zone; read as UTC) in nanoseconds.

    >>> parse_created_at("2026-11-29 13:50:13.556", "created_at")
    1795960213556000000
    """
    if value is None:
        return 0
    if type(value) is not str:
        raise Bad(field, f"expected a timestamp string, got {short_repr(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise Bad(field, f"invalid timestamp {short_repr(value)}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = int(moment.timestamp())
    return seconds * 1_000_000_000 + moment.microsecond * 1000


def decode_value(text: Any) -> Any:
    """A smartcomment value string: JSON, else a Python literal (its ``repr``), else the text.

    >>> decode_value('{"a": 1}'), decode_value("'a bakery'"), decode_value("LGBTQ group")
    ({'a': 1}, 'a bakery', 'LGBTQ group')
    """
    if type(text) is not str:
        return text
    try:
        return json.loads(text)
    except ValueError:
        pass
    stripped = text.strip()
    if stripped[:1] in ("'", '"', "[", "{", "(") or stripped in ("None", "True", "False"):
        try:
            return ast.literal_eval(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return text


def split_ref(full_node_id: str) -> tuple[str, int] | None:
    """``(id, version)`` split at the last ``@`` (ids may contain ``@`` and ``:``)."""
    ident, sep, version = full_node_id.rpartition("@")
    if not sep or not ident or not version.isascii() or not version.isdigit():
        return None
    return ident, int(version)


def _node_ref(node: dict[str, Any]) -> str | None:
    full = node.get("full_node_id")
    if type(full) is str and split_ref(full):
        return full
    name = node.get("name")
    version = node.get("version")
    if type(name) is not str or type(version) is not int:
        return None
    class_name = node.get("class_name")
    ident = f"{class_name}:{name}" if class_name else name
    return f"{ident}@{version}"


def _variable_category(node: dict[str, Any]) -> str:
    class_name = node.get("class_name")
    if type(class_name) is str and class_name in CATEGORY_BY_CLASS:
        return CATEGORY_BY_CLASS[class_name]
    category = node.get("category")
    if type(category) is str:
        known = CATEGORY_BY_NODE_CATEGORY.get(category)
        if known is not None:
            return known
        if "query" in category:
            return Category.QUERY
    return Category.OTHER


def op_kind(name: str | None, category: str | None) -> str:
    """The op kind of a smartcomment op: by name, else by category, else :data:`OTHER_KIND`.

    >>> op_kind("memory_system.add", "update"), op_kind(None, "retrieval"), op_kind(None, "operation")
    ('create', 'retrieve', 'other')
    """
    if name and name in OP_KIND_BY_NAME:
        return str(OP_KIND_BY_NAME[name])
    if category and category in OP_KIND_BY_CATEGORY:
        return str(OP_KIND_BY_CATEGORY[category])
    return OTHER_KIND


def _stage(kind: str, session_category: str | None) -> str:
    session_stage = STAGE_BY_SESSION_CATEGORY.get(session_category or "")
    if session_stage == Stage.CONSTRUCTION:
        return _CONSTRUCTION
    if kind != OTHER_KIND:
        return str(DEFAULT_STAGE_BY_KIND[OpKind(kind)])
    return str(session_stage or Stage.CONSTRUCTION)


def _span_name(kind: str, name: str) -> str:
    if kind in GEN_AI_OPERATION_BY_KIND:
        return GEN_AI_OPERATION_BY_KIND[OpKind(kind)]
    return f"{attr.OP_SPAN_NAME_PREFIX}{kind} {name}"


def _as_texts(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(v if isinstance(v, str) else canonical_value(v) for v in value)
    return (value if isinstance(value, str) else canonical_value(value),)


def _dict_list(data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    items = data.get(name, [])
    if items is None:
        return []
    if type(items) is not list:
        raise Bad(f"data.{name}", "expected a list", INVALID_RECORD)
    return items


@dataclass
class _Flow:
    """One op as its edges describe it."""

    inputs: list[str]
    outputs: list[str]
    chain: list[dict[str, Any]]
    deletes: dict[str, str]
    """tombstone ref -> the deleted unit's ref."""
    selected: dict[str, list[str]]
    """candidate-list ref made for a search that pointed at stored units -> those units."""
    last_edge: int
    position: int


def _is_delete_marker(ref: str) -> bool:
    parts = split_ref(ref)
    return parts is not None and parts[0].rsplit(":", 1)[-1] == DELETE_MARKER


class _Importer:
    """Builds the records of one export; one instance per document."""

    def __init__(self, obj: dict[str, Any], path: str, on_error: OnError) -> None:
        self.path = path
        self.on_error = on_error
        self.source = source_label(path, None)
        graph_id = obj.get("graph_id")
        if type(graph_id) is not str or not graph_id:
            raise Bad("graph_id", "expected a non-empty string", INVALID_RECORD)
        self.graph_id = graph_id
        self.system = str(obj.get("project_id") or "")
        self.store_id = str(obj.get("user_id") or "")
        data = obj["data"]
        self.raw_nodes = _dict_list(data, "nodes")
        self.raw_edges = _dict_list(data, "edges")
        self.raw_ops = _dict_list(data, "operations")
        self.raw_sessions = _dict_list(data, "sessions")
        self.raw_annotations = _dict_list(data, "annotations")
        self.session_of: dict[str, str] = {}
        self.writer_kind: dict[str, str] = {}
        self.clock = 0

    def report(self, field: str, reason: str) -> None:
        self.on_error(INVALID_RECORD, make_error(reason, path=self.path, line=None, field=field))

    def run(self) -> BenchGraph:
        nodes = self._nodes()
        sessions = self._sessions()
        ops = self._ops()
        flows = self._edges(ops, nodes)
        # Execution order: the position of an op's last edge (the recorder appends edges as the
        # op runs, and a ``comment_fn`` op is stamped before its body), then its creation time.
        ops = {
            op_id: ops[op_id]
            for op_id in sorted(ops, key=lambda o: (flows[o].last_edge, flows[o].position))
        }
        span_ids = {op_id: stable_id(self.graph_id, op_id, width=16) for op_id in ops}

        kinds: dict[str, str] = {}
        names: dict[str, str] = {}
        for op_id, op in ops.items():
            raw_name = op.get("op_name")
            category = op.get("category")
            names[op_id] = raw_name if type(raw_name) is str and raw_name else UNNAMED_OP
            kind = op_kind(
                raw_name if type(raw_name) is str else None,
                category if type(category) is str else None,
            )
            # A step that tombstones a unit (a mem0 update decision that deletes) is a deletion.
            if flows[op_id].deletes and kind in (OpKind.UPDATE, OTHER_KIND):
                kind = OpKind.DELETE.value
            kinds[op_id] = kind
        self.writer_kind = {
            ref: kinds[op_id] for op_id in reversed(ops) for ref in flows[op_id].outputs
        }

        queries = [ref for ref, node in nodes.items() if _variable_category(node) == Category.QUERY]
        case_of_op, writer_of = self._case_ops(set(queries), ops, flows, sessions)

        records = []
        produced: set[str] = set()
        for op_id, op in ops.items():
            try:
                records.append(
                    self._record(
                        op_id,
                        op,
                        nodes,
                        sessions,
                        flows[op_id],
                        writer_of[op_id],
                        produced,
                        span_ids,
                        kinds[op_id],
                        names[op_id],
                        case_of_op.get(op_id),
                    )
                )
            except Bad as bad:
                self.report(f"data.operations[{op_id}].{bad.field}", bad.reason)
            produced.update(flows[op_id].outputs)
        records.sort(key=lambda r: r.start_time_unix_nano)

        reads = {op_id: flows[op_id].inputs for op_id in ops}
        writes = {op_id: flows[op_id].outputs for op_id in ops}
        cases, labels = self._cases(
            queries, nodes, kinds, reads, writes, case_of_op, span_ids, names
        )
        return BenchGraph(
            graph_id=self.graph_id,
            system=self.system,
            store_id=self.store_id,
            records=tuple(records),
            cases=tuple(cases),
            labels=tuple(labels),
            span_ids=MappingProxyType(span_ids),
        )

    # --- elements ------------------------------------------------------------------------
    def _nodes(self) -> dict[str, dict[str, Any]]:
        nodes: dict[str, dict[str, Any]] = {}
        for i, node in enumerate(self.raw_nodes):
            ref = _node_ref(node) if type(node) is dict else None
            if ref is None:
                self.report(f"data.nodes[{i}]", "a variable needs name and version")
                continue
            if ref != _NONE_NODE:
                nodes.setdefault(ref, node)
        return nodes

    def _sessions(self) -> dict[str, dict[str, Any]]:
        sessions: dict[str, dict[str, Any]] = {}
        for i, session in enumerate(self.raw_sessions):
            sid = session.get("session_id") if type(session) is dict else None
            if type(sid) is not str:
                self.report(f"data.sessions[{i}].session_id", "expected a string")
                continue
            if sid != _NONE_SESSION:
                sessions[sid] = session
        return sessions

    def _ops(self) -> dict[str, dict[str, Any]]:
        ops: dict[str, dict[str, Any]] = {}
        for i, op in enumerate(self.raw_ops):
            op_id = op.get("op_id") if type(op) is dict else None
            if type(op_id) is not str or not op_id:
                self.report(f"data.operations[{i}].op_id", "expected a non-empty string")
                continue
            if op_id != _NONE_OP and op_id not in ops:
                ops[op_id] = op
                sid = op.get("session_id")
                self.session_of[op_id] = sid if type(sid) is str else _NONE_SESSION
        # Execution order: creation time, then the file's order (times tie within a ms).
        order = sorted(
            enumerate(ops.items()),
            key=lambda item: (str(item[1][1].get("created_at") or ""), item[0]),
        )
        return {op_id: op for _, (op_id, op) in order}

    def _edges(
        self, ops: Mapping[str, dict[str, Any]], nodes: Mapping[str, dict[str, Any]]
    ) -> dict[str, _Flow]:
        """Each op's true external inputs and outputs, from the edges that carry its id.

        The recorder chains variables inside one op (``comment_link``/``comment_mutation``: a
        message -> raw response -> cleaned response -> extracted facts). The op's inputs are the
        variables its edges read and none of them writes; its outputs the variables its edges
        write that no edge of the op reads further, or that another op reads; the rest is the
        chain, kept as detail. An edge to the shared ``delete_marker`` node tombstones its source.
        """
        edges: dict[str, list[tuple[str, str]]] = {op_id: [] for op_id in ops}
        last: dict[str, int] = {}
        for i, edge in enumerate(self.raw_edges):
            if type(edge) is not dict:
                self.report(f"data.edges[{i}]", "expected an edge object")
                continue
            op_id = edge.get("op_id")
            source = edge.get("source_full_node_id")
            target = edge.get("target_full_node_id")
            if type(op_id) is not str or type(source) is not str or type(target) is not str:
                self.report(f"data.edges[{i}]", "an edge needs op_id, source and target ids")
                continue
            if op_id not in ops:
                continue
            last[op_id] = i
            if source == _NONE_NODE and target == _NONE_NODE:
                continue
            edges[op_id].append((source, target))
        # An op's external reads: what its edges read and none of its edges writes.
        read_by: dict[str, set[str]] = {}
        for op_id, pairs in edges.items():
            written_here = {t for _s, t in pairs}
            for source, _target in pairs:
                if source not in written_here:
                    read_by.setdefault(source, set()).add(op_id)
        latest: dict[str, int] = {}
        for ref in nodes:
            parts = split_ref(ref)
            if parts is not None:
                latest[parts[0]] = max(latest.get(parts[0], 0), parts[1])
        flows: dict[str, _Flow] = {}
        file_order = {op_id: i for i, op_id in enumerate(edges)}
        written_before: set[str] = set()
        for op_id in sorted(edges, key=lambda o: (last.get(o, -1), file_order[o])):
            pairs = edges[op_id]
            position = file_order[op_id]
            sources: list[str] = []
            targets: list[str] = []
            deletes: list[str] = []
            feeds: dict[str, list[str]] = {}
            for source, target in pairs:
                if _is_delete_marker(target):
                    if source != _NONE_NODE and source not in deletes:
                        deletes.append(source)
                    continue
                if source != _NONE_NODE and source not in sources:
                    sources.append(source)
                if target != _NONE_NODE:
                    if target not in targets:
                        targets.append(target)
                    if source != _NONE_NODE:
                        feeds.setdefault(target, []).append(source)
            # A node an earlier op wrote that this op reads and "writes" again is one it left
            # unchanged: the recorder reuses a node whose value did not change (no new version).
            read_inside = set(sources)
            kept = {ref for ref in targets if ref in written_before and ref in read_inside}
            earlier = {ref for ref in targets if ref in written_before}
            written_before.update(targets)
            targets = [ref for ref in targets if ref not in kept]
            written = set(targets)
            inputs = [ref for ref in sources if ref not in written]
            inputs += [ref for ref in deletes if ref not in written and ref not in inputs]
            outputs = [
                ref
                for ref in targets
                if ref not in read_inside or (read_by.get(ref, set()) - {op_id})
            ]
            chain = [
                {"ref": ref, "from": feeds.get(ref, [])} for ref in targets if ref not in outputs
            ]
            # A search whose edges point at stored units (the same unit node for every query that
            # retrieves it) selected them: they are its inputs, and its output is the candidate
            # list it returned, one variable per search.
            selected: dict[str, list[str]] = {}
            op = ops[op_id]
            name, category = op.get("op_name"), op.get("category")
            kind = op_kind(
                name if type(name) is str else None, category if type(category) is str else None
            )
            units = [
                ref
                for ref in outputs
                if ref in earlier
                and _variable_category(nodes.get(ref, {})) in (Category.MEMORY, Category.MESSAGE)
            ]
            if units and kind in (OpKind.RETRIEVE, OpKind.FILTER):
                candidates = f"retrieved:{op_id}@1"
                selected[candidates] = units
                inputs += [ref for ref in units if ref not in inputs]
                outputs = [ref for ref in outputs if ref not in units] + [candidates]
            tombstones = []
            for ref in deletes:
                parts = split_ref(ref)
                if parts is None:
                    continue
                version = parts[1] + 1
                if f"{parts[0]}@{version}" in nodes:
                    version = latest[parts[0]] + 1
                tombstones.append(f"{parts[0]}@{version}")
                latest[parts[0]] = max(latest.get(parts[0], 0), version)
            flows[op_id] = _Flow(
                inputs=inputs,
                outputs=outputs + tombstones,
                chain=chain,
                deletes=dict(zip(tombstones, deletes, strict=True)),
                selected=selected,
                last_edge=last.get(op_id, -1),
                position=position,
            )
        return flows

    def _case_ops(
        self,
        queries: set[str],
        ops: Mapping[str, dict[str, Any]],
        flows: Mapping[str, _Flow],
        sessions: Mapping[str, dict[str, Any]],
    ) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        """Op id -> case id, and per op the op that wrote each of its inputs.

        Node names come from content, so one variable (a judge score of 0.0, an identical answer,
        a memory unit several queries retrieve) may be written and read by ops of many questions.
        Outside the construction sessions an op belongs to the question whose query variable its
        edges read. An op that reads no query belongs to the question of the op that wrote its
        input when only one op ever wrote that input; else to the question of the op that
        consumed its output next (the harness answers one question at a time, while it searches
        for all of them first); else to that of the latest writer of an input. Each input's
        writer is, among the ops that wrote it before the reader, one of the reader's question if
        any, else the latest.
        """
        construction = {
            sid for sid, s in sessions.items() if s.get("category") == "memory_construction"
        }
        order = list(ops)
        writers: dict[str, list[str]] = {}
        before: dict[str, dict[str, list[str]]] = {}
        for op_id in order:
            flow = flows[op_id]
            before[op_id] = {ref: list(writers[ref]) for ref in flow.inputs if ref in writers}
            for ref in flow.outputs:
                writers.setdefault(ref, []).append(op_id)
        serving = {op_id for op_id in order if ops[op_id].get("session_id") not in construction}
        case_of: dict[str, str] = {}
        for op_id in order:
            own = [ref for ref in flows[op_id].inputs if ref in queries]
            if op_id in serving and own:
                case_of[op_id] = own[0]
        # The next op that read what this op wrote (its latest writer being this op).
        consumer: dict[str, str] = {}
        for op_id in order:
            for earlier in before[op_id].values():
                if earlier and earlier[-1] != op_id:
                    consumer.setdefault(earlier[-1], op_id)
        for op_id in order:
            if op_id not in serving or op_id in case_of:
                continue
            sole = [
                earlier[0]
                for ref, earlier in before[op_id].items()
                if len(writers[ref]) == 1 and earlier[0] in case_of
            ]
            if sole:
                case_of[op_id] = case_of[sole[-1]]
        for op_id in reversed(order):
            if op_id not in serving or op_id in case_of:
                continue
            nxt = consumer.get(op_id)
            if nxt is not None and nxt in case_of:
                case_of[op_id] = case_of[nxt]
        for op_id in order:
            if op_id not in serving or op_id in case_of:
                continue
            latest = [w[-1] for w in before[op_id].values() if w and w[-1] in case_of]
            if latest:
                case_of[op_id] = case_of[max(latest, key=lambda w: flows[w].last_edge)]
        writer_of: dict[str, dict[str, str]] = {}
        for op_id in order:
            mine = case_of.get(op_id)
            chosen = {}
            for ref, earlier in before[op_id].items():
                same = [w for w in earlier if mine is not None and case_of.get(w) == mine]
                chosen[ref] = (same or earlier)[-1]
            writer_of[op_id] = chosen
        return case_of, writer_of

    def _tombstone(self, ref: str, unit: dict[str, Any] | None, time: int) -> EventRecord:
        """The output event of a unit deleted through the ``delete_marker`` node."""
        value = canonical_value(decode_value(unit.get("value"))) if unit is not None else ""
        attrs: dict[str, AttrValue] = {
            attr.MEMTRACE_VARIABLE_REF: ref,
            attr.MEMTRACE_VARIABLE_ROLE: Role.OUTPUT.value,
            attr.MEMTRACE_VARIABLE_CATEGORY: str(
                self._category(ref, unit) if unit is not None else Category.MEMORY
            ),
            attr.MEMTRACE_VARIABLE_DIGEST: digest(value),
            attr.MEMTRACE_VARIABLE_DELETED: True,
        }
        return EventRecord(attr.MEMTRACE_VARIABLE_EVENT, time, MappingProxyType(attrs))

    def _selection(
        self, ref: str, units: list[str], nodes: Mapping[str, dict[str, Any]], time: int
    ) -> EventRecord:
        """The candidate list of a search that pointed at stored units: their values, in order."""
        text = canonical_value([decode_value(nodes.get(u, {}).get("value")) for u in units])
        attrs: dict[str, AttrValue] = {
            attr.MEMTRACE_VARIABLE_REF: ref,
            attr.MEMTRACE_VARIABLE_ROLE: Role.OUTPUT.value,
            attr.MEMTRACE_VARIABLE_CATEGORY: Category.CANDIDATES.value,
            attr.MEMTRACE_VARIABLE_DIGEST: digest(text),
            attr.MEMTRACE_VARIABLE_VALUE: text,
            attr.MEMTRACE_VARIABLE_META: canonical_value({"source_refs": units}),
        }
        return EventRecord(attr.MEMTRACE_VARIABLE_EVENT, time, MappingProxyType(attrs))

    def _category(self, ref: str, node: dict[str, Any]) -> str:
        """The node's category; an LLM reply by what wrote it (answer, or extracted memory)."""
        category = _variable_category(node)
        if category == Category.OTHER and node.get("category") == "llm_response":
            kind = self.writer_kind.get(ref)
            if kind == OpKind.GENERATE:
                return Category.PREDICTION.value
            if kind in (OpKind.EXTRACT, OpKind.CREATE, OpKind.UPDATE):
                return Category.MEMORY.value
        return category

    def _event(self, ref: str, role: str, node: dict[str, Any] | None) -> EventRecord:
        attrs: dict[str, AttrValue] = {
            attr.MEMTRACE_VARIABLE_REF: ref,
            attr.MEMTRACE_VARIABLE_ROLE: role,
        }
        time = 0
        if node is None:
            attrs[attr.MEMTRACE_VARIABLE_CATEGORY] = Category.OTHER.value
            attrs[attr.MEMTRACE_VARIABLE_DIGEST] = digest("")
        else:
            value = decode_value(node.get("value"))
            text = canonical_value(value)
            attrs[attr.MEMTRACE_VARIABLE_CATEGORY] = str(self._category(ref, node))
            attrs[attr.MEMTRACE_VARIABLE_DIGEST] = digest(text)
            if node.get("value") is not None:
                attrs[attr.MEMTRACE_VARIABLE_VALUE] = text
            meta: dict[str, Any] = {}
            for key in ("created_at", "category", "class_name", "comment"):
                if node.get(key) is not None:
                    meta["source_" + key if key != "created_at" else key] = node[key]
            extra = node.get("metadata")
            if type(extra) is dict:
                meta.update(extra)
            if meta:
                attrs[attr.MEMTRACE_VARIABLE_META] = canonical_value(meta)
            try:
                time = parse_created_at(node.get("created_at"), "created_at")
            except Bad:
                time = 0
        return EventRecord(attr.MEMTRACE_VARIABLE_EVENT, time, MappingProxyType(attrs))

    def _record(
        self,
        op_id: str,
        op: dict[str, Any],
        nodes: Mapping[str, dict[str, Any]],
        sessions: Mapping[str, dict[str, Any]],
        flow: _Flow,
        writer: Mapping[str, str],
        produced: set[str],
        span_ids: Mapping[str, str],
        kind: str,
        name: str,
        case_id: str | None,
    ) -> SpanRecord:
        inputs, outputs = flow.inputs, flow.outputs
        session_id = self.session_of[op_id]
        session = sessions.get(session_id, {})
        session_category = session.get("category")
        stage = _stage(kind, session_category if type(session_category) is str else None)
        # Times tie within a millisecond, and a ``comment_fn`` op is stamped before the ops its
        # body runs: starts follow the execution order (one nanosecond apart at least).
        start = max(parse_created_at(op.get("created_at"), "created_at"), self.clock + 1)
        self.clock = start
        end = start
        for ref in outputs:
            node = nodes.get(ref)
            if node is not None:
                with contextlib.suppress(Bad):
                    end = max(end, parse_created_at(node.get("created_at"), "created_at"))

        attrs: dict[str, AttrValue] = {
            attr.MEMTRACE_OP_KIND: kind,
            attr.MEMTRACE_OP_NAME: name,
            attr.MEMTRACE_OP_INPUTS: tuple(inputs),
            attr.MEMTRACE_OP_OUTPUTS: tuple(outputs),
            attr.MEMTRACE_STAGE: stage,
        }
        if self.system:
            attrs[attr.MEMTRACE_SYSTEM] = self.system
        if self.store_id:
            attrs[attr.GEN_AI_MEMORY_STORE_ID] = self.store_id
        if case_id is not None:
            attrs[attr.MEMTRACE_CASE_ID] = case_id
        if kind in GEN_AI_OPERATION_BY_KIND:
            attrs[attr.GEN_AI_OPERATION_NAME] = GEN_AI_OPERATION_BY_KIND[OpKind(kind)]
        if kind == OpKind.JUDGE:
            verdict = _judge_verdict(outputs, nodes)
            if verdict is not None:
                attrs[attr.MEMTRACE_JUDGE_VERDICT] = verdict
        attrs[attr.MEMTRACE_SOURCE_OP_ID] = op_id
        if flow.chain:
            attrs[attr.MEMTRACE_SOURCE_CHAIN] = canonical_value(flow.chain)

        events = [
            self._event(ref, Role.INPUT.value, nodes.get(ref))
            for ref in inputs
            if ref not in produced
        ]
        for ref in outputs:
            unit = flow.deletes.get(ref)
            if ref in flow.selected:
                events.append(self._selection(ref, flow.selected[ref], nodes, end))
            elif unit is None:
                events.append(self._event(ref, Role.OUTPUT.value, nodes.get(ref)))
            else:
                events.append(self._tombstone(ref, nodes.get(unit), end))
        links = []
        for ref in inputs:
            source_op = writer.get(ref)
            if source_op is not None and source_op != op_id:
                source_session = self.session_of[source_op]
                links.append(
                    LinkRecord(
                        stable_id(self.graph_id, source_session, width=32),
                        span_ids[source_op],
                        MappingProxyType({attr.MEMTRACE_VARIABLE_REF: ref}),
                    )
                )
        resource: dict[str, AttrValue] = {attr.SERVICE_NAME: self.system or "smartcomment"}
        return SpanRecord(
            trace_id=stable_id(self.graph_id, session_id, width=32),
            span_id=span_ids[op_id],
            name=_span_name(kind, name),
            kind="INTERNAL",
            start_time_unix_nano=start,
            end_time_unix_nano=end,
            attributes=MappingProxyType(attrs),
            events=tuple(events),
            links=tuple(links),
            resource_attributes=MappingProxyType(resource),
            scope_name=SCOPE_NAME,
            source=self.source,
        )

    # --- cases and labels --------------------------------------------------------------------
    def _cases(
        self,
        queries: list[str],
        nodes: Mapping[str, dict[str, Any]],
        kinds: Mapping[str, str],
        reads: Mapping[str, list[str]],
        writes: Mapping[str, list[str]],
        case_of_op: Mapping[str, str],
        span_ids: Mapping[str, str],
        names: Mapping[str, str],
    ) -> tuple[list[BenchCase], list[BenchLabel]]:
        by_name: dict[str, str] = {}
        for ref in sorted(nodes, key=lambda r: (split_ref(r) or (r, 0))[1]):
            parts = split_ref(ref)
            if parts is not None:
                by_name.setdefault(parts[0], ref)
        cases: dict[str, BenchCase] = {}
        for query in queries:
            node = nodes[query]
            question = decode_value(node.get("value"))
            meta = node.get("metadata")
            evidence = meta.get("evidence") if type(meta) is dict else None
            refs = tuple(by_name.get(e, f"{e}@1") for e in _as_texts(evidence))
            gold: tuple[str, ...] = ()
            prediction = None
            verdict = None
            for op_id, case_id in case_of_op.items():
                if case_id != query or kinds[op_id] != OpKind.JUDGE:
                    continue
                for ref in reads[op_id]:
                    category = _variable_category(nodes.get(ref, {}))
                    if category == Category.GOLD:
                        gold = _as_texts(decode_value(nodes[ref].get("value")))
                    elif category == Category.PREDICTION:
                        prediction = _as_texts(decode_value(nodes[ref].get("value")))[0]
                verdict = _judge_verdict(writes[op_id], nodes)
            cases[query] = BenchCase(
                case_id=query,
                question=question if isinstance(question, str) else canonical_value(question),
                gold_answers=gold,
                evidence_refs=refs,
                verdict=verdict,
                prediction=prediction,
            )
        labels = []
        for i, note in enumerate(self.raw_annotations):
            where = f"data.annotations[{i}]"
            if type(note) is not dict or type(note.get("query_id")) is not str:
                self.report(f"{where}.query_id", "expected a string")
                continue
            case_id = note["query_id"]
            base = cases.get(case_id) or BenchCase(case_id=case_id, question="")
            question = note.get("query")
            prediction = note.get("prediction")
            cases[case_id] = BenchCase(
                case_id=case_id,
                question=question if type(question) is str else base.question,
                gold_answers=_as_texts(note.get("golden_answers")) or base.gold_answers,
                evidence_refs=_as_texts(note.get("source_evidence_ids")) or base.evidence_refs,
                verdict=JudgeVerdict.INCORRECT.value,
                prediction=prediction if type(prediction) is str else base.prediction,
            )
            error_type = note.get("final_error_type")
            source_op = note.get("final_op_id")
            if type(error_type) is not str or type(source_op) is not str:
                self.report(where, "an annotation needs final_error_type and final_op_id strings")
                continue
            if source_op not in span_ids:
                self.report(f"{where}.final_op_id", f"op {source_op!r} is not in the graph")
            labels.append(
                BenchLabel(
                    case_id=case_id,
                    error_type=error_type,
                    op_id=span_ids.get(source_op),
                    op_name=names.get(source_op),
                    source_op_id=source_op,
                    scored=error_type in _SCORED,
                    system=self.system,
                )
            )
        return list(cases.values()), labels


def _judge_verdict(outputs: Iterable[str], nodes: Mapping[str, dict[str, Any]]) -> str | None:
    for ref in outputs:
        node = nodes.get(ref)
        if node is None or _variable_category(node) != Category.SCORE:
            continue
        score = decode_value(node.get("value"))
        if isinstance(score, bool):
            score = float(score)
        if isinstance(score, int | float):
            return JudgeVerdict.CORRECT.value if score > 0 else JudgeVerdict.INCORRECT.value
        if isinstance(score, str) and score.strip().upper() in ("CORRECT", "WRONG", "INCORRECT"):
            return (
                JudgeVerdict.CORRECT.value
                if score.strip().upper() == "CORRECT"
                else JudgeVerdict.INCORRECT.value
            )
    return None


def decode_memtracebench(
    obj: Any, *, path: str = "", on_error: OnError | None = None
) -> BenchGraph:
    """Convert a parsed smartcomment export (a MemTraceBench graph) into records, cases, labels.

    Args:
        obj: the parsed JSON document.
        path: the file it came from, for error messages and ``SpanRecord.source``.
        on_error: the policy for bad elements (default: raise); a bad element is skipped.

    Raises:
        UnsupportedFormatError: ``obj`` is not a smartcomment export (strict).
        DecodeError: (strict) a bad element or structure; lenient policies get the error and
            an empty or partial graph instead.
    """
    handler = on_error or raise_on_error
    if not is_smartcomment_export(obj):
        handler(
            UNSUPPORTED_FORMAT,
            UnsupportedFormatError(
                "not a smartcomment export (expected graph_id and data.operations/edges)",
                path=path,
            ),
        )
        return BenchGraph(graph_id="", system="", store_id="", records=(), cases=(), labels=())
    try:
        return _Importer(obj, path, handler).run()
    except Bad as bad:
        handler(bad.kind, make_error(bad.reason, path=path, line=None, field=bad.field))
        # Lenient: a document whose structure is broken contributes nothing.
        graph_id = obj.get("graph_id")
        return BenchGraph(
            graph_id=graph_id if type(graph_id) is str else "",
            system="",
            store_id="",
            records=(),
            cases=(),
            labels=(),
        )


def load_memtracebench(
    path: str | os.PathLike[str], *, strict: bool = True, max_document_bytes: int | None = None
) -> BenchGraph:
    """Import one MemTraceBench / smartcomment export file.

    Args:
        path: the JSON file.
        strict: raise at a bad element (default); ``False`` skips bad elements.
        max_document_bytes: the largest file read (``None``: ``MEMTRACE_MAX_DOCUMENT_BYTES``,
            else 256 MiB).

    Raises:
        DecodeError: the file is not a JSON smartcomment export, is larger than
            ``max_document_bytes``, or (strict) has a bad element.
        ValueError: a bad ``max_document_bytes``.
    """
    text = os.fspath(path)
    cap = resolve_cap(
        "max_document_bytes",
        max_document_bytes,
        E.ENV_MEMTRACE_MAX_DOCUMENT_BYTES,
        DEFAULT_MAX_DOCUMENT_BYTES,
    )
    try:
        with open(text, "rb") as f:
            data = f.read(cap + 1)
        if len(data) > cap:
            raise DecodeError(
                f"larger than max_document_bytes={cap} ({E.ENV_MEMTRACE_MAX_DOCUMENT_BYTES})",
                path=text,
            )
        obj = json.loads(data)
        del data
    except OSError as exc:
        raise DecodeError(f"cannot read the file ({exc.strerror or exc})", path=text) from None
    except ValueError as exc:
        raise DecodeError(f"not a JSON document ({exc})", path=text) from None
    return decode_memtracebench(obj, path=text, on_error=policy(strict, SourceStats()))

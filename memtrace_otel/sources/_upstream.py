"""Read spans written under the upstream GenAI conventions as contract ops.

Many memory layers are already traced by other instrumentations (mem0's own tracing, OpenLIT,
LoongSuite, hand-written spans) that follow the upstream OpenTelemetry GenAI conventions: memory
spans named by ``gen_ai.operation.name`` (``search_memory``, ``create_memory``, ``update_memory``,
``upsert_memory``, ``delete_memory``) with ``gen_ai.memory.store.id``, ``gen_ai.memory.record.id``,
``gen_ai.memory.record.count`` and, opt-in, ``gen_ai.memory.query.text`` and
``gen_ai.memory.records``; and ordinary chat spans with ``gen_ai.input.messages`` /
``gen_ai.output.messages`` when content capture is on. They carry no ``memtrace.*`` attribute and
no lineage links.

:func:`adapt_upstream` rewrites such spans into contract ops (``docs/sources.md``, "Upstream GenAI
spans") so that the graph builder and attribution treat them like our own:

- the kind comes from ``gen_ai.operation.name``: search -> ``retrieve``, create -> ``create``,
  update -> ``update``, delete -> ``delete``, upsert -> ``create`` or ``update`` (whether the record
  existed);
- a chat call is an ``extract`` when memory writes follow it in its trace, and a ``generate`` when
  it answers (a memory search precedes it in its trace and no write follows);
- lineage is rebuilt within each memory store from record ids and time: a write makes the next
  version of its record (a delete a tombstone), a search reads the version that was live when it
  ran (or an older one whose content it returned: a stale read), a write reads the output of the
  extraction call before it in its trace, an answer reads the candidates of the searches before it;
- the case id of an answer is ``memtrace.case.id`` when set, else its trace id (contract v0.2).

What was inferred is listed on each op in ``memtrace.op.inferred``, which verdicts repeat under
``unchecked``. Spans that already carry ``memtrace.op.kind`` pass through unchanged, and so does
every other span (HTTP, DB, queues).

>>> from memtrace_otel.semconv import SpanRecord, attributes as A
>>> t = "0" * 31 + "1"
>>> create = SpanRecord(t, "00000000000000a1", "create_memory", start_time_unix_nano=1,
...     end_time_unix_nano=2, attributes={A.GEN_AI_OPERATION_NAME: "create_memory",
...     A.GEN_AI_MEMORY_STORE_ID: "u1", A.GEN_AI_MEMORY_RECORD_ID: "m1",
...     A.GEN_AI_MEMORY_RECORDS: '[{"id": "m1", "content": "Ana lives in Porto"}]'})
>>> [op] = adapt_upstream([create])
>>> op.attributes[A.MEMTRACE_OP_KIND], op.attributes[A.MEMTRACE_OP_OUTPUTS]
('create', ('m1@1',))
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv.record import EventRecord, SpanRecord, frozen_attributes
from memtrace_otel.semconv.values import UPSERT_MEMORY, Category, OpKind, Role

__all__ = [
    "CHAT_OPERATIONS",
    "MEMORY_OPERATIONS",
    "adapt_upstream",
    "is_upstream_memory_op",
    "is_upstream_op",
]

SEARCH, CREATE, UPDATE, DELETE = "search_memory", "create_memory", "update_memory", "delete_memory"
MEMORY_OPERATIONS = frozenset({SEARCH, CREATE, UPDATE, UPSERT_MEMORY, DELETE})
"""Upstream ``gen_ai.operation.name`` values of memory store spans."""
CHAT_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
"""Upstream ``gen_ai.operation.name`` values of model calls."""
_WRITES = frozenset({CREATE, UPDATE, UPSERT_MEMORY, DELETE})

# What each inference rests on, as listed in ``memtrace.op.inferred``.
INFERRED_KIND = "kind from gen_ai.operation.name"
INFERRED_CHAT_ROLE = "extract/generate role of a chat call from its place in the trace"
INFERRED_VERSIONS = "record versions from record ids and time within the store"
INFERRED_EXTRACTION_INPUT = "a write's input: the extraction call before it in its trace"
INFERRED_CONTEXT = "an answer's context: the searches before it in its trace"
INFERRED_CASE = "case id: the answer's trace id"
INFERRED_STORE = "store of a chat call: the memory spans of its trace"
_SYSTEM_INSTRUCTIONS = A.GEN_AI_SYSTEM_INSTRUCTIONS
_INSTRUCTION_ROLES = frozenset({"system", "developer"})
INFERRED_UNKNOWN_WRITES = "records written not known (no record ids or records captured)"


def _operation(record: SpanRecord) -> str | None:
    value = record.attributes.get(A.GEN_AI_OPERATION_NAME)
    return value if isinstance(value, str) else None


def _is_contract_op(record: SpanRecord) -> bool:
    attrs = record.attributes
    return A.MEMTRACE_OP_KIND in attrs or A.MEMTRACE_OP_NAME in attrs


def is_upstream_memory_op(record: SpanRecord) -> bool:
    """Whether ``record`` is an upstream memory span (``search_memory``, ``create_memory``, ...)
    without contract attributes: one that :func:`adapt_upstream` turns into an op."""
    return not _is_contract_op(record) and _operation(record) in MEMORY_OPERATIONS


def is_upstream_op(record: SpanRecord) -> bool:
    """Whether ``record`` is an upstream memory or chat span without contract attributes.

    >>> from memtrace_otel.semconv import SpanRecord, attributes as A
    >>> is_upstream_op(SpanRecord("1" * 32, "1" * 16, "chat m",
    ...     attributes={A.GEN_AI_OPERATION_NAME: "chat"}))
    True
    >>> is_upstream_op(SpanRecord("1" * 32, "1" * 16, "GET /"))
    False
    """
    if _is_contract_op(record):
        return False
    op = _operation(record)
    return op is not None and (op in MEMORY_OPERATIONS or op in CHAT_OPERATIONS)


@dataclass(frozen=True)
class _Record:
    """One memory record as an upstream span lists it."""

    id: str | None
    content: str | None
    score: float | None = None


@dataclass
class _Version:
    version: int
    content: str | None
    deleted: bool
    start: int


@dataclass
class _Op:
    """The contract view of one upstream span, filled in as lineage is rebuilt."""

    record: SpanRecord
    kind: str
    store: str | None
    inputs: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # ref -> (cat, value)
    outputs: dict[str, tuple[str, str | None, bool]] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)  # output ref -> source refs
    case_id: str | None = None
    inferred: list[str] = field(default_factory=list)
    name: str = ""

    def read(self, ref: str, category: str, value: str | None = None) -> None:
        self.inputs.setdefault(ref, (category, value))

    def write(self, ref: str, category: str, value: str | None, deleted: bool = False) -> None:
        self.outputs[ref] = (category, value, deleted)

    def derive(self, ref: str, sources: Iterable[str]) -> None:
        """Say which inputs an output was derived from (``source_refs`` in its meta)."""
        listed = self.sources.setdefault(ref, [])
        listed.extend(s for s in sources if s not in listed)

    def infer(self, what: str) -> None:
        if what not in self.inferred:
            self.inferred.append(what)


def adapt_upstream(records: Iterable[SpanRecord]) -> list[SpanRecord]:
    """``records`` with every upstream memory and chat span rewritten as a contract op.

    Deterministic: copies of one span (retried exports) are rewritten identically, and the result
    does not depend on the order of ``records``.

    Args:
        records: span records of any origin, all the traces of the stores to be attributed (the
            versions of a record are counted over them).

    Returns:
        The records in their order, upstream ones replaced.
    """
    records = list(records)
    first: dict[tuple[str, str], SpanRecord] = {}
    for record in records:
        if is_upstream_op(record):
            first.setdefault((record.trace_id, record.span_id), record)
    if not first:
        return records
    inner = _inside_contract_ops(records, first)
    adapted = _Adapter([r for key, r in first.items() if key not in inner]).run()
    return [adapted.get((r.trace_id, r.span_id), r) if is_upstream_op(r) else r for r in records]


def _inside_contract_ops(
    records: list[SpanRecord], candidates: dict[tuple[str, str], SpanRecord]
) -> set[tuple[str, str]]:
    """The upstream spans nested under a contract op: an instrumented memory system's own LLM
    calls (Mem0's extraction under its phase op), already described by that op, not ops."""
    parents = {(r.trace_id, r.span_id): r for r in records}
    inner: set[tuple[str, str]] = set()
    for key, record in candidates.items():
        seen = 0
        parent_id = record.parent_span_id
        while parent_id and seen < 64:  # a bounded walk: records may loop or be missing
            parent = parents.get((record.trace_id, parent_id))
            if parent is None:
                break
            if _is_contract_op(parent):
                inner.add(key)
                break
            parent_id, seen = parent.parent_span_id, seen + 1
    return inner


def _order(record: SpanRecord) -> tuple[int, int, str]:
    return (record.start_time_unix_nano, record.end_time_unix_nano, record.span_id)


class _Adapter:
    def __init__(self, spans: Sequence[SpanRecord]) -> None:
        self.spans = sorted(spans, key=_order)
        self.by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
        for span in self.spans:
            self.by_trace[span.trace_id].append(span)
        self.ops: dict[tuple[str, str], _Op] = {}
        # store -> record id -> versions, oldest first
        self.versions: dict[str | None, dict[str, list[_Version]]] = defaultdict(dict)

    def run(self) -> dict[tuple[str, str], SpanRecord]:
        for trace_spans in self.by_trace.values():
            self._classify_trace(trace_spans)
        # Memory writes and searches in time order across traces: versions depend on it.
        for span in self.spans:
            op = self.ops.get((span.trace_id, span.span_id))
            if op is not None and _operation(span) in MEMORY_OPERATIONS:
                self._memory_op(op)
        for trace_spans in self.by_trace.values():
            self._link_trace(trace_spans)
        return {key: _to_record(op) for key, op in self.ops.items()}

    # --- kinds ----------------------------------------------------------------------------------

    def _classify_trace(self, spans: list[SpanRecord]) -> None:
        memory = [s for s in spans if _operation(s) in MEMORY_OPERATIONS]
        stores = [_store(s) for s in memory if _store(s) is not None]
        writes = [s for s in memory if _operation(s) in _WRITES]
        searches = [s for s in memory if _operation(s) == SEARCH]
        case_id = next(
            (
                str(s.attributes[A.MEMTRACE_CASE_ID])
                for s in spans
                if A.MEMTRACE_CASE_ID in s.attributes
            ),
            None,
        )
        for span in spans:
            operation = _operation(span)
            key = (span.trace_id, span.span_id)
            if operation in MEMORY_OPERATIONS:
                kind = {
                    SEARCH: OpKind.RETRIEVE,
                    CREATE: OpKind.CREATE,
                    UPDATE: OpKind.UPDATE,
                    DELETE: OpKind.DELETE,
                }.get(str(operation), OpKind.CREATE)
                op = _Op(span, kind.value, _store(span), name=str(operation))
                op.infer(INFERRED_KIND)
                self.ops[key] = op
                continue
            store = _store(span) or _nearest_store(span, memory, stores)
            if any(w.end_time_unix_nano >= span.end_time_unix_nano for w in writes):
                kind = OpKind.EXTRACT
            elif any(s.end_time_unix_nano <= span.start_time_unix_nano for s in searches) or (
                _has_evaluation(span)
            ):
                kind = OpKind.GENERATE
            else:
                continue  # a model call that neither feeds memory nor answers from it
            op = _Op(span, kind.value, store, name=f"{operation} {_model(span)}".strip())
            op.infer(INFERRED_CHAT_ROLE)
            if _store(span) is None and store is not None:
                op.infer(INFERRED_STORE)
            self.ops[key] = op
        answers = [
            self.ops[(s.trace_id, s.span_id)]
            for s in spans
            if (s.trace_id, s.span_id) in self.ops
            and self.ops[(s.trace_id, s.span_id)].kind == OpKind.GENERATE
        ]
        if answers:
            case = case_id or spans[0].trace_id
            for op in answers:
                op.case_id = case
                if case_id is None:
                    op.infer(INFERRED_CASE)
            last_answer = max(a.record.start_time_unix_nano for a in answers)
            for s in searches:
                op = self.ops[(s.trace_id, s.span_id)]
                if s.end_time_unix_nano <= last_answer:
                    op.case_id = case

    # --- memory lineage ---------------------------------------------------------------------------

    def _memory_op(self, op: _Op) -> None:
        span = op.record
        operation = _operation(span)
        store_versions = self.versions[op.store]
        records = _records(span)
        record_id = _string(span.attributes.get(A.GEN_AI_MEMORY_RECORD_ID))
        if operation == SEARCH:
            self._search(op, store_versions, records)
            return
        if records:
            targets = records
            if len(targets) == 1 and targets[0].id is None and record_id is not None:
                targets = [replace(targets[0], id=record_id)]
        elif record_id is not None:
            targets = [_Record(record_id, None)]
        elif operation == DELETE:
            # No record id on a delete: the whole store was cleared.
            targets = [
                _Record(rid, None) for rid, versions in store_versions.items() if _live(versions)
            ]
        else:
            # Which records a write stored is unknown without ids (content not captured), or it
            # stored none (an add whose extraction found nothing).
            if A.GEN_AI_MEMORY_RECORDS not in span.attributes and _count(span) != 0:
                op.infer(INFERRED_UNKNOWN_WRITES)
            return
        op.infer(INFERRED_VERSIONS)
        for index, target in enumerate(targets):
            rid = target.id or f"{span.span_id}:{index}"
            versions = store_versions.setdefault(rid, [])
            previous = versions[-1] if versions else None
            if previous is not None:
                op.read(f"{rid}@{previous.version}", Category.MEMORY.value)
            number = previous.version + 1 if previous is not None else 1
            if operation == UPSERT_MEMORY:
                op.kind = (
                    OpKind.UPDATE.value
                    if previous is not None and not previous.deleted
                    else OpKind.CREATE.value
                )
            deleted = operation == DELETE
            content = None if deleted else target.content
            versions.append(_Version(number, content, deleted, span.start_time_unix_nano))
            op.write(f"{rid}@{number}", Category.MEMORY.value, content, deleted)

    def _search(self, op: _Op, store: dict[str, list[_Version]], records: list[_Record]) -> None:
        span = op.record
        query = _string(span.attributes.get(A.GEN_AI_MEMORY_QUERY_TEXT))
        op.read(f"query:{span.span_id}@1", Category.QUERY.value, query)
        candidates: list[dict[str, Any]] = []
        for hit in records:
            entry: dict[str, Any] = {"text": hit.content}
            if hit.score is not None:
                entry["score"] = hit.score
            if hit.id is not None:
                version = _version_read(store.get(hit.id, []), hit, span.start_time_unix_nano)
                ref = f"{hit.id}@{version}"
                op.read(ref, Category.MEMORY.value, hit.content)
                op.infer(INFERRED_VERSIONS)
                entry["ref"] = ref
            candidates.append(entry)
        value = json.dumps(candidates, ensure_ascii=False) if records else None
        op.write(f"candidates:{span.span_id}@1", Category.CANDIDATES.value, value)

    # --- chat calls -----------------------------------------------------------------------------

    def _link_trace(self, spans: list[SpanRecord]) -> None:
        ops = [
            self.ops[(s.trace_id, s.span_id)] for s in spans if (s.trace_id, s.span_id) in self.ops
        ]
        searches = [op for op in ops if _operation(op.record) == SEARCH]
        extractions: list[_Op] = []
        for op in ops:  # model calls, in time order
            span = op.record
            if op.kind not in (OpKind.EXTRACT, OpKind.GENERATE):
                continue
            system, inputs, outputs = _messages(span)
            if system is not None:
                op.read(_prompt_ref(system), Category.PROMPT.value, system)
            if op.kind == OpKind.EXTRACT:
                message = f"messages:{span.span_id}@1"
                op.read(message, Category.MESSAGE.value, inputs)
                read = [message]
                for earlier in extractions:  # a decision call reads the facts before it
                    for ref, (category, value, _) in earlier.outputs.items():
                        op.read(ref, category, value)
                        read.append(ref)
                output = f"llm:{span.span_id}@1"
                op.write(output, Category.MEMORY.value, outputs)
                op.derive(output, read)
                extractions.append(op)
            else:
                op.read(f"context:{span.span_id}@1", Category.CONTEXT.value, inputs)
                for search in searches:
                    if search.record.end_time_unix_nano <= span.start_time_unix_nano:
                        for ref, (category, value, _) in search.outputs.items():
                            op.read(ref, category, value)
                        op.infer(INFERRED_CONTEXT)
                op.write(f"answer:{span.span_id}@1", Category.PREDICTION.value, outputs)
        for op in ops:  # writes read the last extraction that finished before they did
            span = op.record
            if _operation(span) not in _WRITES or not op.outputs:
                continue
            source = [
                e for e in extractions if e.record.end_time_unix_nano <= span.end_time_unix_nano
            ]
            if source:
                for ref, (category, value, _) in source[-1].outputs.items():
                    op.read(ref, category, value)
                    for out, (_, _, deleted) in op.outputs.items():
                        if not deleted:
                            op.derive(out, [ref])
                op.infer(INFERRED_EXTRACTION_INPUT)


def _count(span: SpanRecord) -> int | None:
    value = span.attributes.get(A.GEN_AI_MEMORY_RECORD_COUNT)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _live(versions: list[_Version]) -> bool:
    return bool(versions) and not versions[-1].deleted


def _version_read(versions: list[_Version], hit: _Record, start: int) -> int:
    """The version of a returned record that a search read.

    The version live when the search started, unless the returned content is that of an older
    version (a stale cache or replica). A record never written in the loaded traces is version 1.
    """
    before = [v for v in versions if v.start <= start]
    if not before:
        return 1
    live = before[-1]
    if hit.content is not None and live.content != hit.content:
        for older in reversed(before[:-1]):
            if older.content == hit.content and not older.deleted:
                return older.version
    return live.version


def _nearest_store(
    span: SpanRecord, memory: list[SpanRecord], stores: list[str | None]
) -> str | None:
    """The store of the memory span nearest in time to a chat span of the same trace."""
    if not memory:
        return None
    if len(set(stores)) == 1:
        return stores[0]
    nearest = min(memory, key=lambda m: abs(m.start_time_unix_nano - span.start_time_unix_nano))
    return _store(nearest)


def _store(span: SpanRecord) -> str | None:
    return _string(span.attributes.get(A.GEN_AI_MEMORY_STORE_ID))


def _model(span: SpanRecord) -> str:
    model = span.attributes.get(A.GEN_AI_REQUEST_MODEL)
    return model if isinstance(model, str) else ""


def _has_evaluation(span: SpanRecord) -> bool:
    return any(e.name == A.GEN_AI_EVALUATION_RESULT_EVENT for e in span.events)


def _string(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str | int | float):
        return str(value)
    return None


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return value


def _records(span: SpanRecord) -> list[_Record]:
    """``gen_ai.memory.records``: a JSON array string, or an array of objects or JSON strings."""
    raw = _json(span.attributes.get(A.GEN_AI_MEMORY_RECORDS))
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    records = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        content = item.get("content")
        if content is not None and not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, sort_keys=True)
        score = item.get("score")
        records.append(
            _Record(
                _string(item.get("id")),
                content,
                float(score)
                if isinstance(score, int | float) and not isinstance(score, bool)
                else None,
            )
        )
    return records


def _messages(span: SpanRecord) -> tuple[str | None, str | None, str | None]:
    """The instructions, the messages a chat span read, and what it wrote, when captured.

    Read from ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (and
    ``gen_ai.system_instructions``), as span attributes or on an event carrying them, else the
    older per-message events (``gen_ai.system.message``, ``gen_ai.user.message``,
    ``gen_ai.choice``, ...). System and developer messages are the instructions: a prompt, not
    what the user said.
    """
    attributes: dict[str, Any] = dict(span.attributes)
    for event in span.events:
        for key in (A.GEN_AI_INPUT_MESSAGES, A.GEN_AI_OUTPUT_MESSAGES, _SYSTEM_INSTRUCTIONS):
            if key in event.attributes and key not in attributes:
                attributes[key] = event.attributes[key]
    system: list[str] = []
    inputs: list[str] = []
    raw = attributes.get(A.GEN_AI_INPUT_MESSAGES)
    if raw is not None:
        decoded = _json(raw)
        for message in decoded if isinstance(decoded, list) else [decoded]:
            texts: list[str] = []
            _collect_text(message, texts)
            role = message.get("role") if isinstance(message, dict) else None
            (system if role in _INSTRUCTION_ROLES else inputs).extend(texts)
        if not system and not inputs and isinstance(raw, str):
            inputs.append(raw)
    if _SYSTEM_INSTRUCTIONS in attributes:
        texts = []
        _collect_text(_json(attributes[_SYSTEM_INSTRUCTIONS]), texts)
        system[:0] = texts
    outputs = _message_text(attributes.get(A.GEN_AI_OUTPUT_MESSAGES))
    if raw is None or outputs is None:
        old_system, old_in, old_out = _legacy_events(span.events)
        if raw is None:
            system = system or old_system
            inputs = old_in
        outputs = outputs if outputs is not None else old_out
    return ("\n".join(system) or None), ("\n".join(inputs) or None), outputs


def _prompt_ref(text: str) -> str:
    """One variable per distinct instruction text: the call's prompt template."""
    return "prompt:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16] + "@1"


def _message_text(value: Any) -> str | None:
    """The text parts of upstream messages (``[{role, parts: [{type, content}]}]``), joined."""
    if value is None:
        return None
    decoded = _json(value)
    texts: list[str] = []
    _collect_text(decoded, texts)
    return "\n".join(texts) if texts else (value if isinstance(value, str) else None)


def _collect_text(value: Any, texts: list[str]) -> None:
    if isinstance(value, str):
        texts.append(value)
    elif isinstance(value, list):
        for item in value:
            _collect_text(item, texts)
    elif isinstance(value, dict):
        for key in ("content", "text", "parts", "message"):
            if key in value:
                _collect_text(value[key], texts)


def _legacy_events(events: Sequence[EventRecord]) -> tuple[list[str], list[str], str | None]:
    system: list[str] = []
    inputs: list[str] = []
    outputs: list[str] = []
    for event in events:
        if not event.name.startswith("gen_ai."):
            continue
        texts: list[str] = []
        _collect_text(_json(dict(event.attributes)), texts)
        if event.name == "gen_ai.choice":
            outputs.extend(texts)
        elif event.name == "gen_ai.system.message":
            system.extend(texts)
        elif event.name.endswith(".message"):
            inputs.extend(texts)
    return system, inputs, ("\n".join(outputs) or None)


def _to_record(op: _Op) -> SpanRecord:
    span = op.record
    attributes = dict(span.attributes)
    attributes.update(
        {
            A.MEMTRACE_OP_KIND: op.kind,
            A.MEMTRACE_OP_NAME: op.name or span.name,
            A.MEMTRACE_OP_INPUTS: tuple(op.inputs),
            A.MEMTRACE_OP_OUTPUTS: tuple(op.outputs),
            A.MEMTRACE_OP_INFERRED: tuple(op.inferred),
        }
    )
    if A.MEMTRACE_SYSTEM not in attributes:
        provider = span.attributes.get(A.GEN_AI_PROVIDER_NAME) or span.attributes.get(
            A.GEN_AI_SYSTEM
        )
        attributes[A.MEMTRACE_SYSTEM] = provider if isinstance(provider, str) else "upstream"
    if op.store is not None:
        attributes[A.GEN_AI_MEMORY_STORE_ID] = op.store
    if op.case_id is not None:
        attributes[A.MEMTRACE_CASE_ID] = op.case_id
    time = span.start_time_unix_nano
    events = list(span.events)
    for ref, (category, value) in op.inputs.items():
        events.append(_variable_event(ref, Role.INPUT.value, category, value, False, time))
    for ref, (category, value, deleted) in op.outputs.items():
        events.append(
            _variable_event(
                ref,
                Role.OUTPUT.value,
                category,
                value,
                deleted,
                span.end_time_unix_nano,
                op.sources.get(ref),
            )
        )
    return replace(span, attributes=frozen_attributes(attributes), events=tuple(events))


def _variable_event(
    ref: str,
    role: str,
    category: str,
    value: str | None,
    deleted: bool,
    time: int,
    sources: list[str] | None = None,
) -> EventRecord:
    attributes: dict[str, Any] = {
        A.MEMTRACE_VARIABLE_REF: ref,
        A.MEMTRACE_VARIABLE_ROLE: role,
        A.MEMTRACE_VARIABLE_CATEGORY: category,
    }
    if value is not None:
        attributes[A.MEMTRACE_VARIABLE_VALUE] = value
        attributes[A.MEMTRACE_VARIABLE_DIGEST] = (
            "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
        )
    if deleted:
        attributes[A.MEMTRACE_VARIABLE_DELETED] = True
    if sources:
        attributes[A.MEMTRACE_VARIABLE_META] = json.dumps({"source_refs": sources})
    return EventRecord(A.MEMTRACE_VARIABLE_EVENT, time, frozen_attributes(attributes))

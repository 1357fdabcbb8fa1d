"""Mem0 wrappers: the public methods, the record writes, and the pipeline phases in between.

Public methods of ``Memory`` and ``AsyncMemory`` (table :data:`TARGETS`) become ops named with
the upstream ``gen_ai.operation.name``: ``add`` an ``ingest`` op (``upsert_memory``), ``search``,
``get``, ``get_all`` and ``history`` ``retrieve`` ops (``search_memory``), ``update`` an
``update`` op, ``delete`` and ``delete_all`` ``delete`` ops. The record writes
(``_create_memory``, ``_update_memory``, ``_delete_memory``) are ``create``/``update``/``delete``
ops that put their span context into the record's metadata (``memtrace_traceparent``), so a
later search, in any process, links to the writer.

The phases inside ``add`` happen in calls mem0 makes on its components, so the instance's
``llm`` and ``vector_store`` are wrapped in transparent proxies while an ``add`` runs:

- classic pipeline (mem0ai 1.x): ``mem0.fact_extraction`` (first LLM call),
  ``mem0.search_existing`` per fact (vector search), ``mem0.update_decision`` (second LLM call;
  one output per ADD/UPDATE/DELETE/NONE item), then one write op per decision;
- additive pipeline (mem0ai 2.x): ``mem0.search_existing``, ``mem0.additive_extraction`` (the
  single LLM call), ``mem0.dedup`` (a construction ``filter``: which facts were new) and
  ``mem0.batch_write`` (the batch insert, one ``create`` op).

Record ids become refs ``mem0:<id>@<version>``; the version is the record's number of entries
in mem0's history (cached per process). Mem0 1.x runs ``add`` and ``search`` in a thread pool:
``mem0.memory.main`` gets a pool that carries the caller's context into its threads.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
import types
import weakref
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

import wrapt

from memtrace_otel._internal import data_warning, internal_error
from memtrace_otel.instrumentation import MemTracer, Op, Variable, is_tracing_suppressed
from memtrace_otel.instrumentation._variables import unchecked_variable
from memtrace_otel.instrumentors._common import (
    BoundedCache,
    Call,
    CallFactory,
    RecordTuple,
    Target,
    VersionCache,
    bind,
    candidate_json,
    candidates_json,
    close_op,
    content_id,
    enter_memory_system,
    leave_memory_system,
    message_ref,
    parse_json_reply,
    produced_by,
    remember_retrieval,
    run_sync,
    set_case_id,
    span_hex,
    wrapper_for,
)
from memtrace_otel.semconv import UPSERT_MEMORY, Category, Stage
from memtrace_otel.semconv import attributes as A

SYSTEM = "mem0"
MODULE = "mem0.memory.main"
CLASSIC = "classic"
ADDITIVE = "additive"
PROCEDURAL = "procedural"

PUBLIC_METHODS = ("add", "search", "get", "get_all", "update", "delete", "delete_all", "history")
WRITE_METHODS = ("_create_memory", "_update_memory", "_delete_memory")

TARGETS: tuple[Target, ...] = tuple(
    Target(MODULE, f"{cls}.{method}", method, is_async=cls == "AsyncMemory")
    for cls in ("Memory", "AsyncMemory")
    for method in (*PUBLIC_METHODS, *WRITE_METHODS)
)
"""Every patched method: ``(module, Class.method, handler, is_async)``."""

_SCOPE_KEYS = ("user_id", "agent_id", "run_id")
_PROCEDURAL_MEMORY = "procedural_memory"


def pipeline_of(version: str) -> str:
    """Which ``add`` pipeline a mem0ai version runs: ``classic`` (1.x) or ``additive`` (2.x).

    >>> pipeline_of("1.0.11"), pipeline_of("2.2.1")
    ('classic', 'additive')
    """
    major = version.split(".", 1)[0]
    return CLASSIC if major.isdigit() and int(major) < 2 else ADDITIVE


def record_ref(memory_id: str, version: int) -> str:
    """The ref of a mem0 record at a version.

    >>> record_ref("3f2a", 2)
    'mem0:3f2a@2'
    """
    return f"mem0:{memory_id}@{version}"


def _record(
    memory_id: str, version: int, text: Any, sources: list[str] | None = None, **meta: Any
) -> Variable:
    info = dict(meta)
    if sources:
        info["source_refs"] = sources
    return Variable(f"mem0:{memory_id}", version, text, Category.MEMORY, info or None)


def _store_of(*mappings: Any) -> str | None:
    """The memory store (``gen_ai.memory.store.id``): the first of user_id, agent_id, run_id."""
    for key in _SCOPE_KEYS:
        for mapping in mappings:
            if isinstance(mapping, dict) and mapping.get(key):
                return str(mapping[key])
    return None


# ---------------------------------------------------------------------------------------------
# Per-call state shared by the public op, its phases and its writes
# ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Decision:
    event: str
    text: str
    memory_id: str | None
    variable: Variable
    used: bool = False


class _State:
    """One public call in progress (contextvar; shared by mem0's worker threads)."""

    __slots__ = (
        "decisions",
        "deduplicated",
        "existing",
        "facts",
        "instance",
        "llm_calls",
        "lock",
        "messages",
        "method",
        "op",
        "pipeline",
        "store_id",
        "writes",
    )

    def __init__(
        self, method: str, instance: Any, op: Op, store_id: str | None, pipeline: str = ADDITIVE
    ) -> None:
        self.method = method
        self.instance = instance
        self.op = op
        self.store_id = store_id
        self.pipeline = pipeline
        self.messages: list[Variable] = []
        self.llm_calls = 0
        self.facts: list[Variable] = []
        self.existing: dict[str, Variable] = {}  # insertion order: mem0 numbers them this way
        self.decisions: list[_Decision] = []
        self.deduplicated = False
        self.writes = 0
        self.lock = threading.Lock()

    @property
    def sources(self) -> list[str]:
        return [m.ref for m in self.messages]

    def fact_for(self, text: Any) -> Variable | None:
        for fact in self.facts:
            if fact.value == text:
                return fact
        return None

    def take_decision(
        self, event: str, *, text: Any = None, memory_id: Any = None
    ) -> _Decision | None:
        with self.lock:
            for item in self.decisions:
                if item.used or item.event != event:
                    continue
                if (memory_id is not None and item.memory_id == memory_id) or (
                    memory_id is None and item.text == text
                ):
                    item.used = True
                    return item
        return None


@dataclass(eq=False)
class _Write:
    """A record write in progress: the op, and what mem0 read of the old record."""

    op: Op
    kind: str
    memory_id: Any
    public: bool = False
    claimed: bool = False
    old_text: Any = None
    old_traceparent: str | None = None
    old_seen: bool = False
    source: Variable | None = None  # a public update's new text: where it came from

    def observe(self, record: Any) -> None:
        payload = getattr(record, "payload", None)
        if not isinstance(payload, dict):
            return
        self.old_seen = True
        self.old_text = payload.get("data")
        tp = payload.get(A.METADATA_TRACEPARENT)
        self.old_traceparent = tp if isinstance(tp, str) else None
        store = _store_of(payload)
        if store is not None:
            self.op.set_attribute(A.GEN_AI_MEMORY_STORE_ID, store)


_state: ContextVar[_State | None] = ContextVar("memtrace_mem0_call", default=None)
_write: ContextVar[_Write | None] = ContextVar("memtrace_mem0_write", default=None)


# ---------------------------------------------------------------------------------------------
# The telemetry object of one instrumentation
# ---------------------------------------------------------------------------------------------


class Mem0Telemetry:
    """Holds the tracer and caches of one ``Mem0Instrumentor.instrument()``."""

    def __init__(self, mt: MemTracer, pipeline: str) -> None:
        self.mt = mt
        self.pipeline = pipeline
        self.active = True
        self.versions = VersionCache()
        self.stores: BoundedCache[str, str] = BoundedCache()  # memory id -> store id
        self._instances: weakref.WeakSet[Any] = weakref.WeakSet()
        self._instances_lock = threading.Lock()
        self._factories: dict[str, CallFactory] = {
            "add": self._add,
            "search": self._search,
            "get": self._get,
            "get_all": self._get_all,
            "history": self._history,
            "update": self._public_write("update"),
            "delete": self._public_write("delete"),
            "delete_all": self._delete_all,
            "_create_memory": self._write_call("create"),
            "_update_memory": self._write_call("update"),
            "_delete_memory": self._write_call("delete"),
        }

    def wrapper(self, target: Target) -> Callable[..., Any]:
        """The ``wrapt`` wrapper of one table entry."""
        return wrapper_for(target, self._factories[target.handler])

    # -- components --------------------------------------------------------------------------
    def install_proxies(self, instance: Any) -> None:
        """Wrap the instance's LLM and vector store once (they stay transparent outside ``add``)."""
        attrs = getattr(instance, "__dict__", None)
        if attrs is None:
            return
        llm, store = attrs.get("llm"), attrs.get("vector_store")
        wrap_llm = llm is not None and not isinstance(llm, _LlmProxy)
        wrap_store = store is not None and not isinstance(store, _VectorStoreProxy)
        if not (wrap_llm or wrap_store):
            return  # the common case: done on the instance's first call
        if wrap_llm:
            instance.llm = _LlmProxy(llm, self)
        if wrap_store:
            instance.vector_store = _VectorStoreProxy(store, self)
        with self._instances_lock:
            self._instances.add(instance)

    def close(self) -> None:
        """Stop tracing and take the proxies off every instance seen."""
        self.active = False
        with self._instances_lock:
            instances = list(self._instances)
            self._instances.clear()
        for instance in instances:
            for name, proxy_type in (("llm", _LlmProxy), ("vector_store", _VectorStoreProxy)):
                current = instance.__dict__.get(name)
                if isinstance(current, proxy_type):
                    setattr(instance, name, current.__wrapped__)

    def version_of(self, instance: Any, memory_id: str, metadata: Any = None) -> int:
        """The record's current version: cached, else the one its traced writer put in its
        metadata, else (a record written untraced) its number of history entries, read once."""
        known = self.versions.get(memory_id)
        if known is not None:
            return known
        written = metadata.get(A.METADATA_VERSION) if isinstance(metadata, dict) else None
        if type(written) is int and written >= 1:
            version = written
        else:
            version = 1
            db = getattr(instance, "db", None)
            if db is not None:
                try:
                    version = max(1, len(db.get_history(memory_id)))
                except Exception:
                    version = 1  # no history table (or closed): version 1 is the best guess
        self.versions.set(memory_id, version)
        return version

    def hit_ref(
        self, instance: Any, memory_id: Any, metadata: Any, store: str | None
    ) -> tuple[str, int, str | None] | None:
        """A record a read returned: ``(id, current version, writer's traceparent)``, the id as
        its variable's (``mem0:<memory id>``), the traceparent from the metadata; ``None`` (and
        one warning) without an id."""
        if memory_id is None or memory_id == "":
            data_warning(
                "mem0.record_without_id",
                "memtrace-otel: a mem0 record without an id was returned; it is not linked",
            )
            return None
        memory_id = memory_id if type(memory_id) is str else str(memory_id)
        tp = metadata.get(A.METADATA_TRACEPARENT) if type(metadata) is dict else None
        if store is not None and self.stores.get(memory_id) != store:
            self.stores.set(memory_id, store)
        version = self.versions.get(memory_id) or self.version_of(instance, memory_id, metadata)
        return f"mem0:{memory_id}", version, tp if type(tp) is str else None

    def hit_variable(
        self, instance: Any, memory_id: Any, text: Any, metadata: Any, store: str | None
    ) -> Variable | None:
        """:meth:`hit_ref` as an op input variable holding ``text``."""
        found = self.hit_ref(instance, memory_id, metadata, store)
        if found is None:
            return None
        ident, version, tp = found
        # Without re-validation: a non-empty id, a version >= 1, a category.
        return unchecked_variable(ident, version, text, Category.MEMORY, None, False, tp)

    # -- public methods ------------------------------------------------------------------------
    def _begin_public(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not self.active or _state.get() is not None:
            return None  # mem0 calling itself: its own business, already inside our op
        return bind(wrapped, args, kwargs)

    def _add(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        bound = self._begin_public(wrapped, instance, args, kwargs)
        return None if bound is None else _AddCall(self, instance, bound)

    def _search(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        bound = self._begin_public(wrapped, instance, args, kwargs)
        return None if bound is None else _SearchCall(self, instance, bound, "search")

    def _get_all(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        bound = self._begin_public(wrapped, instance, args, kwargs)
        return None if bound is None else _SearchCall(self, instance, bound, "get_all")

    def _get(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        bound = self._begin_public(wrapped, instance, args, kwargs)
        return None if bound is None else _GetCall(self, instance, bound, "get")

    def _history(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        bound = self._begin_public(wrapped, instance, args, kwargs)
        return None if bound is None else _GetCall(self, instance, bound, "history")

    def _public_write(self, kind: str) -> CallFactory:
        def factory(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
            bound = self._begin_public(wrapped, instance, args, kwargs)
            return None if bound is None else _PublicWriteCall(self, instance, bound, kind)

        return factory

    def _delete_all(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        bound = self._begin_public(wrapped, instance, args, kwargs)
        return None if bound is None else _DeleteAllCall(self, instance, bound)

    # -- record writes -------------------------------------------------------------------------
    def _write_call(self, kind: str) -> CallFactory:
        def factory(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
            if not self.active:
                return None
            bound = bind(wrapped, args, kwargs)
            return None if bound is None else _WriteCall(self, instance, bound, kind)

        return factory


# ---------------------------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------------------------


class _OpCall(Call):
    """A call that opens one op and makes it the current mem0 call for mem0's internals."""

    def __init__(self, tel: Mem0Telemetry, instance: Any, bound: Any) -> None:
        super().__init__(bound.args, bound.kwargs)
        self.tel = tel
        self.instance = instance
        self.bound = bound
        self.arguments: dict[str, Any] = bound.arguments
        self.op: Op | None = None
        self.state: _State | None = None
        self._tokens: list[tuple[ContextVar[Any], Token[Any]]] = []
        self._system_token: object | None = None

    def open(self, op: Op, *, store_id: str | None, pipeline: str = ADDITIVE) -> _State:
        self.tel.install_proxies(self.instance)
        self.op = op
        op.__enter__()
        self.state = _State(self.method, self.instance, op, store_id, pipeline)
        self._tokens.append((_state, _state.set(self.state)))
        self._system_token = enter_memory_system()
        return self.state

    method = ""

    def set_store(self, store_id: str | None) -> None:
        if store_id and self.op is not None:
            self.op.set_attribute(A.GEN_AI_MEMORY_STORE_ID, store_id)
            if self.state is not None:
                self.state.store_id = store_id

    def end(self, exc: BaseException | None) -> None:
        try:
            close_op(self.op, exc)
        finally:
            for var, token in reversed(self._tokens):
                var.reset(token)
            self._tokens.clear()
            if self._system_token is not None:
                leave_memory_system(self._system_token)
                self._system_token = None


def _messages_of(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return [m for m in value if isinstance(m, dict)]
    return []


def _content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # vision-style parts
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        text = " ".join(p for p in parts if isinstance(p, str))
        return text or None
    return None


class _AddCall(_OpCall):
    method = "add"

    def start(self) -> None:
        args = self.arguments
        store = _store_of(args)
        messages: list[Variable] = []
        for message in _messages_of(args.get("messages")):
            role = str(message.get("role") or "user")
            text = _content_text(message.get("content"))
            if role == "system" or text is None:
                continue
            ref = message_ref(text, store_id=store, role=role)
            messages.append(
                Variable.from_ref(ref, text, category=Category.MESSAGE, meta={"role": role})
            )
        if args.get("memory_type") == _PROCEDURAL_MEMORY:
            pipeline = PROCEDURAL
        else:
            pipeline = self.tel.pipeline
        op = self.tel.mt.ingest(
            "mem0.add", inputs=messages, store_id=store, gen_ai_operation=UPSERT_MEMORY
        )
        state = self.open(op, store_id=store, pipeline=pipeline)
        state.messages = messages

    def finish(self, result: Any) -> Any:
        state, op = self.state, self.op
        if state is None or op is None or not op.is_traced:
            return result
        results = result.get("results") if isinstance(result, dict) else None
        if isinstance(results, list):
            op.set_attribute(A.GEN_AI_MEMORY_RECORD_COUNT, len(results))
        if state.pipeline == ADDITIVE and state.facts and not state.deduplicated:
            # Every extracted fact was a duplicate, so mem0 inserted nothing: the dedup still ran.
            _dedup(self.tel, state, kept_texts=[])
        return result


class _SearchCall(_OpCall):
    """``search`` (query -> ranked records) and ``get_all`` (a store's records)."""

    def __init__(self, tel: Mem0Telemetry, instance: Any, bound: Any, method: str) -> None:
        super().__init__(tel, instance, bound)
        self.method = method
        self.store: str | None = None
        self.case_id: str | None = None

    def start(self) -> None:
        args = self.arguments
        self.store = _store_of(args, args.get("filters"))
        inputs: list[Variable] = []
        query = args.get("query")
        if isinstance(query, str):
            inputs.append(
                Variable(content_id("query", self.store or "", query), 1, query, Category.QUERY)
            )
        op = self.tel.mt.retrieve(f"mem0.{self.method}", inputs=inputs, store_id=self.store)
        self.open(op, store_id=self.store)
        self.case_id = set_case_id(op)

    def finish(self, result: Any) -> Any:
        op = self.op
        if op is None or not op.is_traced:
            return result
        results = result.get("results") if isinstance(result, dict) else result
        if not isinstance(results, list):
            return result  # a generator or an unknown shape: returned unchanged, not recorded
        _record_hits(self.tel, self.instance, op, self.store, self.case_id, results)
        return result


def _record_hits(
    tel: Mem0Telemetry,
    instance: Any,
    op: Op,
    store: str | None,
    case_id: str | None,
    hits: list[Any],
) -> None:
    """Record a search's hits in one pass: each record an input (a link to its writer), the
    candidates output as canonical JSON, what was retrieved for the chat calls that follow."""
    records: list[RecordTuple] = []
    entries: list[str] = []
    for hit in hits:
        if not isinstance(hit, dict):
            continue
        text = hit.get("memory")
        ref = None
        found = tel.hit_ref(instance, hit.get("id"), hit.get("metadata"), store or _store_of(hit))
        if found is not None:
            ident, version, tp = found
            ref = f"{ident}@{version}"
            records.append((ref, text if type(text) is str else str(text or ""), tp))
        entries.append(candidate_json(ref, text, hit.get("score")))
    op.add_records(records)  # once per call: the inputs attribute is written once, at the end
    op.set_attribute(A.GEN_AI_MEMORY_RECORD_COUNT, len(entries))
    candidates = candidates_json(entries)
    op.output(Variable(f"candidates:{span_hex(op)}", 1, candidates, Category.CANDIDATES))
    remember_retrieval(op, store, case_id, records)


class _GetCall(_OpCall):
    """``get`` (one record) and ``history`` (one record's versions)."""

    def __init__(self, tel: Mem0Telemetry, instance: Any, bound: Any, method: str) -> None:
        super().__init__(tel, instance, bound)
        self.method = method
        self.memory_id: str | None = None
        self.case_id: str | None = None

    def start(self) -> None:
        memory_id = self.arguments.get("memory_id")
        self.memory_id = str(memory_id) if memory_id is not None else None
        store = self.tel.stores.get(self.memory_id) if self.memory_id else None
        op = self.tel.mt.retrieve(f"mem0.{self.method}", store_id=store)
        self.open(op, store_id=store)
        self.case_id = set_case_id(op)

    def finish(self, result: Any) -> Any:
        op, memory_id = self.op, self.memory_id
        if op is None or not op.is_traced or memory_id is None:
            return result
        if self.method == "get":
            hits = [result] if isinstance(result, dict) else []
            store = _store_of(result) if isinstance(result, dict) else None
            self.set_store(store)
            _record_hits(self.tel, self.instance, op, store, self.case_id, hits)
            return result
        if not isinstance(result, list):
            return result
        # history: the versions, oldest first; their count is the current version.
        version = max(1, len(result))
        self.tel.versions.set(memory_id, version)
        op.input(record_ref(memory_id, version))
        entries = [
            {
                "ref": record_ref(memory_id, i),
                "event": row.get("event") if isinstance(row, dict) else None,
                "text": row.get("new_memory") if isinstance(row, dict) else None,
            }
            for i, row in enumerate(result, 1)
        ]
        op.set_attribute(A.GEN_AI_MEMORY_RECORD_COUNT, len(entries))
        op.output(Variable(f"candidates:{span_hex(op)}", 1, entries, Category.CANDIDATES))
        return result


class _PublicWriteCall(_OpCall):
    """``update``/``delete``: the op the inner ``_update_memory``/``_delete_memory`` fills in."""

    def __init__(self, tel: Mem0Telemetry, instance: Any, bound: Any, kind: str) -> None:
        super().__init__(tel, instance, bound)
        self.method = kind
        self.kind = kind

    def start(self) -> None:
        memory_id = self.arguments.get("memory_id")
        store = self.tel.stores.get(str(memory_id)) if memory_id is not None else None
        factory = self.tel.mt.update if self.kind == "update" else self.tel.mt.delete
        op = factory(f"mem0.{self.kind}", store_id=store)
        self.open(op, store_id=store)
        slot = _Write(op, self.kind, str(memory_id) if memory_id is not None else None, public=True)
        if self.kind == "update":
            slot.source = self._source_of(op, store)
        self._tokens.append((_write, _write.set(slot)))

    def _source_of(self, op: Op, store: str | None) -> Variable | None:
        """Where the new text came from: the traced output it equals (an LLM completion the app
        wrote back, matched by digest), else the caller's own input: category ``other``, since
        nothing says the user stated it (a ``message`` would read as a later statement that
        legitimately supersedes the record)."""
        args = self.arguments
        text = args.get("text")
        if text is None:
            text = args.get("data")  # mem0 1.x: update(memory_id, data)
        if not isinstance(text, str):
            return None
        produced = produced_by(text)
        if produced is not None:
            ref, traceparent = produced
            source = Variable.from_ref(
                ref, text, category=Category.PREDICTION, traceparent=traceparent
            )
        else:
            source = Variable(content_id("input", store or "", text), 1, text, Category.OTHER)
        op.add_inputs([source])
        return source


class _DeleteAllCall(_OpCall):
    method = "delete_all"

    def start(self) -> None:
        store = _store_of(self.arguments)
        op = self.tel.mt.delete("mem0.delete_all", store_id=store)
        self.open(op, store_id=store)

    def finish(self, result: Any) -> Any:
        if self.op is not None and self.state is not None:
            self.op.set_attribute(A.GEN_AI_MEMORY_RECORD_COUNT, self.state.writes)
        return result


class _WriteCall(Call):
    """``_create_memory``/``_update_memory``/``_delete_memory``: one record write."""

    def __init__(self, tel: Mem0Telemetry, instance: Any, bound: Any, kind: str) -> None:
        super().__init__(bound.args, bound.kwargs)
        self.tel = tel
        self.instance = instance
        self.bound = bound
        self.kind = kind
        self.write: _Write | None = None
        self.owns_op = False
        self.version = 1
        self.memory_id: str | None = None
        self._token: Token[_Write | None] | None = None

    def start(self) -> None:
        args = self.bound.arguments
        state = _state.get()
        memory_id = args.get("memory_id")
        self.memory_id = str(memory_id) if memory_id is not None else None
        slot = _write.get()
        if (
            slot is not None
            and slot.public
            and not slot.claimed
            and slot.kind == self.kind
            and slot.memory_id == self.memory_id
        ):
            slot.claimed = True
            self.write = slot
        else:
            self.write = self._open(state, args)
            self.owns_op = True
            self._token = _write.set(self.write)
        op = self.write.op
        if self.kind != "create" and self.memory_id is not None:
            self.version = self.tel.version_of(self.instance, self.memory_id)
            if self.kind == "delete":
                self.write.observe(args.get("existing_memory"))
        if self.kind != "delete" and op.traceparent is not None:
            # The writer's span context travels with the record, for readers in any process.
            metadata = args.get("metadata")
            metadata = dict(metadata) if isinstance(metadata, dict) else {}
            metadata[A.METADATA_TRACEPARENT] = op.traceparent
            # And the version it gets, so readers need no history read to name it.
            metadata[A.METADATA_VERSION] = 1 if self.kind == "create" else self.version + 1
            self.bound.set("metadata", metadata)
            self.args, self.kwargs = self.bound.args, self.bound.kwargs

    def _open(self, state: _State | None, args: dict[str, Any]) -> _Write:
        mt = self.tel.mt
        inputs: list[Variable | str] = []
        store = state.store_id if state is not None else None
        if store is None and self.memory_id is not None:
            store = self.tel.stores.get(self.memory_id)
        if store is None:
            store = _store_of(args.get("metadata"))
        if state is not None:
            event = {"create": "ADD", "update": "UPDATE", "delete": "DELETE"}[self.kind]
            decision = state.take_decision(
                event,
                text=args.get("data") if self.kind == "create" else None,
                memory_id=self.memory_id if self.kind != "create" else None,
            )
            if decision is not None:
                inputs.append(decision.variable)
            elif self.kind == "create":
                fact = state.fact_for(args.get("data"))
                inputs.extend([fact] if fact is not None else state.messages)
            with state.lock:
                state.writes += 1
        factory = {"create": mt.create, "update": mt.update, "delete": mt.delete}[self.kind]
        op = factory(f"mem0.{self.kind}", inputs=inputs, store_id=store)
        op.__enter__()
        return _Write(op, self.kind, self.memory_id)

    def finish(self, result: Any) -> Any:
        write = self.write
        if write is None or not write.op.is_traced:
            return result
        op = write.op
        state = _state.get()
        sources = state.sources if state is not None and state.method == "add" else None
        store = state.store_id if state is not None else None
        if self.kind == "create":
            memory_id = str(result) if result is not None else None
            if memory_id is None:
                return result
            data = self.bound.arguments.get("data")
            op.output(_record(memory_id, 1, data, sources))
            self.tel.versions.set(memory_id, 1)
            if store:
                self.tel.stores.set(memory_id, store)
            return result
        memory_id = self.memory_id
        if memory_id is None:
            return result
        old = record_ref(memory_id, self.version)
        if write.old_seen and not self.tel.mt.registry.lookup(old):
            op.input(
                Variable.from_ref(
                    old, write.old_text, category=Category.MEMORY, traceparent=write.old_traceparent
                )
            )
        else:
            op.input(old)
        if self.kind == "update":
            data = self.bound.arguments.get("data")
            text = data if data is not None else write.old_text
            if write.source is not None:
                sources = [write.source.ref]
            op.output(_record(memory_id, self.version + 1, text, sources))
        else:
            op.output(_record(memory_id, self.version, None).tombstone())
        self.tel.versions.set(memory_id, self.version + 1)
        return result

    def end(self, exc: BaseException | None) -> None:
        try:
            if self.owns_op and self.write is not None:
                close_op(self.write.op, exc)
        finally:
            if self._token is not None:
                _write.reset(self._token)
                self._token = None


# ---------------------------------------------------------------------------------------------
# The pipeline phases, seen through the instance's LLM and vector store
# ---------------------------------------------------------------------------------------------


def _phase_name(state: _State, index: int) -> str | None:
    if state.pipeline == ADDITIVE:
        return "mem0.additive_extraction" if index == 0 else None
    if state.pipeline == PROCEDURAL:
        return "mem0.procedural_extraction" if index == 0 else None
    return ("mem0.fact_extraction", "mem0.update_decision")[index] if index < 2 else None


def _tracing_phase(tel: Mem0Telemetry) -> _State | None:
    """The ``add`` whose phases are being traced, unless inside a record write."""
    if not tel.active or is_tracing_suppressed() or _write.get() is not None:
        return None
    state = _state.get()
    return state if state is not None and state.method == "add" else None


class _PhaseCall(Call):
    """One op around a component call inside ``add``."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__(args, kwargs)
        self.op: Op | None = None

    def enter(self, op: Op) -> Op:
        self.op = op
        op.__enter__()
        return op

    def end(self, exc: BaseException | None) -> None:
        close_op(self.op, exc)


class _LlmCall(_PhaseCall):
    def __init__(
        self, tel: Mem0Telemetry, state: _State, name: str, args: Any, kwargs: Any
    ) -> None:
        super().__init__(args, kwargs)
        self.tel, self.state, self.name = tel, state, name

    def start(self) -> None:
        state = self.state
        if self.name == "mem0.update_decision":
            inputs: list[Variable] = [*state.facts, *state.existing.values()]
        elif self.name == "mem0.additive_extraction":
            inputs = [*state.messages, *state.existing.values()]
        else:
            inputs = list(state.messages)
        messages = self.kwargs.get("messages", self.args[0] if self.args else None)
        prompt = None
        if isinstance(messages, list):
            system = next(
                (
                    m.get("content")
                    for m in messages
                    if isinstance(m, dict) and m.get("role") == "system"
                ),
                None,
            )
            if isinstance(system, str) and system:
                prompt = Variable(
                    content_id(f"prompt:{self.name}", system), 1, system, Category.PROMPT
                )
        self.enter(
            self.tel.mt.extract(self.name, inputs=inputs, prompt=prompt, store_id=state.store_id)
        )

    def finish(self, result: Any) -> Any:
        op, state = self.op, self.state
        if op is None or not op.is_traced:
            return result
        sources = state.sources
        base = f"{span_hex(op)}"
        if self.name == "mem0.procedural_extraction":
            texts = [result] if isinstance(result, str) and result.strip() else []
        else:
            parsed = parse_json_reply(result)
            key = "facts" if self.name == "mem0.fact_extraction" else "memory"
            items = parsed.get(key) if isinstance(parsed, dict) else None
            items = items if isinstance(items, list) else []
            if self.name == "mem0.update_decision":
                self._decisions(op, items, base, sources)
                return result
            found = [(item.get("text") if isinstance(item, dict) else item) for item in items]
            texts = [t for t in found if isinstance(t, str) and t]
        facts = [
            op.output(
                Variable(f"fact:{base}:{i}", 1, text, Category.MEMORY, {"source_refs": sources})
            )
            for i, text in enumerate(texts, 1)
        ]
        with state.lock:
            state.facts.extend(facts)
        return result

    def _decisions(self, op: Op, items: list[Any], base: str, sources: list[str]) -> None:
        state = self.state
        ids = list(state.existing.keys())  # mem0 numbers the old memories in this order
        for i, item in enumerate(items, 1):
            if not isinstance(item, dict):
                continue
            event = str(item.get("event") or "").upper()
            raw = item.get("text")
            text = raw if isinstance(raw, str) else ""
            index = str(item.get("id"))
            memory_id = ids[int(index)] if index.isdigit() and int(index) < len(ids) else None
            target = state.existing.get(memory_id) if memory_id else None
            value = {
                "event": event,
                # Only ADD and UPDATE carry content forward: a DELETE or NONE that drops a new
                # fact is where the fact was lost.
                "text": text if event in ("ADD", "UPDATE") else "",
                "memory": target.ref if target is not None else None,
            }
            variable = op.output(
                Variable(f"decision:{base}:{i}", 1, value, Category.OTHER, {"source_refs": sources})
            )
            with state.lock:
                state.decisions.append(_Decision(event, text, memory_id, variable))


class _SearchExistingCall(_PhaseCall):
    def __init__(self, tel: Mem0Telemetry, state: _State, args: Any, kwargs: Any) -> None:
        super().__init__(args, kwargs)
        self.tel, self.state = tel, state

    def start(self) -> None:
        state = self.state
        query = self.kwargs.get("query", self.args[0] if self.args else None)
        fact = state.fact_for(query)
        inputs: list[Variable] = [fact] if fact is not None else list(state.messages)
        self.enter(
            self.tel.mt.retrieve(
                "mem0.search_existing",
                inputs=inputs,
                stage=Stage.CONSTRUCTION,
                store_id=state.store_id,
            )
        )

    def finish(self, result: Any) -> Any:
        op, state = self.op, self.state
        if op is None or not op.is_traced or not isinstance(result, (list, tuple)):
            return result
        candidates: list[dict[str, Any]] = []
        found: list[Variable] = []
        for hit in result:
            payload = getattr(hit, "payload", None)
            payload = payload if isinstance(payload, dict) else {}
            variable = self.tel.hit_variable(
                state.instance,
                getattr(hit, "id", None),
                payload.get("data"),
                payload,
                state.store_id,
            )
            if variable is None:
                continue
            found.append(variable)
            candidates.append({"ref": variable.ref, "text": variable.value})
        op.add_inputs(found)
        with state.lock:
            for variable in found:
                state.existing.setdefault(variable.id.removeprefix("mem0:"), variable)
        op.output(Variable(f"candidates:{span_hex(op)}", 1, candidates, Category.CANDIDATES))
        return result


def _dedup(tel: Mem0Telemetry, state: _State, kept_texts: list[Any]) -> Variable | None:
    """The additive pipeline's hash dedup as a construction ``filter`` op: which facts are new."""
    state.deduplicated = True
    with tel.mt.filter(
        "mem0.dedup", inputs=state.facts, stage=Stage.CONSTRUCTION, store_id=state.store_id
    ) as op:
        if not op.is_traced:
            return None
        kept = [f for f in state.facts if f.value in kept_texts]
        return op.output(
            Variable(
                f"kept:{span_hex(op)}",
                1,
                [{"ref": f.ref, "text": f.value} for f in kept],
                Category.OTHER,
                {"source_refs": state.sources},
            )
        )


class _BatchWriteCall(_PhaseCall):
    """The additive pipeline's batch insert: the dedup, then one ``create`` op."""

    def __init__(self, tel: Mem0Telemetry, state: _State, bound: Any) -> None:
        super().__init__(bound.args, bound.kwargs)
        self.tel, self.state, self.bound = tel, state, bound

    def start(self) -> None:
        state = self.state
        payloads = self.bound.arguments.get("payloads")
        payloads = payloads if isinstance(payloads, list) else []
        kept = (
            _dedup(self.tel, state, [p.get("data") for p in payloads if isinstance(p, dict)])
            if not state.deduplicated
            else None
        )
        inputs: list[Variable] = [kept] if kept is not None else list(state.facts)
        op = self.enter(
            self.tel.mt.create("mem0.batch_write", inputs=inputs, store_id=state.store_id)
        )
        if op.traceparent is not None:
            for payload in payloads:
                if isinstance(payload, dict):
                    payload[A.METADATA_TRACEPARENT] = op.traceparent
                    payload[A.METADATA_VERSION] = 1

    def finish(self, result: Any) -> Any:
        op, state = self.op, self.state
        if op is None or not op.is_traced:
            return result
        args = self.bound.arguments
        ids, payloads = args.get("ids") or [], args.get("payloads") or []
        for memory_id, payload in zip(ids, payloads, strict=False):
            if memory_id is None or not isinstance(payload, dict):
                continue
            op.output(_record(str(memory_id), 1, payload.get("data"), state.sources))
            self.tel.versions.set(str(memory_id), 1)
            if state.store_id:
                self.tel.stores.set(str(memory_id), state.store_id)
        op.set_attribute(A.GEN_AI_MEMORY_RECORD_COUNT, len(ids))
        return result


class _LlmProxy(wrapt.ObjectProxy[Any]):
    """mem0's LLM, unchanged except that calls inside ``add`` are phase ops."""

    def __init__(self, wrapped: Any, tel: Mem0Telemetry) -> None:
        super().__init__(wrapped)
        self._self_tel = tel

    def generate_response(self, *args: Any, **kwargs: Any) -> Any:
        tel: Mem0Telemetry = self._self_tel
        method = self.__wrapped__.generate_response
        state = _tracing_phase(tel)
        if state is None:
            return method(*args, **kwargs)

        def factory(wrapped: Any, instance: Any, a: Any, kw: Any) -> Call | None:
            # mem0's extraction and decision calls ask for JSON; other calls made during an add
            # (image descriptions with enable_vision) are not phases. Procedural memory is plain text.
            response_format = kw.get("response_format")
            wants_json = (
                isinstance(response_format, dict) and response_format.get("type") == "json_object"
            )
            if wants_json == (state.pipeline == PROCEDURAL):
                return None
            with state.lock:
                index = state.llm_calls
                state.llm_calls += 1
            name = _phase_name(state, index)
            return None if name is None else _LlmCall(tel, state, name, a, kw)

        return run_sync("mem0.llm", factory, method, self.__wrapped__, args, kwargs)


class _VectorStoreProxy(wrapt.ObjectProxy[Any]):
    """mem0's vector store, unchanged except inside ``add`` and record writes."""

    def __init__(self, wrapped: Any, tel: Mem0Telemetry) -> None:
        super().__init__(wrapped)
        self._self_tel = tel

    def search(self, *args: Any, **kwargs: Any) -> Any:
        tel: Mem0Telemetry = self._self_tel
        method = self.__wrapped__.search
        state = _tracing_phase(tel)
        if state is None:
            return method(*args, **kwargs)
        return run_sync(
            "mem0.search_existing",
            lambda w, i, a, kw: _SearchExistingCall(tel, state, a, kw),
            method,
            self.__wrapped__,
            args,
            kwargs,
        )

    def insert(self, *args: Any, **kwargs: Any) -> Any:
        tel: Mem0Telemetry = self._self_tel
        method = self.__wrapped__.insert
        state = _tracing_phase(tel)
        if state is None:
            return method(*args, **kwargs)

        def factory(wrapped: Any, instance: Any, a: Any, kw: Any) -> Call | None:
            bound = bind(wrapped, a, kw)
            return None if bound is None else _BatchWriteCall(tel, state, bound)

        return run_sync("mem0.batch_write", factory, method, self.__wrapped__, args, kwargs)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__.get(*args, **kwargs)
        write = _write.get()
        if write is not None and self._self_tel.active:
            try:
                vector_id = kwargs.get("vector_id", args[0] if args else None)
                if vector_id is not None and str(vector_id) == write.memory_id:
                    write.observe(result)
            except Exception:
                internal_error("mem0.vector_store.get")
        return result


# ---------------------------------------------------------------------------------------------
# mem0 1.x thread pools
# ---------------------------------------------------------------------------------------------


class ContextThreadPoolExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool whose tasks run in a copy of the submitter's context (trace and op)."""

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)


class _FuturesShim(types.ModuleType):
    """``concurrent.futures`` as mem0 sees it: everything the same but the thread pool."""

    ThreadPoolExecutor = ContextThreadPoolExecutor

    def __getattr__(self, name: str) -> Any:
        return getattr(concurrent.futures, name)


def patch_thread_pools(module: Any) -> Callable[[], None] | None:
    """Give ``module`` (``mem0.memory.main``) a context-carrying ``concurrent``; returns the undo."""
    import concurrent as real

    if getattr(module, "concurrent", None) is not real:
        return None
    shim = types.SimpleNamespace(futures=_FuturesShim("concurrent.futures"))
    module.concurrent = shim

    def undo() -> None:
        if getattr(module, "concurrent", None) is shim:
            module.concurrent = real

    return undo


__all__ = [
    "ADDITIVE",
    "CLASSIC",
    "MODULE",
    "TARGETS",
    "ContextThreadPoolExecutor",
    "Mem0Telemetry",
    "parse_json_reply",
    "patch_thread_pools",
    "pipeline_of",
    "record_ref",
]

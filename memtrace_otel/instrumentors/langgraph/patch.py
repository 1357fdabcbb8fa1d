"""LangGraph's long-term memory store (``BaseStore``) as create/update/delete/retrieve ops.

Patched (table :data:`TARGETS`): ``BaseStore.put/get/search/delete`` and their ``a*`` twins, the
async methods ``AsyncBatchedBaseStore`` overrides, and ``InMemoryStore.batch/abatch`` for direct
batch calls (one op per ``PutOp``/``GetOp``/``SearchOp``; the public methods go through ``batch``
too, and are recorded once).

- A ``put`` is a ``create`` op (``langgraph.store.put``) when the key is new, an ``update`` op
  when it exists; it reads the value as an input variable (category ``message``:
  ``message_ref(value, store_id=<namespace>, role="put")``) and, for an update, the previous
  version; it writes ``langgraph:<namespace>/<key>@<version>``.
- ``delete`` (a ``put`` of ``None``) is a ``delete`` op writing the tombstone.
- ``get`` and ``search`` are ``retrieve`` ops (``langgraph.store.get``/``.search``) reading the
  query and the items found, writing a candidates variable; later LLM calls in the same trace
  can name the items their prompt used.

A graph run (``Pregel.invoke``/``ainvoke``, and ``stream``/``astream`` the same way) shares one
:class:`~memtrace_otel.instrumentors._common.AppRun` among its nodes: its user turns, and its
answer, noted in the caller's context when the run returns (for ``last_answer()``). A streamed
run is entered around each step of the iterator it returns, which is passed through item by
item (nothing buffered or changed; ``close`` on an early ``break`` reaches the graph).

The store keeps no history, so versions are counted in this process: a key first seen existing
is taken to be at version 1. Whether a key exists is looked up once (a ``GetOp``, untraced)
and then cached. The memory store id is the namespace joined with ``/`` (for ``search``, the
namespace prefix).
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from typing import Any

import wrapt
from opentelemetry import trace

from memtrace_otel._internal import internal_error
from memtrace_otel.instrumentation import MemTracer, Op, Variable, suppress_tracing
from memtrace_otel.instrumentors._common import (
    AppRun,
    Call,
    LlmScope,
    Retrieved,
    Target,
    VersionCache,
    bind,
    bind_store,
    candidate_json,
    candidates_json,
    claim_removal,
    close_op,
    content_id,
    current_app_run,
    current_llm_scope,
    enter_app_run,
    enter_llm_scope,
    leaf_text,
    leave_app_run,
    leave_llm_scope,
    message_ref,
    producers_of,
    remember_retrieval,
    set_case_id,
    span_hex,
    string_leaves,
    turn_texts,
    wrapper_for,
)
from memtrace_otel.semconv import Category, Stage
from memtrace_otel.semconv import attributes as A

SYSTEM = "langgraph"
BASE = "langgraph.store.base"
BATCHED = "langgraph.store.base.batch"
MEMORY = "langgraph.store.memory"
RUNNER = "langgraph.pregel._runner"
PREGEL = "langgraph.pregel.main"
LANGMEM = "langmem.knowledge.extraction"
MANAGER_UNIT = "langmem.manager"
"""The unit of work of one LangMem memory manager call."""

TARGETS: tuple[Target, ...] = (
    *(Target(BASE, f"BaseStore.{m}", m) for m in ("put", "get", "search", "delete")),
    *(Target(BASE, f"BaseStore.a{m}", m, True) for m in ("put", "get", "search", "delete")),
    *(
        Target(BATCHED, f"AsyncBatchedBaseStore.a{m}", m, True)
        for m in ("put", "get", "search", "delete")
    ),
    Target(MEMORY, "InMemoryStore.batch", "batch"),
    Target(MEMORY, "InMemoryStore.abatch", "batch", True),
    # A node run (one task attempt loop): the unit whose LLM calls are classified at its end.
    Target(RUNNER, "run_with_retry", "node"),
    Target(RUNNER, "arun_with_retry", "node", True),
    # LangMem's memory managers: a unit of work of their own (they run in the background too).
    *(
        Target(LANGMEM, f"{c}.{m}", "manager", m == "ainvoke")
        for c in ("MemoryStoreManager", "MemoryManager")
        for m in ("invoke", "ainvoke")
    ),
    # A graph run: its user turns, and its answer noted in the caller's context.
    Target(PREGEL, "Pregel.invoke", "run"),
    Target(PREGEL, "Pregel.ainvoke", "run", True),
    # The same run, streamed: the call returns a (async) generator at once, wrapped as it is.
    Target(PREGEL, "Pregel.stream", "stream"),
    Target(PREGEL, "Pregel.astream", "stream"),
)
"""Every patched method: ``(module, Class.method, handler, is_async)``."""

_in_store_call: ContextVar[bool] = ContextVar("memtrace_langgraph_call", default=False)


def record_id(namespace: Sequence[str], key: str) -> str:
    """The variable id of a store item.

    >>> record_id(("memories", "dana"), "ana")
    'langgraph:memories/dana/ana'
    """
    return f"langgraph:{'/'.join(namespace)}/{key}"


def store_id_of(namespace: Sequence[str]) -> str:
    """The memory store id of a namespace (or namespace prefix)."""
    return "/".join(namespace)


class LangGraphTelemetry:
    """The tracer and version caches of one ``LangGraphInstrumentor.instrument()``."""

    def __init__(self, mt: MemTracer) -> None:
        self.mt = mt
        self.active = True
        self._versions: weakref.WeakKeyDictionary[Any, VersionCache] = weakref.WeakKeyDictionary()
        self.stores = RunStores()

    def versions(self, store: Any) -> VersionCache:
        """The version cache of one store instance (items of different stores never mix)."""
        try:
            cache = self._versions.get(store)
            if cache is None:
                cache = self._versions[store] = VersionCache()
            return cache
        except TypeError:  # not weak-referenceable: one throw-away cache
            return VersionCache()

    def wrapper(self, target: Target) -> Callable[..., Any]:
        """The ``wrapt`` wrapper of one table entry."""
        if target.handler == "batch":
            return wrapper_for(target, self._batch_factory(target.is_async))
        if target.handler == "node":
            return wrapper_for(target, self._node_factory)
        if target.handler == "manager":
            return wrapper_for(target, self._manager_factory)
        if target.handler == "run":
            return wrapper_for(target, self._run_factory)
        if target.handler == "stream":
            return wrapper_for(target, self._stream_factory)
        return wrapper_for(target, self._public_factory(target.handler, target.is_async))

    def close(self) -> None:
        """Stop tracing (wrappers still in place, e.g. captured bound methods, pass through)."""
        self.active = False

    def _public_factory(self, method: str, is_async: bool) -> Callable[..., Call | None]:
        def factory(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
            if not self.active or _in_store_call.get():
                return None
            bound = bind(wrapped, args, kwargs)
            if bound is None:
                return None
            a = bound.arguments
            if method == "search":
                request = _Request(
                    "search", tuple(a.get("namespace_prefix") or ()), query=a.get("query")
                )
            elif method == "put":
                request = _Request(
                    "put", tuple(a.get("namespace") or ()), a.get("key"), a.get("value")
                )
            elif method == "delete":
                request = _Request("put", tuple(a.get("namespace") or ()), a.get("key"), None)
            else:
                request = _Request("get", tuple(a.get("namespace") or ()), a.get("key"))
            return _PublicCall(self, instance, bound.args, bound.kwargs, [request], is_async)

        return factory

    def _node_factory(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        if not self.active:
            return None
        task = args[0] if args else kwargs.get("task")
        return _NodeCall(
            args, kwargs, "langgraph.node", turn_texts(getattr(task, "input", None)), task
        )

    def _manager_factory(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        scope = current_llm_scope()
        if not self.active or (scope is not None and scope.unit == MANAGER_UNIT):
            return None  # the store manager's own memory manager: one unit
        bound = bind(wrapped, args, kwargs)
        given = bound.arguments.get("input") if bound else None
        return _NodeCall(args, kwargs, MANAGER_UNIT, turn_texts(given))

    def _run_factory(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        if not self.active or current_app_run() is not None:
            return None  # a subgraph: the outer run holds the turns and the answer
        bound = bind(wrapped, args, kwargs)
        a = bound.arguments if bound else {}
        return _RunCall(args, kwargs, a.get("input"), self.stores, a.get("config"))

    def _stream_factory(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
        if not self.active or current_app_run() is not None:
            return None  # invoke's own stream, or a subgraph streamed inside a run
        bound = bind(wrapped, args, kwargs)
        a = bound.arguments if bound else {}
        return _StreamCall(args, kwargs, a.get("input"), self.stores, a.get("config"))

    def _batch_factory(self, is_async: bool) -> Callable[..., Call | None]:
        def factory(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
            if not self.active or _in_store_call.get():
                return None
            bound = bind(wrapped, args, kwargs)
            if bound is None:
                return None
            ops = list(bound.arguments.get("ops") or ())
            bound.set("ops", ops)  # an iterator would be consumed by us: pass a list on
            requests = [_request_of(op) for op in ops]
            return _PublicCall(
                self, instance, bound.args, bound.kwargs, requests, is_async, batch=True
            )

        return factory


class _NodeCall(Call):
    """One node run, or one memory manager call: LLM calls made in it are classified when it
    ends (``LlmScope``)."""

    _token: object = None
    _scope: LlmScope | None = None

    def __init__(
        self, args: Any, kwargs: Any, unit: str, turns: list[str], task: Any = None
    ) -> None:
        super().__init__(args, kwargs)
        self.unit = unit
        self.turns = turns
        self.task = task  # a node's task: what it wrote to the graph state is handed on

    def start(self) -> None:
        self._token, self._scope = enter_llm_scope(self.unit, self.turns)

    def end(self, exc: BaseException | None) -> None:
        if self._scope is None:
            return
        written: list[str] | None = []  # a memory manager hands nothing to the user
        if self.task is not None:
            writes = getattr(self.task, "writes", None)
            written = string_leaves([v for _, v in writes]) if writes is not None else None
        leave_llm_scope(self._token, self._scope, written)


class RunStores:
    """The store each run configuration works in, learnt from the runs of this process.

    A graph's nodes name their store's namespace from the run's ``configurable`` values (a
    user id, as LangGraph's memory docs do), so a run whose nodes touch no store (an extraction
    that kept nothing) is bound from the start to the store its configuration goes with: the
    store earlier runs given one of its values worked in, else the namespace the earlier runs'
    namespaces make with its values in the places where theirs had their own values
    (``("notes", user_id)``). A value seen with two stores (a model name, a flag) says nothing;
    several candidate stores say nothing either.

    >>> stores = RunStores()
    >>> stores.learn([("user_id", "ana"), ("model", "m")], "notes/ana")
    >>> stores.learn([("user_id", "bo"), ("model", "m")], "notes/bo")
    >>> stores.store_of([("user_id", "ana"), ("model", "m")])
    'notes/ana'
    >>> stores.store_of([("user_id", "cy"), ("model", "m")])  # a new user: the namespace's shape
    'notes/cy'
    >>> stores.learn([("user_id", "cy")], "profiles/cy")  # two shapes: a new user's is unknown
    >>> stores.store_of([("user_id", "dan")]) is None
    True
    """

    _MAX = 65536

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], str | None] = {}  # None: seen with several stores
        self._shapes: dict[tuple[tuple[str, str], ...], None] = {}  # (literal|key, text) parts
        self._lock = threading.Lock()

    @staticmethod
    def pairs(config: Any) -> list[tuple[str, str]]:
        """The ``(key, value)`` pairs of a config's ``configurable`` (scalar values)."""
        configurable = config.get("configurable") if isinstance(config, dict) else None
        if not isinstance(configurable, dict):
            return []
        return [
            (str(k), str(v))
            for k, v in configurable.items()
            if isinstance(v, str | int) and not isinstance(v, bool) and str(v)
        ]

    def store_of(self, pairs: Sequence[tuple[str, str]]) -> str | None:
        values = dict(pairs)
        with self._lock:
            found = {self._seen.get(p) for p in pairs if p in self._seen}
            shapes = list(self._shapes)
        found.discard(None)
        if not found:  # a configuration never seen: the namespaces of the ones seen
            found = {
                "/".join(values[t] if kind == "key" else t for kind, t in shape)
                for shape in shapes
                if all(kind != "key" or t in values for kind, t in shape)
            }
        return found.pop() if len(found) == 1 else None

    def learn(self, pairs: Sequence[tuple[str, str]], store_id: str) -> None:
        keys = {value: key for key, value in pairs}
        parts = store_id.split("/")
        shape = tuple(("key", keys[p]) if p in keys else ("literal", p) for p in parts)
        with self._lock:
            if any(kind == "key" for kind, _ in shape) and len(self._shapes) < 64:
                self._shapes[shape] = None
            for pair in pairs:
                if pair not in self._seen and len(self._seen) >= self._MAX:
                    continue
                known = self._seen.get(pair, store_id)
                self._seen[pair] = store_id if known == store_id else None


class _RunCall(Call):
    """One graph run (``invoke``/``ainvoke``): an :class:`AppRun` its nodes share, bound to the
    store its configuration went with before (:class:`RunStores`), else to the first store one
    of its nodes touches."""

    def __init__(
        self,
        args: Any,
        kwargs: Any,
        graph_input: Any,
        stores: RunStores | None = None,
        config: Any = None,
    ) -> None:
        super().__init__(args, kwargs)
        self.stores = stores
        self.pairs = RunStores.pairs(config)
        presumed = stores.store_of(self.pairs) if stores is not None else None
        self.run = AppRun(turn_texts(graph_input), presumed)
        self._token: object = None

    def start(self) -> None:
        self._token = enter_app_run(self.run)

    def end(self, exc: BaseException | None) -> None:
        if self._token is not None:
            leave_app_run(self._token, self.run)
        self.learn()

    def learn(self) -> None:
        """The run's configuration goes with the store its nodes worked in."""
        try:
            if self.stores is not None and self.run.store_id:
                self.stores.learn(self.pairs, self.run.store_id)
        except Exception:
            internal_error("langgraph.run.store")


class _StreamCall(_RunCall):
    """One graph run by ``stream``/``astream``. Nothing runs until the caller iterates, so the
    run is entered around each step of the returned iterator (the graph's generator runs only
    inside ``next``), never while the caller's loop body runs; after each step the run's answer
    so far is noted in the caller's context, so the last one noted is the run's answer however
    the iteration ends (exhausted, failed, or left early and closed)."""

    def start(self) -> None:
        """Nothing: the run is entered step by step (:meth:`enter`)."""

    def finish(self, result: Any) -> Any:
        if hasattr(result, "__anext__"):
            return _AsyncRunStream(result, self)
        if hasattr(result, "__next__"):
            return _RunStream(result, self)
        return result  # not an iterator (a library change): passed on untouched

    def enter(self) -> object | None:
        """Enter the run for one step (``None``: telemetry failed, the step runs untraced)."""
        try:
            return enter_app_run(self.run)
        except Exception:
            internal_error("langgraph.stream.step")
            return None

    def leave(self, token: object | None) -> None:
        """Leave it after the step, noting the answer so far in the caller's context."""
        if token is None:
            return
        try:
            leave_app_run(token, self.run)
            self.learn()
        except Exception:
            internal_error("langgraph.stream.step")


class _RunStream(wrapt.ObjectProxy[Any]):
    """The graph's generator, passed through item by item: nothing is buffered or changed."""

    def __init__(self, stream: Any, call: _StreamCall) -> None:
        super().__init__(stream)
        self._self_call = call

    def __iter__(self) -> _RunStream:
        return self

    def _step(self, method: Callable[..., Any], *args: Any) -> Any:
        token = self._self_call.enter()
        try:
            return method(*args)
        finally:
            self._self_call.leave(token)

    def __next__(self) -> Any:
        return self._step(self.__wrapped__.__next__)

    def send(self, value: Any) -> Any:
        return self._step(self.__wrapped__.send, value)

    def throw(self, *args: Any) -> Any:
        return self._step(self.__wrapped__.throw, *args)

    def close(self) -> None:
        self._step(self.__wrapped__.close)


class _AsyncRunStream(wrapt.ObjectProxy[Any]):
    """The graph's async generator, passed through item by item."""

    def __init__(self, stream: Any, call: _StreamCall) -> None:
        super().__init__(stream)
        self._self_call = call

    def __aiter__(self) -> _AsyncRunStream:
        return self

    async def _step(self, method: Callable[..., Any], *args: Any) -> Any:
        token = self._self_call.enter()
        try:
            return await method(*args)
        finally:
            self._self_call.leave(token)

    async def __anext__(self) -> Any:
        return await self._step(self.__wrapped__.__anext__)

    async def asend(self, value: Any) -> Any:
        return await self._step(self.__wrapped__.asend, value)

    async def athrow(self, *args: Any) -> Any:
        return await self._step(self.__wrapped__.athrow, *args)

    async def aclose(self) -> None:
        await self._step(self.__wrapped__.aclose)


class _Request:
    """One store operation: ``put`` (value ``None``: delete), ``get`` or ``search``."""

    __slots__ = ("key", "kind", "namespace", "query", "value")

    def __init__(
        self,
        kind: str,
        namespace: tuple[str, ...],
        key: Any = None,
        value: Any = None,
        query: Any = None,
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.key = None if key is None else str(key)
        self.value = value
        self.query = query


def _request_of(op: Any) -> _Request | None:
    name = type(op).__name__
    if name == "PutOp":
        return _Request("put", tuple(op.namespace), op.key, op.value)
    if name == "GetOp":
        return _Request("get", tuple(op.namespace), op.key)
    if name == "SearchOp":
        return _Request("search", tuple(op.namespace_prefix), query=op.query)
    return None  # ListNamespacesOp and unknown ops: not memory reads or writes


class _PublicCall(Call):
    """One public method or one ``batch``: one op per request, each in its own context."""

    def __init__(
        self,
        tel: LangGraphTelemetry,
        store: Any,
        args: Any,
        kwargs: Any,
        requests: list[_Request | None],
        is_async: bool,
        *,
        batch: bool = False,
    ) -> None:
        super().__init__(args, kwargs)
        self.tel = tel
        self.store = store
        self.requests = requests
        self.is_async = is_async
        self.batch = batch
        self.versions = tel.versions(store)
        self.steps: list[_Step | None] = []
        self._token: Token[bool] | None = None

    # -- existence of the keys written, looked up once ------------------------------------------
    def _unknown(self) -> list[_Request]:
        return [
            r
            for r in self.requests
            if r is not None
            and r.kind == "put"
            and r.key is not None
            and self.versions.get(record_id(r.namespace, r.key)) is None
        ]

    def _learn(self, unknown: list[_Request], items: list[Any]) -> None:
        for request, item in zip(unknown, items, strict=False):
            if item is not None:
                # An item written before we saw it: its version is taken to be 1.
                self.versions.set(record_id(request.namespace, request.key or ""), 1)

    def start(self) -> None:
        unknown = self._unknown()
        if unknown:
            from langgraph.store.base import GetOp

            with suppress_tracing():
                items = self.store.batch(
                    [GetOp(r.namespace, r.key or "", refresh_ttl=False) for r in unknown]
                )
            self._learn(unknown, items)
        self._open()

    async def astart(self) -> None:
        unknown = self._unknown()
        if unknown:
            from langgraph.store.base import GetOp

            with suppress_tracing():
                items = await self.store.abatch(
                    [GetOp(r.namespace, r.key or "", refresh_ttl=False) for r in unknown]
                )
            self._learn(unknown, items)
        self._open()

    def _open(self) -> None:
        self._token = _in_store_call.set(True)
        for request in self.requests:
            if request is None:
                self.steps.append(None)
                continue
            step = _Step(self.tel.mt, self.versions, request)
            # Each op is entered in a context of its own: the ops of a batch are siblings.
            step.ctx.run(step.open)
            self.steps.append(step)

    def finish(self, result: Any) -> Any:
        results = result if self.batch else [result]
        if not isinstance(results, list) or len(results) != len(self.steps):
            return result  # an unexpected shape: returned unchanged, nothing recorded
        pairs = list(zip(self.steps, results, strict=True))
        # Reads first: stores answer a batch's reads from the state before its writes.
        pairs.sort(key=lambda pair: pair[0] is not None and pair[0].request.kind == "put")
        for step, item in pairs:
            if step is None or step.op is None:
                continue
            retrieved = step.ctx.run(step.finish, item)
            if retrieved is not None:
                # In the caller's context, where the LLM call that may use them will run.
                remember_retrieval(
                    step.op, store_id_of(step.request.namespace), step.case_id, retrieved
                )
        return result

    def end(self, exc: BaseException | None) -> None:
        try:
            for step in self.steps:
                if step is not None:
                    step.ctx.run(close_op, step.op, exc)
        finally:
            if self._token is not None:
                _in_store_call.reset(self._token)
                self._token = None


class _Step:
    """The op of one request."""

    def __init__(self, mt: MemTracer, versions: VersionCache, request: _Request) -> None:
        self.mt = mt
        self.versions = versions
        self.request = request
        self.ctx = contextvars.copy_context()
        self.op: Op | None = None
        self.version = 0
        self.case_id: str | None = None
        self.sources: list[str] = []
        self.construction = False

    def open(self) -> None:
        request, mt = self.request, self.mt
        store = store_id_of(request.namespace)
        bind_store(store)  # the node (and run) works in this store: its LLM calls join it
        if request.kind == "put":
            rid = record_id(request.namespace, request.key or "")
            self.version = self.versions.get(rid) or 0
            inputs: list[Variable | str] = []
            if self.version:
                inputs.append(f"{rid}@{self.version}")
            if request.value is None:
                trace_id = trace.get_current_span().get_span_context().trace_id
                decision = claim_removal(trace_id, request.key or "", store)
                if decision is not None:
                    inputs.append(decision)
                op = mt.delete("langgraph.store.delete", inputs=inputs, store_id=store)
            else:
                # The LLM outputs the value holds (by digest), else the caller gave it.
                sources = producers_of(request.value, store, "update" if self.version else "create")
                if not sources:
                    ref = message_ref(request.value, store_id=store, role="put")
                    sources = [Variable.from_ref(ref, request.value, category=Category.MESSAGE)]
                self.sources = [s.ref if isinstance(s, Variable) else s for s in sources]
                inputs.extend(sources)
                factory = mt.update if self.version else mt.create
                op = factory("langgraph.store.put", inputs=inputs, store_id=store)
        else:
            inputs = []
            if isinstance(request.query, str) and request.query:
                inputs.append(
                    Variable(
                        content_id("query", store, request.query), 1, request.query, Category.QUERY
                    )
                )
            scope = current_llm_scope()
            # A memory manager's searches read the existing memories for its decisions (memory
            # construction, as mem0's search_existing): they do not serve the user's question.
            self.construction = scope is not None and scope.unit == MANAGER_UNIT
            op = mt.retrieve(
                f"langgraph.store.{request.kind}",
                inputs=inputs,
                store_id=store,
                stage=Stage.CONSTRUCTION if self.construction else None,
            )
        self.op = op
        op.__enter__()
        if request.kind != "put" and not self.construction:
            self.case_id = set_case_id(op)

    def finish(self, result: Any) -> list[Retrieved] | None:
        """Record the outputs; returns what a retrieve op returned (``None`` for writes)."""
        op, request = self.op, self.request
        if op is None or not op.is_traced:
            return None
        if request.kind == "put":
            rid = record_id(request.namespace, request.key or "")
            if request.value is None:
                if self.version:
                    op.output(Variable(rid, self.version, None, Category.MEMORY).tombstone())
                    self.versions.set(rid, self.version + 1)
                return None
            meta = {"source_refs": self.sources}
            op.output(Variable(rid, self.version + 1, request.value, Category.MEMORY, meta))
            self.versions.set(rid, self.version + 1)
            return None
        items = result if isinstance(result, list) else [result] if result is not None else []
        entries: list[str] = []
        records: list[tuple[str, Any, str | None]] = []
        retrieved: list[Retrieved] = []
        for item in items:
            namespace, key = getattr(item, "namespace", None), getattr(item, "key", None)
            if namespace is None or key is None:
                continue
            rid = record_id(tuple(namespace), str(key))
            version = self.versions.get(rid)
            if version is None:
                version = 1
                self.versions.set(rid, 1)
            value = getattr(item, "value", None)
            leaves = string_leaves(value)
            # One field per line when there are several (the prompt may show only one of them).
            text = leaf_text(value) if len(leaves) < 2 else "\n".join(leaves)
            ref = f"{rid}@{version}"
            records.append((ref, value, None))
            entries.append(candidate_json(ref, text, getattr(item, "score", None)))
            retrieved.append(Retrieved(ref, text))
        op.add_records(records)
        op.set_attribute(A.GEN_AI_MEMORY_RECORD_COUNT, len(entries))
        candidates = candidates_json(entries)
        op.output(Variable(f"candidates:{span_hex(op)}", 1, candidates, Category.CANDIDATES))
        return retrieved


__all__ = ["SYSTEM", "TARGETS", "LangGraphTelemetry", "record_id", "store_id_of"]

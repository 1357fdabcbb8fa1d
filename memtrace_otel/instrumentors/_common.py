"""What every auto-instrumentor shares: the wrapping table, the guard rails, and the trace context.

- **Tables.** An instrumentor lists its :class:`Target` s (module, ``Class.method``, handler). The
  target module is never imported here: :func:`wrap_targets` registers a post-import hook, so the
  patch happens when the application imports the library (at once if it already has), and
  :func:`unwrap_targets` restores every patched attribute.
- **Guard rails** (:func:`run_sync`, :func:`run_async`): if building the telemetry of a call
  fails, the call runs untraced; the user's exception is recorded on the op and re-raised
  unchanged; if handling the result fails, that is logged and the result is returned.
- **Trace context.** Retrieve ops remember what they returned (:func:`remember_retrieval`) so a
  later LLM call in the same trace (or, without a parent span, the same execution context) can
  name the memory records that appear in its prompt; prompt templates the application declares
  (:func:`declare_prompt`) are matched the same way. The case id of question-serving ops comes
  from the ``memtrace.case.id`` baggage entry, else from the trace id.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import inspect
import json
import logging
import math
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import wrapt
from opentelemetry import baggage, trace
from packaging.requirements import InvalidRequirement, Requirement

from memtrace_otel._internal import (
    BoundedCache,
    internal_error,
    on_fork_in_child,
    reinit_after_fork,
)
from memtrace_otel._settings import non_negative_int, resolve
from memtrace_otel.instrumentation import (
    MemTracer,
    Op,
    Variable,
    canonical_value,
    digest,
    is_tracing_suppressed,
    note_answer,
)
from memtrace_otel.semconv import Category
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv.env import ENV_MEMTRACE_RETRIEVAL_MEMORY_BYTES

logger = logging.getLogger("memtrace_otel.instrumentors")

# ---------------------------------------------------------------------------------------------
# Instrumentor set-up
# ---------------------------------------------------------------------------------------------


def make_tracer(system: str | None, kwargs: dict[str, Any]) -> MemTracer:
    """The MemTracer of an instrumentor, from the ``instrument(**kwargs)`` options.

    Options: ``tracer_provider``, ``capture`` (a :class:`CaptureConfig`; default: resolved from
    the environment, content off), ``registry`` (a :class:`WriterRegistry`).

    Raises:
        ValueError: an option of the wrong type (a configuration error, raised at once rather
            than silently falling back to the defaults).
    """
    return MemTracer(
        tracer_provider=kwargs.get("tracer_provider"),
        system=system,
        capture=kwargs.get("capture"),
        registry=kwargs.get("registry"),
    )


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, read from its metadata (no import)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def supported_version(instruments: Collection[str], instrumentor: str) -> str | None:
    """The installed version of the first requirement if it satisfies it, else ``None``.

    A missing library is normal (debug log); an installed version outside the range gets one
    warning, and the caller patches nothing.
    """
    try:
        requirement = Requirement(next(iter(instruments)))
    except (InvalidRequirement, StopIteration):
        logger.warning(
            "%s: invalid requirement %r; nothing instrumented", instrumentor, instruments
        )
        return None
    version = installed_version(requirement.name)
    if version is None:
        logger.debug(
            "%s: %s is not installed; nothing instrumented", instrumentor, requirement.name
        )
        return None
    if not requirement.specifier.contains(version, prereleases=True):
        logger.warning(
            "%s supports %s but %s %s is installed; nothing instrumented",
            instrumentor,
            requirement,
            requirement.name,
            version,
        )
        return None
    return version


# ---------------------------------------------------------------------------------------------
# The declarative wrapping table
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One patched method: ``module`` is imported by the application, never by us."""

    module: str
    name: str
    """``Class.method`` inside ``module``."""
    handler: str
    """Key of the handler in the instrumentor's handler map."""
    is_async: bool = False


WrapperFactory = Callable[[Target], Callable[..., Any]]


class Patcher:
    """Applies a table of targets when their modules are imported, and undoes it."""

    def __init__(
        self,
        targets: Sequence[Target],
        factory: WrapperFactory,
        module_hooks: dict[str, Callable[[Any], Callable[[], None] | None]] | None = None,
    ) -> None:
        self.targets = tuple(targets)
        self._factory = factory
        self._module_hooks = dict(module_hooks or {})
        self._active = False
        self._patched: list[tuple[object, str, Any]] = []
        self._undos: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def apply(self) -> None:
        """Patch every target now or when its module is first imported."""
        self._active = True
        for module in dict.fromkeys([*(t.module for t in self.targets), *self._module_hooks]):
            wrapt.register_post_import_hook(self._on_import, module)

    def _on_import(self, module: Any) -> None:
        if not self._active:
            return  # hooks cannot be unregistered: a stale one does nothing
        hook = self._module_hooks.get(module.__name__)
        if hook is not None:
            try:
                undo = hook(module)
            except Exception:
                undo = None
                internal_error(f"patch {module.__name__}")
            if undo is not None:
                with self._lock:
                    self._undos.append(undo)
        for target in self.targets:
            if target.module != module.__name__:
                continue
            try:
                self._patch(module, target)
            except Exception:
                internal_error(f"patch {target.module}:{target.name}")

    def _patch(self, module: Any, target: Target) -> None:
        owner: Any = module
        *path, attribute = target.name.split(".")
        for part in path:
            owner = getattr(owner, part, None)
            if owner is None:
                return  # not in this version of the library
        original = (
            owner.__dict__.get(attribute)
            if isinstance(owner, type)
            else getattr(owner, attribute, None)
        )
        if original is None or _find_ours(original) is not None:
            return  # absent here, or already ours
        if isinstance(original, wrapt.FunctionWrapper):
            # Another instrumentation (e.g. the upstream OpenAI one) wrapped it first: go
            # beneath it, next to the library, so its span is open while ours runs, whatever
            # the order the instrumentors were enabled in.
            parent: Any = original
            while isinstance(parent.__wrapped__, wrapt.FunctionWrapper):
                parent = parent.__wrapped__
            wrapper: Any = wrapt.FunctionWrapper(parent.__wrapped__, self._factory(target))
            parent.__wrapped__ = wrapper
        else:
            wrapper = wrapt.FunctionWrapper(original, self._factory(target))
            setattr(owner, attribute, wrapper)
        _ours[id(wrapper)] = wrapper
        with self._lock:
            self._patched.append((owner, attribute, wrapper))

    def undo(self) -> None:
        """Restore every patched attribute (taking our wrapper out from under others' too)."""
        self._active = False
        with self._lock:
            patched, self._patched = self._patched, []
            undos, self._undos = self._undos, []
        for undo in reversed(undos):
            undo()
        for owner, attribute, wrapper in reversed(patched):
            _ours.pop(id(wrapper), None)
            current: Any = (
                owner.__dict__.get(attribute)
                if isinstance(owner, type)
                else getattr(owner, attribute, None)
            )
            if current is wrapper:
                setattr(owner, attribute, wrapper.__wrapped__)
                continue
            parent = current  # ours is beneath other wrappers: take it out of the chain
            while isinstance(parent, wrapt.FunctionWrapper):
                inner: Any = getattr(parent, "__wrapped__", None)
                if inner is wrapper:
                    parent.__wrapped__ = wrapper.__wrapped__
                    break
                parent = inner


_ours: dict[int, Any] = {}
"""Our live wrappers by id (they stay referenced here, so an id is never reused meanwhile)."""


def _find_ours(attribute: Any) -> Any:
    """Our wrapper in the chain of wrappers at ``attribute``, if any."""
    node = attribute
    while isinstance(node, wrapt.FunctionWrapper):
        if _ours.get(id(node)) is node:
            return node
        node = node.__wrapped__
    return None


# ---------------------------------------------------------------------------------------------
# The three guard rails
# ---------------------------------------------------------------------------------------------


class Call:
    """The telemetry of one wrapped call.

    ``start()`` runs before the call (it may replace ``args``/``kwargs``, e.g. to put the
    writer's ``traceparent`` into a record's metadata), ``finish(result)`` after it (it may wrap a
    stream and set ``deferred`` to end the op later), ``end(exc)`` always, last.
    """

    deferred = False

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.args = args
        self.kwargs = kwargs

    def start(self) -> None:
        """Open the op(s); called before the wrapped call."""

    async def astart(self) -> None:
        """:meth:`start` for coroutine methods (override to await a look-up first)."""
        self.start()

    def invoke(self, wrapped: Callable[..., Any]) -> Any:
        """Make the wrapped call (override to run it in another context)."""
        return wrapped(*self.args, **self.kwargs)

    def finish(self, result: Any) -> Any:
        """Record the outputs; returns what the caller gets (the result, or a stream proxy)."""
        return result

    def end(self, exc: BaseException | None) -> None:
        """Close the op(s), recording ``exc`` (the user's exception) if given. Never raises."""


CallFactory = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Call | None]
"""``(wrapped, instance, args, kwargs) -> Call``, or ``None`` for "do not trace this call"."""


def _begin(
    where: str, factory: CallFactory, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Call | None:
    call: Call | None = None
    try:
        call = factory(wrapped, instance, args, kwargs)
        if call is not None:
            call.start()
        return call
    except Exception:
        if call is not None:
            call.end(None)
        internal_error(f"{where}.start")
        return None


async def _abegin(
    where: str, factory: CallFactory, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Call | None:
    call: Call | None = None
    try:
        call = factory(wrapped, instance, args, kwargs)
        if call is not None:
            await call.astart()
        return call
    except Exception:
        if call is not None:
            call.end(None)
        internal_error(f"{where}.start")
        return None


def _complete(where: str, call: Call, result: Any) -> Any:
    try:
        out = call.finish(result)
    except Exception:
        call.end(None)
        internal_error(f"{where}.result")
        return result
    if not call.deferred:
        call.end(None)
    return out


def run_sync(
    where: str,
    factory: CallFactory,
    wrapped: Callable[..., Any],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run ``wrapped`` inside the telemetry ``factory`` builds, with the three guard rails."""
    if is_tracing_suppressed():
        return wrapped(*args, **kwargs)
    call = _begin(where, factory, wrapped, instance, args, kwargs)
    if call is None:
        return wrapped(*args, **kwargs)
    try:
        result = call.invoke(wrapped)
    except BaseException as exc:
        call.end(exc)
        raise
    return _complete(where, call, result)


async def run_async(
    where: str,
    factory: CallFactory,
    wrapped: Callable[..., Awaitable[Any]],
    instance: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """:func:`run_sync` for coroutine methods (the op opens and closes in the awaiting task)."""
    if is_tracing_suppressed():
        return await wrapped(*args, **kwargs)
    call = await _abegin(where, factory, wrapped, instance, args, kwargs)
    if call is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await call.invoke(wrapped)
    except BaseException as exc:
        call.end(exc)
        raise
    return _complete(where, call, result)


def wrapper_for(target: Target, factory: CallFactory) -> Callable[..., Any]:
    """A ``wrapt`` wrapper running ``factory``'s telemetry around the target."""
    where = f"{target.module.split('.')[0]}.{target.name}"
    if target.is_async:

        def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            return run_async(where, factory, wrapped, instance, args, kwargs)

        return async_wrapper

    def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        return run_sync(where, factory, wrapped, instance, args, kwargs)

    return sync_wrapper


_positional_names: dict[Any, tuple[str, ...]] = {}


class Arguments:
    """A call's arguments by parameter name, however they were passed.

    Cheaper than ``inspect.Signature.bind`` (this runs on every traced call) and it does not
    validate: the library checks its own arguments and raises its own errors.
    """

    __slots__ = ("_args", "_kwargs", "_names", "arguments")

    def __init__(
        self, names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self._names = names
        self._args = args
        self._kwargs = kwargs
        self.arguments: dict[str, Any] = dict(zip(names, args, strict=False))
        self.arguments.update(kwargs)

    @property
    def args(self) -> tuple[Any, ...]:
        """The positional arguments to pass on."""
        return self._args

    @property
    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments to pass on."""
        return self._kwargs

    def set(self, name: str, value: Any) -> None:
        """Replace an argument where the caller put it (by position or by keyword)."""
        self.arguments[name] = value
        if name in self._names and self._names.index(name) < len(self._args):
            args = list(self._args)
            args[self._names.index(name)] = value
            self._args = tuple(args)
        else:
            self._kwargs = {**self._kwargs, name: value}


def bind(
    wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Arguments | None:
    """The call's :class:`Arguments`; ``None`` when the callable has no inspectable signature."""
    key = getattr(wrapped, "__func__", wrapped)
    names = _positional_names.get(key)
    if names is None:
        try:
            parameters = inspect.signature(wrapped).parameters.values()
        except (TypeError, ValueError):
            return None
        names = tuple(
            p.name
            for p in parameters
            if p.kind
            in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        )
        _positional_names[key] = names
    return Arguments(names, args, kwargs)


def close_op(op: Op | None, exc: BaseException | None) -> None:
    """Exit an op entered with ``op.__enter__()``, recording ``exc`` when given."""
    if op is None:
        return
    if exc is None:
        op.__exit__(None, None, None)
    else:
        op.__exit__(type(exc), exc, exc.__traceback__)


def span_hex(op: Op) -> str:
    """The op's span id as 16 hex digits (unique per op; used in ids of its outputs)."""
    return f"{op.span.get_span_context().span_id:016x}"


# ---------------------------------------------------------------------------------------------
# Ids and text
# ---------------------------------------------------------------------------------------------


def content_id(prefix: str, *parts: Any) -> str:
    """A stable id for content: ``<prefix>:<20 hex digits of its sha256>``.

    >>> content_id("msg", "dana", "user", "hi")
    'msg:6c24f1b88b6d7bd10f0a'
    """
    text = "\x1f".join(canonical_value(p) for p in parts)
    return f"{prefix}:{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:20]}"


def candidate_json(ref: str | None, text: Any, score: Any = None) -> str:
    """One entry of a ``candidates`` value, as canonical JSON: exactly what
    :func:`~memtrace_otel.instrumentation.canonical_value` gives for ``{"ref": ref, "score":
    score, "text": text}`` (``ref`` and ``score`` left out when ``None``), built directly: it runs
    once per hit of every search, where ``json.dumps`` of the dicts costs more. Join the entries
    with :func:`candidates_json`.

    >>> candidate_json("mem0:1@2", "Ana lives in Porto", 0.5)
    '{"ref":"mem0:1@2","score":0.5,"text":"Ana lives in Porto"}'
    """
    if type(text) is str and (score is None or (type(score) is float and math.isfinite(score))):
        # json.dumps writes a finite float as its repr, and sorts the keys: ref, score, text.
        head = "{" if ref is None else f'{{"ref":{_json_string(ref)},'
        middle = "" if score is None else f'"score":{score!r},'
        return f'{head}{middle}"text":{_json_string(text)}}}'
    entry: dict[str, Any] = {"text": text}
    if ref is not None:
        entry["ref"] = ref
    if score is not None:
        entry["score"] = score
    return canonical_value(entry)


def candidates_json(entries: Iterable[str]) -> str:
    """The ``candidates`` value from :func:`candidate_json` entries (its canonical JSON list)."""
    return f"[{','.join(entries)}]"


_json_string = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) uses


def message_ref(content: Any, *, store_id: str | None = None, role: str = "user") -> str:
    """The ref auto-instrumentation gives an input message (content-addressed, version 1).

    Use it to name evidence in a cases file: ``message_ref("My sister Ana lives in Porto.",
    store_id="dana")`` is the ref of that message added to Mem0 for user ``dana``.

    >>> message_ref("hi", store_id="dana")
    'msg:6c24f1b88b6d7bd10f0a@1'
    """
    return content_id("msg", store_id or "", role, content) + "@1"


_SPACES = re.compile(r"\s+")
_FENCE = re.compile(r"```(?:[a-zA-Z0-9]*)\s*(.*?)\s*```", re.DOTALL)


def parse_json_reply(text: Any) -> Any:
    """Parse an LLM reply as mem0 does: code fences stripped, else the outermost ``{...}``.

    >>> parse_json_reply('```json\\n{"facts": ["a"]}\\n```')
    {'facts': ['a']}
    >>> parse_json_reply("no json") is None
    True
    """
    if not isinstance(text, str) or not text.strip():
        return None
    match = _FENCE.search(text)
    candidate = match.group(1) if match else text.strip()
    for attempt in (candidate, candidate[candidate.find("{") : candidate.rfind("}") + 1]):
        try:
            return json.loads(attempt, strict=False)
        except ValueError:
            continue
    return None


def normalise(text: str) -> str:
    """Case-folded with runs of whitespace as one space (for prompt matching)."""
    return _SPACES.sub(" ", text).strip().casefold()


def leaf_text(value: Any) -> str:
    """The text of a stored value: a string as is, else its string leaves joined by spaces.

    >>> leaf_text({"text": "Ana lives in Porto", "tags": ["family"]})
    'Ana lives in Porto family'
    """
    if isinstance(value, str):
        return value
    parts: list[str] = []
    _collect(value, parts)
    return " ".join(parts)


def _collect(value: Any, parts: list[str]) -> None:
    if isinstance(value, str):
        parts.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, parts)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, parts)


# ---------------------------------------------------------------------------------------------
# Case ids
# ---------------------------------------------------------------------------------------------


def baggage_case_id() -> str | None:
    """The ``memtrace.case.id`` baggage entry of the current context, if set."""
    value = baggage.get_baggage(A.MEMTRACE_CASE_ID)
    return str(value) if value else None


def set_case_id(op: Op, case_id: str | None = None, *, answer: bool = False) -> str | None:
    """Give a question-serving op its case id: ``case_id``, else the baggage entry, else its trace id.

    ``answer``: the op produced the answer itself (an LLM call), not a step serving the question
    (a search): inside an application run (:class:`AppRun`) the answer wins over the steps.
    """
    if not op.is_traced:
        return None
    ctx = op.span.get_span_context()
    chosen = case_id or baggage_case_id() or f"{ctx.trace_id:032x}"
    op.set_attribute(A.MEMTRACE_CASE_ID, chosen)
    note_answer(chosen, ctx)  # the last one of a request is its answer: for last_answer()
    run = _app_run.get()
    if run is not None:
        run.note(chosen, ctx, answer=answer)
    return chosen


# ---------------------------------------------------------------------------------------------
# One run of an application (a LangGraph graph invocation): its user turns, its answer
# ---------------------------------------------------------------------------------------------


class AppRun:
    """One run of an application's entry point (e.g. a LangGraph graph's ``invoke``).

    The framework runs each step in a copied context, so what the steps learn is kept here, in
    one mutable object every copy shares: the user turns the run was given (their texts become
    ``message`` variables of the LLM calls whose prompt holds them) and the answer (the last
    answering LLM call, else the last question-serving op), which the instrumentor notes in the
    caller's context when the run returns, for :func:`last_answer`. ``store_id``: the memory
    store the run works in (see :func:`bind_store`), ``None`` while unknown.
    """

    __slots__ = ("_lock", "answer", "question", "store_id", "turns")

    def __init__(self, turns: Sequence[str] = (), store_id: str | None = None) -> None:
        self.turns = [t for t in turns if isinstance(t, str) and t.strip()]
        self.store_id = store_id
        self.answer: tuple[str, Any] | None = None
        self.question: tuple[str, Any] | None = None
        self._lock = threading.Lock()

    def note(self, case_id: str, span_context: Any, *, answer: bool) -> None:
        """Remember an answer (``answer``) or a question-serving op."""
        with self._lock:
            if answer:
                self.answer = (case_id, span_context)
            else:
                self.question = (case_id, span_context)

    def noted(self) -> tuple[str, Any] | None:
        """The run's answer, else its last question-serving op."""
        with self._lock:
            return self.answer or self.question


_app_run: ContextVar[AppRun | None] = ContextVar("memtrace_app_run", default=None)


def current_app_run() -> AppRun | None:
    """The application run in progress in this context, if any."""
    return _app_run.get()


def enter_app_run(run: AppRun) -> object:
    """Start ``run`` in this context (returns the token :func:`leave_app_run` takes)."""
    return _app_run.set(run)


def leave_app_run(token: object, run: AppRun) -> None:
    """End the run: the caller's context is back, and its answer is noted there."""
    try:  # noqa: SIM105
        _app_run.reset(token)  # type: ignore[arg-type]
    except ValueError:
        pass  # ended in another context: nothing to restore
    noted = run.noted()
    if noted is not None:
        note_answer(*noted)
        outer = _app_run.get()
        if outer is not None:  # a nested run (a subgraph): its parent sees the answer too
            outer.note(*noted, answer=run.answer is not None)


def turn_texts(value: Any) -> list[str]:
    """The user turns in a run's input: a string, or the user/human messages of a message list
    or of a ``{"messages": [...]}`` state (dicts, ``(role, text)`` pairs, or message objects
    with ``type == "human"``).

    >>> turn_texts({"messages": [{"role": "user", "content": "hi"}, ("ai", "hello")]})
    ['hi']
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = value.get("messages")
    if not isinstance(value, list | tuple):
        return []
    texts: list[str] = []
    for message in value:
        if isinstance(message, dict):
            role, content = message.get("role") or message.get("type"), message.get("content")
        elif isinstance(message, tuple) and len(message) == 2:
            role, content = message
        else:
            role, content = getattr(message, "type", None), getattr(message, "content", None)
        if role in ("user", "human") and isinstance(content, str) and content.strip():
            texts.append(content)
    return texts


# ---------------------------------------------------------------------------------------------
# What LLM calls wrote, for the memory writes that store it
# ---------------------------------------------------------------------------------------------

MIN_PRODUCED_TEXT = 12
"""Shortest text (characters, with a space in it) a memory write is matched on: shorter
leaves ("Memory", "yes", an id) would tie unrelated values together."""


class Producer(Protocol):
    """An LLM call whose output a memory write may store (see :func:`producers_of`)."""

    def claim(self, text: str, store_id: str | None, write: str) -> Variable | str | None:
        """The output variable (or its ref) that holds ``text``; the call learns that a memory
        write (``write``: ``create``, ``update`` or ``delete``) stores it (an answering call
        becomes an extraction, a decision takes the kind of the writes that carry it out)."""


def matchable_texts(value: Any) -> list[str]:
    """The string leaves of a value worth matching: stripped, ``MIN_PRODUCED_TEXT`` characters
    or more, with a space in them; each once, in order.

    >>> matchable_texts({"kind": "Memory", "content": {"content": "Ana moved to Porto"}})
    ['Ana moved to Porto']
    """
    parts: list[str] = []
    _collect(value, parts)
    seen: dict[str, None] = {}
    for part in parts:
        text = part.strip()
        if len(text) >= MIN_PRODUCED_TEXT and " " in text:
            seen.setdefault(text, None)
    return list(seen)


class ProducedIndex(BoundedCache[str, Producer]):
    """Digest of an LLM output's text -> the call that produced it (latest first, bounded)."""

    def add(self, texts: Iterable[str], producer: Producer) -> None:
        """Remember that ``producer`` wrote each of ``texts``."""
        for text in texts:
            self.set(digest(text), producer)


produced = ProducedIndex()
"""The process's index of LLM outputs (the OpenAI instrumentor writes, memory stores read)."""


def producers_of(value: Any, store_id: str | None, write: str) -> list[Variable | str]:
    """The LLM outputs a value to be stored holds, matched by digest of its text leaves: each a
    variable (or ref) of the call that wrote it, which learns it is a memory write's source."""
    found: list[Variable | str] = []
    refs: set[str] = set()
    for text in matchable_texts(value):
        producer = produced.get(digest(text))
        if producer is None:
            continue
        try:
            item = producer.claim(text, store_id, write)
        except Exception:
            internal_error("produced.claim")
            continue
        ref = item.ref if isinstance(item, Variable) else item
        if item is not None and ref not in refs:
            refs.add(ref)  # type: ignore[arg-type]
            found.append(item)
    return found


@dataclass(eq=False)
class Removal:
    """A decided operation of an LLM call that names a record and no content (a deletion)."""

    producer: Producer
    texts: tuple[str, ...]
    claimed: bool = False


_removals: BoundedCache[int, list[Removal]] = BoundedCache(4096)
_removals_lock = threading.Lock()


def remember_removals(trace_id: int, removals: Iterable[Removal]) -> None:
    """Keep the removal-like decisions of an LLM call for the deletes that follow: those of the
    same unit of work (:class:`LlmScope`; root ops have a trace each) or of the same trace."""
    removals = list(removals)
    scope = _llm_scope.get()
    with _removals_lock:
        if scope is not None:
            scope.removals = [*scope.removals, *removals][-_MAX_PER_TRACE:]
        items = _removals.get(trace_id) or []
        _removals.set(trace_id, [*items, *removals][-_MAX_PER_TRACE:])


def claim_removal(trace_id: int, key: str, store_id: str | None) -> Variable | str | None:
    """The decision a delete of ``key`` carries out (unit of work first, then trace): the latest
    unclaimed one that names ``key``, else the first unclaimed one."""
    scope = _llm_scope.get()
    found: Removal | None = None
    with _removals_lock:
        pools = [scope.removals] if scope is not None else []
        pools.append(_removals.get(trace_id) or [] if trace_id else [])
        named = (r for items in pools for r in reversed(items) if key in r.texts)
        anyone = (r for items in pools for r in items)
        for removal in (*named, *anyone):
            if not removal.claimed:
                removal.claimed = True
                found = removal
                break
    if found is None:
        return None
    try:
        return found.producer.claim(key, store_id, "delete")
    except Exception:
        internal_error("produced.claim")
        return None


# ---------------------------------------------------------------------------------------------
# A unit of application work whose LLM calls are classified when it ends
# ---------------------------------------------------------------------------------------------


class Deferred(Protocol):
    """An LLM call whose role shows only after it returned: answer, or extraction."""

    def resolve(self, written: Sequence[str] | None) -> None:
        """The unit ended. ``written``: the texts the unit handed on (a node's writes to the
        graph state), ``None`` when the unit does not say; an output no memory write stored is
        the answer if it is among them (or nothing is known), else an extraction that kept
        nothing."""


class LlmScope:
    """One unit of application work (a LangGraph node run, a memory manager call). An LLM call
    made in it stays open (its block left, its end time taken) until the unit ends: by then the
    memory writes that store its output have claimed it (an extraction, or a decision they
    carry out), or the unit handed its output on (the answer). ``store_id``: the memory store
    the unit works in, the first one a memory op of the unit named (see :func:`bind_store`)."""

    __slots__ = ("_lock", "outer", "pending", "removals", "store_id", "turns", "unit")

    def __init__(
        self, unit: str = "", turns: Sequence[str] = (), outer: LlmScope | None = None
    ) -> None:
        self.unit = unit
        self.store_id: str | None = None
        self.turns = [t for t in turns if isinstance(t, str) and t.strip()]
        self.outer = outer  # the unit this one runs inside (a library's graph in a manager call)
        self.pending: list[Deferred] = []
        self.removals: list[Removal] = []
        self._lock = threading.Lock()

    def given_turns(self) -> list[list[str]]:
        """The user turns of this unit and of the units it runs in, outermost first: the turns
        an application gave (the conversation handed to a memory manager) come before the ones
        a library built from them (the prompt its own graph's node was given)."""
        chain: list[list[str]] = []
        scope: LlmScope | None = self
        while scope is not None:
            chain.append(scope.turns)
            scope = scope.outer
        return chain[::-1]

    def add(self, call: Deferred) -> None:
        with self._lock:
            self.pending.append(call)

    def close(self, written: Sequence[str] | None = None) -> None:
        with self._lock:
            pending, self.pending = self.pending, []
        for call in pending:
            try:
                call.resolve(written)
            except Exception:
                internal_error("llm_scope.close")


_llm_scope: ContextVar[LlmScope | None] = ContextVar("memtrace_llm_scope", default=None)


def current_llm_scope() -> LlmScope | None:
    """The unit of work in progress in this context, if any."""
    return _llm_scope.get()


def enter_llm_scope(unit: str = "", turns: Sequence[str] = ()) -> tuple[object, LlmScope]:
    """Open a unit of work in this context: ``unit`` names its kind, ``turns`` are the user
    turns it was given (the texts its LLM calls read as ``message`` variables). A root
    retrieval made before the unit (another request's, another user's) does not serve its LLM
    calls: only those the unit makes itself (:func:`retrievals_in_context`)."""
    scope = LlmScope(unit, turns, _llm_scope.get())
    return (_llm_scope.set(scope), _last_root.set(None)), scope


def leave_llm_scope(token: object, scope: LlmScope, written: Sequence[str] | None = None) -> None:
    """Close the unit (``written``: see :meth:`Deferred.resolve`)."""
    tokens: tuple[Any, Any] = token  # type: ignore[assignment]
    try:
        _llm_scope.reset(tokens[0])
        _last_root.reset(tokens[1])
    except ValueError:
        pass  # ended in another context: nothing to restore
    scope.close(written)


def bind_store(store_id: str | None) -> None:
    """A memory op of this context works in ``store_id``: the unit of work in progress is bound
    to it (its first store wins) and so is the application run (its latest store), so that
    the LLM calls of the unit, or of the run's later units, join that store."""
    if not store_id:
        return
    scope = _llm_scope.get()
    if scope is not None and scope.store_id is None:
        scope.store_id = store_id
    run = _app_run.get()
    if run is not None:
        run.store_id = store_id


def bound_store() -> str | None:
    """The store the unit of work in progress is bound to, else the application run's."""
    scope = _llm_scope.get()
    if scope is not None and scope.store_id:
        return scope.store_id
    run = _app_run.get()
    return run.store_id if run is not None else None


def string_leaves(value: Any) -> list[str]:
    """Every string in a value: dict values, list items, and the ``content`` of message objects.

    >>> string_leaves([{"role": "ai", "content": "hi"}, ("x", 2)])
    ['ai', 'hi', 'x']
    """
    parts: list[str] = []
    _collect_any(value, parts, 0)
    return parts


def _collect_any(value: Any, parts: list[str], depth: int) -> None:
    if depth > 8:
        return
    if isinstance(value, str):
        parts.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_any(item, parts, depth + 1)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _collect_any(item, parts, depth + 1)
    else:
        content = getattr(value, "content", None)
        if isinstance(content, str | list):
            _collect_any(content, parts, depth + 1)


# ---------------------------------------------------------------------------------------------
# What retrieve ops returned, for the LLM calls that follow
# ---------------------------------------------------------------------------------------------


class Retrieved(NamedTuple):
    """One record a retrieve op returned: ``(ref, text, traceparent)``."""

    ref: str
    text: str
    traceparent: str | None = None

    def variable(self) -> Variable:
        """The record as an op input (it links to its writer through the registry or traceparent)."""
        return Variable.from_ref(
            self.ref, self.text, category=Category.MEMORY, traceparent=self.traceparent
        )


RecordTuple = tuple[str, str, str | None]
"""A :class:`Retrieved` as the plain tuple :class:`Retrieval` keeps."""


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What one retrieve op returned, and for which store and case.

    ``records`` are kept as plain ``(ref, text, traceparent)`` tuples (a :class:`Retrieved` given
    here is stored as one): the garbage collector stops tracking a tuple of strings, so the
    thousands of records kept for linking cost nothing in the app's full collections, where
    named tuples would be walked in every one. ``Retrieved(*record)`` names the fields again.
    """

    trace_id: int
    store_id: str | None
    case_id: str | None
    records: tuple[RecordTuple, ...]
    nbytes: int = field(default=0, compare=False)
    """Bytes held: the strings' sizes plus a fixed overhead per record (counted here when 0)."""

    def __post_init__(self) -> None:
        if self.nbytes:
            return  # made by remember_retrieval: plain tuples, counted in the same pass
        records = tuple(r if type(r) is tuple else (r[0], r[1], r[2]) for r in self.records)
        object.__setattr__(self, "records", records)
        size = sys.getsizeof
        object.__setattr__(
            self, "nbytes", sum(size(r[0]) + size(r[1]) + _RECORD_OVERHEAD for r in records)
        )


DEFAULT_RETRIEVAL_MEMORY_BYTES = 16 * 1024 * 1024
"""Bytes of retrieved-record text kept for linking by default (``MEMTRACE_RETRIEVAL_MEMORY_BYTES``)."""
_MAX_PER_TRACE = 32
_RECORD_OVERHEAD = 200  # bytes of a record tuple and its slot besides the two strings


class RetrievalMemory:
    """What retrieve ops returned, by trace, bounded by bytes (oldest traces evicted first).

    Kept only so that a later LLM call can name the records its prompt used. Each record's text
    is kept cut to the capture setting's ``max_value_length`` (no more of it can leave the
    process), the whole is bounded by ``max_bytes`` (argument, else
    ``MEMTRACE_RETRIEVAL_MEMORY_BYTES``, else 16 MiB; 0 keeps nothing) and released by
    :meth:`clear` (every instrumentor's ``uninstrument()``). Evictions are counted.
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = resolve(
            "max_bytes",
            max_bytes,
            ENV_MEMTRACE_RETRIEVAL_MEMORY_BYTES,
            DEFAULT_RETRIEVAL_MEMORY_BYTES,
            non_negative_int,
        )
        self.evicted = 0
        self._bytes = 0
        self._by_trace: OrderedDict[int, list[Retrieval]] = OrderedDict()
        self._lock = threading.Lock()
        reinit_after_fork(self)

    def _reinit_after_fork(self) -> None:
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """Bytes held now (string sizes plus a fixed overhead per record)."""
        return self._bytes

    def add(self, retrieval: Retrieval) -> None:
        """Remember one retrieval of its trace (at most 32 per trace are kept)."""
        size = retrieval.nbytes
        if size > self.max_bytes:
            with self._lock:
                self.evicted += 1
            return
        with self._lock:
            items = self._by_trace.get(retrieval.trace_id)
            if items is None:
                items = self._by_trace[retrieval.trace_id] = []
            else:
                self._by_trace.move_to_end(retrieval.trace_id)
            items.append(retrieval)
            self._bytes += size
            while len(items) > _MAX_PER_TRACE:
                self._bytes -= items.pop(0).nbytes
                self.evicted += 1
            while self._bytes > self.max_bytes and self._by_trace:
                _, old = self._by_trace.popitem(last=False)
                self._bytes -= sum(r.nbytes for r in old)
                self.evicted += len(old)

    def of_trace(self, trace_id: int) -> list[Retrieval]:
        """The retrievals of one trace, oldest first."""
        with self._lock:
            return list(self._by_trace.get(trace_id, ()))

    def clear(self) -> None:
        """Release everything."""
        with self._lock:
            self._by_trace.clear()
            self._bytes = 0


retrieval_memory = RetrievalMemory()
"""The process's retrieval memory, shared by the instrumentors (mem0, LangGraph write; OpenAI reads)."""
_last_root: ContextVar[Retrieval | None] = ContextVar("memtrace_last_root_retrieval", default=None)


def remember_retrieval(
    op: Op, store_id: str | None, case_id: str | None, records: Iterable[RecordTuple]
) -> None:
    """Remember what a retrieve op returned (call while the op is open).

    ``records``: :class:`Retrieved` s or plain ``(ref, text, traceparent)`` tuples (cheaper to
    make, once per hit).
    """
    if not op.is_traced:
        return
    span = op.span
    ctx = span.get_span_context()
    limit = op.max_value_length
    size = sys.getsizeof
    kept: list[RecordTuple] = []
    nbytes = 0
    for record in records:  # one pass: cut, made plain tuples, counted
        ref, text, traceparent = record
        if len(text) > limit:
            text = text[:limit]
            record = (ref, text, traceparent)
        elif type(record) is not tuple:
            record = (ref, text, traceparent)
        kept.append(record)
        nbytes += size(ref) + size(text) + _RECORD_OVERHEAD
    retrieval = Retrieval(ctx.trace_id, store_id, case_id, tuple(kept), nbytes)
    retrieval_memory.add(retrieval)
    if getattr(span, "parent", None) is None:
        # A root op: no enclosing request span groups it with the LLM call that follows, so
        # remember it in this execution context instead (a thread, or an asyncio task).
        _last_root.set(retrieval)


def retrievals_in_context() -> list[Retrieval]:
    """Retrievals of the current trace (oldest first), else the last root one of this context."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        found = retrieval_memory.of_trace(ctx.trace_id)
        if found:
            return found
    last = _last_root.get()
    return [last] if last is not None else []


def forget_retrievals() -> None:
    """Release every remembered retrieval (``uninstrument()``; tests)."""
    retrieval_memory.clear()
    _last_root.set(None)


# ---------------------------------------------------------------------------------------------
# "Inside a memory system": its own LLM calls are its ops' business, not generate ops
# ---------------------------------------------------------------------------------------------

_inside_memory_system: ContextVar[bool] = ContextVar("memtrace_inside_memory_system", default=False)


def inside_memory_system() -> bool:
    """Whether an instrumented memory system (e.g. Mem0) is running a call of its own."""
    return _inside_memory_system.get()


def enter_memory_system() -> object:
    """Mark what follows as a memory system's internal work until :func:`leave_memory_system`."""
    return _inside_memory_system.set(True)


def leave_memory_system(token: object) -> None:
    """Undo :func:`enter_memory_system`."""
    # Not contextlib.suppress: this runs on every traced call, and try/except costs nothing.
    try:  # noqa: SIM105
        _inside_memory_system.reset(token)  # type: ignore[arg-type]
    except ValueError:
        pass  # ended in another context: nothing to restore


# ---------------------------------------------------------------------------------------------
# Prompt templates the application declares
# ---------------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_MIN_FRAGMENT = 12


@dataclass(frozen=True)
class _Template:
    variable: Variable
    fragments: tuple[str, ...]

    def matches(self, prompt: str) -> bool:
        position = 0
        for fragment in self.fragments:
            found = prompt.find(fragment, position)
            if found < 0:
                return False
            position = found + len(fragment)
        return bool(self.fragments)


_templates: dict[str, _Template] = {}
_templates_lock = threading.Lock()


def _reset_templates_lock() -> None:
    global _templates_lock
    _templates_lock = threading.Lock()


on_fork_in_child(_reset_templates_lock)
_explicit_prompt: ContextVar[Variable | None] = ContextVar("memtrace_prompt", default=None)


def declare_prompt(template_id: str, template: str, *, version: int = 1) -> Variable:
    """Declare a prompt template the application fills in for its LLM calls.

    Instrumented LLM calls whose prompt contains the template's fixed text (the parts between
    ``{placeholders}``, in order) record it as ``memtrace.prompt.ref``. Declaring the same id
    again with a new version replaces it.

    Args:
        template_id: the template variable's id, e.g. ``prompt:answer``.
        template: the template text with ``{name}`` placeholders.
        version: its version (bump it when the template changes).

    Returns:
        The prompt variable (category ``prompt``).

    Raises:
        ValueError: an empty id, a version below 1, or a template without fixed text.

    >>> declare_prompt("prompt:doc", "Answer from these memories:\\n{memories}").ref
    'prompt:doc@1'
    >>> forget_prompts()
    """
    if not isinstance(template, str):
        raise ValueError(f"template must be a string, got {type(template).__name__}")
    variable = Variable(template_id, version, template, Category.PROMPT)
    fragments = tuple(
        normalise(f) for f in _PLACEHOLDER.split(template) if len(normalise(f)) >= _MIN_FRAGMENT
    )
    if not fragments:
        raise ValueError(
            f"template {template_id!r} has no fixed text of {_MIN_FRAGMENT}+ characters to match"
        )
    with _templates_lock:
        _templates[template_id] = _Template(variable, fragments)
    return variable


@contextlib.contextmanager
def using_prompt(template: Variable) -> Iterator[Variable]:
    """Within the block, LLM calls use ``template`` (from :func:`declare_prompt`) as their prompt."""
    token = _explicit_prompt.set(template)
    try:
        yield template
    finally:
        _explicit_prompt.reset(token)


def prompt_for(normalised_prompt: str) -> Variable | None:
    """The template of this prompt: the one set by :func:`using_prompt`, else a declared match."""
    explicit = _explicit_prompt.get()
    if explicit is not None:
        return explicit
    with _templates_lock:
        templates = list(_templates.values())
    for template in templates:
        if template.matches(normalised_prompt):
            return template.variable
    return None


def forget_prompts() -> None:
    """Drop every declared template (tests)."""
    with _templates_lock:
        _templates.clear()


# ---------------------------------------------------------------------------------------------
# Values traced ops produced, by digest: where a text a caller later writes came from
# ---------------------------------------------------------------------------------------------


class _Output:
    """A producer of one fixed output (:func:`remember_output`)."""

    __slots__ = ("ref", "traceparent")

    def __init__(self, ref: str, traceparent: str | None) -> None:
        self.ref, self.traceparent = ref, traceparent

    def claim(self, text: str, store_id: str | None, write: str) -> Variable | str | None:
        return Variable.from_ref(self.ref, text, traceparent=self.traceparent)


def remember_output(text: Any, ref: str, traceparent: str | None) -> None:
    """Remember that the traced op with ``traceparent`` produced ``text`` as ``ref``, so a later
    write of exactly that text links to it (:data:`produced`; only the digest is kept)."""
    if isinstance(text, str) and text.strip():
        produced.add([text.strip()], _Output(ref, traceparent))


def produced_by(
    text: Any, store_id: str | None = None, write: str = "update"
) -> tuple[str, str | None] | None:
    """``(ref, traceparent)`` of the traced output equal to ``text`` (whitespace at the ends
    aside), if this process saw one; its producer learns that a ``write`` stores it."""
    if not isinstance(text, str) or not text.strip():
        return None
    producer = produced.get(digest(text.strip()))
    if producer is None:
        return None
    try:
        item = producer.claim(text.strip(), store_id, write)
    except Exception:
        internal_error("produced.claim")
        return None
    if isinstance(item, Variable):
        return item.ref, item.traceparent
    return (item, None) if isinstance(item, str) else None


def forget_outputs() -> None:
    """Forget every remembered output (``uninstrument()``; tests)."""
    produced.clear()


# ---------------------------------------------------------------------------------------------
# Versions of records the libraries do not version themselves
# ---------------------------------------------------------------------------------------------


class VersionCache(BoundedCache[str, int]):
    """Record id -> latest known version, for records the libraries do not version themselves."""


__all__ = [
    "Arguments",
    "BoundedCache",
    "Call",
    "CallFactory",
    "Patcher",
    "RecordTuple",
    "Retrieval",
    "RetrievalMemory",
    "Retrieved",
    "Target",
    "VersionCache",
    "bind",
    "candidate_json",
    "candidates_json",
    "close_op",
    "content_id",
    "declare_prompt",
    "enter_memory_system",
    "forget_outputs",
    "forget_prompts",
    "forget_retrievals",
    "inside_memory_system",
    "leaf_text",
    "leave_memory_system",
    "make_tracer",
    "message_ref",
    "normalise",
    "produced_by",
    "prompt_for",
    "remember_output",
    "remember_retrieval",
    "retrieval_memory",
    "retrievals_in_context",
    "run_async",
    "run_sync",
    "set_case_id",
    "span_hex",
    "supported_version",
    "using_prompt",
    "wrapper_for",
]

"""OpenAI chat completions as ``generate`` ops tied to the memories their prompt used.

``Completions.create`` and ``AsyncCompletions.create`` (plain and ``stream=True``) become ops named
``openai.chat.completions``. Their inputs are the memory records that a retrieve op returned
earlier in the same trace (or, without a parent span, in the same execution context) and whose
text appears in the prompt; the prompt template is the one the application declared
(:func:`memtrace_otel.instrumentors.declare_prompt`) if its fixed text is in the prompt. The
output is the answer, ``prediction:<span id>@1`` (its digest remembered, so that a memory write of
the same text links to this op). The op takes the store and case of the
retrieval it used, unless the ``memtrace.case.id`` baggage entry names the case.

Calls made by an instrumented memory system for its own work (Mem0's extraction) are not
``generate`` ops: the memory system's instrumentor records them as its own phases.

A stream is returned as a transparent proxy of the library's stream: the op ends when the stream
is exhausted, closed or fails.

**Beside the upstream OpenAI instrumentor** (``opentelemetry-instrumentation-openai-v2``): our
wrapper sits beneath its wrapper whatever the order the two were enabled in, so its chat span is
the current span when ours runs. Then no second span is made: the op *enriches* that span (our
attributes, links and variable events) and leaves its name, status, token usage and end to the
upstream instrumentor, so every call has one chat span and its tokens are counted once.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import wrapt
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from memtrace_otel._internal import internal_error
from memtrace_otel.instrumentation import MemTracer, Op, Variable
from memtrace_otel.instrumentors._common import (
    MIN_PRODUCED_TEXT,
    AppRun,
    Call,
    LlmScope,
    Removal,
    Retrieval,
    Retrieved,
    Target,
    baggage_case_id,
    bound_store,
    close_op,
    current_app_run,
    current_llm_scope,
    inside_memory_system,
    matchable_texts,
    message_ref,
    normalise,
    parse_json_reply,
    produced,
    prompt_for,
    remember_removals,
    retrievals_in_context,
    set_case_id,
    span_hex,
    wrapper_for,
)
from memtrace_otel.semconv import Category, OpKind
from memtrace_otel.semconv import attributes as A

MODULE = "openai.resources.chat.completions"
OP_NAME = "openai.chat.completions"
EXTRACTION_OP_NAME = "openai.chat.extraction"
"""A chat call whose output memory writes stored: an ``extract`` op."""
TOOL_CALLS_OP_NAME = "openai.chat.tool_calls"
"""A chat call that answered with tool calls (decided operations): an ``extract`` op."""
DECISION_OP_NAMES = {
    OpKind.UPDATE: "openai.chat.update_decision",
    OpKind.DELETE: "openai.chat.delete_decision",
}
"""A chat call whose outputs memory writes carried out, all updates or all deletions."""
GEN_AI_CHAT = "chat"
"""Upstream ``gen_ai.operation.name`` of a chat completion."""
GEN_AI_PROVIDER_OPENAI = "openai"
"""``gen_ai.provider.name`` (formerly ``gen_ai.system``) of OpenAI calls."""

TARGETS: tuple[Target, ...] = (
    Target(MODULE, "Completions.create", "create"),
    Target(MODULE, "AsyncCompletions.create", "create", is_async=True),
)
"""Every patched method: ``(module, Class.method, handler, is_async)``."""

_WORD = re.compile(r"\w+")
_MIN_WORDS_FOR_FUZZY = 4
_FUZZY_RECALL = 0.9


def prompt_of(messages: Any) -> str:
    """The text of a chat request's messages (string contents and text parts), one per line.

    >>> prompt_of([{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "there"}]}])
    'hi\\nthere'
    """
    parts: list[str] = []
    if isinstance(messages, list | tuple):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(
                    p["text"]
                    for p in content
                    if isinstance(p, dict) and isinstance(p.get("text"), str)
                )
    return "\n".join(parts)


def used_records(
    prompt: str, retrievals: list[Retrieval]
) -> tuple[list[Retrieved], Retrieval | None]:
    """The retrieved records whose text is in the (normalised) prompt, and the latest retrieval
    that supplied one (else the latest retrieval).

    A record matches when its normalised text is a substring of the prompt, or, for texts of four
    words or more, when 90% of its words are in the prompt (the app may reformat a little), or,
    for a record of several fields (one per line), when one field's text is in the prompt.
    """
    words = set(_WORD.findall(prompt))
    used: dict[str, Retrieved] = {}
    source: Retrieval | None = None
    for retrieval in retrievals:
        for ref, raw, traceparent in retrieval.records:
            text = normalise(raw)
            if not text or ref in used:
                continue
            if text in prompt or _mostly_in(text, words) or _a_line_in(raw, prompt):
                used[ref] = Retrieved(ref, raw, traceparent)
                source = retrieval
    if source is None and retrievals:
        source = retrievals[-1]
    return list(used.values()), source


def _a_line_in(raw: str, prompt: str) -> bool:
    """A record of several fields (one per line, e.g. a store item's ``kind`` and ``content``)
    is used when the text of one of them (``MIN_PRODUCED_TEXT``+ characters) is in the prompt."""
    if "\n" not in raw:
        return False
    for line in raw.split("\n"):
        text = normalise(line)
        if len(text) >= MIN_PRODUCED_TEXT and " " in text and text in prompt:
            return True
    return False


def _mostly_in(text: str, words: set[str]) -> bool:
    tokens = _WORD.findall(text)
    if len(tokens) < _MIN_WORDS_FOR_FUZZY:
        return False
    return sum(t in words for t in tokens) >= _FUZZY_RECALL * len(tokens)


def upstream_chat_span() -> Span | None:
    """The current span if an upstream GenAI instrumentor opened it for this very chat call.

    It is a recording ``CLIENT`` span with ``gen_ai.operation.name`` ``chat`` and provider
    ``openai`` (``gen_ai.provider.name``, or the older ``gen_ai.system``) that no op has
    enriched yet. Read through the SDK span's public ``kind`` and ``attributes``.
    """
    span = trace.get_current_span()
    if not span.is_recording() or getattr(span, "kind", None) is not SpanKind.CLIENT:
        return None
    attributes = getattr(span, "attributes", None)
    if not attributes or attributes.get(A.GEN_AI_OPERATION_NAME) != GEN_AI_CHAT:
        return None
    provider = attributes.get(A.GEN_AI_PROVIDER_NAME) or attributes.get(A.GEN_AI_SYSTEM)
    if provider != GEN_AI_PROVIDER_OPENAI or A.MEMTRACE_OP_KIND in attributes:
        return None
    return span


class OpenAITelemetry:
    """The tracer of one ``OpenAIInstrumentor.instrument()``."""

    def __init__(self, mt: MemTracer) -> None:
        self.mt = mt
        self.active = True

    def wrapper(self, target: Target) -> Callable[..., Any]:
        """The ``wrapt`` wrapper of one table entry."""
        return wrapper_for(target, self._factory(target.is_async))

    def _factory(self, is_async: bool) -> Callable[..., Call | None]:
        def factory(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Call | None:
            if not self.active or inside_memory_system():
                return None
            return _GenerateCall(self.mt, args, kwargs, is_async)

        return factory

    def close(self) -> None:
        """Stop tracing (wrappers still in place, e.g. captured bound methods, pass through)."""
        self.active = False


class _GenerateCall(Call):
    def __init__(self, mt: MemTracer, args: Any, kwargs: dict[str, Any], is_async: bool) -> None:
        super().__init__(args, kwargs)
        self.mt = mt
        self.is_async = is_async
        self.op: Op | None = None
        self.upstream: Span | None = None  # the upstream chat span this call enriches
        self.beside: Span | None = None  # the upstream chat span this call's op is beneath
        self.stream = kwargs.get("stream") is True
        # A stream outlives the call: its op is entered in a context of its own, so that
        # ending it later, wherever the stream is consumed, leaves the caller's context alone.
        self.ctx: contextvars.Context | None = contextvars.copy_context() if self.stream else None
        self.prompt = ""
        self.case_id: str | None = None
        self.scope: LlmScope | None = None
        self.run: AppRun | None = None
        self.store_id: str | None = None  # the store of the retrieval its prompt used
        self.role = _PENDING
        self.content: str | None = None
        self.facts: dict[str, Variable] = {}
        self.writes: set[str] = set()
        self.prediction: Variable | None = None
        self.lock = threading.RLock()

    def start(self) -> None:
        kwargs = self.kwargs
        prompt = self.prompt = normalise(prompt_of(kwargs.get("messages")))
        records, retrieval = used_records(prompt, retrievals_in_context())
        self.upstream = upstream_chat_span()
        self.run = current_app_run()
        if self.ctx is None:
            # Inside a unit of work (a LangGraph node) the role shows when it ends.
            self.scope = current_llm_scope()
        if self.scope is not None and self.upstream is not None:
            # The upstream span ends when the call returns, before the role shows: the op is
            # a span of its own beneath it (the upstream span keeps the tokens).
            self.beside, self.upstream = self.upstream, None
        attributes: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: GEN_AI_CHAT}
        if self.upstream is None:  # else they are the upstream span's, already set
            attributes[A.GEN_AI_PROVIDER_NAME] = GEN_AI_PROVIDER_OPENAI
            model = kwargs.get("model")
            if isinstance(model, str):
                attributes[A.GEN_AI_REQUEST_MODEL] = model
        self.store_id = retrieval.store_id if retrieval is not None else None
        op = self.mt.generate(
            OP_NAME,
            inputs=[r.variable() for r in records],
            prompt=prompt_for(prompt),
            store_id=self.store_id or bound_store(),
            attributes=attributes,
            span=self.upstream,
        )
        self.op = op
        if self.ctx is not None:
            self.ctx.run(op.__enter__)
            self.case_id = self.ctx.run(_case_id, retrieval)
            # A stream is an answer: named at once, for last_answer() while it streams.
            self.role = _ANSWER
            self.ctx.run(set_case_id, op, self.case_id, answer=True)
        else:
            op.__enter__()
            self.case_id = _case_id(retrieval)

    def invoke(self, wrapped: Callable[..., Any]) -> Any:
        if self.ctx is None:
            return wrapped(*self.args, **self.kwargs)
        if self.is_async:
            # The request runs in the op's context (a child task), so HTTP spans nest under it.
            return asyncio.get_running_loop().create_task(
                wrapped(*self.args, **self.kwargs), context=self.ctx
            )
        return self.ctx.run(wrapped, *self.args, **self.kwargs)

    def finish(self, result: Any) -> Any:
        op = self.op
        if op is None or not op.is_traced:
            return result
        if self.stream:
            self.deferred = True
            if self.is_async:
                return _AsyncStream(result, self)
            return _Stream(result, self)
        completion = result
        if getattr(result, "choices", None) is None and callable(getattr(result, "parse", None)):
            # ``with_raw_response`` (langchain-openai calls it so): the parsed completion, which
            # the response caches, so the caller's own ``parse()`` gets the same object.
            try:
                completion = result.parse()
            except Exception:
                return result  # not a completion: returned as is, nothing recorded
        choices = getattr(completion, "choices", None)
        if not choices:
            return result
        message = getattr(choices[0], "message", None)
        if self.upstream is None and self.beside is None:  # else the upstream span has them
            self._record_response(
                op, getattr(completion, "model", None), getattr(completion, "usage", None)
            )
        tool_calls = getattr(message, "tool_calls", None)
        content = getattr(message, "content", None)
        text = content if isinstance(content, str) else None
        if tool_calls or (self.kwargs.get("tools") and not (text or "").strip()):
            self._decided(op, tool_calls or ())
            return result
        self.content = text
        if self.content is not None:
            produced.add(_content_texts(self.content), self)
        if self.scope is None:
            self._answer(op)
        return result

    def record(self, content: Any, model: Any, usage: Any) -> None:
        """A stream's result: the answer."""
        op = self.op
        if op is None or not op.is_traced:
            return
        if self.upstream is None:  # else the upstream span records them: usage counted once
            self._record_response(op, model, usage)
        if isinstance(content, str):
            self.content = content
            self.prediction = op.output(
                Variable(f"prediction:{span_hex(op)}", 1, content, Category.PREDICTION)
            )
            # An app that writes this completion into memory links the write to this op: the
            # digests of its texts are remembered, not the texts.
            produced.add(_content_texts(content), self)

    # -- the call's role -------------------------------------------------------------------------
    def _answer(self, op: Op) -> None:
        """No memory write stored the output: the call answered (case id, prediction)."""
        with self.lock:
            if self.role != _PENDING:
                return
            self.role = _ANSWER
        set_case_id(op, self.case_id, answer=True)
        if self.content is not None:
            self.prediction = op.output(
                Variable(f"prediction:{span_hex(op)}", 1, self.content, Category.PREDICTION)
            )

    def _decided(self, op: Op, tool_calls: Any) -> None:
        """Tool calls (or an empty reply to a request that offered tools): the call decided
        operations, its outputs; it did not answer."""
        self.role = _DECISION
        op.reclassify(OpKind.EXTRACT, TOOL_CALLS_OP_NAME)
        messages = self._messages(None)
        op.add_inputs(messages)
        sources = {"source_refs": [m.ref for m in messages]}
        base = span_hex(op)
        removals: list[Removal] = []
        for i, call in enumerate(tool_calls, 1):
            function = getattr(call, "function", None)
            name = getattr(function, "name", None)
            raw = getattr(function, "arguments", None)
            try:
                arguments = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                arguments = raw
            value = {"name": name, "arguments": arguments}
            variable = op.output(
                Variable(f"decision:{base}:{i}", 1, value, Category.OTHER, sources)
            )
            texts = matchable_texts(arguments)
            output = _DecisionOutput(self, variable)
            produced.add(texts, output)
            if not texts:  # names records and no content: a removal, carried out by a delete
                removals.append(Removal(output, tuple(_all_leaves(arguments))))
        if removals:
            remember_removals(op.span.get_span_context().trace_id, removals)

    def note_write(self, write: str) -> None:
        """A memory write carries out one of this call's outputs."""
        with self.lock:
            self.writes.add(write)

    def claim(self, text: str, store_id: str | None, write: str) -> Variable | str | None:
        """A memory write stores ``text``, which this call wrote (see ``Producer``)."""
        op = self.op
        if op is None or self.content is None:
            return None
        with self.lock:
            if self.role == _ANSWER:
                return self.prediction
            if self.role == _PENDING:
                self.role = _EXTRACTION
                op.reclassify(OpKind.EXTRACT, EXTRACTION_OP_NAME)
                store_id = store_id or self._store()
                if store_id:
                    op.set_attribute(A.GEN_AI_MEMORY_STORE_ID, store_id)
                messages = self._messages(store_id)
                op.add_inputs(messages)
                sources = [m.ref for m in messages]
                base = span_hex(op)
                self.facts = {
                    t: op.output(
                        Variable(
                            f"fact:{base}:{i}", 1, t, Category.MEMORY, {"source_refs": sources}
                        )
                    )
                    for i, t in enumerate(_content_texts(self.content), 1)
                }
            if self.role != _EXTRACTION:
                return None
            self.writes.add(write)
            return self.facts.get(text)

    def _messages(self, store_id: str | None) -> list[Variable]:
        """The user turns this call read, as ``message`` variables: the turns of its unit of
        work (or of the units it runs in, outermost first) or run that its prompt holds, else
        the user messages of the request. A memory manager's prompt restates the conversation
        it was given inside its instructions: each user turn of that conversation is a message
        of its own, and the instructions and the assistant's replies are none."""
        texts: list[str] = []
        for turns in (
            *(self.scope.given_turns() if self.scope is not None else []),
            self.run.turns if self.run is not None else [],
        ):
            texts = [t for t in turns if normalise(t) in self.prompt]
            if texts:
                break
        if not texts and self.scope is None and self.run is None:
            # Outside any unit of work or run nothing names the turns: the user messages.
            texts = _user_texts(self.kwargs.get("messages"))
        return [
            Variable.from_ref(
                message_ref(t, store_id=store_id, role="user"),
                t,
                category=Category.MESSAGE,
                meta={"role": "user"},
            )
            for t in dict.fromkeys(texts)
        ]

    def resolve(self, written: Sequence[str] | None) -> None:
        """The unit of work ended (see ``Deferred``): a reply no memory write claimed is the
        answer if the unit handed it on (or says nothing), else an extraction that kept
        nothing; one whose outputs writes carried out takes their kind (all updates:
        ``update``, all deletes: ``delete``, else ``extract``)."""
        op = self.op
        if op is None:
            return
        with self.lock:
            if self.role == _PENDING and (written is None or self._handed_on(written)):
                self._answer(op)
            elif self.role == _PENDING:
                # An extraction that kept nothing: no write names its store, the unit's does.
                self.role = _EXTRACTION
                op.reclassify(OpKind.EXTRACT, EXTRACTION_OP_NAME)
                store_id = self._store()
                if store_id:
                    op.set_attribute(A.GEN_AI_MEMORY_STORE_ID, store_id)
                op.add_inputs(self._messages(store_id))
            elif len(self.writes) == 1 and self.writes <= {"update", "delete"}:
                kind = OpKind.UPDATE if "update" in self.writes else OpKind.DELETE
                op.reclassify(kind, DECISION_OP_NAMES[kind])
            close_op(op, None)

    def _store(self) -> str | None:
        """The store this call works for: the one its unit of work (or run) is bound to by now
        (a memory op the unit made, before or after this call), else the store of the
        retrieval its prompt used; ``None`` when nothing says."""
        scope, run = self.scope, self.run
        if scope is not None and scope.store_id:
            return scope.store_id
        if self.store_id:
            return self.store_id
        return run.store_id if run is not None else None

    def _handed_on(self, written: Sequence[str]) -> bool:
        mine = normalise(self.content or "")
        return bool(mine) and any(mine in normalise(text) for text in written)

    @staticmethod
    def _record_response(op: Op, model: Any, usage: Any) -> None:
        if isinstance(model, str):
            op.set_attribute(A.GEN_AI_RESPONSE_MODEL, model)
        if usage is not None:
            for attribute, name in (
                (A.GEN_AI_USAGE_INPUT_TOKENS, "prompt_tokens"),
                (A.GEN_AI_USAGE_OUTPUT_TOKENS, "completion_tokens"),
            ):
                value = getattr(usage, name, None)
                if isinstance(value, int):
                    op.set_attribute(attribute, value)

    def end(self, exc: BaseException | None) -> None:
        if self.ctx is not None:
            self.ctx.run(close_op, self.op, exc)
            return
        op, scope = self.op, self.scope
        if exc is None and scope is not None and op is not None and self.role != _ANSWER:
            op.hold()  # classified when the unit of work ends or memory writes store its output
            scope.add(self)
            return
        close_op(op, exc)


_PENDING, _ANSWER, _EXTRACTION, _DECISION = "pending", "answer", "extraction", "decision"


class _DecisionOutput:
    """A decided operation: memory writes that store its arguments' texts carry it out."""

    __slots__ = ("call", "variable")

    def __init__(self, call: _GenerateCall, variable: Variable) -> None:
        self.call = call
        self.variable = variable

    def claim(self, text: str, store_id: str | None, write: str) -> Variable | str | None:
        self.call.note_write(write)
        return self.variable


def _content_texts(content: str) -> list[str]:
    """The texts a reply holds, each of which a memory write may store: the string leaves of
    its JSON, else its non-empty lines (list markers stripped), and the whole reply."""
    parsed = parse_json_reply(content)
    texts: list[str] = []
    if isinstance(parsed, dict | list):
        texts = _all_leaves(parsed)
    else:
        texts = [_MARKER.sub("", line).strip() for line in content.splitlines()]
    texts.append(content.strip())
    return [t for t in dict.fromkeys(texts) if t]


_MARKER = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")


def _all_leaves(value: Any) -> list[str]:
    out: list[str] = []
    if isinstance(value, str):
        out.append(value.strip())
    elif isinstance(value, dict):
        for item in value.values():
            out.extend(_all_leaves(item))
    elif isinstance(value, list | tuple):
        for item in value:
            out.extend(_all_leaves(item))
    return [t for t in out if t]


def _user_texts(messages: Any) -> list[str]:
    texts: list[str] = []
    if isinstance(messages, list | tuple):
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "user":
                text = prompt_of([message])
                if text.strip():
                    texts.append(text)
    return texts


def _case_id(retrieval: Retrieval | None) -> str | None:
    return baggage_case_id() or (retrieval.case_id if retrieval is not None else None)


class _StreamState:
    """What a stream has delivered so far; ends the op once."""

    def __init__(self, call: _GenerateCall) -> None:
        self.call = call
        self.parts: list[str] = []
        self.model: Any = None
        self.usage: Any = None
        self.done = False

    def add(self, chunk: Any) -> None:
        try:
            if getattr(chunk, "model", None):
                self.model = chunk.model
            if getattr(chunk, "usage", None) is not None:
                self.usage = chunk.usage
            for choice in getattr(chunk, "choices", None) or ():
                if getattr(choice, "index", 0) != 0:
                    continue
                delta = getattr(choice, "delta", None)
                text = getattr(delta, "content", None)
                if isinstance(text, str):
                    self.parts.append(text)
        except Exception:
            internal_error("openai.stream.chunk")

    def finish(self, exc: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        try:
            if exc is None:
                self.call.record("".join(self.parts), self.model, self.usage)
        except Exception:
            self.call.end(None)
            internal_error("openai.stream.result")
            return
        self.call.end(exc)


class _Stream(wrapt.ObjectProxy[Any]):
    """The library's stream, passed through chunk by chunk."""

    def __init__(self, stream: Any, call: _GenerateCall) -> None:
        super().__init__(stream)
        self._self_state = _StreamState(call)

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> Any:
        try:
            chunk = self.__wrapped__.__next__()
        except StopIteration:
            self._self_state.finish(None)
            raise
        except BaseException as exc:
            self._self_state.finish(exc)
            raise
        self._self_state.add(chunk)
        return chunk

    def __enter__(self) -> _Stream:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(exc_type, exc, tb)
        finally:
            self._self_state.finish(exc)

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_state.finish(None)


class _AsyncStream(wrapt.ObjectProxy[Any]):
    """The library's async stream, passed through chunk by chunk."""

    def __init__(self, stream: Any, call: _GenerateCall) -> None:
        super().__init__(stream)
        self._self_state = _StreamState(call)

    def __aiter__(self) -> _AsyncStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_state.finish(None)
            raise
        except BaseException as exc:
            self._self_state.finish(exc)
            raise
        self._self_state.add(chunk)
        return chunk

    async def __aenter__(self) -> _AsyncStream:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, tb)
        finally:
            self._self_state.finish(exc)

    async def close(self) -> None:
        try:
            await self.__wrapped__.close()
        finally:
            self._self_state.finish(None)


__all__ = [
    "EXTRACTION_OP_NAME",
    "OP_NAME",
    "TARGETS",
    "TOOL_CALLS_OP_NAME",
    "OpenAITelemetry",
    "prompt_of",
    "upstream_chat_span",
    "used_records",
]

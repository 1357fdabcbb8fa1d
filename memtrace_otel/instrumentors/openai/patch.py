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
import re
from collections.abc import Callable
from typing import Any

import wrapt
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from memtrace_otel._internal import internal_error
from memtrace_otel.instrumentation import MemTracer, Op, Variable
from memtrace_otel.instrumentors._common import (
    Call,
    Retrieval,
    Retrieved,
    Target,
    baggage_case_id,
    close_op,
    inside_memory_system,
    normalise,
    prompt_for,
    remember_output,
    retrievals_in_context,
    set_case_id,
    span_hex,
    wrapper_for,
)
from memtrace_otel.semconv import Category
from memtrace_otel.semconv import attributes as A

MODULE = "openai.resources.chat.completions"
OP_NAME = "openai.chat.completions"
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
    words or more, when 90% of its words are in the prompt (the app may reformat a little).
    """
    words = set(_WORD.findall(prompt))
    used: dict[str, Retrieved] = {}
    source: Retrieval | None = None
    for retrieval in retrievals:
        for ref, raw, traceparent in retrieval.records:
            text = normalise(raw)
            if not text or ref in used:
                continue
            if text in prompt or _mostly_in(text, words):
                used[ref] = Retrieved(ref, raw, traceparent)
                source = retrieval
    if source is None and retrievals:
        source = retrievals[-1]
    return list(used.values()), source


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
        self.stream = kwargs.get("stream") is True
        # A stream outlives the call: its op is entered in a context of its own, so that
        # ending it later, wherever the stream is consumed, leaves the caller's context alone.
        self.ctx: contextvars.Context | None = contextvars.copy_context() if self.stream else None

    def start(self) -> None:
        kwargs = self.kwargs
        prompt = normalise(prompt_of(kwargs.get("messages")))
        records, retrieval = used_records(prompt, retrievals_in_context())
        self.upstream = upstream_chat_span()
        attributes: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: GEN_AI_CHAT}
        if self.upstream is None:  # else they are the upstream span's, already set
            attributes[A.GEN_AI_PROVIDER_NAME] = GEN_AI_PROVIDER_OPENAI
            model = kwargs.get("model")
            if isinstance(model, str):
                attributes[A.GEN_AI_REQUEST_MODEL] = model
        op = self.mt.generate(
            OP_NAME,
            inputs=[r.variable() for r in records],
            prompt=prompt_for(prompt),
            store_id=retrieval.store_id if retrieval is not None else None,
            attributes=attributes,
            span=self.upstream,
        )
        self.op = op
        if self.ctx is not None:
            self.ctx.run(op.__enter__)
            case_id = self.ctx.run(_case_id, retrieval)
        else:
            op.__enter__()
            case_id = _case_id(retrieval)
        set_case_id(op, case_id)

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
        choices = getattr(result, "choices", None)
        if not choices:
            return result  # e.g. a raw response: returned as is, nothing recorded
        message = getattr(choices[0], "message", None)
        self.record(
            getattr(message, "content", None),
            getattr(result, "model", None),
            getattr(result, "usage", None),
        )
        return result

    def record(self, content: Any, model: Any, usage: Any) -> None:
        op = self.op
        if op is None or not op.is_traced:
            return
        if self.upstream is None:  # else the upstream span records them: usage counted once
            self._record_response(op, model, usage)
        if isinstance(content, str):
            out = op.output(Variable(f"prediction:{span_hex(op)}", 1, content, Category.PREDICTION))
            # An app that writes this completion into memory (a merge its job asked for) links
            # the write to this op: the digest is remembered, not the text.
            remember_output(content, out.ref, out.traceparent)

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
        else:
            close_op(self.op, exc)


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
    "OP_NAME",
    "TARGETS",
    "OpenAITelemetry",
    "prompt_of",
    "upstream_chat_span",
    "used_records",
]

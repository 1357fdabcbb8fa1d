"""Our OpenAI instrumentor beside the upstream one (``opentelemetry-instrumentation-openai-v2``).

Both wrap ``Completions.create``. With both active, each chat call must have **one** chat span
(upstream's, enriched with our op attributes, links and events), and the token totals over the
spans must equal those of a run without our instrumentor, in whichever order the two were
enabled. Real ``openai`` client, real upstream instrumentor, the scripted loopback server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import wrapt
from langgraph.store.memory import InMemoryStore
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as UpstreamInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.instrumentation import CaptureConfig, WriterRegistry
from memtrace_otel.instrumentors._common import forget_retrievals
from memtrace_otel.instrumentors.langgraph import LangGraphInstrumentor
from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
from memtrace_otel.semconv import attributes as A
from tests._instrumentor_helpers import LLMScript
from tests._openai_server import Reply, ScriptedOpenAI

NS = ("memories", "dana")
UPSTREAM_SCOPES = ("opentelemetry.instrumentation.openai_v2", "opentelemetry.util.genai.handler")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAI]:
    with ScriptedOpenAI(LLMScript(answer=lambda prompt: "Ana lives in Lisbon")) as srv:
        yield srv


@pytest.fixture(scope="module", autouse=True)
def _fresh_semconv_mode() -> Iterator[None]:
    """The upstream instrumentor caches, process-wide, the GenAI conventions mode it reads from
    ``OTEL_SEMCONV_STABILITY_OPT_IN`` on first use: forget it around this module, so that neither
    an earlier test's environment leaks in here nor ours into a later test's."""
    from opentelemetry.instrumentation._semconv import (
        _OpenTelemetrySemanticConventionStability as Stability,
    )

    Stability._initialized = False
    yield
    Stability._initialized = False


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    yield
    for instrumentor in (OpenAIInstrumentor(), UpstreamInstrumentor(), LangGraphInstrumentor()):
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    forget_retrievals()


def _enable(which: str, provider: TracerProvider, registry: WriterRegistry) -> None:
    if which == "upstream":
        UpstreamInstrumentor().instrument(tracer_provider=provider)
    else:
        OpenAIInstrumentor().instrument(
            tracer_provider=provider,
            capture=CaptureConfig(mode="SPAN_AND_EVENT"),
            registry=registry,
        )


def _calls(base_url: str) -> list[int]:
    """Three chat calls (plain with a memory in the prompt, stream, async); the tokens each
    response reported (prompt + completion), as the client saw them."""
    store = InMemoryStore()
    store.put(NS, "ana", {"text": "Ana lives in Porto"})
    hits = store.search(NS, query="Ana")
    messages = [
        {"role": "system", "content": "Memories:\n" + "\n".join(h.value["text"] for h in hits)},
        {"role": "user", "content": "Where does Ana live?"},
    ]
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    seen: list[int] = []
    plain = client.chat.completions.create(model="gpt-4.1-mini", messages=messages)
    assert plain.usage is not None
    seen.append(plain.usage.prompt_tokens + plain.usage.completion_tokens)
    stream = client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
    )
    with stream as chunks:
        for chunk in chunks:
            if chunk.usage is not None:
                seen.append(chunk.usage.prompt_tokens + chunk.usage.completion_tokens)

    async def one_async() -> int:
        aclient = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
        reply = await aclient.chat.completions.create(model="gpt-4.1-mini", messages=messages)
        assert reply.usage is not None
        return reply.usage.prompt_tokens + reply.usage.completion_tokens

    seen.append(asyncio.run(one_async()))
    return seen


def _chat_spans(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get(A.GEN_AI_OPERATION_NAME) == "chat"]


def _tokens(spans: list[ReadableSpan]) -> int:
    return sum(
        int((s.attributes or {}).get(key, 0))  # type: ignore[arg-type]
        for s in spans
        for key in (A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS)
    )


def _run(
    enabled: list[str], server: ScriptedOpenAI, provider: TracerProvider
) -> tuple[list[ReadableSpan], int]:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = WriterRegistry()  # shared: the chat op links to the store's writer
    LangGraphInstrumentor().instrument(tracer_provider=provider, registry=registry)
    for which in enabled:
        _enable(which, provider, registry)
    try:
        seen = _calls(server.base_url)
    finally:
        for instrumentor in (OpenAIInstrumentor(), UpstreamInstrumentor(), LangGraphInstrumentor()):
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()
        forget_retrievals()
    return _chat_spans(exporter.get_finished_spans()), sum(seen)


@pytest.mark.parametrize("order", [["ours", "upstream"], ["upstream", "ours"]])
def test_one_chat_span_per_call_and_tokens_counted_once(
    order: list[str], server: ScriptedOpenAI
) -> None:
    provider = TracerProvider()
    upstream_only, truth = _run(["upstream"], server, provider)
    ours_only, _ = _run(["ours"], server, provider)
    both, _ = _run(order, server, provider)

    assert len(upstream_only) == len(ours_only) == len(both) == 3  # one chat span per call
    assert _tokens(both) == _tokens(upstream_only) == _tokens(ours_only) == truth > 0
    for span in both:
        attributes = span.attributes or {}
        # The upstream span (its scope, depending on the upstream version, and its name),
        # carrying our op.
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name in UPSTREAM_SCOPES
        assert span.name == "chat gpt-4.1-mini"
        assert attributes[A.MEMTRACE_OP_KIND] == "generate"
        assert attributes[A.MEMTRACE_OP_NAME] == "openai.chat.completions"
        assert attributes[A.MEMTRACE_OP_INPUTS] == ("langgraph:memories/dana/ana@1",)
        [output] = attributes[A.MEMTRACE_OP_OUTPUTS]  # type: ignore[misc]
        assert str(output).startswith("prediction:")
        assert [dict(link.attributes or {}) for link in span.links] == [
            {A.MEMTRACE_VARIABLE_REF: "langgraph:memories/dana/ana@1"}
        ]
        values = [
            (e.attributes or {}).get(A.MEMTRACE_VARIABLE_VALUE)
            for e in span.events
            if e.name == A.MEMTRACE_VARIABLE_EVENT
        ]
        assert values == ["Ana lives in Lisbon"]
        assert span.status.is_ok
    # Alone, ours writes the current provider attribute (and no deprecated one).
    for span in ours_only:
        attributes = span.attributes or {}
        assert attributes[A.GEN_AI_PROVIDER_NAME] == "openai"
        assert A.GEN_AI_SYSTEM not in attributes
    provider.shutdown()


def test_errors_stay_upstreams_and_unwrapping_in_any_order(server: ScriptedOpenAI) -> None:
    from openai.resources.chat.completions import Completions

    original = Completions.__dict__["create"]
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _enable("upstream", provider, WriterRegistry())
    _enable("ours", provider, WriterRegistry())  # goes beneath upstream's wrapper
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    server.script(Reply(500, {"error": {"message": "boom"}}))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    [span] = _chat_spans(exporter.get_finished_spans())
    assert span.attributes is not None and span.attributes[A.MEMTRACE_OP_KIND] == "generate"
    assert not span.status.is_ok
    # The exception is recorded once, by its owner.
    assert [e.name for e in span.events].count("exception") <= 1

    # Ours out first: upstream's wrapper stays and works; then upstream's out: the original.
    OpenAIInstrumentor().uninstrument()
    top: Any = Completions.__dict__["create"]
    assert isinstance(top, wrapt.FunctionWrapper)
    assert not isinstance(top.__wrapped__, wrapt.FunctionWrapper)
    UpstreamInstrumentor().uninstrument()
    assert Completions.__dict__["create"] is original
    provider.shutdown()

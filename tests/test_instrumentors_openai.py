"""The OpenAI instrumentor against the real ``openai`` client and a scripted server.

Memories come from LangGraph's real ``InMemoryStore`` (instrumented too), so the generate op can
be checked to read exactly the retrieved records its prompt used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import wrapt
from langgraph.store.memory import InMemoryStore
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.instrumentation import CaptureConfig, WriterRegistry
from memtrace_otel.instrumentors import declare_prompt, message_ref, using_prompt
from memtrace_otel.instrumentors._common import forget_prompts, forget_retrievals
from memtrace_otel.instrumentors.langgraph import LangGraphInstrumentor
from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
from memtrace_otel.semconv import attributes as A
from tests._instrumentor_helpers import LLMScript, attribute, by_op, write_spans
from tests._openai_server import Reply, ScriptedOpenAI

NS = ("memories", "dana")
TEMPLATE = "Answer the question using only these memories.\n{memories}\nQuestion: {question}"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAI]:
    with ScriptedOpenAI(LLMScript(answer=lambda prompt: "Ana lives in Lisbon")) as srv:
        yield srv


@pytest.fixture
def instrumented(memtrace_provider: TracerProvider) -> Iterator[None]:
    options: dict[str, Any] = {
        "tracer_provider": memtrace_provider,
        "capture": CaptureConfig(mode="SPAN_AND_EVENT"),
        "registry": WriterRegistry(),
    }
    LangGraphInstrumentor().instrument(**options)
    OpenAIInstrumentor().instrument(**options)
    yield
    OpenAIInstrumentor().uninstrument()
    LangGraphInstrumentor().uninstrument()
    forget_retrievals()
    forget_prompts()


@pytest.fixture
def store() -> InMemoryStore:
    store = InMemoryStore()
    store.put(NS, "ana", {"text": "Ana lives in Porto"})
    store.put(NS, "tea", {"text": "Ana likes green tea"})
    store.put(NS, "hike", {"text": "User loves hiking on weekends"})
    return store


def _messages(store: InMemoryStore, used: list[str]) -> list[dict[str, str]]:
    hits = store.search(NS, query="Ana", limit=10)
    lines = "\n".join(h.value["text"] for h in hits if h.key in used)
    return [
        {
            "role": "system",
            "content": TEMPLATE.format(memories=lines, question="Where does Ana live?"),
        },
        {"role": "user", "content": "Where does Ana live?"},
    ]


def _generate(exporter: InMemorySpanExporter) -> dict[str, Any]:
    [op] = by_op(exporter.get_finished_spans())["openai.chat.completions"]
    return op


def test_generate_reads_the_memories_its_prompt_used(
    server: ScriptedOpenAI,
    instrumented: None,
    store: InMemoryStore,
    memtrace_exporter: InMemorySpanExporter,
) -> None:
    template = declare_prompt("prompt:answer", TEMPLATE)
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    result = client.chat.completions.create(
        model="gpt-4.1-mini", messages=_messages(store, ["ana", "tea"])
    )
    assert result.choices[0].message.content == "Ana lives in Lisbon"

    op = _generate(memtrace_exporter)
    [search] = by_op(memtrace_exporter.get_finished_spans())["langgraph.store.search"]
    assert (op["kind"], op["name"], op["gen_ai_operation"]) == (
        "generate",
        f"{A.OP_SPAN_NAME_PREFIX}generate openai.chat.completions",
        "chat",
    )
    # Only the retrieved records that appear in the prompt; the template first.
    assert op["inputs"] == [
        template.ref,
        "langgraph:memories/dana/ana@1",
        "langgraph:memories/dana/tea@1",
    ]
    assert {A.MEMTRACE_VARIABLE_REF: "langgraph:memories/dana/ana@1"} in op["links"]
    assert (op["case"], op["store"]) == (search["case"], "memories/dana")
    [output] = op["outputs"]
    assert output.startswith("prediction:")
    [event] = [e for e in op["events"] if e[A.MEMTRACE_VARIABLE_REF] == output]
    assert event[A.MEMTRACE_VARIABLE_VALUE] == "Ana lives in Lisbon"
    [span] = [
        s for s in memtrace_exporter.get_finished_spans() if s.context.span_id == op["span_id"]
    ]
    attributes = dict(span.attributes or {})
    assert attributes[A.MEMTRACE_PROMPT_REF] == template.ref
    assert attributes[A.GEN_AI_REQUEST_MODEL] == "gpt-4.1-mini"
    assert attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 5


def test_planted_response_failure_is_attributed(
    server: ScriptedOpenAI,
    instrumented: None,
    store: InMemoryStore,
    memtrace_exporter: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    # The memory that holds the answer reaches the prompt; the model still answers wrongly.
    client.chat.completions.create(model="gpt-4.1-mini", messages=_messages(store, ["ana"]))
    op = _generate(memtrace_exporter)
    traces = write_spans(memtrace_exporter.get_finished_spans(), tmp_path / "traces.jsonl")
    evidence = message_ref({"text": "Ana lives in Porto"}, store_id="memories/dana", role="put")
    verdict = attribute(
        traces,
        [
            {
                "case_id": op["case"],
                "question": "Where does Ana live?",
                "gold_answers": ["Porto"],
                "evidence_refs": [evidence],
            }
        ],
    )[op["case"]]
    assert (verdict.error_type, verdict.op_name) == ("ResponseError", "openai.chat.completions")


def test_streams_are_passed_through(
    server: ScriptedOpenAI,
    instrumented: None,
    store: InMemoryStore,
    memtrace_exporter: InMemorySpanExporter,
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=_messages(store, ["ana"]),
        stream=True,
        stream_options={"include_usage": True},
    )
    assert isinstance(stream, openai.Stream)
    assert "openai.chat.completions" not in by_op(memtrace_exporter.get_finished_spans())
    with stream as chunks:
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Ana lives in Lisbon"
    op = _generate(memtrace_exporter)
    assert op["inputs"] == ["langgraph:memories/dana/ana@1"]
    [event] = [e for e in op["events"] if e[A.MEMTRACE_VARIABLE_REF] == op["outputs"][0]]
    assert event[A.MEMTRACE_VARIABLE_VALUE] == "Ana lives in Lisbon"


def test_async_calls_and_async_streams(
    server: ScriptedOpenAI,
    instrumented: None,
    store: InMemoryStore,
    memtrace_exporter: InMemorySpanExporter,
) -> None:
    template = declare_prompt("prompt:other", "Nothing in this template matches the prompt {x}")

    async def run() -> list[str]:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        messages = _messages(store, ["hike"])
        with using_prompt(template):  # an explicit template wins over matching
            plain = await client.chat.completions.create(model="m", messages=messages)
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True)
        assert isinstance(stream, openai.AsyncStream)
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        return [plain.choices[0].message.content or "", "".join(parts)]

    assert asyncio.run(run()) == ["Ana lives in Lisbon", "Ana lives in Lisbon"]
    first, second = by_op(memtrace_exporter.get_finished_spans())["openai.chat.completions"]
    assert first["inputs"] == [template.ref, "langgraph:memories/dana/hike@1"]
    assert second["inputs"] == ["langgraph:memories/dana/hike@1"]
    assert len(second["outputs"]) == 1


def test_errors_and_calls_without_memories(
    server: ScriptedOpenAI, instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    assert reply.choices[0].message.content == "Ana lives in Lisbon"
    server.script(Reply(500, {"error": {"message": "boom"}}))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
    ok, failed = by_op(memtrace_exporter.get_finished_spans())["openai.chat.completions"]
    assert ok["inputs"] == [] and ok["status"] == "UNSET" and ok["case"]
    assert failed["status"] == "ERROR" and failed["outputs"] == []


def test_uninstrument_and_lazy_import(memtrace_provider: TracerProvider) -> None:
    from openai.resources.chat.completions import Completions

    OpenAIInstrumentor().instrument(tracer_provider=memtrace_provider)
    assert isinstance(Completions.__dict__["create"], wrapt.FunctionWrapper)
    OpenAIInstrumentor().uninstrument()
    assert not isinstance(Completions.__dict__["create"], wrapt.FunctionWrapper)


@pytest.mark.parametrize("stream", [False, True])
def test_the_app_reads_the_answers_case_id_and_traceparent(
    server: ScriptedOpenAI,
    instrumented: None,
    store: InMemoryStore,
    memtrace_exporter: InMemorySpanExporter,
    stream: bool,
) -> None:
    from memtrace_otel.instrumentation import format_traceparent, last_answer
    from memtrace_otel.instrumentation._feedback import forget_answers

    forget_answers()
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    result = client.chat.completions.create(
        model="gpt-4.1-mini", messages=_messages(store, ["ana"]), stream=stream
    )
    if stream:
        "".join(c.choices[0].delta.content or "" for c in result if c.choices)
    # No case id was set by the app: the case is the search's trace, named without user code.
    answer = last_answer()
    assert answer is not None
    op = _generate(memtrace_exporter)
    [span] = [
        s for s in memtrace_exporter.get_finished_spans() if s.context.span_id == op["span_id"]
    ]
    assert answer.case_id == op["case"] and len(answer.case_id) == 32
    assert answer.traceparent == format_traceparent(span.context)

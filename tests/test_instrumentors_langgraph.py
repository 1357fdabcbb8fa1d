"""The LangGraph store instrumentor against the real ``InMemoryStore``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import wrapt
from langgraph.store.base import GetOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.instrumentation import CaptureConfig, WriterRegistry, suppress_tracing
from memtrace_otel.instrumentors import message_ref
from memtrace_otel.instrumentors._common import forget_prompts, forget_retrievals
from memtrace_otel.instrumentors.langgraph import LangGraphInstrumentor
from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
from memtrace_otel.semconv import attributes as A
from tests._instrumentor_helpers import LLMScript, attribute, by_op, ops, write_spans
from tests._openai_server import ScriptedOpenAI

NS = ("memories", "dana")
STORE = "memories/dana"


@pytest.fixture
def instrumented(memtrace_provider: TracerProvider) -> Iterator[None]:
    options = {
        "tracer_provider": memtrace_provider,
        "capture": CaptureConfig(mode="SPAN_AND_EVENT"),
        "registry": WriterRegistry(),
    }
    LangGraphInstrumentor().instrument(**options)
    OpenAIInstrumentor().instrument(**options)
    yield
    LangGraphInstrumentor().uninstrument()
    OpenAIInstrumentor().uninstrument()
    forget_retrievals()
    forget_prompts()


def test_put_get_search_delete_with_versions(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    store = InMemoryStore()
    store.put(NS, "ana", {"text": "Ana lives in Porto"})
    store.put(namespace=NS, key="ana", value={"text": "Ana lives in Lisbon"})
    item = store.get(NS, "ana")
    hits = store.search(("memories",), query="Ana", limit=5)
    store.delete(NS, "ana")
    assert item is not None and item.value == {"text": "Ana lives in Lisbon"}
    assert [h.key for h in hits] == ["ana"]

    got = by_op(memtrace_exporter.get_finished_spans())
    rid = "langgraph:memories/dana/ana"
    create, update = got["langgraph.store.put"]
    first = message_ref({"text": "Ana lives in Porto"}, store_id=STORE, role="put")
    second = message_ref({"text": "Ana lives in Lisbon"}, store_id=STORE, role="put")
    assert (create["kind"], create["name"], create["inputs"], create["outputs"]) == (
        "create",
        "create_memory",
        [first],
        [f"{rid}@1"],
    )
    assert (update["kind"], update["inputs"], update["outputs"]) == (
        "update",
        [f"{rid}@1", second],
        [f"{rid}@2"],
    )
    assert {A.MEMTRACE_VARIABLE_REF: f"{rid}@1"} in update["links"]
    assert all(o["store"] == STORE for o in (create, update))
    [get] = got["langgraph.store.get"]
    assert get["kind"] == "retrieve" and get["inputs"] == [f"{rid}@2"] and get["case"]
    [search] = got["langgraph.store.search"]
    assert search["store"] == "memories" and search["inputs"][1:] == [f"{rid}@2"]
    [delete] = got["langgraph.store.delete"]
    assert (delete["kind"], delete["inputs"], delete["outputs"]) == (
        "delete",
        [f"{rid}@2"],
        [f"{rid}@3"],
    )
    # The public methods go through batch(): still one op each.
    assert len(ops(memtrace_exporter.get_finished_spans())) == 5


def test_existing_keys_and_batches(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    store = InMemoryStore()
    with suppress_tracing():
        store.put(NS, "old", {"text": "written before we looked"})
    assert memtrace_exporter.get_finished_spans() == ()
    results = store.batch(
        [
            PutOp(NS, "old", {"text": "rewritten"}),
            PutOp(NS, "new", {"text": "fresh"}),
            GetOp(NS, "old"),
            SearchOp(NS, None, 10, 0, None),
        ]
    )
    # Reads see the store as it was before the batch's writes.
    assert results[2] is not None and results[2].value == {"text": "written before we looked"}
    spans = memtrace_exporter.get_finished_spans()
    got = by_op(spans)
    puts = {o["outputs"][0]: o for o in got["langgraph.store.put"]}
    assert puts["langgraph:memories/dana/old@2"]["kind"] == "update"  # existed: taken as @1
    assert puts["langgraph:memories/dana/new@1"]["kind"] == "create"
    assert got["langgraph.store.get"][0]["inputs"] == ["langgraph:memories/dana/old@1"]
    assert got["langgraph.store.search"][0]["inputs"] == ["langgraph:memories/dana/old@1"]
    # The ops of one batch are siblings, not nested in each other.
    assert {o["parent"] for o in ops(spans)} == {None}


def test_async_store(instrumented: None, memtrace_exporter: InMemorySpanExporter) -> None:
    async def run() -> None:
        store = InMemoryStore()
        await store.aput(NS, "tom", {"text": "User has a cat named Tom"})
        assert (await store.aget(NS, "tom")) is not None
        assert len(await store.asearch(NS, query="cat")) == 1
        await store.adelete(NS, "tom")

    asyncio.run(run())
    got = by_op(memtrace_exporter.get_finished_spans())
    assert got["langgraph.store.put"][0]["outputs"] == ["langgraph:memories/dana/tom@1"]
    assert got["langgraph.store.search"][0]["inputs"][1:] == ["langgraph:memories/dana/tom@1"]
    assert got["langgraph.store.delete"][0]["outputs"] == ["langgraph:memories/dana/tom@2"]


def test_planted_update_failure_is_attributed(
    instrumented: None, memtrace_exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    store = InMemoryStore()
    porto = {"text": "My sister Ana lives in Porto"}
    store.put(NS, "ana", porto)
    store.put(NS, "hobby", {"text": "I love hiking in the mountains"})
    store.put(NS, "ana", {"text": "Ana likes green tea"})  # the overwrite loses where she lives
    with ScriptedOpenAI(LLMScript(answer=lambda prompt: "I don't know")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        hits = store.search(NS, query="Where does Ana live?")
        memories = "\n".join(f"- {h.value['text']}" for h in hits)
        answer = client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[
                {"role": "system", "content": f"Answer from these memories:\n{memories}"},
                {"role": "user", "content": "Where does Ana live?"},
            ],
        )
    assert answer.choices[0].message.content == "I don't know"
    spans = memtrace_exporter.get_finished_spans()
    got = by_op(spans)
    [search], [generate] = got["langgraph.store.search"], got["openai.chat.completions"]
    assert generate["case"] == search["case"] and generate["store"] == STORE
    assert sorted(generate["inputs"]) == sorted(search["inputs"][1:])

    traces = write_spans(spans, tmp_path / "traces.jsonl")
    verdict = attribute(
        traces,
        [
            {
                "case_id": search["case"],
                "question": "Where does Ana live?",
                "gold_answers": ["Porto"],
                "evidence_refs": [message_ref(porto, store_id=STORE, role="put")],
            }
        ],
    )[search["case"]]
    assert (verdict.error_type, verdict.op_name) == ("UpdateError", "langgraph.store.put")
    [overwrite] = [
        o for o in got["langgraph.store.put"] if o["outputs"] == ["langgraph:memories/dana/ana@2"]
    ]
    assert verdict.op_id == f"{overwrite['span_id']:016x}"


def test_uninstrument(
    memtrace_provider: TracerProvider, memtrace_exporter: InMemorySpanExporter
) -> None:
    from langgraph.store.base import BaseStore

    LangGraphInstrumentor().instrument(tracer_provider=memtrace_provider)
    assert isinstance(BaseStore.__dict__["put"], wrapt.FunctionWrapper)
    assert isinstance(InMemoryStore.__dict__["batch"], wrapt.FunctionWrapper)
    LangGraphInstrumentor().uninstrument()
    assert not isinstance(BaseStore.__dict__["put"], wrapt.FunctionWrapper)
    assert not isinstance(InMemoryStore.__dict__["abatch"], wrapt.FunctionWrapper)
    InMemoryStore().put(NS, "k", {"text": "v"})
    assert memtrace_exporter.get_finished_spans() == ()

"""The LangGraph store instrumentor against the real ``InMemoryStore``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import wrapt
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore, GetOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.instrumentation import (
    CaptureConfig,
    WriterRegistry,
    last_answer,
    suppress_tracing,
)
from memtrace_otel.instrumentors import message_ref
from memtrace_otel.instrumentors._common import forget_prompts, forget_retrievals
from memtrace_otel.instrumentors.langgraph import LangGraphInstrumentor
from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
from memtrace_otel.semconv import attributes as A
from tests._instrumentor_helpers import LLMScript, attribute, by_op, ops, write_spans
from tests._openai_server import Reply, ScriptedOpenAI, chat_completion

NS = ("memories", "dana")
STORE = "memories/dana"
QUESTION = {"messages": [{"role": "user", "content": "Where does Ana live?"}]}
CONFIG = {"configurable": {"user_id": "dana"}}


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


# -- A memory agent as LangGraph's memory docs write one -----------------------------------------

EXTRACT_SYSTEM = "Extract the lasting facts about the user from their message as a JSON list."


def _agent(client: openai.OpenAI, store: InMemoryStore) -> Any:
    """An extraction node that puts what the model extracted, and an answer node that searches
    the store first: no tracing code."""
    from langgraph.graph import START, MessagesState, StateGraph

    def extract(
        state: MessagesState, config: RunnableConfig, *, store: BaseStore
    ) -> dict[str, Any]:
        turn = state["messages"][-1].content
        reply = client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[
                {"role": "system", "content": EXTRACT_SYSTEM},
                {"role": "user", "content": turn},
            ],
        )
        namespace = ("memories", config["configurable"]["user_id"])
        for i, fact in enumerate(json.loads(reply.choices[0].message.content or "[]")):
            store.put(namespace, f"fact-{len(turn)}-{i}", {"text": fact})
        return {}

    def answer(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        question = state["messages"][-1].content
        namespace = ("memories", config["configurable"]["user_id"])
        hits = store.search(namespace, query=question, limit=3)
        known = "\n".join(f"- {h.value['text']}" for h in hits)
        reply = client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[
                {"role": "system", "content": f"What you know about the user:\n{known}"},
                {"role": "user", "content": question},
            ],
        )
        return {"messages": [{"role": "assistant", "content": reply.choices[0].message.content}]}

    builder = StateGraph(MessagesState)
    builder.add_node("extract", extract)
    builder.add_node("answer", answer)
    builder.add_edge(START, "extract")
    builder.add_edge("extract", "answer")
    return builder.compile(store=store)


def _agent_script(facts: dict[str, list[str]], answers: dict[str, str]) -> Any:
    def respond(kind: str, body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        user = body["messages"][-1]["content"]
        if system == EXTRACT_SYSTEM:
            return json.dumps(next((f for k, f in facts.items() if k in user), []))
        return next((a for k, a in answers.items() if k in user), "I don't know")

    return respond


def test_extraction_node_is_an_extract_op_and_puts_link_to_it(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    turn = "My sister Ana moved to Porto last spring."
    script = _agent_script({"moved": ["User's sister Ana lives in Porto"]}, {"Ana": "In Porto."})
    with ScriptedOpenAI(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        graph = _agent(client, InMemoryStore())
        config = {"configurable": {"user_id": "dana"}}
        graph.invoke({"messages": [{"role": "user", "content": turn}]}, config)
        noted = last_answer()  # outside the nodes, after the run
        graph.invoke({"messages": [{"role": "user", "content": "Where does Ana live?"}]}, config)
        asked = last_answer()
    spans = memtrace_exporter.get_finished_spans()
    got = by_op(spans)
    [extraction] = [o for o in got["openai.chat.extraction"] if o["outputs"]]
    assert extraction["kind"] == "extract" and extraction["case"] is None
    assert extraction["name"] == "memtrace.extract openai.chat.extraction"
    turn_ref = message_ref(turn, store_id=STORE, role="user")
    assert turn_ref in extraction["inputs"]
    [fact_ref] = [
        r
        for r in extraction["outputs"]
        if r.startswith("fact:")
        and any(e.get(A.MEMTRACE_VARIABLE_REF) == r for e in extraction["events"])
    ][:1]
    [put] = [o for o in got["langgraph.store.put"] if o["outputs"][0].endswith("@1")][:1]
    assert put["inputs"] == [fact_ref]
    assert {A.MEMTRACE_VARIABLE_REF: fact_ref} in put["links"]
    # The answers are generate ops with a case id; last_answer() names the run's answer.
    answers = got["openai.chat.completions"]
    assert all(o["kind"] == "generate" and o["case"] for o in answers)
    assert asked is not None and noted is not None and asked.case_id != noted.case_id
    last = answers[-1]
    assert asked.case_id == last["case"] and f"{last['span_id']:016x}" in asked.traceparent


@pytest.mark.parametrize("run", ["invoke", "stream"])
def test_distorted_extraction_is_an_extraction_error(
    instrumented: None, memtrace_exporter: InMemorySpanExporter, tmp_path: Path, run: str
) -> None:
    """Invoked, or streamed by an app that shows the answer as it comes (the answer made on
    LangGraph's thread pool, beside a log node): the same verdict, on the case last_answer()
    names."""
    turn = "My sister Ana moved to Porto last spring."
    script = _agent_script(
        {"Ana moved": ["User's sister Ana lives in Lisbon"]}, {"Ana": "She lives in Lisbon."}
    )
    with ScriptedOpenAI(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        config = {"configurable": {"user_id": "dana"}}
        if run == "invoke":
            graph = _agent(client, InMemoryStore())
            graph.invoke({"messages": [{"role": "user", "content": turn}]}, config)
            graph.invoke(QUESTION, config)
        else:
            graph = _parallel_agent(client, InMemoryStore())
            for _ in graph.stream({"messages": [{"role": "user", "content": turn}]}, config):
                pass
            for _ in graph.stream(QUESTION, config):
                pass
        asked = last_answer()
    assert asked is not None
    spans = memtrace_exporter.get_finished_spans()
    traces = write_spans(spans, tmp_path / "traces.jsonl")
    case = {
        "case_id": asked.case_id,
        "question": "Where does Ana live?",
        "gold_answers": ["Porto"],
    }
    verdict = attribute(traces, [case])[asked.case_id]
    [extraction] = [o for o in by_op(spans)["openai.chat.extraction"] if o["outputs"]]
    assert (verdict.error_type, verdict.op_name) == ("ExtractionError", "openai.chat.extraction")
    assert verdict.op_id == f"{extraction['span_id']:016x}"


def _tool_reply(*calls: tuple[str, dict[str, Any]]) -> Reply:
    body = chat_completion("")
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a)},
            }
            for i, (n, a) in enumerate(calls)
        ],
    }
    body["choices"][0]["finish_reason"] = "tool_calls"
    return Reply(200, body)


def test_tool_call_decisions_are_an_extract_op_the_writes_carry_out(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    """A trustcall-style manager: the model decides insert/remove through tool calls, the app
    writes what it decided; the decision is never taken for the answer."""
    from langgraph.graph import START, MessagesState, StateGraph

    store = InMemoryStore()
    with suppress_tracing():
        store.put(NS, "old", {"kind": "Memory", "content": {"content": "User works at a bakery"}})
    with ScriptedOpenAI() as server:
        server.script(
            Reply(200, "Congratulations on the new job!"),
            _tool_reply(
                ("Memory", {"content": "User now works as a nurse"}),
                ("RemoveDoc", {"json_doc_id": "old"}),
            ),
        )
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)

        def chat(state: MessagesState, *, store: BaseStore) -> dict[str, Any]:
            turn = state["messages"][-1].content
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": turn}]
            )
            decided = client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": f"Manage memories for: {turn}"}],
                tools=[{"type": "function", "function": {"name": "Memory", "parameters": {}}}],
            )
            for call in decided.choices[0].message.tool_calls or []:
                args = json.loads(call.function.arguments)
                if call.function.name == "RemoveDoc":
                    store.delete(NS, args["json_doc_id"])
                else:
                    store.put(NS, "new", {"kind": "Memory", "content": args})
            return {
                "messages": [{"role": "assistant", "content": reply.choices[0].message.content}]
            }

        builder = StateGraph(MessagesState)
        builder.add_node("chat", chat)
        builder.add_edge(START, "chat")
        graph = builder.compile(store=store)
        turn = "I quit the bakery and started as a nurse."
        graph.invoke({"messages": [{"role": "user", "content": turn}]})
        asked = last_answer()
    got = by_op(memtrace_exporter.get_finished_spans())
    [decision] = got["openai.chat.tool_calls"]
    assert decision["kind"] == "extract" and decision["case"] is None
    assert message_ref(turn, role="user") in decision["inputs"]
    insert, remove = decision["outputs"]
    [put] = got["langgraph.store.put"]
    assert insert in put["inputs"] and {A.MEMTRACE_VARIABLE_REF: insert} in put["links"]
    [delete] = got["langgraph.store.delete"]
    assert remove in delete["inputs"]
    [answer] = got["openai.chat.completions"]
    assert answer["kind"] == "generate" and asked is not None and asked.case_id == answer["case"]


def test_a_reply_neither_stored_nor_handed_on_is_an_extraction_that_kept_nothing(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    """The note taker extracted nothing (``[]``): no put claims the reply and the node hands it
    to nothing, so it is an extract op reading the user's turn, not an answer."""
    turn = "Heads up: my cousin Ilse cannot stand coriander."
    with ScriptedOpenAI(_agent_script({"coriander": []}, {})) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        graph = _agent(client, InMemoryStore())
        graph.invoke(
            {"messages": [{"role": "user", "content": turn}]}, {"configurable": {"user_id": "dana"}}
        )
    got = by_op(memtrace_exporter.get_finished_spans())
    [kept_nothing] = [o for o in got["openai.chat.extraction"] if not o["outputs"]]
    assert kept_nothing["kind"] == "extract" and kept_nothing["case"] is None
    assert kept_nothing["inputs"] == [message_ref(turn, role="user")]
    assert "langgraph.store.put" not in got
    [answer] = got["openai.chat.completions"]  # the answer node's reply, handed on
    assert answer["kind"] == "generate" and answer["case"]


def test_an_extraction_that_kept_nothing_joins_its_users_store_never_another_users(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    """Two users in sequence. The app lists Ana's notes (a root search, outside any run), then
    Bo's note taker keeps nothing in Bo's first run: its extract op must not take Ana's store
    (it used to: the last root search of the thread) but Bo's, the namespace Ana's runs made
    from their ``user_id``; after a run of Bo's that worked in Bo's store, the same again. The
    user's turn is a message of that store."""
    script = _agent_script(
        {
            "Porto": ["User's sister Ana lives in Porto"],
            "Lyon": ["User's friend Cleo lives in Lyon"],
        },
        {},
    )
    ana, bo = {"configurable": {"user_id": "ana"}}, {"configurable": {"user_id": "bo"}}
    quiet = ["Heads up: my cousin Ilse cannot stand coriander.", "My uncle Rolf hums a lot."]
    with ScriptedOpenAI(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        store = InMemoryStore()
        graph = _agent(client, store)
        graph.invoke({"messages": [{"role": "user", "content": "My sister moved to Porto."}]}, ana)
        store.search(("memories", "ana"))  # the app lists Ana's notes
        graph.invoke({"messages": [{"role": "user", "content": quiet[0]}]}, bo)
        graph.invoke({"messages": [{"role": "user", "content": "My friend Cleo is in Lyon."}]}, bo)
        graph.invoke({"messages": [{"role": "user", "content": quiet[1]}]}, bo)
    got = by_op(memtrace_exporter.get_finished_spans())
    kept_nothing = [o for o in got["openai.chat.extraction"] if not o["outputs"]]
    assert [o["store"] for o in kept_nothing] == ["memories/bo", "memories/bo"]
    for op, turn in zip(kept_nothing, quiet, strict=True):
        assert op["inputs"] == [message_ref(turn, store_id="memories/bo")]


def test_a_reply_an_update_stores_is_an_update_decision(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    """A node asks the model to merge two records and writes the reply over the older one:
    the call's only write is an update, so it is an ``update`` op reading both records."""
    from langgraph.graph import START, MessagesState, StateGraph

    store = InMemoryStore()
    store.put(NS, "a", {"text": "Ana lives in Porto"})
    store.put(NS, "b", {"text": "Ana moved to Lisbon in May"})
    merged = "Ana lives in Lisbon since May"
    with ScriptedOpenAI(lambda kind, body: merged) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)

        def tidy(state: MessagesState, *, store: BaseStore) -> dict[str, Any]:
            notes = {item.key: item.value["text"] for item in store.search(NS)}
            reply = client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": f"Merge: {notes['a']} / {notes['b']}"}],
            )
            store.put(NS, "a", {"text": reply.choices[0].message.content})
            store.delete(NS, "b")
            return {}

        builder = StateGraph(MessagesState)
        builder.add_node("tidy", tidy)
        builder.add_edge(START, "tidy")
        builder.compile(store=store).invoke({"messages": []})
    got = by_op(memtrace_exporter.get_finished_spans())
    [decision] = got["openai.chat.update_decision"]
    assert decision["kind"] == "update" and decision["case"] is None
    assert decision["name"] == "memtrace.update openai.chat.update_decision"
    rid = "langgraph:memories/dana"
    assert sorted(decision["inputs"]) == [f"{rid}/a@1", f"{rid}/b@1"]  # no user turn here
    [fact] = decision["outputs"]
    [update] = [o for o in got["langgraph.store.put"] if o["kind"] == "update"]
    assert update["inputs"] == [f"{rid}/a@1", fact]


def test_raw_responses_are_read(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    """``with_raw_response`` (how langchain-openai calls the API): the completion is parsed
    once, and the caller's own ``parse()`` gets the same object."""
    with ScriptedOpenAI(lambda kind, body: "Porto, since spring.") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "Where does Ana live?"}]
        )
        assert raw.parse().choices[0].message.content == "Porto, since spring."
    [answer] = by_op(memtrace_exporter.get_finished_spans())["openai.chat.completions"]
    [prediction] = answer["outputs"]
    assert prediction.startswith("prediction:") and answer["case"]


# -- Pregel.stream / astream: the answer noted as invoke notes it (issue 29) ----------------------


def _plain_chunks(graph: Any, mode: str) -> list[Any]:
    """What an uninstrumented graph yields (tracing suppressed), for comparison."""
    with suppress_tracing():
        return list(graph.stream(QUESTION, CONFIG, stream_mode=mode))


def _parallel_agent(client: openai.OpenAI, store: InMemoryStore) -> Any:
    """The memory agent with a second branch beside the answer (a log node): LangGraph then
    runs the step's nodes on its thread pool, so the answer is made in another thread."""
    from langgraph.graph import START, MessagesState, StateGraph

    agent = _agent(client, store)
    builder = StateGraph(MessagesState)
    builder.add_node("extract", agent.nodes["extract"].bound)
    builder.add_node("log", lambda state: {})
    builder.add_node("answer", agent.nodes["answer"].bound)
    builder.add_edge(START, "extract")
    builder.add_edge("extract", "answer")
    builder.add_edge("extract", "log")
    return builder.compile(store=store)


@pytest.mark.parametrize("mode", ["updates", "values"])
def test_stream_notes_the_answer_and_yields_what_langgraph_yields(
    instrumented: None, memtrace_exporter: InMemorySpanExporter, mode: str
) -> None:
    """Issue 29: ``graph.stream`` recorded no answer for ``last_answer()`` when the answer was
    made off the caller's thread (invoke did)."""
    script = _agent_script({}, {"Ana": "In Porto."})
    with ScriptedOpenAI(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        graph = _parallel_agent(client, InMemoryStore())
        expected = _plain_chunks(graph, mode)
        memtrace_exporter.clear()
        before = len(server.chat_prompts())
        stream = graph.stream(QUESTION, CONFIG, stream_mode=mode)
        first = next(stream)
        # Not buffered: the first chunk comes before the answer node asks the model.
        assert len(server.chat_prompts()) - before < 2
        chunks = [first, *stream]
        asked = last_answer()
    assert _same_chunks(chunks, expected)
    [answer] = by_op(memtrace_exporter.get_finished_spans())["openai.chat.completions"]
    assert asked is not None and asked.case_id == answer["case"]
    assert f"{answer['span_id']:016x}" in asked.traceparent


def _dump(chunks: list[Any]) -> str:
    return json.dumps(chunks, default=lambda o: getattr(o, "content", repr(o)), sort_keys=True)


def _same_chunks(chunks: list[Any], expected: list[Any]) -> bool:
    """The same items as an untraced run: the first step's chunk first, then the rest as a
    multiset (the answer and log nodes run in parallel in one step, and ``updates`` yields
    their chunks in the order they finish, which no run fixes)."""
    return _dump(chunks[:1]) == _dump(expected[:1]) and sorted(map(_dump1, chunks[1:])) == sorted(
        map(_dump1, expected[1:])
    )


def _dump1(chunk: Any) -> str:
    return _dump([chunk])


def test_astream_notes_the_answer(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    script = _agent_script({}, {"Ana": "In Porto."})
    with ScriptedOpenAI(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        graph = _parallel_agent(client, InMemoryStore())

        async def run() -> tuple[list[Any], Any]:
            chunks = [chunk async for chunk in graph.astream(QUESTION, CONFIG)]
            return chunks, last_answer()

        chunks, asked = asyncio.run(run())
    assert sorted(next(iter(c)) for c in chunks) == ["answer", "extract", "log"]
    [answer] = by_op(memtrace_exporter.get_finished_spans())["openai.chat.completions"]
    assert asked is not None and asked.case_id == answer["case"]


def test_a_stream_left_early_closes_and_notes_what_ran(
    instrumented: None, memtrace_exporter: InMemorySpanExporter
) -> None:
    """A ``break`` closes the graph's generator (no answer node runs); the next run in the same
    context is traced as its own run."""
    script = _agent_script({}, {"Ana": "In Porto."})
    with ScriptedOpenAI(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        graph = _parallel_agent(client, InMemoryStore())
        for chunk in graph.stream(QUESTION, CONFIG):
            assert "extract" in chunk
            break
        assert not [k for k, _ in server.requests if k == "chat"][1:]  # the answer never ran
        for _ in graph.stream(QUESTION, CONFIG):
            pass
        asked = last_answer()
    answers = by_op(memtrace_exporter.get_finished_spans())["openai.chat.completions"]
    assert len(answers) == 1 and asked is not None and asked.case_id == answers[0]["case"]


def test_a_stream_never_raises_telemetry_errors_and_passes_the_apps_own(
    instrumented: None, memtrace_exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memtrace_otel._internal import internal_error_counts, quiet_internal_errors
    from memtrace_otel.instrumentors._common import current_app_run
    from memtrace_otel.instrumentors.langgraph import patch

    script = _agent_script({}, {"Ana": "In Porto."})
    with ScriptedOpenAI(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        graph = _parallel_agent(client, InMemoryStore())
        expected = _plain_chunks(graph, "updates")

        def broken(run: Any) -> object:
            raise RuntimeError("telemetry bug")

        monkeypatch.setattr(patch, "enter_app_run", broken)
        before = internal_error_counts().get("langgraph.stream.step", 0)
        with quiet_internal_errors():
            chunks = list(graph.stream(QUESTION, CONFIG))
        assert _same_chunks(chunks, expected)  # the app got every item, unchanged
        assert internal_error_counts()["langgraph.stream.step"] > before
        monkeypatch.undo()

        def failing(state: Any) -> dict[str, Any]:
            raise ValueError("the app's own error")

        from langgraph.graph import START, MessagesState, StateGraph

        builder = StateGraph(MessagesState)
        builder.add_node("fail", failing)
        builder.add_edge(START, "fail")
        with pytest.raises(ValueError, match="the app's own error"):
            for _ in builder.compile().stream(QUESTION):
                pass
        assert current_app_run() is None  # the run was left, in the caller's context too

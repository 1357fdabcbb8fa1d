"""The Mem0 instrumentor against the real mem0ai 2.x (additive pipeline), offline.

mem0 runs with embedded Qdrant and the scripted OpenAI-compatible server; one ``Memory`` serves
the module (each test uses its own user, so its own memory store). The classic 1.x pipeline is
covered by ``test_instrumentors_e2e.py`` in a second environment.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import wrapt
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel._internal import quiet_internal_errors
from memtrace_otel.instrumentation import CaptureConfig, WriterRegistry, suppress_tracing
from memtrace_otel.instrumentors import message_ref
from memtrace_otel.instrumentors._common import content_id, forget_retrievals
from memtrace_otel.instrumentors.mem0 import Mem0Instrumentor
from memtrace_otel.instrumentors.mem0 import patch as mem0_patch
from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
from memtrace_otel.semconv import attributes as A
from tests._instrumentor_helpers import (
    LLMScript,
    attribute,
    by_op,
    mem0_config,
    ops,
    write_spans,
)
from tests._openai_server import ScriptedOpenAI

FACTS = {
    "Ana lives in Porto": ["Ana lives in Porto"],
    "hiking": ["User loves hiking on weekends"],
    "cat": ["User has a cat named Tom"],
}


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAI]:
    with ScriptedOpenAI(LLMScript(FACTS)) as srv:
        yield srv


@pytest.fixture(scope="module")
def mem0_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEM0_TELEMETRY", "false")  # mem0 reads it at import: no PostHog events
        import mem0

        yield mem0


@pytest.fixture(scope="module")
def memory(
    mem0_module: Any, server: ScriptedOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    return mem0_module.Memory.from_config(
        mem0_config(server.base_url, tmp_path_factory.mktemp("mem0"))
    )


@pytest.fixture
def script(server: ScriptedOpenAI) -> Iterator[LLMScript]:
    """The server's script for this test (reset afterwards)."""
    current = LLMScript(dict(FACTS))
    server.responder = current
    yield current
    server.responder = LLMScript(FACTS)


@pytest.fixture
def instrumented(memtrace_provider: TracerProvider) -> Iterator[Mem0Instrumentor]:
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(
        tracer_provider=memtrace_provider,
        capture=CaptureConfig(mode="SPAN_AND_EVENT"),
        registry=WriterRegistry(),
    )
    yield instrumentor
    instrumentor.uninstrument()
    forget_retrievals()


def _user(request: pytest.FixtureRequest) -> str:
    return request.node.name.replace("[", "-").replace("]", "")


def test_add_search_update_get_history_delete(
    memory: Any,
    script: LLMScript,
    instrumented: Mem0Instrumentor,
    memtrace_exporter: InMemorySpanExporter,
    request: pytest.FixtureRequest,
) -> None:
    user = _user(request)
    added = memory.add("My sister Ana lives in Porto.", user_id=user)
    memory_id = added["results"][0]["id"]
    found = memory.search("Where does Ana live?", filters={"user_id": user})
    memory.update(memory_id, text="Ana lives in Lisbon")
    assert memory.get(memory_id)["memory"] == "Ana lives in Lisbon"
    assert len(memory.history(memory_id)) == 2
    memory.delete(memory_id)

    spans = memtrace_exporter.get_finished_spans()
    got = by_op(spans)
    msg = message_ref("My sister Ana lives in Porto.", store_id=user)
    record = f"mem0:{memory_id}"

    # add: an ingest op named by its upstream operation, with its phases as children.
    [add] = got["mem0.add"]
    assert (add["name"], add["kind"], add["gen_ai_operation"]) == (
        "upsert_memory",
        "ingest",
        "upsert_memory",
    )
    assert add["inputs"] == [msg] and add["store"] == user
    phases = ["mem0.search_existing", "mem0.additive_extraction", "mem0.dedup", "mem0.batch_write"]
    assert [o["op"] for o in ops(spans) if o["parent"] == add["span_id"]] == phases
    [extraction] = got["mem0.additive_extraction"]
    assert extraction["kind"] == "extract" and msg in extraction["inputs"]
    assert any(i.startswith("prompt:mem0.additive_extraction:") for i in extraction["inputs"])
    [fact] = extraction["outputs"]
    [dedup] = got["mem0.dedup"]
    assert dedup["kind"] == "filter" and dedup["inputs"] == [fact]
    [write] = got["mem0.batch_write"]
    assert (write["name"], write["kind"]) == ("create_memory", "create")
    assert write["inputs"] == dedup["outputs"] and write["outputs"] == [f"{record}@1"]

    # The writer's span context went into the record's metadata; the search links to it.
    [hit] = found["results"]
    traceparent = hit["metadata"][A.METADATA_TRACEPARENT]
    assert traceparent.split("-")[2] == f"{write['span_id']:016x}"
    [search] = got["mem0.search"]
    assert (search["name"], search["kind"]) == ("search_memory", "retrieve")
    assert search["inputs"][1:] == [f"{record}@1"] and search["inputs"][0].startswith("query:")
    assert {A.MEMTRACE_VARIABLE_REF: f"{record}@1"} in search["links"]
    assert search["case"] and search["store"] == user
    [candidates] = search["outputs"]
    assert candidates.startswith("candidates:")

    # Versions follow mem0's history: update @1 -> @2, delete @2 -> tombstone @3.
    [update] = got["mem0.update"]
    # The new text is the caller's input (no traced op produced it), then the old record; it is
    # `other`, not a `message`: nothing says the user stated it.
    caller = f"{content_id('input', user, 'Ana lives in Lisbon')}@1"
    assert (update["name"], update["inputs"], update["outputs"]) == (
        "update_memory",
        [caller, f"{record}@1"],
        [f"{record}@2"],
    )
    [given] = [e for e in update["events"] if e[A.MEMTRACE_VARIABLE_REF] == caller]
    assert (given[A.MEMTRACE_VARIABLE_CATEGORY], given[A.MEMTRACE_VARIABLE_VALUE]) == (
        "other",
        "Ana lives in Lisbon",
    )
    assert update["store"] == user
    [get] = got["mem0.get"]
    assert get["inputs"] == [f"{record}@2"]
    [history] = got["mem0.history"]
    assert history["inputs"] == [f"{record}@2"]
    [delete] = got["mem0.delete"]
    assert (delete["name"], delete["inputs"], delete["outputs"]) == (
        "delete_memory",
        [f"{record}@2"],
        [f"{record}@3"],
    )
    [tombstone] = [e for e in delete["events"] if e[A.MEMTRACE_VARIABLE_REF] == f"{record}@3"]
    assert tombstone[A.MEMTRACE_VARIABLE_DELETED] is True
    # mem0's own LLM calls are not traced as anything but its phases.
    assert all(o["kind"] != "generate" for o in ops(spans))


def test_update_links_the_completion_it_writes_and_joins_the_current_span(
    memory: Any,
    server: ScriptedOpenAI,
    script: LLMScript,
    instrumented: Mem0Instrumentor,
    memtrace_provider: TracerProvider,
    memtrace_exporter: InMemorySpanExporter,
    request: pytest.FixtureRequest,
) -> None:
    """An app's clean-up job asks the LLM to merge two notes and writes the reply back with
    ``update``; then deletes the other note. Both mutations are children of the job's span, and
    the update reads the completion (matched by digest) and links to its span."""
    import openai

    user = _user(request)
    script.facts["hiking"] = ["User hikes on weekends"]
    first = memory.add("I love hiking.", user_id=user)["results"][0]["id"]
    script.facts["hiking"] = ["User hikes in the Alps"]
    second = memory.add("I go hiking in the Alps.", user_id=user)["results"][0]["id"]
    script.answer = lambda prompt: "User hikes in the Alps on weekends"
    OpenAIInstrumentor().instrument(tracer_provider=memtrace_provider)
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        job = memtrace_provider.get_tracer("app").start_as_current_span("memory-cleanup")
        with job as span:
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "Combine these notes"}]
            )
            merged = reply.choices[0].message.content
            memory.update(first, f"  {merged}\n")  # whitespace at the ends aside
            memory.delete(second)
        memory.delete(first)  # no current span: a root span, as before
    finally:
        OpenAIInstrumentor().uninstrument()

    spans = memtrace_exporter.get_finished_spans()
    got = by_op(spans)
    [chat] = got["openai.chat.completions"]
    [prediction] = chat["outputs"]
    [update] = got["mem0.update"]
    assert update["inputs"] == [prediction, f"mem0:{first}@1"]
    assert {A.MEMTRACE_VARIABLE_REF: prediction} in update["links"]
    [link] = [
        link
        for s in spans
        if s.context.span_id == update["span_id"]
        for link in s.links
        if link.attributes == {A.MEMTRACE_VARIABLE_REF: prediction}
    ]
    assert link.context.span_id == chat["span_id"]
    [written] = [e for e in update["events"] if e[A.MEMTRACE_VARIABLE_REF] == f"mem0:{first}@2"]
    assert prediction in written[A.MEMTRACE_VARIABLE_META]
    job_id = span.get_span_context().span_id
    in_job, outside = got["mem0.delete"]
    assert (update["parent"], in_job["parent"], outside["parent"]) == (job_id, job_id, None)


def test_planted_extraction_failure_is_attributed(
    memory: Any,
    script: LLMScript,
    instrumented: Mem0Instrumentor,
    memtrace_exporter: InMemorySpanExporter,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    user = _user(request)
    script.facts["Ana lives in Porto"] = []  # the extraction drops the fact
    memory.add("My sister Ana lives in Porto.", user_id=user)
    memory.add("I love hiking in the mountains.", user_id=user)
    token = context.attach(baggage.set_baggage(A.MEMTRACE_CASE_ID, "q-porto"))
    try:
        memory.search("Where does Ana live?", filters={"user_id": user})
    finally:
        context.detach(token)

    traces = write_spans(memtrace_exporter.get_finished_spans(), tmp_path / "traces.jsonl")
    evidence = message_ref("My sister Ana lives in Porto.", store_id=user)
    verdict = attribute(
        traces,
        [
            {
                "case_id": "q-porto",
                "question": "Where does Ana live?",
                "gold_answers": ["Porto"],
                "evidence_refs": [evidence],
            }
        ],
    )["q-porto"]
    assert (verdict.error_type, verdict.op_name) == ("ExtractionError", "mem0.additive_extraction")
    assert verdict.store_id == user


def test_planted_retrieval_failure_is_attributed(
    memory: Any,
    script: LLMScript,
    instrumented: Mem0Instrumentor,
    memtrace_exporter: InMemorySpanExporter,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    user = _user(request)
    memory.add("My sister Ana lives in Porto.", user_id=user)
    token = context.attach(baggage.set_baggage(A.MEMTRACE_CASE_ID, "q-miss"))
    try:
        # A threshold no score reaches: the stored fact is not retrieved.
        assert (
            memory.search("Where does Ana live?", filters={"user_id": user}, threshold=1.0)[
                "results"
            ]
            == []
        )
    finally:
        context.detach(token)
    traces = write_spans(memtrace_exporter.get_finished_spans(), tmp_path / "traces.jsonl")
    verdict = attribute(
        traces,
        [
            {
                "case_id": "q-miss",
                "question": "Where does Ana live?",
                "gold_answers": ["Porto"],
                "evidence_refs": [message_ref("My sister Ana lives in Porto.", store_id=user)],
            }
        ],
    )["q-miss"]
    assert (verdict.error_type, verdict.op_name) == ("RetrievalError", "mem0.search")


def test_async_memory(
    mem0_module: Any,
    server: ScriptedOpenAI,
    script: LLMScript,
    instrumented: Mem0Instrumentor,
    memtrace_exporter: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    async def run() -> tuple[Any, Any]:
        memory = mem0_module.AsyncMemory(
            mem0_module.configs.base.MemoryConfig(**mem0_config(server.base_url, tmp_path))
        )
        added = await memory.add(
            messages=[{"role": "user", "content": "I have a cat."}], user_id="ada"
        )
        found = await memory.search(query="pets", filters={"user_id": "ada"})
        await memory.delete(memory_id=added["results"][0]["id"])
        return added, found

    added, found = asyncio.run(run())
    assert found["results"][0]["id"] == added["results"][0]["id"]
    got = by_op(memtrace_exporter.get_finished_spans())
    [add] = got["mem0.add"]
    children = [
        o["op"]
        for o in ops(memtrace_exporter.get_finished_spans())
        if o["parent"] == add["span_id"]
    ]
    assert children == [
        "mem0.search_existing",
        "mem0.additive_extraction",
        "mem0.dedup",
        "mem0.batch_write",
    ]
    record = f"mem0:{added['results'][0]['id']}"
    assert got["mem0.batch_write"][0]["outputs"] == [f"{record}@1"]
    assert got["mem0.search"][0]["inputs"][1:] == [f"{record}@1"]
    assert got["mem0.delete"][0]["outputs"] == [f"{record}@2"]


def test_arguments_by_position_or_keyword_and_raw_inserts(
    memory: Any,
    script: LLMScript,
    instrumented: Mem0Instrumentor,
    memtrace_exporter: InMemorySpanExporter,
    request: pytest.FixtureRequest,
) -> None:
    user = _user(request)
    by_position = memory.add("I have a cat named Tom.", user_id=user)
    raw = memory.add(messages=[{"role": "user", "content": "Raw note"}], user_id=user, infer=False)
    first, second = by_position["results"][0]["id"], raw["results"][0]["id"]
    memory.update(first, "User has a cat named Tom, aged 3")
    memory.update(memory_id=second, text="Raw note, edited")
    memory.delete_all(user_id=user)

    got = by_op(memtrace_exporter.get_finished_spans())
    # infer=False writes each message as a record: a create op reading the message.
    [create] = got["mem0.create"]
    assert create["inputs"] == [message_ref("Raw note", store_id=user)]
    assert create["outputs"] == [f"mem0:{second}@1"]
    assert [u["outputs"] for u in got["mem0.update"]] == [[f"mem0:{first}@2"], [f"mem0:{second}@2"]]
    # delete_all: one delete op per record, children of the delete_all op.
    [delete_all] = got["mem0.delete_all"]
    deletes = sorted(o for d in got["mem0.delete"] for o in d["outputs"])
    assert deletes == sorted([f"mem0:{first}@3", f"mem0:{second}@3"])
    assert all(d["parent"] == delete_all["span_id"] for d in got["mem0.delete"])


def test_suppress_tracing_and_content_capture_default(
    memory: Any,
    script: LLMScript,
    memtrace_provider: TracerProvider,
    memtrace_exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    for name in ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "MEMTRACE_CAPTURE_CONTENT"):
        monkeypatch.delenv(name, raising=False)
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=memtrace_provider, registry=WriterRegistry())
    try:
        user = _user(request)
        with suppress_tracing():
            quiet = memory.add("I have a cat named Tom.", user_id=user)
        assert quiet["results"] and memtrace_exporter.get_finished_spans() == ()
        memory.add("My sister Ana lives in Porto.", user_id=user)
    finally:
        instrumentor.uninstrument()
    events = [e for o in ops(memtrace_exporter.get_finished_spans()) for e in o["events"]]
    assert events and all(A.MEMTRACE_VARIABLE_DIGEST in e for e in events)
    assert not any(A.MEMTRACE_VARIABLE_VALUE in e for e in events)  # content off by default


def test_guard_rails(
    memory: Any,
    script: LLMScript,
    instrumented: Mem0Instrumentor,
    memtrace_exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    user = _user(request)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("telemetry bug")

    # 1. Building the telemetry fails: the call runs untraced and succeeds.
    with monkeypatch.context() as mp, quiet_internal_errors():
        mp.setattr(mem0_patch, "_messages_of", broken)
        added = memory.add("I have a cat named Tom.", user_id=user)
    assert added["results"] and "mem0.add" not in by_op(memtrace_exporter.get_finished_spans())

    # 2. The user's exception is recorded on the op and re-raised unchanged.
    with pytest.raises(ValueError, match="not found") as raised:
        memory.update("no-such-memory", text="x")
    [update] = by_op(memtrace_exporter.get_finished_spans())["mem0.update"]
    assert update["status"] == "ERROR"
    [span] = [
        s for s in memtrace_exporter.get_finished_spans() if s.context.span_id == update["span_id"]
    ]
    assert span.events[-1].name == "exception"
    assert span.events[-1].attributes["exception.message"] == str(raised.value)

    # 3. Handling the result fails: logged, and the result is returned.
    caplog.set_level(logging.WARNING, logger="memtrace_otel")
    with monkeypatch.context() as mp, quiet_internal_errors():
        mp.setattr(mem0_patch, "_record_hits", broken)
        found = memory.search("cat", filters={"user_id": user})
    assert found["results"][0]["memory"] == "User has a cat named Tom"
    assert "telemetry is reduced" in caplog.text


def test_records_without_ids_and_unknown_result_shapes(
    memory: Any,
    script: LLMScript,
    instrumented: Mem0Instrumentor,
    memtrace_exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        type(memory),
        "_search_vector_store",
        lambda self, *a, **k: [{"memory": "a record without an id", "score": 0.9}],
    )
    found = memory.search("anything", filters={"user_id": "nobody"})
    assert found["results"] == [{"memory": "a record without an id", "score": 0.9}]
    [search] = by_op(memtrace_exporter.get_finished_spans())["mem0.search"]
    assert len(search["inputs"]) == 1  # the query only: no ref for a record without an id
    [event] = [e for e in search["events"] if e[A.MEMTRACE_VARIABLE_CATEGORY] == "candidates"]
    assert "a record without an id" in event[A.MEMTRACE_VARIABLE_VALUE]


def test_uninstrument_restores_everything(
    memory: Any,
    script: LLMScript,
    memtrace_provider: TracerProvider,
    memtrace_exporter: InMemorySpanExporter,
    mem0_module: Any,
) -> None:
    import mem0.memory.main as main

    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=memtrace_provider, registry=WriterRegistry())
    assert isinstance(main.Memory.__dict__["add"], wrapt.FunctionWrapper)
    assert isinstance(
        main.concurrent.futures.ThreadPoolExecutor(1), mem0_patch.ContextThreadPoolExecutor
    )
    memory.search("x", filters={"user_id": "restore"})
    assert isinstance(memory.__dict__["vector_store"], wrapt.ObjectProxy)
    instrumentor.uninstrument()

    assert not isinstance(main.Memory.__dict__["add"], wrapt.FunctionWrapper)
    assert not isinstance(main.AsyncMemory.__dict__["_update_memory"], wrapt.FunctionWrapper)
    assert main.concurrent is concurrent
    assert not isinstance(memory.__dict__["vector_store"], wrapt.ObjectProxy)
    before = len(memtrace_exporter.get_finished_spans())
    memory.add("I love hiking.", user_id="restore")
    assert len(memtrace_exporter.get_finished_spans()) == before


def test_unsupported_version_warns_and_patches_nothing(
    mem0_module: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import mem0.memory.main as main

    import memtrace_otel.instrumentors.mem0 as package

    monkeypatch.setattr(package, "_instruments", ("mem0ai >= 99",))
    caplog.set_level(logging.WARNING, logger="memtrace_otel.instrumentors")
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument()
    try:
        assert "supports mem0ai>=99" in caplog.text and "nothing instrumented" in caplog.text
        assert not isinstance(main.Memory.__dict__["add"], wrapt.FunctionWrapper)
    finally:
        instrumentor.uninstrument()


def test_thread_pool_carries_the_context(memtrace_provider: TracerProvider) -> None:
    tracer = memtrace_provider.get_tracer("test")
    with (
        tracer.start_as_current_span("parent") as parent,
        mem0_patch.ContextThreadPoolExecutor(2) as pool,
    ):
        seen = pool.submit(lambda: trace.get_current_span().get_span_context().span_id).result()
    assert seen == parent.get_span_context().span_id
    with concurrent.futures.ThreadPoolExecutor(1) as plain, tracer.start_as_current_span("other"):
        assert not plain.submit(
            lambda: trace.get_current_span().get_span_context().is_valid
        ).result()

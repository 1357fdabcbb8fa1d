"""The engine interface: offline rules, and the openai engine against a scripted server."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_bench.systems import (
    Conversation,
    EngineReplyError,
    EngineUnavailableError,
    Evidence,
    OfflineEngine,
    OpenAIEngine,
    Question,
    Session,
    Turn,
    label_case,
    make_engine,
    run_conversation,
)
from memtrace_bench.systems._facts import ABSTAIN, answer_question
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.semconv import attributes as A
from tests._openai_server import Reply, ScriptedOpenAI, closed_port

OFFLINE = OfflineEngine()


# --- offline ---------------------------------------------------------------------------------
def test_offline_extraction_skips_the_assistant_and_resolves_dates() -> None:
    lines = [
        "[8 May 2023] Maya: I adopted a dog named Rex yesterday.",
        "[8 May 2023] Assistant: I live in Paris.",
        "[8 May 2023] Maya: Hi! How are you?",
    ]
    assert OFFLINE.extract_facts("", lines) == ["Maya adopted a dog named Rex on 7 May 2023"]


def test_offline_decisions_add_update_none_delete() -> None:
    existing = [
        ("0", "Maya lives in Lisbon"),
        ("1", "Maya is allergic to peanuts"),
        ("2", "Maya enjoys chess"),
    ]
    facts = [
        "Maya moved to Porto on 8 May 2023 and lives in Porto",
        "Maya enjoys chess",
        "Maya asked to forget everything about being allergic",
        "Maya has a cat named Tom",
    ]
    decisions = OFFLINE.decide("", facts, existing)
    by_event = {(d.event, d.id) for d in decisions}
    assert ("UPDATE", "0") in by_event
    assert ("DELETE", "1") in by_event
    assert ("NONE", "2") in by_event or ("NONE", None) in by_event
    assert [d.text for d in decisions if d.event == "ADD"] == ["Maya has a cat named Tom"]


def test_offline_answers_follow_updates_and_forgetting() -> None:
    ctx = [
        "[1 May 2023] Maya: My sister's name is Ana.",
        "[2 May 2023] Maya: Ana lives in Madrid.",
        "[3 May 2023] Maya: I'm allergic to peanuts.",
        "[4 May 2023] Maya: Please forget that I told you about my allergy.",
        "[5 May 2023] Maya: My neighbour Leo has a cat named Milo.",
    ]
    assert answer_question("Where does Maya's sister live?", ctx) == "Madrid"
    assert answer_question("What is Maya allergic to?", ctx) == ABSTAIN
    assert answer_question("What is the name of Maya's cat?", ctx) == ABSTAIN


def test_offline_boundary_profile_and_sufficiency() -> None:
    buffer = [f"[1 May 2023] Maya: I really enjoy chess number {i}." for i in range(4)]
    assert OFFLINE.detect_boundary("", buffer, "[1 May 2023] Maya: Volcano eruption tomorrow")
    assert not OFFLINE.detect_boundary("", buffer[:2], "[1 May 2023] Maya: Volcano eruption")
    profile = OFFLINE.update_profile(
        "", ["Maya lives in Lisbon", "Maya is allergic to gluten"],
        ["Maya moved to Porto on 8 May 2023 and lives in Porto", "Maya asked to forget everything about being allergic"],
    )  # fmt: skip
    assert profile == ["Maya moved to Porto on 8 May 2023 and lives in Porto"]
    verdict = OFFLINE.check_sufficiency(
        "", "Where does Maya's sister live?", ["[1 May 2023] Maya: My sister's name is Ana."]
    )
    assert not verdict.sufficient
    assert any(q.startswith("Ana ") for q in verdict.queries)
    vectors = OFFLINE.embed(["Maya lives in Porto", ""])
    assert math.isclose(sum(x * x for x in vectors[0]), 1.0) and not any(vectors[1])


# --- openai -----------------------------------------------------------------------------------
def engine_for(server: ScriptedOpenAI, **kw: Any) -> OpenAIEngine:
    return OpenAIEngine(
        model="scripted-model", base_url=server.base_url, max_retries=kw.pop("max_retries", 1), **kw
    )


def test_openai_extraction_request_and_reply() -> None:
    with ScriptedOpenAI(lambda kind, body: '{"facts": ["Maya lives in Porto", "  "]}') as server:
        engine = engine_for(server)
        facts = engine.extract_facts(
            "Extract:\n{conversation}", ["[1 May 2023] Maya: I live in Porto."]
        )
        assert facts == ["Maya lives in Porto"]
        _, body = server.requests[0]
        assert body["model"] == "scripted-model"
        assert body["response_format"] == {"type": "json_object"}
        assert body["messages"][-1]["content"] == "Extract:\n[1 May 2023] Maya: I live in Porto."


def test_openai_malformed_reply_is_retried_once() -> None:
    with ScriptedOpenAI(lambda kind, body: '{"facts": ["ok"]}') as server:
        server.script(Reply(200, "not json at all"))
        assert engine_for(server).extract_facts("{conversation}", ["x"]) == ["ok"]
        assert len(server.requests) == 2


def test_openai_malformed_twice_raises_and_is_cached() -> None:
    with ScriptedOpenAI(lambda kind, body: '{"facts": "not a list"}') as server:
        engine = engine_for(server)
        with pytest.raises(EngineReplyError, match=r"malformed reply .* twice"):
            engine.extract_facts("{conversation}", ["x"])
        assert len(server.requests) == 2
        with pytest.raises(EngineReplyError):
            engine.extract_facts("{conversation}", ["x"])
        assert len(server.requests) == 2  # replays see the same failure without asking again


def test_openai_server_error_then_success() -> None:
    with ScriptedOpenAI(lambda kind, body: '{"label": "CORRECT"}') as server:
        server.script(Reply(500, {"error": {"message": "overloaded"}}))
        assert (
            engine_for(server).judge("{question} {gold} {prediction}", "q", ["Porto"], "Porto")
            is True
        )
        assert len(server.requests) == 2


def test_openai_persistent_errors_name_the_endpoint() -> None:
    with ScriptedOpenAI(lambda kind, body: Reply(503, {"error": {"message": "down"}})) as server:
        engine = engine_for(server, max_retries=1)
        with pytest.raises(EngineUnavailableError) as info:
            engine.answer("{question}{context}", "q", ["c"])
        assert server.base_url in str(info.value) and "HTTP 503" in str(info.value)


def test_openai_connection_refused_names_the_endpoint() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    engine = OpenAIEngine(model="m", base_url=url, max_retries=0)
    with pytest.raises(EngineUnavailableError) as info:
        engine.answer("{question}", "q", [])
    assert url in str(info.value) and "unreachable" in str(info.value)


def test_openai_embeddings_and_decisions() -> None:
    with ScriptedOpenAI() as server:
        engine = engine_for(server, embeddings_model="scripted-embed")
        [a, b] = engine.embed(["Maya lives in Porto", "Leo has a cat"])
        assert math.isclose(sum(x * x for x in a), 1.0) and a != b
        assert server.requests[-1][0] == "embeddings"
        server.script(
            Reply(200, json.dumps({"memory": [{"id": "7", "text": "x", "event": "UPDATE"}]}))
        )
        server.script(
            Reply(200, json.dumps({"memory": [{"id": "0", "text": "y", "event": "update"}]}))
        )
        [decision] = engine.decide("{existing} {facts}", ["y"], [("0", "x")])
        assert (decision.event, decision.id, decision.text) == ("UPDATE", "0", "y")


def test_make_engine_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    engine = make_engine("openai", model="m")
    assert isinstance(engine, OpenAIEngine) and engine.base_url == "http://127.0.0.1:1/v1"
    with pytest.raises(ValueError, match="model"):
        make_engine("openai", model="")
    with pytest.raises(ValueError, match="unknown engine"):
        make_engine("claude")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.example.invalid/v1")
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        make_engine("openai", model="m")


# --- a whole system on the openai engine --------------------------------------------------------
def tiny_conversation() -> Conversation:
    turns = (
        Turn("D1:1", "Maya", "I live in Porto.", 1, "1 May 2023"),
        Turn("D1:2", "Maya", "My favourite food is sushi.", 1, "1 May 2023"),
    )
    questions = (
        Question("q1", "Where does Maya live?", ("Porto",), "single-hop", (Evidence("D1:1", ("Porto",), "Maya lives in Porto"),)),
        Question("q2", "What is Maya's favourite food?", ("sushi",), "single-hop", (Evidence("D1:2", ("sushi",), "Maya's favourite food is sushi"),)),
    )  # fmt: skip
    return Conversation("tiny", ("Maya",), (Session(1, "1 May 2023", turns),), questions)


def scripted_mem0(kind: str, body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    if "organise personal information" in prompt:
        line = prompt.rsplit("\n", 1)[-1]
        if "sushi" in line:
            return "the model rambles without JSON"  # malformed, twice
        return json.dumps({"facts": [line.split(": ", 1)[1].replace("I live", "Maya lives")]})
    if "manage a memory store" in prompt:
        facts = json.loads(prompt.split("New facts (JSON): ", 1)[1].split("\n", 1)[0])
        return json.dumps({"memory": [{"id": None, "text": f, "event": "ADD"} for f in facts]})
    return "Porto" if "live" in prompt.rsplit("Question:", 1)[-1] else "I don't know"


def test_mem0_on_the_openai_engine_degrades_on_malformed_replies() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = MemTracer(
        tracer_provider=provider, system="mem0", store_id="mem0:tiny",
        capture=CaptureConfig(mode="SPAN_AND_EVENT"), registry=WriterRegistry(),
    )  # fmt: skip
    with ScriptedOpenAI(scripted_mem0) as server:
        engine = engine_for(server)
        run = run_conversation("mem0", tiny_conversation(), engine=engine, tracer=tracer)
        assert run.results["mem0:tiny:q1"].correct
        assert not run.results["mem0:tiny:q2"].correct
        label = label_case(run, "mem0:tiny:q2")
    assert label.error_type == "ExtractionError" and label.op_name == "mem0.fact_extraction"
    spans = exporter.get_finished_spans()
    failed = [s for s in spans if s.status.status_code.name == "ERROR"]
    assert [s.attributes[A.MEMTRACE_OP_NAME] for s in failed] == ["mem0.fact_extraction"]
    assert label.op_id == format(failed[0].context.span_id, "016x")
    llm_ops = [s for s in spans if s.attributes.get(A.MEMTRACE_PROMPT_REF)]
    assert {s.attributes[A.GEN_AI_REQUEST_MODEL] for s in llm_ops} == {"scripted-model"}
    assert {s.attributes[A.MEMTRACE_OP_NAME] for s in llm_ops} >= {
        "mem0.fact_extraction", "mem0.update_decision", "mem0.answer",
    }  # fmt: skip


def test_llm_judge_is_a_judge_op_with_its_prompt(tmp_path: Any) -> None:
    from memtrace_bench.systems import generate_benchmark, generate_workload

    def responder(kind: str, body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        if "grading an answer" in prompt:
            return json.dumps({"reasoning": "r", "label": "WRONG"})
        return "Porto"

    with ScriptedOpenAI(responder) as server:
        full = generate_workload(1, seed=2)
        conv = dataclasses.replace(
            full.conversations[0], questions=full.conversations[0].questions[:3], _turns={}
        )
        workload = dataclasses.replace(full, conversations=(conv,))
        summary = generate_benchmark(
            tmp_path, workload=workload, systems="rag", engine=engine_for(server), judge="llm"
        )
    assert summary.systems["rag"].correct == 0
    judges = []
    for line in (tmp_path / "traces.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    attrs = {a["key"]: a["value"] for a in span["attributes"]}
                    if attrs[A.MEMTRACE_OP_KIND]["stringValue"] == "judge":
                        judges.append(attrs)
    assert len(judges) == 3
    assert {j[A.MEMTRACE_PROMPT_REF]["stringValue"] for j in judges} == {"prompt:rag.judge@1"}
    assert {j[A.MEMTRACE_JUDGE_VERDICT]["stringValue"] for j in judges} == {"incorrect"}


def test_no_endpoint_is_defaulted_for_either_user_of_a_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine and model-based attribution share one policy (memtrace_otel/_openai.py): the
    endpoint is named or nothing is sent; a loopback endpoint may go without a key."""
    from memtrace_otel.attribution._model_client import EndpointConfig

    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ValueError, match=r"missing: base_url= or OPENAI_BASE_URL$"):
        make_engine("openai", model="m")
    with pytest.raises(ValueError, match=r"missing: base_url= or OPENAI_BASE_URL$"):
        EndpointConfig.resolve(model="m")
    monkeypatch.delenv("OPENAI_API_KEY")
    local = "http://127.0.0.1:9/v1"
    assert EndpointConfig.resolve(model="m", base_url=local).base_url == local
    assert isinstance(make_engine("openai", model="m", base_url=local), OpenAIEngine)

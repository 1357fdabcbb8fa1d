"""Upstream GenAI memory and chat spans read as contract ops (``sources/_upstream.py``)."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.graph import build_graph
from memtrace_otel.semconv import ERROR_TYPE_BY_KIND, EventRecord, OpKind, SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.sources import adapt_upstream, open_source
from memtrace_otel.sources._upstream import is_upstream_op

TRACE_A = "a" * 32
TRACE_B = "b" * 32
TRACE_C = "c" * 32


def span(
    trace: str,
    span_id: int,
    operation: str,
    start: int,
    end: int | None = None,
    *,
    parent: int | None = None,
    events: tuple[EventRecord, ...] = (),
    **attributes: Any,
) -> SpanRecord:
    attrs: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: operation}
    for key, value in attributes.items():
        attrs[key.replace("__", ".")] = value
    return SpanRecord(
        trace_id=trace,
        span_id=f"{span_id:016x}",
        name=operation,
        parent_span_id=f"{parent:016x}" if parent is not None else None,
        start_time_unix_nano=start,
        end_time_unix_nano=end if end is not None else start + 1,
        attributes=attrs,
        events=events,
    )


def records(*items: tuple[str | None, str]) -> str:
    return json.dumps([{"id": rid, "content": text} for rid, text in items])


def messages(text: str) -> str:
    return json.dumps([{"role": "user", "parts": [{"type": "text", "content": text}]}])


def by_id(adapted: list[SpanRecord]) -> dict[str, Mapping[str, Any]]:
    return {r.span_id: r.attributes for r in adapted}


def variable_values(record: SpanRecord) -> dict[str, Any]:
    return {
        e.attributes[A.MEMTRACE_VARIABLE_REF]: e.attributes.get(A.MEMTRACE_VARIABLE_VALUE)
        for e in record.events
        if e.name == A.MEMTRACE_VARIABLE_EVENT
    }


STORE = {"gen_ai__memory__store__id": "u1"}


def add_with_extraction(input_messages: str) -> list[SpanRecord]:
    """``memory.add``: an ``upsert_memory`` span around the extraction call that fed it."""
    return [
        span(
            TRACE_A,
            1,
            "upsert_memory",
            10,
            50,
            gen_ai__memory__records=records(("m1", "Has a dog called Rex")),
            **STORE,
        ),
        span(
            TRACE_A,
            2,
            "chat",
            20,
            30,
            parent=1,
            gen_ai__input__messages=input_messages,
            gen_ai__output__messages=messages('{"facts": ["Has a dog called Rex"]}'),
        ),
    ]


def test_kinds_come_from_the_operation_name() -> None:
    spans = [
        span(TRACE_A, 1, "create_memory", 10, gen_ai__memory__record__id="m1", **STORE),
        span(TRACE_A, 2, "update_memory", 20, gen_ai__memory__record__id="m1", **STORE),
        span(TRACE_A, 3, "delete_memory", 30, gen_ai__memory__record__id="m1", **STORE),
        span(TRACE_A, 4, "upsert_memory", 40, gen_ai__memory__record__id="m2", **STORE),
        span(TRACE_A, 5, "upsert_memory", 50, gen_ai__memory__record__id="m2", **STORE),
        span(TRACE_A, 6, "search_memory", 60, **STORE),
    ]
    attrs = by_id(adapt_upstream(spans))
    kinds = [attrs[f"{i:016x}"][A.MEMTRACE_OP_KIND] for i in range(1, 7)]
    assert kinds == ["create", "update", "delete", "create", "update", "retrieve"]


def test_record_versions_follow_time_across_traces_whatever_the_input_order() -> None:
    spans = [
        span(
            TRACE_A,
            1,
            "create_memory",
            10,
            gen_ai__memory__records=records(("m1", "Lives in Porto")),
            **STORE,
        ),
        span(
            TRACE_B,
            2,
            "update_memory",
            20,
            gen_ai__memory__records=records(("m1", "Lives in Lyon")),
            **STORE,
        ),
        span(TRACE_C, 3, "delete_memory", 30, gen_ai__memory__record__id="m1", **STORE),
    ]
    for order in (spans, spans[::-1], [spans[1], spans[2], spans[0]]):
        attrs = by_id(adapt_upstream(order))
        assert attrs[f"{1:016x}"][A.MEMTRACE_OP_OUTPUTS] == ("m1@1",)
        assert attrs[f"{2:016x}"][A.MEMTRACE_OP_INPUTS] == ("m1@1",)
        assert attrs[f"{2:016x}"][A.MEMTRACE_OP_OUTPUTS] == ("m1@2",)
        assert attrs[f"{3:016x}"][A.MEMTRACE_OP_OUTPUTS] == ("m1@3",)
    G = build_graph(adapt_upstream(spans))
    assert G.nodes["m1@3"]["deleted"] is True
    assert G.nodes["m1@2"]["value"] == "Lives in Lyon"
    assert G.has_edge("m1@1", "m1@2", key="version")


def test_a_search_reads_the_live_version_or_the_stale_one_it_returned() -> None:
    write = [
        span(
            TRACE_A,
            1,
            "create_memory",
            10,
            gen_ai__memory__records=records(("m1", "Lives in Porto")),
            **STORE,
        ),
        span(
            TRACE_A,
            2,
            "update_memory",
            20,
            gen_ai__memory__records=records(("m1", "Lives in Lyon")),
            **STORE,
        ),
    ]
    fresh = span(
        TRACE_B,
        3,
        "search_memory",
        30,
        gen_ai__memory__query__text="where?",
        gen_ai__memory__records=records(("m1", "Lives in Lyon")),
        **STORE,
    )
    stale = span(
        TRACE_C,
        4,
        "search_memory",
        40,
        gen_ai__memory__query__text="where?",
        gen_ai__memory__records=records(("m1", "Lives in Porto")),
        **STORE,
    )
    attrs = by_id(adapt_upstream([*write, fresh, stale]))
    assert attrs[f"{3:016x}"][A.MEMTRACE_OP_INPUTS] == (f"query:{3:016x}@1", "m1@2")
    assert attrs[f"{4:016x}"][A.MEMTRACE_OP_INPUTS] == (f"query:{4:016x}@1", "m1@1")
    # A search before the record existed reads nothing of it.
    early = span(TRACE_C, 5, "search_memory", 5, gen_ai__memory__records="[]", **STORE)
    assert by_id(adapt_upstream([*write, early]))[f"{5:016x}"][A.MEMTRACE_OP_INPUTS] == (
        f"query:{5:016x}@1",
    )


def test_chat_calls_are_extractions_before_writes_and_answers_after_searches() -> None:
    ingest = add_with_extraction(messages("We got a dog, Rex!"))
    answer = [
        span(
            TRACE_B,
            3,
            "search_memory",
            100,
            110,
            gen_ai__memory__records=records(("m1", "Has a dog called Rex")),
            **STORE,
        ),
        span(
            TRACE_B,
            4,
            "chat",
            120,
            130,
            gen_ai__input__messages=messages(
                "Memories: Has a dog called Rex. What is my dog called?"
            ),
            gen_ai__output__messages=messages("Rex"),
        ),
    ]
    adapted = adapt_upstream([*ingest, *answer])
    attrs = by_id(adapted)
    extract, write = attrs[f"{2:016x}"], attrs[f"{1:016x}"]
    assert extract[A.MEMTRACE_OP_KIND] == "extract"
    assert extract[A.GEN_AI_MEMORY_STORE_ID] == "u1"  # from its trace's memory span
    assert f"llm:{2:016x}@1" in write[A.MEMTRACE_OP_INPUTS]
    generate = attrs[f"{4:016x}"]
    assert generate[A.MEMTRACE_OP_KIND] == "generate"
    assert f"candidates:{3:016x}@1" in generate[A.MEMTRACE_OP_INPUTS]
    # The case id of an answer is its trace id, on the answer and the search that fed it.
    assert generate[A.MEMTRACE_CASE_ID] == TRACE_B
    assert attrs[f"{3:016x}"][A.MEMTRACE_CASE_ID] == TRACE_B
    values = variable_values(next(r for r in adapted if r.span_id == f"{4:016x}"))
    assert values[f"answer:{4:016x}@1"] == "Rex"
    assert A.MEMTRACE_OP_INFERRED in generate


def test_an_explicit_case_id_wins_over_the_trace_id() -> None:
    spans = [
        span(TRACE_B, 3, "search_memory", 100, 110, **STORE),
        span(TRACE_B, 4, "chat", 120, 130, memtrace__case__id="q-7"),
    ]
    attrs = by_id(adapt_upstream(spans))
    assert attrs[f"{4:016x}"][A.MEMTRACE_CASE_ID] == "q-7"


def test_contract_ops_and_other_spans_pass_through_unchanged() -> None:
    ours = SpanRecord(
        TRACE_A,
        "00000000000000f1",
        "search_memory",
        attributes={A.MEMTRACE_OP_KIND: "retrieve", A.GEN_AI_OPERATION_NAME: "search_memory"},
    )
    http = SpanRecord(TRACE_A, "00000000000000f2", "GET /health", attributes={"http.route": "/"})
    assert not is_upstream_op(ours) and not is_upstream_op(http)
    assert adapt_upstream([ours, http]) == [ours, http]


def test_duplicate_copies_are_rewritten_identically() -> None:
    spans = [
        span(
            TRACE_A, 1, "create_memory", 10, gen_ai__memory__records=records(("m1", "x")), **STORE
        ),
        span(
            TRACE_A, 2, "update_memory", 20, gen_ai__memory__records=records(("m1", "y")), **STORE
        ),
    ]
    adapted = adapt_upstream([spans[0], spans[1], spans[1], spans[0]])
    assert adapted[0] == adapted[3] and adapted[1] == adapted[2]
    assert adapted[1].attributes[A.MEMTRACE_OP_OUTPUTS] == ("m1@2",)


def test_capture_off_keeps_ids_and_says_what_is_unknown() -> None:
    spans = [
        span(TRACE_A, 1, "upsert_memory", 10, gen_ai__memory__record__count=2, **STORE),
        span(TRACE_A, 2, "update_memory", 20, gen_ai__memory__record__id="m9", **STORE),
        span(TRACE_B, 3, "search_memory", 30, gen_ai__memory__record__count=3, **STORE),
    ]
    adapted = adapt_upstream(spans)
    attrs = by_id(adapted)
    assert attrs[f"{1:016x}"][A.MEMTRACE_OP_OUTPUTS] == ()
    assert any("not known" in item for item in attrs[f"{1:016x}"][A.MEMTRACE_OP_INFERRED])
    assert attrs[f"{2:016x}"][A.MEMTRACE_OP_OUTPUTS] == ("m9@1",)
    # No value was captured, so no value (nor a made-up digest) is recorded.
    assert all(v is None for r in adapted for v in variable_values(r).values())


def test_the_upstream_app_traces_are_read_whole(tmp_path: Path) -> None:
    from tests._upstream_app import run_app

    run = run_app(tmp_path, users=2, seed=3)
    written = [
        span["spanId"]
        for line in run.traces.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    source = open_source(str(run.traces))
    raw = list(source.records())
    # Every span the app wrote is read, once, and none is skipped.
    assert sorted(r.span_id for r in raw) == sorted(written) and source.stats.skipped == 0
    G = build_graph(adapt_upstream(raw))
    # One connected run: no span lost its parent, no ref written twice, no cycle.
    assert G.graph["anomalies"] == []
    ops = {n: d for n, d in G.nodes(data=True) if d.get("type") == "op"}
    assert len(ops) + len(G.graph["non_op_spans"]) == len(written)
    assert set(run.failed) | set(run.correct) <= {d.get("case") for d in ops.values()}
    # Every planted culprit is an op whose kind yields the planted label.
    assert run.failed and all(t.span_id in ops for t in run.failed.values())
    assert {
        case: ERROR_TYPE_BY_KIND[OpKind(ops[t.span_id]["kind"])] for case, t in run.failed.items()
    } == {case: t.label for case, t in run.failed.items()}


@pytest.mark.parametrize("seed", [0, 1])
def test_adaptation_does_not_depend_on_record_order(tmp_path: Path, seed: int) -> None:
    from tests._upstream_app import run_app

    run = run_app(tmp_path, users=1, seed=seed)
    raw = list(open_source(str(run.traces)).records())
    shuffled = raw[:]
    random.Random(seed).shuffle(shuffled)
    first = {r.span_id: r for r in adapt_upstream(raw)}
    second = {r.span_id: r for r in adapt_upstream(shuffled)}
    assert first == second


def test_instructions_are_a_prompt_and_outputs_name_their_sources() -> None:
    system_and_user = json.dumps(
        [
            {"role": "system", "parts": [{"type": "text", "content": "Extract facts as JSON."}]},
            {"role": "user", "parts": [{"type": "text", "content": "We got a dog, Rex!"}]},
        ]
    )
    spans = add_with_extraction(system_and_user)
    G = build_graph(adapt_upstream(spans))
    extract = f"{2:016x}"
    prompts = [v for v in G.predecessors(extract) if G.nodes[v]["category"] == "prompt"]
    assert [G.nodes[v]["value"] for v in prompts] == ["Extract facts as JSON."]
    assert G.nodes[f"messages:{extract}@1"]["value"] == "We got a dog, Rex!"
    assert G.nodes[f"llm:{extract}@1"]["meta"] == {"source_refs": [f"messages:{extract}@1"]}
    assert G.nodes["m1@1"]["meta"] == {"source_refs": [f"llm:{extract}@1"]}


def test_chat_spans_inside_contract_ops_are_not_ops() -> None:
    """Beside our instrumentors (issue 21): the upstream chat span of a memory system's own LLM
    call, under its phase op, stays a plain span; the app's own chat call is still an op."""
    phase = span(
        TRACE_A,
        1,
        "memtrace.extract",
        10,
        40,
        memtrace__op__kind="extract",
        memtrace__op__name="mem0.fact_extraction",
        **STORE,
    )
    internal = span(TRACE_A, 2, "chat", 20, 30, parent=1, gen_ai__provider__name="openai")
    deeper = span(TRACE_A, 3, "chat", 21, 29, parent=2, gen_ai__provider__name="openai")
    search = span(TRACE_A, 5, "search_memory", 45, 46, **STORE)
    answer = span(TRACE_A, 4, "chat", 50, 60, gen_ai__provider__name="openai")
    adapted = by_id(adapt_upstream([phase, internal, deeper, search, answer]))
    assert A.MEMTRACE_OP_KIND not in adapted[internal.span_id]
    assert A.MEMTRACE_OP_KIND not in adapted[deeper.span_id]
    assert adapted[answer.span_id][A.MEMTRACE_OP_KIND] == "generate"

"""Graphs built from spans made with the manual instrumentation API and the real OTel SDK."""

from __future__ import annotations

import random

import networkx as nx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.export import span_to_record
from memtrace_otel.graph import (
    add_records,
    build_graph,
    canonical_form,
    case_subgraph,
    graph_index,
    linked_trace_ids,
    new_graph,
)
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.processing import EvolutionGraphProcessor
from memtrace_otel.semconv import CaptureMode, SpanRecord


def record_memory_story(mt: MemTracer) -> dict[str, str]:
    """A learnt fact, its update, and a wrongly answered question; returns op name -> span id."""
    ids: dict[str, str] = {}
    msg = mt.variable("msg:1", "I moved to Porto", category="message")
    with mt.extract("mem0.fact_extraction", inputs=[msg]) as op:
        fact = op.output(mt.variable("fact:1", "lives in Porto", category="memory"))
        ids["extract"] = op.span.get_span_context().span_id.to_bytes(8, "big").hex()
    with mt.update("mem0.update", inputs=[fact]) as op:
        fact2 = op.output(fact.next("lives in Lisbon"))
        ids["update"] = op.span.get_span_context().span_id.to_bytes(8, "big").hex()
    question = mt.variable("q:1", "Where do I live?", category="query")
    with mt.retrieve("mem0.search", inputs=[question, fact2], case_id="c1") as op:
        cands = op.output(mt.variable("cands:1", ["lives in Lisbon"], category="candidates"))
        ids["retrieve"] = op.span.get_span_context().span_id.to_bytes(8, "big").hex()
    prompt = mt.variable("prompt:answer", "Answer from {cands}", category="prompt")
    with mt.generate("mem0.answer", inputs=[cands], prompt=prompt, case_id="c1") as op:
        pred = op.output(mt.variable("pred:1", "Porto", category="prediction"))
        ids["generate"] = op.span.get_span_context().span_id.to_bytes(8, "big").hex()
    gold = mt.variable("gold:1", "Lisbon", category="gold")
    with mt.judge("llm-judge", inputs=[pred, gold], case_id="c1") as op:
        op.output(mt.variable("score:1", 0, category="score"))
        op.set_verdict(False)
        ids["judge"] = op.span.get_span_context().span_id.to_bytes(8, "big").hex()
    return ids


def records_of(exporter: InMemorySpanExporter) -> list[SpanRecord]:
    return [span_to_record(span) for span in exporter.get_finished_spans()]


def test_graph_of_the_manual_api_exactly(
    memtrace_tracer: MemTracer, memtrace_exporter: InMemorySpanExporter
) -> None:
    ids = record_memory_story(memtrace_tracer)
    G = build_graph(records_of(memtrace_exporter))
    ex, up, re, ge, ju = (ids[k] for k in ("extract", "update", "retrieve", "generate", "judge"))
    assert set(G.nodes) == {
        ex, up, re, ge, ju,
        "msg:1@1", "fact:1@1", "fact:1@2", "q:1@1", "cands:1@1", "prompt:answer@1",
        "pred:1@1", "gold:1@1", "score:1@1",
    }  # fmt: skip
    assert set(G.edges(keys=True)) == {
        ("msg:1@1", ex, "read"), (ex, "fact:1@1", "write"),
        ("fact:1@1", up, "read"), (up, "fact:1@2", "write"),
        ("fact:1@1", "fact:1@2", "version"),
        ("q:1@1", re, "read"), ("fact:1@2", re, "read"), (re, "cands:1@1", "write"),
        ("cands:1@1", ge, "read"), ("prompt:answer@1", ge, "read"), (ge, "pred:1@1", "write"),
        ("pred:1@1", ju, "read"), ("gold:1@1", ju, "read"), (ju, "score:1@1", "write"),
    }  # fmt: skip
    assert G.graph["anomalies"] == []
    assert [G.nodes[n]["kind"] for n in (ex, up, re, ge, ju)] == [
        "extract", "update", "retrieve", "generate", "judge",
    ]  # fmt: skip
    assert G.nodes[ge]["prompt_ref"] == "prompt:answer@1"
    assert (G.nodes[re]["case"], G.nodes[re]["store"]) == ("c1", "test-store")
    assert G.nodes[re]["links"] == [
        {"trace_id": G.nodes[up]["trace_id"], "span_id": up, "ref": "fact:1@2"}
    ]
    assert G.nodes["fact:1@2"]["value"] == "lives in Lisbon"
    assert G.nodes["fact:1@2"]["writer"] == up
    assert G.nodes["msg:1@1"]["external"] is True
    assert G.nodes["msg:1@1"]["value"] == "I moved to Porto"
    assert graph_index(G).failed == {"c1"}
    assert set(case_subgraph(G, "c1")) == set(G)


def test_order_independence_and_idempotence_on_sdk_spans(
    memtrace_tracer: MemTracer, memtrace_exporter: InMemorySpanExporter
) -> None:
    record_memory_story(memtrace_tracer)
    records = records_of(memtrace_exporter)
    expected = canonical_form(build_graph(records))
    rng = random.Random(11)
    for _ in range(10):
        shuffled = records + rng.sample(records, 2)
        rng.shuffle(shuffled)
        G = new_graph()
        for record in shuffled:
            add_records(G, [record])
        assert canonical_form(G) == expected


def test_lineage_across_processes_through_traceparent() -> None:
    """A record written in one process (trace) and updated in another, linked by traceparent."""
    first_exporter, second_exporter = InMemorySpanExporter(), InMemorySpanExporter()
    tracers = []
    for exporter in (first_exporter, second_exporter):
        provider = TracerProvider()  # random ids: the two processes' traces differ
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracers.append(
            MemTracer(
                tracer_provider=provider,
                store_id="u1",
                capture=CaptureConfig(mode=CaptureMode.SPAN_AND_EVENT),
                registry=WriterRegistry(),  # a fresh registry: as if in another process
            )
        )
    writer, reader = tracers
    with writer.create("store.add") as op:
        stored = op.output(writer.variable("mem:7", "likes tea", category="memory"))
    # The second process only has what the store kept: the value and its writer's traceparent.
    loaded = reader.variable(
        "mem:7", "likes tea", category="memory", traceparent=stored.traceparent
    )
    with reader.update("store.update", inputs=[loaded]) as op:
        op.output(loaded.next("likes coffee"))
    second = records_of(second_exporter)
    G = build_graph(second)
    # Only the second process's trace is loaded: the link names the first one's trace.
    first_trace = records_of(first_exporter)[0].trace_id
    assert linked_trace_ids(G) == [first_trace]
    add_records(G, records_of(first_exporter))
    assert linked_trace_ids(G) == []
    index = graph_index(G)
    assert index.writer("mem:7@1") == records_of(first_exporter)[0].span_id
    assert index.readers("mem:7@1") == [second[0].span_id]
    assert index.writer("mem:7@2") == second[0].span_id
    assert index.next_version("mem:7@1") == "mem:7@2"
    assert G.nodes["mem:7@1"]["external"] is False


def test_processor_graph_equals_the_offline_build(
    memtrace_provider: TracerProvider,
    memtrace_tracer: MemTracer,
    memtrace_exporter: InMemorySpanExporter,
) -> None:
    processor = EvolutionGraphProcessor(fold_interval=0)
    memtrace_provider.add_span_processor(processor)
    tracer = memtrace_provider.get_tracer("app")
    with tracer.start_as_current_span("POST /chat"):  # a plain parent span around the ops
        record_memory_story(memtrace_tracer)
    live = processor.graph()
    offline = build_graph(records_of(memtrace_exporter))
    assert canonical_form(live) == canonical_form(offline)
    assert isinstance(live, nx.MultiDiGraph)
    assert live.graph["anomalies"] == []  # the ops' parent is the plain span: loaded
    assert len(live.graph["non_op_spans"]) == 1

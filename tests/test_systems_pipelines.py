"""Each reference system end to end offline, its trace checked against the contract."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_bench.systems import SYSTEMS, generate_workload, run_conversation
from memtrace_bench.systems._base import turn_ref
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.semconv import Category, OpKind, Stage, parse_ref
from memtrace_otel.semconv import attributes as A

KINDS = {
    "long_context": {"ingest", "create", "update", "retrieve", "assemble", "generate", "judge"},
    "rag": {"ingest", "create", "update", "extract", "retrieve", "assemble", "generate", "judge"},
    "mem0": {"ingest", "extract", "retrieve", "create", "update", "delete", "filter", "assemble", "generate", "judge"},
    "evermemos": {"ingest", "extract", "create", "update", "retrieve", "filter", "assemble", "generate", "judge"},
}  # fmt: skip


def run_traced(system: str, users: int = 2, seed: int = 11) -> tuple[list[Any], list[ReadableSpan]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = WriterRegistry()
    capture = CaptureConfig(mode="SPAN_AND_EVENT", max_value_length=100_000)
    setup = MemTracer(tracer_provider=provider, system=system, capture=capture, registry=registry)
    prompts = SYSTEMS[system].trace_prompts(setup)
    runs = []
    for conv in generate_workload(users, seed).conversations:
        tracer = MemTracer(
            tracer_provider=provider, system=system, store_id=f"{system}:{conv.conv_id}",
            capture=capture, registry=registry,
        )  # fmt: skip
        runs.append(run_conversation(system, conv, tracer=tracer, prompt_vars=prompts))
    return runs, list(exporter.get_finished_spans())


def events(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == A.MEMTRACE_VARIABLE_EVENT]


@pytest.fixture(scope="module", params=list(SYSTEMS))
def traced(request: pytest.FixtureRequest) -> tuple[str, list[Any], list[ReadableSpan]]:
    runs, spans = run_traced(request.param)
    return request.param, runs, spans


def test_every_span_is_a_contract_op(traced: tuple[str, list[Any], list[ReadableSpan]]) -> None:
    system, _, spans = traced
    kinds = Counter()
    for span in spans:
        attrs = span.attributes or {}
        kind = attrs[A.MEMTRACE_OP_KIND]
        kinds[kind] += 1
        assert OpKind(kind) and Stage(attrs[A.MEMTRACE_STAGE])
        name = attrs[A.MEMTRACE_OP_NAME]
        assert name.startswith((f"{system}.", "judge."))
        assert attrs[A.MEMTRACE_SYSTEM] == system
        for ref in (*attrs[A.MEMTRACE_OP_INPUTS], *attrs[A.MEMTRACE_OP_OUTPUTS]):
            parse_ref(ref)
        for event in events(span):
            Category(event[A.MEMTRACE_VARIABLE_CATEGORY])
            assert event[A.MEMTRACE_VARIABLE_DIGEST].startswith("sha256:")
    assert set(kinds) == KINDS[system]


def test_versions_links_and_single_writers(
    traced: tuple[str, list[Any], list[ReadableSpan]],
) -> None:
    _, _, spans = traced
    writer: dict[str, ReadableSpan] = {}
    for span in spans:
        for ref in span.attributes[A.MEMTRACE_OP_OUTPUTS]:
            assert ref not in writer, f"{ref} written twice"
            writer[ref] = span
    for span in spans:
        inputs = set(span.attributes[A.MEMTRACE_OP_INPUTS])
        for ref in span.attributes[A.MEMTRACE_OP_OUTPUTS]:
            ident, version = parse_ref(ref)
            if version > 1:  # a rewrite reads the version it replaces
                assert f"{ident}@{version - 1}" in inputs, (
                    span.attributes[A.MEMTRACE_OP_NAME],
                    ref,
                )
        linked = {
            (link.context.span_id, link.attributes[A.MEMTRACE_VARIABLE_REF]) for link in span.links
        }
        for ref in inputs:
            if ref in writer and len(span.links) < 128:
                assert (writer[ref].context.span_id, ref) in linked, ref


def test_memories_carry_source_refs(traced: tuple[str, list[Any], list[ReadableSpan]]) -> None:
    _, _, spans = traced
    memories = 0
    for span in spans:
        for event in events(span):
            if (
                event[A.MEMTRACE_VARIABLE_CATEGORY] == "memory"
                and event[A.MEMTRACE_VARIABLE_ROLE] == "output"
            ):
                if event.get(A.MEMTRACE_VARIABLE_DELETED):
                    continue
                memories += 1
                meta = json.loads(event[A.MEMTRACE_VARIABLE_META])
                assert isinstance(meta["source_refs"], list)
                assert all(r.startswith("msg:") for r in meta["source_refs"])
    assert memories > 10


def test_traces_per_session_and_per_question(
    traced: tuple[str, list[Any], list[ReadableSpan]],
) -> None:
    _, runs, spans = traced
    by_trace: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        by_trace[span.context.trace_id].append(span)
    roots = [s for s in spans if s.parent is None]
    assert all(s.attributes[A.MEMTRACE_OP_KIND] == "ingest" for s in roots)
    sessions = sum(len(r.conversation.sessions) for r in runs)
    questions = sum(len(r.conversation.questions) for r in runs)
    setup = 1  # the load_prompts op
    assert len(by_trace) == sessions + questions + setup
    for trace in by_trace.values():
        cases = {s.attributes.get(A.MEMTRACE_CASE_ID) for s in trace}
        if cases != {None}:
            assert len(cases) == 1  # every op of a question trace serves that case
            judges = [s for s in trace if s.attributes[A.MEMTRACE_OP_KIND] == "judge"]
            assert len(judges) == 1
            assert judges[0].attributes[A.MEMTRACE_JUDGE_VERDICT] in ("correct", "incorrect")


def test_retrieval_lists_query_and_candidate_set(
    traced: tuple[str, list[Any], list[ReadableSpan]],
) -> None:
    _, _, spans = traced
    for span in spans:
        attrs = span.attributes
        if attrs[A.MEMTRACE_OP_KIND] != "retrieve" or not attrs.get(A.MEMTRACE_CASE_ID):
            continue
        case = attrs[A.MEMTRACE_CASE_ID]
        inputs = set(attrs[A.MEMTRACE_OP_INPUTS])
        assert f"query:{case}@1" in inputs
        [out] = [e for e in events(span) if e[A.MEMTRACE_VARIABLE_ROLE] == "output"]
        assert out[A.MEMTRACE_VARIABLE_CATEGORY] == "candidates"
        listed = {c["ref"] for c in json.loads(out[A.MEMTRACE_VARIABLE_VALUE])}
        assert listed <= inputs  # chosen from what it searched


def test_evidence_refs_are_ingested_messages(
    traced: tuple[str, list[Any], list[ReadableSpan]],
) -> None:
    _, runs, spans = traced
    ingested = {
        e[A.MEMTRACE_VARIABLE_REF]
        for s in spans
        if s.attributes[A.MEMTRACE_OP_KIND] == "ingest"
        for e in events(s)
        if e[A.MEMTRACE_VARIABLE_CATEGORY] == "message"
    }
    for run in runs:
        for question in run.conversation.questions:
            for evidence in question.evidence:
                assert turn_ref(run.store_id, evidence.dia_id) in ingested


def test_offline_systems_answer_most_questions(
    traced: tuple[str, list[Any], list[ReadableSpan]],
) -> None:
    _, runs, _ = traced
    results = [r for run in runs for r in run.results.values()]
    assert sum(r.correct for r in results) / len(results) >= 0.7


def test_runs_are_deterministic() -> None:
    first, _ = run_traced("mem0", users=1, seed=5)
    second, _ = run_traced("mem0", users=1, seed=5)
    assert [(r.case_id, r.prediction) for r in first[0].results.values()] == [
        (r.case_id, r.prediction) for r in second[0].results.values()
    ]
    assert [(o.name, o.output_refs) for o in first[0].log] == [
        (o.name, o.output_refs) for o in second[0].log
    ]

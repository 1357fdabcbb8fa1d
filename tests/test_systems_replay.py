"""Ground truth: injected-fault labels, and counterfactual labels on hand-built cases."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_bench.systems import (
    NO_SINGLE_FIX,
    Conversation,
    Evidence,
    FaultSpec,
    Question,
    Session,
    Turn,
    Workload,
    generate_workload,
    label_case,
    replay_case,
    run_conversation,
)
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.semconv import attributes as A


def conversation(
    sessions: Sequence[Sequence[str]], questions: Sequence[Question], conv_id: str = "hand"
) -> Conversation:
    built = []
    for s, texts in enumerate(sessions, 1):
        date = f"{s} May 2023"
        turns = tuple(Turn(f"D{s}:{t}", "Maya", text, s, date) for t, text in enumerate(texts, 1))
        built.append(Session(s, date, turns))
    return Conversation(conv_id, ("Maya",), tuple(built), tuple(questions))


def q(
    qid: str, text: str, gold: str, *evidence: tuple[str, str], category: str = "single-hop"
) -> Question:
    ev = tuple(Evidence(dia, (key,), "") for dia, key in evidence)
    return Question(qid, text, (gold,), category, ev)


def traced_run(system: str, conv: Conversation, **kw: object):  # type: ignore[no-untyped-def]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = MemTracer(
        tracer_provider=provider, system=system, store_id=f"{system}:{conv.conv_id}",
        capture=CaptureConfig(mode="SPAN_AND_EVENT"), registry=WriterRegistry(),
    )  # fmt: skip
    run = run_conversation(system, conv, tracer=tracer, **kw)  # type: ignore[arg-type]
    spans = {format(s.context.span_id, "016x"): s for s in exporter.get_finished_spans()}
    return run, spans


FILLER = [f"Work has been hectic lately, week {i}." for i in range(12)]


# --- counterfactual labels on hand-built cases ---------------------------------------------------
def test_trimmed_window_is_an_update_error_at_the_trim_that_dropped_it() -> None:
    conv = conversation(
        [["I live in Lisbon.", *FILLER]],
        [q("q1", "Where does Maya live?", "Lisbon", ("D1:1", "Lisbon"))],
    )
    run, spans = traced_run("long_context", conv, options={"window_tokens": 60})
    case = "long_context:hand:q1"
    assert not run.results[case].correct
    label = label_case(run, case)
    trims = [r for r in run.log if r.name == "long_context.trim"]
    dropping = next(
        r
        for r in trims
        if any("Lisbon" in i.text for i in r.inputs)
        and not any("Lisbon" in o.text for o in r.outputs)
    )
    assert (label.error_type, label.op_name, label.op_index) == (
        "UpdateError",
        "long_context.trim",
        dropping.seq,
    )
    assert label.source == "counterfactual" and label.fault is None
    assert spans[label.op_id].attributes[A.MEMTRACE_OP_OUTPUTS] == dropping.output_refs


def test_overwritten_old_city_is_an_update_error_at_the_mem0_update() -> None:
    conv = conversation(
        [["I live in Lisbon."], ["Big news: I moved to Porto today!"]],
        [
            q("q1", "Where did Maya live before moving to Porto?", "Lisbon", ("D1:1", "Lisbon"), ("D2:1", "Porto")),
            q("q2", "Where does Maya live now?", "Porto", ("D2:1", "Porto")),
        ],
    )  # fmt: skip
    run, spans = traced_run("mem0", conv)
    assert run.results["mem0:hand:q2"].correct
    label = label_case(run, "mem0:hand:q1")
    [update] = [r for r in run.log if r.name == "mem0.update"]
    assert (label.error_type, label.op_name, label.op_index) == (
        "UpdateError",
        "mem0.update",
        update.seq,
    )
    assert spans[label.op_id].attributes[A.MEMTRACE_OP_NAME] == "mem0.update"


def test_missed_document_is_a_retrieval_error_at_the_question_retrieve() -> None:
    conv = conversation(
        [["Maya here, hello again."], ["Maya again: the week went well."], ["I bought a Honda Civic today!"]],
        [q("q1", "What car does Maya drive?", "Honda Civic", ("D3:1", "Honda Civic"))],
    )  # fmt: skip
    run, spans = traced_run("rag", conv, options={"top_k": 1})
    case = "rag:hand:q1"
    assert not run.results[case].correct
    label = label_case(run, case)
    [retrieve] = [r for r in run.log if r.name == "rag.retrieve"]
    assert (label.error_type, label.op_index, label.method) == (
        "RetrievalError",
        retrieve.seq,
        "replay",
    )
    assert spans[label.op_id].attributes[A.MEMTRACE_CASE_ID] == case


def test_answer_missed_in_a_full_context_is_a_response_error() -> None:
    conv = conversation(
        [["Say hi to Rex, the dog I brought home today!"]],
        [q("q1", "What is the name of Maya's dog?", "Rex", ("D1:1", "Rex"))],
    )
    run, _ = traced_run("long_context", conv)
    label = label_case(run, "long_context:hand:q1")
    assert (label.error_type, label.op_name, label.op_kind) == (
        "ResponseError",
        "long_context.answer",
        "generate",
    )


def test_case_no_single_correction_rescues() -> None:
    conv = conversation(
        [["I live in Lisbon."]],
        [q("q1", "Where does Maya's brother live?", "Berlin", ("D1:1", "Berlin"))],
    )
    run, _ = traced_run("mem0", conv)
    label = label_case(run, "mem0:hand:q1")
    assert label.error_type is None and label.op_id is None
    assert NO_SINGLE_FIX in label.reason


def test_only_failed_cases_get_labels() -> None:
    conv = conversation(
        [["I live in Lisbon."]], [q("q1", "Where does Maya live?", "Lisbon", ("D1:1", "Lisbon"))]
    )
    run, _ = traced_run("mem0", conv)
    with pytest.raises(ValueError, match="answered right"):
        label_case(run, "mem0:hand:q1")


# --- injected faults -------------------------------------------------------------------------------
def test_injected_wrong_answer_is_labelled_at_its_generate_op() -> None:
    conv = conversation([["I live in Lisbon.", "My favourite food is sushi."]], [
        q("q1", "Where does Maya live?", "Lisbon", ("D1:1", "Lisbon")),
        q("q2", "What is Maya's favourite food?", "sushi", ("D1:2", "sushi")),
    ])  # fmt: skip
    clean, _ = traced_run("rag", conv)
    assert all(r.correct for r in clean.results.values())
    run, spans = traced_run("rag", conv, faults=FaultSpec({"wrong_answer": 1.0}))
    for case in ("rag:hand:q1", "rag:hand:q2"):
        assert not run.results[case].correct
        label = label_case(run, case)
        assert (label.error_type, label.source, label.fault) == (
            "ResponseError",
            "injected",
            "wrong_answer",
        )
        span = spans[label.op_id]
        assert (
            span.attributes[A.MEMTRACE_OP_KIND] == "generate"
            and span.attributes[A.MEMTRACE_CASE_ID] == case
        )
        # labels never go into the traces
        for s in spans.values():
            assert "wrong_answer" not in str(dict(s.attributes or {}))


def test_injected_chunk_fault_is_an_extraction_error() -> None:
    conv = conversation([["I live in Lisbon.", "My favourite food is sushi."]], [
        q("q1", "Where does Maya live?", "Lisbon", ("D1:1", "Lisbon")),
    ])  # fmt: skip
    run, _ = traced_run("rag", conv, faults=FaultSpec({"drop_fact": 1.0}))
    label = label_case(run, "rag:hand:q1")
    assert (label.error_type, label.op_name, label.source) == (
        "ExtractionError",
        "rag.chunk",
        "injected",
    )


def test_injected_fault_that_does_not_decide_the_case_is_not_its_label() -> None:
    conv = conversation(
        [["I live in Lisbon."], ["Big news: I moved to Porto today!"]],
        [q("q1", "Where did Maya live before moving to Porto?", "Lisbon", ("D1:1", "Lisbon"), ("D2:1", "Porto"))],
    )  # fmt: skip
    run, _ = traced_run("mem0", conv, faults=FaultSpec({"wrong_answer": 1.0}))
    assert [r.name for r in run.log if r.fault] == ["mem0.answer"]
    label = label_case(run, "mem0:hand:q1")
    # The case was lost at the overwrite already; the injected wrong answer did not decide it.
    assert (label.error_type, label.op_name, label.source, label.fault) == (
        "UpdateError", "mem0.update", "counterfactual", None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("system", "fault", "error_type"),
    [
        ("long_context", "lossy_update", "UpdateError"),
        ("rag", "retrieval_miss", "RetrievalError"),
        ("mem0", "spurious_delete", "DeletionError"),
        ("mem0", "filter_drop", "RetrievalError"),
        ("evermemos", "drop_fact", "ExtractionError"),
        ("evermemos", "truncate_context", "ResponseError"),
    ],
)
def test_injected_faults_label_their_op(system: str, fault: str, error_type: str) -> None:
    workload = generate_workload(2, seed=3)
    labels = []
    for conv in workload.conversations:
        run = run_conversation(system, conv, faults=FaultSpec({fault: 1.0}), seed=3)
        faulted = {r.seq for r in run.log if r.fault == fault}
        assert faulted
        for case in run.failed():
            label = label_case(run, case)
            labels.append(label)
            if label.source == "injected":
                assert label.op_index in faulted and label.fault == fault
    assert any(lab.source == "injected" and lab.error_type == error_type for lab in labels)


def test_multi_hop_with_both_facts_dropped_blames_the_first_extraction() -> None:
    conv = conversation([["My sister's name is Ana.", "Ana lives in Madrid."]], [
        q("q1", "Where does Maya's sister live?", "Madrid", ("D1:1", "Ana"), ("D1:2", "Madrid"), category="multi-hop"),
    ])  # fmt: skip
    run, _ = traced_run("mem0", conv, faults=FaultSpec({"drop_fact": 1.0}))
    label = label_case(run, "mem0:hand:q1")
    first = next(r for r in run.log if r.name == "mem0.fact_extraction")
    assert (label.error_type, label.op_index, label.source) == (
        "ExtractionError",
        first.seq,
        "injected",
    )
    assert label.method == "replay+ideal-downstream"  # no single correction, with real later ops


def test_fault_decisions_follow_the_seed() -> None:
    conv = generate_workload(1, seed=4).conversations[0]

    def faulted(seed: int) -> list[tuple[str, tuple[str, ...]]]:
        run = run_conversation(
            "long_context", conv, faults=FaultSpec({"lossy_update": 0.3}), seed=seed
        )
        return [(r.name, r.output_refs) for r in run.log if r.fault]

    assert faulted(1) == faulted(1)
    assert faulted(1) != faulted(2)


def test_replay_case_matches_the_traced_label() -> None:
    workload = generate_workload(2, seed=9)
    spec = FaultSpec.parse("all=0.1")
    conv = workload.conversations[0]
    run = run_conversation("evermemos", conv, faults=spec, seed=9)
    case = run.failed()[0]
    traced = label_case(run, case)
    again = replay_case("evermemos", workload, case, faults="all=0.1", seed=9)
    assert (again.error_type, again.op_name, again.op_index, again.op_outputs) == (
        traced.error_type, traced.op_name, traced.op_index, traced.op_outputs,
    )  # fmt: skip
    assert again.op_id is None
    right = next(c for c, r in run.results.items() if r.correct)
    assert (
        replay_case("evermemos", workload, right, faults="all=0.1", seed=9).reason
        == "answered right"
    )
    with pytest.raises(KeyError):
        replay_case("rag", workload, case)
    with pytest.raises(KeyError):
        replay_case("evermemos", Workload("w", (conv,)), "evermemos:user-01:q999")

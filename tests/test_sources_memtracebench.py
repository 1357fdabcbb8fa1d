"""MemTraceBench / smartcomment execution graphs -> records that follow our trace contract.

Shape tests use ``../shared/samples/smartcomment_export_sample.json`` (made with smartcomment,
invented annotation values); the last test records a tiny pipeline with the real
``smartcomment`` 0.1.2 package (Python 3.12, in a cached venv) and imports its export.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.errors import DecodeError
from memtrace_otel.semconv import OpKind, SpanRecord
from memtrace_otel.semconv import attributes as attr
from memtrace_otel.sources import (
    OTHER_KIND,
    decode_document,
    decode_memtracebench,
    export_source,
    load_memtracebench,
    open_source,
)
from memtrace_otel.sources._memtracebench import decode_value, op_kind, stable_id
from tests._smartcomment import smartcomment_python
from tests.conftest import shared_path

QA_OP = "op-dd1fe34e10924d6192f711d387a52408"
QUERY = "query:locomo-qa-1-1@1"


@pytest.fixture
def sample() -> dict[str, Any]:
    path = shared_path("samples", "smartcomment_export_sample.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _by_op_name(records: tuple[SpanRecord, ...] | list[SpanRecord]) -> dict[str, SpanRecord]:
    return {str(r.attributes[attr.MEMTRACE_OP_NAME]): r for r in records}


def test_one_span_per_operation_in_execution_order(sample: dict[str, Any]) -> None:
    graph = decode_memtracebench(sample, path="sample.json")
    names = [r.attributes[attr.MEMTRACE_OP_NAME] for r in graph.records]
    assert names == [
        "memory_system.message_buffer_update",
        "memory_system.message_buffer_update",
        "memory_system.add",
        "memory_system.retrieve",
        "question-answering",
        "llm-judge",
    ]
    starts = [r.start_time_unix_nano for r in graph.records]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert (graph.system, graph.store_id) == ("rag", "locomo-1")


def test_contract_attributes(sample: dict[str, Any]) -> None:
    ops = _by_op_name(decode_memtracebench(sample).records)
    add = ops["memory_system.add"]
    assert add.name == "create_memory"
    assert dict(add.attributes) == {
        attr.MEMTRACE_OP_KIND: "create",
        attr.MEMTRACE_OP_NAME: "memory_system.add",
        attr.MEMTRACE_OP_INPUTS: ("message-buffer@3",),
        attr.MEMTRACE_OP_OUTPUTS: ("mem-0@1",),
        attr.MEMTRACE_STAGE: "construction",
        attr.MEMTRACE_SYSTEM: "rag",
        attr.GEN_AI_MEMORY_STORE_ID: "locomo-1",
        attr.GEN_AI_OPERATION_NAME: "create_memory",
        attr.MEMTRACE_SOURCE_OP_ID: "op-edd8b74881b643e284f61dd7b544b393",
    }
    retrieve = ops["memory_system.retrieve"]
    assert retrieve.attributes[attr.MEMTRACE_OP_INPUTS] == (QUERY, "mem-0@1")
    assert (
        retrieve.attributes[attr.MEMTRACE_STAGE],
        retrieve.attributes[attr.MEMTRACE_CASE_ID],
    ) == (
        "retrieval",
        QUERY,
    )
    qa = ops["question-answering"]
    assert qa.name == "memtrace.generate question-answering"
    assert (qa.attributes[attr.MEMTRACE_OP_KIND], qa.attributes[attr.MEMTRACE_STAGE]) == (
        "generate",
        "response",
    )
    judge = ops["llm-judge"]
    assert judge.attributes[attr.MEMTRACE_STAGE] == "evaluation"
    assert judge.attributes[attr.MEMTRACE_JUDGE_VERDICT] == "incorrect"
    # The judge's response feeds its score inside the op: a chain step, not an output.
    [score] = judge.attributes[attr.MEMTRACE_OP_OUTPUTS]  # type: ignore[misc]
    assert str(score).startswith("judge_score:float:")
    [step] = json.loads(str(judge.attributes[attr.MEMTRACE_SOURCE_CHAIN]))
    assert step["ref"].startswith("judge_response:str:") and len(step["from"]) == 3
    assert attr.MEMTRACE_CASE_ID not in ops["memory_system.add"].attributes


def test_variable_events_values_and_digests(sample: dict[str, Any]) -> None:
    first = decode_memtracebench(sample).records[0]
    events = {e.attributes[attr.MEMTRACE_VARIABLE_REF]: e for e in first.events}
    # Both inputs were written by no op: they are recorded; the output always is.
    assert set(events) == {"message-buffer@1", "U1:D1:1@1", "message-buffer@2"}
    message = events["U1:D1:1@1"].attributes
    assert message[attr.MEMTRACE_VARIABLE_ROLE] == "input"
    assert message[attr.MEMTRACE_VARIABLE_CATEGORY] == "message"
    value = json.loads(str(message[attr.MEMTRACE_VARIABLE_VALUE]))
    assert value["content"] == "I went to a LGBTQ support group yesterday."
    assert str(message[attr.MEMTRACE_VARIABLE_DIGEST]).startswith("sha256:")
    meta = json.loads(str(message[attr.MEMTRACE_VARIABLE_META]))
    assert meta["dia_id"] == "D1:1" and meta["created_at"].startswith("2026-")
    assert events["message-buffer@2"].attributes[attr.MEMTRACE_VARIABLE_ROLE] == "output"
    assert events["message-buffer@2"].attributes[attr.MEMTRACE_VARIABLE_CATEGORY] == "memory"


def test_repr_values_are_unquoted(sample: dict[str, Any]) -> None:
    ops = _by_op_name(decode_memtracebench(sample).records)
    [prediction] = [
        e
        for e in ops["question-answering"].events
        if e.attributes[attr.MEMTRACE_VARIABLE_ROLE] == "output"
    ]
    assert prediction.attributes[attr.MEMTRACE_VARIABLE_VALUE] == "a bakery"
    assert prediction.attributes[attr.MEMTRACE_VARIABLE_CATEGORY] == "prediction"


def test_traces_per_session_links_to_writers_and_stable_ids(sample: dict[str, Any]) -> None:
    graph = decode_memtracebench(sample)
    assert len({r.trace_id for r in graph.records}) == 3
    ops = _by_op_name(graph.records)
    add, retrieve = ops["memory_system.add"], ops["memory_system.retrieve"]
    [link] = retrieve.links
    assert (link.trace_id, link.span_id) == (add.trace_id, add.span_id)
    assert link.attributes == {attr.MEMTRACE_VARIABLE_REF: "mem-0@1"}
    assert graph.span_ids[QA_OP] == stable_id(sample["graph_id"], QA_OP, width=16)
    assert decode_memtracebench(copy.deepcopy(sample)).records == graph.records


def test_cases_and_labels(sample: dict[str, Any]) -> None:
    graph = decode_memtracebench(sample)
    [case] = graph.cases
    assert case.as_dict() == {
        "case_id": QUERY,
        "question": "Where did Caroline go yesterday?",
        "gold_answers": ["LGBTQ support group"],
        "evidence_refs": ["U1:D1:1@1"],
        "verdict": "incorrect",
        "prediction": "a bakery",
    }
    [label] = graph.labels
    qa = _by_op_name(graph.records)["question-answering"]
    assert (label.case_id, label.error_type, label.op_id, label.op_name) == (
        QUERY,
        "ResponseError",
        qa.span_id,
        "question-answering",
    )
    assert label.scored and label.source_op_id == QA_OP


def test_cases_without_annotations_come_from_the_judge(sample: dict[str, Any]) -> None:
    del sample["data"]["annotations"]
    graph = decode_memtracebench(sample)
    [case] = graph.cases
    assert graph.labels == ()
    assert case.verdict == "incorrect"
    assert case.gold_answers == ("LGBTQ support group",) and case.prediction == "a bakery"
    assert case.evidence_refs == ("U1:D1:1@1",)  # from the query's metadata.evidence


def test_unnamed_ops_are_kept_and_sentinels_dropped(sample: dict[str, Any]) -> None:
    data = sample["data"]
    data["operations"].append(
        {
            "op_id": "op-x",
            "op_name": None,
            "category": "operation",
            "session_id": "__none__",
            "created_at": "2026-11-29 13:50:13.600",
        }
    )
    data["operations"].append({"op_id": "__none_op__", "op_name": None, "category": "operation"})
    data["edges"].append(
        {"op_id": "op-x", "source_full_node_id": "COMMENT:NONE@1", "target_full_node_id": "mem-0@1"}
    )
    records = decode_memtracebench(sample).records
    assert len(records) == 7
    unnamed = records[-1]
    assert unnamed.attributes[attr.MEMTRACE_OP_KIND] == OTHER_KIND
    assert unnamed.attributes[attr.MEMTRACE_OP_NAME] == "unnamed"
    assert unnamed.attributes[attr.MEMTRACE_OP_INPUTS] == ()
    assert unnamed.name == "memtrace.other unnamed"


def test_non_memory_labels_are_not_scored_and_missing_ops_are_reported(
    sample: dict[str, Any],
) -> None:
    note = sample["data"]["annotations"][0]
    note["final_error_type"] = "JudgeError"
    assert decode_memtracebench(sample).labels[0].scored is False
    note["final_op_id"] = "op-missing"
    with pytest.raises(DecodeError) as info:
        decode_memtracebench(sample, path="s.json")
    assert info.value.field == "data.annotations[0].final_op_id"
    errors: list[DecodeError] = []
    [label] = decode_memtracebench(sample, on_error=lambda kind, e: errors.append(e)).labels
    assert label.op_id is None and len(errors) == 1


@pytest.mark.parametrize(
    ("name", "category", "kind"),
    [
        ("memory_system.extract_facts", "operation", OpKind.EXTRACT),
        ("memory_system.update_memory_decision", "update", OpKind.UPDATE),
        ("memory_system.add_to_vector_store", "update", OpKind.CREATE),
        ("memory_system.search_vector_store", "retrieval", OpKind.RETRIEVE),
        ("memory_system.agentic_final_rerank", "retrieval", OpKind.FILTER),
        ("evermemos.boundary_detection", "operation", OpKind.EXTRACT),
        ("memory_system.memory_update", "update", OpKind.UPDATE),
        ("something_new", "retrieval", OpKind.RETRIEVE),
        (None, "deletion", OpKind.DELETE),
        (None, "evaluation", OTHER_KIND),
    ],
)
def test_op_kind_table(name: str | None, category: str, kind: str) -> None:
    assert op_kind(name, category) == kind


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": [1]}', {"a": [1]}),
        ("'x'", "x"),
        ("['a', 'b']", ["a", "b"]),
        ("0.0", 0.0),
        ("plain words", "plain words"),
        ("[broken", "[broken"),
    ],
)
def test_value_strings(text: str, value: Any) -> None:
    assert decode_value(text) == value


def test_structural_errors(sample: dict[str, Any]) -> None:
    with pytest.raises(DecodeError, match="not a smartcomment export"):
        decode_memtracebench({"graph_id": "g"})
    bad = copy.deepcopy(sample)
    bad["data"]["edges"] = "nope"
    with pytest.raises(DecodeError) as info:
        decode_memtracebench(bad, path="b.json")
    assert info.value.field == "data.edges"
    bad = copy.deepcopy(sample)
    bad["data"]["operations"][0]["created_at"] = "yesterday"
    with pytest.raises(DecodeError, match="invalid timestamp"):
        decode_memtracebench(bad)


def test_sources_detect_the_format_and_collect_cases(
    tmp_path: Path, sample: dict[str, Any]
) -> None:
    path = tmp_path / "locomo_locomo-1.json"
    path.write_text(json.dumps(sample))
    source = open_source(str(path), strict=True)
    records = list(source.records())
    assert len(records) == 6 and records[0].source == f"{path}:1"
    assert [c.case_id for c in source.cases] == [QUERY]
    assert [lb.error_type for lb in source.labels] == ["ResponseError"]
    assert len(decode_document(sample)) == 6
    assert load_memtracebench(path).records == decode_memtracebench(sample, path=str(path)).records
    # ... and export writes the cases and labels beside the traces.
    result = export_source(open_source(str(path)), tmp_path / "out")
    assert result.spans == 6 and result.cases_path is not None and result.labels_path is not None
    assert json.loads(result.labels_path.read_text())["op_id"] == records[4].span_id
    reloaded = list(open_source(str(result.traces_path), strict=True).records())
    assert reloaded == records


# --- the real smartcomment package ---------------------------------------------------------
RECORDER = r"""
import json, sys
from smartcomment import comment_graph, comment_session, comment_op, comment_variable

def fixed(name):
    return lambda _value: name

with comment_graph(user_id="locomo-1", project_id="rag") as graph:
    with comment_session(session_id="s1", comment="session 1", category="memory_construction"):
        buffer = comment_variable([], to_runtime=True, category="message_buffer", id_strategy=fixed("message-buffer"))
        contents = []
        for i, text in enumerate(["I went to a support group yesterday.", "That's great!"], 1):
            msg = comment_variable({"role": "user", "content": text}, to_runtime=True, category="message",
                                   id_strategy=fixed(f"U1:D1:{i}"), metadata={"dia_id": f"D1:{i}"})
            contents.append(text)
            comment_op(inputs=[buffer, msg],
                       outputs=[(list(contents), {"id_strategy": fixed("message-buffer"), "category": "message_buffer"})],
                       op_name="memory_system.message_buffer_update", category="update")
            buffer = graph.get_latest_variable("message-buffer")
        comment_op(inputs=[buffer], outputs=[({"id": "mem-0", "text": " ".join(contents)},
                   {"id_strategy": fixed("mem-0"), "category": "memory_entry"})],
                   op_name="memory_system.add", category="update")
        memory = graph.get_latest_variable("mem-0")
    with comment_session(comment="search", category="memory_search"):
        query = comment_variable("Where did she go yesterday?", to_runtime=True, category="message & query",
                                 class_name="query", id_strategy=fixed("qa-1"), metadata={"evidence": ["U1:D1:1"]})
        comment_op(inputs=[query, memory], outputs=[([{"id": "mem-0"}], {"id_strategy": fixed("r-qa-1"),
                   "category": "retrieval", "class_name": "retrieved"})],
                   op_name="memory_system.retrieve", category="retrieval")
        retrieved = graph.get_latest_variable("retrieved:r-qa-1")
    with comment_session(comment="eval", category="memory_evaluation"):
        qa = comment_op(inputs=[query, retrieved], outputs=[("a bakery", {"category": "llm_response",
                        "class_name": "prediction", "id_strategy": fixed("p1")})],
                        op_name="question-answering", category="operation")
        prediction = graph.get_latest_variable("prediction:p1")
        gold = comment_variable("support group", to_runtime=True, category="golden_answers",
                                class_name="golden_answers", id_strategy=fixed("g1"))
        comment_op(inputs=[query, gold, prediction], outputs=[(0.0, {"category": "variable",
                   "class_name": "judge_score", "id_strategy": fixed("s1")})],
                   op_name="llm-judge", category="evaluation")
    data = graph.export_graph()
data["data"]["annotations"] = [{"query_id": "query:qa-1@1", "query": "Where did she go yesterday?",
    "golden_answers": ["support group"], "prediction": "a bakery", "source_evidence_ids": ["U1:D1:1@1"],
    "final_error_type": "RetrievalError", "final_op_id": qa.op_id}]
json.dump(data, sys.stdout, default=str)
"""


def test_real_smartcomment_export_imports(tmp_path: Path) -> None:
    python = smartcomment_python()
    script = tmp_path / "record.py"
    script.write_text(RECORDER)
    run = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    path = tmp_path / "export.json"
    path.write_text(run.stdout)

    source = open_source(str(path), strict=True)
    records = list(source.records())
    ops = _by_op_name(records)
    assert [r.attributes[attr.MEMTRACE_OP_NAME] for r in records] == [
        "memory_system.message_buffer_update",
        "memory_system.message_buffer_update",
        "memory_system.add",
        "memory_system.retrieve",
        "question-answering",
        "llm-judge",
    ]
    second = records[1]
    assert second.attributes[attr.MEMTRACE_OP_INPUTS] == ("message-buffer@2", "U1:D1:2@1")
    assert second.attributes[attr.MEMTRACE_OP_OUTPUTS] == ("message-buffer@3",)
    assert ops["memory_system.retrieve"].attributes[attr.MEMTRACE_CASE_ID] == "query:qa-1@1"
    assert ops["llm-judge"].attributes[attr.MEMTRACE_JUDGE_VERDICT] == "incorrect"
    [label] = source.labels
    assert (label.error_type, label.op_id) == ("RetrievalError", ops["question-answering"].span_id)
    [case] = source.cases
    assert case.question == "Where did she go yesterday?" and case.gold_answers == (
        "support group",
    )

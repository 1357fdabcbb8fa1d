"""MemTraceBench files written by the real ``smartcomment`` 0.1.2 recorder (Python 3.12).

The environment comes from ``scripts/smartcomment_env.sh`` (``make smartcomment``; cached in
``~/.cache/memtrace-otel``). The fidelity test records a run of our four reference systems the way
MemBase records its systems and checks that attribution on the imported files names the same
culprit as attribution on our own spans of the same run; the semantics test records the
recorder's hard cases by hand (nodes shared across questions, chains inside one op, a mem0
update decision that deletes, a ``comment_fn`` judge) and checks what the importer makes of them.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memtrace_bench.memtracebench import export_memtracebench
from memtrace_bench.methods import compare_recordings
from memtrace_otel.attribution import get_method
from memtrace_otel.cli import main
from memtrace_otel.job import run_batch
from memtrace_otel.semconv import attributes as attr
from memtrace_otel.sources import load_memtracebench, open_source
from tests._smartcomment import smartcomment_python as find_smartcomment_python


@pytest.fixture(scope="module")
def smartcomment_python() -> str:
    """The interpreter of the cached smartcomment environment (created by the repo's script)."""
    return find_smartcomment_python()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, smartcomment_python: str) -> Path:
    """A small faulty run of the four systems, and its smartcomment recording beside it."""
    root = tmp_path_factory.mktemp("mtb")
    args = ["--users", "2", "--sessions", "4", "--questions", "6", "--faults", "all", "--seed", "7"]
    assert main(["bench", "generate", "--out", str(root / "bench"), *args, "--no-progress"]) == 0
    export_memtracebench(root / "bench", root / "mtb", python=smartcomment_python)
    return root


def test_fidelity_two_recordings_one_verdict(recorded: Path) -> None:
    labels = [
        json.loads(line)
        for line in (recorded / "bench" / "labels.jsonl").read_text().splitlines()
        if line.strip()
    ]
    annotated = [row for row in labels if row.get("error_type")]
    files = sorted((recorded / "mtb").glob("*.json"))
    assert {json.loads(f.read_text())["project_id"] for f in files} == {
        "long_context",
        "rag",
        "mem0",
        "evermemos",
    }
    notes = [n for f in files for n in json.loads(f.read_text())["data"]["annotations"]]
    assert len(notes) == len(annotated) >= 20
    assert all(n["final_op_id"].startswith("op-") for n in notes)

    report = compare_recordings(recorded / "bench", recorded / "mtb", get_method("evidence"))
    assert report.annotated == len(annotated)
    assert report.agreement >= 0.98, report.disagreements
    # Every annotated failure gets a verdict, or a stated reason for none.
    assert report.empty_reasons == 0
    scores = report.annotation_scores["overall"]
    assert scores["total"] == len(annotated) and scores["error_type_accuracy"] > 0.5


def test_recorder_output_has_the_harness_shape(recorded: Path) -> None:
    data = json.loads(next((recorded / "mtb").glob("mem0_*.json")).read_text())
    sessions = data["data"]["sessions"]
    assert all(
        s["session_name"] is None and s["session_id"].startswith("session-") for s in sessions
    )
    assert [s["category"] for s in sessions[-2:]] == ["memory_search", "memory_evaluation"]
    names = [n["full_node_id"] for n in data["data"]["nodes"]]
    assert any(n.startswith("judge_score:float:") for n in names)
    assert any(n.startswith("raw_extract_facts_response:str:") for n in names)
    # Identical judge scores are one node, shared by every question that failed.
    edges = data["data"]["edges"]
    score_writers = Counter(
        e["op_id"] for e in edges if e["target_full_node_id"].startswith("judge_score:")
    )
    scores = {
        e["target_full_node_id"]
        for e in edges
        if e["target_full_node_id"].startswith("judge_score:")
    }
    assert len(scores) < len(score_writers)


def test_bench_evaluate_scores_annotations(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scores.json"
    assert main(["bench", "evaluate", str(recorded / "mtb"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "annotated failures (" in text and "injected failures" not in text
    scores = json.loads(out.read_text())["evidence"]["annotation"]
    total = sum(
        len(json.loads(f.read_text())["data"]["annotations"])
        for f in (recorded / "mtb").glob("*.json")
    )
    assert scores["overall"]["total"] == total and scores["missing"] == 0
    assert set(scores["by_system"]) == {"long_context", "rag", "mem0", "evermemos"}
    # One file works too, and its verdicts carry the file's op ids.
    one = next((recorded / "mtb").glob("rag_*.json"))
    verdicts, _ = run_batch([str(one)], get_method("evidence"))
    ops = {o["op_id"] for o in json.loads(one.read_text())["data"]["operations"]}
    assert verdicts and all(v.source_op_id in ops for v in verdicts if v.op_id)


# --- the recorder's hard cases, recorded by hand ---------------------------------------------
RECORDER = r"""
import json, sys
from smartcomment import (comment_fn, comment_graph, comment_link, comment_op, comment_op_scope,
                          comment_session, comment_variable)

def fixed(name):
    return lambda _value: name

JSON4 = lambda v: json.dumps(v, indent=4, sort_keys=True)

with comment_graph(user_id="u1", project_id="mem0") as graph:
    with comment_session(category="memory_construction"):
        prompt = comment_variable("Extract facts.\nReturn JSON.", to_runtime=True, category="prompt",
                                  id_strategy=fixed("fact-extraction-system-prompt"))
        msg = comment_variable({"role": "user", "content": "I adopted a parrot named Rex."},
                               to_runtime=True, category="message", id_strategy=fixed("U1:D1:1"),
                               encoding_fn=JSON4)
        with comment_op_scope(op_name="memory_system.extract_facts", category="extraction") as ex:
            raw = comment_variable('```json\n{"facts": ["Has a parrot named Rex"]}\n```', to_runtime=True,
                                   class_name="raw_fact_extraction_response", category="llm_response")
            comment_link(source=msg, target=raw)
            comment_link(source=prompt, target=raw)
            clean = comment_variable('{"facts": ["Has a parrot named Rex"]}', to_runtime=True,
                                     class_name="fact_extraction_response_with_code_block_removing",
                                     id_strategy=fixed(raw.name), category="llm_response")
            comment_link(source=raw, target=clean)
            facts = comment_variable(["Has a parrot named Rex"], to_runtime=True, class_name="extracted_facts",
                                     id_strategy=fixed(raw.name), category="llm_response")
            comment_link(source=clean, target=facts)
        unit = {"id": "m1", "memory": "Has a parrot named Rex"}
        comment_op(inputs=[facts], outputs=[(unit, {"id_strategy": fixed("m1"), "category": "memory_entry",
                   "encoding_fn": JSON4})], op_name="memory_system.add_to_vector_store", category="embedding")
        stored = graph.get_latest_variable("m1")
        msg2 = comment_variable({"role": "user", "content": "I live in Prague."}, to_runtime=True,
                                category="message", id_strategy=fixed("U1:D1:2"), encoding_fn=JSON4)
        comment_op(inputs=[msg2], outputs=[({"id": "m2", "memory": "Lives in Prague"}, {"id_strategy": fixed("m2"),
                   "category": "memory_entry", "encoding_fn": JSON4})], op_name="memory_system.add_to_vector_store",
                   category="embedding")
        kept = graph.get_latest_variable("m2")
        with comment_op_scope(op_name="memory_system.update_memory_decision", category="update") as dec:
            action = comment_variable({"memory": [{"id": "0", "event": "DELETE"}]}, to_runtime=True,
                                      class_name="update_action", category="llm_response", encoding_fn=JSON4)
            comment_link(source=stored, target=action)
            comment_link(source=stored, target=("DELETED", {"id_strategy": fixed("delete_marker"),
                         "encoding_fn": str, "category": "delete_marker"}))
    queries = {}
    with comment_session(category="memory_search"):
        for qa in ("q1", "q2"):
            q = comment_variable(f"What is the parrot called? ({qa})", to_runtime=True, class_name="query",
                                 category="message & query", id_strategy=fixed(qa), metadata={"evidence": ["U1:D1:1"]})
            queries[qa] = q
            # q1's search returns a (content-named) list; q2's points at the stored unit itself.
            found = [([], {"class_name": "retrieved", "category": "retrieval"})] if qa == "q1" else [kept]
            comment_op(inputs=[q], outputs=found, op_name="memory_system.search_vector_store",
                       category="retrieval")
    retrieved = graph.get_latest_variable("retrieved:" + __import__("smartcomment.identity.registry", fromlist=["x"])._content_strategy([]))
    judge_ops = {}
    with comment_session(category="memory_evaluation"):
        for qa, q in queries.items():
            comment_op(inputs=[q, retrieved], outputs=[("I don't know.", {"class_name": "prediction",
                       "category": "llm_response"})], op_name="question-answering", category="operation")
            pred = graph.get_latest_variable("prediction:" + __import__("smartcomment.identity.registry", fromlist=["x"])._content_strategy("I don't know."))
            gold = comment_variable(["Rex"], to_runtime=True, class_name="golden_answers", category="golden_answers")

            @comment_fn(op_name="llm-judge", category="evaluation",
                        param_options={"-o": {"class_name": "judge_score"}})
            def judge(question, golden_answers, prediction):
                from smartcomment import current_op
                judge_ops[qa] = current_op().op_id
                reply = comment_variable("WRONG", to_runtime=True, class_name="judge_response", category="llm_response")
                for source in (question, golden_answers, prediction):
                    comment_link(source=source, target=reply)
                return 0.0

            judge(q, gold, pred)
    data = graph.export_graph()
data["data"]["annotations"] = [
    {"query_id": "query:q1@1", "query": "What is the parrot called? (q1)", "golden_answers": ["Rex"],
     "prediction": "I don't know.", "source_evidence_ids": ["U1:D1:1@1"],
     "final_error_type": "DeletionError", "final_op_id": dec.op_id},
]
data["judges"] = judge_ops
json.dump(data, sys.stdout, default=str)
"""


@pytest.fixture(scope="module")
def hand_recorded(tmp_path_factory: pytest.TempPathFactory, smartcomment_python: str) -> Path:
    folder = tmp_path_factory.mktemp("hand")
    script = folder / "record.py"
    script.write_text(RECORDER)
    run = subprocess.run(
        [smartcomment_python, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    path = folder / "mem0_u1.json"
    path.write_text(run.stdout)
    return path


def _ops(path: Path) -> dict[str, Any]:
    graph = load_memtracebench(path)
    return {str(r.attributes[attr.MEMTRACE_SOURCE_OP_ID]): r for r in graph.records}


def test_shared_nodes_keep_each_question_on_its_own_ops(hand_recorded: Path) -> None:
    raw = json.loads(hand_recorded.read_text())
    ops = _ops(hand_recorded)
    by_case: dict[str, list[str]] = {}
    for record in ops.values():
        case = record.attributes.get(attr.MEMTRACE_CASE_ID)
        if case is not None:
            by_case.setdefault(str(case), []).append(str(record.attributes[attr.MEMTRACE_OP_NAME]))
    assert {k: sorted(v) for k, v in by_case.items()} == {
        f"query:{qa}@1": ["llm-judge", "memory_system.search_vector_store", "question-answering"]
        for qa in ("q1", "q2")
    }
    scores = set()
    for qa, op_id in raw["judges"].items():
        judge = ops[op_id]
        assert judge.attributes[attr.MEMTRACE_CASE_ID] == f"query:{qa}@1"
        assert judge.attributes[attr.MEMTRACE_JUDGE_VERDICT] == "incorrect"
        # Both judges write the one shared score node (and the one shared reply node).
        outputs = [str(r) for r in judge.attributes[attr.MEMTRACE_OP_OUTPUTS]]  # type: ignore[union-attr]
        [score] = [r for r in outputs if r.startswith("judge_score:float:")]
        scores.add(score)
    assert len(scores) == 1
    graph = load_memtracebench(hand_recorded)
    assert [c.verdict for c in graph.cases] == ["incorrect", "incorrect"]
    assert all(c.gold_answers == ("Rex",) for c in graph.cases)


def test_chains_fold_into_one_op_and_a_deleting_decision_is_a_deletion(hand_recorded: Path) -> None:
    records = {str(r.attributes[attr.MEMTRACE_OP_NAME]): r for r in _ops(hand_recorded).values()}
    extract = records["memory_system.extract_facts"].attributes
    assert set(extract[attr.MEMTRACE_OP_INPUTS]) == {  # type: ignore[arg-type]
        "fact-extraction-system-prompt@1",
        "U1:D1:1@1",
    }
    [facts] = extract[attr.MEMTRACE_OP_OUTPUTS]  # type: ignore[misc]
    assert str(facts).startswith("extracted_facts:str:") and str(facts).endswith("@1")
    chain = json.loads(str(extract[attr.MEMTRACE_SOURCE_CHAIN]))
    assert [step["ref"].split(":", 1)[0] for step in chain] == [
        "raw_fact_extraction_response",
        "fact_extraction_response_with_code_block_removing",
    ]
    decision = records["memory_system.update_memory_decision"]
    assert decision.attributes[attr.MEMTRACE_OP_KIND] == "delete"
    assert decision.attributes[attr.MEMTRACE_OP_INPUTS] == ("m1@1",)
    assert "m1@2" in decision.attributes[attr.MEMTRACE_OP_OUTPUTS]  # type: ignore[operator]
    [tombstone] = [e for e in decision.events if e.attributes[attr.MEMTRACE_VARIABLE_REF] == "m1@2"]
    assert tombstone.attributes[attr.MEMTRACE_VARIABLE_DELETED] is True
    # The judge (comment_fn) is stamped before its body, yet runs after the answer it judges.
    names = [
        str(r.attributes[attr.MEMTRACE_OP_NAME])
        for r in sorted(_ops(hand_recorded).values(), key=lambda r: r.start_time_unix_nano)
    ]
    assert names[-4:] == ["question-answering", "llm-judge", "question-answering", "llm-judge"]
    assert len({r.start_time_unix_nano for r in _ops(hand_recorded).values()}) == len(names)


def test_a_search_that_points_at_stored_units_selected_them(hand_recorded: Path) -> None:
    searches = {
        str(r.attributes[attr.MEMTRACE_CASE_ID]): r
        for r in _ops(hand_recorded).values()
        if r.attributes[attr.MEMTRACE_OP_NAME] == "memory_system.search_vector_store"
    }
    listed, pointing = searches["query:q1@1"], searches["query:q2@1"]
    [out] = listed.attributes[attr.MEMTRACE_OP_OUTPUTS]  # type: ignore[misc]
    assert str(out).startswith("retrieved:list:")
    assert pointing.attributes[attr.MEMTRACE_OP_INPUTS] == ("query:q2@1", "m2@1")
    [candidates] = pointing.attributes[attr.MEMTRACE_OP_OUTPUTS]  # type: ignore[misc]
    [event] = [e for e in pointing.events if e.attributes[attr.MEMTRACE_VARIABLE_REF] == candidates]
    assert event.attributes[attr.MEMTRACE_VARIABLE_CATEGORY] == "candidates"
    assert json.loads(str(event.attributes[attr.MEMTRACE_VARIABLE_VALUE])) == [
        {"id": "m2", "memory": "Lives in Prague"}
    ]
    # The unit keeps its one writer: the op that stored it.
    [link] = [lk for lk in pointing.links if lk.attributes[attr.MEMTRACE_VARIABLE_REF] == "m2@1"]
    writer = next(r for r in _ops(hand_recorded).values() if r.span_id == link.span_id)
    assert writer.attributes[attr.MEMTRACE_OP_NAME] == "memory_system.add_to_vector_store"


def test_annotated_deletion_is_scored_on_the_decision(
    hand_recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [label] = load_memtracebench(hand_recorded).labels
    assert label.error_type == "DeletionError" and label.op_name == (
        "memory_system.update_memory_decision"
    )
    # The decision is an op of the imported spans.
    assert label.op_id in {r.span_id for r in open_source(str(hand_recorded)).records()}
    verdicts, _ = run_batch([str(hand_recorded)], get_method("evidence"))
    # Both questions lost the parrot to the same decision; only q1 is annotated.
    assert {v.case_id: (v.error_type, v.op_id, v.source_op_id) for v in verdicts} == {
        case: ("DeletionError", label.op_id, label.source_op_id)
        for case in ("query:q1@1", "query:q2@1")
    }
    out = tmp_path / "scores.json"
    assert main(["bench", "evaluate", str(hand_recorded), "--json", str(out)]) == 0
    assert "annotated failures (1 labelled" in capsys.readouterr().out
    # Scored as the paper does: an exact match on the error type and on the annotated op id.
    overall = json.loads(out.read_text())["evidence"]["annotation"]["overall"]
    assert (overall["total"], overall["error_type_correct"], overall["op_id_correct"]) == (1, 1, 1)

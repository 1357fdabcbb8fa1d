"""The suite of real apps, small, end to end (issue 29): the mem0 app in mem0ai 2.x and in mem0
1.x's classic pipeline (the cached environment of ``scripts/mem0_legacy_env.sh``; required under
``CI=true``), and the manual-API RAG app, each a real program under ``opentelemetry-instrument`` against the scripted model
server, which plants one question of each role. Wrong answers are flagged with ``memtrace
feedback`` (every other one with ``--expected``), ``memtrace attribute`` runs with no cases file,
and every planted fault must get its label and op with ``SPAN_AND_EVENT`` capture.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from memtrace_bench.apps.cli import SMALL, classic_python
from memtrace_bench.apps.model import FaultModel
from memtrace_bench.apps.runner import APPS, AppRun, check_labels, classic_app, run_app, score
from memtrace_bench.apps.scenario import ATTRIBUTES, FAILURE_ROLES, ROLES, make_world

REPO = Path(__file__).resolve().parents[1]
LABELS = {"ExtractionError", "UpdateError", "DeletionError", "RetrievalError", "ResponseError"}
SEED = 1


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AppRun]:
    python = classic_python(required=os.environ.get("CI") == "true")
    specs = [APPS["mem0"], APPS["rag"]] + ([classic_app(python)] if python else [])
    root = tmp_path_factory.mktemp("apps")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two cores; mostly imports
        futures = {
            spec.name: pool.submit(
                run_app,
                spec,
                "SPAN_AND_EVENT",
                root / spec.name,
                make_world(SEED, SMALL, classic=spec.classic),
            )
            for spec in specs
        }
        return {name: future.result() for name, future in futures.items()}


def _check(run: AppRun, skip: frozenset[str] = frozenset()) -> None:
    assert not run.dropped, run.dropped  # every planted fault took effect
    failed = [c for c in run.cases if c.label is not None]
    assert {c.label for c in failed} == LABELS
    assert len(failed) == len(FAILURE_ROLES) and sum(c.label is None for c in run.cases) == 3
    assert sum(c.expected is not None for c in failed) == (len(failed) + 1) // 2
    for case in run.cases:
        verdict = run.verdicts.get(str(case.case_id)) or {}
        if case.label is None:  # a correct answer is never blamed
            assert not verdict.get("error_type"), (case, verdict)
            continue
        if case.label in skip:
            continue
        assert (verdict.get("error_type"), verdict.get("op_name")) == (case.label, case.op), (
            case,
            verdict.get("reason"),
        )


def test_mem0_app_in_mem0_2(runs: dict[str, AppRun]) -> None:
    run = runs["mem0"]
    assert run.log["mem0ai"].startswith("2.")
    _check(run)


def test_mem0_2_wrong_merge_is_an_update_error(runs: dict[str, AppRun]) -> None:
    # A merge that kept the stale value: the newer note was read by the merge completion whose
    # text the update wrote, then deleted; the merge's update lost it (issue 30).
    run = runs["mem0"]
    [case] = [c for c in run.cases if c.label == "UpdateError"]
    verdict = run.verdicts[str(case.case_id)]
    assert (verdict["error_type"], verdict["op_name"]) == ("UpdateError", "mem0.update")


def test_mem0_app_in_the_classic_pipeline(runs: dict[str, AppRun]) -> None:
    if "mem0-classic" not in runs:  # CI=true fails in the fixture instead
        pytest.skip("no mem0 1.x environment (scripts/mem0_legacy_env.sh could not make it)")
    run = runs["mem0-classic"]
    assert run.log["mem0ai"] == "1.0.11"
    _check(run)
    s = score(run)
    assert (s.type_accuracy, s.op_accuracy, s.correct_blamed) == (1.0, 1.0, 0)


def test_rag_app_on_the_manual_api(runs: dict[str, AppRun]) -> None:
    run = runs["rag"]
    _check(run)
    assert {c.op for c in run.cases if c.op} == set(APPS["rag"].ops.values())


def test_a_planted_fault_that_did_not_take_effect_is_dropped_and_counted() -> None:
    world = make_world(SEED, SMALL)
    slots = {s.role: s for s in world.slots}
    model = FaultModel(world)
    answers = []
    for role in ("omit", "retrieval_miss", "plain"):
        slot = slots[role]
        fact = slot.fact(slot.value)
        answers.append(
            {
                "slot": slot.key,
                "answer": slot.answer(slot.value),  # answered right after all
                "hits": [{"id": "1", "memory": fact}],
                "case_id": role,
                "traceparent": None,
            }
        )
    log = {"users": {slots["plain"].user: {"answers": answers, "store": []}}}
    cases, dropped = check_labels(world, log, APPS["mem0"].ops, model.planted)
    assert [c.role for c in cases] == ["plain"]
    assert dropped == Counter({"omit: answered right": 1, "retrieval_miss: answered right": 1})
    # Answered wrongly but the fact was retrieved after all: not a retrieval miss.
    answers[1]["answer"] = "Sorry, I don't have that information."
    store = [{"id": "1", "memory": slots["retrieval_miss"].fact(slots["retrieval_miss"].value)}]
    log = {"users": {slots["plain"].user: {"answers": answers[1:2], "store": store}}}
    _, dropped = check_labels(world, log, APPS["mem0"].ops, model.planted)
    assert dropped == Counter({"retrieval_miss: the fact was retrieved": 1})


def test_the_world_is_deterministic_and_sized_for_the_bench() -> None:
    assert make_world(3).plan() == make_world(3).plan()
    assert make_world(3).plan() != make_world(4).plan()
    world = make_world(0)
    labels = Counter(s.label for s in world.slots)
    assert sum(n for label, n in labels.items() if label) >= 35
    assert all(labels[label] >= 5 for label in LABELS) and labels[None] >= 8
    assert {s.role for s in make_world(0, SMALL).slots} == set(ROLES)


def _benchmark_texts() -> str:
    """The benchmark systems' source (their fact, message and question texts live there)."""
    found = []
    for folder in ("memtrace_otel/systems", "memtrace_bench/systems"):
        found += [p.read_text(encoding="utf-8") for p in sorted((REPO / folder).glob("*.py"))]
    assert found, "the benchmark systems' texts were not found"
    return re.sub(r"\s+", " ", "\n".join(found)).lower()


def test_no_sentence_of_the_suite_is_a_benchmark_text() -> None:
    corpus = _benchmark_texts()
    sentences: set[str] = set()
    for classic in (False, True):
        world = make_world(0, classic=classic)
        for s in world.slots:
            values = [v for v in (s.value, s.new_value, s.wrong_value) if v]
            sentences |= {s.intro, s.question, *(s.fact(v) for v in values)}
            sentences |= {s.answer(v) for v in values}
            if s.changes:
                sentences.add(s.change)
            if s.filler_value:
                sentences |= {s.filler_message, s.filler_fact}
    # And each template's fixed text (what stays when the names and values change).
    for attribute in ATTRIBUTES:
        for template in (attribute.intro, attribute.change, attribute.question, attribute.answer):
            sentences |= {f.strip() for f in re.split(r"\{\w+\}", template) if len(f.strip()) > 15}
    reused = sorted(t for t in sentences if t.lower() in corpus)
    assert not reused, reused


def test_a_mem0_reference_run_streamed_or_spilled_gets_the_in_memory_verdicts(
    tmp_path: Path,
) -> None:
    # Real mem0 under REFERENCE capture: values, and the feedback's expected answers, only by
    # reference. Large exports stream by store or spill by default: each must resolve them as
    # the in-memory run does (they used to abstain on every case).
    import json

    from memtrace_otel.cli import main

    run = run_app(APPS["mem0"], "REFERENCE", tmp_path / "mem0", make_world(SEED, SMALL))
    _check(run)
    expected = {c: (v.get("error_type"), v.get("op_name")) for c, v in run.verdicts.items()}
    traces = str(run.folder / "traces.jsonl")
    for n, extra in enumerate(
        (["--executor", "inline"], ["--executor", "local[2]"], ["--memory-bound", "64M"])
    ):
        out = tmp_path / f"verdicts-{n}.jsonl"
        assert main(["attribute", traces, "--out", str(out), "--quiet", *extra]) in (0, 1)
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        got = {row["case_id"]: (row.get("error_type"), row.get("op_name")) for row in rows}
        assert got == expected, extra

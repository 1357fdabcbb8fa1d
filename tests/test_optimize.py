"""``memtrace optimize``: the verdict-steered loop, offline and with a scripted model."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from memtrace_bench.optimize import (
    PARAM_SPACES,
    ReferenceSystem,
    candidate_values,
    optimize,
    ranked_params,
    split_workload,
)
from memtrace_bench.systems import generate_workload
from memtrace_otel.attribution import OpenAIChatModel
from memtrace_otel.cli import main
from memtrace_otel.semconv import attributes as A
from tests._openai_server import ScriptedOpenAI

# Four users, split two/two: long_context fails on train by its trim (UpdateError) and once by
# its answer step (ResponseError, an op with a prompt).
WORKLOAD = generate_workload(4, seed=1)
TRAIN, HELDOUT = split_workload(WORKLOAD, seed=0)


def _resource_versions(trace_file: Path) -> set[str]:
    found: set[str] = set()
    for line in trace_file.read_text(encoding="utf-8").splitlines():
        for rs in json.loads(line).get("resourceSpans", []):
            for attr in rs["resource"]["attributes"]:
                if attr["key"] == A.MEMTRACE_OPTIMIZE_VERSIONS:
                    found.update(v["stringValue"] for v in attr["value"]["arrayValue"]["values"])
    return found


def _prompt_refs(trace_file: Path) -> set[str]:
    refs: set[str] = set()
    for line in trace_file.read_text(encoding="utf-8").splitlines():
        for rs in json.loads(line).get("resourceSpans", []):
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    for attr in span.get("attributes", []):
                        if attr["key"] == A.MEMTRACE_PROMPT_REF:
                            refs.add(attr["value"]["stringValue"])
    return refs


def test_split_is_by_user_and_deterministic() -> None:
    train, held = split_workload(generate_workload(6, seed=2), seed=5)
    again_train, _ = split_workload(generate_workload(6, seed=2), seed=5)
    assert [c.conv_id for c in train] == [c.conv_id for c in again_train]
    assert not {c.conv_id for c in train} & {c.conv_id for c in held}
    assert len(train) + len(held) == 6
    with pytest.raises(ValueError):
        split_workload(generate_workload(1, seed=2))


def test_steering_follows_the_verdict_distribution() -> None:
    space = PARAM_SPACES["mem0"]
    blame = {("mem0.rerank", "RetrievalError"): 4, ("mem0.search", "RetrievalError"): 1}
    ranked = ranked_params(space, blame)
    assert [p.name for p, _ in ranked] == ["threshold", "top_k"]
    # A filter that drops evidence lowers its cut-off; a retrieval miss raises top-k.
    threshold, top_k = ranked[0][0], ranked[1][0]
    assert all(v < 0.2 for v in candidate_values(threshold, 0.2, 0.8))
    assert all(v > 8 for v in candidate_values(top_k, 8, 0.2))
    # Verdicts at ops no parameter owns steer nothing.
    assert ranked_params(space, {("mem0.answer", "ResponseError"): 9}) == []


def test_offline_loop_fixes_the_blamed_parameter(tmp_path: Path) -> None:
    result = optimize(ReferenceSystem("long_context"), TRAIN, HELDOUT, tmp_path, rounds=3)
    report = result.report
    first = report["rounds"][0]
    assert first["verdicts"]["UpdateError @ long_context.trim"] >= 1
    accepted = first["accepted"][0]
    assert accepted["variable"] == "param:long_context.window_tokens@2"
    assert accepted["train_after"] > accepted["train_before"]
    assert "-400" in accepted["diff"] and "+" in accepted["diff"]
    assert report["final_params"]["window_tokens"] > 400
    assert "param:long_context.window_tokens@2" in report["final_versions"]
    assert "UpdateError @ long_context.trim" not in report["verdicts_after"]
    assert result.heldout_after >= result.heldout_before
    # The ResponseError at the answer step has a prompt but no model to rewrite it: skipped.
    skipped = [s for r in report["rounds"] for s in r["skipped"]]
    assert any(s["op"] == "long_context.answer" and "model" in s["reason"] for s in skipped)
    # Traces name the versions that answered: round 1 ran @1, the final run @2.
    assert "param:long_context.window_tokens@1" in _resource_versions(
        tmp_path / "round-1" / "traces.jsonl"
    )
    assert "param:long_context.window_tokens@2" in _resource_versions(
        tmp_path / "heldout-after" / "traces.jsonl"
    )
    assert (tmp_path / "report.md").read_text().startswith("# memtrace optimize: long_context")
    assert json.loads((tmp_path / "report.json").read_text())["rounds_run"] == report["rounds_run"]


class _Spy(ReferenceSystem):
    """Records which conversations each run saw."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen: list[tuple[str, ...]] = []

    def run(self, conversations: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.seen.append(tuple(c.conv_id for c in conversations))
        return super().run(conversations, **kwargs)


def test_heldout_split_never_chooses(tmp_path: Path) -> None:
    other = generate_workload(6, seed=9).conversations[:2]
    renamed = [dataclasses.replace(c, conv_id=f"other-{c.conv_id}") for c in other]
    spy_a, spy_b = _Spy("long_context"), _Spy("long_context")
    a = optimize(spy_a, TRAIN, HELDOUT, tmp_path / "a", rounds=2)
    b = optimize(spy_b, TRAIN, renamed, tmp_path / "b", rounds=2)
    # The same choices whatever the held-out users are...
    assert a.report["final_versions"] == b.report["final_versions"]
    assert a.report["final_params"] == b.report["final_params"]
    assert [r["accepted"] for r in a.report["rounds"]] == [
        r["accepted"] for r in b.report["rounds"]
    ]
    # ...and held-out conversations are only ever run whole, for scoring (before, per round, after).
    held = tuple(c.conv_id for c in HELDOUT)
    held_runs = [s for s in spy_a.seen if set(s) & set(held)]
    assert all(s == held for s in held_runs)
    assert len(held_runs) == 2 + a.report["rounds_run"]


def test_no_optimisable_variable_is_reported_and_skipped(tmp_path: Path) -> None:
    system = ReferenceSystem("long_context")
    system.params = ()
    report = optimize(system, TRAIN, HELDOUT, tmp_path, rounds=3).report
    assert report["rounds_run"] == 1  # nothing to accept: stop
    skipped = report["rounds"][0]["skipped"]
    assert {s["op"] for s in skipped} >= {"long_context.trim"}
    assert all("no optimisable variable" in s["reason"] for s in skipped)
    assert report["heldout"]["after"] == report["heldout"]["before"]
    assert "skipped UpdateError at `long_context.trim`" in (tmp_path / "report.md").read_text()


def test_interrupted_run_resumes_after_the_last_finished_round(tmp_path: Path) -> None:
    system = _Spy("long_context")

    def stop(number: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        optimize(system, TRAIN, HELDOUT, tmp_path, rounds=3, on_round=stop)
    state = json.loads((tmp_path / "state.json").read_text())
    assert len(state["rounds"]) == 1
    assert state["versions"]["param:long_context.window_tokens"] == 2
    rounds_seen: list[int] = []
    log = io.StringIO()
    result = optimize(
        system, TRAIN, HELDOUT, tmp_path, rounds=3, on_round=rounds_seen.append, progress=log
    )
    assert "resuming after round 1" in log.getvalue()
    assert rounds_seen and rounds_seen[0] == 2
    assert result.report["rounds"][0] == state["rounds"][0]
    assert "param:long_context.window_tokens@2" in result.report["final_versions"]


class _Optimiser:
    """The scripted optimiser model: feedback, aggregation, then a rewrite."""

    def __init__(self, rewritten: str) -> None:
        self.rewritten = rewritten

    def __call__(self, kind: str, body: dict[str, Any]) -> str:
        task = body["messages"][-1]["content"]
        if '{"feedback"' in task:
            return json.dumps({"feedback": "Say when the context does not hold the answer."})
        if '{"changes"' in task:
            return json.dumps({"changes": "1. Ask to abstain only when nothing matches."})
        return json.dumps({"prompt": self.rewritten})


def _chat(server: ScriptedOpenAI) -> OpenAIChatModel:
    return OpenAIChatModel(
        model="optimiser-1", base_url=server.base_url, api_key="k", timeout=5.0, backoff=0.01
    )


def test_model_rewrite_reaches_the_blamed_prompt_and_bumps_its_version(tmp_path: Path) -> None:
    system = ReferenceSystem("long_context")
    old = system.prompts()["answer"]
    new = old + "\nIf several lines disagree, prefer the most recent one."
    with ScriptedOpenAI(responder=_Optimiser(new)) as server:
        report = optimize(system, TRAIN, HELDOUT, tmp_path, rounds=1, model=_chat(server)).report
        prompts = server.chat_prompts()
    accepted = {e["variable"]: e for e in report["rounds"][0]["accepted"]}
    assert "prompt:long_context.answer@2" in accepted
    assert "+If several lines disagree" in accepted["prompt:long_context.answer@2"]["diff"]
    assert "prompt:long_context.answer@2" in report["final_versions"]
    # Feedback was asked about the blamed answer step, with the recorded text fenced as data.
    feedback = [p for p in prompts if '{"feedback"' in p]
    assert feedback and all('"long_context.answer"' in p for p in feedback)
    assert all("<<<DATA id=question>>>" in p for p in feedback)
    # The final traces link the answer ops to the new prompt version.
    assert "prompt:long_context.answer@2" in _prompt_refs(
        tmp_path / "heldout-after" / "traces.jsonl"
    )


def test_rewrite_that_drops_a_placeholder_is_rejected(tmp_path: Path) -> None:
    system = ReferenceSystem("long_context")
    old = system.prompts()["answer"]
    assert "{question}" in old
    broken = old.replace("{question}", "the question")
    with ScriptedOpenAI(responder=_Optimiser(broken)) as server:
        report = optimize(system, TRAIN, HELDOUT, tmp_path, rounds=1, model=_chat(server)).report
    rejected = [e for e in report["rounds"][0]["rejected"] if e["variable"].startswith("prompt:")]
    assert rejected and "{question}" in rejected[0]["reason"]
    assert "placeholder" in rejected[0]["reason"]
    assert "prompt:long_context.answer@1" in report["final_versions"]
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["prompts"]["answer"] == old
    assert "rejected `prompt:long_context.answer@2`" in (tmp_path / "report.md").read_text()


def test_cli_optimize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "optimize",
            "--systems",
            "long_context",
            "--users",
            "4",
            "--seed",
            "1",
            "--rounds",
            "1",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("long_context")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == {"long_context"}
    assert (tmp_path / "long_context" / "report.json").exists()
    assert main(["optimize", "--systems", "nope", "--out", str(tmp_path)]) == 2


def test_malformed_model_reply_rejects_the_rewrite(tmp_path: Path) -> None:
    system = ReferenceSystem("long_context")
    with ScriptedOpenAI(responder=lambda kind, body: "not json at all") as server:
        report = optimize(system, TRAIN, HELDOUT, tmp_path, rounds=1, model=_chat(server)).report
    rejected = [e for e in report["rounds"][0]["rejected"] if e["variable"].startswith("prompt:")]
    assert rejected and rejected[0]["reason"].startswith("model failed")
    assert "prompt:long_context.answer@1" in report["final_versions"]

"""``memtrace attribute`` on traces written with the upstream GenAI conventions only (issue 24).

The app (``tests/_upstream_app.py``) plays a memory layer traced by another instrumentation:
memory spans by ``gen_ai.operation.name``, chat spans (hand-written, or the real upstream
OpenAI instrumentor's own spans over the real ``openai`` client and a loopback server), outcomes
as ``gen_ai.evaluation.result`` events. No cases file: the failures come from the evaluations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.cli import main
from tests._upstream_app import AppRun, Truth, run_app
from tests.conftest import REPO


@dataclass
class Scored:
    run: AppRun
    verdicts: dict[str, dict[str, object]]

    @property
    def failed(self) -> int:
        return len(self.run.failed)

    def right_type(self) -> float:
        return (
            sum(self.verdicts[c]["error_type"] == t.label for c, t in self.run.failed.items())
            / self.failed
        )

    def right_op(self) -> float:
        return (
            sum(self.verdicts[c]["op_id"] == t.span_id for c, t in self.run.failed.items())
            / self.failed
        )

    def wrong(self) -> list[str]:
        """Cases with a verdict that is not right (abstentions are not wrong)."""
        return [
            f"{t.fault}: {v['error_type']} at {v['op_name']} ({v['reason']})"
            for c, t in self.run.failed.items()
            if (v := self.verdicts[c])["error_type"] is not None
            and (v["error_type"] != t.label or v["op_id"] != t.span_id)
        ]


def attribute(folder: Path, run: AppRun) -> Scored:
    out = folder / "verdicts.jsonl"
    assert main(["attribute", str(run.traces), "--out", str(out)]) == 0
    verdicts = {}
    for line in out.read_text().splitlines():
        verdict = json.loads(line)
        verdicts[verdict["case_id"]] = verdict
    # Every failure is found without a cases file, and no correct answer is blamed.
    assert set(verdicts) == set(run.failed)
    assert not set(verdicts) & set(run.correct)
    return Scored(run, verdicts)


@pytest.fixture(scope="module")
def hand_written(tmp_path_factory: pytest.TempPathFactory) -> Scored:
    folder = tmp_path_factory.mktemp("upstream-on")
    return attribute(folder, run_app(folder, seed=0))


@pytest.fixture(scope="module")
def real_openai(tmp_path_factory: pytest.TempPathFactory) -> Scored:
    # The app runs in a process of its own, as an app does: the upstream instrumentation reads
    # its semantic-convention settings once per process.
    folder = tmp_path_factory.mktemp("upstream-openai-v2")
    env = {
        **os.environ,
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
    }
    subprocess.run(
        [sys.executable, "-m", "tests._upstream_app", str(folder), "1"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=300,
    )
    truth = json.loads((folder / "truth.json").read_text())
    run = AppRun(
        traces=folder / "traces.jsonl",
        failed={c: Truth(**t) for c, t in truth["failed"].items()},
        correct=truth["correct"],
    )
    return attribute(folder, run)


def test_the_upstream_app_has_enough_failures_of_every_label(hand_written: Scored) -> None:
    labels = {t.label for t in hand_written.run.failed.values()}
    assert labels == {
        "ExtractionError",
        "UpdateError",
        "DeletionError",
        "RetrievalError",
        "ResponseError",
    }
    assert hand_written.failed >= 40 and hand_written.run.correct


def test_verdicts_say_what_was_inferred(hand_written: Scored) -> None:
    for verdict in hand_written.verdicts.values():
        assert "not in the traces" not in str(verdict["reason"])
        assert any("upstream GenAI spans" in str(item) for item in verdict["unchecked"])  # type: ignore[attr-defined]


def test_capture_on_names_the_planted_faults(hand_written: Scored) -> None:
    assert hand_written.right_type() >= 0.85, hand_written.wrong()
    assert hand_written.right_op() >= 0.75, hand_written.wrong()


def test_the_real_upstream_openai_instrumentors_chat_spans_are_read(real_openai: Scored) -> None:
    spans = [json.loads(line) for line in real_openai.run.traces.read_text().splitlines()]
    scopes = {
        scope["scope"]["name"]
        for line in spans
        for resource in line["resourceSpans"]
        for scope in resource["scopeSpans"]
    }
    assert any(name.startswith("opentelemetry.util.genai") or "openai" in name for name in scopes)
    assert real_openai.right_type() >= 0.85, real_openai.wrong()
    assert real_openai.right_op() >= 0.75, real_openai.wrong()


def test_the_real_upstream_openai_instrumentors_traces_stream_with_the_in_memory_verdicts(
    real_openai: Scored, tmp_path: Path
) -> None:
    # The chat spans of the real instrumentor name no store: streamed (and spilled), each store's
    # partition gets those of its traces.
    for scaled in (["--executor", "inline"], ["--memory-bound", "64M"]):
        out = tmp_path / f"verdicts{scaled[0]}.jsonl"
        args = ["attribute", str(real_openai.run.traces), "--out", str(out), "--quiet"]
        assert main([*args, *scaled]) == 0
        got = {v["case_id"]: v for v in map(json.loads, out.read_text().splitlines())}
        assert {c: (v["error_type"], v["op_id"], v["reason"]) for c, v in got.items()} == {
            c: (v["error_type"], v["op_id"], v["reason"]) for c, v in real_openai.verdicts.items()
        }


def test_capture_off_gives_abstentions_or_right_verdicts_only(tmp_path: Path) -> None:
    run = run_app(tmp_path, capture=False, seed=2)
    scored = attribute(tmp_path, run)
    assert scored.wrong() == []


@pytest.mark.parametrize(
    "scaled",
    [["--executor", "inline"], ["--executor", "local[2]"], ["--memory-bound", "64M"]],
    ids=["inline", "pool", "spilled"],
)
def test_a_run_asked_to_stream_or_spill_upstream_traces_gets_the_in_memory_verdicts(
    hand_written: Scored,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    scaled: list[str],
) -> None:
    # Exports over 64 MiB stream by store (or spill) by default. A chat span names no store, so
    # partitions by store once found 0 failed cases, and later such traces were read in memory.
    # Each store now gets the spans of its traces that name no store, adapted with its own.
    out = tmp_path / "verdicts.jsonl"
    report = tmp_path / "report"
    args = ["attribute", str(hand_written.run.traces), "--out", str(out), "--quiet", *scaled]
    assert main([*args, "--report", str(report)]) == 0
    assert "read in memory" not in capsys.readouterr().err
    got = {v["case_id"]: v for v in map(json.loads, out.read_text().splitlines())}
    assert {c: (v["error_type"], v["op_id"], v["reason"]) for c, v in got.items()} == {
        c: (v["error_type"], v["op_id"], v["reason"]) for c, v in hand_written.verdicts.items()
    }
    assert len(list((report / "cases").iterdir())) == len(got)


def _spans(line: str) -> list[dict[str, Any]]:
    return [
        sp
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for sp in ss["spans"]
    ]


def _attribute(span: dict[str, Any], key: str) -> object:
    return next(
        (next(iter(a["value"].values())) for a in span.get("attributes", ()) if a["key"] == key),
        None,
    )


def test_a_trace_searching_two_stores_streams_with_the_in_memory_verdicts(
    hand_written: Scored, tmp_path: Path
) -> None:
    # One question searches two users' stores: its answer belongs to the store of the search
    # nearest in time, which a partition can tell only with both stores' spans of that trace.
    # Each store gets a partition of its own, so the two stores are partitioned apart (spilled:
    # each store's graph is built alone).
    from memtrace_otel.attribution import EvidenceMethod
    from memtrace_otel.job import run_batch

    lines = hand_written.run.traces.read_text().splitlines()
    spans = [(n, sp) for n, line in enumerate(lines) for sp in _spans(line)]

    def search(store: str, blamed: str | None) -> tuple[int, dict[str, Any]]:
        return next(
            (n, sp)
            for n, sp in spans
            if _attribute(sp, "gen_ai.operation.name") == "search_memory"
            and _attribute(sp, "gen_ai.memory.store.id") == store
            and (hand_written.verdicts.get(sp["traceId"]) or {}).get("error_type") == blamed
        )

    # A question whose answer is blamed: which store's graph holds the answer decides its verdict.
    _, first = search("user-1", "ResponseError")
    line, second = search("user-2", None)
    chat = next(
        sp
        for _, sp in spans
        if sp["traceId"] == first["traceId"] and _attribute(sp, "gen_ai.operation.name") == "chat"
    )
    start = int(chat["startTimeUnixNano"])
    moved = {
        **second,
        "traceId": first["traceId"],
        "parentSpanId": first.get("parentSpanId", ""),
        "startTimeUnixNano": str(start - 2),  # nearer the answer than user-1's search
        "endTimeUnixNano": str(start - 1),
    }
    value = json.loads(lines[line])
    value["resourceSpans"][0]["scopeSpans"][0]["spans"] = [moved]
    lines[line] = json.dumps(value)
    traces = tmp_path / "two-stores.jsonl"
    traces.write_text("\n".join(lines) + "\n")

    runs = {}
    for name, scaled in (
        ("memory", {}),
        ("inline", {"executor": "inline", "partitions": 64}),
        ("spilled", {"memory_bound": "64M"}),
    ):
        out = tmp_path / f"{name}.jsonl"
        run_batch([str(traces)], EvidenceMethod(), out=str(out), **scaled)
        runs[name] = {
            v["case_id"]: (v["error_type"], v["op_id"], v["reason"])
            for v in map(json.loads, out.read_text().splitlines())
        }
    assert runs["inline"] == runs["memory"] and runs["spilled"] == runs["memory"]
    assert first["traceId"] in runs["memory"]


def test_upstream_traces_split_over_two_files_stream_with_the_in_memory_verdicts(
    hand_written: Scored, tmp_path: Path
) -> None:
    # A chat call and its trace's memory spans may sit in different files (two exporters, a
    # rotated file): the chat call is routed by its trace whichever file holds it.
    from memtrace_otel.attribution import EvidenceMethod
    from memtrace_otel.job import run_batch

    lines = hand_written.run.traces.read_text().splitlines()
    halves = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for parity, path in enumerate(halves):
        path.write_text("".join(line + "\n" for line in lines[parity::2]))
    out = tmp_path / "verdicts.jsonl"
    run_batch([str(p) for p in halves], EvidenceMethod(), out=str(out), executor="inline")
    got = {v["case_id"]: v for v in map(json.loads, out.read_text().splitlines())}
    assert {c: (v["error_type"], v["op_id"], v["reason"]) for c, v in got.items()} == {
        c: (v["error_type"], v["op_id"], v["reason"]) for c, v in hand_written.verdicts.items()
    }


def test_spans_naming_no_store_are_counted_as_in_memory_though_no_partition_keeps_them(
    hand_written: Scored, tmp_path: Path
) -> None:
    # The chat and HTTP spans of upstream traces name no store and hold no op: their own
    # partition (or the spill) counts them without keeping them, the chat calls being kept by
    # the stores of their traces. Retried lines (duplicates) and a span id sent again with other
    # content (a conflict) must count as in one process.
    from memtrace_otel.attribution import EvidenceMethod
    from memtrace_otel.job import run_batch

    lines = hand_written.run.traces.read_text().splitlines()
    loose = [
        n
        for n, line in enumerate(lines)
        if all(_attribute(sp, "gen_ai.memory.store.id") is None for sp in _spans(line))
    ]
    assert len(loose) > 100
    conflict = json.loads(lines[loose[1]])
    conflict["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] = "changed on the way"
    traces = tmp_path / "retried.jsonl"
    extra = [lines[n] for n in loose[::7]] + [json.dumps(conflict)]
    traces.write_text("\n".join(lines + extra) + "\n")

    runs = {}
    for name, scaled in (
        ("memory", {}),
        ("inline", {"executor": "inline"}),
        ("spilled", {"memory_bound": "64M"}),
    ):
        out = tmp_path / f"{name}.jsonl"
        _, summary = run_batch([str(traces)], EvidenceMethod(), out=str(out), **scaled)
        verdicts = {
            v["case_id"]: (v["error_type"], v["op_id"])
            for v in map(json.loads, out.read_text().splitlines())
        }
        runs[name] = (
            summary.records,
            summary.duplicates,
            summary.skipped_records,
            dict(summary.skipped_by_kind),
            verdicts,
        )
    assert runs["memory"][1] == len(extra) - 1 and runs["memory"][2] == 1
    assert runs["inline"] == runs["memory"] and runs["spilled"] == runs["memory"]

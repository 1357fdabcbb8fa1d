"""The scaled batch job (``--executor local[N]``, ``--memory-bound``) keeps the promises of the
single-process run (issues 17, 20 and 23):

- a kill -9 mid-run keeps the verdicts of the partitions (stores) that finished, and the rerun
  completes with every case once, no torn line, and the verdicts of an uninterrupted run;
- ``--redo-stale`` redoes exactly the cases whose store got newer ops, as without an executor;
- failed cases flagged only by feedback spans are found as without an executor.

Every run is a real ``memtrace attribute`` process; the local executor is a real process pool.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memtrace_otel.attribution._model import Verdict
from memtrace_otel.cli import main
from memtrace_otel.job import read_verdicts
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E

ROOT = Path(__file__).resolve().parents[1]
FEEDBACK_KEY = "scaled runs' shared feedback key"
"""Feedback here is signed (docs/feedback.md): one names its case by id alone, which only a
verified feedback (or an allowed service) may do."""

SLOW_CLI = r"""
import os, sys, time
from memtrace_otel.attribution import EvidenceMethod, register_method
from memtrace_otel.cli import main
from memtrace_otel.semconv import attributes as A

class Slow(EvidenceMethod):
    def attribute(self, G, case):
        time.sleep(float(os.environ.get("MEMTRACE_TEST_SLOW", "0")))
        return super().attribute(G, case)

register_method("evidence", Slow)
sys.exit(main(sys.argv[1:]))
"""
"""The CLI with an evidence method that sleeps per case (forked pool workers inherit it)."""

SCALED = {"executor": ["--executor", "local[2]"], "memory-bound": ["--memory-bound", "64M"]}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 memory stores (8 partitions on local[2]), 142 failed cases."""
    folder = tmp_path_factory.mktemp("scaled")
    argv = ["bench", "generate", "--users", "3", "--faults", "all=0.3", "--out", str(folder)]
    assert main([*argv, "--no-progress"]) == 0
    return folder


def _argv(bench: Path, out: Path, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-c", SLOW_CLI, "attribute", str(bench / "traces.jsonl")),
        *("--cases", str(bench / "cases.jsonl"), "--out", str(out), "--quiet", *extra),
    ]


def _run(argv: list[str], slow: float = 0.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMTRACE_TEST_SLOW": str(slow)}
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _latest(path: Path) -> dict[str, Verdict]:
    return {v.case_id: v for v in read_verdicts(path)}


@pytest.fixture(scope="module")
def uninterrupted(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Verdict]:
    """The verdicts of a plain (single-process) run."""
    out = tmp_path_factory.mktemp("clean") / "v.jsonl"
    done = _run(_argv(bench, out))
    assert done.returncode == 0, done.stderr[-3000:]
    return _latest(out)


@pytest.mark.parametrize("mode", sorted(SCALED))
def test_kill_9_mid_run_keeps_finished_partitions_and_the_rerun_completes(
    bench: Path, uninterrupted: dict[str, Verdict], tmp_path: Path, mode: str
) -> None:
    out = tmp_path / "v.jsonl"
    env = {**os.environ, "MEMTRACE_TEST_SLOW": "0.08"}
    # A session of its own: kill -9 takes the driver and its pool workers, as an OOM kill would.
    job = subprocess.Popen(
        _argv(bench, out, *SCALED[mode]),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and job.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.02)
        assert job.poll() is None, "the job ended before it could be killed"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
    assert job.returncode == -signal.SIGKILL
    kept = out.read_bytes().count(b"\n")
    total = len(uninterrupted)
    assert 1 <= kept < total  # really killed mid-run, after some partitions were appended

    rerun = _run(_argv(bench, out, *SCALED[mode]))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a whole line
    ids = [json.loads(line)["case_id"] for line in lines[:-1]]  # each line whole JSON
    assert len(ids) == len(set(ids)) == total  # none lost, none duplicated
    assert _latest(out) == uninterrupted
    print(f"\n[kill -9 {mode}] {kept} of {total} verdicts on disk at the kill, rest by the rerun")


# --- failed cases from feedback, and --redo-stale, at scale -----------------------------------
SCALES = {"plain": [], **SCALED}


def _production(folder: Path, users: int = 5) -> tuple[Path, Path]:
    """``users`` x 8 stores without judge ops (one planted fault each, as in tests._pipeline),
    and a second process's feedback: wrong answers flagged by traceparent (half with the
    expected answer), one by case id alone, right answers marked right; every feedback span
    written twice (an at-least-once exporter's retry)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from memtrace_otel.export import OtlpJsonLinesExporter
    from memtrace_otel.instrumentation import (
        CaptureConfig,
        FeedbackKey,
        MemTracer,
        WriterRegistry,
        last_answer,
        send_feedback,
    )
    from tests._pipeline import FAULTS, run_case

    key = FeedbackKey(FEEDBACK_KEY.encode())

    traces, feedback = folder / "traces.jsonl", folder / "feedback.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(traces)))
    capture = CaptureConfig(mode="SPAN_AND_EVENT")
    answers = {}
    for user in range(users):
        for fault in FAULTS:
            store = f"u{user}-{fault}"
            mt = MemTracer(
                tracer_provider=provider,
                system="test",
                store_id=store,
                capture=capture,
                registry=WriterRegistry(),
            )
            run_case(mt, provider.get_tracer("test"), store, fault, judge=False)
            answers[store] = last_answer()
    provider.shutdown()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(feedback)))
    for store, answer in sorted(answers.items()):
        assert answer is not None
        if store == "u0-update":  # a button that kept only the case id
            send_feedback(case_id=answer.case_id, correct=False, tracer_provider=provider, key=key)
            continue
        wrong = not store.endswith("-none")
        expected = "Porto" if wrong and int(store[1]) % 2 == 0 else None
        send_feedback(
            answer.traceparent,
            correct=not wrong,
            expected=expected,
            capture=capture,
            tracer_provider=provider,
            key=key,
        )
    provider.shutdown()
    feedback.write_text(feedback.read_text() * 2)
    return traces, feedback


def _later_ops(path: Path, stores: list[str]) -> Path:
    """New traces for ``stores``: a message ingested after the verdicts were made."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from memtrace_otel.export import OtlpJsonLinesExporter
    from memtrace_otel.instrumentation import MemTracer, WriterRegistry

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(path)))
    for store in stores:
        mt = MemTracer(
            tracer_provider=provider, system="test", store_id=store, registry=WriterRegistry()
        )
        message = mt.variable(f"msg:{store}:late", "Ana moved to Braga.", category="message")
        with mt.ingest("test.ingest", inputs=[message]):
            pass
    provider.shutdown()
    return path


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _production(tmp_path_factory.mktemp("production"))


def _attribute(
    sources: list[Path], folder: Path, *extra: str, signed: bool = True
) -> dict[str, object]:
    """``memtrace attribute SOURCES --out folder/v.jsonl --report folder/report``; the summary.
    ``signed``: the job shares the feedback key (and so refuses unsigned outcomes)."""
    argv = [sys.executable, "-m", "memtrace_otel.cli", "attribute", *map(str, sources)]
    argv += ["--out", str(folder / "v.jsonl"), "--report", str(folder / "report"), "--quiet"]
    env = {k: v for k, v in os.environ.items() if k != E.ENV_MEMTRACE_FEEDBACK_KEY}
    if signed:
        env[E.ENV_MEMTRACE_FEEDBACK_KEY] = FEEDBACK_KEY
    done = subprocess.run(
        [*argv, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "judge ops only" not in done.stderr
    summary: dict[str, object] = json.loads((folder / "report" / "summary.json").read_text())
    summary.pop("seconds")
    return summary


def test_scaled_runs_find_the_cases_feedback_flags_as_one_process_does(
    production: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, feedback = production
    runs = {}
    for mode, flags in SCALES.items():
        (tmp_path / mode).mkdir()
        runs[mode] = (
            _attribute([traces, feedback], tmp_path / mode, *flags),
            _latest(tmp_path / mode / "v.jsonl"),
        )
    summary, verdicts = runs["plain"]
    assert summary["cases_by_source"] == {"judge": 0, "feedback": 35}  # 5 users x 7 faults
    assert summary["feedback"]["failures"] == 35 and summary["feedback"]["successes"] == 5
    assert summary["feedback"]["read"] == 40 and summary["duplicates"] == 40
    assert len(verdicts) == 35
    for mode in SCALED:
        assert runs[mode] == (summary, verdicts), mode
    print(f"\n[feedback at scale] {len(verdicts)} verdicts, the same on {', '.join(SCALES)}")


def test_redo_stale_redoes_the_same_cases_with_and_without_scale_out(
    production: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, feedback = production
    for mode, flags in SCALES.items():
        (tmp_path / mode).mkdir()
        _attribute([traces, feedback], tmp_path / mode, *flags)
    stale = ["u1-deletion", "u3-extraction", "u4-none"]  # u4-none: marked right, no verdict
    later = _later_ops(tmp_path / "later.jsonl", stale)
    runs = {}
    for mode, flags in SCALES.items():
        before = (tmp_path / mode / "v.jsonl").read_text().count("\n")
        summary = _attribute([traces, feedback, later], tmp_path / mode, *flags, "--redo-stale")
        lines = (tmp_path / mode / "v.jsonl").read_text().splitlines()
        # (sorted: with an executor, stores append in the order their partitions finish)
        redone = sorted(json.loads(line)["case_id"] for line in lines[before:])
        runs[mode] = (summary, _latest(tmp_path / mode / "v.jsonl"), redone)
    summary, verdicts, redone = runs["plain"]
    assert redone == ["u1-deletion", "u3-extraction"]  # exactly the stale ones
    assert summary["redone"] == 2 and summary["resumed"] == 33 and summary["new"] == 2
    assert summary["in_out"] == 35  # the summary describes the whole file
    for mode in SCALED:
        assert runs[mode] == (summary, verdicts, redone), mode


def test_an_outcome_naming_a_case_of_another_store_is_settled_by_the_driver(
    tmp_path: Path,
) -> None:
    """A feedback naming case u1-update by id but pointing at u0-retrieval's answer span: alone,
    u0-retrieval's store would take it as its own (the id is not among its cases); over every
    store it belongs to u1-update. The driver redoes u0-retrieval in a second round, and no
    store writes the verdict it had to redo."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from memtrace_otel.export import OtlpJsonLinesExporter
    from memtrace_otel.instrumentation import FeedbackKey, send_feedback

    traces, feedback = _production(tmp_path, users=2)
    answer = next(
        json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        for line in traces.read_text().splitlines()
        if '"u0-retrieval"' in line and "memtrace.generate" in line
    )
    cross = tmp_path / "cross.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(cross)))
    send_feedback(
        f"00-{answer['traceId']}-{answer['spanId']}-01",
        case_id="u1-update",
        label="correct",  # the latest word on u1-update: right after all
        tracer_provider=provider,
        key=FeedbackKey(FEEDBACK_KEY.encode()),
    )
    provider.shutdown()
    runs = {}
    for mode, flags in SCALES.items():
        (tmp_path / mode).mkdir()
        summary = _attribute([traces, feedback, cross], tmp_path / mode, *flags)
        ids = [json.loads(line)["case_id"] for line in (tmp_path / mode / "v.jsonl").open()]
        assert len(ids) == len(set(ids)), mode  # nothing written, then redone
        runs[mode] = (summary, _latest(tmp_path / mode / "v.jsonl"))
    summary, verdicts = runs["plain"]
    assert "u1-update" not in verdicts and "u0-retrieval" in verdicts
    assert summary["feedback"]["successes"] == 3  # u0-none, u1-none, u1-update
    for mode in SCALED:
        assert runs[mode] == (summary, verdicts), mode


def test_evaluation_events_and_log_records_flag_the_same_cases_at_scale(tmp_path: Path) -> None:
    """Another evaluator's ``gen_ai.evaluation.result``: as an event on user 0's answer spans,
    as OTLP log records (a Collector logs file) naming user 1's."""
    traces, _ = _production(tmp_path, users=2)
    event = {
        "name": A.GEN_AI_EVALUATION_RESULT_EVENT,
        "timeUnixNano": str(time.time_ns()),
        "attributes": [
            {"key": A.GEN_AI_EVALUATION_SCORE_LABEL, "value": {"stringValue": "incorrect"}}
        ],
    }
    lines, logs = [], []
    for line in traces.read_text().splitlines():
        data = json.loads(line)
        span = data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        store = json.dumps(data)
        if "memtrace.generate" in span["name"] and '"u0-' in store and '-none"' not in store:
            span.setdefault("events", []).append(event)
        if "memtrace.generate" in span["name"] and '"u1-' in store and '-none"' not in store:
            logs.append({**event, "eventName": event["name"], "traceId": span["traceId"]})
            logs[-1]["spanId"] = span["spanId"]
        lines.append(json.dumps(data))
    evaluated = tmp_path / "evaluated.jsonl"
    evaluated.write_text("\n".join(lines) + "\n")
    records = [{k: v for k, v in r.items() if k != "name"} for r in logs]
    log_file = tmp_path / "logs.jsonl"
    log_file.write_text(json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}))
    runs = {}
    for mode, flags in SCALES.items():
        (tmp_path / mode).mkdir()
        summary = _attribute([evaluated, log_file], tmp_path / mode, *flags, signed=False)
        runs[mode] = (summary, _latest(tmp_path / mode / "v.jsonl"))
    summary, verdicts = runs["plain"]
    assert summary["feedback"]["failures"] == 14 and len(verdicts) == 14
    for mode in SCALED:
        assert runs[mode] == (summary, verdicts), mode

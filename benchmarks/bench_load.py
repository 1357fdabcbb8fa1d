"""Load: the live span processor under 8 threads and the batch job on many cases.

1. ``EvolutionGraphProcessor`` fed by 8 threads, each ending ``--spans`` real SDK spans (made once
   by ``MemTracer`` with capture on, one memory store per thread, then replayed through
   ``on_end`` so the figure is the processor's, not the tracer's). Checks no deadlock (every
   thread joins within its deadline), nothing unreported (received = folded + dropped), and
   bounded memory (the graph stays under ``max_ops``).
2. ``run_batch`` with the ``evidence`` method on a generated benchmark (``--users`` users of the
   four reference systems): cases per second, including loading.
3. The batch job on ``--cases`` failed cases (100,000 by default): a synthetic OTLP JSON Lines
   export is written directly (one small store per case: two messages stored as facts, a
   retrieval, an answer, a failed judgement; half the cases lose the fact at retrieval, half
   answer wrongly from it), then the real ``memtrace attribute`` CLI runs on it in a child
   process, once as users run it (streaming by store) and once with ``--memory-bound``. Checks that every case gets a
   verdict or a reported failure (unreported losses = 0) and that the verdicts name the
   planted faults; reports wall and CPU seconds, cases/s and the child's peak RSS.

Peak memory is the process's maximum RSS (``ru_maxrss``) after each part (part 3: the CLI's).

Run: nice -n 10 .venv/bin/python benchmarks/bench_load.py [--spans 100000] [--users 20]
         [--cases 100000] [--only processor|batch|cases ...]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.attribution import get_method
from memtrace_otel.cli import EXIT_OK
from memtrace_otel.cli import main as cli_main
from memtrace_otel.export import dumps_request, span_to_record
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.job import parse_summary_line, run_batch
from memtrace_otel.processing import EvolutionGraphProcessor

THREADS = 8
TEMPLATE = 2_000  # distinct spans made per thread; replayed to reach --spans


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def thread_spans(t: int) -> list[ReadableSpan]:
    """``TEMPLATE`` update ops on one memory store, as the SDK hands them to processors."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemTracer(
        tracer_provider=provider,
        system="mem0",
        store_id=f"user-{t}",
        capture=CaptureConfig(mode="SPAN_AND_EVENT"),
        registry=WriterRegistry(),
    )
    memory = mt.variable(f"mem:{t}", "v0", category="memory")
    for i in range(TEMPLATE):
        with mt.update("store.update", inputs=[memory]) as op:
            memory = op.output(memory.next(f"fact {i + 1} about user {t}"))
    return list(exporter.get_finished_spans())


def bench_processor(
    templates: list[list[ReadableSpan]], spans_per_thread: int, max_buffer: int | None
) -> None:
    processor = EvolutionGraphProcessor(max_buffer=max_buffer)
    start_gate = threading.Barrier(THREADS + 1)

    def feed(t: int) -> None:
        spans = templates[t]
        start_gate.wait()
        for i in range(spans_per_thread):
            processor.on_end(spans[i % len(spans)])

    threads = [threading.Thread(target=feed, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    start_gate.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join(timeout=600)
    fed = time.perf_counter() - start
    deadlocked = sum(thread.is_alive() for thread in threads)
    flushed = processor.force_flush(timeout_millis=120_000)
    total = time.perf_counter() - start
    stats = processor.stats
    processor.shutdown()
    sent = THREADS * spans_per_thread
    # Every span ended is either accepted (received) or dropped; every accepted one is folded,
    # still buffered, or counted as an error.
    unreported = (sent - stats["received"] - stats["dropped"]) + (
        stats["received"]
        - stats["folded"]
        - stats["buffered"]
        - stats["conversion_errors"]
        - stats["fold_errors"]
    )
    print(
        f"processor (max_buffer={processor.max_buffer}): "
        f"{THREADS} threads x {spans_per_thread} spans = {sent} spans"
    )
    print(
        f"  on_end: {sent / fed:,.0f} spans/s ({fed:.2f}s); with folding: {sent / total:,.0f} "
        f"spans/s ({total:.2f}s); flushed={flushed} deadlocked threads={deadlocked}"
    )
    print(
        f"  received={stats['received']} folded={stats['folded']} dropped={stats['dropped']} "
        f"buffered={stats['buffered']} ops in graph={stats['ops']} "
        f"(max_ops={processor.max_ops}) evicted_ops={stats['evicted_ops']} "
        f"fold_errors={stats['fold_errors']} unreported={unreported}"
    )
    print(f"  peak RSS so far: {rss_mb():.0f} MB")
    if deadlocked or unreported:
        sys.exit("processor load: deadlock or unreported spans")


def bench_batch(users: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        code = cli_main(["bench", "generate", "--users", str(users), "--out", tmp, "--no-progress"])
        if code != EXIT_OK:
            sys.exit(f"bench generate failed ({code})")
        start = time.perf_counter()
        verdicts, summary = run_batch(
            [str(folder / "traces.jsonl")],
            get_method("evidence"),
            cases_file=str(folder / "cases.jsonl"),
            out=folder / "verdicts.jsonl",
        )
        seconds = time.perf_counter() - start
        lines = (folder / "verdicts.jsonl").read_text().count("\n")
    print(
        f"batch: {users} users, {summary.records} spans, {summary.cases} failed cases -> "
        f"{len(verdicts)} verdicts ({lines} lines on disk) in {seconds:.2f}s = "
        f"{summary.cases / seconds:,.0f} cases/s including loading"
    )
    print(
        f"  skipped records={summary.skipped_records} skipped cases={summary.skipped_cases} "
        f"failed={len(summary.failed)} not in traces={len(summary.cases_not_in_traces)}"
    )
    print(f"  peak RSS so far: {rss_mb():.0f} MB")
    if lines != summary.cases - summary.skipped_cases:
        sys.exit("batch load: verdict lines do not match the cases")


# --- 3. the batch job on many cases ---------------------------------------------------------

FAULTS = ("retrieval", "response")
EXPECTED = {"retrieval": "RetrievalError", "response": "ResponseError"}
_TOKEN = "QQCASEQQ"  # stands for the case number in the template; never in a value (digests)
_CASE_ID = re.compile(r"case-(\d+)")


def _template_line(fault: str) -> str:
    """One case of the workload as one OTLP JSON line, through the real ``MemTracer`` and SDK.

    Its trace and span ids are replaced by ``{t0}``/``{s0}``... fields and ``_TOKEN`` by ``{c}``,
    so :meth:`str.format` writes a new case in microseconds without an SDK round trip.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemTracer(
        tracer_provider=provider,
        system="synthetic",
        store_id=f"user-{_TOKEN}",
        capture=CaptureConfig(mode="SPAN_AND_EVENT"),
        registry=WriterRegistry(),
    )
    case = f"case-{_TOKEN}"
    texts = ("My sister Ana moved to Porto last May.", "I love hiking in the mountains.")
    facts = ("Ana lives in Porto", "User likes hiking")
    stored = []
    for n, (text, fact) in enumerate(zip(texts, facts, strict=True), 1):
        message = mt.variable(f"msg:{_TOKEN}:{n}", text, category="message")
        with mt.create("synthetic.add_fact", inputs=[message]) as op:
            stored.append(op.output(mt.variable(f"mem:{_TOKEN}:{n}", fact, category="memory")))
    question = mt.variable(f"query:{_TOKEN}", "Where does Ana live?", category="query")
    gold = mt.variable(f"gold:{_TOKEN}", ["Porto"], category="gold")
    with provider.get_tracer("bench").start_as_current_span("POST /answer"):
        with mt.retrieve("synthetic.search", inputs=[question, *stored], case_id=case) as op:
            hits = [stored[1].value] if fault == "retrieval" else [stored[0].value]
            found = op.output(mt.variable(f"cands:{_TOKEN}", hits, category="candidates"))
        with mt.generate("synthetic.answer", inputs=[found, question], case_id=case) as op:
            answer = "I don't know" if fault == "retrieval" else "Lisbon"
            prediction = op.output(mt.variable(f"pred:{_TOKEN}", answer, category="prediction"))
        with mt.judge("synthetic.judge", inputs=[prediction, gold], case_id=case) as op:
            op.set_verdict(False)
            op.output(mt.variable(f"score:{_TOKEN}", 0, category="score"))
    provider.shutdown()
    records = [span_to_record(span) for span in exporter.get_finished_spans()]
    line = dumps_request(records).replace("{", "{{").replace("}", "}}")
    trace_ids = list(dict.fromkeys(r.trace_id for r in records))
    for number, trace_id in enumerate(trace_ids):
        line = line.replace(trace_id, f"{{t{number}}}")
    for number, record in enumerate(records):
        line = line.replace(record.span_id, f"{{s{number}}}")
    assert _TOKEN in line and "{t0}" in line and "{s0}" in line
    return line.replace(_TOKEN, "{c}")


def write_cases_workload(folder: Path, cases: int) -> tuple[Path, Path, float]:
    """``traces.jsonl`` and ``cases.jsonl`` for ``cases`` failed cases; seconds it took."""
    start = time.perf_counter()
    templates = [_template_line(fault) for fault in FAULTS]
    spans = [t.count('"spanId"') for t in templates]
    traces_per_case = [len(set(re.findall(r"\{t\d+\}", t))) for t in templates]
    traces_path, cases_path = folder / "traces.jsonl", folder / "cases.jsonl"
    with traces_path.open("w", encoding="utf-8") as traces, cases_path.open("w") as out:
        for i in range(cases):
            fault = i % len(FAULTS)
            c = f"{i:07d}"
            # Unique non-zero ids: the case number, then the span's (or trace's) position.
            ids = {f"s{k}": f"{i + 1:012x}{k + 1:04x}" for k in range(spans[fault])}
            ids.update({f"t{k}": f"{i + 1:028x}{k + 1:04x}" for k in range(traces_per_case[fault])})
            traces.write(templates[fault].format(c=c, **ids) + "\n")
            entry = {
                "case_id": f"case-{c}",
                "question": "Where does Ana live?",
                "gold_answers": ["Porto"],
                "evidence_refs": [f"msg:{c}:1@1"],
                "verdict": "incorrect",
            }
            out.write(json.dumps(entry) + "\n")
    return traces_path, cases_path, time.perf_counter() - start


_CLI = r"""
import resource, sys
from memtrace_otel.cli import main
code = main(sys.argv[1:])
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"PEAK_RSS_KB {own} {workers}", file=sys.stderr)
sys.exit(code)
"""


@dataclass
class CliRun:
    """What one ``memtrace attribute`` run reported (its summary line and verdicts file)."""

    exit: int
    cases: int
    failed_to_run: int
    records: int
    skipped_records: int
    skipped_cases: int
    verdict_lines: int
    verdict_types: dict[str, int]
    wrong_culprit: int
    wall: float
    cpu: float
    peak_rss_mb: float
    worker_peak_rss_mb: float


def run_attribute_cli(folder: Path, traces: Path, cases: Path, mode: str) -> CliRun:
    """``memtrace attribute`` in a child process; its counts, time, CPU and peak memory."""
    out = folder / f"verdicts-{mode.replace('=', '-')}.jsonl"
    out.unlink(missing_ok=True)
    argv = [str(traces), "--cases", str(cases), "--out", str(out), "--quiet"]
    if mode.startswith("memory-bound="):
        argv += ["--memory-bound", mode.split("=", 1)[1]]
    elif mode.startswith("executor="):
        argv += ["--executor", mode.split("=", 1)[1]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CLI, "attribute", *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    headline = parse_summary_line(done.stderr)  # the product's own reader of its summary line
    peak = re.search(r"PEAK_RSS_KB (\d+) (\d+)", done.stderr)
    if headline is None or peak is None:
        sys.exit(f"memtrace attribute ({mode}) failed ({done.returncode}):\n{done.stderr[-3000:]}")
    skipped_cases = re.search(r"skipped cases-file lines: (\d+)", done.stderr)
    verdict_types: Counter[str] = Counter()
    wrong = 0
    with out.open(encoding="utf-8") as handle:
        for line in handle:
            verdict = json.loads(line)
            verdict_types[str(verdict["error_type"])] += 1
            match = _CASE_ID.fullmatch(verdict["case_id"])
            fault = FAULTS[int(match.group(1)) % len(FAULTS)] if match else ""
            wrong += verdict["error_type"] != EXPECTED.get(fault)
    return CliRun(
        exit=done.returncode,
        cases=headline["cases"],
        failed_to_run=headline["failed"],
        records=headline["records"],
        skipped_records=headline["skipped"],
        skipped_cases=int(skipped_cases.group(1)) if skipped_cases else 0,
        verdict_lines=sum(verdict_types.values()),
        verdict_types=dict(verdict_types),
        wrong_culprit=wrong,
        wall=wall,
        cpu=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        peak_rss_mb=int(peak.group(1)) / 1024,
        worker_peak_rss_mb=int(peak.group(2)) / 1024,
    )


def bench_cases(cases: int, modes: list[str], keep: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        traces, cases_file, seconds = write_cases_workload(folder, cases)
        print(
            f"cases: {cases:,} failed cases (one store each), export written in {seconds:.1f}s: "
            f"{traces.stat().st_size / 1e6:,.0f} MB of OTLP JSON Lines"
        )
        failures = []
        for mode in modes:
            r = run_attribute_cli(folder, traces, cases_file, mode)
            # Every line of the cases file ends as a verdict or as a reported failure.
            unreported = cases - r.verdict_lines - r.failed_to_run - r.skipped_cases
            workers = f" (workers {r.worker_peak_rss_mb:,.0f} MB)" if "executor" in mode else ""
            print(
                f"  {mode}: exit {r.exit}; {r.records:,} spans, {r.cases:,} failed cases -> "
                f"{r.verdict_lines:,} verdict lines {r.verdict_types}; failed to run "
                f"{r.failed_to_run}, skipped records {r.skipped_records}, skipped cases "
                f"{r.skipped_cases}; unreported losses {unreported}; culprit other than the "
                f"planted fault: {r.wrong_culprit}"
            )
            print(
                f"    wall {r.wall:,.1f}s, CPU {r.cpu:,.1f}s ({cases / r.wall:,.0f} cases/s "
                f"including loading); peak RSS {r.peak_rss_mb:,.0f} MB{workers}"
            )
            if unreported or r.verdict_lines != r.cases or r.exit != EXIT_OK:
                failures.append(mode)
        if failures:
            sys.exit(f"batch job on {cases} cases: losses or a failed run in {failures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000, help="spans per thread")
    parser.add_argument("--users", type=int, default=20, help="users of the generated benchmark")
    parser.add_argument(
        "--cases", type=int, default=100_000, help="failed cases of the synthetic export"
    )
    parser.add_argument(
        "--modes",
        default="default,memory-bound=512M",
        help="comma-separated runs of part 3: default (streaming by store), memory-bound=SIZE, "
        "executor=local[N]",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=("processor", "batch", "cases"),
        help="run only these parts (repeatable; default: all three)",
    )
    parser.add_argument("--keep", type=Path, help="write part 3's files here and keep them")
    args = parser.parse_args()
    parts = set(args.only or ("processor", "batch", "cases"))
    if "processor" in parts:
        templates = [thread_spans(t) for t in range(THREADS)]
        # The default buffer (drops, counted, when folding falls behind) and one holding all.
        bench_processor(templates, args.spans, None)
        bench_processor(templates, args.spans, THREADS * args.spans)
    if "batch" in parts:
        bench_batch(args.users)
    if "cases" in parts:
        bench_cases(args.cases, [m for m in args.modes.split(",") if m], args.keep)


if __name__ == "__main__":
    main()

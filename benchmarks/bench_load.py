"""Load: the live span processor under 8 threads and the batch job on many cases.

1. ``EvolutionGraphProcessor`` fed by 8 threads, each ending ``--spans`` real SDK spans (made once
   by ``MemTracer`` with capture on, one memory store per thread, then replayed through
   ``on_end`` so the figure is the processor's, not the tracer's). Checks no deadlock (every
   thread joins within its deadline), nothing unreported (received = folded + dropped), and
   bounded memory (the graph stays under ``max_ops``).
2. ``run_batch`` with the ``evidence`` method on a generated benchmark (``--users`` users of the
   four reference systems): cases per second, including loading.

Peak memory is the process's maximum RSS (``ru_maxrss``) after each part.

Run: .venv/bin/python benchmarks/bench_load.py [--spans 100000] [--users 20]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.attribution import get_method, run_batch
from memtrace_otel.cli import main as cli_main
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
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
        if code:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000, help="spans per thread")
    parser.add_argument("--users", type=int, default=20, help="users of the generated benchmark")
    args = parser.parse_args()
    templates = [thread_spans(t) for t in range(THREADS)]
    # The default buffer (drops, counted, when folding falls behind) and one holding every span.
    bench_processor(templates, args.spans, None)
    bench_processor(templates, args.spans, THREADS * args.spans)
    bench_batch(args.users)


if __name__ == "__main__":
    main()

"""Overhead of the Mem0 instrumentor on ``Memory.search``, against the uninstrumented call.

Real mem0ai (2.x) offline: embedded Qdrant, and the scripted OpenAI-compatible server of the
tests for the query embedding. The store holds 20 records of one user, written by the
instrumented app; each search returns them all (top_k 20), so the instrumented call records 20
record inputs, a link to each writer and a candidates output. Both sides run in this process on the same ``Memory``, in interleaved
rounds (measure, instrument, measure, uninstrument; capture off and on alternating); the
instrumented side exports through a ``BatchSpanProcessor`` to a no-op exporter. Times are process
CPU time (less disturbed by other jobs on the machine than wall time; the scripted server is a
thread of this process, so its work counts on both sides). The figure is the median of the
per-round ratios; the ratio of each side's best round is printed too.

Goal: instrumented / uninstrumented <= 1.20 (CPU time, capture off), the goal of one manual op
against a bare span in ``bench_instrumentation.py``.

Run: .venv/bin/python benchmarks/bench_mem0.py
"""

from __future__ import annotations

import gc
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
os.environ["MEM0_TELEMETRY"] = "false"  # mem0 reads it at import: no PostHog events

from _util import verdict  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from memtrace_otel.instrumentation import CaptureConfig, WriterRegistry  # noqa: E402
from memtrace_otel.instrumentors.mem0 import Mem0Instrumentor  # noqa: E402
from tests._instrumentor_helpers import mem0_config  # noqa: E402
from tests._openai_server import ScriptedOpenAI  # noqa: E402

GOAL = 1.20
RECORDS = 20
ROUNDS, NUMBER = 12, 15


class _NoopExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _measure(fn: Callable[[], None]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per call over NUMBER calls."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(NUMBER):
        fn()
    return (time.process_time() - cpu) / NUMBER, (time.perf_counter() - wall) / NUMBER


def main() -> None:
    logging.getLogger("mem0").setLevel(logging.ERROR)  # spaCy/fastembed notices
    from mem0 import Memory

    with ScriptedOpenAI() as server, tempfile.TemporaryDirectory() as folder:
        memory = Memory.from_config(mem0_config(server.base_url, Path(folder)))
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(_NoopExporter()))
        instrumentor = Mem0Instrumentor()
        # The records are written by a traced app (their metadata carries the writer's span
        # context), so a search links to each writer instead of recording its value again.
        instrumentor.instrument(tracer_provider=provider)
        for i in range(RECORDS):
            memory.add(f"Fact number {i} about Ana and Porto", user_id="bench", infer=False)
        instrumentor.uninstrument()

        def search() -> None:
            memory.search("Where does Ana live?", filters={"user_id": "bench"}, top_k=RECORDS)

        for _ in range(5):
            search()  # warm the caches of mem0, Qdrant and the HTTP client
        modes = ("NO_CONTENT", "SPAN_AND_EVENT")
        rounds: dict[str, list[tuple[tuple[float, float], tuple[float, float]]]] = {
            mode: [] for mode in modes
        }
        for _ in range(ROUNDS):
            for mode in modes:  # interleaved, so drift of the machine hits every side alike
                bare = _measure(search)
                instrumentor.instrument(
                    tracer_provider=provider,
                    capture=CaptureConfig(mode=mode),
                    registry=WriterRegistry(),
                )
                search()  # warm-up: proxies installed, record versions cached
                traced = _measure(search)
                instrumentor.uninstrument()
                rounds[mode].append((bare, traced))
        median: dict[str, float] = {}
        for mode in modes:
            pairs = rounds[mode]
            # The median of the per-round ratios: each round compares neighbours in time, and
            # the median ignores rounds another job on the machine disturbed.
            median[mode] = statistics.median(t[0] / b[0] for b, t in pairs)
            best = min(t[0] for _, t in pairs) / min(b[0] for b, _ in pairs)
            bare_ms = statistics.median(b[0] for b, _ in pairs) * 1e3
            traced_ms = statistics.median(t[0] for _, t in pairs) * 1e3
            print(
                f"Memory.search ({RECORDS} hits), capture {mode}: uninstrumented {bare_ms:.2f} ms, "
                f"instrumented {traced_ms:.2f} ms CPU per call (medians); overhead ratio "
                f"{median[mode]:.3f} (median of rounds), {best:.3f} (best round of each side)"
            )
        provider.shutdown()
    ratio = median["NO_CONTENT"]
    print(f"overhead ratio (CPU time, capture off) {ratio:.3f}: {verdict(ratio, GOAL)} (<= {GOAL})")


if __name__ == "__main__":
    main()

"""Overhead of the Mem0 instrumentor on ``Memory.search`` and ``Memory.add``, against the
uninstrumented calls, capture off and on.

Real mem0ai offline: embedded Qdrant, and the scripted OpenAI-compatible server of the tests for
embeddings and the LLM. ``search``: the store holds 20 records of one user written by the
instrumented app (their metadata carries the writer's span context and version), each search
returns them all (top_k 20), so the instrumented call records 20 record inputs, a link to each
writer and a candidates output. ``add``: the LLM pipeline with one new fact per message (mem0 2.x:
search_existing, additive extraction, dedup, batch write; mem0 1.x: fact extraction, a search per
fact, the update decision, one create), so every call writes one record.

Both sides run in this process on the same ``Memory``, in paired rounds (capture off and on
alternating), each ABBA: plain calls, instrument, twice as many instrumented calls, uninstrument,
plain calls again, so that a drift (Qdrant's local store keeps the slots of deleted points, so every
add and delete makes the next a little slower) cancels out of the round's ratio; the instrumented
side exports through a ``BatchSpanProcessor`` to a no-op exporter. Times are process CPU time (the
machine is shared: CPU time is less disturbed than wall time; the scripted server is a thread of
this process, so its work counts on both sides alike). The ratio is the median of the rounds'
ratios (a round another job disturbed does not move it), the us added the median of the rounds'
differences; the best round of each side is printed too.

The floor, in the same rounds: the plain call followed by the spans one instrumented call recorded
(its attributes, links and events), written again by hand with the SDK on the same provider. No
instrumentation code runs there, yet it costs the span work and the garbage collections that the
spans held by the batch processor until export cause over mem0's heap: what is left above it is
ours.

Run in the project environment (mem0ai 2.x) it then runs itself in the mem0ai 1.x environment of
``scripts/mem0_legacy_env.sh`` (``~/.cache/memtrace-otel/venv-mem0-1.0.0``) when that exists.

Goal: instrumented / plain <= 1.05, capture off, for search and add.

Run: .venv/bin/python benchmarks/bench_mem0.py
"""

from __future__ import annotations

import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
os.environ["MEM0_TELEMETRY"] = "false"  # mem0 reads it at import: no PostHog events
# One BLAS thread: a second one spins between the local store's small matrix products, and the
# CPU it burns lands on either side at random (it would be the same for both)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from _util import by_hand, verdict  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from memtrace_otel.instrumentation import CaptureConfig, WriterRegistry  # noqa: E402
from memtrace_otel.instrumentors._common import installed_version  # noqa: E402
from memtrace_otel.instrumentors.mem0 import Mem0Instrumentor  # noqa: E402
from memtrace_otel.semconv import attributes as A  # noqa: E402
from tests._instrumentor_helpers import LLMScript, mem0_config  # noqa: E402
from tests._openai_server import ScriptedOpenAI  # noqa: E402

GOAL = 1.05
RECORDS = 20
ROUNDS = 21
NUMBER = {"search": 6, "add": 3}
MODES = ("NO_CONTENT", "SPAN_AND_EVENT")
LEGACY = Path.home() / ".cache" / "memtrace-otel" / "venv-mem0-1.0.0" / "bin" / "python"
CHILD = "MEMTRACE_BENCH_MEM0_CHILD"
LATE = (A.MEMTRACE_OP_INPUTS, A.MEMTRACE_OP_OUTPUTS, A.GEN_AI_MEMORY_RECORD_COUNT)
"""What a search op learns from the hits, so writes at the end. Its links are added then too, with
``Span.add_link``, which costs the SDK about 40% more per link than links given at the start,
where the by-hand span gets them: the floor line leaves that part of the SDK's cost out."""


class _NoopExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class _OneNewFact(LLMScript):
    """Extraction returns the message itself as one new fact: every ``add`` writes a record."""

    def _facts_in(self, text: str) -> list[str]:
        fact = " ".join(text.split())[:200]
        return [fact] if fact else []


def _cpu(fn: Callable[[], None], number: int, reset: Callable[[], None] | None) -> list[float]:
    """Process CPU seconds of each of ``number`` calls (``reset`` runs untimed after each)."""
    gc.collect()
    times = []
    for _ in range(number):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
        if reset is not None:
            reset()
    return times


def _sdk_side(call: Callable[[], None], hands: list[Callable[[], None]]) -> Callable[[], None]:
    """The plain ``call``, then the spans an instrumented one records written by hand."""

    def run() -> None:
        call()
        for hand in hands:
            hand()

    return run


def seeded_memory(base_url: str, folder: Path) -> tuple[Any, TracerProvider, Mem0Instrumentor]:
    """A real mem0 ``Memory`` (embedded Qdrant in ``folder``, the scripted server at ``base_url``)
    holding :data:`RECORDS` facts, a provider exporting to nowhere, and the (uninstrumented)
    instrumentor that wrote them. The records are written by
    a traced app (their metadata carries the writer's span context), so a search links to each
    writer instead of recording its value again."""
    from mem0 import Memory

    memory = Memory.from_config(mem0_config(base_url, folder))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_NoopExporter()))
    instrumentor = Mem0Instrumentor()
    instrumentor.instrument(tracer_provider=provider)
    for i in range(RECORDS):
        memory.add(f"Fact number {i} about Ana and Porto", user_id="bench", infer=False)
    instrumentor.uninstrument()
    return memory, provider, instrumentor


def _low(times: list[float]) -> float:
    """The 10th percentile of single calls: what a call costs when no other job disturbs it
    (noise on a shared machine only ever adds time), steadier than the single minimum."""
    ordered = sorted(times)
    return ordered[len(ordered) // 10]


def main() -> None:
    logging.getLogger("mem0").setLevel(logging.ERROR)  # spaCy/fastembed notices

    version = installed_version("mem0ai") or "?"
    pipeline = "1.x classic" if version.startswith("1.") else "2.x additive"
    with ScriptedOpenAI(_OneNewFact()) as server, tempfile.TemporaryDirectory() as folder:
        memory, provider, instrumentor = seeded_memory(server.base_url, Path(folder))
        counter = iter(range(10**9))

        def search() -> None:
            result = memory.search("Where does Ana live?", user_id="bench", limit=RECORDS)
            hits = result.get("results") if isinstance(result, dict) else result
            assert len(hits) == RECORDS, len(hits)

        written: list[str] = []

        def add() -> None:
            # Another user's store, so the searched one stays at 20 records.
            result = memory.add(f"Message {next(counter)}: Ana visited Lisbon", user_id="writer")
            written.extend(r["id"] for r in result["results"] if r.get("id"))

        def forget() -> None:
            # Untimed: the writer's records go again, so no side is measured on a larger store.
            # (One by one: mem0 1.x's delete_all also resets the whole collection.)
            while written:
                memory.delete(written.pop())

        if not version.startswith("1."):  # 2.x: filters and top_k

            def search() -> None:
                result = memory.search(
                    "Where does Ana live?", filters={"user_id": "bench"}, top_k=RECORDS
                )
                assert len(result["results"]) == RECORDS, len(result["results"])

        calls = {"search": search, "add": add}
        resets = {"search": None, "add": forget}
        # The floor: the spans one instrumented call records, written again by hand with the SDK
        # (same attributes, links and events) right after the plain call, on the same provider.
        recorder = InMemorySpanExporter()
        recording = TracerProvider()
        recording.add_span_processor(SimpleSpanProcessor(recorder))
        instrumentor.instrument(tracer_provider=recording, registry=WriterRegistry())
        search()
        recorder.clear()
        spans_of: dict[str, list[ReadableSpan]] = {}
        for op, fn in calls.items():
            fn()
            spans_of[op] = list(recorder.get_finished_spans())
            recorder.clear()
            if resets[op] is not None:
                resets[op]()
        instrumentor.uninstrument()
        tracer = provider.get_tracer("bench")
        [span] = [
            s for s in spans_of["search"] if s.attributes[A.MEMTRACE_OP_NAME] == "mem0.search"
        ]
        hand = by_hand(tracer, span, late=LATE)
        floors = {
            op: _sdk_side(fn, [by_hand(tracer, s, late=LATE) for s in spans_of[op]])
            for op, fn in calls.items()
        }
        for op, fn in calls.items():
            for _ in range(3):
                fn()  # warm the caches of mem0, Qdrant and the HTTP client
                if resets[op] is not None:
                    resets[op]()
        # Per round and mode, ABBA: plain, instrument, traced, traced, uninstrument, plain. Each
        # side's mean is then centred on the same moment, so a drift (the store's deleted slots
        # grow with every add and delete) cancels out of the round's ratio.
        rounds: dict[tuple[str, str], list[tuple[float, float]]] = {}
        hand_times: list[float] = []
        sdk_rounds: dict[str, list[tuple[float, float]]] = {}
        for _ in range(ROUNDS):
            for mode in MODES:
                plain = {op: _cpu(fn, NUMBER[op], resets[op]) for op, fn in calls.items()}
                sdk = {op: _cpu(fn, NUMBER[op], resets[op]) for op, fn in floors.items()}
                hand_times.extend(_cpu(hand, 20, None))
                instrumentor.instrument(
                    tracer_provider=provider,
                    capture=CaptureConfig(mode=mode),
                    registry=WriterRegistry(),
                )
                traced = {}
                for op, fn in calls.items():
                    _cpu(fn, 1, resets[op])  # warm-up: proxies installed, versions cached
                    traced[op] = _cpu(fn, 2 * NUMBER[op], resets[op])
                instrumentor.uninstrument()
                for op, fn in floors.items():
                    sdk[op] += _cpu(fn, NUMBER[op], resets[op])
                for op, fn in calls.items():
                    plain[op] += _cpu(fn, NUMBER[op], resets[op])
                    rounds.setdefault((op, mode), []).append(
                        (statistics.fmean(plain[op]), statistics.fmean(traced[op]))
                    )
                    sdk_rounds.setdefault(op, []).append(
                        (statistics.fmean(plain[op]), statistics.fmean(sdk[op]))
                    )
        provider.shutdown()
    print(
        f"bench_mem0: mem0ai {version} ({pipeline} pipeline), {ROUNDS} paired rounds (ABBA), "
        "CPU time; ratio: median of the rounds' ratios; best: ratio of each side's best round"
    )
    for op in calls:
        for mode in MODES:
            pairs = rounds[(op, mode)]
            ratio = statistics.median(t / p for p, t in pairs)
            added = statistics.median(t - p for p, t in pairs)
            plain_best, traced_best = min(p for p, _ in pairs), min(t for _, t in pairs)
            goal = (
                f"goal <= {GOAL}: {verdict(ratio, GOAL)}"
                if mode == "NO_CONTENT"
                else "goal applies to capture off"
            )
            label = f"Memory.{op}" + (f" ({RECORDS} hits)" if op == "search" else " (1 new fact)")
            print(
                f"  {label:24} capture {mode:14}: plain {plain_best * 1e3:6.2f} ms, instrumented "
                f"{traced_best * 1e3:6.2f} ms CPU per call (best rounds); ratio {ratio:.3f} "
                f"({goal}), best {traced_best / plain_best:.3f}; added {added * 1e6:5.0f} us "
                "per call"
            )
    for op in calls:
        pairs = sdk_rounds[op]
        ratio = statistics.median(t / p for p, t in pairs)
        added = statistics.median(t - p for p, t in pairs)
        print(
            f"  floor, Memory.{op}: the plain call, then its {len(spans_of[op])} span(s) written by "
            f"hand with the SDK (no instrumentation code): ratio {ratio:.3f}, added {added * 1e6:5.0f} us "
            "per call (includes the garbage collections the held spans cause)"
        )
    hand = _low(hand_times)
    print(
        f"  of the search's added time, the SDK writing the same span (its {RECORDS} links, "
        f"attributes and events) by hand: {hand * 1e6:.0f} us"
    )


def _legacy() -> None:
    """The same benchmark under mem0ai 1.x, if its environment exists."""
    if os.environ.get(CHILD) or not LEGACY.exists():
        if not LEGACY.exists():
            print(f"(mem0ai 1.x: no environment at {LEGACY}; run scripts/mem0_legacy_env.sh)")
        return
    env = {**os.environ, CHILD: "1"}
    done = subprocess.run(
        [str(LEGACY), __file__], env=env, capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        print(f"(mem0ai 1.x run failed: {json.dumps(done.stderr[-800:])})")
        return
    print(done.stdout, end="")


if __name__ == "__main__":
    main()
    _legacy()

"""What our wrappers alone add to one call, without the library's own work and its noise.

``Memory.search`` (mem0ai 2.x, 20 hits) and ``Completions.create`` (openai) are replaced, before
instrumenting, by functions returning a result recorded from a real call (the real mem0 store
and scripted server make it once); the instrumentor then wraps that function as it wraps the
library's. The time of one call is then the wrapper's: building the op, the span, its links and
events, and handling the result. This is the "us added per call" of ``bench_mem0.py`` and of the
chat wrapper in ``bench_instrumentation.py`` without a 2-3 ms library call whose noise on a shared
machine is larger than our cost. For the search, the SDK writing the same span by hand is printed
too (the share of the added time no instrumentation code can remove).

Interleaved rounds, thread CPU time (everything here runs in the calling thread), best round,
with the garbage collector off while timing. With it on, the first instrumented phase of a round
costs about 0.4 ms more per search here: the spans the batch processor holds until export (and
the retrievals remembered for the chat calls) survive young collections, and their promotion
triggers full collections that walk mem0's whole heap. That cost is real in an app too (it grows
with the heap and with what the instrumentation keeps alive) and is inside ``bench_mem0.py``'s
figures; this benchmark leaves it out to show the wrappers' own work.

Run: .venv/bin/python benchmarks/bench_wrappers.py
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
os.environ["MEM0_TELEMETRY"] = "false"

import wrapt  # noqa: E402
from _util import by_hand  # noqa: E402
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
from memtrace_otel.instrumentors.mem0 import Mem0Instrumentor  # noqa: E402
from memtrace_otel.instrumentors.openai import OpenAIInstrumentor  # noqa: E402
from memtrace_otel.semconv import attributes as A  # noqa: E402
from tests._instrumentor_helpers import LLMScript, mem0_config  # noqa: E402
from tests._openai_server import ScriptedOpenAI  # noqa: E402

RECORDS = 20
ROUNDS, NUMBER = 9, 300
MODES = ("NO_CONTENT", "SPAN_AND_EVENT")


class _NoopExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _thread_cpu(fn: Any, number: int) -> float:
    """Thread CPU seconds per call, the garbage collector off while timing (see the docstring)."""
    gc.collect()
    gc.disable()
    try:
        start = time.thread_time()
        for _ in range(number):
            fn()
        return (time.thread_time() - start) / number
    finally:
        gc.enable()


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_NoopExporter(), max_queue_size=100_000))
    with canned_calls(provider) as (memory, client, messages):
        _measure(memory, client, messages, provider)
    provider.shutdown()


@contextlib.contextmanager
def canned_calls(provider: TracerProvider) -> Iterator[tuple[Any, Any, list[dict[str, str]]]]:
    """``(memory, client, messages)``: a real mem0 ``Memory`` holding 20 records written by a
    traced app and an ``openai`` client, whose ``search`` and ``create`` return a result
    recorded from one real call (while the block runs)."""
    logging.getLogger("mem0").setLevel(logging.ERROR)
    import openai
    from mem0 import Memory
    from mem0.memory.main import Memory as MemoryClass
    from openai.resources.chat.completions import Completions

    messages = [
        {"role": "system", "content": "Answer from these memories:\nAna lives in Porto."},
        {"role": "user", "content": "Where does Ana live?"},
    ]
    with (
        ScriptedOpenAI(LLMScript(answer=lambda p: "Porto")) as server,
        tempfile.TemporaryDirectory() as folder,
    ):
        memory = Memory.from_config(mem0_config(server.base_url, Path(folder)))
        writer = Mem0Instrumentor()
        writer.instrument(tracer_provider=provider)  # the records carry their writers
        for i in range(RECORDS):
            memory.add(f"Fact number {i} about Ana and Porto", user_id="bench", infer=False)
        writer.uninstrument()
        result = memory.search("Where does Ana live?", filters={"user_id": "bench"}, top_k=20)
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-bench", max_retries=0)
        answer = client.chat.completions.create(model="gpt-4.1-mini", messages=messages)

        real_search, real_create = (
            MemoryClass.__dict__["search"],
            Completions.__dict__["create"],
        )

        def canned_search(self: Any, *args: Any, **kwargs: Any) -> Any:
            return result

        def canned_create(self: Any, *args: Any, **kwargs: Any) -> Any:
            return answer

        canned_search.__signature__ = inspect.signature(real_search)  # type: ignore[attr-defined]
        MemoryClass.search = canned_search  # type: ignore[method-assign]
        Completions.create = canned_create  # type: ignore[method-assign]
        try:
            yield memory, client, messages
        finally:
            MemoryClass.search = real_search  # type: ignore[method-assign]
            Completions.create = real_create  # type: ignore[method-assign]


def search_sides(
    memory: Any, provider: TracerProvider
) -> tuple[Callable[[], None], Callable[[], None], Mem0Instrumentor]:
    """``(search, hand, instrumentor)``: the 20-hit search, its span written by hand with the
    SDK on ``provider`` (the share no instrumentation code can remove), and an instrumentor."""

    def search() -> None:
        memory.search("Where does Ana live?", filters={"user_id": "bench"}, top_k=RECORDS)

    recorder = InMemorySpanExporter()
    recording = TracerProvider()
    recording.add_span_processor(SimpleSpanProcessor(recorder))
    mem0 = Mem0Instrumentor()
    mem0.instrument(tracer_provider=recording, registry=WriterRegistry())
    search()
    mem0.uninstrument()
    (span,) = recorder.get_finished_spans()
    late = (A.MEMTRACE_OP_INPUTS, A.MEMTRACE_OP_OUTPUTS, A.GEN_AI_MEMORY_RECORD_COUNT)
    return search, by_hand(provider.get_tracer("bench"), span, late=late), mem0


def _measure(memory: Any, client: Any, messages: Any, provider: TracerProvider) -> None:
    def chat() -> None:
        client.chat.completions.create(model="gpt-4.1-mini", messages=messages)

    search, hand, mem0 = search_sides(memory, provider)

    ours = OpenAIInstrumentor()
    best: dict[tuple[str, str], float] = {}
    for _ in range(ROUNDS):
        for name, fn in (("search", search), ("chat", chat)):
            _keep(best, (name, "plain"), _thread_cpu(fn, NUMBER))
        _keep(best, ("search", "hand"), _thread_cpu(hand, NUMBER))
        with _pass_through(type(memory), "search"):
            _keep(best, ("search", "wrapt"), _thread_cpu(search, NUMBER))
        for mode in MODES:
            mem0.instrument(
                tracer_provider=provider,
                capture=CaptureConfig(mode=mode),
                registry=WriterRegistry(),
            )
            ours.instrument(tracer_provider=provider, capture=CaptureConfig(mode=mode))
            search(), chat()  # warm-up
            _keep(best, ("search", mode), _thread_cpu(search, NUMBER))
            _keep(best, ("chat", mode), _thread_cpu(chat, NUMBER))
            ours.uninstrument()
            mem0.uninstrument()
    print(
        f"bench_wrappers: {ROUNDS} interleaved rounds of {NUMBER} calls, thread CPU, best round, "
        "GC off while timing"
    )
    for name, label in (
        ("search", f"Memory.search wrapper ({RECORDS} hits)"),
        ("chat", "chat wrapper"),
    ):
        plain = best[(name, "plain")]
        added = ", ".join(
            f"capture {mode} {(best[(name, mode)] - plain) * 1e6:6.1f} us" for mode in MODES
        )
        print(f"  {label:34}: added per call: {added}")
    print(
        f"  the SDK writing the search's span (its {RECORDS} links, attributes, events) by hand: "
        f"{best[('search', 'hand')] * 1e6:.1f} us; a pass-through wrapt wrapper around the "
        f"search: {(best[('search', 'wrapt')] - best[('search', 'plain')]) * 1e6:.1f} us"
    )


@contextlib.contextmanager
def _pass_through(owner: type, name: str) -> Iterator[None]:
    """``owner.name`` wrapped by a ``wrapt`` wrapper that only calls through (the dispatch cost)."""
    original = owner.__dict__[name]
    setattr(owner, name, wrapt.FunctionWrapper(original, lambda fn, _, args, kw: fn(*args, **kw)))
    try:
        yield
    finally:
        setattr(owner, name, original)


def _keep(best: dict[Any, float], key: Any, value: float) -> None:
    best[key] = min(best.get(key, float("inf")), value)


if __name__ == "__main__":
    main()

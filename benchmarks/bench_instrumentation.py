"""Cost of one memtrace op against the same span written by hand with the SDK.

The op: an ``extract`` with one input ref (written earlier by a traced op, so it becomes a span
link) and one ~1 KB output value (an event with its sha256 digest, and the value itself when
capture is on). The baseline is **the same payload written by hand**: the attributes, the link,
the event and the outputs attribute of one span the op recorded (copied from it, so the two can
never drift), written with ``start_as_current_span``, ``add_event`` and ``set_attribute``. The gap
is our own bookkeeping: refs, the writer registry, the digest, the traceparent, context handling.
A bare span with as many attributes is printed for scale.

Everything runs on one TracerProvider with a BatchSpanProcessor and a no-op exporter, in one
process; the three sides alternate (interleaved rounds) and each figure is the best round, in
process CPU time (the machine is shared: CPU time and the best round are the least disturbed).

Goal: memtrace op / same payload by hand <= 1.15, capture off and on.

Run: .venv/bin/python benchmarks/bench_instrumentation.py
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import interleaved, verdict
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, Tracer

from memtrace_otel.instrumentation import CaptureConfig, MemTracer, Variable, WriterRegistry
from memtrace_otel.semconv import Category
from memtrace_otel.semconv import attributes as A

N = 5000
GOAL = 1.15
VALUE = ("Ana moved to Porto in May and works as a nurse at the city hospital. " * 15)[:1024]


class NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NullExporter(), max_queue_size=100_000))
    tracer = provider.get_tracer("bench")
    attrs = {f"attr.{i}": f"value-{i}" for i in range(7)}

    def bare() -> None:
        with tracer.start_as_current_span("bare", attributes=attrs):
            pass

    results = {}
    for label, mode in (("off", "NO_CONTENT"), ("on", "SPAN_AND_EVENT")):
        mt = MemTracer(
            tracer_provider=provider,
            system="bench",
            store_id="u1",
            capture=CaptureConfig(mode=mode),
            registry=WriterRegistry(),
        )
        with mt.create("bench.seed") as op:
            source = op.output(mt.variable("msg:1", "seed", category=Category.MESSAGE))
        out = mt.variable("fact:1", VALUE, category=Category.MEMORY)

        def memtrace_op(
            mt: MemTracer = mt, source_ref: str = source.ref, out: Variable = out
        ) -> None:
            with mt.extract("bench.extract", inputs=[source_ref]) as op:
                op.output(out)

        # One op on a recording provider (same settings and registry): the payload to copy.
        recorder = InMemorySpanExporter()
        recording = TracerProvider()
        recording.add_span_processor(SimpleSpanProcessor(recorder))
        memtrace_op(_like(mt, recording))
        (recorded,) = recorder.get_finished_spans()
        by_hand = _same_payload_by_hand(tracer, recorded)
        times = interleaved({"bare": bare, "hand": by_hand, "ours": memtrace_op}, number=N)
        results[label] = (times["bare"], times["hand"], times["ours"])

    provider.shutdown()
    print(f"bench_instrumentation: {N} spans x 9 interleaved rounds, best round, CPU time")
    for label, (base, hand, ours) in results.items():
        ratio = ours / hand
        print(
            f"  manual op, capture {label:3}: same payload by hand {hand * 1e6:6.2f} us, "
            f"memtrace op {ours * 1e6:6.2f} us, ratio {ratio:.2f} "
            f"(goal <= {GOAL}: {verdict(ratio, GOAL)}), added {(ours - hand) * 1e6:5.2f} us/op; "
            f"bare span with 7 attributes {base * 1e6:.2f} us"
        )


def _like(mt: MemTracer, provider: TracerProvider) -> MemTracer:
    return MemTracer(
        tracer_provider=provider,
        system=mt.system,
        store_id=mt.store_id,
        capture=mt.capture,
        registry=mt.registry,
    )


def _same_payload_by_hand(tracer: Tracer, span: ReadableSpan) -> Callable[[], None]:
    """A function writing, with the SDK alone, the payload of ``span`` (one recorded op)."""
    attributes = dict(span.attributes or {})
    outputs = attributes.pop(A.MEMTRACE_OP_OUTPUTS)
    # The writer's context the op linked to; the same link, the same event.
    links = [Link(link.context, dict(link.attributes or {})) for link in span.links]
    (event,) = span.events
    event_name, event_attributes = event.name, dict(event.attributes or {})
    name, kind = span.name, span.kind

    def by_hand() -> None:
        with tracer.start_as_current_span(
            name, kind=kind, attributes=attributes, links=links
        ) as hand_span:
            hand_span.add_event(event_name, event_attributes)
            hand_span.set_attribute(A.MEMTRACE_OP_OUTPUTS, outputs)

    return by_hand


if __name__ == "__main__":
    main()

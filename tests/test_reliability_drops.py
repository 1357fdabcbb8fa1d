"""Queue overflow drops spans and counts them: in code, as a metric, in our log once.

Real SDK, real exporters. The Collector is a loopback server that accepts and never answers;
the exporter in front of it is wrapped only to count the spans it was handed and, where the
test needs every drop to happen while the worker is stuck, to hold the worker until the app is
done. "Never exported" is then 1000 minus what the exporter was handed. The SDK's own logging is
left alone: its ``Queue full`` line still shows, thinned by its duplicate filter.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import _shim
from memtrace_otel._internal import internal_error_counts, quiet_internal_errors
from memtrace_otel.export import CountingBatchSpanProcessor, _batch, configure, resolve_exporter
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.semconv import attributes as A
from tests._otlp_receiver import SilentServer

REPO = Path(__file__).resolve().parents[1]
SDK_LOGGER = "opentelemetry.sdk._shared_internal"
OUR_LOGGER = "memtrace_otel"
SPANS = 1000
QUEUE = 128
BATCH = 64


class HandedCounter(SpanExporter):
    """A real exporter behind a gate: counts the spans it is handed, after the gate opens.

    While the gate is closed the SDK's worker is stuck in ``export`` (as with a Collector that
    never answers), so every overflow happens while nothing leaves the queue.
    """

    def __init__(self, inner: SpanExporter, *, gate_open: bool = False, pause: float = 0) -> None:
        self.inner = inner
        self.gate = threading.Event()
        if gate_open:
            self.gate.set()
        self.pause = pause  # a slow Collector: the worker falls behind the app's threads
        self.handed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.gate.wait(60)
        time.sleep(self.pause)
        self.handed += len(spans)  # the SDK calls export from one thread at a time
        return self.inner.export(spans)

    def shutdown(self) -> None:
        self.gate.set()
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def app_call(mt: MemTracer, i: int) -> list[str]:
    """The user's function: a traced retrieval whose result must come back untouched."""
    query = mt.variable(f"q:{i}", f"where does user {i} live?", category="query")
    with mt.retrieve("rag.search", inputs=[query]) as op:
        result = [f"doc-{i}-{j}" for j in range(3)]
        op.output(mt.variable(f"cand:{i}", result, category="candidates"))
    return result


def tracer_on(processor: BatchSpanProcessor) -> tuple[TracerProvider, MemTracer]:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    mt = MemTracer(
        tracer_provider=provider,
        system="rag",
        capture=CaptureConfig(mode="SPAN_ONLY"),
        registry=WriterRegistry(),
    )
    return provider, mt


def run_app(mt: MemTracer, n: int = SPANS) -> None:
    for i in range(n):
        assert app_call(mt, i) == [f"doc-{i}-{j}" for j in range(3)]


def dropped_metric(reader: InMemoryMetricReader) -> dict[str, int]:
    """``memtrace.sdk.spans.dropped`` per ``otel.component.name``."""
    found: dict[str, int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != A.METRIC_SDK_SPANS_DROPPED:
                    continue
                assert metric.unit == "{span}"
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)
                    name = str((point.attributes or {})[A.METRIC_OTEL_COMPONENT_NAME])
                    found[name] = int(point.value)
    return found


def queue_full_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == SDK_LOGGER and "Queue full" in r.getMessage()]


def our_warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(OUR_LOGGER) and r.levelno == logging.WARNING and text in r.getMessage()
    ]


def forget_sdk_duplicates() -> None:
    """The SDK's logger drops a record equal to the previous one (within 20 s); a different
    record in between makes its next ``Queue full`` visible again, so "no such record" means
    something here."""
    logging.getLogger(SDK_LOGGER).warning("test marker")


@pytest.fixture
def bsp_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The SDK's own variables set the queue: resolution must be the SDK's."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", str(QUEUE))
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", str(BATCH))
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.5")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    yield monkeypatch


# --- the promise -------------------------------------------------------------------------------


def test_a_hung_collector_drops_are_counted_exactly_and_warned_once(
    bsp_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    reader = InMemoryMetricReader()
    with SilentServer() as server:
        bsp_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.port}")
        exporter = HandedCounter(resolve_exporter())  # configure()'s OTLP/HTTP exporter
        processor = CountingBatchSpanProcessor(
            exporter, meter_provider=MeterProvider(metric_readers=[reader])
        )
        provider, mt = tracer_on(processor)
        forget_sdk_duplicates()
        run_app(mt)  # every call returns its own result, nothing raises

        # While the Collector hangs: one warning with the hint; the SDK's own line, thinned.
        first = our_warnings(caplog, "dropped")
        assert len(first) == 1
        assert "OTEL_BSP_MAX_QUEUE_SIZE" in first[0] and "Collector" in first[0]
        live = processor.dropped_spans
        assert 1 <= len(queue_full_records(caplog)) < live
        assert dropped_metric(reader) == {processor._component: live}

        exporter.gate.set()
        provider.shutdown()

    dropped = processor.dropped_spans
    never_exported = SPANS - exporter.handed
    assert dropped == never_exported  # settled at shutdown: exact
    # Live, the count is the SDK's own signal: its "full?" check and its append are not atomic,
    # so the worker taking a batch in between makes one signalled drop that evicted nothing.
    assert abs(live - dropped) <= 2
    # The worker held at most one batch; everything else beyond the queue went.
    assert SPANS - QUEUE - BATCH <= dropped <= SPANS - QUEUE
    assert drop_stats(processor) == {
        "dropped_spans": dropped,
        "queued_spans": 0,
        "max_queue_size": QUEUE,
        "counting": True,
    }
    assert dropped_metric(reader) == {processor._component: dropped}
    warned = our_warnings(caplog, "dropped")
    assert len(warned) == 2 and warned[0] == first[0]
    assert (
        f"{dropped} dropped because the span queue was full (max_queue_size={QUEUE})" in (warned[1])
    )


def drop_stats(processor: CountingBatchSpanProcessor) -> dict[str, int | bool]:
    """The queue-drop part of ``stats()``."""
    stats = processor.stats()
    return {k: stats[k] for k in ("dropped_spans", "queued_spans", "max_queue_size", "counting")}


def test_configure_counts_drops_into_the_meter_provider_argument(
    bsp_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    reader = InMemoryMetricReader()
    with SilentServer() as server:
        bsp_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.port}")
        provider = configure(
            service_name="app",
            set_global=False,
            meter_provider=MeterProvider(metric_readers=[reader]),
        )
        mt = MemTracer(tracer_provider=provider, system="rag", registry=WriterRegistry())
        forget_sdk_duplicates()
        run_app(mt)
        [(component, live)] = dropped_metric(reader).items()
        provider.shutdown()
    # Without the gate the worker may take a few more batches while the app runs.
    assert live >= SPANS // 2
    assert dropped_metric(reader)[component] >= SPANS // 2
    assert len(our_warnings(caplog, "the span queue is full")) == 1
    assert len(our_warnings(caplog, "dropped because the span queue was full")) == 1
    assert 1 <= len(queue_full_records(caplog)) < live


def test_threads_racing_a_busy_worker_are_counted_exactly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Four app threads overflow a queue the worker keeps draining: the SDK's own "full?" check
    races here; our balance does not."""
    caplog.set_level(logging.WARNING)
    sink = InMemorySpanExporter()
    exporter = HandedCounter(sink, gate_open=True, pause=0.001)
    processor = CountingBatchSpanProcessor(
        exporter, max_queue_size=64, max_export_batch_size=16, schedule_delay_millis=1
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("load")
    per_thread = 3000

    def produce() -> None:
        for _ in range(per_thread):
            tracer.start_span("s").end()

    threads = [threading.Thread(target=produce) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    provider.shutdown()
    exported = len(sink.get_finished_spans())
    assert exported == exporter.handed
    assert processor.dropped_spans > 0
    assert processor.dropped_spans + exported == 4 * per_thread
    assert len(our_warnings(caplog, "the span queue is full")) == 1


def test_nothing_overflows_so_everything_is_exported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for var in ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"):
        monkeypatch.delenv(var, raising=False)
    caplog.set_level(logging.WARNING)
    reader = InMemoryMetricReader()
    sink = InMemorySpanExporter()
    processor = CountingBatchSpanProcessor(
        sink, meter_provider=MeterProvider(metric_readers=[reader])
    )
    provider, mt = tracer_on(processor)
    run_app(mt, 300)
    provider.shutdown()
    assert len(sink.get_finished_spans()) == 300
    assert drop_stats(processor) == {
        "dropped_spans": 0,
        "queued_spans": 0,
        "max_queue_size": 2048,  # the SDK default
        "counting": True,
    }
    assert dropped_metric(reader) == {processor._component: 0}
    assert [r for r in caplog.records if r.name.startswith(OUR_LOGGER)] == []


@pytest.mark.parametrize(
    ("argument", "env", "expected"), [(None, None, 2048), (None, "100", 100), (50, "100", 50)]
)
def test_queue_size_resolves_like_the_sdk(
    monkeypatch: pytest.MonkeyPatch, argument: int | None, env: str | None, expected: int
) -> None:
    monkeypatch.delenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", raising=False)
    if env is None:
        monkeypatch.delenv("OTEL_BSP_MAX_QUEUE_SIZE", raising=False)
    else:
        monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", env)
    processor = CountingBatchSpanProcessor(
        InMemorySpanExporter(), max_queue_size=argument, max_export_batch_size=10
    )
    sdk = BatchSpanProcessor(
        InMemorySpanExporter(), max_queue_size=argument, max_export_batch_size=10
    )
    try:
        assert processor.stats()["max_queue_size"] == expected
        assert sdk._batch_processor._max_queue_size == expected
    finally:
        processor.shutdown()
        sdk.shutdown()  # type: ignore[no-untyped-call]


def test_the_sdk_logger_is_left_alone_and_both_processors_keep_their_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    sdk_logger = logging.getLogger(SDK_LOGGER)
    filters_before = list(sdk_logger.filters)
    handlers_before = list(sdk_logger.handlers)
    ours = HandedCounter(InMemorySpanExporter())
    theirs = HandedCounter(InMemorySpanExporter())
    counting = CountingBatchSpanProcessor(ours, max_queue_size=8, max_export_batch_size=4)
    plain = BatchSpanProcessor(theirs, max_queue_size=8, max_export_batch_size=4)
    for processor in (counting, plain):
        provider = TracerProvider()
        provider.add_span_processor(processor)
        forget_sdk_duplicates()
        before = len(queue_full_records(caplog))
        for _ in range(40):
            provider.get_tracer("t").start_span("s").end()
        assert len(queue_full_records(caplog)) - before >= 1
    assert counting.counting and counting.dropped_spans > 0
    for exporter in (ours, theirs):
        exporter.gate.set()
    counting.shutdown()
    plain.shutdown()  # type: ignore[no-untyped-call]
    assert counting.dropped_spans == 40 - ours.handed > 0
    assert sdk_logger.filters == filters_before and sdk_logger.handlers == handlers_before


def test_the_global_meter_provider_is_used_unless_one_is_given(tmp_path: Path) -> None:
    """In a fresh interpreter: the global meter provider can be set only once per process."""
    script = tmp_path / "global_meter.py"
    script.write_text(
        """
import json, threading
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from memtrace_otel.export import CountingBatchSpanProcessor

class Stuck(SpanExporter):
    def __init__(self):
        self.gate = threading.Event()
    def export(self, spans):
        self.gate.wait(60)
        return SpanExportResult.SUCCESS
    def shutdown(self):
        self.gate.set()

def points(reader):
    out = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    out[p.attributes["otel.component.name"]] = p.value
    return out

global_reader, given_reader = InMemoryMetricReader(), InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[global_reader]))
result = {}
for name, mp in (("global", None), ("given", MeterProvider(metric_readers=[given_reader]))):
    exporter = Stuck()
    processor = CountingBatchSpanProcessor(
        exporter, max_queue_size=8, max_export_batch_size=4, meter_provider=mp
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    for _ in range(50):
        provider.get_tracer("t").start_span("s").end()
    exporter.gate.set()
    provider.shutdown()
    result[name] = [processor._component, processor.dropped_spans]
result["global_points"] = points(global_reader)
result["given_points"] = points(given_reader)
print(json.dumps(result))
"""
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    (global_name, global_dropped), (given_name, given_dropped) = result["global"], result["given"]
    assert global_dropped > 0 and given_dropped > 0
    assert result["global_points"] == {global_name: global_dropped}
    assert result["given_points"] == {given_name: given_dropped}


# --- fault injection: SDK internals changed, our own bug -------------------------------------


def test_without_the_sdks_queue_full_signal_drops_are_settled_at_shutdown(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An SDK before the processor metrics: nothing counted live, the exact count at shutdown."""
    caplog.set_level(logging.WARNING)
    monkeypatch.setattr(_batch, "hook_queue_full", lambda processor, on_full: "X._metrics")
    monkeypatch.setattr(_batch, "_degraded_logged", False)
    exporters = [HandedCounter(InMemorySpanExporter()) for _ in range(2)]
    processors = [
        CountingBatchSpanProcessor(e, max_queue_size=16, max_export_batch_size=8) for e in exporters
    ]
    assert [p.counting for p in processors] == [False, False]
    assert len(our_warnings(caplog, "queue-full signal (X._metrics not found)")) == 1  # once
    provider, mt = tracer_on(processors[0])
    forget_sdk_duplicates()
    run_app(mt, 100)  # results intact through the overflow
    stats = processors[0].stats()
    assert drop_stats(processors[0]) == {
        "dropped_spans": 0,
        "queued_spans": 100 - int(stats["in_flight_spans"]),  # not known to be dropped yet
        "max_queue_size": 16,
        "counting": False,
    }
    for e in exporters:
        e.gate.set()
    provider.shutdown()
    processors[1].shutdown()
    assert len(queue_full_records(caplog)) >= 1  # the SDK's own warning, as always
    assert 16 <= exporters[0].handed < 100
    assert processors[0].dropped_spans == 100 - exporters[0].handed


def test_the_shim_finds_the_signal_of_the_sdk_we_ship_and_names_what_another_lacks() -> None:
    drops: list[int] = []
    exporter = HandedCounter(InMemorySpanExporter())
    sdk = BatchSpanProcessor(exporter, max_queue_size=8, max_export_batch_size=4)
    assert _shim.hook_queue_full(sdk, drops.append) is None
    provider = TracerProvider()
    provider.add_span_processor(sdk)
    for _ in range(20):
        provider.get_tracer("t").start_span("s").end()
    exporter.gate.set()
    provider.shutdown()
    assert sum(drops) == 20 - exporter.handed > 0 and set(drops) == {1}
    assert _shim.hook_queue_full(object(), drops.append) == (
        "BatchSpanProcessor._batch_processor._metrics"
    )


def test_a_bug_in_our_hook_leaves_the_plain_sdk_processor(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(processor: object, on_full: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(_batch, "hook_queue_full", broken)
    before = internal_error_counts().get("batch.hook", 0)
    sink = InMemorySpanExporter()
    with quiet_internal_errors():
        processor = CountingBatchSpanProcessor(sink, max_queue_size=16, max_export_batch_size=8)
    assert not processor.counting
    assert internal_error_counts()["batch.hook"] == before + 1
    provider, mt = tracer_on(processor)
    run_app(mt, 10)
    provider.shutdown()
    assert len(sink.get_finished_spans()) == 10


def test_a_broken_meter_provider_still_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(MeterProvider):
        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("injected")

    before = internal_error_counts().get("batch.metric", 0)
    exporter = HandedCounter(InMemorySpanExporter())
    with quiet_internal_errors():
        processor = CountingBatchSpanProcessor(
            exporter, max_queue_size=8, max_export_batch_size=4, meter_provider=Broken()
        )
    assert processor.counting
    assert internal_error_counts()["batch.metric"] == before + 1
    provider, mt = tracer_on(processor)
    run_app(mt, 30)
    exporter.gate.set()
    provider.shutdown()
    assert processor.dropped_spans == 30 - exporter.handed > 0

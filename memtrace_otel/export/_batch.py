"""A ``BatchSpanProcessor`` that counts the spans a full queue drops, and says so once.

The SDK's processor (1.3x-1.4x) logs ``Queue full, dropping Span.`` (its own duplicate filter
thins that to about one line per 20 s) and counts drops only when
``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`` is set. :class:`CountingBatchSpanProcessor` is the
SDK processor itself (same queue, worker, environment variables, log lines), with additions made
through public hooks, plus one documented hook on the SDK's own queue-full signal:

- every drop is counted, read with :attr:`~CountingBatchSpanProcessor.dropped_spans` /
  :meth:`~CountingBatchSpanProcessor.stats` and as the metric ``memtrace.sdk.spans.dropped``;
- the first drop logs one warning with a hint, shutdown logs the total;
- nothing on the app's thread beyond one atomic increment per span (and one per drop).

**How drops are counted.** While the app runs, from the SDK's own signal: its batch processor
calls ``drop_items(1, "queue_full")`` on its metrics object for each span it drops, and
:func:`memtrace_otel._shim.hook_queue_full` has that call counted here too (the SDK's check is
"full?" then append, without a lock, so racing threads can slip a drop past it). At shutdown,
once the SDK's worker has drained the queue, the count is settled from public counts alone:
spans ended here minus spans handed to the exporter, exact whatever the threads did. With an
SDK that has no such signal the live count stays 0 (:attr:`counting` is ``False``) and the
settled count still holds.

**Shutdown budget.** The SDK's ``shutdown()`` waits up to 30 s for its worker, which may be stuck
in an export to a Collector that accepts and never answers. :meth:`CountingBatchSpanProcessor.shutdown`
runs it on a helper thread and waits at most the budget: ``export_timeout_millis``, else
``OTEL_BSP_EXPORT_TIMEOUT`` (the SDK's public knob, which its processor does not use yet), else
5 s. Then it returns and logs one line counting every span that did not leave: dropped for a full
queue, failed, still being exported, still queued. Those counts come from public hooks only: the
processor's ``on_end`` and a wrapper around the exporter it was given.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation, get_meter_provider
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from memtrace_otel._internal import internal_error, reinit_after_fork
from memtrace_otel._settings import resolve
from memtrace_otel._shim import hook_queue_full
from memtrace_otel.semconv.attributes import METRIC_OTEL_COMPONENT_NAME, METRIC_SDK_SPANS_DROPPED
from memtrace_otel.semconv.env import ENV_OTEL_BSP_EXPORT_TIMEOUT, ENV_OTEL_BSP_MAX_QUEUE_SIZE

__all__ = ["CountingBatchSpanProcessor"]

logger = logging.getLogger(__name__)

_processor_ids = itertools.count()
# opentelemetry-sdk before ~1.37 has no ``meter_provider`` argument (pyproject allows 1.30).
_SDK_TAKES_METER_PROVIDER = "meter_provider" in inspect.signature(BatchSpanProcessor).parameters
_degraded_logged = False
_degraded_lock = threading.Lock()

_SDK_DEFAULT_MAX_QUEUE_SIZE = 2048
# The SDK's shutdown joins its worker for at most this long; a shutdown that returned sooner
# found the worker done and the queue drained.
_SDK_SHUTDOWN_JOIN_SECONDS = 30.0


def _max_queue_size(argument: int | None) -> int:
    """The queue size the SDK resolves: the argument, else ``OTEL_BSP_MAX_QUEUE_SIZE``, else 2048."""
    if argument is not None:
        return argument
    try:
        return int(os.environ.get(ENV_OTEL_BSP_MAX_QUEUE_SIZE, _SDK_DEFAULT_MAX_QUEUE_SIZE))
    except ValueError:  # the SDK logs this one itself
        return _SDK_DEFAULT_MAX_QUEUE_SIZE


class _Drops:
    """Queue-full drops of one processor: signalled live, settled at shutdown."""

    def __init__(self, max_queue_size: int) -> None:
        self.max_queue_size = max_queue_size
        self._ticks = itertools.count()  # one per drop, plus one per read
        self._reads = 0
        self._reported = 0
        self._settled: int | None = None
        self._read_lock = threading.Lock()
        self._first_gate = itertools.count()

    def reinit_lock(self) -> None:
        """A new read lock (in a forked child)."""
        self._read_lock = threading.Lock()

    def on_full(self, count: int) -> None:
        """The SDK dropped ``count`` spans (on the app's thread: never raises)."""
        try:
            for _ in range(count):
                next(self._ticks)  # one C call, atomic under the GIL
            if next(self._first_gate) == 0:  # two threads may race here; exactly one gets 0
                logger.warning(
                    "memtrace-otel: the span queue is full (max_queue_size=%d), spans are being "
                    "dropped; each is counted (metric %s, CountingBatchSpanProcessor.stats()) "
                    "and the total is logged at shutdown. Raise OTEL_BSP_MAX_QUEUE_SIZE or check "
                    "that the Collector is reachable and keeping up.",
                    self.max_queue_size,
                    METRIC_SDK_SPANS_DROPPED,
                )
        except Exception:
            internal_error("batch.first_drop")

    def settle(self, dropped: int) -> None:
        """The exact count, once the queue is known to be empty."""
        with self._read_lock:
            self._settled = dropped

    def dropped(self) -> int:
        """The settled count, else the signalled one (never decreasing until it is settled)."""
        with self._read_lock:
            if self._settled is not None:
                return self._settled
            self._reported = max(self._reported, next(self._ticks) - self._reads)
            self._reads += 1
            return self._reported


def _log_degraded_once(missing: str) -> None:
    global _degraded_logged
    with _degraded_lock:
        if _degraded_logged:
            return
        _degraded_logged = True
    logger.warning(
        "memtrace-otel cannot see this opentelemetry-sdk's queue-full signal (%s not found): "
        "dropped spans are counted at shutdown only",
        missing,
    )


DEFAULT_SHUTDOWN_BUDGET_MILLIS = 5000.0
"""How long ``shutdown()`` waits for the last exports when ``OTEL_BSP_EXPORT_TIMEOUT`` is unset."""


def shutdown_budget_millis(export_timeout_millis: float | None = None) -> float:
    """The shutdown budget: the argument, else ``OTEL_BSP_EXPORT_TIMEOUT``, else 5000 ms.

    Raises:
        ValueError: a negative or non-numeric argument (a bad environment value is logged and
            the default used, as the SDK does).
    """
    return resolve(
        "export_timeout_millis",
        export_timeout_millis,
        ENV_OTEL_BSP_EXPORT_TIMEOUT,
        DEFAULT_SHUTDOWN_BUDGET_MILLIS,
        _millis,
    )


def _millis(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = -1.0
    if not number >= 0:  # NaN fails the comparison
        raise ValueError("expected a number of milliseconds >= 0")
    return number


class _CountingExporter(SpanExporter):
    """The user's exporter, counting what it was given and what it answered (public API only)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self.in_flight = 0
        self._lock = threading.Lock()
        reinit_after_fork(self)

    def _reinit_after_fork(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        count = len(spans)
        with self._lock:
            self.in_flight += count
        ok = False
        try:
            result = self.inner.export(spans)
            ok = result is SpanExportResult.SUCCESS
            return result
        finally:
            with self._lock:
                self.in_flight -= count
                if ok:
                    self.exported += count
                else:
                    self.failed += count

    def shutdown(self, timeout_millis: float | None = None) -> None:
        takes_timeout = "timeout_millis" in inspect.signature(self.inner.shutdown).parameters
        if takes_timeout and timeout_millis is not None:
            self.inner.shutdown(timeout_millis=timeout_millis)  # type: ignore[call-arg]
        else:
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def counts(self) -> tuple[int, int, int]:
        """``(exported, failed, in_flight)`` spans."""
        with self._lock:
            return self.exported, self.failed, self.in_flight


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """The SDK's ``BatchSpanProcessor``, counting the spans its full queue drops.

    Arguments are passed to the SDK unchanged, so each one resolves exactly as there: the
    argument, else ``OTEL_BSP_MAX_QUEUE_SIZE`` / ``OTEL_BSP_SCHEDULE_DELAY`` /
    ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` / ``OTEL_BSP_EXPORT_TIMEOUT``, else the SDK default.

    A full queue drops its oldest span (the SDK's policy, and its ``Queue full`` log line). Every
    drop is counted; the first one logs a warning, shutdown logs the total. The count is also the
    observable counter ``memtrace.sdk.spans.dropped`` (unit ``{span}``, attribute
    ``otel.component.name``), read through ``meter_provider`` (else the global one).

    With an SDK that has no queue-full signal, :attr:`counting` is ``False``: drops are counted
    only once shutdown has drained the queue, and a warning says so once per process.

    Args:
        span_exporter: where batches go.
        max_queue_size: spans kept while the exporter is busy; more are dropped and counted.
        schedule_delay_millis: the longest wait between two exports.
        max_export_batch_size: spans per export call.
        export_timeout_millis: the shutdown budget (else ``OTEL_BSP_EXPORT_TIMEOUT``, else 5 s);
            also passed to the SDK, which does not use it yet.
        meter_provider: where the drop counter is reported (also the SDK's own opt-in metrics).

    ``shutdown()`` returns within the budget whatever the Collector does, and logs what did not
    leave (see the module's docstring); :meth:`stats` has the same counts.

    Raises:
        ValueError: invalid sizes or delays (the SDK's checks), a negative export timeout.

    Example:
        >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        ...     InMemorySpanExporter,
        ... )
        >>> processor = CountingBatchSpanProcessor(
        ...     InMemorySpanExporter(), max_queue_size=64, max_export_batch_size=32
        ... )
        >>> processor.stats()["dropped_spans"], processor.stats()["lost_spans"]
        (0, 0)
        >>> processor.shutdown()
    """

    def __init__(
        self,
        span_exporter: SpanExporter,
        max_queue_size: int | None = None,
        schedule_delay_millis: float | None = None,
        max_export_batch_size: int | None = None,
        export_timeout_millis: float | None = None,
        *,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        sdk_options = {"meter_provider": meter_provider} if _SDK_TAKES_METER_PROVIDER else {}
        self._budget_millis = shutdown_budget_millis(export_timeout_millis)
        self._exporter_counts = _CountingExporter(span_exporter)
        self._ended = itertools.count()  # one tick per sampled span ended, plus one per read
        self._ended_reads = 0
        self._ended_lock = threading.Lock()
        self._shutdown_started = False
        reinit_after_fork(self)
        super().__init__(
            self._exporter_counts,
            max_queue_size,
            schedule_delay_millis,
            max_export_batch_size,
            export_timeout_millis,
            **sdk_options,
        )
        self._drops = _Drops(_max_queue_size(max_queue_size))
        self._counting = False
        self._summarised = False
        self._component = f"memtrace_otel.batching_span_processor/{next(_processor_ids)}"
        try:
            missing = hook_queue_full(self, self._drops.on_full)
            if missing is None:
                self._counting = True
            else:
                _log_degraded_once(missing)
        except Exception:
            internal_error("batch.hook")
        try:
            self._register_metric(meter_provider, self._drops)
        except Exception:
            internal_error("batch.metric")

    def _register_metric(self, meter_provider: MeterProvider | None, drops: _Drops) -> None:
        from memtrace_otel._version import __version__

        attributes = {METRIC_OTEL_COMPONENT_NAME: self._component}

        # The callback holds the counts, not the processor: a counter keeps its last value.
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(drops.dropped(), attributes)]

        # A meter per processor: instruments are deduplicated by name within a meter (the
        # second one's callback would be ignored), and two processors may share a provider.
        meter = (meter_provider or get_meter_provider()).get_meter(
            "memtrace_otel", __version__, attributes=attributes
        )
        meter.create_observable_counter(
            METRIC_SDK_SPANS_DROPPED,
            callbacks=[observe],
            unit="{span}",
            description="Spans the batch span processor dropped because its queue was full.",
        )

    @property
    def counting(self) -> bool:
        """Whether drops are counted as they happen (``False``: only once shutdown drained the
        queue, with an SDK that has no queue-full signal)."""
        return self._counting

    @property
    def dropped_spans(self) -> int:
        """Spans dropped so far because the queue was full."""
        return self._drops.dropped()

    def _reinit_after_fork(self) -> None:
        # The SDK restarts its worker in the child; our read locks must not be inherited held.
        self._ended_lock = threading.Lock()
        self._drops.reinit_lock()

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is not None and ctx.trace_flags.sampled:
            next(self._ended)  # one C call, atomic under the GIL
        super().on_end(span)

    def _ended_spans(self) -> int:
        with self._ended_lock:
            ended = next(self._ended) - self._ended_reads
            self._ended_reads += 1
            return ended

    def stats(self) -> dict[str, int | bool]:
        """The counts of this processor's spans.

        - ``ended_spans``: sampled spans handed to the processor;
        - ``exported_spans`` / ``failed_spans`` / ``in_flight_spans``: given to the exporter and
          accepted, refused (or raised), not answered yet;
        - ``dropped_spans``: evicted by a full queue;
        - ``queued_spans``: the rest, waiting in the queue (or being taken from it); after
          :meth:`shutdown`, what the exporter could not take within the budget;
        - ``lost_spans``: everything ended and not exported (after shutdown: the final loss);
        - ``max_queue_size`` and ``counting``.
        """
        ended = self._ended_spans()
        exported, failed, in_flight = self._exporter_counts.counts()
        dropped = self._drops.dropped()
        return {
            "ended_spans": ended,
            "exported_spans": exported,
            "failed_spans": failed,
            "in_flight_spans": in_flight,
            "dropped_spans": dropped,
            "queued_spans": max(0, ended - exported - failed - in_flight - dropped),
            "lost_spans": max(0, ended - exported),
            "max_queue_size": self._drops.max_queue_size,
            "counting": self._counting,
        }

    def shutdown(self) -> None:
        """Export what is queued within the shutdown budget, then log what did not leave.

        The SDK's own shutdown runs on a helper (daemon) thread; this returns when it is done or
        when the budget is spent, whichever comes first, so a Collector that never answers
        cannot hold the app's exit.
        """
        if self._shutdown_started:
            return
        self._shutdown_started = True
        start = time.monotonic()
        done = threading.Event()

        def run() -> None:
            try:
                BatchSpanProcessor.shutdown(self)  # type: ignore[no-untyped-call]
            except Exception:
                try:
                    internal_error("batch.shutdown")
                except Exception:  # loud mode re-raises; a helper thread has nobody to tell
                    logger.exception("memtrace-otel: the SDK's shutdown failed")
            finally:
                done.set()

        threading.Thread(target=run, name="memtrace-otel-shutdown", daemon=True).start()
        finished = done.wait(self._budget_millis / 1000)
        try:
            seconds = time.monotonic() - start
            if finished and seconds < _SDK_SHUTDOWN_JOIN_SECONDS:
                # The worker drained the queue: every span ended here was exported, refused,
                # or dropped.
                exported, failed, _ = self._exporter_counts.counts()
                self._drops.settle(max(0, self._ended_spans() - exported - failed))
            self._summarise(finished, seconds)
        except Exception:
            internal_error("batch.shutdown")

    def _summarise(self, finished: bool, seconds: float) -> None:
        if self._summarised:
            return
        self._summarised = True
        stats = self.stats()
        lost = int(stats["lost_spans"])
        if not lost:
            return
        dropped, failed = int(stats["dropped_spans"]), int(stats["failed_spans"])
        in_flight = int(stats["in_flight_spans"])
        queued = max(0, lost - dropped - failed - in_flight)
        logger.warning(
            "memtrace-otel: %d of %d spans were not exported: %d dropped because the span queue "
            "was full (max_queue_size=%d), %d refused by the exporter, %d still being exported "
            "and %d still queued when shutdown %s after %.1f s (budget %.1f s: "
            "export_timeout_millis or OTEL_BSP_EXPORT_TIMEOUT)",
            lost,
            stats["ended_spans"],
            dropped,
            stats["max_queue_size"],
            failed,
            in_flight,
            queued,
            "finished" if finished else "gave up",
            seconds,
            self._budget_millis / 1000,
        )

"""A ``BatchSpanProcessor`` that counts the spans a full queue drops, and says so once.

The SDK's processor (1.3x-1.4x) logs ``Queue full, dropping Span.`` for every dropped span (its
own duplicate filter thins that to about one line per 20 s) and counts drops only when
``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`` is set. :class:`CountingBatchSpanProcessor` is the
SDK processor itself (same queue, worker, environment variables), with three additions:

- every drop is counted, read with :attr:`~CountingBatchSpanProcessor.dropped_spans` /
  :meth:`~CountingBatchSpanProcessor.stats` and as the observable counter
  ``memtrace.sdk.spans.dropped`` (unit ``{span}``);
- the first drop logs one warning with a hint, shutdown logs the total; the SDK's per-span
  warning is filtered out for this processor only (other processors keep theirs);
- no lock on the app's thread and no logging there beyond that one warning: one extra method
  call and one atomic increment per span.

**How drops are counted.** The SDK's queue is a ``deque`` with ``maxlen``: appending to a full
one silently evicts the oldest span. The SDK checks "full?" and then appends without a lock, so
its own drop count can be off when threads race. We swap in a ``deque`` subclass that counts
what goes in (on the app's threads, atomically) and what the worker takes out; a span that
went in and neither came out nor is still queued was evicted. That balance is exact whenever
the queue is at rest (after shutdown, or while the exporter is stuck) and never above the true
count in between.

The SDK internals this relies on (the batch processor, its ``deque``, its ``emit`` and its
logger) are checked at construction; when one is missing (another SDK version) the processor is
the plain SDK one, and says so once.

**Shutdown budget.** The SDK's ``shutdown()`` waits up to 30 s for its worker, which may be stuck
in an export to a Collector that accepts and never answers. :meth:`CountingBatchSpanProcessor.shutdown`
runs it on a helper thread and waits at most the budget: ``export_timeout_millis``, else
``OTEL_BSP_EXPORT_TIMEOUT`` (the SDK's public knob, which its processor does not use yet), else
5 s. Then it returns and logs one line counting every span that did not leave: dropped for a full
queue, failed, still being exported, still queued. Those counts come from public hooks only: the
processor's ``on_end`` and a wrapper around the exporter it was given.
"""

from __future__ import annotations

import collections
import inspect
import itertools
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from types import CodeType, FrameType
from typing import Any

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation, get_meter_provider
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from memtrace_otel._internal import internal_error, reinit_after_fork
from memtrace_otel.semconv.attributes import METRIC_OTEL_COMPONENT_NAME, METRIC_SDK_SPANS_DROPPED

__all__ = ["CountingBatchSpanProcessor"]

logger = logging.getLogger(__name__)

# The filter looks for the SDK's ``emit`` frame this many frames up from itself (logging adds ~5).
_MAX_FRAMES = 16

_processor_ids = itertools.count()
# opentelemetry-sdk before ~1.37 has no ``meter_provider`` argument (pyproject allows 1.30).
_SDK_TAKES_METER_PROVIDER = "meter_provider" in inspect.signature(BatchSpanProcessor).parameters
_degraded_logged = False
_degraded_lock = threading.Lock()


# Called unbound: faster than ``super()`` on the app's path.
_deque_appendleft = collections.deque.appendleft
_deque_append = collections.deque.append
_deque_pop = collections.deque.pop
_deque_popleft = collections.deque.popleft


class _CountingQueue(collections.deque[Any]):
    """The SDK's bounded queue, counting what goes in and what the worker takes out.

    ``appendleft``/``append`` run on the app's threads: one atomic tick each, no lock (``next()``
    on an ``itertools.count`` is one C call, atomic under the GIL; ``n += 1`` from two threads
    can lose one). ``pop``, ``popleft`` and ``clear`` run on the worker under the SDK's export
    lock (``clear`` in a forked child), so a plain integer is safe there; it is raised *before*
    a span leaves, so a concurrent reader can only undercount.
    """

    __slots__ = ("_capacity", "_on_full", "_reads", "_ticks", "_watching", "taken")

    def __init__(self, maxlen: int, on_full: Callable[[], None]) -> None:
        super().__init__((), maxlen)
        self._capacity = maxlen
        self._ticks = itertools.count()  # one per span added, plus one per read of the count
        self._reads = 0
        self.taken = 0
        self._watching = True  # until the first time the queue is seen full
        self._on_full = on_full

    def appendleft(self, item: Any, /) -> None:
        if self._watching and len(self) == self._capacity:
            self._watching = False
            self._on_full()  # a heads-up only: the count comes from the balance
        _deque_appendleft(self, item)
        next(self._ticks)

    def append(self, item: Any, /) -> None:
        if self._watching and len(self) == self._capacity:
            self._watching = False
            self._on_full()
        _deque_append(self, item)
        next(self._ticks)

    def added(self) -> int:
        """Spans added so far; the caller serialises reads (each read takes a tick too)."""
        added = next(self._ticks) - self._reads
        self._reads += 1
        return added

    def pop(self) -> Any:  # type: ignore[override]  # deque.pop takes no index
        self.taken += 1
        try:
            return _deque_pop(self)
        except IndexError:
            self.taken -= 1
            raise

    def popleft(self) -> Any:
        self.taken += 1
        try:
            return _deque_popleft(self)
        except IndexError:
            self.taken -= 1
            raise

    def clear(self) -> None:
        self.taken += len(self)
        super().clear()


class _DropState:
    """What the queue, the processor and the metric callback share."""

    def __init__(self, maxlen: int) -> None:
        self.max_queue_size = maxlen
        self.queue = _CountingQueue(maxlen, self._on_full)
        self._reported = 0
        self._read_lock = threading.Lock()
        self._first_gate = itertools.count()

    def reinit_lock(self) -> None:
        """A new read lock (in a forked child)."""
        self._read_lock = threading.Lock()

    def dropped(self) -> int:
        """In - out - still queued, read in an order that can only undercount, never decreasing."""
        with self._read_lock:
            # Added first and taken last: what moves between the reads lowers the result.
            added = self.queue.added()
            queued = len(self.queue)
            balance = added - queued - self.queue.taken
            self._reported = max(self._reported, balance)
            return self._reported

    def _on_full(self) -> None:
        # Two threads may both see the queue full first; exactly one of them gets 0.
        if next(self._first_gate) != 0:
            return
        try:
            logger.warning(
                "memtrace-otel: the span queue is full (max_queue_size=%d), spans are being "
                "dropped; each is counted (metric %s, CountingBatchSpanProcessor.stats()) and "
                "the total is logged at shutdown. Raise OTEL_BSP_MAX_QUEUE_SIZE or check that "
                "the Collector is reachable and keeping up.",
                self.max_queue_size,
                METRIC_SDK_SPANS_DROPPED,
            )
        except Exception:
            internal_error("batch.first_drop")


class _SilenceOwnQueueFull(logging.Filter):
    """Removes the SDK's per-span ``Queue full`` records logged by *one* batch processor.

    The SDK logger is shared by every batch processor; a record does not say which one logged
    it, but the frame of ``emit`` that logs it does (its ``self``). Only records logged while
    that frame is on the stack are removed, so other processors keep their warnings. This runs
    only when a span is dropped, never on the normal path. Should the batch processor ever hold
    another queue than our counting one, its warnings are let through again.
    """

    def __init__(self, batch: Any, emit_code: CodeType, queue: _CountingQueue) -> None:
        super().__init__()
        self._batch = weakref.ref(batch)
        self._emit_code = emit_code
        self._queue = queue

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            if record.levelno != logging.WARNING or record.funcName != self._emit_code.co_name:
                return True
            frame: FrameType | None = sys._getframe(1)
            for _ in range(_MAX_FRAMES):
                if frame is None:
                    break
                if frame.f_code is self._emit_code:
                    batch = self._batch()
                    ours = batch is not None and frame.f_locals.get("self") is batch
                    return not (ours and getattr(batch, "_queue", None) is self._queue)
                frame = frame.f_back
            return True
        except Exception:  # a filter that raises would break the SDK's logging call
            return True


def _sdk_internals(processor: BatchSpanProcessor) -> tuple[Any, CodeType, logging.Logger] | str:
    """The SDK parts we hook (batch processor, code of its ``emit``, its logger), or what is missing."""
    batch = getattr(processor, "_batch_processor", None)
    if batch is None:
        return "BatchSpanProcessor._batch_processor"
    queue = getattr(batch, "_queue", None)
    # Exactly the SDK's fresh bounded deque: nothing queued yet that we would not have counted.
    if type(queue) is not collections.deque or queue.maxlen is None or len(queue):
        return "an empty bounded deque in BatchProcessor._queue"
    emit_code = getattr(getattr(type(batch), "emit", None), "__code__", None)
    if not isinstance(emit_code, CodeType):
        return "BatchProcessor.emit"
    sdk_logger = getattr(sys.modules.get(type(batch).__module__), "_logger", None)
    if not isinstance(sdk_logger, logging.Logger):
        return f"{type(batch).__module__}._logger"
    return batch, emit_code, sdk_logger


def _log_degraded_once(missing: str) -> None:
    global _degraded_logged
    with _degraded_lock:
        if _degraded_logged:
            return
        _degraded_logged = True
    logger.warning(
        "memtrace-otel cannot count dropped spans with this opentelemetry-sdk (%s not found); "
        "using the SDK's BatchSpanProcessor as is: its own 'Queue full' warnings apply",
        missing,
    )


def _remove_filter(sdk_logger: logging.Logger, log_filter: logging.Filter) -> None:
    sdk_logger.removeFilter(log_filter)


DEFAULT_SHUTDOWN_BUDGET_MILLIS = 5000.0
"""How long ``shutdown()`` waits for the last exports when ``OTEL_BSP_EXPORT_TIMEOUT`` is unset."""
_ENV_BSP_EXPORT_TIMEOUT = "OTEL_BSP_EXPORT_TIMEOUT"


def shutdown_budget_millis(export_timeout_millis: float | None = None) -> float:
    """The shutdown budget: the argument, else ``OTEL_BSP_EXPORT_TIMEOUT``, else 5000 ms.

    Raises:
        ValueError: a negative or non-numeric argument (a bad environment value is logged and
            the default used, as the SDK does).
    """
    if export_timeout_millis is not None:
        budget = float(export_timeout_millis)
        if budget < 0:
            raise ValueError(f"invalid export_timeout_millis {export_timeout_millis!r}")
        return budget
    raw = os.environ.get(_ENV_BSP_EXPORT_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_SHUTDOWN_BUDGET_MILLIS
    try:
        budget = float(raw)
    except ValueError:
        budget = -1.0
    if budget < 0:
        logger.warning(
            "invalid %s %r; the shutdown budget is %d ms",
            _ENV_BSP_EXPORT_TIMEOUT,
            raw,
            DEFAULT_SHUTDOWN_BUDGET_MILLIS,
        )
        return DEFAULT_SHUTDOWN_BUDGET_MILLIS
    return budget


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

    A full queue drops its oldest span (the SDK's policy). Every drop is counted; the first
    one logs a warning, shutdown logs the total. The count is also the observable counter
    ``memtrace.sdk.spans.dropped`` (unit ``{span}``, attribute ``otel.component.name``), read
    through ``meter_provider`` (else the global one).

    When the SDK's internals differ from what the hooks expect, the processor works exactly as
    the SDK's, :attr:`counting` is ``False`` and a warning says so once per process.

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
        self._state: _DropState | None = None
        self._unfilter: weakref.finalize[Any, Any] | None = None
        self._summarised = False
        self._component = f"memtrace_otel.batching_span_processor/{next(_processor_ids)}"
        try:
            self._hook(meter_provider)
        except Exception:
            internal_error("batch.hook")

    def _hook(self, meter_provider: MeterProvider | None) -> None:
        found = _sdk_internals(self)
        if isinstance(found, str):
            _log_degraded_once(found)
            return
        batch, emit_code, sdk_logger = found
        state = _DropState(batch._queue.maxlen)
        # No span can be in flight yet: the processor is not on any provider before __init__
        # returns, so the swap loses nothing.
        batch._queue = state.queue
        self._state = state
        # Only once drops are counted may their per-span warnings go.
        log_filter = _SilenceOwnQueueFull(batch, emit_code, state.queue)
        # First in line, so the SDK's duplicate filter never sees (and never remembers) our
        # records and keeps working as before for the other processors.
        sdk_logger.filters.insert(0, log_filter)
        # Removed on shutdown, or when the processor is collected without one.
        self._unfilter = weakref.finalize(self, _remove_filter, sdk_logger, log_filter)
        try:
            self._register_metric(meter_provider, state)
        except Exception:
            internal_error("batch.metric")

    def _register_metric(self, meter_provider: MeterProvider | None, state: _DropState) -> None:
        from memtrace_otel import __version__

        attributes = {METRIC_OTEL_COMPONENT_NAME: self._component}

        # The callback holds the state, not the processor: a counter keeps its last value.
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(state.dropped(), attributes)]

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
        """Whether drops are counted (``False``: another SDK version, the plain SDK processor)."""
        return self._state is not None

    @property
    def dropped_spans(self) -> int:
        """Spans dropped so far because the queue was full (0 when not :attr:`counting`)."""
        return self._state.dropped() if self._state is not None else 0

    def _reinit_after_fork(self) -> None:
        # The SDK restarts its worker in the child; our read locks must not be inherited held.
        self._ended_lock = threading.Lock()
        if self._state is not None:
            self._state.reinit_lock()

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
        - ``dropped_spans``: evicted by a full queue (0 when not :attr:`counting`);
        - ``queued_spans``: in the queue now; after :meth:`shutdown` what the exporter could not
          take within the budget (0 when not :attr:`counting`);
        - ``lost_spans``: everything ended and not exported (after shutdown: the final loss);
        - ``max_queue_size`` and ``counting``.
        """
        ended = self._ended_spans()
        exported, failed, in_flight = self._exporter_counts.counts()
        state = self._state
        return {
            "ended_spans": ended,
            "exported_spans": exported,
            "failed_spans": failed,
            "in_flight_spans": in_flight,
            "dropped_spans": state.dropped() if state is not None else 0,
            "queued_spans": len(state.queue) if state is not None else 0,
            "lost_spans": max(0, ended - exported),
            "max_queue_size": state.max_queue_size if state is not None else 0,
            "counting": state is not None,
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
            self._summarise(finished, time.monotonic() - start)
        except Exception:
            internal_error("batch.shutdown")

    def _summarise(self, finished: bool, seconds: float) -> None:
        if self._summarised:
            return
        self._summarised = True
        if self._unfilter is not None:
            self._unfilter()
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

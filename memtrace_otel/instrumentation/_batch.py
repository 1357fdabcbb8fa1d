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
"""

from __future__ import annotations

import collections
import inspect
import itertools
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from types import CodeType, FrameType
from typing import Any

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation, get_meter_provider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from memtrace_otel._internal import internal_error
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
        export_timeout_millis: passed to the SDK (which does not use it yet).
        meter_provider: where the drop counter is reported (also the SDK's own opt-in metrics).

    Raises:
        ValueError: invalid sizes or delays (the SDK's checks).

    Example:
        >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        ...     InMemorySpanExporter,
        ... )
        >>> processor = CountingBatchSpanProcessor(
        ...     InMemorySpanExporter(), max_queue_size=64, max_export_batch_size=32
        ... )
        >>> processor.stats()
        {'dropped_spans': 0, 'queued_spans': 0, 'max_queue_size': 64, 'counting': True}
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
        super().__init__(
            span_exporter,
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

    def stats(self) -> dict[str, int | bool]:
        """The counts: ``dropped_spans``, ``queued_spans``, ``max_queue_size`` and ``counting``.

        ``queued_spans`` after :meth:`shutdown` is what the exporter could not take before the
        shutdown deadline (lost, but not dropped for a full queue). Counts are 0 when not
        :attr:`counting`.
        """
        state = self._state
        if state is None:
            return {"dropped_spans": 0, "queued_spans": 0, "max_queue_size": 0, "counting": False}
        return {
            "dropped_spans": state.dropped(),
            "queued_spans": len(state.queue),
            "max_queue_size": state.max_queue_size,
            "counting": True,
        }

    def shutdown(self) -> None:
        """Export what is queued (the SDK's shutdown), then log the total of dropped spans."""
        try:
            super().shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
        finally:
            try:
                self._summarise()
            except Exception:
                internal_error("batch.shutdown")

    def _summarise(self) -> None:
        state = self._state
        if state is None or self._summarised:
            return
        self._summarised = True
        if self._unfilter is not None:
            self._unfilter()
        dropped = state.dropped()
        if dropped:
            logger.warning(
                "memtrace-otel: %d spans dropped in total because the span queue was full "
                "(max_queue_size=%d)",
                dropped,
                state.max_queue_size,
            )

"""The one place that touches private names of other libraries, each with why and what if it goes.

Everything else in the package uses public APIs only (``tests/test_layout.py`` scans for private
attribute access outside this module). Each entry degrades instead of raising when a library
changes: the caller gets ``None`` (or the public fallback) and carries on.

1. ``opentelemetry.context._SUPPRESS_INSTRUMENTATION_KEY``: the context key the SDK, its
   exporters and every contrib instrumentation check to stay quiet. contrib's own
   ``opentelemetry.instrumentation.utils`` imports it the same way (a comment there says the public home
   is not decided); the public ``suppress_instrumentation()`` sets it but takes no context to
   read it from, which the tracer's hot path needs.
2. ``BatchSpanProcessor._batch_processor._metrics``: the SDK batch processor's self-metrics
   object, whose ``drop_items(n, "queue_full")`` is the SDK's own queue-full signal (the one
   behind ``otel.sdk.processor.span.processed{error.type=queue_full}``, recorded only with
   ``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED``). :func:`hook_queue_full` wraps it so the signal
   also reaches :class:`~memtrace_otel.export.CountingBatchSpanProcessor`, whatever that variable
   says. Without it (an SDK before the processor metrics) drops are still counted exactly at
   shutdown, from public counts.
3. ``G._node``, ``G._succ``, ``G._pred`` of a networkx ``MultiDiGraph``: the plain dicts behind
   ``G.nodes``, ``G.succ`` and ``G.pred``. The graph builder fills them directly and the queries
   read them: the public views wrap every lookup in a new view object, several times the cost
   on the paths that touch each node (networkx's own algorithms use these dicts the same way).
   They have kept these names and shapes since networkx 2.0.
4. ``Span._attributes._dict``, ``Span._events._dq``, ``Span._links._dq`` and
   ``Event._attributes._dict`` of an ended SDK span: the plain dict inside its
   ``BoundedAttributes`` and the deques inside its ``BoundedList`` objects. The live graph
   processor reads them once per span in its fold thread (:func:`ended_span_parts`). The public
   properties wrap each in Python-level code: a ``MappingProxyType`` whose ``copy`` calls
   ``BoundedAttributes.copy``, and a tuple made by ``BoundedList.__iter__`` under its lock.
   Together they were about 40 % of the cost of reading a span. An ended span no longer
   changes (the SDK's mutators log a warning and return once a span has ended), and the graph
   builder only reads a record's mappings, so the dicts are passed on without a copy. A span that
   lacks these names (a hand-made ``ReadableSpan``, another SDK version) is read
   through the public properties.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as _otel_context

SUPPRESS_INSTRUMENTATION_KEY: str = _otel_context._SUPPRESS_INSTRUMENTATION_KEY
"""The standard "do not trace this" context key (entry 1)."""


def nodes_of(G: Any) -> dict[Any, dict[str, Any]]:
    """Node -> its attribute dict (``G._node``, entry 3)."""
    nodes: dict[Any, dict[str, Any]] = G._node
    return nodes


def succ_of(G: Any) -> dict[Any, dict[Any, dict[Any, dict[str, Any]]]]:
    """Node -> successor -> edge key -> edge attributes (``G._succ``, entry 3)."""
    succ: dict[Any, dict[Any, dict[Any, dict[str, Any]]]] = G._succ
    return succ


def pred_of(G: Any) -> dict[Any, dict[Any, dict[Any, dict[str, Any]]]]:
    """Node -> predecessor -> edge key -> edge attributes (``G._pred``, entry 3)."""
    pred: dict[Any, dict[Any, dict[Any, dict[str, Any]]]] = G._pred
    return pred


class _QueueFullSignal:
    """The SDK's processor-metrics object, also telling us about queue-full drops (entry 2)."""

    __slots__ = ("_inner", "_on_full")

    def __init__(self, inner: Any, on_full: Callable[[int], None]) -> None:
        self._inner = inner
        self._on_full = on_full

    def register_queue_size(self, get_queue_size: Callable[[], int]) -> None:
        self._inner.register_queue_size(get_queue_size)

    def drop_items(self, count: int, error_type: str = "queue_full") -> None:
        if error_type == "queue_full":
            self._on_full(count)  # never raises: the caller's callback guards itself
        self._inner.drop_items(count, error_type)

    def finish_items(self, count: int) -> None:
        self._inner.finish_items(count)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def hook_queue_full(processor: object, on_full: Callable[[int], None]) -> str | None:
    """Have ``on_full(n)`` called when the SDK batch ``processor`` drops ``n`` spans for a full
    queue (on the app's thread, inside its ``on_end``). Returns ``None`` when hooked, else the name
    of what this SDK lacks. ``processor`` must not be on a provider yet."""
    batch = getattr(processor, "_batch_processor", None)
    metrics = getattr(batch, "_metrics", None)
    if batch is None or metrics is None:
        return "BatchSpanProcessor._batch_processor._metrics"
    if not callable(getattr(metrics, "drop_items", None)):
        return "the processor metrics' drop_items"
    batch._metrics = _QueueFullSignal(metrics, on_full)
    return None


def ended_span_parts(span: Any) -> tuple[Mapping[str, Any], Any, Any]:
    """``(attributes, events, links)`` of an ended SDK span (entry 4), all to be read only: its
    attributes as a plain dict (the SDK's own, not a copy: an ended span no longer changes), its
    events and links as sequences (the SDK's own deques, or the public properties' tuples)."""
    try:
        return span._attributes._dict, span._events._dq, span._links._dq
    except AttributeError:
        attributes = span.attributes
        plain = dict(attributes) if attributes else {}
        return plain, span.events, span.links


def event_attributes(event: Any) -> Mapping[str, Any]:
    """An SDK event's attributes as a plain dict, to be read only (entry 4)."""
    try:
        plain: Mapping[str, Any] = event._attributes._dict
    except AttributeError:
        attributes = event.attributes
        return dict(attributes) if attributes else {}
    return plain

"""A pytest plugin for testing code instrumented with memtrace-otel.

Installed with the package (``pytest11`` entry point), it gives every test suite these fixtures:

- ``memtrace_exporter``: an ``InMemorySpanExporter`` receiving every span as it ends;
- ``memtrace_provider``: a ``TracerProvider`` with deterministic ids feeding that exporter;
- ``memtrace_tracer``: a :class:`MemTracer` on that provider, content capture on, with its own
  writer registry (so tests do not see each other's links).

and the helper :func:`spans_as_dicts` for comparing spans as plain data::

    def test_my_memory(memtrace_tracer, memtrace_exporter):
        my_memory.add("Ana lives in Porto", tracer=memtrace_tracer)
        [span] = spans_as_dicts(memtrace_exporter.get_finished_spans())
        assert span["attributes"]["memtrace.op.kind"] == "create"
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from memtrace_otel.export import span_to_record
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.semconv import CaptureMode

__all__ = [
    "SequentialIdGenerator",
    "memtrace_exporter",
    "memtrace_provider",
    "memtrace_tracer",
    "spans_as_dicts",
]


class SequentialIdGenerator(IdGenerator):
    """Ids 1, 2, 3, ... so span ids in assertions are predictable (``0000000000000001``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._span = 0
        self._trace = 0

    def generate_span_id(self) -> int:
        with self._lock:
            self._span += 1
            return self._span

    def generate_trace_id(self) -> int:
        with self._lock:
            self._trace += 1
            return self._trace


def spans_as_dicts(spans: Iterable[ReadableSpan]) -> list[dict[str, Any]]:
    """Finished spans as plain dicts (ids hex, arrays lists), in end order."""
    out = []
    for span in spans:
        r = span_to_record(span)
        out.append(
            {
                "name": r.name,
                "trace_id": r.trace_id,
                "span_id": r.span_id,
                "parent_span_id": r.parent_span_id,
                "status": r.status_code,
                "attributes": _plain(r.attributes),
                "events": [{"name": e.name, "attributes": _plain(e.attributes)} for e in r.events],
                "links": [
                    {
                        "trace_id": li.trace_id,
                        "span_id": li.span_id,
                        "attributes": _plain(li.attributes),
                    }
                    for li in r.links
                ],
            }
        )
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.fixture
def memtrace_exporter() -> InMemorySpanExporter:
    """Collects finished spans in memory."""
    return InMemorySpanExporter()


@pytest.fixture
def memtrace_provider(memtrace_exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A TracerProvider with sequential ids exporting synchronously to ``memtrace_exporter``."""
    provider = TracerProvider(id_generator=SequentialIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(memtrace_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def memtrace_tracer(memtrace_provider: TracerProvider) -> MemTracer:
    """A MemTracer with content capture on and a private writer registry."""
    return MemTracer(
        tracer_provider=memtrace_provider,
        system="test",
        store_id="test-store",
        capture=CaptureConfig(mode=CaptureMode.SPAN_AND_EVENT),
        registry=WriterRegistry(),
    )

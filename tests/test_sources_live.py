"""The loaders against the real backends on loopback: Jaeger v2 and the project's Collector.

Spans go out through the real OTLP exporters; what comes back through Jaeger's query APIs and the
Collector's file exporter must decode to the records the SDK made. The binaries come from
``scripts/build_backends.sh`` (see ``tests/_backends.py``): without them these tests skip, except
under ``CI=true``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link

from memtrace_otel.export import span_to_record
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.sources import HttpOptions, open_source
from memtrace_otel.sources._backends import JaegerSource
from tests._backends import CollectorServer, JaegerServer

HTTP = HttpOptions(timeout=10, retries=2, backoff=0.2)


def _send(exporter: SpanExporter, service: str) -> list[ReadableSpan]:
    """A construction trace and a failed-query trace linking to it; returns the SDK's spans."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("memtrace-sources-live", "0.1")
    with tracer.start_as_current_span(
        "create_memory",
        attributes={
            A.MEMTRACE_OP_KIND: "create",
            A.MEMTRACE_OP_NAME: "rag.index",
            A.MEMTRACE_OP_INPUTS: ["msg-1@1"],
            A.MEMTRACE_OP_OUTPUTS: ["mem-1@1"],
            A.MEMTRACE_STAGE: "construction",
        },
    ) as create:
        create.add_event(
            A.MEMTRACE_VARIABLE_EVENT,
            {A.MEMTRACE_VARIABLE_REF: "mem-1@1", A.MEMTRACE_VARIABLE_VALUE: "Ana lives in Porto"},
        )
    writer = create.get_span_context()
    with tracer.start_as_current_span("answer question"):
        with tracer.start_as_current_span(
            "search_memory",
            attributes={
                A.MEMTRACE_OP_KIND: "retrieve",
                A.MEMTRACE_OP_NAME: "rag.search",
                A.MEMTRACE_OP_INPUTS: ["q-1@1", "mem-1@1"],
                A.MEMTRACE_OP_OUTPUTS: ["cands-1@1"],
                A.MEMTRACE_STAGE: "retrieval",
                A.MEMTRACE_CASE_ID: "case-1",
                "gen_ai.memory.record.count": 2,
            },
            links=[Link(writer, {A.MEMTRACE_VARIABLE_REF: "mem-1@1"})],
        ):
            pass
        with tracer.start_as_current_span(
            "memtrace.judge rag.judge",
            attributes={
                A.MEMTRACE_OP_KIND: "judge",
                A.MEMTRACE_OP_NAME: "rag.judge",
                A.MEMTRACE_OP_INPUTS: ["pred-1@1", "gold-1@1"],
                A.MEMTRACE_OP_OUTPUTS: ["score-1@1"],
                A.MEMTRACE_STAGE: "evaluation",
                A.MEMTRACE_JUDGE_VERDICT: "incorrect",
            },
        ):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def _essence(record: SpanRecord) -> tuple[Any, ...]:
    """What must survive a backend: ids, tree, name, kind, attributes, events, link targets."""
    return (
        record.trace_id,
        record.span_id,
        record.parent_span_id,
        record.name,
        record.kind,
        record.start_time_unix_nano // 1000,  # Jaeger v1 keeps microseconds
        dict(record.attributes),
        [(e.name, dict(e.attributes)) for e in record.events],
        [(li.trace_id, li.span_id) for li in record.links],
        record.resource_attributes.get("service.name"),
    )


@pytest.fixture(scope="module")
def in_jaeger(jaeger: JaegerServer) -> Iterator[dict[str, Any]]:
    service = f"sources-live-{uuid.uuid4().hex[:8]}"
    spans = _send(HttpExporter(endpoint=f"{jaeger.otlp_http_url}/v1/traces"), service)
    records = [span_to_record(s) for s in spans]
    create = next(r for r in records if r.name == "create_memory")
    query = next(r for r in records if r.name == "search_memory")
    jaeger.wait_for_trace_v3(create.trace_id)
    jaeger.wait_for_trace_v3(query.trace_id, span_count=3)
    yield {"service": service, "records": records, "create": create, "query": query}


def test_live_jaeger_api_v3_returns_what_the_sdk_sent(
    jaeger: JaegerServer, in_jaeger: dict[str, Any]
) -> None:
    query_trace = in_jaeger["query"].trace_id
    source = JaegerSource(jaeger.query_url, trace_ids=[query_trace], follow_links=0, http=HTTP)
    got = sorted(_essence(r) for r in source.records())
    sent = sorted(_essence(r) for r in in_jaeger["records"] if r.trace_id == query_trace)
    assert got == sent
    assert source.stats.links_not_followed == 1  # the construction trace, bound 0


def test_live_jaeger_search_follows_the_link_to_the_construction_trace(
    jaeger: JaegerServer, in_jaeger: dict[str, Any]
) -> None:
    spec = (
        f"jaeger+{jaeger.query_url}?service={in_jaeger['service']}&operation=search_memory"
        "&lookback=30m&follow_links=1"
    )
    source = open_source(spec, strict=True, http=HTTP)
    got = sorted(_essence(r) for r in source.records())
    assert got == sorted(_essence(r) for r in in_jaeger["records"])
    assert source.stats.traces_fetched == 2


def test_live_jaeger_v1_api_restores_array_attributes(
    jaeger: JaegerServer, in_jaeger: dict[str, Any]
) -> None:
    query = in_jaeger["query"]
    source = open_source(
        f"jaeger+{jaeger.query_url}?trace_id={query.trace_id}&api=v1&follow_links=0",
        strict=True,
        http=HTTP,
    )
    records = {r.span_id: r for r in source.records()}
    retrieve = records[query.span_id]
    assert retrieve.attributes[A.MEMTRACE_OP_INPUTS] == ("q-1@1", "mem-1@1")
    assert retrieve.attributes["gen_ai.memory.record.count"] == 2
    [link] = retrieve.links
    create = in_jaeger["create"]
    assert (link.trace_id, link.span_id) == (create.trace_id, create.span_id)
    assert link.attributes == {"opentracing.ref_type": "follows_from"}  # Jaeger drops the ref
    assert retrieve.parent_span_id == query.parent_span_id
    assert retrieve.kind == query.kind


def test_live_collector_file_output_loads(collector: CollectorServer) -> None:
    service = f"sources-file-{uuid.uuid4().hex[:8]}"
    spans = _send(GrpcExporter(endpoint=collector.otlp_grpc_endpoint, insecure=True), service)
    sent = {r.span_id: r for r in (span_to_record(s) for s in spans)}
    collector.wait_for_file_spans(set(sent))
    time.sleep(0.5)  # let the exporter finish the line it is writing
    source = open_source(str(collector.traces_path.parent), strict=False)
    loaded = {r.span_id: r for r in source.records() if r.span_id in sent}
    assert set(loaded) == set(sent)
    for span_id, record in sent.items():
        assert loaded[span_id] == record  # every field, through the real Collector

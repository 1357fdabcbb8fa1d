"""``configure()``: a TracerProvider from the standard ``OTEL_*`` variables, or the embedded default.

The embedded default, used when no OTLP endpoint is configured, appends OTLP JSON Lines to a
local file (the Collector file exporter's format), so ``memtrace attribute`` can read it with no
server running.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.util.types import AttributeValue

from memtrace_otel.export._batch import CountingBatchSpanProcessor
from memtrace_otel.export._otlp_json import OtlpJsonLinesExporter
from memtrace_otel.semconv.attributes import SERVICE_NAME
from memtrace_otel.semconv.env import (
    ENV_MEMTRACE_TRACES_FILE,
    OTLP_ENDPOINT_VARS,
    OTLP_PROTOCOL_VARS,
)

DEFAULT_TRACES_FILE = "memtrace-traces.jsonl"
_PROTOCOLS = ("grpc", "http/protobuf")
ENDPOINT_VARS = OTLP_ENDPOINT_VARS
PROTOCOL_VARS = OTLP_PROTOCOL_VARS


def resolve_exporter(
    *, traces_file: str | os.PathLike[str] | None = None, protocol: str | None = None
) -> SpanExporter:
    """The span exporter ``configure()`` would use.

    Order: an explicit ``traces_file`` > an OTLP endpoint in ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``
    (protocol from the argument, then ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``, default
    ``http/protobuf`` as the OTLP spec says) > the file in ``MEMTRACE_TRACES_FILE`` >
    ``./memtrace-traces.jsonl``.

    Raises:
        ValueError: an unsupported protocol (``http/json`` has no Python exporter).
    """
    if traces_file is not None:
        return OtlpJsonLinesExporter(traces_file)
    endpoint = next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)), None)
    if endpoint is None and protocol is None:
        return OtlpJsonLinesExporter(
            os.environ.get(ENV_MEMTRACE_TRACES_FILE) or DEFAULT_TRACES_FILE
        )
    chosen = protocol or next(
        (os.environ[v] for v in PROTOCOL_VARS if os.environ.get(v)), "http/protobuf"
    )
    chosen = chosen.strip().lower()
    if chosen == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    if chosen == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter()
    raise ValueError(
        f"unsupported OTLP protocol {chosen!r}: expected one of {', '.join(_PROTOCOLS)}"
    )


def configure(
    *,
    service_name: str | None = None,
    traces_file: str | os.PathLike[str] | None = None,
    protocol: str | None = None,
    resource_attributes: Mapping[str, AttributeValue] | None = None,
    batch: bool = True,
    set_global: bool = True,
    extra_processors: tuple[SpanProcessor, ...] = (),
    meter_provider: MeterProvider | None = None,
) -> TracerProvider:
    """Set up a TracerProvider that exports memory-operation spans.

    Args:
        service_name: ``service.name``; ``None`` keeps ``OTEL_SERVICE_NAME`` / the SDK default.
        traces_file: write OTLP JSON Lines here instead of sending OTLP.
        protocol: ``grpc`` or ``http/protobuf``; ``None`` reads the ``OTEL_*`` variables.
        resource_attributes: more resource attributes (``OTEL_RESOURCE_ATTRIBUTES`` also applies).
        batch: export in the background (:class:`CountingBatchSpanProcessor`: the SDK's
            ``BatchSpanProcessor``, ``OTEL_BSP_*`` variables included, counting the spans a full
            queue drops; its ``shutdown()`` waits at most ``OTEL_BSP_EXPORT_TIMEOUT``, default
            5 s, and counts what did not leave); ``False`` exports each span as it ends
            (scripts, tests).
        set_global: install the provider as the global one.
        extra_processors: more span processors (e.g. an ``EvolutionGraphProcessor``).
        meter_provider: where the batch processor reports its dropped-span counter
            (``memtrace.sdk.spans.dropped``); ``None`` uses the global meter provider.

    Returns:
        The provider; call ``shutdown()`` on it before the process exits to flush.

    Raises:
        ValueError: an unsupported protocol.
    """
    attrs: dict[str, AttributeValue] = dict(resource_attributes or {})
    if service_name:
        attrs[SERVICE_NAME] = service_name
    provider = TracerProvider(resource=Resource.create(attrs))
    exporter = resolve_exporter(traces_file=traces_file, protocol=protocol)
    provider.add_span_processor(
        CountingBatchSpanProcessor(exporter, meter_provider=meter_provider)
        if batch
        else SimpleSpanProcessor(exporter)
    )
    for processor in extra_processors:
        provider.add_span_processor(processor)
    if set_global:
        trace.set_tracer_provider(provider)
    return provider

"""Verdicts back into telemetry: one ``memtrace.attribution`` span per verdict, linked to the culprit.

:func:`send_verdicts` exports them synchronously and says which the endpoint accepted, so the
batch job can count failures and resend the rest on its next run.

Each verdict span starts a new trace (the culprit's trace is finished and exported long ago) and
links to the culprit op span, so Jaeger shows it as a FOLLOWS_FROM reference and Tempo as a link.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue

from memtrace_otel.attribution._model import Verdict
from memtrace_otel.export._configure import PROTOCOL_VARS
from memtrace_otel.semconv import attributes as A


def verdict_attributes(verdict: Verdict, *, textless: bool = False) -> dict[str, AttributeValue]:
    """The ``memtrace.attribution.*`` attributes of a verdict span.

    ``textless``: the reason is replaced by a short label naming refs only (the verdicts were
    made from content resolved from a content store, which must not reach the backend).
    """
    attrs: dict[str, AttributeValue] = {
        A.MEMTRACE_ATTRIBUTION_CASE_ID: verdict.case_id,
        A.MEMTRACE_ATTRIBUTION_METHOD: verdict.method,
        A.MEMTRACE_ATTRIBUTION_CONFIDENCE: float(verdict.confidence),
        A.MEMTRACE_ATTRIBUTION_EVIDENCE_REFS: list(verdict.evidence_refs),
        A.GEN_AI_EVALUATION_EXPLANATION: textless_reason(verdict) if textless else verdict.reason,
        A.MEMTRACE_CASE_ID: verdict.case_id,
    }
    if verdict.error_type is not None:
        attrs[A.MEMTRACE_ATTRIBUTION_ERROR_TYPE] = verdict.error_type
    if verdict.op_id is not None:
        attrs[A.MEMTRACE_ATTRIBUTION_OP_ID] = verdict.op_id
    if verdict.op_name is not None:
        attrs[A.MEMTRACE_ATTRIBUTION_OP_NAME] = verdict.op_name
    if verdict.system is not None:
        attrs[A.MEMTRACE_SYSTEM] = verdict.system
    if verdict.store_id is not None:
        attrs[A.GEN_AI_MEMORY_STORE_ID] = verdict.store_id
    return attrs


def textless_reason(verdict: Verdict) -> str:
    """A verdict's reason without any text of the app: its label, op and evidence refs.

    >>> textless_reason(Verdict("c1", "UpdateError", "ab", "mem0.update", "evidence", 0.9, ("m:1@2",)))
    'UpdateError at mem0.update; evidence: m:1@2'
    """
    head = (
        f"{verdict.error_type} at {verdict.op_name or verdict.op_id}"
        if verdict.error_type
        else "abstained"
    )
    refs = ", ".join(verdict.evidence_refs[:20])
    return f"{head}; evidence: {refs}" if refs else head


def verdict_span_writer(
    provider: TracerProvider, *, textless: bool = False
) -> Callable[[Verdict], None]:
    """A callback that emits one verdict span per verdict through ``provider``."""
    from memtrace_otel import __version__

    tracer = provider.get_tracer("memtrace_otel.attribution", __version__)

    def write(verdict: Verdict) -> None:
        links = []
        if verdict.op_id and verdict.trace_id:
            culprit = SpanContext(
                int(verdict.trace_id, 16),
                int(verdict.op_id, 16),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            links.append(Link(culprit, {A.MEMTRACE_ATTRIBUTION_OP_ID: verdict.op_id}))
        span = tracer.start_span(
            A.MEMTRACE_ATTRIBUTION_SPAN,
            context=Context(),  # a new trace, not a child of whatever is current
            links=links,
            attributes=verdict_attributes(verdict, textless=textless),
        )
        span.end()

    return write


WRITE_BACK_BATCH = 512
"""Verdict spans per OTLP export request."""


@dataclass
class WriteBackResult:
    """What :func:`send_verdicts` did: the verdicts whose spans the endpoint accepted, how many
    it did not, and why."""

    sent: list[int] = field(default_factory=list)
    """Indexes (into the verdicts given) of the verdicts whose spans were accepted."""
    failed: int = 0
    error: str = ""


def otlp_target() -> tuple[str, str]:
    """The endpoint and protocol the SDK's exporters use, from the ``OTEL_*`` variables, as the
    SDK reads them: ``..._TRACES_ENDPOINT`` is used as is, ``OTEL_EXPORTER_OTLP_ENDPOINT`` gets
    ``/v1/traces`` over HTTP; ``..._TRACES_PROTOCOL`` wins over ``..._PROTOCOL``, default
    ``http/protobuf``."""
    protocol = next(
        (os.environ[v] for v in PROTOCOL_VARS if os.environ.get(v)), "http/protobuf"
    ).strip()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or ""
    if not endpoint and os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        endpoint = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
        if protocol != "grpc":
            endpoint = endpoint.rstrip("/") + "/v1/traces"
    return endpoint, protocol


def protocol_hint(endpoint: str, protocol: str) -> str:
    """A hint when the endpoint's port is the other protocol's well-known OTLP port."""
    port = urllib.parse.urlsplit(endpoint if "//" in endpoint else f"//{endpoint}").port
    if port == 4317 and protocol != "grpc":
        return "; port 4317 is OTLP/gRPC: set OTEL_EXPORTER_OTLP_PROTOCOL=grpc"
    if port == 4318 and protocol == "grpc":
        return "; port 4318 is OTLP/HTTP: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
    return ""


def send_verdicts(
    verdicts: Sequence[Verdict],
    exporter: SpanExporter,
    *,
    service_name: str = "memtrace-attribution",
    batch: int = WRITE_BACK_BATCH,
    textless: bool = False,
) -> WriteBackResult:
    """Export one verdict span per verdict through ``exporter``, synchronously, batch by batch,
    checking each batch's result (a background processor would drop failures silently).

    After the first batch the endpoint refuses (down, wrong protocol), the rest are not tried:
    they count as failed, and the caller retries them on its next run. ``textless``: reasons
    become refs and labels only (see :func:`textless_reason`).
    """
    result = WriteBackResult()
    collected = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({A.SERVICE_NAME: service_name}))
    provider.add_span_processor(SimpleSpanProcessor(collected))
    write = verdict_span_writer(provider, textless=textless)
    try:
        for start in range(0, len(verdicts), batch):
            chunk = verdicts[start : start + batch]
            collected.clear()
            for verdict in chunk:
                write(verdict)
            try:
                outcome = exporter.export(collected.get_finished_spans())
            except Exception as exc:  # an exporter bug must not lose the count
                outcome = SpanExportResult.FAILURE
                result.error = f"{type(exc).__name__}: {exc}"
            if outcome != SpanExportResult.SUCCESS:
                result.failed = len(verdicts) - start
                result.error = result.error or "the OTLP endpoint did not accept the spans"
                break
            result.sent.extend(range(start, start + len(chunk)))
    finally:
        provider.shutdown()
        exporter.shutdown()
    return result

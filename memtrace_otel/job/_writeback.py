"""Verdicts back into telemetry: one ``memtrace.attribution`` span per verdict, linked to the culprit.

:func:`send_verdicts` exports them synchronously and says which the endpoint accepted, so the
batch job can count failures and resend the rest on its next run.

By default (``trace="culprit"``) each verdict span is a child of the culprit op span: its parent
is remote, in the culprit's trace, so Jaeger and Tempo show the verdict inside the trace where the
fault happened, though that trace was exported long ago. It also links to the culprit (Jaeger shows
a FOLLOWS_FROM reference, Tempo a link), so readers that follow links alone still find it. With
``trace="new"`` each verdict span starts a trace of its own and only links to the culprit.

A Collector with tail sampling decides on these late spans again: its policy must keep them (the
project's ``collector_config/otelcol.yaml`` keeps every ``memtrace.attribution`` span). Later runs
of the batch job read them as verdicts, never as activity of the memory store (no op, no case, no
newer op for ``--redo-stale``).
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
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.util.types import AttributeValue

from memtrace_otel.attribution._model import Verdict
from memtrace_otel.job._options import VERDICT_TRACES
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv.env import OTLP_PROTOCOL_VARS


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


def culprit_context(verdict: Verdict) -> SpanContext | None:
    """The culprit op span's context (remote, sampled), when the verdict names a culprit by valid
    trace and span ids (an imported file's op ids are no span ids: no parent, no link)."""
    try:
        trace_id = int(verdict.trace_id or "", 16)
        span_id = int(verdict.op_id or "", 16)
    except ValueError:
        return None
    if (
        len(verdict.trace_id or "") != 32
        or len(verdict.op_id or "") != 16
        or not trace_id
        or not span_id
    ):
        return None
    return SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )


def verdict_span_writer(
    provider: TracerProvider, *, trace: str = "culprit", textless: bool = False
) -> Callable[[Verdict], None]:
    """A callback that emits one verdict span per verdict through ``provider``.

    Args:
        provider: the tracer provider the spans go through.
        trace: ``"culprit"``: the span is a child of the culprit op span (a remote parent in the
            culprit's trace), linked to it as well; ``"new"``: a trace of its own, linked only.
        textless: reasons become refs and labels only (see :func:`textless_reason`).

    Raises:
        ValueError: ``trace`` is neither ``"culprit"`` nor ``"new"``.
    """
    from memtrace_otel import __version__

    if trace not in VERDICT_TRACES:
        raise ValueError(f"trace={trace!r}: expected one of {', '.join(VERDICT_TRACES)}")
    tracer = provider.get_tracer("memtrace_otel.attribution", __version__)

    def write(verdict: Verdict) -> None:
        links = []
        context = Context()  # never a child of whatever is current
        culprit = culprit_context(verdict)
        if culprit is not None:
            links.append(Link(culprit, {A.MEMTRACE_ATTRIBUTION_OP_ID: verdict.op_id or ""}))
            if trace == "culprit":
                context = set_span_in_context(NonRecordingSpan(culprit), context)
        span = tracer.start_span(
            A.MEMTRACE_ATTRIBUTION_SPAN,
            context=context,
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
        (os.environ[v] for v in OTLP_PROTOCOL_VARS if os.environ.get(v)), "http/protobuf"
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
    trace: str = "culprit",
    textless: bool = False,
) -> WriteBackResult:
    """Export one verdict span per verdict through ``exporter``, synchronously, batch by batch,
    checking each batch's result (a background processor would drop failures silently).
    ``trace`` says where the spans go (see :func:`verdict_span_writer`).

    After the first batch the endpoint refuses (down, wrong protocol), the rest are not tried:
    they count as failed, and the caller retries them on its next run. ``textless``: reasons
    become refs and labels only (see :func:`textless_reason`).
    """
    result = WriteBackResult()
    collected = InMemorySpanExporter()
    provider = TracerProvider(  # every verdict leaves, whatever OTEL_TRACES_SAMPLER says
        resource=Resource.create({A.SERVICE_NAME: service_name}), sampler=ALWAYS_ON
    )
    provider.add_span_processor(SimpleSpanProcessor(collected))
    try:
        write = verdict_span_writer(provider, trace=trace, textless=textless)
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

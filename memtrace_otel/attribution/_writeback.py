"""Verdicts back into telemetry: one ``memtrace.attribution`` span per verdict, linked to the culprit.

Each verdict span starts a new trace (the culprit's trace is finished and exported long ago) and
links to the culprit op span, so Jaeger shows it as a FOLLOWS_FROM reference and Tempo as a link.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue

from memtrace_otel.attribution._model import Verdict
from memtrace_otel.semconv import attributes as A


def verdict_attributes(verdict: Verdict) -> dict[str, AttributeValue]:
    """The ``memtrace.attribution.*`` attributes of a verdict span."""
    attrs: dict[str, AttributeValue] = {
        A.MEMTRACE_ATTRIBUTION_CASE_ID: verdict.case_id,
        A.MEMTRACE_ATTRIBUTION_METHOD: verdict.method,
        A.MEMTRACE_ATTRIBUTION_CONFIDENCE: float(verdict.confidence),
        A.MEMTRACE_ATTRIBUTION_EVIDENCE_REFS: list(verdict.evidence_refs),
        A.GEN_AI_EVALUATION_EXPLANATION: verdict.reason,
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


def verdict_span_writer(provider: TracerProvider) -> Callable[[Verdict], None]:
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
            attributes=verdict_attributes(verdict),
        )
        span.end()

    return write

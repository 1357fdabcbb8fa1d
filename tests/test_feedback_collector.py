"""Through the real Collector (``otelcol.yaml``, 0 % baseline share): an answer nobody judged is
kept until feedback comes, the feedback span follows it into the files, and ``memtrace attribute``
on the Collector's files finds the failed case with no cases file."""

from __future__ import annotations

import json
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.cli import main
from memtrace_otel.instrumentation import (
    AnswerRef,
    CaptureConfig,
    MemTracer,
    WriterRegistry,
    last_answer,
    send_feedback,
)
from tests._backends import (  # noqa: F401  (fixtures)
    CollectorServer,
    collector,
    jaeger,
    jaeger_bin,
    otelcol_bin,
)
from tests._pipeline import run_case


def test_unjudged_answers_wait_for_feedback_in_the_collector(
    collector: CollectorServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"{collector.otlp_http_url}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    answers: dict[str, AnswerRef] = {}
    for fault in ("deletion", "none"):
        mt = MemTracer(
            tracer_provider=provider,
            system="test",
            store_id=f"collector-{fault}",
            capture=CaptureConfig(mode="SPAN_AND_EVENT"),
            registry=WriterRegistry(),
        )
        run_case(mt, provider.get_tracer("test"), f"collector-{fault}", fault, judge=False)
        found = last_answer()
        assert found is not None
        answers[fault] = found
    time.sleep(2)  # past the 1 s decision wait: the feedback comes after the sampler decided
    feedback = send_feedback(
        answers["deletion"].traceparent, correct=False, tracer_provider=provider
    )
    assert feedback is not None
    provider.shutdown()

    spans = collector.wait_for_file_spans({f"{feedback.span_id:016x}"})
    kept = {s["traceId"] for s in spans}
    # both answers were kept although nobody judged them, with a 0 % baseline share
    assert {a.traceparent.split("-")[1] for a in answers.values()} <= kept

    out = tmp_path / "verdicts.jsonl"
    files = [str(p) for p in collector.traces_files()]
    assert main(["attribute", *files, "--out", str(out), "--quiet"]) == 0
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert [v["case_id"] for v in verdicts] == ["collector-deletion"]

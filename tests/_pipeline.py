"""A tiny hand-written memory pipeline with one planted fault, for attribution tests.

Each case stores two facts for one user and asks about the first; ``fault`` plants the failure the
verdict must name. The spans go through the real SDK into an OTLP JSON Lines file.
"""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Tracer

from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import (
    AnswerRef,
    CaptureConfig,
    MemTracer,
    Variable,
    WriterRegistry,
    last_answer,
)

FAULTS = ("extraction", "update", "deletion", "retrieval", "filter", "assemble", "response", "none")
EXPECTED = {
    "extraction": ("ExtractionError", "test.extract_facts"),
    "update": ("UpdateError", "test.merge"),
    "deletion": ("DeletionError", "test.forget"),
    "retrieval": ("RetrievalError", "test.search"),
    "filter": ("RetrievalError", "test.rerank"),
    "assemble": ("ResponseError", "test.build_context"),
    "response": ("ResponseError", "test.answer"),
}


def run_case(
    mt: MemTracer, tracer: Tracer, case_id: str, fault: str, *, judge: bool = True
) -> dict[str, object]:
    """Run one user's pipeline; returns the case's cases-file entry."""
    evidence = mt.variable(
        f"msg:{case_id}:1", "My sister Ana moved to Porto last May.", category="message"
    )
    other = mt.variable(
        f"msg:{case_id}:2", "I love hiking in the mountains on weekends.", category="message"
    )
    records: dict[str, Variable] = {}
    for msg, fact_text in ((evidence, "Ana lives in Porto"), (other, "User likes hiking")):
        with mt.ingest("test.ingest", inputs=[msg]) as ingest:
            if fault == "extraction" and msg is evidence:
                fact_text = "User has a sister named Ana"
            with mt.extract("test.extract_facts", inputs=[msg]) as op:
                fact = op.output(
                    mt.variable(
                        f"fact:{msg.id}",
                        fact_text,
                        category="memory",
                        meta={"source_refs": [msg.ref]},
                    )
                )
            with mt.create("test.add", inputs=[fact]) as op:
                rec = op.output(
                    mt.variable(
                        f"mem:{msg.id}",
                        fact_text,
                        category="memory",
                        meta={"source_refs": [msg.ref]},
                    )
                )
            records[msg.ref] = rec
        del ingest
    key = evidence.ref
    if fault == "update":
        with mt.update("test.merge", inputs=[records[key]]) as op:
            records[key] = op.output(records[key].next("Ana lives abroad"))
    if fault == "deletion":
        with mt.delete("test.forget", inputs=[records[key]]) as op:
            op.output(records[key].tombstone())
        del records[key]
    question = mt.variable(f"query:{case_id}", "Where does Ana live?", category="query")
    gold = mt.variable(f"gold:{case_id}", ["Porto"], category="gold")
    # A plain (non-op) parent span groups the question's ops, as a web request span would.
    with tracer.start_as_current_span("POST /answer"):
        with mt.retrieve(
            "test.search", inputs=[question, *records.values()], case_id=case_id
        ) as op:
            hits = [
                r
                for r in records.values()
                if fault != "retrieval" or r.ref != records.get(key, r).ref
            ]
            if fault == "retrieval":
                hits = [r for r in records.values() if "hiking" in r.value]
            cands = op.output(
                mt.variable(
                    f"cands:{case_id}",
                    [{"ref": r.ref, "text": r.value} for r in hits],
                    category="candidates",
                )
            )
        with mt.filter("test.rerank", inputs=[cands], case_id=case_id) as op:
            kept = [c for c in cands.value if not (fault == "filter" and "Porto" in c["text"])]
            kept_var = op.output(mt.variable(f"kept:{case_id}", kept, category="candidates"))
        with mt.assemble("test.build_context", inputs=[kept_var], case_id=case_id) as op:
            texts = [
                c["text"]
                for c in kept_var.value
                if not (fault == "assemble" and "Porto" in c["text"])
            ]
            ctx = op.output(mt.variable(f"ctx:{case_id}", "\n".join(texts), category="context"))
        with mt.generate("test.answer", inputs=[ctx, question], case_id=case_id) as op:
            answer = (
                "Porto"
                if fault == "none"
                else ("Lisbon" if fault == "response" else "I don't know")
            )
            pred = op.output(mt.variable(f"pred:{case_id}", answer, category="prediction"))
        if not judge:  # production: no judge, failures come from feedback
            return {
                "case_id": case_id,
                "question": "Where does Ana live?",
                "gold_answers": ["Porto"],
            }
        with mt.judge("test.judge", inputs=[pred, gold], case_id=case_id) as op:
            ok = answer == "Porto"
            op.set_verdict(ok)
            op.output(mt.variable(f"score:{case_id}", int(ok), category="score"))
    return {
        "case_id": case_id,
        "question": "Where does Ana live?",
        "gold_answers": ["Porto"],
        "evidence_refs": [evidence.ref],
    }


def write_workload(
    folder: Path,
    *,
    capture: str | CaptureConfig = "SPAN_AND_EVENT",
    faults: tuple[str, ...] = FAULTS,
    judge: bool = True,
    answers: dict[str, AnswerRef] | None = None,
) -> tuple[Path, Path]:
    """Traces and a cases file: one store (user) per fault (``capture``: a mode or a config).

    ``judge=False`` leaves out the judge ops (as in production); ``answers`` collects each
    fault's answer (case id and traceparent, from :func:`last_answer`).
    """
    traces, cases = folder / "traces.jsonl", folder / "cases.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(traces)))
    entries = []
    for fault in faults:
        mt = MemTracer(
            tracer_provider=provider,
            system="test",
            store_id=f"user-{fault}",
            capture=capture if isinstance(capture, CaptureConfig) else CaptureConfig(mode=capture),
            registry=WriterRegistry(),
        )
        entries.append(
            run_case(mt, provider.get_tracer("test"), f"case-{fault}", fault, judge=judge)
        )
        found = last_answer()
        if answers is not None and found is not None:
            answers[fault] = found
    provider.shutdown()
    cases.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return traces, cases

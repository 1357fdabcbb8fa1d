"""``memtrace bench generate --difficulty hard``: run the hard scenarios, label, and write files.

Each store's original run is traced through the manual API (real OTel SDK spans, contract v0.2),
with *noise*: spans of other services in the same traces (an LLM gateway's chat calls, a vector
database's queries, an embeddings HTTP call, a queue publish), and a few unrelated traces (health
checks). The exported lines are then *batched* (several spans per line, as a Collector writes
them), some batches are *exported twice* (a retried export: the same spans again, later in the
file), and some lines are *moved* (out of order). Everything is seeded.
"""

from __future__ import annotations

import io
import json
import os
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Tracer

from memtrace_bench.systems._hard import OpExec, Rec, Run, Scenario, judged
from memtrace_bench.systems._hard_replay import label_hard_case
from memtrace_bench.systems._hard_scenarios import build_scenario
from memtrace_bench.systems._hard_systems import execute
from memtrace_bench.systems._locomo import load_locomo
from memtrace_bench.systems._replay import SYSTEMS
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, Variable, WriterRegistry
from memtrace_otel.semconv import ERROR_TYPE_BY_KIND, Category, OpKind
from memtrace_otel.semconv import attributes as A

HARD_STORES = 100
"""Stores per system at full size (one targeted failure and two or three controls each)."""

# Spans other services add to the same traces. These are upstream OTel names (HTTP, database,
# messaging, GenAI client) describing *their* spans, not memtrace's; kept here as one table.
_NOISE: Mapping[str, tuple[str, str, SpanKind, dict[str, Any]]] = {
    "llm": ("llm-gateway", "chat gpt-4o-mini", SpanKind.CLIENT, {
        A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_PROVIDER_NAME: "openai",
        A.GEN_AI_REQUEST_MODEL: "gpt-4o-mini", A.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini-2024-07-18",
    }),
    "db": ("vector-db", "SELECT memories", SpanKind.CLIENT, {
        "db.system.name": "postgresql", "db.operation.name": "SELECT",
        "db.collection.name": "memories",
        "db.query.text": "SELECT id, text FROM memories WHERE store_id = $1 "
                         "ORDER BY embedding <-> $2 LIMIT $3",
    }),
    "http": ("embeddings-api", "POST /v1/embeddings", SpanKind.CLIENT, {
        "http.request.method": "POST", "url.full": "http://embeddings.internal/v1/embeddings",
        "http.response.status_code": 200, "server.address": "embeddings.internal",
    }),
    "queue": ("event-bus", "memory-events publish", SpanKind.PRODUCER, {
        "messaging.system": "kafka", "messaging.destination.name": "memory-events",
        "messaging.operation.type": "send",
    }),
}  # fmt: skip


_PROMPT_OF = {
    "mem0.fact_extraction": "fact_extraction",
    "mem0.add": "update_decision",
    "mem0.update": "update_decision",
    "mem0.delete": "update_decision",
    "evermemos.boundary_detection": "boundary",
    "evermemos.memcell_extraction": "memcell",
    "evermemos.profile_update": "profile",
    "evermemos.sufficiency_check": "sufficiency",
}
"""The reference systems' prompt templates the hard ops use (every ``*.answer`` uses ``answer``)."""

MODEL = "gpt-4o-mini"
"""``gen_ai.request.model`` of the LLM-backed ops."""


@dataclass
class HardSummary:
    """Counts of one hard generation (also the manifest's ``summary``)."""

    out_dir: Path
    stores: int = 0
    cases: Counter[str] = field(default_factory=Counter)
    labels: Counter[str] = field(default_factory=Counter)
    phenomena: Counter[str] = field(default_factory=Counter)
    trace: Counter[str] = field(default_factory=Counter)
    excluded: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A plain dict."""
        return {
            "stores": self.stores,
            "cases": dict(sorted(self.cases.items())),
            "labels": dict(sorted(self.labels.items())),
            "phenomena": dict(sorted(self.phenomena.items())),
            "trace": dict(sorted(self.trace.items())),
            "excluded": len(self.excluded),
            "seconds": round(self.seconds, 2),
        }

    def table(self) -> str:
        """Failed, labelled and excluded cases per system, and the trace phenomena."""
        rows = [f"{'system':<13} {'cases':>6} {'correct':>8} {'labelled':>9} {'excluded':>9}"]
        for system in SYSTEMS:
            if not self.cases[f"{system}:all"]:
                continue
            rows.append(
                f"{system:<13} {self.cases[f'{system}:all']:>6} "
                f"{self.cases[f'{system}:correct']:>8} {self.cases[f'{system}:labelled']:>9} "
                f"{self.cases[f'{system}:excluded']:>9}"
            )
        trace = ", ".join(f"{k}={v}" for k, v in sorted(self.trace.items()))
        rows.append(f"trace: {trace}")
        rows.append(f"{self.stores} stores in {self.seconds:.1f}s -> {self.out_dir}")
        return "\n".join(rows)


def generate_hard_benchmark(
    out_dir: str | os.PathLike[str],
    *,
    stores: int = HARD_STORES,
    seed: int = 0,
    systems: Sequence[str] = tuple(SYSTEMS),
    locomo_path: str | os.PathLike[str] | None = None,
    progress: IO[str] | None = None,
) -> HardSummary:
    """Generate the hard benchmark into ``out_dir`` (``stores`` stores per system).

    Raises:
        ValueError: ``stores`` below 1 or an unknown system.
        DecodeError: LoCoMo cannot be read (it is the conversations' source).
        FileNotFoundError: LoCoMo is missing.
    """
    if stores < 1:
        raise ValueError(f"stores must be at least 1, got {stores}")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system(s) {', '.join(unknown)}: expected {', '.join(SYSTEMS)}")
    conversations = load_locomo(locomo_path).conversations
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = HardSummary(out)
    started = time.perf_counter()
    buffer = io.StringIO()
    exporter = OtlpJsonLinesExporter(stream=buffer)
    registry = WriterRegistry()
    capture = CaptureConfig(mode="SPAN_AND_EVENT", max_value_length=16384)
    ids = _SeededIds(random.Random(f"hard-ids:{seed}"))
    providers = {name: _provider(name, exporter, ids) for name in ("memory", *_NOISE)}
    tracers = {name: p.get_tracer("noise") for name, p in providers.items() if name != "memory"}
    cases_rows: list[dict[str, Any]] = []
    label_rows: list[dict[str, Any]] = []
    fault_rows: list[dict[str, Any]] = []
    rng = random.Random(f"hard-noise:{seed}")
    try:
        for system in systems:
            setup = MemTracer(
                tracer_provider=providers["memory"], system=system, capture=capture,
                registry=registry,
            )  # fmt: skip
            prompts = SYSTEMS[system].trace_prompts(setup)
            for index in range(stores):
                sc = build_scenario(system, index, conversations, seed)
                run = execute(sc)
                mt = MemTracer(
                    tracer_provider=providers["memory"], system=system, store_id=sc.store_id,
                    capture=capture, registry=registry,
                )  # fmt: skip
                span_ids = _emit(run, mt, tracers, rng, summary, prompts)
                _rows(sc, run, span_ids, summary, cases_rows, label_rows, fault_rows)
                summary.stores += 1
                if progress is not None and (index + 1) % 10 == 0:
                    progress.write(
                        f"bench generate --difficulty hard: {system} {index + 1}/{stores}\n"
                    )
                    progress.flush()
        _health_checks(tracers["http"], rng, max(2, summary.stores // 10), summary)
    finally:
        for provider in providers.values():
            provider.force_flush()
            provider.shutdown()
    lines = _disorder(buffer.getvalue().splitlines(), rng, summary)
    (out / "traces.jsonl").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    _write_jsonl(out / "cases.jsonl", cases_rows)
    _write_jsonl(out / "labels.jsonl", label_rows)
    _write_jsonl(out / "faults.jsonl", fault_rows)
    summary.seconds = time.perf_counter() - started
    manifest = {
        "difficulty": "hard",
        "workload": "locomo (hard scenarios)",
        "seed": seed,
        "stores_per_system": stores,
        "systems": list(systems),
        "summary": summary.to_json(),
        "excluded_cases": summary.excluded,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return summary


class _SeededIds(IdGenerator):
    """Span and trace ids from a seeded generator, so a seed gives the same ids (and labels)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def generate_span_id(self) -> int:
        return self.rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self.rng.getrandbits(128) or 1


def _provider(name: str, exporter: OtlpJsonLinesExporter, ids: IdGenerator) -> TracerProvider:
    service = "memory-service" if name == "memory" else _NOISE[name][0]
    provider = TracerProvider(resource=Resource.create({A.SERVICE_NAME: service}), id_generator=ids)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


# --- spans -------------------------------------------------------------------------------------
def variable(rec: Rec, sc: Scenario, history: Mapping[str, Rec]) -> Variable:
    """A hard record as a contract variable (value, category, meta)."""
    value: Any
    if rec.raw is not None:
        value = rec.raw
    elif rec.category in (Category.CANDIDATES, Category.OTHER):
        value = [{"ref": ref, "text": _text(history.get(ref))} for ref in rec.items]
    else:
        value = rec.text
    meta: dict[str, Any] | None = None
    if rec.category is Category.MESSAGE:
        dia = rec.id.rsplit(":", 2)
        meta = {"dia_id": f"{dia[-2]}:{dia[-1]}", "date": rec.date}
    elif rec.category in (Category.MEMORY, Category.CONTEXT, Category.CANDIDATES):
        refs = sorted({r for line in rec.lines for r in line.refs})
        if sc.config.get("no_source_refs"):
            refs = []  # like most production memory stores: records do not know their messages
        meta = {"date": rec.date} if rec.date else {}
        if refs:
            meta["source_refs"] = refs
        meta = meta or None
    return Variable(rec.id, rec.version, value, rec.category, meta, rec.deleted)


def _text(rec: Rec | None) -> str:
    return rec.text if rec is not None else ""


def _emit(
    run: Run, mt: MemTracer, noise: Mapping[str, Tracer], rng: random.Random,
    summary: HardSummary, prompts: Mapping[str, Variable],
) -> dict[int, str]:  # fmt: skip
    """Trace a run: one trace per root op, its children nested, noise spans under some ops."""
    sc = run.sc
    span_ids: dict[int, str] = {}
    log = run.log
    i = 0
    while i < len(log):
        root = log[i]
        children = []
        j = i + 1
        while j < len(log) and log[j].parent == root.seq:
            children.append(log[j])
            j += 1
        with mt.op(root.kind, root.name, case_id=root.case_id) as rop:
            for rec in root.outputs:
                rop.output(variable(rec, sc, run.history))
            span_ids[root.seq] = _span_id(rop)
            for op in children:
                span_ids[op.seq] = _child(op, mt, noise, rng, summary, run, prompts)
        i = j
    return span_ids


def _child(
    op: OpExec, mt: MemTracer, noise: Mapping[str, Tracer], rng: random.Random,
    summary: HardSummary, run: Run, prompts: Mapping[str, Variable],
) -> str:  # fmt: skip
    attrs = {k: v for k, v in op.attributes.items() if k != "verdict"}
    key = "answer" if op.kind is OpKind.GENERATE else _PROMPT_OF.get(op.name)
    prompt = prompts.get(key) if key is not None else None
    if prompt is not None or "llm" in op.noise:
        attrs[A.GEN_AI_REQUEST_MODEL] = MODEL
    inputs = [variable(rec, run.sc, run.history) for rec in op.inputs]
    if op.kind is OpKind.RETRIEVE and op.case_id is not None:
        summary.trace["retrieve_ops"] += 1
        if all(rec.category is not Category.MEMORY for rec in op.inputs):
            summary.trace["retrieve_ops_query_only"] += 1
    with mt.op(
        op.kind, op.name, inputs=inputs, case_id=op.case_id, stage=op.stage, prompt=prompt,
        attributes=attrs or None,
    ) as span:  # fmt: skip
        for kind in op.noise:
            if rng.random() < 0.6:
                _service, name, span_kind, extra = _NOISE[kind]
                with noise[kind].start_as_current_span(name, kind=span_kind, attributes=extra) as s:
                    if kind == "llm":
                        s.set_attribute(A.GEN_AI_USAGE_INPUT_TOKENS, rng.randint(200, 1800))
                        s.set_attribute(A.GEN_AI_USAGE_OUTPUT_TOKENS, rng.randint(5, 120))
                summary.trace[f"noise_{kind}_spans"] += 1
        for rec in op.outputs:
            span.output(variable(rec, run.sc, run.history))
        if op.kind is OpKind.JUDGE:
            span.set_verdict(bool(op.attributes.get("verdict")))
        return _span_id(span)


def _span_id(op: Any) -> str:
    return format(op.span.get_span_context().span_id, "016x")


def _health_checks(tracer: Tracer, rng: random.Random, n: int, summary: HardSummary) -> None:
    """Unrelated traces: health checks of the embeddings API."""
    for _ in range(n):
        with tracer.start_as_current_span("GET /healthz", kind=SpanKind.SERVER) as span:
            span.set_attribute("http.request.method", "GET")
            span.set_attribute("http.response.status_code", 200)
            span.set_attribute("http.route", "/healthz")
        summary.trace["noise_unrelated_traces"] += 1


def _disorder(lines: list[str], rng: random.Random, summary: HardSummary) -> list[str]:
    """Batch span lines (1-12 spans per line), export some batches twice (later), move some."""
    batches: list[str] = []
    i = 0
    while i < len(lines):
        size = rng.randint(1, 12)
        group = [json.loads(x) for x in lines[i : i + size]]
        merged = {"resourceSpans": [rs for g in group for rs in g["resourceSpans"]]}
        batches.append(json.dumps(merged, separators=(",", ":"), ensure_ascii=False))
        i += size
    out = list(batches)
    for batch in batches:
        if rng.random() < 0.05:  # a retried export: the same batch again, a little later
            spans = batch.count('"spanId"')
            position = min(len(out), out.index(batch) + rng.randint(1, 40))
            out.insert(position, batch)
            summary.trace["duplicate_lines"] += 1
            summary.trace["duplicate_spans"] += spans
    moved = 0
    for _ in range(max(1, len(out) // 12)):
        a = rng.randrange(len(out))
        b = min(len(out) - 1, max(0, a + rng.randint(-60, 60)))
        if a != b:
            out.insert(b, out.pop(a))
            moved += 1
    summary.trace["moved_lines"] = moved
    summary.trace["lines"] = len(out)
    return out


def _survived_a_branch(sc: Scenario, case: Any, op: OpExec) -> bool:
    """Whether the case's content passed an op that looks like a loss but was not decisive: rag's
    buffer reset after the chunk took the content; EverMemOS's episode, which leaves stable
    attributes to the profile."""
    if sc.system == "rag":
        return op.name not in ("rag.buffer_update", "rag.chunk")
    if sc.system == "evermemos":
        relations = {t.rsplit(".", 1)[-1] for t in case.chain}
        return bool(relations & {"city", "job", "sister", "team"}) and op.name != (
            "evermemos.memcell_extraction"
        )
    return False


# --- rows --------------------------------------------------------------------------------------
def _rows(
    sc: Scenario, run: Run, span_ids: Mapping[int, str], summary: HardSummary,
    cases_rows: list[dict[str, Any]], label_rows: list[dict[str, Any]],
    fault_rows: list[dict[str, Any]],
) -> None:  # fmt: skip
    system = sc.system
    for op in run.log:
        if op.fault is not None:
            fault_rows.append(
                {"system": system, "store_id": sc.store_id, "op_id": span_ids[op.seq],
                 "op_name": op.name, "op_kind": op.kind.value, "fault": op.fault,
                 "case_id": op.case_id}
            )  # fmt: skip
    messages = {t.dia_id: t.text for s in sc.sessions for t in s.turns}
    for case in sc.cases:
        case_id = f"{sc.store_id}:{case.qid}"
        prediction = run.predictions[case.qid]
        correct = judged(prediction, case)
        summary.cases[f"{system}:all"] += 1
        row = {
            "case_id": case_id,
            "question": case.question,
            "gold_answers": [case.gold],
            "evidence_refs": [sc.turn_ref(d) for d in case.evidence],
            "verdict": "correct" if correct else "incorrect",
            "prediction": prediction,
            "system": system,
            "store_id": sc.store_id,
            "conversation": sc.conv_id,
            "category": case.category,
        }
        phenomena = list(case.phenomena)
        gold = case.gold.lower()
        if case.intended is not None and all(
            gold not in messages[d].lower() for d in case.evidence
        ):
            if "paraphrase" not in phenomena:
                phenomena.append("paraphrase")
        elif "paraphrase" in phenomena:
            phenomena.remove("paraphrase")
        if correct:
            summary.cases[f"{system}:correct"] += 1
            cases_rows.append(row)
            continue
        verdict = label_hard_case(sc, run, case)
        if verdict.op is None:
            summary.cases[f"{system}:excluded"] += 1
            summary.excluded.append(
                {"case_id": case_id, "system": system, "reason": verdict.excluded,
                 "recipe": sc.phenomena[0]}
            )  # fmt: skip
            continue
        op = verdict.op
        error = ERROR_TYPE_BY_KIND[op.kind]
        assert error is not None
        summary.cases[f"{system}:labelled"] += 1
        summary.labels[f"{system}:{error.value}"] += 1
        tags = [*phenomena, *(m for m in sc.phenomena[1:] if m != "consolidation_kept")]
        if _survived_a_branch(sc, case, op):
            tags.append("branch_survival")
        if op.kind is OpKind.RETRIEVE and sc.config.get("query_only"):
            tags.append("stored_not_listed")
        if not case.meant(op.uid):
            tags.append("natural" if case.intended is None else "replay_moved_culprit")
        for tag in dict.fromkeys(tags):
            summary.phenomena[f"{system}:{tag}"] += 1
            summary.phenomena[tag] += 1
        cases_rows.append(row)
        label_rows.append(
            {
                "case_id": case_id,
                "error_type": error.value,
                "op_id": span_ids[op.seq],
                "op_name": op.name,
                "source": "injected" if op.fault is not None else "counterfactual",
                "system": system,
                "op_kind": op.kind.value,
                "op_index": op.seq,
                "fault": op.fault,
                "op_inputs": [r.ref for r in op.inputs],
                "op_outputs": [r.ref for r in op.outputs],
                "replays": verdict.replays,
                "method": verdict.method,
                "reason": "correcting this op (later ops ideal) makes the answer right; "
                "with it as it ran, no later op can",
                "phenomena": list(dict.fromkeys(tags)),
                "recipe": sc.phenomena[0],
            }
        )

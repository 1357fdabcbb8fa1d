"""``memtrace bench generate``: run the systems, write traces, cases and ground-truth labels.

Output directory:

- ``traces.jsonl``: OTLP JSON Lines (the Collector file exporter's format), every op of every
  system, content captured;
- ``cases.jsonl``: one row per question per system (contract section 5: ``case_id``,
  ``question``, ``gold_answers``, ``evidence_refs``, ``verdict``; plus ``system``, ``store_id``,
  ``category``, ``prediction``);
- ``labels.jsonl``: one row per failed case: ``case_id``, ``error_type``, ``op_id`` (the span id
  of the decisive op), ``op_name``, ``source`` (``injected`` or ``counterfactual``), plus details;
  labels never go into the traces;
- ``faults.jsonl``: every injected fault (op id, name, fault), decisive or not;
- ``manifest.json``: the arguments and the summary.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_bench.systems._base import Judge, make_config, turn_ref
from memtrace_bench.systems._engine import OfflineEngine
from memtrace_bench.systems._faults import FaultSpec
from memtrace_bench.systems._judge import LLM_JUDGE_PROMPT, DeterministicJudge, LLMJudge
from memtrace_bench.systems._protocol import Engine
from memtrace_bench.systems._replay import (
    SYSTEMS,
    ConversationRun,
    label_case,
    resolve_systems,
    run_conversation,
)
from memtrace_bench.systems._workload import Workload, generate_workload
from memtrace_otel._progress import Progress
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.semconv import attributes as A

TRACES_FILE = "traces.jsonl"
CASES_FILE = "cases.jsonl"
LABELS_FILE = "labels.jsonl"
FAULTS_FILE = "faults.jsonl"
MANIFEST_FILE = "manifest.json"


@dataclass
class SystemSummary:
    """Counts of one system's run."""

    cases: int = 0
    correct: int = 0
    failures: int = 0
    labels: Counter[str] = field(default_factory=Counter)
    sources: Counter[str] = field(default_factory=Counter)
    injected_faults: int = 0
    seconds: float = 0.0

    @property
    def accuracy(self) -> float:
        """Share of questions answered right."""
        return self.correct / self.cases if self.cases else 0.0

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the manifest."""
        return {
            "cases": self.cases,
            "correct": self.correct,
            "accuracy": round(self.accuracy, 4),
            "failures": self.failures,
            "labels": dict(sorted(self.labels.items())),
            "sources": dict(sorted(self.sources.items())),
            "injected_faults": self.injected_faults,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class BenchSummary:
    """What ``generate_benchmark`` wrote."""

    out_dir: Path
    systems: dict[str, SystemSummary]
    seconds: float
    spans: int

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the manifest."""
        return {
            "systems": {k: v.to_json() for k, v in self.systems.items()},
            "seconds": round(self.seconds, 3),
            "spans": self.spans,
        }

    def table(self) -> str:
        """A small text table: answer accuracy (the share of questions a system answered right:
        not attribution's accuracy), failures and their labels per system."""
        rows = [f"{'system':<13} {'answer accuracy':>15} {'failures':>8}  labels"]
        for name, s in self.systems.items():
            labels = ", ".join(f"{k}={v}" for k, v in sorted(s.labels.items())) or "-"
            rows.append(f"{name:<13} {s.accuracy:>15.3f} {s.failures:>8}  {labels}")
        rows.append(f"{self.spans} spans in {self.seconds:.1f}s -> {self.out_dir}")
        return "\n".join(rows)


class _CountingExporter(OtlpJsonLinesExporter):
    spans = 0

    def export(self, spans: Sequence[Any]) -> Any:
        self.spans += len(spans)
        return super().export(spans)


def generate_benchmark(
    out_dir: str | os.PathLike[str],
    *,
    workload: Workload,
    systems: Sequence[str] | str = "all",
    seed: int = 0,
    faults: FaultSpec | str | None = None,
    engine: Engine | None = None,
    judge: str = "deterministic",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: IO[str] | None = None,
    extra_processors: Sequence[SpanProcessor] = (),
) -> BenchSummary:
    """Run the systems over the workload and write the benchmark files into ``out_dir``.

    Args:
        out_dir: created if missing; the files it writes are replaced.
        workload: the conversations and questions.
        systems: names (or ``all``).
        seed: fault decisions derive from it.
        faults: a :class:`FaultSpec` or its text (``none``, ``all=0.1``, ``drop_fact=0.3,...``).
        engine: the model (default: offline).
        judge: ``deterministic`` or ``llm`` (the engine with the LoCoMo-style prompt).
        options: config overrides per system (``{"rag": {"top_k": 5}}``).
        progress: where the progress bar goes (``None``: nowhere).
        extra_processors: more span processors, e.g. a ``BatchSpanProcessor`` exporting over
            OTLP to a Collector as well as to ``traces.jsonl``; shut down with the provider.

    Raises:
        ValueError: an unknown system, fault, judge or option.
        EngineUnavailableError: the model endpoint failed.
    """
    names = resolve_systems(systems)
    spec = FaultSpec.parse(faults) if isinstance(faults, str) or faults is None else faults
    if judge not in ("deterministic", "llm"):
        raise ValueError(f"unknown judge {judge!r}: expected deterministic or llm")
    unknown = set(options or {}) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"options for unknown system(s): {', '.join(sorted(unknown))}")
    for name, values in (options or {}).items():
        make_config(SYSTEMS[name].config_class, values)  # fail before any work
    engine = engine or OfflineEngine()
    judge_impl: Judge = LLMJudge(engine) if judge == "llm" else DeterministicJudge()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in (TRACES_FILE, CASES_FILE, LABELS_FILE, FAULTS_FILE, MANIFEST_FILE):
        (out / name).unlink(missing_ok=True)

    exporter = _CountingExporter(out / TRACES_FILE)
    provider = TracerProvider(resource=Resource.create({A.SERVICE_NAME: "memtrace-bench"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for processor in extra_processors:
        provider.add_span_processor(processor)
    registry = WriterRegistry()
    capture = CaptureConfig(mode="SPAN_AND_EVENT", max_value_length=16384)
    started = time.perf_counter()
    summaries: dict[str, SystemSummary] = {}
    total = len(names) * len(workload.conversations)
    bar = Progress(progress, "bench generate", total=total, unit="conversation")
    try:
        with (
            (out / CASES_FILE).open("w", encoding="utf-8") as cases_f,
            (out / LABELS_FILE).open("w", encoding="utf-8") as labels_f,
            (out / FAULTS_FILE).open("w", encoding="utf-8") as faults_f,
        ):
            for name in names:
                summary = summaries[name] = SystemSummary()
                t0 = time.perf_counter()
                setup = MemTracer(
                    tracer_provider=provider, system=name, capture=capture, registry=registry
                )
                overrides = {"judge": LLM_JUDGE_PROMPT} if judge == "llm" else None
                prompts = SYSTEMS[name].trace_prompts(setup, overrides)
                for conv in workload.conversations:
                    store = f"{name}:{conv.conv_id}"
                    tracer = MemTracer(
                        tracer_provider=provider,
                        system=name,
                        store_id=store,
                        capture=capture,
                        registry=registry,
                    )
                    run = run_conversation(
                        name,
                        conv,
                        engine=engine,
                        tracer=tracer,
                        judge=judge_impl,
                        faults=spec,
                        seed=seed,
                        prompt_vars=prompts,
                        options=(options or {}).get(name),
                    )
                    _write_run(run, summary, cases_f, labels_f, faults_f)
                    bar.update(1, f"{name} {conv.conv_id} ({summary.failures} failures)")
                summary.seconds = time.perf_counter() - t0
    finally:
        bar.close()
        provider.force_flush()
        provider.shutdown()
    result = BenchSummary(out, summaries, time.perf_counter() - started, exporter.spans)
    manifest = {
        "workload": workload.name,
        "conversations": len(workload.conversations),
        "systems": names,
        "seed": seed,
        "faults": spec.describe(),
        "engine": engine.name,
        "model": engine.model,
        "judge": judge,
        "options": {k: dict(v) for k, v in (options or {}).items()},
        "summary": result.to_json(),
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return result


def _write_run(
    run: ConversationRun,
    summary: SystemSummary,
    cases_f: IO[str],
    labels_f: IO[str],
    faults_f: IO[str],
) -> None:
    for record in run.log:
        if record.fault:
            summary.injected_faults += 1
            faults_f.write(
                json.dumps(
                    {
                        "system": run.system,
                        "store_id": run.store_id,
                        "op_id": record.span_id,
                        "op_name": record.name,
                        "op_kind": record.kind.value,
                        "fault": record.fault,
                        "case_id": record.case_id,
                    }
                )
                + "\n"
            )
    for case_id, result in run.results.items():
        question = run.questions[case_id]
        summary.cases += 1
        summary.correct += result.correct
        row = {
            "case_id": case_id,
            "question": question.question,
            "gold_answers": list(question.gold_answers),
            "evidence_refs": [turn_ref(run.store_id, e.dia_id) for e in question.evidence],
            "verdict": "correct" if result.correct else "incorrect",
            "prediction": result.prediction,
            "system": run.system,
            "store_id": run.store_id,
            "conversation": run.conversation.conv_id,
            "category": question.category,
        }
        cases_f.write(json.dumps(row, ensure_ascii=False) + "\n")
        if result.correct:
            continue
        summary.failures += 1
        label = label_case(run, case_id)
        summary.labels[label.error_type or "unrescued"] += 1
        summary.sources[label.source] += 1
        labels_f.write(json.dumps(label.to_json(), ensure_ascii=False) + "\n")


DEMO_FAULTS = "all=0.05"
"""The faults of the demo workload."""


def run_demo(
    out_dir: str | os.PathLike[str] = "memtrace-demo",
    *,
    users: int = 4,
    seed: int = 7,
    faults: str = DEMO_FAULTS,
    progress: IO[str] | None = sys.stderr,
) -> BenchSummary:
    """The quick demo: ``users`` synthetic users through all four systems, with injected faults,
    offline (a few seconds)."""
    return generate_benchmark(
        out_dir,
        workload=generate_workload(users, seed),
        systems="all",
        seed=seed,
        faults=faults,
        progress=progress,
    )

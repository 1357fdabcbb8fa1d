"""Two recordings of one run, one verdict: attribution on our spans vs on the MemTraceBench file.

:func:`memtrace_bench.memtracebench.export_memtracebench` records a run of our reference systems with
the real ``smartcomment`` recorder; importing that file and attributing its failed cases must
name the same culprit (the same op, mapped back through the ``memtrace_span_id`` the recorder
kept in each op's metadata) and the same error type as attributing our own spans of the run.
:func:`compare_recordings` measures that agreement over the annotated failures, and the paper's
exact-match accuracy of the imported verdicts against the annotations.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtrace_bench.systems.metrics import evaluate, load_jsonl
from memtrace_otel.attribution._base import Method
from memtrace_otel.attribution._model import Verdict
from memtrace_otel.job._run import run_batch
from memtrace_otel.sources import export_source, open_source


@dataclass
class FidelityReport:
    """Agreement of the two recordings' verdicts over the annotated failures."""

    annotated: int = 0
    agree: int = 0
    both_verdicts: int = 0
    no_verdict_imported: int = 0
    empty_reasons: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    annotation_scores: dict[str, Any] = field(default_factory=dict)

    @property
    def agreement(self) -> float:
        """Share of annotated failures with the same error type and op in both recordings."""
        return self.agree / self.annotated if self.annotated else 0.0

    def to_json(self) -> dict[str, Any]:
        """Plain data (at most 20 disagreements listed)."""
        return {
            "annotated": self.annotated,
            "agree": self.agree,
            "agreement": round(self.agreement, 4),
            "both_verdicts": self.both_verdicts,
            "no_verdict_imported": self.no_verdict_imported,
            "empty_reasons": self.empty_reasons,
            "disagreements": self.disagreements[:20],
            "annotation_scores": self.annotation_scores,
        }


def imported_case_key(case_id: str) -> str:
    """An imported case id (``query:<qa id>@1``) -> the qa id it was recorded from.

    >>> imported_case_key("query:mem0:user-01:q3@1")
    'mem0:user-01:q3'
    """
    name = case_id.rpartition("@")[0] or case_id
    return name.split(":", 1)[1] if name.startswith("query:") else name


def span_ids_of_ops(mtb_dir: str | os.PathLike[str]) -> dict[str, str]:
    """smartcomment op id -> our span id, from the ``memtrace_span_id`` in each op's metadata."""
    out: dict[str, str] = {}
    for path in sorted(Path(mtb_dir).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for op in data.get("data", {}).get("operations", []):
            span = (op.get("metadata") or {}).get("memtrace_span_id")
            if isinstance(span, str):
                out[op["op_id"]] = span
    return out


def compare_recordings(
    bench_dir: str | os.PathLike[str],
    mtb_dir: str | os.PathLike[str],
    method: Method,
    *,
    workdir: str | os.PathLike[str] | None = None,
) -> FidelityReport:
    """Attribute the run twice (our spans; the imported MemTraceBench files) and compare.

    Args:
        bench_dir: a ``memtrace bench generate`` directory (traces, cases, labels).
        mtb_dir: the MemTraceBench files :func:`export_memtracebench` recorded from it.
        method: the attribution method (the same one on both sides).
        workdir: where the imported files are exported to OTLP (default: a temporary folder).
    """
    bench = Path(bench_dir)
    ours, _ = run_batch(
        [str(bench / "traces.jsonl")], method, cases_file=str(bench / "cases.jsonl")
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(workdir) if workdir is not None else Path(tmp)
        exported = export_source(open_source(str(mtb_dir), strict=True), folder, overwrite=True)
        theirs, _ = run_batch(
            [str(exported.traces_path)],
            method,
            cases_file=str(exported.cases_path) if exported.cases_path else None,
        )
        annotation_labels = (
            load_jsonl(exported.labels_path) if exported.labels_path is not None else []
        )
    spans = span_ids_of_ops(mtb_dir)
    mine = {v.case_id: v for v in ours}
    imported = {imported_case_key(v.case_id): v for v in theirs}
    report = FidelityReport()
    for label in load_jsonl(bench / "labels.jsonl"):
        if not label.get("error_type"):
            continue
        case_id = str(label["case_id"])
        report.annotated += 1
        a, b = mine.get(case_id), imported.get(case_id)
        b_op = _mapped_op(b, spans)
        if b is None or b.op_id is None:
            report.no_verdict_imported += 1
            if b is None or not b.reason.strip():
                report.empty_reasons += 1
        same = a is not None and b is not None and a.error_type == b.error_type and a.op_id == b_op
        if a is not None and b is not None and a.op_id and b.op_id:
            report.both_verdicts += 1
        if same:
            report.agree += 1
        else:
            report.disagreements.append(
                {
                    "case_id": case_id,
                    "ours": _brief(a, a.op_id if a else None),
                    "imported": _brief(b, b_op),
                    "label": {"error_type": label["error_type"], "op_name": label.get("op_name")},
                }
            )
    predictions = [json.loads(v.to_json()) for v in theirs]
    report.annotation_scores = evaluate(
        annotation_rows(annotation_labels), source_op_predictions(predictions)
    ).to_json()
    return report


def annotation_rows(labels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Labels of imported annotations scored on the annotated ``op-...`` id (the paper's way)."""
    return [
        {**row, "op_id": row.get("source_op_id") or row.get("op_id")}
        for row in labels
        if row.get("scored", True)
    ]


def source_op_predictions(predictions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Verdict rows whose ``op_id`` is the source file's op id where the verdict carries one."""
    return [{**p, "op_id": p.get("source_op_id") or p.get("op_id")} for p in predictions]


def _mapped_op(verdict: Verdict | None, spans: Mapping[str, str]) -> str | None:
    if verdict is None or verdict.op_id is None:
        return None
    return spans.get(verdict.source_op_id or "", verdict.op_id)


def _brief(verdict: Verdict | None, op: str | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {
        "error_type": verdict.error_type,
        "op": op,
        "op_name": verdict.op_name,
        "reason": verdict.reason[:200],
    }

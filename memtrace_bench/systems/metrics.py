"""Score attribution verdicts against ground-truth labels, as the MemTrace paper does.

Two exact-match accuracies over the labelled failures: **error type** (the five labels) and
**op id** (the span id of the decisive op), overall, per system, per gold label, and per
system and label, with counts. A labelled case without a prediction counts as wrong; labels
without an error type ("no single correction rescues the answer") are left out and counted.

>>> labels = [
...     {"case_id": "rag:u1:q1", "error_type": "RetrievalError", "op_id": "a1", "system": "rag"},
...     {"case_id": "rag:u1:q2", "error_type": "ResponseError", "op_id": "b2", "system": "rag"},
... ]
>>> preds = [{"case_id": "rag:u1:q1", "error_type": "RetrievalError", "op_id": "ff"}]
>>> report = evaluate(labels, preds)
>>> report.overall.error_type_accuracy, report.overall.op_id_accuracy, report.missing
(0.5, 0.0, 1)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memtrace_otel.errors import DecodeError

__all__ = ["Report", "Score", "evaluate", "format_report", "load_jsonl"]


@dataclass
class Score:
    """Exact-match counts over a set of labelled cases."""

    total: int = 0
    error_type_correct: int = 0
    op_id_correct: int = 0

    @property
    def error_type_accuracy(self) -> float:
        """Share of cases whose predicted error type equals the label's."""
        return self.error_type_correct / self.total if self.total else 0.0

    @property
    def op_id_accuracy(self) -> float:
        """Share of cases whose predicted op id equals the label's."""
        return self.op_id_correct / self.total if self.total else 0.0

    def add(self, type_ok: bool, op_ok: bool) -> None:
        """Count one case."""
        self.total += 1
        self.error_type_correct += type_ok
        self.op_id_correct += op_ok

    def to_json(self) -> dict[str, Any]:
        """Counts and accuracies as a plain dict."""
        return {
            "total": self.total,
            "error_type_correct": self.error_type_correct,
            "op_id_correct": self.op_id_correct,
            "error_type_accuracy": round(self.error_type_accuracy, 4),
            "op_id_accuracy": round(self.op_id_accuracy, 4),
        }


@dataclass
class Report:
    """Scores overall and broken down."""

    overall: Score = field(default_factory=Score)
    by_system: dict[str, Score] = field(default_factory=dict)
    by_label: dict[str, Score] = field(default_factory=dict)
    by_system_label: dict[tuple[str, str], Score] = field(default_factory=dict)
    missing: int = 0
    unlabelled: int = 0

    def to_json(self) -> dict[str, Any]:
        """The report as plain data."""
        return {
            "overall": self.overall.to_json(),
            "by_system": {k: v.to_json() for k, v in sorted(self.by_system.items())},
            "by_label": {k: v.to_json() for k, v in sorted(self.by_label.items())},
            "by_system_label": {
                f"{s}/{lab}": v.to_json() for (s, lab), v in sorted(self.by_system_label.items())
            },
            "missing": self.missing,
            "unlabelled": self.unlabelled,
        }


def _system_of(row: Mapping[str, Any]) -> str:
    system = row.get("system")
    if isinstance(system, str) and system:
        return system
    return str(row.get("case_id", "")).split(":", 1)[0]


def evaluate(
    labels: Iterable[Mapping[str, Any]], predictions: Iterable[Mapping[str, Any]]
) -> Report:
    """Error-type and op-id accuracy (exact match) of ``predictions`` against ``labels``.

    Args:
        labels: ``labels.jsonl`` rows (``case_id``, ``error_type``, ``op_id``, ``system``).
        predictions: verdict rows (``case_id``, ``error_type``, ``op_id``); later rows for the
            same case replace earlier ones.
    """
    predicted = {str(p.get("case_id")): p for p in predictions}
    report = Report()
    for label in labels:
        gold_type = label.get("error_type")
        if not gold_type:
            report.unlabelled += 1
            continue
        pred = predicted.get(str(label.get("case_id")))
        if pred is None:
            report.missing += 1
            type_ok = op_ok = False
        else:
            type_ok = pred.get("error_type") == gold_type
            op_ok = bool(label.get("op_id")) and pred.get("op_id") == label.get("op_id")
        system = _system_of(label)
        for score in (
            report.overall,
            report.by_system.setdefault(system, Score()),
            report.by_label.setdefault(str(gold_type), Score()),
            report.by_system_label.setdefault((system, str(gold_type)), Score()),
        ):
            score.add(type_ok, op_ok)
    return report


def format_report(report: Report) -> str:
    """A text table: per system and label, counts and both accuracies."""
    rows = [f"{'system':<13} {'label':<16} {'n':>5} {'type acc':>9} {'op acc':>8}"]
    for (system, label), score in sorted(report.by_system_label.items()):
        rows.append(
            f"{system:<13} {label:<16} {score.total:>5} "
            f"{score.error_type_accuracy:>9.3f} {score.op_id_accuracy:>8.3f}"
        )
    for system, score in sorted(report.by_system.items()):
        rows.append(
            f"{system:<13} {'(all)':<16} {score.total:>5} "
            f"{score.error_type_accuracy:>9.3f} {score.op_id_accuracy:>8.3f}"
        )
    o = report.overall
    rows.append(
        f"{'(all)':<13} {'(all)':<16} {o.total:>5} {o.error_type_accuracy:>9.3f} {o.op_id_accuracy:>8.3f}"
    )
    if report.missing or report.unlabelled:
        rows.append(
            f"missing predictions: {report.missing}; cases without a label: {report.unlabelled}"
        )
    return "\n".join(rows)


def load_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSON Lines file of objects (blank lines skipped).

    Raises:
        DecodeError: a line that is not a JSON object (names the file and line).
    """
    rows: list[dict[str, Any]] = []
    name = os.fspath(path)
    try:
        handle = open(name, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise DecodeError(f"cannot read: {exc.strerror}", path=name) from None
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise DecodeError(f"not JSON: {exc}", path=name, line=number) from None
            if not isinstance(row, dict):
                raise DecodeError("expected a JSON object", path=name, line=number)
            rows.append(row)
    return rows

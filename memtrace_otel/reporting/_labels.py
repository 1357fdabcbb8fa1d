"""Ground-truth labels (``labels.jsonl``) and the accuracy of verdicts against them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from memtrace_otel.attribution import Verdict
from memtrace_otel.errors import DecodeError
from memtrace_otel.sources._common import json_line

__all__ = ["Label", "label_accuracy", "load_labels"]

NO_CULPRIT = "(none)"
"""The error type shown for a verdict that names no culprit, in the confusion matrix."""


@dataclass(frozen=True)
class Label:
    """The known culprit of one failed case.

    Attributes:
        case_id: the case.
        error_type: one of the five error types, or ``None`` when the label names none.
        op_id: the span id of the culprit op, when known.
        op_name: its op name, when known.
        source: where the label came from (a dataset name, an annotator, ``file:line``).
    """

    case_id: str
    error_type: str | None = None
    op_id: str | None = None
    op_name: str | None = None
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)


def _optional_str(obj: Mapping[str, Any], name: str, *, path: str, line: int) -> str | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DecodeError("expected a string", path=path, line=line, field=name)
    return value


def load_labels(path: str | os.PathLike[str]) -> dict[str, Label]:
    """Read a labels file: JSON Lines of ``case_id``, ``error_type``, ``op_id``, ``op_name``, ``source``.

    Only ``case_id`` is required. A later line for the same case replaces an earlier one.

    Raises:
        DecodeError: a line that is not a JSON object, lacks ``case_id`` or has a field of the
            wrong type (naming the file, line and field).

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     f = pathlib.Path(tmp, "labels.jsonl")
    ...     _ = f.write_text('{"case_id": "q1", "error_type": "RetrievalError", "op_id": "ab"}\\n')
    ...     load_labels(f)["q1"].error_type
    'RetrievalError'
    """
    name = os.fspath(path)
    labels: dict[str, Label] = {}
    with open(name, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            obj = json_line(raw, path=name, line=number)
            if not isinstance(obj, dict):
                raise DecodeError("expected a JSON object", path=name, line=number)
            case_id = obj.get("case_id")
            if not isinstance(case_id, str | int) or isinstance(case_id, bool) or case_id == "":
                raise DecodeError(
                    "missing or empty case_id", path=name, line=number, field="case_id"
                )
            fields = {
                field: _optional_str(obj, field, path=name, line=number)
                for field in ("error_type", "op_id", "op_name", "source")
            }
            labels[str(case_id)] = Label(
                case_id=str(case_id),
                error_type=fields["error_type"],
                op_id=fields["op_id"],
                op_name=fields["op_name"],
                source=fields["source"] or f"{os.path.basename(name)}:{number}",
            )
    return labels


def label_accuracy(verdicts: Iterable[Verdict], labels: Mapping[str, Label]) -> dict[str, Any]:
    """Exact-match accuracy of ``verdicts`` against ``labels``.

    Only labelled cases that have a verdict are compared; a verdict naming no culprit counts as
    wrong. Op-id accuracy is over the compared cases whose label gives an op id.

    Returns:
        ``labelled`` (labels given), ``compared``, ``error_type_correct``,
        ``error_type_accuracy`` (``None`` when nothing was compared), ``op_id_compared``,
        ``op_id_correct``, ``op_id_accuracy``, ``labelled_without_verdict`` (case ids),
        ``unlabelled_verdicts`` (how many verdicts have no label) and ``confusion``
        (label error type -> verdict error type -> count).

    >>> from memtrace_otel.attribution import Verdict
    >>> v = Verdict("q1", "RetrievalError", "ab", "search", "evidence", 0.9)
    >>> acc = label_accuracy([v], {"q1": Label("q1", "RetrievalError", "cd")})
    >>> acc["error_type_accuracy"], acc["op_id_accuracy"]
    (1.0, 0.0)
    """
    compared = type_ok = op_compared = op_ok = unlabelled = 0
    seen: set[str] = set()
    confusion: dict[str, dict[str, int]] = {}
    for verdict in verdicts:
        label = labels.get(verdict.case_id)
        if label is None:
            unlabelled += 1
            continue
        if verdict.case_id in seen:
            continue
        seen.add(verdict.case_id)
        compared += 1
        if verdict.error_type is not None and verdict.error_type == label.error_type:
            type_ok += 1
        row = confusion.setdefault(label.error_type or NO_CULPRIT, {})
        predicted = verdict.error_type or NO_CULPRIT
        row[predicted] = row.get(predicted, 0) + 1
        if label.op_id is not None:
            op_compared += 1
            if verdict.op_id == label.op_id:
                op_ok += 1
    return {
        "labelled": len(labels),
        "compared": compared,
        "error_type_correct": type_ok,
        "error_type_accuracy": type_ok / compared if compared else None,
        "op_id_compared": op_compared,
        "op_id_correct": op_ok,
        "op_id_accuracy": op_ok / op_compared if op_compared else None,
        "labelled_without_verdict": sorted(set(labels) - seen),
        "unlabelled_verdicts": unlabelled,
        "confusion": confusion,
    }

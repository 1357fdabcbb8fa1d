"""The metrics module: exact-match error-type and op-id accuracy, per system and label."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtrace_bench.systems.metrics import evaluate, format_report, load_jsonl
from memtrace_otel.errors import DecodeError

LABELS = [
    {"case_id": "rag:u1:q1", "error_type": "RetrievalError", "op_id": "a", "system": "rag"},
    {"case_id": "rag:u1:q2", "error_type": "ResponseError", "op_id": "b", "system": "rag"},
    {"case_id": "mem0:u1:q1", "error_type": "UpdateError", "op_id": "c"},
    {"case_id": "mem0:u1:q2", "error_type": None, "op_id": None, "system": "mem0"},
]


def test_accuracy_per_system_and_label() -> None:
    predictions = [
        {"case_id": "rag:u1:q1", "error_type": "RetrievalError", "op_id": "a"},
        {"case_id": "rag:u1:q2", "error_type": "RetrievalError", "op_id": "b"},
        {"case_id": "mem0:u1:q1", "error_type": "UpdateError", "op_id": "x"},
    ]
    report = evaluate(LABELS, predictions)
    assert report.unlabelled == 1 and report.missing == 0
    assert (
        report.overall.total,
        report.overall.error_type_correct,
        report.overall.op_id_correct,
    ) == (3, 2, 2)
    assert report.by_system["rag"].error_type_accuracy == 0.5
    assert report.by_system["rag"].op_id_accuracy == 1.0
    assert report.by_system["mem0"].op_id_accuracy == 0.0  # system taken from the case id
    assert report.by_label["ResponseError"].error_type_accuracy == 0.0
    assert report.by_system_label[("rag", "RetrievalError")].total == 1
    table = format_report(report)
    assert "rag           RetrievalError       1" in table
    assert report.to_json()["by_system_label"]["mem0/UpdateError"]["op_id_correct"] == 0


def test_missing_predictions_count_as_wrong() -> None:
    report = evaluate(LABELS, [])
    assert report.missing == 3 and report.overall.error_type_accuracy == 0.0


def test_load_jsonl_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text('{"case_id": "a"}\n\nnot json\n')
    with pytest.raises(DecodeError) as info:
        load_jsonl(path)
    assert info.value.line == 3 and info.value.path == str(path)
    path.write_text('{"case_id": "a"}\n[1]\n')
    with pytest.raises(DecodeError, match="JSON object"):
        load_jsonl(path)
    with pytest.raises(DecodeError, match="cannot read"):
        load_jsonl(tmp_path / "nope.jsonl")

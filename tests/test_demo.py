"""`memtrace demo`: generate, attribute and score, end to end, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtrace_otel.cli import main


def test_demo_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--users", "2", "--seed", "3"]) == 0
    for name in ("traces.jsonl", "cases.jsonl", "labels.jsonl", "verdicts.jsonl"):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "report" / "summary.json").read_text())
    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    assert summary["attributed"] == len([v for v in verdicts if v["error_type"]]) > 0
    accuracy = json.loads((out / "report" / "accuracy.json").read_text())
    injected = accuracy["injected"]["overall"]
    assert injected["total"] > 0 and injected["error_type_accuracy"] >= 0.8
    stdout = capsys.readouterr().out
    assert "injected faults" in stdout and "type acc" in stdout

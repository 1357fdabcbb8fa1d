"""``memtrace attribute`` on traces written with the upstream GenAI conventions only."""

from __future__ import annotations

import json
from pathlib import Path

from memtrace_otel.cli import main
from tests._upstream_app import run_app


def test_answer_trace_ids_are_case_ids_and_verdicts_say_what_was_inferred(tmp_path: Path) -> None:
    run = run_app(tmp_path / "app", users=2, seed=1)
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        "".join(json.dumps({"case_id": c, "verdict": "incorrect"}) + "\n" for c in run.failed)
    )
    out = tmp_path / "v.jsonl"
    main(["attribute", str(run.traces), "--cases", str(cases), "--out", str(out)])
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert {v["case_id"] for v in verdicts} == set(run.failed)
    for verdict in verdicts:
        assert "not in the traces" not in verdict["reason"]
        assert any("upstream GenAI spans" in item for item in verdict["unchecked"])

"""The replay method and `memtrace bench evaluate` on a small generated benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memtrace_bench.methods  # noqa: F401  (registers the replay method)
from memtrace_bench.systems import generate_benchmark, generate_workload
from memtrace_otel.attribution import get_method
from memtrace_otel.cli import main
from memtrace_otel.job import run_batch


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    generate_benchmark(
        out, workload=generate_workload(2, 4), systems=["rag", "mem0"], seed=4, faults="all=0.05"
    )
    return out


def test_replay_reproduces_the_benchmark_labels(bench: Path) -> None:
    labels = [json.loads(line) for line in (bench / "labels.jsonl").read_text().splitlines()]
    labelled = {lab["case_id"]: lab for lab in labels if lab["error_type"]}
    assert labelled
    verdicts, _ = run_batch(
        [str(bench / "traces.jsonl")],
        get_method("replay", bench_dir=bench),
        cases_file=str(bench / "cases.jsonl"),
    )
    by_case = {v.case_id: v for v in verdicts}
    assert {c: (by_case[c].error_type, by_case[c].op_id) for c in labelled} == {
        c: (lab["error_type"], lab["op_id"]) for c, lab in labelled.items()
    }


def test_replay_needs_the_benchmark_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the benchmark folder"):
        get_method("replay")
    with pytest.raises(ValueError, match="cannot read the benchmark manifest"):
        get_method("replay", bench_dir=tmp_path)


def test_bench_evaluate_scores_methods_per_source(
    bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scores.json"
    assert (
        main(
            [
                "bench",
                "evaluate",
                str(bench),
                "--method",
                "evidence",
                "--method",
                "blame-generate",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    scores = json.loads(out.read_text())
    assert set(scores) == {"evidence", "blame-generate"}
    injected = scores["evidence"]["injected"]["overall"]
    assert injected["total"] > 0
    assert (
        injected["error_type_accuracy"]
        >= scores["blame-generate"]["injected"]["overall"]["error_type_accuracy"]
    )
    assert "injected failures" in capsys.readouterr().out


def test_bench_evaluate_production_mode_hides_gold_and_values(
    bench: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scores.json"
    argv = ["bench", "evaluate", str(bench), "--mode", "production", "--baselines"]
    assert main([*argv, "--json", str(out)]) == 0
    scores = json.loads(out.read_text())
    assert set(scores) == {"evidence", "blame-generate", "blame-retrieve"}
    prod = scores["evidence"]["production"]
    assert prod["total"] == prod["right"] + prod["wrong"] + prod["abstained"] > 0
    assert sum(b["total"] for b in prod["calibration"]) == prod["right"] + prod["wrong"]
    assert scores["evidence"]["correct_cases_blamed"] == 0
    text = capsys.readouterr().out
    assert "label \\ verdict" in text and "methods side by side" in text
    assert "confidence >= 0.8" in text

    # Capture off: no value to read, so every named culprit must rest on structure; a wrong
    # verdict above confidence 0.3 is a defect.
    assert main([*argv, "--capture", "off", "--json", str(out)]) == 0
    off = json.loads(out.read_text())["evidence"]["production"]
    assert off["wrong_confidence_above_0.3"] == 0
    assert off["wrong_rate"] <= 0.05

"""``memtrace bench generate``: the files it writes, and what it does with bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memtrace_bench.systems import run_demo
from memtrace_bench.systems.metrics import evaluate, format_report, load_jsonl
from memtrace_otel.cli import main
from memtrace_otel.semconv import attributes as A
from tests._openai_server import closed_port


def spans_of(path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for line in path.read_text().splitlines():
        request = json.loads(line)
        for rs in request["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    attrs = {a["key"]: a["value"] for a in span.get("attributes", [])}
                    out[span["spanId"]] = {
                        "name": span["name"],
                        "attrs": attrs,
                        "trace": span["traceId"],
                    }
    return out


def scalar(value: dict[str, Any]) -> Any:
    return next(iter(value.values()))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    code = main(["bench", "generate", "--users", "2", "--seed", "3", "--faults", "all=0.1",
                 "--out", str(out), "--no-progress"])  # fmt: skip
    assert code == 0
    return out


def test_writes_traces_cases_and_labels(generated: Path) -> None:
    for name in ("traces.jsonl", "cases.jsonl", "labels.jsonl", "faults.jsonl", "manifest.json"):
        assert (generated / name).exists(), name
    cases = load_jsonl(generated / "cases.jsonl")
    labels = load_jsonl(generated / "labels.jsonl")
    assert {c["system"] for c in cases} == {"long_context", "rag", "mem0", "evermemos"}
    assert len(cases) == 4 * 2 * 15
    for case in cases:
        assert set(case) >= {"case_id", "question", "gold_answers", "evidence_refs", "verdict"}
        assert case["verdict"] in ("correct", "incorrect")
        assert all(
            ref.startswith(f"msg:{case['store_id']}:D") and ref.endswith("@1")
            for ref in case["evidence_refs"]
        )
    failed = {c["case_id"] for c in cases if c["verdict"] == "incorrect"}
    assert {lab["case_id"] for lab in labels} == failed
    assert {lab["source"] for lab in labels} <= {"injected", "counterfactual"}
    assert any(lab["source"] == "injected" for lab in labels)


def test_label_op_ids_are_spans_of_the_trace(generated: Path) -> None:
    spans = spans_of(generated / "traces.jsonl")
    kinds = {"ExtractionError": {"extract", "create"}, "UpdateError": {"update"}, "DeletionError": {"delete"},
             "RetrievalError": {"retrieve", "filter"}, "ResponseError": {"assemble", "generate"}}  # fmt: skip
    for label in load_jsonl(generated / "labels.jsonl"):
        if label["error_type"] is None:
            continue
        span = spans[label["op_id"]]
        assert scalar(span["attrs"][A.MEMTRACE_OP_NAME]) == label["op_name"]
        assert scalar(span["attrs"][A.MEMTRACE_OP_KIND]) in kinds[label["error_type"]]
        assert scalar(span["attrs"][A.MEMTRACE_SYSTEM]) == label["system"]
    text = (generated / "traces.jsonl").read_text()
    assert "counterfactual" not in text and "ExtractionError" not in text  # labels stay out


def test_judge_spans_match_cases(generated: Path) -> None:
    spans = spans_of(generated / "traces.jsonl")
    verdicts = {
        scalar(s["attrs"][A.MEMTRACE_CASE_ID]): scalar(s["attrs"][A.MEMTRACE_JUDGE_VERDICT])
        for s in spans.values()
        if scalar(s["attrs"][A.MEMTRACE_OP_KIND]) == "judge"
    }
    cases = load_jsonl(generated / "cases.jsonl")
    assert verdicts == {c["case_id"]: c["verdict"] for c in cases}


def test_metrics_score_labels(generated: Path) -> None:
    labels = load_jsonl(generated / "labels.jsonl")
    perfect = evaluate(labels, labels)
    assert perfect.overall.error_type_accuracy == 1.0 and perfect.overall.op_id_accuracy == 1.0
    half = [dict(lab, op_id="0" * 16) for lab in labels]
    report = evaluate(labels, half)
    assert report.overall.error_type_accuracy == 1.0 and report.overall.op_id_accuracy == 0.0
    assert "(all)" in format_report(report)


def test_same_seed_same_benchmark(generated: Path, tmp_path: Path) -> None:
    assert main(["bench", "generate", "--users", "2", "--seed", "3", "--faults", "all=0.1",
                 "--out", str(tmp_path), "--no-progress"]) == 0  # fmt: skip

    def strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "op_id"} for r in rows]

    assert strip(load_jsonl(tmp_path / "labels.jsonl")) == strip(
        load_jsonl(generated / "labels.jsonl")
    )
    assert load_jsonl(tmp_path / "cases.jsonl") == load_jsonl(generated / "cases.jsonl")


def test_progress_bar_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["bench", "generate", "--users", "1", "--systems", "rag,mem0", "--out", str(tmp_path)])
        == 0
    )
    captured = capsys.readouterr()
    assert "bench generate: done: 2 conversations of 2 conversations" in captured.err
    assert captured.out.splitlines()[0].split() == [
        "system",
        "answer",
        "accuracy",
        "failures",
        "labels",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--systems", "rag,bogus"], "unknown system"),
        (["--faults", "drop_everything=0.5"], "unknown fault"),
        (["--faults", "drop_fact=2"], "within 0..1"),
        (["--dataset", "squad"], "unknown dataset"),
        (["--set", "rag.bogus=1"], "unknown option"),
        (["--set", "nosystem"], "SYSTEM.KEY=VALUE"),
        (["--engine", "openai", "--model", ""], "model"),
    ],
)
def test_bad_input_is_a_usage_error(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["bench", "generate", "--users", "1", "--out", str(tmp_path), "--no-progress", *args]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.startswith("memtrace: error:")


def test_unreachable_endpoint_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    code = main(["bench", "generate", "--users", "1", "--systems", "rag", "--engine", "openai",
                 "--model", "m", "--base-url", url, "--out", str(tmp_path), "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and url in err and "unreachable" in err


def test_bench_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench"]) == 2
    assert "generate" in capsys.readouterr().err


def test_demo_workload(tmp_path: Path) -> None:
    summary = run_demo(tmp_path / "demo", users=2, progress=None)
    assert set(summary.systems) == {"long_context", "rag", "mem0", "evermemos"}
    assert summary.spans > 100
    manifest = json.loads((tmp_path / "demo" / "manifest.json").read_text())
    assert manifest["faults"] != "none" and manifest["conversations"] == 2

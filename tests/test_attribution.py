"""Attribution on hand-written traces: each planted fault is named, correct cases are not blamed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memtrace_otel.attribution import EvidenceMethod, get_method, load_cases
from memtrace_otel.errors import DecodeError
from memtrace_otel.job import read_verdicts, run_batch
from tests._pipeline import EXPECTED, FAULTS, write_workload


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_workload(tmp_path_factory.mktemp("attribution"))


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_evidence_names_each_planted_fault(workload: tuple[Path, Path], fault: str) -> None:
    traces, cases = workload
    verdicts, _summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    by_case = {v.case_id: v for v in verdicts}
    verdict = by_case[f"case-{fault}"]
    assert (verdict.error_type, verdict.op_name) == EXPECTED[fault], verdict.reason
    assert verdict.op_id is not None and len(verdict.op_id) == 16
    assert verdict.evidence_refs == (f"msg:case-{fault}:1@1",)
    assert verdict.store_id == f"user-{fault}" and verdict.system == "test"


def test_correct_cases_are_not_blamed(workload: tuple[Path, Path]) -> None:
    traces, cases = workload
    verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    assert "case-none" not in {v.case_id for v in verdicts}
    assert summary.cases == len(FAULTS) - 1


def test_failed_cases_come_from_judge_ops_without_a_cases_file(workload: tuple[Path, Path]) -> None:
    traces, _ = workload
    verdicts, _ = run_batch([str(traces)], EvidenceMethod())
    assert {v.case_id for v in verdicts} == {f"case-{f}" for f in EXPECTED}
    # the question, gold answer and evidence were found from the traces alone
    by_case = {v.case_id: v for v in verdicts}
    assert by_case["case-extraction"].error_type == "ExtractionError"
    assert "evidence located by search, not given" in by_case["case-extraction"].unchecked


def test_without_captured_values_the_verdict_says_what_it_could_not_check(tmp_path: Path) -> None:
    traces, cases = write_workload(tmp_path, capture="NO_CONTENT", faults=("deletion", "retrieval"))
    verdicts, _ = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    by_case = {v.case_id: v for v in verdicts}
    # structure alone still shows the deletion (a tombstone) ...
    assert by_case["case-deletion"].error_type == "DeletionError"
    # ... while content losses cannot be seen, and the verdict says so with lower confidence
    assert by_case["case-retrieval"].unchecked
    assert (
        by_case["case-retrieval"].confidence < by_case["case-deletion"].confidence
        or by_case["case-deletion"].unchecked
    )


def test_constant_baselines(workload: tuple[Path, Path]) -> None:
    traces, cases = workload
    gen, _ = run_batch([str(traces)], get_method("blame-generate"), cases_file=str(cases))
    ret, _ = run_batch([str(traces)], get_method("blame-retrieve"), cases_file=str(cases))
    assert {v.op_name for v in gen} == {"test.answer"} and {v.error_type for v in gen} == {
        "ResponseError"
    }
    assert {v.op_name for v in ret} == {"test.search"} and {v.error_type for v in ret} == {
        "RetrievalError"
    }


def test_resume_skips_done_cases_and_repairs_a_torn_last_line(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    out = tmp_path / "verdicts.jsonl"
    first, _ = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases), out=out)
    lines = out.read_text().splitlines()
    assert len(lines) == len(first) == 7
    # simulate a kill mid-write: two complete lines and half of the third
    out.write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][: len(lines[2]) // 2])
    again, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases), out=out)
    assert summary.repaired_out and summary.resumed == 2 and len(again) == 5
    final = list(read_verdicts(out))
    assert sorted(v.case_id for v in final) == sorted(v.case_id for v in first)
    assert {v.case_id: v for v in final} == {v.case_id: v for v in first}


def test_a_case_id_not_in_the_traces_is_reported_not_crashed(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    extra = tmp_path / "cases.jsonl"
    extra.write_text(cases.read_text() + json.dumps({"case_id": "ghost", "question": "?"}) + "\n")
    verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(extra))
    ghost = next(v for v in verdicts if v.case_id == "ghost")
    assert ghost.error_type is None and "not in the traces" in ghost.reason
    assert summary.cases_not_in_traces == ["ghost"]


def test_cases_file_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text('{"case_id": "a"}\n{"question": "no id"}\n')
    with pytest.raises(
        DecodeError, match=r"cases.jsonl:2: field case_id: missing or empty case_id"
    ):
        list(load_cases(path))
    path.write_text('{"case_id": "a", "gold_answers": {"x": 1}}\n')
    with pytest.raises(DecodeError, match="field gold_answers"):
        list(load_cases(path))
    skipped: list[str] = []
    path.write_text('{"case_id": "a"}\nnot json\n{"case_id": "b", "verdict": "maybe"}\n')
    assert [c.case_id for c in load_cases(path, strict=False, skipped=skipped)] == ["a"]
    assert len(skipped) == 2 and "invalid JSON" in skipped[0] and "field verdict" in skipped[1]


def test_unknown_method_raises() -> None:
    with pytest.raises(ValueError, match="unknown method 'oracle'"):
        get_method("oracle")


def test_cli_attribute_writes_verdicts_and_summary(
    workload: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memtrace_otel.cli import main

    traces, cases = workload
    out, report = tmp_path / "v.jsonl", tmp_path / "report"
    code = main(
        [
            "attribute",
            str(traces),
            "--cases",
            str(cases),
            "--out",
            str(out),
            "--report",
            str(report),
            "--quiet",
        ]
    )
    assert code == 0
    assert len(out.read_text().splitlines()) == 7
    summary = json.loads((report / "summary.json").read_text())
    assert summary["attributed"] == 7 and summary["by_error_type"]["RetrievalError"] == 2
    assert "ExtractionError" in capsys.readouterr().err


def test_cli_write_back_needs_an_endpoint(
    workload: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memtrace_otel.cli import main

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert main(["attribute", str(workload[0]), "--write-back"]) == 2
    assert "needs OTEL_EXPORTER_OTLP_ENDPOINT" in capsys.readouterr().err


def test_write_back_sends_verdict_spans_linked_to_the_culprit(
    workload: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memtrace_otel.cli import main
    from tests._otlp_receiver import otlp_receiver

    traces, cases = workload
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        out = tmp_path / "v.jsonl"
        assert (
            main(
                [
                    "attribute",
                    str(traces),
                    "--cases",
                    str(cases),
                    "--out",
                    str(out),
                    "--write-back",
                    "--quiet",
                ]
            )
            == 0
        )
    verdicts = {v.case_id: v for v in read_verdicts(out)}
    spans = [s for s in receiver.spans if s.name == "memtrace.attribution"]
    assert len(spans) == len(verdicts) == 7
    for span in spans:
        attrs = {a.key: a.value for a in span.attributes}
        verdict = verdicts[attrs["memtrace.attribution.case_id"].string_value]
        assert attrs["memtrace.attribution.error_type"].string_value == verdict.error_type
        assert attrs["gen_ai.evaluation.explanation"].string_value == verdict.reason
        [link] = span.links
        assert link.span_id.hex() == verdict.op_id and link.trace_id.hex() == verdict.trace_id
        assert span.trace_id.hex() == verdict.trace_id  # in the culprit's trace, as its child
        assert span.parent_span_id.hex() == verdict.op_id


def test_incomplete_traces_name_the_missing_trace_and_lower_confidence(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    lines = traces.read_text().splitlines()

    def spans(line: str) -> list[dict[str, object]]:
        doc = json.loads(line)
        return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]

    record_id = {
        "key": "gen_ai.memory.record.id",
        "value": {"stringValue": "mem:msg:case-retrieval:1"},
    }
    dropped = {
        s["traceId"] for line in lines for s in spans(line) if record_id in s.get("attributes", [])
    }
    assert len(dropped) == 1
    partial = tmp_path / "partial.jsonl"
    partial.write_text(
        "".join(line + "\n" for line in lines if not {s["traceId"] for s in spans(line)} & dropped)
    )
    full = {
        v.case_id: v for v in run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))[0]
    }
    cut = {
        v.case_id: v for v in run_batch([str(partial)], EvidenceMethod(), cases_file=str(cases))[0]
    }
    verdict = cut["case-retrieval"]
    assert verdict.missing_traces == tuple(dropped)
    assert verdict.confidence < full["case-retrieval"].confidence
    assert full["case-retrieval"].missing_traces == ()


def test_cli_model_method_without_endpoint_is_a_one_line_error(
    workload: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memtrace_otel.cli import main

    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MEMTRACE_ATTRIBUTION_MODEL"):
        monkeypatch.delenv(var, raising=False)
    assert main(["attribute", str(workload[0]), "--method", "llm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memtrace: error:") and len(err.strip().splitlines()) == 1


def test_cli_summary_reports_truncated_values(workload: tuple[Path, Path], tmp_path: Path) -> None:
    from memtrace_otel.cli import main

    traces, cases = workload
    big = tmp_path / "traces.jsonl"
    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "name": "upload",
        "attributes": [{"key": "blob", "value": {"stringValue": "x" * (2 * 1024 * 1024)}}],
    }
    extra = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    big.write_text(traces.read_text() + json.dumps(extra) + "\n")
    report = tmp_path / "report"
    code = main(["attribute", str(big), "--cases", str(cases), "--report", str(report), "--quiet"])
    summary = json.loads((report / "summary.json").read_text())
    assert summary["truncated_values"] == 1
    assert code == 0  # reported, not lost: a cut value does not fail the run


def test_summary_table_columns_line_up_with_their_headers() -> None:
    from memtrace_otel.job import BatchSummary
    from memtrace_otel.job._batch import summary_table

    summary = BatchSummary()
    summary.by_error_type = {"RetrievalError": 3, "UpdateError": 12}
    summary.by_system_error = {
        "rag": {"RetrievalError": 3, "UpdateError": 2},
        "m": {"UpdateError": 10},
    }
    lines = summary_table(summary).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("system"))
    header, *rows = lines[start : start + 3]

    def right_edges(line: str) -> list[int]:
        return [m.end() for m in re.finditer(r"\S+", line)][1:]

    assert all(right_edges(row) == right_edges(header) for row in rows), lines

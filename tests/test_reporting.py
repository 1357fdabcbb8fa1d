"""The HTML report's files and data (no browser): what the page will draw, and that it is safe."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from memtrace_otel.attribution import EvidenceMethod, Verdict
from memtrace_otel.cli import main
from memtrace_otel.errors import DecodeError
from memtrace_otel.graph import case_subgraph, from_node_link_json
from memtrace_otel.job import load_store_graphs, read_verdicts, run_batch
from memtrace_otel.reporting import (
    Label,
    case_view,
    evidence_path,
    jaeger_link,
    json_for_html,
    label_accuracy,
    load_labels,
    tempo_link,
    write_report,
)
from tests._pipeline import EXPECTED, write_workload
from tests._reporting import INJECTION, MARKERS, write_hostile_workload

JAEGER = "http://localhost:16686"
GRAFANA = "http://localhost:3000"


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_workload(tmp_path_factory.mktemp("report-workload"))


@pytest.fixture(scope="module")
def batch(
    workload: tuple[Path, Path],
) -> tuple[list[Verdict], dict[str, nx.MultiDiGraph], Any]:
    traces, cases = workload
    graphs = load_store_graphs([str(traces)])
    verdicts, summary = run_batch(
        [str(traces)], EvidenceMethod(), cases_file=str(cases), graphs=graphs
    )
    return verdicts, graphs, summary


def page_data(index: Path) -> dict[str, Any]:
    """The JSON block of a report page."""
    html = index.read_text(encoding="utf-8")
    match = re.search(
        r'<script type="application/json" id="memtrace-report">(.*?)</script>', html, re.S
    )
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def inline_case(page: Path) -> dict[str, Any]:
    """The case data block of a one-case page."""
    match = re.search(r'id="memtrace-case-0000">(.*?)</script>', page.read_text(), re.S)
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def case_file(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("window.__memtraceCase(") and text.endswith(");\n")
    data: dict[str, Any] = json.loads(text[len("window.__memtraceCase(") : -len(");\n")])
    return data


def write_labels(path: Path, verdicts: list[Verdict], *, wrong: str) -> Path:
    """Labels equal to the verdicts, except the error type and op id of case ``wrong``."""
    lines = []
    for v in verdicts:
        label = {"case_id": v.case_id, "error_type": v.error_type, "op_id": v.op_id}
        if v.case_id == wrong:
            label = {"case_id": v.case_id, "error_type": "UpdateError", "op_id": "0" * 16}
        lines.append(json.dumps({**label, "op_name": v.op_name, "source": "test"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_json_for_html_cannot_close_the_script_element() -> None:
    text = json_for_html({"value": INJECTION, INJECTION: [1, "\u2029"]})
    for forbidden in ("<", ">", "&", "\u2028", "\u2029"):
        assert forbidden not in text
    assert json.loads(text) == {"value": INJECTION, INJECTION: [1, "\u2029"]}


def test_cli_report_files_summary_and_cases(
    workload: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, cases = workload
    report = tmp_path / "report"
    code = main(
        ["attribute", str(traces), "--cases", str(cases), "--report", str(report), "--quiet"]
    )
    assert code == 0
    index = report / "index.html"
    vendor = report / "assets" / "vendor"
    for name in ("cytoscape.min.js", "cytoscape-dagre.min.js", "LICENSE.cytoscape.txt"):
        assert (vendor / name).stat().st_size > 0
    for name in ("LICENSE.cytoscape-dagre.txt", "LICENSE.dagre.txt", "LICENSE.graphlib.txt"):
        assert "MIT" in (vendor / name).read_text() or "Permission" in (vendor / name).read_text()
    html = index.read_text()
    # offline: every script and style is a relative file, nothing from the network
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert re.findall(r'<script src="([^"]+)"', html) == [
        "assets/vendor/cytoscape.min.js",
        "assets/vendor/cytoscape-dagre.min.js",
        "assets/report.js",
    ]
    data = page_data(index)
    summary = json.loads((report / "summary.json").read_text())
    assert {k: v for k, v in data["summary"].items() if k != "accuracy"} == summary
    assert data["summary"]["accuracy"] is None
    assert summary["records"] > 0  # the graphs are loaded once by the CLI, and still counted
    rows = {row["case_id"]: row for row in data["cases"]}
    assert len(rows) == len(EXPECTED) == len(list((report / "cases").glob("*.js")))
    for fault, (error_type, op_name) in EXPECTED.items():
        row = rows[f"case-{fault}"]
        assert (row["error_type"], row["op_name"]) == (error_type, op_name)
        view = case_file(report / "cases" / f"{row['key']}.js")
        assert view["key"] == row["key"] and view["case_id"] == f"case-{fault}"
        culprits = [n for n in view["nodes"] if n["culprit"]]
        assert [n["id"] for n in culprits] == [row["op_id"]]
        assert row["nodes"] == len(view["nodes"])
    assert f"report: {index}" in capsys.readouterr().err


def test_case_view_marks_culprit_path_and_op_details(
    batch: tuple[list[Verdict], dict[str, nx.MultiDiGraph], Any],
) -> None:
    verdicts, graphs, _ = batch
    verdict = next(v for v in verdicts if v.case_id == "case-retrieval")
    G = graphs["user-retrieval"]
    view = case_view(G, verdict.case_id, verdict, jaeger_url=JAEGER, tempo_url=GRAFANA)
    nodes = {n["id"]: n for n in view["nodes"]}
    assert set(nodes) == set(case_subgraph(G, "case-retrieval"))
    assert [n["order"] for n in view["nodes"]] == list(range(len(nodes)))
    culprit = nodes[verdict.op_id or ""]
    assert culprit["culprit"] and culprit["path"] and culprit["focus"]
    assert culprit["kind"] == "retrieve" and culprit["stage"] == "retrieval"
    # the evidence path runs from the message through extraction and storage to the search
    path = [n["id"] for n in view["nodes"] if n["path"]]
    assert path[0] == "msg:case-retrieval:1@1" and path[-1] == verdict.op_id
    assert "mem:msg:case-retrieval:1@1" in path and "msg:case-retrieval:2@1" not in path
    # inputs and outputs, with the values the panel shows
    assert "query:case-retrieval@1" in culprit["inputs"]
    assert culprit["outputs"] == ["cands:case-retrieval@1"]
    assert nodes["query:case-retrieval@1"]["value"] == "Where does Ana live?"
    assert culprit["start"].endswith("Z") and culprit["duration_ms"] >= 0
    assert culprit["links"]["jaeger"] == jaeger_link(
        JAEGER, culprit["trace_id"], culprit["span_id"]
    )
    assert culprit["links"]["tempo"].startswith(GRAFANA + "/explore?")
    assert view["stages"] == ["input", "construction", "retrieval", "response", "evaluation"]
    # variables of the construction stage that the question did not touch collapse away
    assert not nodes["msg:case-retrieval:2@1"]["focus"]


def test_evidence_path_without_culprit_is_the_evidence_alone(
    batch: tuple[list[Verdict], dict[str, nx.MultiDiGraph], Any],
) -> None:
    _, graphs, _ = batch
    G = case_subgraph(graphs["user-update"], "case-update")
    verdict = Verdict(
        "case-update", None, None, None, "evidence", 0.0, evidence_refs=("msg:case-update:1@1",)
    )
    assert evidence_path(G, verdict) == ["msg:case-update:1@1"]
    assert evidence_path(G, None) == []


def test_case_missing_from_the_graphs_gets_a_message(tmp_path: Path) -> None:
    verdict = Verdict("ghost", None, None, None, "evidence", 0.0, reason="not in the traces")
    index = write_report(tmp_path, [verdict], {}, {"cases": 1, "attributed": 0})
    row = page_data(index)["cases"][0]
    view = case_file(tmp_path / "cases" / f"{row['key']}.js")
    assert view["nodes"] == [] and "no op belongs to case 'ghost'" in view["missing"]
    assert row["nodes"] is None and row["error_type"] is None


def test_labels_give_accuracy_in_report_and_on_stderr(
    workload: tuple[Path, Path],
    batch: tuple[list[Verdict], dict[str, nx.MultiDiGraph], Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    traces, cases = workload
    verdicts, _, _ = batch
    labels = write_labels(tmp_path / "labels.jsonl", verdicts, wrong="case-filter")
    report = tmp_path / "report"
    args = ["attribute", str(traces), "--cases", str(cases), "--report", str(report)]
    assert main([*args, "--labels", str(labels), "--quiet"]) == 0
    assert (
        "accuracy against labels: error type 6/7 (85.7%), culprit op 6/7 (85.7%)"
        in capsys.readouterr().err
    )
    data = page_data(report / "index.html")
    accuracy = data["summary"]["accuracy"]
    assert accuracy["compared"] == 7 and accuracy["error_type_correct"] == 6
    assert accuracy["confusion"]["UpdateError"] == {"RetrievalError": 1, "UpdateError": 1}
    rows = {row["case_id"]: row for row in data["cases"]}
    assert rows["case-filter"]["type_match"] is False and rows["case-filter"]["op_match"] is False
    assert rows["case-update"]["type_match"] is True and rows["case-update"]["op_match"] is True
    view = case_file(report / "cases" / f"{rows['case-filter']['key']}.js")
    assert view["label"]["error_type"] == "UpdateError" and view["label"]["source"] == "test"


def test_label_accuracy_counts_unattributed_as_wrong_and_reports_gaps() -> None:
    verdicts = [
        Verdict("a", "RetrievalError", "op1", "s", "m", 1.0),
        Verdict("b", None, None, None, "m", 0.0),
        Verdict("c", "ResponseError", "op3", "g", "m", 1.0),
    ]
    labels = {
        "a": Label("a", "RetrievalError", "op1"),
        "b": Label("b", "RetrievalError"),
        "d": Label("d", "UpdateError", "op4"),
    }
    acc = label_accuracy(verdicts, labels)
    assert (acc["compared"], acc["error_type_correct"], acc["error_type_accuracy"]) == (2, 1, 0.5)
    assert (acc["op_id_compared"], acc["op_id_correct"]) == (1, 1)
    assert acc["labelled_without_verdict"] == ["d"] and acc["unlabelled_verdicts"] == 1
    assert acc["confusion"]["RetrievalError"] == {"RetrievalError": 1, "(none)": 1}


@pytest.mark.parametrize(
    ("line", "message", "field"),
    [
        ("{not json", "invalid JSON", None),
        ('["a"]', "expected a JSON object", None),
        ('{"error_type": "RetrievalError"}', "missing or empty case_id", "case_id"),
        ('{"case_id": "a", "op_id": 7}', "expected a string", "op_id"),
    ],
)
def test_bad_labels_name_file_line_and_field(
    tmp_path: Path, line: str, message: str, field: str | None
) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text('{"case_id": "ok"}\n\n' + line + "\n")
    with pytest.raises(DecodeError, match=message) as info:
        load_labels(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 3, field)


def test_hostile_values_are_kept_as_data_and_never_as_markup(tmp_path: Path) -> None:
    traces, cases = write_hostile_workload(tmp_path)
    report = tmp_path / "report"
    assert main(
        ["attribute", str(traces), "--cases", str(cases), "--report", str(report), "--quiet"]
    ) in (0, 1)
    html = (report / "index.html").read_text()
    case_js = next((report / "cases").glob("*.js")).read_text()
    for text in (html, case_js):
        assert "<img" not in text and "</script><script>" not in text and "<!--" not in text
    data = page_data(report / "index.html")
    assert data["cases"][0]["case_id"] == "case-" + INJECTION
    view = case_file(next((report / "cases").glob("*.js")))
    values = [n.get("value") for n in view["nodes"]]
    assert "My sister Ana moved to Porto. " + INJECTION in values
    # whichever op the method blames, the page marks it
    assert [n["id"] for n in view["nodes"] if n["culprit"]] == [view["verdict"]["op_id"]]


def test_template_markers_in_data_are_never_substituted(tmp_path: Path) -> None:
    """Issue 23: a value, case id or op name holding ``%%SCRIPTS%%`` (or Jinja2 syntax) is data,
    rendered once and escaped, in the report and in the one-case page."""
    traces, cases = write_hostile_workload(tmp_path, MARKERS, in_op_names=True)
    report = tmp_path / "report"
    args = ["attribute", str(traces), "--cases", str(cases), "--report", str(report), "--quiet"]
    assert main(args) in (0, 1)
    index = report / "index.html"
    # the data and three shipped scripts, each on its own line
    assert len(re.findall("^<script", index.read_text(), re.M)) == 4
    data = page_data(index)
    assert [row["case_id"] for row in data["cases"]] == ["case-" + MARKERS]
    view = case_file(next((report / "cases").glob("*.js")))
    assert "My sister Ana moved to Porto. " + MARKERS in [n.get("value") for n in view["nodes"]]
    names = [n["name"] for n in view["nodes"] if n["type"] == "op"]
    assert len(names) == 9 and all(name.endswith(" " + MARKERS) for name in names)
    single = tmp_path / "case.html"
    assert main(["graph", str(traces), "--case", "case-" + MARKERS, "-o", str(single)]) == 0
    html = single.read_text()
    assert len(re.findall("^<script", html, re.M)) == 5  # two data blocks, three scripts
    assert "<title>memtrace case case-%%SCRIPTS%%" in html
    assert inline_case(single)["case_id"] == "case-" + MARKERS
    assert page_data(single)["cases"][0]["case_id"] == "case-" + MARKERS


def test_rewriting_a_report_drops_stale_cases(
    batch: tuple[list[Verdict], dict[str, nx.MultiDiGraph], Any], tmp_path: Path
) -> None:
    verdicts, graphs, summary = batch
    write_report(tmp_path, verdicts, graphs, summary)
    assert len(list((tmp_path / "cases").glob("*.js"))) == 7
    index = write_report(tmp_path, verdicts[:2], graphs, summary)
    assert len(list((tmp_path / "cases").glob("*.js"))) == 2
    assert len(page_data(index)["cases"]) == 2


def test_a_resumed_run_still_lists_every_verdict(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    out, report = tmp_path / "v.jsonl", tmp_path / "report"
    args = ["attribute", str(traces), "--cases", str(cases), "--out", str(out), "--quiet"]
    assert main(args) == 0
    assert main([*args, "--report", str(report)]) == 0
    data = page_data(report / "index.html")
    # The summary describes every verdict in --out, not only this run's (issue 20).
    assert data["summary"]["resumed"] == 7 and data["summary"]["attributed"] == 7
    assert data["summary"]["new"] == 0 and data["summary"]["in_out"] == 7
    assert {r["case_id"] for r in data["cases"]} == {v.case_id for v in read_verdicts(out)}


@pytest.mark.parametrize("option", ["--jaeger-url", "--tempo-url"])
def test_span_link_urls_must_be_http(
    workload: tuple[Path, Path], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["attribute", str(workload[0]), option, "javascript:alert(1)"]) == 2
    assert f"{option} must be an http:// or https:// URL" in capsys.readouterr().err


def test_span_links() -> None:
    assert jaeger_link(JAEGER + "/", "ab", "cd") == JAEGER + "/trace/ab?uiFind=cd"
    template = "https://grafana.example/t/{trace_id}?span={span_id}"
    assert tempo_link(template, "ab", "cd") == "https://grafana.example/t/ab?span=cd"
    link = tempo_link(GRAFANA, "ab", "cd", start_ms=10_000_000, end_ms=10_000_005)
    panes = json.loads(
        __import__("urllib.parse").parse.unquote(link.split("panes=")[1].split("&")[0])
    )
    pane = panes["memtrace"]
    assert pane["queries"][0]["query"] == "ab" and pane["panelsState"]["trace"]["spanId"] == "cd"
    assert pane["range"] == {"from": "6400000", "to": "13600005"}


# --- memtrace graph -----------------------------------------------------------------------------


def test_graph_command_json_dot_and_graphml(
    workload: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, _ = workload
    expected = case_subgraph(load_store_graphs([str(traces)])["user-update"], "case-update")
    assert main(["graph", str(traces), "--case", "case-update", "--format", "json"]) == 0
    H = from_node_link_json(capsys.readouterr().out)
    assert set(H) == set(expected) and H.graph["case_id"] == "case-update"
    assert main(["graph", str(traces), "--case", "case-update", "--format", "dot"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith("digraph memtrace {") and '"mem:msg:case-update:1@2"' in dot
    out = tmp_path / "case.graphml"
    assert (
        main(["graph", str(traces), "--case", "case-update", "--format", "graphml", "-o", str(out)])
        == 0
    )
    assert set(nx.read_graphml(out, force_multigraph=True)) == set(expected)
    assert main(["graph", str(traces), "--case", "case-update", "--format", "graphml"]) == 0
    assert capsys.readouterr().out.startswith("<?xml")


def test_graph_command_html_is_one_self_contained_page(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    out = tmp_path / "case.html"
    args = ["graph", str(traces), "--case", "case-deletion", "-o", str(out)]
    assert main([*args, "--jaeger-url", JAEGER]) == 0
    html = out.read_text()
    assert "<script src=" not in html and '<link rel="stylesheet"' not in html
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp is not None and "'unsafe-inline'" not in csp.group(1).split("style-src")[0]
    assert csp.group(1).count("'sha256-") == 3
    data = page_data(out)
    assert data["single"] is True and data["cases"][0]["error_type"] == "DeletionError"
    view = inline_case(out)
    culprit = next(n for n in view["nodes"] if n["culprit"])
    assert culprit["name"] == "test.forget" and culprit["links"]["jaeger"].startswith(JAEGER)
    # --method none draws the graph without a culprit; --verdicts takes the verdict from a file
    assert main([*args, "--method", "none"]) == 0
    assert not any(n["culprit"] for n in inline_case(out)["nodes"])
    verdicts = tmp_path / "v.jsonl"
    assert (
        main(["attribute", str(traces), "--cases", str(cases), "--out", str(verdicts), "--quiet"])
        == 0
    )
    assert main([*args, "--verdicts", str(verdicts)]) == 0
    assert page_data(out)["cases"][0]["op_name"] == "test.forget"


def test_graph_command_unknown_case_is_a_one_line_error(
    workload: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["graph", str(workload[0]), "--case", "nope", "--format", "dot"]) == 2
    err = capsys.readouterr().err
    assert err.strip().startswith("memtrace: error: no op belongs to case 'nope' in the sources")
    assert "nearest of the 8 case ids: " in err and len(err.strip().splitlines()) == 1


# --- the list, the reasons and the timeline (issue 33) ------------------------------------------


def _report_data(report: Path) -> dict[str, Any]:
    match = re.search(
        r'<script type="application/json" id="memtrace-report">(.*?)</script>',
        (report / "index.html").read_text(),
        re.S,
    )
    assert match
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def _batch_report(tmp_path: Path, capture: str) -> tuple[Path, list[Verdict]]:
    traces, cases = write_workload(tmp_path, capture=capture)
    out = tmp_path / "verdicts.jsonl"
    report = tmp_path / "report"
    args = ["attribute", str(traces), "--cases", str(cases), "--out", str(out)]
    assert main([*args, "--report", str(report), "--quiet"]) == 0
    return report, list(read_verdicts(out))


def test_rows_carry_question_answers_and_reasons_naming_records_by_text(tmp_path: Path) -> None:
    report, verdicts = _batch_report(tmp_path, "SPAN_AND_EVENT")
    rows = {r["case_id"]: r for r in _report_data(report)["cases"]}
    row = rows["case-retrieval"]
    assert row["question"] == "Where does Ana live?"
    assert row["expected"] and row["prediction"] is not None
    # The report names the evidence message by its text; the verdict itself keeps the ref only.
    assert "“My sister Ana moved to Porto last May.” (msg:case-retrieval:1@1)" in row["reason_text"]
    by_case = {v.case_id: v for v in verdicts}
    assert "msg:case-retrieval:1@1" in by_case["case-retrieval"].reason
    assert "Porto" not in by_case["case-retrieval"].reason
    assert row["reason"] == by_case["case-retrieval"].reason


def test_without_captured_content_reasons_name_records_by_a_short_label(tmp_path: Path) -> None:
    report, _ = _batch_report(tmp_path, "NO_CONTENT")
    rows = _report_data(report)["cases"]
    for row in rows:
        assert "“" not in row["reason_text"], row  # no text that capture did not record
    named = [r for r in rows if re.search(r"\S+@\d+", r["reason"])]
    assert named
    for row in named:
        for ref in re.findall(r"[^\s,;()]+@\d+", row["reason"]):
            assert ref.rstrip(".:") in row["reason_text"], (ref, row["reason_text"])


def test_case_numbers_follow_answer_order_and_timelines_are_in_time_order(tmp_path: Path) -> None:
    report, _ = _batch_report(tmp_path, "SPAN_AND_EVENT")
    data = _report_data(report)
    rows = data["cases"]
    assert [r["key"] for r in rows] == sorted(r["key"] for r in rows)
    answered = [r["answered"] for r in rows]
    assert answered == sorted(answered) and all(answered)
    keys = {r["case_id"]: r["key"] for r in rows}
    assert len(data["timelines"]) == len({r["store"] for r in rows})
    for entry in data["timelines"]:
        text = (report / "timelines" / f"{entry['key']}.js").read_text()
        timeline = json.loads(text[len("window.__memtraceTimeline(") : -3])
        assert timeline["store"] == entry["store"]
        times = [e["time"] for e in timeline["events"]]
        assert times == sorted(times)
        roles = {e["role"] for e in timeline["events"]}
        assert {"write", "read", "answer"} <= roles
        failed = [e for e in timeline["events"] if e["role"] == "answer" and e["key"]]
        assert failed and all(keys[e["case"]] == e["key"] for e in failed)


def _timelines(report: Path) -> dict[str, Any]:
    found = {}
    for entry in _report_data(report)["timelines"]:
        text = (report / "timelines" / f"{entry['key']}.js").read_text()
        found[entry["store"]] = (entry, json.loads(text[len("window.__memtraceTimeline(") : -3]))
    return found


@pytest.mark.parametrize("executor", ["inline", "local[2]"])
def test_streamed_runs_draw_the_same_timelines_as_in_memory_runs(
    tmp_path: Path, executor: str
) -> None:
    """Issue 33: the per-store timelines were drawn from the graphs of an in-memory run only,
    so an export streamed by store (large ones, by default) had none."""
    traces, cases = write_workload(tmp_path)
    args = ["attribute", str(traces), "--cases", str(cases), "--quiet", "--report"]
    assert main([*args, str(tmp_path / "memory")]) == 0
    assert main([*args, str(tmp_path / "streamed"), "--executor", executor]) == 0
    in_memory = _timelines(tmp_path / "memory")
    assert len(in_memory) >= 5 and all(t["events"] for _, t in in_memory.values())
    assert _timelines(tmp_path / "streamed") == in_memory
    for page in (tmp_path / "streamed" / "cases").glob("*.js"):
        assert '"timeline"' not in page.read_text()  # carried to the report, not into a page


def test_short_ids_cut_long_hex_runs_only() -> None:
    from memtrace_otel.reporting._view import short_id

    assert short_id("0af7651916cd43dd8448eb211c80319c") == "0af76519…"
    assert short_id("case-retrieval") == "case-retrieval"
    assert short_id("q-17") == "q-17"

"""Exit statuses and losses reported as losses (issue 32, items 6 and 9): one table (README.md)
that the constants match; ``memtrace feedback`` fails when its span was not exported; "no
traces" told apart from "nothing marked wrong"; an internal error has its own status; and the
summary line, which scripts and benchmarks read, parses."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import memtrace_otel.cli as cli
from memtrace_otel.cli import main
from memtrace_otel.instrumentation import AnswerRef
from memtrace_otel.job import parse_summary_line
from tests._otlp_receiver import otlp_receiver
from tests._pipeline import write_workload

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_table_is_the_constants() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Exit statuses", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (\d+) \| `(EXIT_[A-Z_]+)` \|", section, re.MULTILINE)
    table = {name: int(status) for status, name in rows}
    constants = {k: v for k, v in vars(cli).items() if k.startswith("EXIT_")}
    assert table == constants
    assert len(set(table.values())) == len(table)  # one meaning per status


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_feedback_to_an_unreachable_endpoint_fails_and_prints_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Break 6a: exit 0 and a traceparent printed as if the feedback were sent."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "3000")
    code = main(["feedback", "--case-id", "q-1", "--wrong"])
    captured = capsys.readouterr()
    assert code == cli.EXIT_FAILURES
    assert captured.out == ""
    assert "1 of 1 feedback spans were not exported" in captured.err and endpoint in captured.err


def test_feedback_to_a_live_endpoint_succeeds(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        code = main(["feedback", "--case-id", "q-1", "--wrong"])
        spans = list(receiver.spans)
    assert code == cli.EXIT_OK
    (printed,) = capsys.readouterr().out.split()
    assert [s.span_id.hex() for s in spans] == [printed.split("-")[2]]


@contextmanager
def _empty_jaeger() -> Iterator[str]:
    """A Jaeger query API on loopback whose search finds nothing (a ?service= matching nothing,
    or traces the Collector's tail sampling has not exported yet): what Jaeger v2 answers."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"error": {"httpCode": 404, "message": "No traces found"}}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_no_traces_is_told_apart_from_nothing_marked_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Break 6b: a ?service= matching nothing (or tail sampling not flushed) said "no answer in
    these traces is marked wrong"."""
    with _empty_jaeger() as url:
        code = main(["attribute", f"jaeger+{url}?service=typo&lookback=5m", "--quiet"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_NOTHING_TO_ATTRIBUTE
    assert "no traces were found for these sources" in err and "tail sampling" in err
    assert "marked wrong. Mark one" not in err
    traces, _ = write_workload(tmp_path, judge=False, faults=("update",))
    assert main(["attribute", str(traces), "--quiet"]) == cli.EXIT_NOTHING_TO_ATTRIBUTE
    err = capsys.readouterr().err
    assert "no answer in these traces is marked wrong" in err and "no traces were found" not in err


def test_feedback_before_its_trace_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feedback = tmp_path / "feedback.jsonl"
    answer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert (
        main(["feedback", "--traceparent", answer, "--wrong", "--traces-file", str(feedback)]) == 0
    )
    capsys.readouterr()
    assert main(["attribute", str(feedback), "--quiet"]) == cli.EXIT_NOTHING_TO_ATTRIBUTE
    err = capsys.readouterr().err
    assert "1 feedback name answers whose traces are not in these sources" in err
    assert "tail sampling" in err


def test_an_internal_error_has_its_own_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Break 9: an uncaught traceback exited 1, like "some records skipped"."""
    traces, _ = write_workload(tmp_path, faults=("update",))
    import memtrace_otel.cli.graph as graph_command

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")  # stands in for any bug: no real input reaches one

    monkeypatch.setattr(graph_command, "case_subgraph", broken)
    code = main(["graph", str(traces), "--case", "case-update", "--format", "dot"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_INTERNAL != cli.EXIT_FAILURES
    assert "Traceback" in err and "RuntimeError: a bug" in err and "internal error" in err


@pytest.mark.parametrize("with_out", [False, True])
def test_the_summary_line_parses_to_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_out: bool
) -> None:
    answers: dict[str, AnswerRef] = {}
    traces, cases = write_workload(tmp_path, answers=answers, faults=("update", "deletion"))
    report = tmp_path / "report"
    argv = ["attribute", str(traces), "--cases", str(cases), "--report", str(report), "--quiet"]
    if with_out:
        argv += ["--out", str(tmp_path / "verdicts.jsonl")]
    assert main(argv) == cli.EXIT_OK
    err = capsys.readouterr().err
    counts = parse_summary_line(err)
    assert counts is not None, err
    summary = json.loads((report / "summary.json").read_text())
    assert counts["cases"] == summary["cases"] == 2
    assert counts["attributed"] == summary["attributed"]
    assert counts["unattributed"] == summary["unattributed"]
    assert counts["records"] == summary["records"] > 0
    assert counts["skipped"] == summary["skipped_records"] == 0
    assert counts["failed"] == len(summary["failed"])
    assert ("in_out" in counts) is with_out

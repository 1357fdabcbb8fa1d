"""The batch job on a real Jaeger v2 holding more traces than any page: nothing dropped, truncated
or failed without saying so (issue 20), and verdict spans never lost (issue 23).

About 550 traces of two reference systems go to Jaeger over OTLP/gRPC; the same spans go to a
file. `memtrace attribute` on `jaeger+http://` with the default page (100 traces) must page
through the window and give the verdicts of the file run; a bound below the window must be said
and fail the run, and the cases it left out must be retried; write-back must count what the
endpoint refused and resend it on the next run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from memtrace_bench.systems import generate_benchmark, generate_workload
from memtrace_otel.cli import main
from memtrace_otel.sources import open_source
from memtrace_otel.sources._backends import JaegerSource
from tests._backends import JaegerServer, free_ports, http_get, wait_until

USERS = 13  # about 550 traces: more than five default pages


@pytest.fixture(scope="module")
def bench(jaeger: JaegerServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The benchmark in a file and in Jaeger (all of its traces searchable)."""
    out = tmp_path_factory.mktemp("bench")
    exporter = OTLPSpanExporter(endpoint=jaeger.otlp_grpc_endpoint, insecure=True)
    generate_benchmark(
        out,
        workload=generate_workload(USERS, 5),
        systems=["rag", "mem0"],
        seed=5,
        faults="all=0.05",
        extra_processors=[BatchSpanProcessor(exporter, max_queue_size=65536)],
    )
    traces = {r.trace_id for r in open_source(str(out / "traces.jsonl")).records()}
    assert len(traces) >= 500
    url = f"jaeger+{jaeger.query_url}?service=memtrace-bench&lookback=1h"

    def all_in() -> bool | None:
        source = open_source(url, max_traces=100_000, follow_links=0)
        found = {r.trace_id for r in source.records()}
        return True if found >= traces else None

    wait_until(all_in, timeout=120, interval=1.0, what=f"{len(traces)} traces in Jaeger")
    return {"dir": out, "traces": traces, "url": url}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _verdicts(path: Path) -> dict[str, tuple[Any, ...]]:
    """The latest verdict of each case, without when it was made."""
    latest = {row["case_id"]: row for row in _lines(path)}
    return {
        case: tuple(v for k, v in sorted(row.items()) if k not in ("attributed_at", "pending"))
        for case, row in latest.items()
    }


def test_jaeger_run_pages_through_the_window_and_matches_the_file_run(
    bench: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = str(bench["dir"] / "cases.jsonl")
    from_file = tmp_path / "file.jsonl"
    assert main(["attribute", str(bench["dir"] / "traces.jsonl"), "--cases", cases,
                 "--out", str(from_file), "--quiet"]) == 0  # fmt: skip
    started = time.perf_counter()
    from_jaeger = tmp_path / "jaeger.jsonl"
    code = main(["attribute", bench["url"], "--cases", cases, "--out", str(from_jaeger),
                 "--report", str(tmp_path / "rep"), "--quiet"])  # fmt: skip
    seconds = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    # Every trace of the window, in several pages of at most 100 traces (plus linked ones).
    assert summary["traces_fetched"] >= len(bench["traces"])
    assert summary["pages"] > len(bench["traces"]) // 100
    assert summary["capped"] == []
    print(
        f"\njaeger+http: {summary['traces_fetched']} traces, {summary['pages']} search pages, "
        f"{summary['records']} spans, {seconds:.1f} s"
    )
    assert _verdicts(from_jaeger) == _verdicts(from_file)
    assert len(_verdicts(from_file)) == sum(
        1 for c in _lines(bench["dir"] / "cases.jsonl") if c["verdict"] == "incorrect"
    )
    # A rerun resumes every case, and its report and summary still describe all of them.
    assert main(["attribute", bench["url"], "--cases", cases, "--out", str(from_jaeger),
                 "--report", str(tmp_path / "rep"), "--quiet"]) == 0  # fmt: skip
    again = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert again["resumed"] == again["in_out"] == len(_verdicts(from_file)) and again["new"] == 0
    assert again["by_error_type"] == summary["by_error_type"] != {}
    assert again["attributed"] == summary["attributed"]


def test_a_bound_below_the_window_is_said_and_its_cases_are_retried(
    bench: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = str(bench["dir"] / "cases.jsonl")
    out = tmp_path / "v.jsonl"
    code = main(["attribute", bench["url"], "--cases", cases, "--out", str(out),
                 "--max-traces", "150", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "INCOMPLETE" in err and "--max-traces" in err and "max_traces=150" in err
    # Every verdict of a capped run is retried: a store's writes need not be linked from its
    # questions, so a case whose traces all came may still lack its store's deletion (a verdict
    # made so blamed the wrong op, depending on which traces the window held).
    rows = _lines(out)
    assert rows and all(row.get("pending") == "capped" for row in rows)
    # The next run, with room, redoes exactly those and ends with the full run's verdicts.
    assert main(["attribute", bench["url"], "--cases", cases, "--out", str(out), "--quiet"]) == 0
    full = tmp_path / "full.jsonl"
    assert main(["attribute", str(bench["dir"] / "traces.jsonl"), "--cases", cases,
                 "--out", str(full), "--quiet"]) == 0  # fmt: skip
    assert _verdicts(out) == _verdicts(full)
    assert not any(row.get("pending") for row in {r["case_id"]: r for r in _lines(out)}.values())


def test_the_source_alone_reports_pages_and_the_bound() -> None:
    # (the fixture-free part: the URL option is validated before any request)
    with pytest.raises(ValueError, match="max_traces"):
        open_source("jaeger+http://127.0.0.1:1?service=x&max_traces=0")


def test_write_back_counts_refusals_and_resends_them_next_run(
    bench: dict[str, Any],
    jaeger: JaegerServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cases = str(bench["dir"] / "cases.jsonl")
    traces = str(bench["dir"] / "traces.jsonl")
    out = tmp_path / "v.jsonl"
    # The endpoint is down: nothing is accepted, the run says so and fails.
    (down,) = free_ports(1)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{down}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    code = main(["attribute", traces, "--cases", cases, "--out", str(out), "--write-back",
                 "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    total = len(_verdicts(out))
    assert code == 1
    assert f"write-back: 0 verdict spans sent, {total} not sent" in err
    assert "the next run with --write-back resends them" in err
    # The endpoint is up (Jaeger's OTLP/gRPC receiver): the next run sends what was not sent.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{jaeger.otlp_grpc_endpoint}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    code = main(["attribute", traces, "--cases", cases, "--out", str(out), "--write-back",
                 "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"write-back: {total} verdict spans sent, 0 not sent" in err
    # Nothing left to send: a third run sends nothing again.
    assert main(["attribute", traces, "--cases", cases, "--out", str(out), "--write-back",
                 "--quiet"]) == 0  # fmt: skip
    assert "write-back:" not in capsys.readouterr().err

    def arrived() -> int | None:
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
        end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
        status, body = http_get(
            f"{jaeger.query_url}/api/v3/traces?query.service_name=memtrace-attribution"
            f"&query.start_time_min={start}&query.start_time_max={end}"
            "&query.search_depth=5000&query.num_traces=5000"
        )
        if status != 200:
            return None
        # Verdict spans sit in their culprits' traces: the query returns those whole.
        spans = [
            s
            for rs in json.loads(body)["result"]["resourceSpans"]
            for ss in rs["scopeSpans"]
            for s in ss["spans"]
            if s["name"] == "memtrace.attribution"
        ]
        return len(spans) if len(spans) >= total else None

    assert wait_until(arrived, timeout=60, interval=1.0, what="verdict spans in Jaeger") == total


def test_a_jaeger_source_with_the_default_page_exhausts_the_window(
    bench: dict[str, Any], jaeger: JaegerServer
) -> None:
    source = JaegerSource(jaeger.query_url, service="memtrace-bench", lookback="1h", follow_links=0)
    found = {r.trace_id for r in source.records()}
    assert found == bench["traces"]
    assert source.stats.pages >= len(found) // 100 and not source.stats.capped
    small = JaegerSource(
        jaeger.query_url, service="memtrace-bench", lookback="1h", follow_links=0, max_traces=120
    )
    assert len({r.trace_id for r in small.records()}) == 120
    assert "max_traces=120" in small.stats.capped and "--max-traces" in small.stats.capped


# --- without a backend: messages, --out safety, duplicates, progress ---------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("small")
    generate_benchmark(out, workload=generate_workload(2, 5), systems=["rag"], seed=5,
                       faults="all=0.1")  # fmt: skip
    return out


def test_unknown_case_lists_the_nearest_ids(
    small: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = str(small / "traces.jsonl")
    assert main(["graph", traces, "--case", "rag:user-01:q99", "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert "nearest of the" in err and "rag:user-01:q" in err


def test_out_refuses_a_foreign_file_unchanged_and_a_second_run(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, cases = str(small / "traces.jsonl"), str(small / "cases.jsonl")
    foreign = tmp_path / "cases-copy.jsonl"
    foreign.write_bytes((small / "cases.jsonl").read_bytes()[:-5])  # no final newline either
    before = foreign.read_bytes()
    assert main(["attribute", traces, "--cases", cases, "--out", str(foreign), "--quiet"]) == 2
    assert "not a verdict line" in capsys.readouterr().err
    assert foreign.read_bytes() == before
    from memtrace_otel.job._verdict_log import VerdictLog

    out = tmp_path / "v.jsonl"
    with VerdictLog(out):  # another run holds the lock
        assert main(["attribute", traces, "--cases", cases, "--out", str(out), "--quiet"]) == 2
        assert "another memtrace attribute run is writing it" in capsys.readouterr().err
    assert main(["attribute", traces, "--cases", cases, "--out", str(out), "--quiet"]) == 0


def test_exact_duplicates_pass_and_conflicts_fail(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (small / "traces.jsonl").read_text().splitlines(keepends=True)
    retried = tmp_path / "retried.jsonl"
    retried.write_text("".join(lines + lines[:3]))  # a Collector retry: at-least-once delivery
    cases = str(small / "cases.jsonl")
    assert main(["attribute", str(retried), "--cases", cases, "--quiet"]) == 0
    assert "exact duplicate spans dropped" in capsys.readouterr().err
    changed = json.loads(lines[0])
    span = changed["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["name"] = span["name"] + "-rewritten"
    conflict = tmp_path / "conflict.jsonl"
    conflict.write_text("".join(lines) + json.dumps(changed) + "\n")
    assert main(["attribute", str(conflict), "--cases", cases, "--quiet"]) == 1


def test_progress_in_a_log_is_plain_lines(small: Path, tmp_path: Path) -> None:
    import io

    from memtrace_otel.attribution import get_method
    from memtrace_otel.job import run_batch

    log = io.StringIO()
    run_batch([str(small / "traces.jsonl")], get_method("evidence"), progress=log)
    text = log.getvalue()
    assert "\r" not in text
    assert "loading" in text and "attributing: done" in text


def test_tempo_search_is_sliced_until_every_slice_holds_less_than_a_page() -> None:
    """A scripted Tempo that honours start/end and limit, as Tempo does: 250 traces, pages of 40."""
    import threading
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from memtrace_otel.sources._backends import TempoSource

    now = int(time.time())
    starts = {f"{n + 1:032x}": now - 3000 + 10 * n for n in range(250)}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            lo, hi = int(query["start"][0]), int(query["end"][0])
            hits = [t for t, s in starts.items() if lo <= s <= hi][: int(query["limit"][0])]
            body = json.dumps({"traces": [{"traceID": t} for t in hits]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        source = TempoSource(url, lookback="1h", limit=40, follow_links=0)
        ids = source._slices()
        found = {t for _, page in ids for t in page}
        assert found == set(starts) and not source.stats.capped
        assert source.stats.pages > 250 // 40
        capped = TempoSource(url, lookback="1h", limit=40, follow_links=0, max_traces=100)
        assert len({t for _, page in capped._slices() for t in page}) == 100
        assert "max_traces=100" in capped.stats.capped
    finally:
        server.shutdown()

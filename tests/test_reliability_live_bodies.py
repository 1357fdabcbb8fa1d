"""Issue 20, bad input from a live backend: bodies cut short, trickled, too large, or after a 500.

``memtrace attribute "jaeger+http://..."`` and ``"tempo+http://..."`` run as a real process
against a real HTTP server on 127.0.0.1 (the standard library's, in a thread) that serves the
workload's traces and misbehaves on one route. Each bad body must end the run in bounded time
(a bound derived from the timeout flags the test passes, not a performance assertion) with one
line naming the URL, exit status 2 and no verdict or report written as if the run were complete;
a 500 followed by a good answer is retried (the one retry policy) and gives the file run's
verdicts. (Redirects to another origin: ``tests/test_reliability_cli.py``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.export import encode_request
from memtrace_otel.job import read_verdicts
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import open_source
from tests._pipeline import write_workload

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 5.0
"""``--timeout``: seconds one connect or read may wait."""
TOTAL = 1.0
"""``--total-timeout``: seconds one request may take, body included."""
TRICKLE_GAP = 0.2
"""Seconds between two bytes of a trickled body."""
CAP = 64 * 1024
"""``MEMTRACE_MAX_RESPONSE_BYTES`` of the huge-body runs."""
STARTUP = 60.0
"""Seconds a Python process may take to start and import under load (generous)."""


@dataclass
class Backend:
    """Jaeger's api_v3 and Tempo's search and v2 trace routes over the workload's records; the
    first ``times`` requests of the route ``bad`` get the ``fault``."""

    records: list[SpanRecord]
    bad: str = ""
    fault: str = ""
    times: int = 1_000_000
    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def body(self, path: str) -> dict[str, Any] | None:
        traces = sorted({r.trace_id for r in self.records})
        if path == "/api/v3/traces":
            return {"result": encode_request(self.records)}
        if path == "/api/search":
            return {"traces": [{"traceID": t} for t in traces]}
        trace_id = path.rpartition("/")[2]
        if path.startswith("/api/v2/traces/") and trace_id in traces:
            spans = [r for r in self.records if r.trace_id == trace_id]
            return {"trace": encode_request(spans), "status": "COMPLETE"}
        return None

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.partition("?")[0]
        with self.lock:
            self.seen.append(path)
            faulty = path.startswith(self.bad) and self.fault and self.times > 0
            if faulty:
                self.times -= 1
        body = self.body(path)
        if body is None:
            payload = json.dumps({"error": {"httpCode": 404, "message": "not found"}}).encode()
            _send(handler, 404, payload)
            return
        payload = json.dumps(body).encode()
        if not faulty:
            _send(handler, 200, payload)
        elif self.fault == "500":
            _send(handler, 500, b'{"error": {"message": "internal error"}}')
        elif self.fault == "truncated":  # announces the whole body, closes at half
            _send(handler, 200, payload, send=len(payload) // 2)
        elif self.fault == "trickle":  # one byte every TRICKLE_GAP seconds, never done in time
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            for byte in payload:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(TRICKLE_GAP)
        elif self.fault == "huge":  # a valid start, then no end: far past the cap
            handler.send_response(200)
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.wfile.write(payload[:-2])
            for _ in range(10_000):  # 640 MB if nobody stopped reading
                handler.wfile.write(b" " * 65536)


def _send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, send: int = -1) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload if send < 0 else payload[:send])
    if send >= 0:
        handler.close_connection = True


@contextmanager
def serving(backend: Backend) -> Iterator[Backend]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            try:
                backend.serve(self)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up, as it should

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    backend.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield backend
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[SpanRecord]]:
    traces, cases = write_workload(tmp_path_factory.mktemp("bodies"))
    return traces, cases, list(open_source(str(traces)).records())


def _attribute(
    source: str, cases: Path, folder: Path, retries: int, env: dict[str, str] | None = None
) -> tuple[int, str, float]:
    """Run ``memtrace attribute SOURCE`` in a process; its exit status, stderr and seconds."""
    argv = [sys.executable, "-m", "memtrace_otel.cli", "attribute", source]
    argv += ["--cases", str(cases), "--out", str(folder / "v.jsonl")]
    argv += ["--report", str(folder / "report"), "--quiet"]
    argv += ["--timeout", str(TIMEOUT), "--total-timeout", str(TOTAL), "--retries", str(retries)]
    started = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,  # a hang is a failure
        check=False,
    )
    return done.returncode, done.stderr, time.monotonic() - started


def _spec(kind: str, backend: Backend) -> str:
    scheme = "jaeger" if kind == "jaeger" else "tempo"
    return f"{scheme}+{backend.url}?service=test&lookback=30d"


BAD_ROUTE = {"jaeger": "/api/v3/traces", "tempo": "/api/v2/traces/"}
"""Where the fault is served: Jaeger's search (all traces in one body), one Tempo trace."""


@pytest.mark.parametrize("kind", ["jaeger", "tempo"])
@pytest.mark.parametrize("fault", ["truncated", "trickle", "huge"])
def test_a_bad_body_fails_the_run_in_bounded_time_with_one_line_naming_the_url(
    workload: tuple[Path, Path, list[SpanRecord]], tmp_path: Path, kind: str, fault: str
) -> None:
    _, cases, records = workload
    retries = 2
    env = {E.ENV_MEMTRACE_MAX_RESPONSE_BYTES: str(CAP)} if fault == "huge" else {}
    with serving(Backend(records, BAD_ROUTE[kind], fault)) as backend:
        code, stderr, seconds = _attribute(_spec(kind, backend), cases, tmp_path, retries, env)
        bad_requests = [p for p in backend.seen if p.startswith(BAD_ROUTE[kind])]
        full = len(json.dumps(backend.body(bad_requests[0]) if bad_requests else {}))
    errors = [line for line in stderr.splitlines() if line.startswith("memtrace: error:")]
    print(f"\n[{kind} {fault}] exit {code} in {seconds:.1f} s; {bad_requests[:3]}...: {errors}")
    assert code == 2, stderr[-3000:]
    assert "Traceback" not in stderr
    assert len(errors) == 1 and f"{backend.url}{bad_requests[0]}" in errors[0]
    reason = {
        "truncated": f"cut off: the connection closed before its end ({full // 2} bytes read",
        "trickle": "came too slowly: ",
        "huge": f"over max_response_bytes={CAP}",
    }[fault]
    assert reason in errors[0]
    if fault == "trickle":
        assert f"more than total_timeout={TOTAL:g} s" in errors[0]
    # Bounded: a cut body is retried (the one retry policy), a slow or huge one is not.
    assert len(bad_requests) == (retries + 1 if fault == "truncated" else 1)
    if fault == "trickle":
        # Served whole, the body would take full * TRICKLE_GAP seconds (minutes).
        assert full * TRICKLE_GAP > 20 * (TOTAL + TIMEOUT)
        assert seconds < STARTUP + TOTAL + TIMEOUT
    else:
        assert seconds < STARTUP + retries * 30  # backoff waits at most max_backoff (30 s)
    # Nothing written as if complete: no verdict line, no report.
    out = tmp_path / "v.jsonl"
    assert not out.exists() or out.read_text() == ""
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("kind", ["jaeger", "tempo"])
def test_a_500_then_a_good_answer_is_retried_and_matches_the_file_run(
    workload: tuple[Path, Path, list[SpanRecord]], tmp_path: Path, kind: str
) -> None:
    traces, cases, records = workload
    (tmp_path / "file").mkdir()
    assert _attribute(str(traces), cases, tmp_path / "file", 0)[0] == 0
    expected = {v.case_id: v for v in read_verdicts(tmp_path / "file" / "v.jsonl")}
    with serving(Backend(records, BAD_ROUTE[kind], "500", times=2)) as backend:
        code, stderr, _ = _attribute(_spec(kind, backend), cases, tmp_path, retries=2)
        bad_requests = [p for p in backend.seen if p.startswith(BAD_ROUTE[kind])]
    assert code == 0, stderr[-3000:]
    assert bad_requests[:3] == [bad_requests[0]] * 3  # two 500s, then the answer
    got = {v.case_id: v for v in read_verdicts(tmp_path / "v.jsonl")}
    assert len(got) == 7 and got == expected
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["ok"] is True and summary["skipped_records"] == 0


def test_a_body_that_is_not_json_is_an_error_not_an_empty_result(
    workload: tuple[Path, Path, list[SpanRecord]], tmp_path: Path
) -> None:
    """A proxy's HTML page with status 200 once read as "no traces" (a skip, exit 3)."""
    _, cases, records = workload

    class Proxy(Backend):
        def body(self, path: str) -> Any:
            return None if path == "/api/v3/traces" else super().body(path)

        def serve(self, handler: BaseHTTPRequestHandler) -> None:
            self.seen.append(handler.path)
            _send(handler, 200, b"<html><body>Sign in to continue</body></html>")

    with serving(Proxy(records)) as backend:
        code, stderr, _ = _attribute(_spec("jaeger", backend), cases, tmp_path, retries=0)
    errors = [line for line in stderr.splitlines() if line.startswith("memtrace: error:")]
    assert code == 2 and len(errors) == 1
    assert backend.url + "/api/v3/traces?" in errors[0] and "not JSON" in errors[0]
    assert "Sign in" in errors[0]

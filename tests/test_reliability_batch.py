"""Reliability promises of the offline side (docs/reliability.md): bad input, secrets, kill -9.

Size bombs go through the real loader in a child process, so its peak memory (``ru_maxrss``) is
measured alone; the batch job is killed with SIGKILL mid-run and resumed; an API key and backend
credentials are used for real (the servers on 127.0.0.1 check they arrived) and then searched for
in every log, output, verdict and report file.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtrace_otel.attribution import load_cases, parse_case
from memtrace_otel.errors import DecodeError
from memtrace_otel.job import read_verdicts
from memtrace_otel.sources import HttpOptions, open_source
from tests._openai_server import chat_completion
from tests._pipeline import write_workload

ROOT = Path(__file__).resolve().parents[1]

# --- 3. size bombs -----------------------------------------------------------------------------

BOMB_SCRIPT = r"""
import json, resource, sys, time
from memtrace_otel.sources import open_source
path, strict = sys.argv[1], len(sys.argv) > 2
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    source = open_source(path, strict=strict)
    records = list(source.records())
    out = {
        "records": len(records),
        "skipped": source.stats.skipped_by_kind,
        "truncated": source.stats.truncated_values,
    }
    if records:
        value = records[0].attributes.get("a")
        out["length"] = len(value) if hasattr(value, "__len__") else None
except Exception as exc:
    out = {"error": type(exc).__name__, "message": str(exc)[:200]}
out["seconds"] = time.perf_counter() - start
out["rss_growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
print(json.dumps(out))
"""


def _write_bomb(path: Path, kind: str, size: int) -> None:
    """One OTLP/JSON line whose attribute ``a`` is the bomb, written in chunks (never whole)."""
    chunk = 100_000
    with path.open("w") as f:
        f.write(
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":'
            '"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331",'
            '"name":"memtrace.extract x","attributes":[{"key":"a","value":'
        )
        if kind == "array":
            f.write('{"arrayValue":{"values":[')
            for lo in range(0, size, chunk):
                items = range(lo, min(size, lo + chunk))
                f.write(("," if lo else "") + ",".join(f'{{"intValue":"{i}"}}' for i in items))
            f.write("]}}")
        elif kind == "long":
            f.write('{"stringValue":"')
            for lo in range(0, size, chunk):
                f.write("x" * min(chunk, size - lo))
            f.write('"}')
        else:  # deeply nested kvlists
            f.write('{"kvlistValue":{"values":[{"key":"k","value":' * size)
            f.write('{"stringValue":"leaf"}' + "}]}}" * size)
        f.write("}]}]}]}]}\n")


def _bomb(tmp_path: Path, kind: str, size: int, *, strict: bool = False) -> dict[str, Any]:
    path = tmp_path / f"{kind}.jsonl"
    _write_bomb(path, kind, size)
    argv = [sys.executable, "-c", BOMB_SCRIPT, str(path)]
    done = subprocess.run(
        [*argv, "strict"] if strict else argv,
        capture_output=True,
        text=True,
        timeout=120,  # a hang is a failure, not a slow test
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    size_mb = path.stat().st_size / 1e6
    print(f"\n[bomb {kind} {size}{' strict' if strict else ''}] {size_mb:.1f} MB file: {result}")
    result["file_mb"] = size_mb
    return result


def test_a_million_element_array_is_cut_to_the_cap_and_counted(tmp_path: Path) -> None:
    out = _bomb(tmp_path, "array", 10**6)
    # Cut to DEFAULT_MAX_ARRAY_ITEMS and counted, never dropped silently.
    assert out["records"] == 1 and out["length"] == 10_000 and out["truncated"] == 1
    # 22 MB of JSON: the parsed tree (1e6 dicts) dominates while the line is decoded.
    assert out["rss_growth_mb"] < 40 * out["file_mb"]


def test_a_long_attribute_value_is_cut_to_the_cap_and_counted(tmp_path: Path) -> None:
    size = 50_000_000  # 50 MB keeps CI fast; docs/reliability.md gives the measured scaling
    out = _bomb(tmp_path, "long", size)
    # Cut to DEFAULT_MAX_ATTRIBUTE_BYTES (1 MiB) and counted.
    assert out["records"] == 1 and out["length"] == 1 << 20 and out["truncated"] == 1
    # The line and its decoded text while the line is decoded: a few copies, never more.
    assert out["rss_growth_mb"] < 5 * out["file_mb"]


@pytest.mark.parametrize("strict", [False, True])
def test_deeply_nested_kvlists_are_rejected_with_a_typed_error(
    tmp_path: Path, strict: bool
) -> None:
    out = _bomb(tmp_path, "deep", 10_000, strict=strict)
    if strict:
        assert out["error"] == "DecodeError" and "deep" in out["message"]
    else:
        assert out["records"] == 0 and out["skipped"] == {"invalid_json": 1}
    assert out["rss_growth_mb"] < 256


# --- 4. the cases file -------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = ["case_id", "question", "gold_answers", "evidence_refs", "verdict", "prediction"]
CASE = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), JSON, max_size=7)
# Every field may hold any JSON value (an unhashable "verdict" once raised TypeError).
CASE_HASHABLE_VERDICT = st.fixed_dictionaries({}, optional=dict.fromkeys(FIELDS, JSON))


@settings(max_examples=300, deadline=None)
@given(CASE_HASHABLE_VERDICT)
def test_parse_case_raises_only_decode_errors(obj: dict[str, Any]) -> None:
    try:
        case = parse_case(obj, path="cases.jsonl", line=3)
    except DecodeError as exc:
        assert exc.path == "cases.jsonl" and exc.line == 3
        return
    assert case.case_id == str(obj["case_id"])


def test_an_unhashable_verdict_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        parse_case({"case_id": "a", "verdict": []})


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.binary(max_size=80) | CASE_HASHABLE_VERDICT.map(lambda o: json.dumps(o).encode()),
        max_size=6,
    )
)
def test_load_cases_raises_only_decode_errors_and_counts_every_skip(
    tmp_path: Path, lines: list[bytes]
) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
    skipped: list[str] = []
    cases = list(load_cases(path, strict=False, skipped=skipped))
    nonblank = sum(1 for line in lines if line.replace(b"\n", b" ").strip())
    assert len(cases) + len(skipped) == nonblank  # nothing lost silently
    try:
        strict_cases = list(load_cases(path))
    except DecodeError as exc:
        assert skipped and exc.path == str(path)
    else:
        assert not skipped and strict_cases == cases


@pytest.mark.parametrize("line", [b"[" * 100_000, b'{"case_id": ' + b"1" * 5000 + b"}"])
def test_hostile_json_lines_are_decode_errors(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_bytes(line + b"\n")
    with pytest.raises(DecodeError):
        list(load_cases(path))


# --- 5. secrets never leave --------------------------------------------------------------------

API_KEY = "sk-SECRET-" + "7f3a9c" * 6
TOKEN = "bearer-SECRET-5d1e8b20c4"
PASSWORD = "pw-SECRET-91ac"
SECRETS = (API_KEY, TOKEN, PASSWORD, "SECRET")


class RecordingServer:
    """An HTTP server on 127.0.0.1 that records Authorization headers and answers ``reply``."""

    def __init__(self, reply: Any) -> None:
        self.auth: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                outer.auth.append(self.headers.get("Authorization") or "")
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, body = reply(self.path)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _assert_nowhere(texts: dict[str, str]) -> None:
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked into {where}"


def _files(folder: Path) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_api_key_never_reaches_logs_verdicts_or_reports(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memtrace_otel.cli import main

    traces, cases = write_workload(tmp_path / "w")
    calls = {"n": 0}

    def reply(path: str) -> tuple[int, Any]:
        calls["n"] += 1
        if calls["n"] == 1:  # one server error, so the retry path (and its logging) runs
            return 500, {"error": {"message": "try again"}}
        verdict = {"error_type": "none", "op_id": None, "decisive": False, "reason": "fine"}
        return 200, chat_completion(json.dumps(verdict))

    out, report = tmp_path / "verdicts.jsonl", tmp_path / "report"
    with RecordingServer(reply) as server, caplog.at_level(logging.DEBUG):
        monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.port}/v1")
        monkeypatch.setenv("MEMTRACE_ATTRIBUTION_MODEL", "judge-1")
        code = main(
            [
                *("attribute", str(traces), "--cases", str(cases), "--method", "llm"),
                *("--out", str(out), "--report", str(report), "--quiet"),
            ]
        )
    assert code == 0, capsys.readouterr().err
    # The key was really used: every request carried it.
    assert server.auth and all(a == f"Bearer {API_KEY}" for a in server.auth)
    assert len(out.read_text().splitlines()) == 7
    captured = capsys.readouterr()
    _assert_nowhere(
        {"logs": caplog.text, "stdout": captured.out, "stderr": captured.err, **_files(tmp_path)}
    )


@pytest.mark.parametrize("status", [200, 401, 500])
def test_backend_credentials_never_reach_errors_logs_or_stats(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    def reply(path: str) -> tuple[int, Any]:
        if status != 200:
            return status, {"error": f"status {status}"}
        return 200, {"data": [], "result": {"resourceSpans": []}}

    with RecordingServer(reply) as server, caplog.at_level(logging.DEBUG):
        texts: dict[str, str] = {}
        for options, url in [
            (HttpOptions(token=TOKEN, retries=1, backoff=0.01), f"127.0.0.1:{server.port}"),
            (HttpOptions(retries=1, backoff=0.01), f"reader:{PASSWORD}@127.0.0.1:{server.port}"),
        ]:
            source = open_source(f"jaeger+http://{url}?service=app&lookback=1h", http=options)
            texts[f"source repr {url}"] = repr(source) + repr(options)
            try:
                list(source.records())
            except Exception as exc:  # a typed BackendError on 401/500
                texts[f"error {url}"] = f"{type(exc).__name__}: {exc} {exc.args!r}"
            texts[f"stats {url}"] = source.stats.summary() + repr(source.stats)
    expected = {
        f"Bearer {TOKEN}",
        "Basic " + base64.b64encode(f"reader:{PASSWORD}".encode()).decode(),
    }
    assert set(server.auth) == expected  # both credentials were sent
    _assert_nowhere({**texts, "logs": caplog.text})


# --- 6. kill -9 mid-run ------------------------------------------------------------------------

SLOW_CLI = r"""
import sys, time
from memtrace_otel.attribution import EvidenceMethod, register_method
from memtrace_otel.cli import main

class Slow(EvidenceMethod):
    def attribute(self, G, case):
        time.sleep(0.4)  # leaves time to kill the job between two verdicts
        return super().attribute(G, case)

register_method("evidence", Slow)
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_workload(tmp_path_factory.mktemp("kill"))


def _attribute(traces: Path, cases: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-c", SLOW_CLI, "attribute", str(traces)),
            *("--cases", str(cases), "--out", str(out), "--quiet"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_kill_9_mid_run_then_resume_loses_and_duplicates_nothing(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    clean = tmp_path / "clean.jsonl"
    assert _attribute(traces, cases, clean).wait(timeout=60) == 0

    killed = tmp_path / "killed.jsonl"
    job = _attribute(traces, cases, killed)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and job.poll() is None:
        if killed.exists() and killed.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.02)
    assert job.poll() is None, "the job ended before it could be killed"
    os.kill(job.pid, signal.SIGKILL)
    assert job.wait(timeout=10) == -signal.SIGKILL
    written = killed.read_bytes().count(b"\n")
    assert 2 <= written < 7  # really killed mid-run

    assert _attribute(traces, cases, killed).wait(timeout=60) == 0
    lines = killed.read_text().splitlines()
    ids = [json.loads(line)["case_id"] for line in lines]
    assert len(ids) == len(set(ids)) == 7  # none lost, none duplicated
    by_id = {v.case_id: v for v in read_verdicts(killed)}
    assert by_id == {v.case_id: v for v in read_verdicts(clean)}
    print(f"\n[kill -9] {written} verdicts on disk at the kill, {7 - written} added by the resume")


# --- nothing lost silently: the batch job's summary and exit status ----------------------------


def _run_cli(traces: Path, cases: Path, tmp_path: Path) -> tuple[int, dict[str, Any], str]:
    from memtrace_otel.cli import main

    report = tmp_path / "report"
    argv = ["attribute", str(traces), "--cases", str(cases), "--report", str(report), "--quiet"]
    out = tmp_path / "v.jsonl"
    code = main([*argv, "--out", str(out)])
    return code, json.loads((report / "summary.json").read_text()), out.read_text()


def test_a_skipped_record_is_counted_and_fails_the_exit_status(
    workload: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, cases = workload
    bad = tmp_path / "traces.jsonl"
    bad.write_bytes(traces.read_bytes() + b"{not json\n")
    code, summary, verdicts = _run_cli(bad, cases, tmp_path)
    assert code == 1 and summary["ok"] is False
    assert summary["skipped_records"] == 1 and summary["skipped_by_kind"] == {"invalid_json": 1}
    assert len(verdicts.splitlines()) == 7  # the good records still give every verdict
    assert "skipped" in capsys.readouterr().err


def test_a_case_missing_from_the_traces_is_named_in_the_summary(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    more = tmp_path / "cases.jsonl"
    ghost = {"case_id": "ghost-1", "question": "?", "verdict": "incorrect"}
    more.write_text(cases.read_text() + json.dumps(ghost) + "\n")
    code, summary, _ = _run_cli(traces, more, tmp_path)
    assert summary["cases_not_in_traces"] == ["ghost-1"]
    print(f"\n[ghost case] exit status {code}, summary ok={summary['ok']}")


def test_a_skipped_case_line_fails_the_exit_status(
    workload: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = workload
    more = tmp_path / "cases.jsonl"
    more.write_text(cases.read_text() + '{"question": "no id"}\n')
    code, summary, _ = _run_cli(traces, more, tmp_path)
    assert summary["skipped_cases"] == 1
    assert code == 1


def test_the_api_key_never_reaches_the_app_s_llm_spans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The user's own OpenAI calls, instrumented with capture on: spans carry no credential."""
    openai = pytest.importorskip("openai")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from memtrace_otel.instrumentation import CaptureConfig, WriterRegistry
    from memtrace_otel.instrumentors._common import forget_prompts, forget_retrievals
    from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
    from memtrace_otel.testing import spans_as_dicts

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    calls = {"n": 0}

    def reply(path: str) -> tuple[int, Any]:
        calls["n"] += 1
        if calls["n"] == 2:  # the second call fails: the error path is recorded too
            return 401, {"error": {"message": "invalid key"}}
        return 200, chat_completion("Ana lives in Porto")

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(
        tracer_provider=provider,
        capture=CaptureConfig(mode="SPAN_AND_EVENT"),
        registry=WriterRegistry(),
    )
    try:
        with RecordingServer(reply) as server, caplog.at_level(logging.DEBUG):
            client = openai.OpenAI(
                api_key=API_KEY, base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=0
            )
            messages = [{"role": "user", "content": "Where does Ana live?"}]
            answer = client.chat.completions.create(model="m", messages=messages)
            assert answer.choices[0].message.content == "Ana lives in Porto"
            with pytest.raises(openai.AuthenticationError):
                client.chat.completions.create(model="m", messages=messages)
    finally:
        instrumentor.uninstrument()
        forget_retrievals()  # module-level state the instrumentor keeps between calls
        forget_prompts()
    spans = spans_as_dicts(exporter.get_finished_spans())
    assert len(spans) >= 2 and "Porto" in json.dumps(spans)  # content was captured
    assert server.auth == [f"Bearer {API_KEY}"] * 2
    _assert_nowhere({"spans": json.dumps(spans), "logs": caplog.text})


@pytest.mark.parametrize("run", ["in_process", "memory_bound", "local_executor"])
def test_truncated_values_are_reported_and_do_not_fail_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    from types import MappingProxyType

    from memtrace_otel.attribution import EvidenceMethod
    from memtrace_otel.export import dumps_request
    from memtrace_otel.job import run_batch, summary_table
    from memtrace_otel.semconv import SpanRecord
    from memtrace_otel.semconv import env as E

    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_VALUE_LENGTH, "8")  # values cut at capture time
    traces, cases = write_workload(tmp_path)
    blob = SpanRecord(
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
        "unrelated",
        attributes=MappingProxyType({"blob": "x" * 5000}),
    )
    with traces.open("a", encoding="utf-8") as f:
        f.write(dumps_request([blob]) + "\n")
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_ATTRIBUTE_BYTES, "4096")  # values cut by the loader
    kwargs: dict[str, Any] = {
        "in_process": {},
        "memory_bound": {"memory_bound": "64M"},
        "local_executor": {"executor": "local[1]"},
    }[run]
    verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases), **kwargs)
    assert summary.truncated_values == 1
    assert summary.truncated_captured > 0
    assert summary.ok and summary.skipped_records == 0  # reported, not lost: the run passes
    assert len(verdicts) == 7
    assert summary.to_json()["truncated_values"] == 1
    assert "truncated values (kept, cut): 1 by the loaders' size cap" in summary_table(summary)

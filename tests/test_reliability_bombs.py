"""Size bombs are rejected before they are read whole: huge lines, documents and HTTP bodies.

The file loaders read a line (or a length-prefixed record) only up to ``max_line_bytes`` and a
whole JSON document only up to ``max_document_bytes``; the live backends' client reads a response
body only up to ``max_response_bytes``. Whatever is over a cap is skipped and counted (files) or
raises a typed ``BackendError`` (HTTP), and memory stays near the cap, not near the input: peak
memory is measured in a child process (``ru_maxrss``) for the files and with ``tracemalloc`` for
the HTTP client, against real loopback servers that announce or stream far more than the cap.
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import zstandard

from memtrace_otel.attribution import load_cases
from memtrace_otel.errors import BackendError, DecodeError
from memtrace_otel.export import dumps_request
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import HttpOptions, load_memtracebench, open_source
from memtrace_otel.sources._http import HttpClient
from memtrace_otel.sources._limits import DEFAULT_MAX_ARRAY_ITEMS, DEFAULT_MAX_ATTRIBUTE_BYTES
from memtrace_otel.sources._source import FileSource
from tests._pipeline import write_workload

ROOT = Path(__file__).resolve().parents[1]
TRACE = "0af7651916cd43dd8448eb211c80319c"
MB = 1 << 20


def _span(span_id: str, name: str, **attrs: object) -> SpanRecord:
    return SpanRecord(TRACE, span_id, name, attributes=MappingProxyType(dict(attrs)))  # type: ignore[arg-type]


def _line(span_id: str, name: str, **attrs: object) -> bytes:
    return (dumps_request([_span(span_id, name, **attrs)]) + "\n").encode()


FIRST = _line("00f067aa0ba90201", "first")
LAST = _line("00f067aa0ba90203", "last")


def _bomb_parts(size: int) -> Iterator[bytes]:
    """One OTLP JSON line holding a ``size``-byte string attribute, in 1 MiB pieces."""
    yield (
        '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"' + TRACE + '",'
        '"spanId":"00f067aa0ba90202","name":"bomb","attributes":[{"key":"a","value":'
        '{"stringValue":"'
    ).encode()
    for lo in range(0, size, MB):
        yield b"x" * min(MB, size - lo)
    yield b'"}}]}]}]}]}\n'


def _write(path: Path, parts: Iterator[bytes], *, compress: bool = False) -> Path:
    with gzip.open(path, "wb", compresslevel=1) if compress else path.open("wb") as f:
        for part in parts:
            f.write(part)
    return path


def _sandwich(size: int) -> Iterator[bytes]:
    """A good line, a ``size``-byte bomb line, a good line."""
    yield FIRST
    yield from _bomb_parts(size)
    yield LAST


# --- 1. files: the child process that loads them -----------------------------------------------

LOAD_SCRIPT = r"""
import json, resource, sys
from memtrace_otel.sources import open_source
path, options = sys.argv[1], json.loads(sys.argv[2])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    source = open_source(path, **options)
    records = list(source.records())
    out = {
        "names": [r.name for r in records],
        "skipped": source.stats.skipped_by_kind,
        "errors": source.stats.errors,
    }
except Exception as exc:
    out = {"error": type(exc).__name__, "message": str(exc), "line": getattr(exc, "line", None)}
out["rss_growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
print(json.dumps(out))
"""


def _load_in_child(path: Path, **options: Any) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, str(path), json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=300,  # a hang is a failure, not a slow test
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    file_mb = path.stat().st_size / 1e6
    print(f"\n[{path.name} {file_mb:.1f} MB on disk, {options}] {str(result)[:400]}")
    return result


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_a_200_mb_line_over_a_1_mb_cap_is_skipped_unread_and_counted(
    tmp_path: Path, compress: bool
) -> None:
    size = 200 * MB
    path = _write(
        tmp_path / f"bomb.jsonl{'.gz' if compress else ''}", _sandwich(size), compress=compress
    )
    out = _load_in_child(path, max_line_bytes=MB)
    # The lines around it are loaded; the bomb is one counted skip naming its line and the cap.
    assert out["names"] == ["first", "last"]
    assert out["skipped"] == {"line_too_long": 1}
    [message] = out["errors"]
    assert f"{path}:2: a line of {size + len(b''.join(_bomb_parts(0)))} bytes" in message
    assert f"max_line_bytes={MB}" in message
    # Never held: memory grows by a few chunks, not by the 200 MB line (~300 MB when parsed).
    assert out["rss_growth_mb"] < 24


def test_strict_mode_raises_a_decode_error_naming_the_file_line_and_cap(tmp_path: Path) -> None:
    path = _write(tmp_path / "bomb.jsonl", _sandwich(5 * MB))
    out = _load_in_child(path, max_line_bytes=MB, strict=True)
    assert out["error"] == "DecodeError" and out["line"] == 2
    assert out["message"].startswith(f"{path}:2: ") and f"max_line_bytes={MB}" in out["message"]
    assert E.ENV_MEMTRACE_MAX_LINE_BYTES in out["message"]


def test_the_line_cap_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "bomb.jsonl", _sandwich(3000))
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_LINE_BYTES, "2000")
    source = FileSource(str(path))
    assert [r.name for r in source.records()] == ["first", "last"]
    assert source.stats.skipped_by_kind == {"line_too_long": 1}
    assert "1 skipped (line_too_long: 1)" in source.stats.summary()
    # The default (64 MiB) reads it; so does an argument over the environment's cap.
    assert len(list(FileSource(str(path), max_line_bytes=4000).records())) == 3


def test_an_over_long_first_line_is_skipped_and_the_file_read_as_json_lines(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "t.jsonl", iter([b"\n", *_bomb_parts(3000), FIRST, b"\n", LAST]))
    source = open_source(path, max_line_bytes=2000)
    assert [r.name for r in source.records()] == ["first", "last"]
    # Line 2 is the bomb (after a leading blank line); the blank line 4 is followed by data.
    assert source.stats.skipped_by_kind == {"line_too_long": 1, "empty_line": 1}
    assert source.stats.errors[0].startswith(f"{path}:2: a line of ")


def _document(tag_bytes: int) -> Iterator[bytes]:
    """A pretty-printed Jaeger v1 document (not JSON Lines) with a ``tag_bytes`` tag value."""
    yield b'{\n  "data": [\n    {"traceID": "' + TRACE.encode() + b'", "spans": [{"traceID": "'
    yield TRACE.encode() + b'", "spanID": "00f067aa0ba90202", "operationName": "doc", '
    yield b'"processID": "p1", "tags": [{"key": "a", "type": "string", "value": "'
    for lo in range(0, tag_bytes, MB):
        yield b"y" * min(MB, tag_bytes - lo)
    yield b'"}]}],\n    "processes": {"p1": {"serviceName": "s"}}}\n  ]\n}\n'


def test_a_200_mb_document_over_a_1_mb_cap_is_skipped_after_reading_the_cap(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "jaeger.json", _document(200 * MB))
    out = _load_in_child(path, max_document_bytes=MB)
    assert out["names"] == [] and out["skipped"] == {"document_too_large": 1}
    assert f"max_document_bytes={MB}" in out["errors"][0]
    assert out["rss_growth_mb"] < 24
    strict = _load_in_child(path, max_document_bytes=MB, strict=True)
    assert strict["error"] == "DecodeError" and f"max_document_bytes={MB}" in strict["message"]
    # Under the cap the same kind of document loads, its tag cut by the value cap.
    small = _write(tmp_path / "small.json", _document(3000))
    source = open_source(small, max_document_bytes=1 << 16, max_attribute_bytes=1000)
    [record] = list(source.records())
    assert record.attributes["a"] == "y" * 1000 and source.stats.truncated_values == 1


def test_json_lines_with_a_broken_first_line_longer_than_the_document_cap_still_load(
    tmp_path: Path,
) -> None:
    lines = [_line(f"00f067aa0ba9{i:04x}", f"s{i}") for i in range(1, 41)]
    path = _write(tmp_path / "t.jsonl", iter([b"{not json\n", *lines]))
    assert sum(map(len, lines)) > 4000
    source = open_source(path, max_document_bytes=4000)
    assert len(list(source.records())) == 40
    assert source.stats.skipped_by_kind == {"invalid_json": 1}


def _frames(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


def test_length_prefixed_records_over_the_cap_are_skipped_even_once_decompressed(
    tmp_path: Path,
) -> None:
    big = b"".join(_bomb_parts(50_000))
    path = tmp_path / "otel.bin"
    path.write_bytes(
        _frames(
            FIRST,
            big,  # 50 KB: skipped without being read
            gzip.compress(big),  # ~100 bytes that decompress to 50 KB: stopped at the cap
            zstandard.ZstdCompressor().compress(big),
            LAST,
        )
    )
    source = open_source(path, max_line_bytes=10_000)
    assert [r.name for r in source.records()] == ["first", "last"]
    assert source.stats.skipped_by_kind == {"line_too_long": 3}
    assert [e.split(": ")[1] for e in source.stats.errors] == [
        f"a record of {len(big)} bytes",
        "a record that decompresses to more bytes",
        "a record that decompresses to more bytes",
    ]
    # The default cap reads them all (the three copies of the bomb are one span: exact
    # duplicates, dropped and counted, not skipped).
    default = open_source(path)
    assert [r.name for r in default.records()] == ["first", "bomb", "last"]
    assert default.stats.skipped_by_kind == {}
    assert default.stats.duplicates == 2


def test_a_memtracebench_file_over_the_document_cap_is_a_decode_error(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"graph_id": "g", "data": {"operations": [], "pad": "z" * 5000}}))
    with pytest.raises(DecodeError, match="max_document_bytes=1000") as info:
        load_memtracebench(path, max_document_bytes=1000)
    assert info.value.path == str(path)


# --- 1b. the cases file and the batch job ------------------------------------------------------


def test_an_over_long_cases_line_is_a_counted_skip_or_a_strict_decode_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cases.jsonl"
    case = json.dumps({"case_id": "a", "question": "?"})
    path.write_text(case + "\n" + json.dumps({"case_id": "b", "question": "x" * 500}) + "\n" + case)
    skipped: list[str] = []
    cases = list(load_cases(path, strict=False, skipped=skipped, max_line_bytes=100))
    assert [c.case_id for c in cases] == ["a", "a"]
    [message] = skipped
    assert message.startswith(f"{path}:2: a line of ") and "max_line_bytes=100" in message
    with pytest.raises(DecodeError, match="max_line_bytes=100") as info:
        list(load_cases(path, max_line_bytes=100))
    assert info.value.line == 2
    assert len(list(load_cases(path))) == 3  # the default cap (64 MiB) reads it


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_workload(tmp_path_factory.mktemp("bombs"))


@pytest.mark.parametrize("run", ["in_process", "memory_bound", "local_executor"])
def test_an_over_long_line_reaches_the_batch_summary_and_fails_the_run(
    workload: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    from memtrace_otel.attribution import EvidenceMethod
    from memtrace_otel.job import run_batch, summary_table

    traces, cases = workload
    bombed = _write(tmp_path / "traces.jsonl", iter([traces.read_bytes(), *_bomb_parts(MB)]))
    more = tmp_path / "cases.jsonl"
    more.write_text(
        cases.read_text() + json.dumps({"case_id": "huge", "question": "x" * MB}) + "\n"
    )
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_LINE_BYTES, str(MB // 2))
    kwargs: dict[str, Any] = {
        "in_process": {},
        "memory_bound": {"memory_bound": "64M"},
        "local_executor": {"executor": "local[1]"},
    }[run]
    verdicts, summary = run_batch([str(bombed)], EvidenceMethod(), cases_file=str(more), **kwargs)
    assert len(verdicts) == 7  # every case of the good lines
    assert summary.skipped_records == 1 and summary.skipped_by_kind == {"line_too_long": 1}
    assert summary.skipped_cases == 1 and not summary.ok
    table = summary_table(summary)
    assert "skipped records: line_too_long: 1" in table and "skipped cases-file lines: 1" in table
    assert any("max_line_bytes" in e for e in summary.source_errors)


def test_the_cli_exit_status_says_a_line_was_too_long(
    workload: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memtrace_otel.cli import main

    traces, cases = workload
    bombed = _write(tmp_path / "traces.jsonl", iter([traces.read_bytes(), *_bomb_parts(MB)]))
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_LINE_BYTES, str(MB // 2))
    report = tmp_path / "report"
    argv = [str(bombed), "--cases", str(cases), "--report", str(report), "--quiet"]
    code = main(["attribute", *argv, "--out", str(tmp_path / "v.jsonl")])
    summary = json.loads((report / "summary.json").read_text())
    assert code == 1 and summary["ok"] is False
    assert summary["skipped_by_kind"] == {"line_too_long": 1}
    assert len((tmp_path / "v.jsonl").read_text().splitlines()) == 7


# --- 2. live backends: HTTP bodies -------------------------------------------------------------

PASSWORD = "pw-SECRET-5e1d"
TOKEN = "tok-SECRET-77aa"
TENANT = "tenant-SECRET-3"
CHUNK = b"z" * (64 * 1024)

Reply = Callable[[BaseHTTPRequestHandler], None]


def _send_forever(handler: BaseHTTPRequestHandler, frame: Callable[[bytes], bytes]) -> None:
    """Write ``CHUNK`` frames until the client hangs up (at most 2 GB, so a bug cannot hang)."""
    try:
        for _ in range(2 * 1024 * 1024 * 1024 // len(CHUNK)):
            handler.wfile.write(frame(CHUNK))
    except OSError:  # the client closed the connection: what a bounded reader does
        pass


def announce_too_much(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(50 * 1024 * 1024 * 1024))  # 50 GB
    handler.end_headers()
    _send_forever(handler, lambda chunk: chunk)


def endless_chunked(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    _send_forever(handler, lambda chunk: b"%x\r\n%s\r\n" % (len(chunk), chunk))


def endless_unterminated(handler: BaseHTTPRequestHandler) -> None:
    """No length, not chunked: the body ends when the connection closes, which it never does."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Connection", "close")
    handler.end_headers()
    _send_forever(handler, lambda chunk: chunk)


def json_reply(body: Any) -> Reply:
    payload = json.dumps(body).encode()

    def reply(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    return reply


class Server:
    """An HTTP/1.1 server on 127.0.0.1 answering a path with the ``reply`` of the route in it."""

    def __init__(self, routes: dict[str, Reply]) -> None:
        self.requests: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append((self.path, self.headers.get("Authorization") or ""))
                for prefix, reply in routes.items():
                    if prefix in self.path:
                        reply(self)
                        return
                self.send_error(404)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


ROUTES: dict[str, Reply] = {
    "/length": announce_too_much,
    "/chunked": endless_chunked,
    "/unterminated": endless_unterminated,
    "/normal": json_reply({"data": ["ok"] * 1000}),
}


@pytest.mark.parametrize("path", ["/length", "/chunked", "/unterminated"])
def test_an_oversized_body_is_a_backend_error_with_bounded_memory(path: str) -> None:
    cap = 2 * MB
    with Server(ROUTES) as server:
        client = HttpClient(f"http://127.0.0.1:{server.port}", HttpOptions(max_response_bytes=cap))
        tracemalloc.start()
        try:
            with pytest.raises(BackendError) as info:
                client.get(path, {"service": "app"})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        normal = client.get("/normal")
    error = info.value
    assert error.url == f"http://127.0.0.1:{server.port}{path}?service=app"
    assert str(error).startswith(error.url + ": the response body ")
    assert f"max_response_bytes={cap}" in str(error)
    assert ("announces" in str(error)) == (path == "/length")
    # Never more than the cap plus a chunk or two (the server sends 50 GB or never stops).
    print(f"\n[{path}] peak traced memory {peak / MB:.1f} MiB with a {cap / MB:.0f} MiB cap")
    assert peak < cap + MB
    assert len(server.requests) == 2  # not retried: a bigger body will not get smaller
    assert normal.status == 200 and normal.body == {"data": ["ok"] * 1000}


def test_the_response_cap_comes_from_the_argument_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(E.ENV_MEMTRACE_MAX_RESPONSE_BYTES, raising=False)
    assert HttpOptions().max_response_bytes == 256 * MB
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_RESPONSE_BYTES, "5000")
    assert HttpOptions().max_response_bytes == 5000
    assert HttpOptions(max_response_bytes=70).max_response_bytes == 70
    with Server(ROUTES) as server:
        client = HttpClient(f"http://127.0.0.1:{server.port}")
        with pytest.raises(BackendError, match="max_response_bytes=5000"):
            client.get("/normal")  # 9 kB
    for text in ("lots", "0", "-1"):
        monkeypatch.setenv(E.ENV_MEMTRACE_MAX_RESPONSE_BYTES, text)
        with pytest.raises(ValueError, match=E.ENV_MEMTRACE_MAX_RESPONSE_BYTES):
            HttpOptions()
    with pytest.raises(ValueError, match="max_response_bytes"):
        HttpOptions(max_response_bytes=0)


@pytest.mark.parametrize("auth", ["basic", "token"])
def test_credentials_never_appear_in_the_oversize_error(auth: str) -> None:
    with Server(ROUTES) as server:
        if auth == "basic":
            url = f"http://reader:{PASSWORD}@127.0.0.1:{server.port}/base"
            options = HttpOptions(max_response_bytes=MB, headers={"X-Scope-OrgID": TENANT})
            expected = "Basic " + base64.b64encode(f"reader:{PASSWORD}".encode()).decode()
        else:
            url = f"http://127.0.0.1:{server.port}/base"
            options = HttpOptions(max_response_bytes=MB, token=TOKEN)
            expected = f"Bearer {TOKEN}"
        client = HttpClient(url, options)
        with pytest.raises(BackendError) as info:
            client.get("/chunked")
    assert server.requests == [("/base/chunked", expected)]  # the credential was really sent
    text = f"{info.value} {info.value.args!r} {info.value.url} {client.base_url} {options!r}"
    assert "max_response_bytes" in text
    for secret in (PASSWORD, TOKEN, TENANT, "SECRET"):
        assert secret not in text


def test_a_jaeger_source_raises_the_typed_error_for_an_oversized_trace() -> None:
    with Server({"/api/traces/": endless_chunked}) as server:
        source = open_source(
            f"jaeger+http://127.0.0.1:{server.port}?trace_id={TRACE}&api=v1",
            http=HttpOptions(max_response_bytes=MB, retries=0),
        )
        with pytest.raises(BackendError, match=f"max_response_bytes={MB}"):
            list(source.records())


def _jaeger_trace(tag: str) -> dict[str, Any]:
    span = {
        "traceID": TRACE,
        "spanID": "00f067aa0ba90202",
        "operationName": "memtrace.extract x",
        "references": [],
        "startTime": 1_700_000_000_000_000,
        "duration": 1500,
        "tags": [{"key": "a", "type": "string", "value": tag}],
        "logs": [],
        "processID": "p1",
    }
    return {
        "data": [{"traceID": TRACE, "spans": [span], "processes": {"p1": {"serviceName": "s"}}}]
    }


@pytest.mark.parametrize("cap", [None, 1000])
def test_a_5_mb_jaeger_tag_value_is_cut_to_the_cap_and_counted(cap: int | None) -> None:
    routes = {"/api/traces/": json_reply(_jaeger_trace("t" * (5 * 1000 * 1000)))}
    options: dict[str, Any] = {} if cap is None else {"max_attribute_bytes": cap}
    with Server(routes) as server:
        source = open_source(
            f"jaeger+http://127.0.0.1:{server.port}?trace_id={TRACE}&api=v1",
            http=HttpOptions(retries=0),
            **options,
        )
        [record] = list(source.records())
    expected = DEFAULT_MAX_ATTRIBUTE_BYTES if cap is None else cap
    assert record.attributes["a"] == "t" * expected
    assert source.stats.truncated_values == 1 and source.stats.skipped == 0
    assert "1 attribute values truncated (size cap)" in source.stats.summary()


def test_a_tempo_trace_with_a_huge_array_is_cut_to_the_cap_and_counted() -> None:
    items = tuple(f"mem:{i}@1" for i in range(3 * DEFAULT_MAX_ARRAY_ITEMS))
    body = {"trace": json.loads(dumps_request([_span("00f067aa0ba90202", "op", refs=items)]))}
    with Server({"/api/v2/traces/": json_reply(body)}) as server:
        source = open_source(
            f"tempo+http://127.0.0.1:{server.port}?trace_id={TRACE}", http=HttpOptions(retries=0)
        )
        [record] = list(source.records())
    assert record.attributes["refs"] == items[:DEFAULT_MAX_ARRAY_ITEMS]
    assert source.stats.truncated_values == 1

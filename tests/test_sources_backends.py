"""Live clients against a recorded-response HTTP server on 127.0.0.1.

The server replays response shapes copied from the shared fixtures (Jaeger's api_v3 snapshots,
jaeger-ui's captured getTrace response, Tempo's ``batches`` trace) and from
``../shared/spec/backends.md`` (404 bodies, envelopes). To be replaced by the real Jaeger v2 on
loopback once the backends issue provides it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from memtrace_otel.cli import main
from memtrace_otel.errors import BackendError, DecodeError
from memtrace_otel.export import encode_request
from memtrace_otel.semconv import LinkRecord, SpanRecord
from memtrace_otel.sources import HttpOptions, open_source
from memtrace_otel.sources._backends import JaegerSource, TempoSource
from tests.conftest import shared_path

FAST = HttpOptions(timeout=5, retries=3, backoff=0.001, max_backoff=0.01)
NOT_FOUND = {"error": {"httpCode": 404, "message": "No traces found"}}


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    path: str
    params: dict[str, list[str]]
    headers: dict[str, str]


class FakeBackend:
    """Routes (exact paths) to reply lists, replayed in order; the last reply repeats."""

    def __init__(self) -> None:
        self.routes: dict[str, list[Reply]] = {}
        self.requests: list[Seen] = []
        self.required_headers: dict[str, str] = {}
        self.url = ""

    def add(self, path: str, *replies: Reply) -> None:
        self.routes[path] = list(replies)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        self.requests.append(
            Seen(parts.path, urllib.parse.parse_qs(parts.query), dict(handler.headers.items()))
        )
        for name, value in self.required_headers.items():
            if handler.headers.get(name) != value:
                self._send(handler, Reply(401, "unauthorized\n"))
                return
        replies = self.routes.get(parts.path)
        if not replies:
            self._send(handler, Reply(404, "404 page not found\n"))  # Go's mux, no JSON
            return
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        if reply.delay:
            time.sleep(reply.delay)
        self._send(handler, reply)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        body = reply.body if isinstance(reply.body, str | bytes) else json.dumps(reply.body)
        data = body.encode() if isinstance(body, str) else body
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)


@contextmanager
def serve(backend: FakeBackend, *, tls: ssl.SSLContext | None = None) -> Iterator[FakeBackend]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            backend.handle(self)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    scheme = "https" if tls else "http"
    backend.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    try:
        yield backend
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def record(
    trace: int, span: int, *, links: tuple[int, ...] = (), service: str = "rag"
) -> SpanRecord:
    return SpanRecord(
        trace_id=f"{trace:032x}",
        span_id=f"{trace:08x}{span:08x}",
        name=f"t{trace}s{span}",
        start_time_unix_nano=1_700_000_000_000_000_000 + span,
        end_time_unix_nano=1_700_000_000_000_000_100 + span,
        links=tuple(LinkRecord(f"{t:032x}", f"{t:08x}{1:08x}") for t in links),
        resource_attributes=MappingProxyType({"service.name": service}),
    )


def v3_body(*records: SpanRecord) -> dict[str, Any]:
    """An api_v3 response: OTLP/JSON in {"result": ...}, one resourceSpans per record so that
    traces can interleave the way Jaeger concatenates them."""
    blocks = [encode_request([r])["resourceSpans"][0] for r in records]
    return {"result": {"resourceSpans": blocks}}


def fixture_json(name: str) -> Any:
    return json.loads(shared_path("fixtures", name).read_text())


def names(records: list[SpanRecord]) -> list[str]:
    return [r.name for r in records]


# --- Jaeger ------------------------------------------------------------------------------------
def test_search_regroups_concatenated_traces_and_sends_the_query() -> None:
    backend = FakeBackend()
    warned = dataclasses.replace(
        record(1, 2), attributes=MappingProxyType({"@jaeger@warnings": ("clock skew",), "k": 1})
    )
    backend.add("/api/v3/traces", Reply(body=v3_body(record(1, 1), record(2, 1), warned)))
    with serve(backend):
        source = open_source(
            f"jaeger+{backend.url}?service=rag&lookback=2h&limit=7&tag.memtrace.system=rag",
            http=FAST,
        )
        records = list(source.records())
    assert names(records) == ["t1s1", "t1s2", "t2s1"]
    assert records[1].attributes == {"k": 1}  # Jaeger's own annotations are dropped
    [seen] = backend.requests
    params = {k: v[0] for k, v in seen.params.items()}
    assert params["query.service_name"] == "rag"
    assert params["query.search_depth"] == params["query.num_traces"] == "7"
    assert params["query.raw_traces"] == "true"
    assert json.loads(params["query.attributes"]) == {"memtrace.system": "rag"}
    start = params["query.start_time_min"]
    end = params["query.start_time_max"]
    assert start.endswith("Z") and end.endswith("Z") and start < end
    assert source.stats.traces_total == 2 and source.stats.traces_fetched == 2


def test_get_trace_by_id_serves_the_captured_api_v3_response() -> None:
    body = fixture_json("jaeger-ui/v3-getTrace-response.json")
    trace_id = body["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    backend = FakeBackend()
    backend.add(f"/api/v3/traces/{trace_id.lower()}", Reply(body=body))
    with serve(backend):
        source = JaegerSource(backend.url, trace_ids=[trace_id], http=FAST)
        records = list(source.records())
    assert len(records) == 40 and source.stats.traces_fetched == 1
    assert backend.requests[0].params == {"raw_traces": ["true"]}


def test_404_means_nothing_found() -> None:
    backend = FakeBackend()
    backend.add("/api/v3/traces", Reply(404, NOT_FOUND))
    backend.add(f"/api/v3/traces/{1:032x}", Reply(404, NOT_FOUND))
    with serve(backend):
        search = open_source(f"jaeger+{backend.url}?service=none", http=FAST)
        assert list(search.records()) == []
        fetch = open_source(f"jaeger+{backend.url}?trace_id={1:x}", http=FAST)
        assert list(fetch.records()) == []
    assert search.stats.traces_total == 0
    assert fetch.stats.traces_missing == 1


def test_429_then_success_honours_retry_after() -> None:
    backend = FakeBackend()
    backend.add(
        "/api/v3/traces",
        Reply(429, "slow down", {"Retry-After": "0"}),
        Reply(body=v3_body(record(1, 1))),
    )
    with serve(backend):
        records = list(open_source(f"jaeger+{backend.url}?service=rag", http=FAST).records())
    assert names(records) == ["t1s1"]
    assert len(backend.requests) == 2


def test_503_is_retried_with_backoff_then_reported() -> None:
    backend = FakeBackend()
    backend.add(
        "/api/v3/traces", Reply(503, "down"), Reply(503, "down"), Reply(body=v3_body(record(1, 1)))
    )
    with serve(backend):
        assert names(
            list(open_source(f"jaeger+{backend.url}?service=rag", http=FAST).records())
        ) == ["t1s1"]
    backend = FakeBackend()
    backend.add("/api/v3/traces", Reply(503, "down"))
    with serve(backend):
        source = open_source(f"jaeger+{backend.url}?service=rag", http=FAST)
        with pytest.raises(BackendError) as info:
            list(source.records())
    assert info.value.status == 503
    assert len(backend.requests) == FAST.retries + 1


def test_timeouts_are_retried() -> None:
    backend = FakeBackend()
    backend.add(
        "/api/v3/traces",
        Reply(body=v3_body(record(1, 1)), delay=1.0),
        Reply(body=v3_body(record(1, 1))),
    )
    options = HttpOptions(timeout=0.3, retries=2, backoff=0.001)
    with serve(backend):
        records = list(open_source(f"jaeger+{backend.url}?service=rag", http=options).records())
    assert names(records) == ["t1s1"]
    assert len(backend.requests) == 2


def test_bearer_token_and_extra_headers() -> None:
    backend = FakeBackend()
    backend.required_headers = {"Authorization": "Bearer s3cret", "X-Scope-OrgID": "tenant-1"}
    backend.add("/api/v3/traces", Reply(body=v3_body(record(1, 1))))
    with serve(backend):
        good = HttpOptions(token="s3cret", headers={"X-Scope-OrgID": "tenant-1"}, backoff=0.001)
        assert names(
            list(open_source(f"jaeger+{backend.url}?service=rag", http=good).records())
        ) == ["t1s1"]
        bad = HttpOptions(token="wrong", headers={"X-Scope-OrgID": "tenant-1"}, backoff=0.001)
        with pytest.raises(BackendError, match="authentication failed") as info:
            list(open_source(f"jaeger+{backend.url}?service=rag", http=bad).records())
    assert info.value.status == 401


def test_basic_auth_from_the_url_never_printed() -> None:
    backend = FakeBackend()
    expected = "Basic " + base64.b64encode(b"ana:p@ss").decode()
    backend.required_headers = {"Authorization": expected}
    backend.add("/api/v3/traces", Reply(503, "down"))
    with serve(backend):
        host = backend.url.removeprefix("http://")
        source = open_source(f"jaeger+http://ana:p%40ss@{host}?service=rag", http=FAST)
        with pytest.raises(BackendError) as info:
            list(source.records())
    assert info.value.status == 503  # authenticated, then the server failed
    assert "p@ss" not in str(info.value) and "ana" not in str(info.value)


def test_v1_api_fallback_when_api_v3_is_missing() -> None:
    trace = fixture_json("jaeger/uimodel-ui_01.json")
    backend = FakeBackend()  # no /api/v3 routes: Go's plain-text 404
    backend.add(
        "/api/traces",
        Reply(body={"data": [trace], "total": 1, "limit": 0, "offset": 0, "errors": None}),
    )
    backend.add(f"/api/traces/{1:032x}", Reply(body={"data": [trace]}))
    with serve(backend):
        search = open_source(f"jaeger+{backend.url}?service=service-x&lookback=1h", http=FAST)
        assert len(list(search.records())) == 4  # 5 spans, one duplicate id
        assert search.api == "v1"  # type: ignore[attr-defined]
        fetch = open_source(f"jaeger+{backend.url}?trace_id={1:x}&api=v1", http=FAST)
        assert len(list(fetch.records())) == 4
    v1 = next(r for r in backend.requests if r.path == "/api/traces")
    assert v1.params["service"] == ["service-x"]
    assert int(v1.params["end"][0]) - int(v1.params["start"][0]) == 3600 * 1_000_000
    assert backend.requests[-1].params == {"raw": ["true"]}


def test_links_are_followed_transitively_up_to_the_bound() -> None:
    backend = FakeBackend()
    # trace 1 -> 2 -> 3 -> 4, and 1 -> 5 (missing)
    backend.add("/api/v3/traces", Reply(body=v3_body(record(1, 1, links=(2, 5)))))
    for trace, links in ((2, (3,)), (3, (4,)), (4, ())):
        backend.add(
            f"/api/v3/traces/{trace:032x}", Reply(body=v3_body(record(trace, 1, links=links)))
        )
    backend.add(f"/api/v3/traces/{5:032x}", Reply(404, NOT_FOUND))
    with serve(backend):
        source = open_source(f"jaeger+{backend.url}?service=rag&follow_links=2", http=FAST)
        assert names(list(source.records())) == ["t1s1", "t2s1", "t3s1"]
        assert (source.stats.traces_fetched, source.stats.traces_missing) == (3, 1)
        assert source.stats.links_not_followed == 1
        unbounded = open_source(f"jaeger+{backend.url}?service=rag&follow_links=9", http=FAST)
        assert names(list(unbounded.records())) == ["t1s1", "t2s1", "t3s1", "t4s1"]
        capped = open_source(
            f"jaeger+{backend.url}?service=rag&follow_links=9&max_traces=2", http=FAST
        )
        assert names(list(capped.records())) == ["t1s1", "t2s1"]
        none = open_source(f"jaeger+{backend.url}?service=rag&follow_links=0", http=FAST)
        assert names(list(none.records())) == ["t1s1"]


def test_bad_spans_from_a_backend_name_the_url() -> None:
    body = v3_body(record(1, 1))
    body["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "zz"
    backend = FakeBackend()
    backend.add("/api/v3/traces", Reply(body=body))
    with serve(backend):
        lenient = open_source(f"jaeger+{backend.url}?service=rag", http=FAST)
        assert list(lenient.records()) == []
        assert lenient.stats.skipped_by_kind == {"invalid_span": 1}
        with pytest.raises(DecodeError) as info:
            list(open_source(f"jaeger+{backend.url}?service=rag", strict=True, http=FAST).records())
    assert info.value.path.startswith(backend.url + "/api/v3/traces?")
    assert info.value.field == "result.resourceSpans[0].scopeSpans[0].spans[0].spanId"


def test_non_retryable_errors_carry_the_backend_message() -> None:
    backend = FakeBackend()
    message = {"error": {"httpCode": 400, "message": "malformed parameter query.start_time_min"}}
    backend.add("/api/v3/traces", Reply(400, message))
    with serve(backend), pytest.raises(BackendError, match="malformed parameter") as info:
        list(open_source(f"jaeger+{backend.url}?service=rag", http=FAST).records())
    assert info.value.status == 400 and len(backend.requests) == 1


def test_unreachable_backend() -> None:
    source = open_source(
        "jaeger+http://127.0.0.1:9?service=rag", http=HttpOptions(retries=1, backoff=0.001)
    )
    with pytest.raises(BackendError, match="cannot reach"):
        list(source.records())


# --- Tempo -------------------------------------------------------------------------------------
def _tempo_trace() -> dict[str, Any]:
    """Tempo's own JSON: the fixture's batches with base64 ids and enum names."""
    batches = fixture_json("tempo/tempopb-trace-batches.json")["batches"]
    span = batches[0]["scopeSpans"][0]["spans"][0]
    for key in ("traceId", "spanId", "parentSpanId"):
        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    span["kind"] = "SPAN_KIND_SERVER"
    return {"trace": {"batches": batches}, "status": "COMPLETE"}


def test_tempo_traceql_search_then_fetch_each_trace() -> None:
    trace_id = "5b8efff798038103d269b633813fc60c"
    backend = FakeBackend()
    backend.add(
        "/api/search",
        Reply(body={"traces": [{"traceID": trace_id, "rootServiceName": "my.service"}]}),
    )
    backend.add(f"/api/v2/traces/{trace_id}", Reply(body=_tempo_trace()))
    with serve(backend):
        source = open_source(
            f"tempo+{backend.url}?service=my.service&lookback=30m&limit=5", http=FAST
        )
        [span] = list(source.records())
    assert (span.trace_id, span.kind, span.name) == (trace_id, "SERVER", "I'm a server span")
    search = backend.requests[0]
    assert search.params["q"] == ['{ resource.service.name = "my.service" }']
    assert int(search.params["end"][0]) - int(search.params["start"][0]) in (1800, 1801)
    assert search.params["limit"] == ["5"]
    assert source.stats.traces_total == 1


def test_tempo_pads_short_ids_and_falls_back_to_the_v1_route() -> None:
    backend = FakeBackend()
    backend.add("/api/search", Reply(body={"traces": [{"traceID": "2f3e4d"}]}))
    padded = "2f3e4d".rjust(32, "0")
    body = {"batches": encode_request([record(0x2F3E4D, 1)])["resourceSpans"]}
    backend.add(f"/api/traces/{padded}", Reply(body=body))  # no /api/v2 route
    with serve(backend):
        source = open_source(f"tempo+{backend.url}?q=%7B%7D", http=FAST)
        records = list(source.records())
    assert [r.trace_id for r in records] == [padded]
    assert backend.paths()[1:] == [f"/api/v2/traces/{padded}", f"/api/traces/{padded}"]


def test_tempo_missing_trace_after_v2_worked() -> None:
    backend = FakeBackend()
    backend.add("/api/search", Reply(body={"traces": [{"traceID": "1"}, {"traceID": "2"}]}))
    backend.add(f"/api/v2/traces/{1:032x}", Reply(body={"trace": {"resourceSpans": []}}))
    backend.add(f"/api/v2/traces/{2:032x}", Reply(404, "trace not found"))
    with serve(backend):
        source = TempoSource(backend.url, http=FAST)
        assert list(source.records()) == []
    assert source.stats.traces_missing == 1
    assert f"/api/traces/{2:032x}" not in backend.paths()


# --- specs and TLS -----------------------------------------------------------------------------
def test_url_specs() -> None:
    source = open_source(
        "jaeger+https://127.0.0.1:16686/jaeger?service=a&start=2024-01-01T00:00:00Z"
        "&end=2024-01-01T01:00:00Z&trace_id=ab,cd&raw=false&api=v1&operation=op"
    )
    assert isinstance(source, JaegerSource)
    assert source.client.base_url == "https://127.0.0.1:16686/jaeger"
    assert source.trace_ids == ["ab".rjust(32, "0"), "cd".rjust(32, "0")]
    assert (source.raw_traces, source.api, source.operation) == (False, "v1", "op")
    assert source.end - source.start == 3600
    with pytest.raises(ValueError, match="unknown parameter 'colour'"):
        open_source("jaeger+http://h:1?service=a&colour=red")
    with pytest.raises(ValueError, match=r"service= .* or trace_id="):
        open_source("jaeger+http://h:1")
    with pytest.raises(ValueError, match="duration"):
        open_source("jaeger+http://h:1?service=a&lookback=soon")
    with pytest.raises(ValueError, match="limit must be an integer"):
        open_source("tempo+http://h:1?limit=many")
    with pytest.raises(ValueError, match="invalid trace id"):
        open_source("jaeger+http://h:1?trace_id=xyz")
    assert isinstance(open_source("tempo+http://h:3200", limit=3), TempoSource)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_tls_verification_options(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    backend = FakeBackend()
    backend.add("/api/v3/traces", Reply(body=v3_body(record(1, 1))))
    with serve(backend, tls=context):
        spec = f"jaeger+{backend.url}?service=rag"
        with pytest.raises(BackendError, match="cannot reach"):
            list(open_source(spec, http=HttpOptions(retries=0)).records())
        trusted = HttpOptions(retries=0, ca_file=str(cert))
        assert names(list(open_source(spec, http=trusted).records())) == ["t1s1"]
        insecure = HttpOptions(retries=0, verify=False)
        assert names(list(open_source(spec, http=insecure).records())) == ["t1s1"]


def test_http_options_validation() -> None:
    with pytest.raises(ValueError):
        HttpOptions(timeout=0)
    with pytest.raises(ValueError, match="not both"):
        HttpOptions(token="t", username="u")


# --- export from a backend ---------------------------------------------------------------------
def test_cli_export_from_jaeger_then_load_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = FakeBackend()
    backend.required_headers = {"Authorization": "Bearer from-env"}
    backend.add("/api/v3/traces", Reply(body=v3_body(record(1, 1, links=(2,)), record(1, 2))))
    backend.add(f"/api/v3/traces/{2:032x}", Reply(body=v3_body(record(2, 1))))
    monkeypatch.setenv("MEMTRACE_BACKEND_TOKEN", "from-env")
    with serve(backend):
        code = main(
            [
                "export",
                f"jaeger+{backend.url}?service=rag",
                "--out",
                str(tmp_path),
                "--batch-size",
                "2",
            ]
        )
    assert code == 0
    err = capsys.readouterr().err
    assert "wrote 3 spans" in err and "2 fetched traces" in err
    lines = (tmp_path / "traces.jsonl").read_text().splitlines()
    assert len(lines) == 2
    records = list(open_source(str(tmp_path / "traces.jsonl"), strict=True).records())
    assert names(records) == ["t1s1", "t1s2", "t2s1"]
    assert records[0].links[0].trace_id == f"{2:032x}"
    # A second export refuses to overwrite without --force.
    with serve(backend):
        assert main(["export", f"jaeger+{backend.url}?service=rag", "--out", str(tmp_path)]) == 2
        assert (
            main(
                [
                    "export",
                    f"jaeger+{backend.url}?service=rag",
                    "--out",
                    str(tmp_path),
                    "--force",
                    "--quiet",
                ]
            )
            == 0
        )
    assert "exists" in capsys.readouterr().err

"""Issue 23, the batch job and the CLI: what an adversarial pass broke, each with its test.

- credentials followed redirects to another origin; ``ftp://`` redirects were followed;
- lone surrogates in trace files gave a ``UnicodeEncodeError`` traceback;
- hangs on input: ``**`` globs over symlink loops, FIFOs, decompression bombs;
- wrong exit statuses: tracebacks for bad paths and source URLs, silent ``memtrace graph``,
  verdicts changed by unreadable records with "0 skipped".

Every server here is real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from pathlib import Path

import pytest

from memtrace_otel.attribution import _partitions
from memtrace_otel.cli import main
from memtrace_otel.errors import BackendError
from memtrace_otel.sources import HttpOptions, _files, open_source
from tests._reporting import write_hostile_workload
from tests.test_sources_backends import FakeBackend, Reply, record, serve, v3_body

FAST = HttpOptions(timeout=5, retries=0, backoff=0.001, max_backoff=0.01)
TRACES = "/api/v3/traces"


# --- credentials and redirects -----------------------------------------------------------------
def _redirect(to: str) -> Reply:
    return Reply(302, "", headers={"Location": to})


def _auth_of(backend: FakeBackend) -> list[str | None]:
    return [seen.headers.get("Authorization") for seen in backend.requests]


@pytest.mark.parametrize("how", ["export --token", "attribute user:pass@"])
def test_credentials_are_dropped_when_a_redirect_leaves_the_origin(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend redirecting to another port gets the token or the user:pass the first time
    only; the other origin sees neither, nor the extra headers (which may carry keys)."""
    monkeypatch.delenv("MEMTRACE_BACKEND_TOKEN", raising=False)
    origin, elsewhere = FakeBackend(), FakeBackend()
    elsewhere.add(TRACES, Reply(body=v3_body(record(1, 1))))
    with serve(origin), serve(elsewhere):
        origin.add(TRACES, _redirect(f"{elsewhere.url}{TRACES}?service=rag"))
        host = origin.url.removeprefix("http://")
        if how.startswith("export"):
            url = f"jaeger+{origin.url}?service=rag"
            args = ["export", url, "--out", str(tmp_path / "x"), "--quiet", "--retries", "0"]
            args += ["--token", "s3cret", "--header", "X-Api-Key: k3y"]
            assert main(args) == 0
            sent = "Bearer s3cret"
        else:
            cases = tmp_path / "cases.jsonl"
            cases.write_text('{"case_id": "c1", "verdict": false}\n')
            url = f"jaeger+http://ana:p%40ss@{host}?service=rag"
            assert main(["attribute", url, "--cases", str(cases), "--quiet"]) in (0, 1)
            sent = "Basic " + base64.b64encode(b"ana:p@ss").decode()
    assert _auth_of(origin) == [sent]
    assert elsewhere.requests and _auth_of(elsewhere) == [None] * len(elsewhere.requests)
    assert all("X-Api-Key" not in seen.headers for seen in elsewhere.requests)


def test_a_redirect_on_the_same_origin_keeps_the_credentials() -> None:
    backend = FakeBackend()
    backend.add(TRACES, _redirect(f"/moved{TRACES}?service=rag"))
    backend.add(f"/moved{TRACES}", Reply(body=v3_body(record(1, 1))))
    options = HttpOptions(timeout=5, retries=0, token="s3cret")
    with serve(backend):
        records = list(open_source(f"jaeger+{backend.url}?service=rag", http=options).records())
    assert [r.name for r in records] == ["t1s1"]
    assert _auth_of(backend) == ["Bearer s3cret", "Bearer s3cret"]


class _Listener:
    """A TCP port that counts the connections it gets (an FTP server would be one)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.sendall(b"220 hello\r\n")
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("scheme", ["ftp", "file", "gopher"])
def test_a_redirect_to_another_scheme_is_refused(
    scheme: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    listener = _Listener()
    backend = FakeBackend()
    target = {
        "ftp": f"ftp://ana:p%40ss@127.0.0.1:{listener.port}/traces.json",
        "file": "file:///etc/passwd",
        "gopher": f"gopher://127.0.0.1:{listener.port}/",
    }[scheme]
    backend.add(TRACES, _redirect(target))
    try:
        with serve(backend):
            options = HttpOptions(timeout=5, retries=2, backoff=0.001, token="s3cret")
            with pytest.raises(BackendError, match="redirect") as info:
                list(open_source(f"jaeger+{backend.url}?service=rag", http=options).records())
            assert len(backend.requests) == 1  # refused at once, not retried
            url = f"jaeger+{backend.url}?service=rag"
            assert main(["export", url, "--out", str(tmp_path / "x"), "--quiet"]) == 2
    finally:
        listener.close()
    assert listener.connections == 0
    assert "s3cret" not in str(info.value)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memtrace: error:") and "redirect" in err[0]


# --- lone surrogates ---------------------------------------------------------------------------
ESCAPED = "\\ud800 \\udfff"  # as JSON text: two lone surrogates
REPLACED = "\ufffd \ufffd"


def _surrogate_workload(folder: Path) -> tuple[Path, Path]:
    """The hostile workload with lone surrogates in every value, the case id, every op name and
    the store id (JSON escapes), and one value holding a surrogate's raw (CESU-8) bytes."""
    traces, cases = write_hostile_workload(folder, "PAYLOAD", in_op_names=True)
    for path in (traces, cases):
        text = path.read_text().replace("PAYLOAD", ESCAPED).replace("user-hostile", ESCAPED)
        data = text.encode().replace(b"I like hiking.", b"I like \xed\xa0\x80 hiking.")
        path.write_bytes(data)
    return traces, cases


@pytest.mark.parametrize("mode", ["in_process", "no_orjson", "memory_bound", "local_executor"])
def test_lone_surrogates_are_replaced_counted_and_every_output_written(
    mode: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if mode == "no_orjson":  # the standard library's parser, as without the [fast] extra
        monkeypatch.setattr(_files, "_fast_loads", None)
        monkeypatch.setattr(_partitions, "_loads", _partitions._stdlib_loads)
    traces, cases = _surrogate_workload(tmp_path)
    out, report = tmp_path / "verdicts.jsonl", tmp_path / "report"
    extra = {
        "memory_bound": ["--memory-bound", "200M"],
        "local_executor": ["--executor", "local[1]"],
    }
    args = ["attribute", str(traces), "--cases", str(cases), "--out", str(out), "--quiet"]
    assert main([*args, "--report", str(report), *extra.get(mode, [])]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "lone surrogates replaced by U+FFFD" in err
    (verdict,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert verdict["case_id"] == "case-" + REPLACED and verdict["op_name"].endswith(REPLACED)
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    assert summary["replaced_surrogates"] > 0
    for path in (report / "index.html", report / "summary.md", *report.glob("cases/*.js")):
        assert REPLACED in path.read_text(encoding="utf-8")  # strict UTF-8
    if mode != "in_process":
        return
    for fmt in ("json", "dot", "graphml", "html"):
        target = tmp_path / f"case.{fmt}"
        case = ["graph", str(traces), "--case", "case-" + REPLACED, "--format", fmt]
        assert main([*case, "-o", str(target)]) == 0
        assert "I like \ufffd hiking." in target.read_text(encoding="utf-8")
    assert main(["export", str(traces), "--out", str(tmp_path / "export"), "--quiet"]) == 0
    exported = (tmp_path / "export" / "traces.jsonl").read_text(encoding="utf-8")
    assert "\\ud800" not in exported and REPLACED in exported

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
import gzip
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from memtrace_otel.cli import main
from memtrace_otel.errors import BackendError
from memtrace_otel.job import _partitions, read_verdicts
from memtrace_otel.sources import HttpOptions, _files, open_source
from tests._pipeline import write_workload
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


# --- hangs on input ----------------------------------------------------------------------------
HANG_SECONDS = 120
"""Each of these ran for minutes or forever before: a child process, killed after this long."""


def _memtrace(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``memtrace ARGS`` in a child process, bounded by :data:`HANG_SECONDS`."""
    return subprocess.run(
        [sys.executable, "-m", "memtrace_otel.cli", *args],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _verdict_count(out: Path) -> int:
    return len(out.read_text().splitlines())


@pytest.fixture
def traces_dir(tmp_path: Path) -> tuple[Path, Path]:
    """``traces/a/traces.jsonl`` (the 7-case workload) and its cases file."""
    folder = tmp_path / "traces" / "a"
    folder.mkdir(parents=True)
    traces, cases = write_workload(folder)
    moved = tmp_path / "cases.jsonl"
    cases.rename(moved)
    return traces, moved


MODES = {
    "in_process": [],
    "memory_bound": ["--memory-bound", "200M"],
    "executor": ["--executor", "local[1]"],
}


@pytest.mark.parametrize("mode", list(MODES))
def test_a_recursive_glob_over_symlink_loops_ends(
    mode: str, traces_dir: tuple[Path, Path], tmp_path: Path
) -> None:
    """Links to a parent, to the folder itself and to a sibling: ``**`` enters none of them
    (``glob.glob`` did, and ran for minutes); each file is read once."""
    cases = traces_dir[1]
    root = tmp_path / "traces"
    (root / "a" / "up").symlink_to(root, target_is_directory=True)
    (root / "a" / "self").symlink_to(root / "a", target_is_directory=True)
    (root / "b").symlink_to(root / "a", target_is_directory=True)
    out = tmp_path / "v.jsonl"
    for spec in (f"{root}/**/*.jsonl", str(root)):
        out.unlink(missing_ok=True)
        done = _memtrace("attribute", spec, "--cases", str(cases), "--out", str(out), *MODES[mode])
        assert done.returncode == 0, done.stderr
        assert _verdict_count(out) == 7 and "0 skipped" in done.stderr


@pytest.mark.parametrize("mode", list(MODES))
def test_a_fifo_in_a_traces_folder_is_skipped_and_counted(
    mode: str, traces_dir: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = traces_dir
    fifo = traces.parent / "pipe.jsonl"
    os.mkfifo(fifo)  # nobody ever writes: opening it for reading blocks forever
    out = tmp_path / "v.jsonl"
    for spec in (str(tmp_path / "traces"), f"{tmp_path}/traces/**/*.jsonl"):
        out.unlink(missing_ok=True)
        done = _memtrace("attribute", spec, "--cases", str(cases), "--out", str(out), *MODES[mode])
        assert done.returncode == 1, done.stderr  # a skip fails the exit status
        assert _verdict_count(out) == 7
        assert "not_a_regular_file: 1" in done.stderr and "(a FIFO)" in done.stderr
    # named on the command line: a one-line error
    done = _memtrace("attribute", str(fifo), "--cases", str(cases), *MODES[mode])
    assert done.returncode == 2
    assert done.stderr.strip() == f"memtrace: error: {fifo}: not a regular file (a FIFO)"


def _bomb(kind: str) -> bytes:
    """A valid first line, then gigabytes of blank lines: a gzip inside a gzip (~19 KB, 8 GiB
    inside), or concatenated zstd frames (~200 KB, 6 GiB)."""
    head = b'{"resourceSpans": []}\n'
    blanks = b"\n" * (64 << 20)
    if kind == "nested_gzip":
        inner = gzip.compress(head) + gzip.compress(blanks, compresslevel=9) * 128
        return gzip.compress(inner, compresslevel=9)
    zstandard = pytest.importorskip("zstandard")
    compressor = zstandard.ZstdCompressor(level=19)
    return compressor.compress(head) + compressor.compress(blanks) * 96


@pytest.mark.parametrize("kind", ["nested_gzip", "zstd"])
def test_decompression_bombs_stop_at_the_cap_and_are_counted(
    kind: str, traces_dir: tuple[Path, Path], tmp_path: Path
) -> None:
    traces, cases = traces_dir
    bomb = traces.parent / f"bomb.{'gz' if kind == 'nested_gzip' else 'zst'}"
    bomb.write_bytes(_bomb(kind))
    out = tmp_path / "v.jsonl"
    # the nested gzip under the defaults (16 MiB floor: it is ~19 KB); the zstd one under a cap
    env = {"MEMTRACE_MAX_DECOMPRESSED_BYTES": str(8 << 20)} if kind == "zstd" else {}
    spec = str(tmp_path / "traces")
    done = _memtrace("attribute", spec, "--cases", str(cases), "--out", str(out), env=env)
    assert done.returncode == 1, done.stderr
    assert _verdict_count(out) == 7
    assert "decompressed_too_large: 1" in done.stderr
    assert f"{bomb}: decompresses to more than" in done.stderr


# --- exit statuses -----------------------------------------------------------------------------
@pytest.fixture
def workload(tmp_path: Path) -> tuple[Path, Path]:
    return write_workload(tmp_path)


def _bad_invocations(folder: Path, traces: Path, cases: Path) -> dict[str, list[str]]:
    a_file = folder / "a-file"
    a_file.write_text("not a folder\n")
    run = ["attribute", str(traces), "--cases", str(cases), "--quiet"]
    return {
        "--out is a folder": [*run, "--out", str(folder)],
        "--out under a file": [*run, "--out", str(a_file / "v.jsonl")],
        "--report is a file": [*run, "--report", str(a_file)],
        "--report under a file": [*run, "--report", str(a_file / "report")],
        "--cases missing": ["attribute", str(traces), "--cases", str(folder / "nope.jsonl")],
        "--cases is a folder": ["attribute", str(traces), "--cases", str(folder)],
        "plain http:// source": ["attribute", "http://ana:s3cret@127.0.0.1:9/", "--quiet"],
        "jaeger without service": ["attribute", "jaeger+http://127.0.0.1:9", "--quiet"],
        "zip:// source": ["attribute", f"zip://{traces}", "--quiet"],
        "ftp:// source": ["attribute", "ftp://127.0.0.1:9/traces.jsonl", "--quiet"],
        "graph -o under a file": [
            "graph",
            str(traces),
            "--case",
            "case-update",
            "-o",
            str(a_file / "x.html"),
        ],
    }


@pytest.mark.parametrize(
    "name",
    [
        "--out is a folder",
        "--out under a file",
        "--report is a file",
        "--report under a file",
        "--cases missing",
        "--cases is a folder",
        "plain http:// source",
        "jaeger without service",
        "zip:// source",
        "ftp:// source",
        "graph -o under a file",
    ],
)
def test_bad_paths_and_sources_are_one_line_errors_with_exit_2(
    name: str,
    workload: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _bad_invocations(tmp_path, *workload)[name]
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memtrace: error: "), captured.err
    assert "s3cret" not in captured.err and captured.out == ""
    assert not (tmp_path / "a-file" / "report").exists()


def _otlp_attributes(line: dict[str, object]) -> list[list[dict[str, object]]]:
    """The attribute lists of every span of one OTLP JSON line."""
    found = []
    for resource in line["resourceSpans"]:  # type: ignore[attr-defined]
        for scope in resource["scopeSpans"]:
            found += [span.get("attributes", []) for span in scope["spans"]]
    return found


def _break_ops(traces: Path) -> None:
    """An unknown op kind (the update case's merge), inputs as one comma-joined string (the
    deletion case's forget), inputs as the JSON text of the list (the retrieval case's search)."""
    lines = []
    for text in traces.read_text().splitlines():
        line = json.loads(text)
        for attrs in _otlp_attributes(line):
            values = {a["key"]: a["value"] for a in attrs}
            name = values.get("memtrace.op.name", {}).get("stringValue")
            for attr in attrs:
                refs = attr["value"].get("arrayValue", {}).get("values", [])
                joined = [r["stringValue"] for r in refs]
                if name == "test.merge" and attr["key"] == "memtrace.op.kind":
                    attr["value"] = {"stringValue": "teleport"}
                elif name == "test.forget" and attr["key"] == "memtrace.op.inputs":
                    attr["value"] = {"stringValue": ", ".join(joined)}
                elif name == "test.search" and attr["key"] == "memtrace.op.inputs":
                    attr["value"] = {"stringValue": json.dumps(joined)}
        lines.append(json.dumps(line))
    traces.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("mode", list(MODES))
def test_unknown_op_kinds_and_string_refs_are_counted_skips(
    mode: str, workload: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, cases = workload
    clean = tmp_path / "clean.jsonl"
    args = ["attribute", str(traces), "--cases", str(cases), "--quiet", *MODES[mode]]
    assert main([*args, "--out", str(clean)]) == 0
    _break_ops(traces)
    out, report = tmp_path / "broken.jsonl", tmp_path / "report"
    assert main([*args, "--out", str(out), "--report", str(report)]) == 1
    err = capsys.readouterr().err
    assert "skipped records: invalid_op: 2" in err
    assert "field memtrace.op.kind: span" in err and "unknown op kind 'teleport'" in err
    assert "field memtrace.op.inputs: span" in err and "a string, not a list of refs" in err
    summary = json.loads((report / "summary.json").read_text())
    assert summary["skipped_by_kind"] == {"invalid_op": 2} and summary["ok"] is False
    before = {v.case_id: v for v in read_verdicts(clean)}
    after = {v.case_id: v for v in read_verdicts(out)}
    # the list sent as JSON text is read as the list: that case's verdict is unchanged
    assert after["case-retrieval"] == before["case-retrieval"]
    assert set(after) == set(before)


def test_graph_on_bad_records_says_so_and_exits_1(
    workload: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    traces, _ = workload
    with traces.open("a") as handle:
        handle.write("not json\n")
    out = tmp_path / "case.json"
    assert (
        main(["graph", str(traces), "--case", "case-update", "--format", "json", "-o", str(out)])
        == 1
    )
    err = capsys.readouterr().err
    assert "1 skipped (invalid_json: 1)" in err
    assert "memtrace: the graph may lack the skipped records" in err
    assert f"{traces}:" in err and out.exists()

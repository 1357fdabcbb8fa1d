"""Run the real backends (Jaeger v2, the project's Collector) on loopback for end-to-end tests.

(PYTEST_DONT_REWRITE: test modules import this before pytest loads it as a plugin.)

The binaries come from ``scripts/build_backends.sh`` (``make backends``), cached outside the
repository; ``MEMTRACE_JAEGER_BIN`` / ``MEMTRACE_OTELCOL_BIN`` point at other builds. Without them
the tests skip with one line naming what to install, except under ``CI=true``, where a missing
binary is a failure.

Every process gets free ports on 127.0.0.1 (never the defaults: Jaeger's and the Collector's own
metrics both want 8888), is polled until it answers, and is stopped (terminate, wait, kill) when the
fixture ends. Its output goes to a log file whose tail is shown when something fails.

Use from a test module::

    from tests._backends import collector, jaeger  # noqa: F401  (fixtures)

    def test_x(jaeger, collector):
        ...  # send OTLP to collector.otlp_grpc_endpoint, read collector.traces_path,
             # query jaeger.get_trace_v3(trace_id)
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "collector_config"
BUILD_SCRIPT = REPO / "scripts" / "build_backends.sh"
DEFAULT_CACHE = Path.home() / ".cache" / "memtrace-otel" / "bin"

JAEGER_ENV = "MEMTRACE_JAEGER_BIN"
OTELCOL_ENV = "MEMTRACE_OTELCOL_BIN"
INSTALL_HINT = (
    "run `make backends` (scripts/build_backends.sh; needs Go >= 1.24 from https://go.dev/dl/) "
    f"or set {JAEGER_ENV} / {OTELCOL_ENV}"
)

T = TypeVar("T")


def bin_cache() -> Path:
    """The binary cache folder (``MEMTRACE_BIN_CACHE`` or ``~/.cache/memtrace-otel/bin``)."""
    return Path(os.environ.get("MEMTRACE_BIN_CACHE", str(DEFAULT_CACHE)))


def _selected() -> dict[str, str]:
    """What the build script last selected (``<cache>/selected.env``: NAME=path lines)."""
    path = bin_cache() / "selected.env"
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs if value}


def find_binary(env_name: str) -> Path | None:
    """The binary named by ``env_name`` in the environment, else the build script's choice."""
    value = os.environ.get(env_name) or _selected().get(env_name)
    if value and Path(value).is_file() and os.access(value, os.X_OK):
        return Path(value)
    return None


def require_binary(env_name: str, what: str) -> Path:
    """Return the binary, or skip (fail under ``CI=true``) with one line naming what to install."""
    path = find_binary(env_name)
    if path is not None:
        return path
    message = f"{what} binary not found: {INSTALL_HINT}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_until(
    probe: Callable[[], T | None], *, timeout: float, interval: float = 0.1, what: str
) -> T:
    """Call ``probe`` until it returns something other than None; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = probe()
            if result is not None:
                return result
        except (OSError, ValueError) as error:  # connection refused, bad JSON while starting
            last_error = error
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def http_get(url: str, *, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET ``url``; return (status, body) for any HTTP status, raise OSError when unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


def tcp_open(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class ManagedProcess:
    """A child process with its output in ``log_path``; stop() ends it, whatever its state."""

    args: list[str]
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process, its stdout and stderr going to ``log_path``."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
            )

    def check_alive(self) -> None:
        """Raise RuntimeError (with the log tail) if the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"{shlex.join(self.args)} exited with {self.process.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the process output."""
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


def _wait_ready(proc: ManagedProcess, probe: Callable[[], bool], timeout: float, what: str) -> None:
    def check() -> bool | None:
        proc.check_alive()
        return True if probe() else None

    try:
        wait_until(check, timeout=timeout, what=what)
    except TimeoutError as error:
        raise TimeoutError(f"{error}\n--- {proc.log_path} ---\n{proc.log_tail()}") from None


# --- Jaeger v2 ---------------------------------------------------------------------------------


def jaeger_config(*, grpc_port: int, http_port: int, query_port: int, query_grpc_port: int) -> str:
    """A Jaeger v2 config: OTLP in, memory storage, query APIs; every port on 127.0.0.1.

    Jaeger's own metrics are switched off (``level: none``): they default to :8888, which the
    Collector's metrics want too.
    """
    config = {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
        },
        "extensions": {
            "jaeger_storage": {"backends": {"mem": {"memory": {"max_traces": 10000}}}},
            "jaeger_query": {
                # Self-tracing exports to localhost:4317 whatever the receiver ports are, and
                # holds shutdown up ~10 s trying: off.
                "enable_tracing": False,
                "storage": {"traces": "mem"},
                "http": {"endpoint": f"127.0.0.1:{query_port}"},
                "grpc": {"endpoint": f"127.0.0.1:{query_grpc_port}"},
            },
        },
        "receivers": {
            "otlp": {
                "protocols": {
                    # Memory payloads: the 4 MiB gRPC default would refuse large batches.
                    "grpc": {"endpoint": f"127.0.0.1:{grpc_port}", "max_recv_msg_size_mib": 64},
                    "http": {"endpoint": f"127.0.0.1:{http_port}"},
                }
            }
        },
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "mem"}},
    }
    # JSON is YAML: no YAML writer needed.
    return json.dumps(config, indent=2)


@dataclass
class JaegerServer:
    """A running Jaeger v2 all-in-one with memory storage."""

    process: ManagedProcess
    otlp_grpc_port: int
    otlp_http_port: int
    query_port: int

    @property
    def otlp_grpc_endpoint(self) -> str:
        """``127.0.0.1:<port>`` of the OTLP gRPC receiver."""
        return f"127.0.0.1:{self.otlp_grpc_port}"

    @property
    def otlp_http_url(self) -> str:
        """Base URL of the OTLP/HTTP receiver (append ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.otlp_http_port}"

    @property
    def query_url(self) -> str:
        """Base URL of the query service (api_v3 under ``/api/v3``, v1 under ``/api``)."""
        return f"http://127.0.0.1:{self.query_port}"

    def get_trace_v3(self, trace_id: str) -> dict[str, Any] | None:
        """``GET /api/v3/traces/{id}``: OTLP/JSON ``{"result": {"resourceSpans": [...]}}``, or None on 404."""
        status, body = http_get(f"{self.query_url}/api/v3/traces/{trace_id}")
        if status == 404:
            return None
        if status != 200:
            raise OSError(f"api_v3 GET trace {trace_id}: HTTP {status}: {body[:300]!r}")
        result: dict[str, Any] = json.loads(body)
        return result

    def get_trace_v1(self, trace_id: str) -> dict[str, Any] | None:
        """``GET /api/traces/{id}``: the v1 envelope ``{"data": [trace], ...}``, or None on 404."""
        status, body = http_get(f"{self.query_url}/api/traces/{trace_id}")
        if status == 404:
            return None
        if status != 200:
            raise OSError(f"v1 GET trace {trace_id}: HTTP {status}: {body[:300]!r}")
        result: dict[str, Any] = json.loads(body)
        return result

    def wait_for_trace_v3(
        self, trace_id: str, *, span_count: int = 1, timeout: float = 30.0
    ) -> dict[str, Any]:
        """Poll api_v3 until the trace has at least ``span_count`` spans."""

        def probe() -> dict[str, Any] | None:
            self.process.check_alive()
            body = self.get_trace_v3(trace_id)
            if body is None:
                return None
            spans = [
                span
                for rs in body.get("result", {}).get("resourceSpans", [])
                for ss in rs.get("scopeSpans", [])
                for span in ss.get("spans", [])
            ]
            return body if len(spans) >= span_count else None

        return wait_until(probe, timeout=timeout, interval=0.25, what=f"trace {trace_id} in Jaeger")


def start_jaeger(binary: Path, workdir: Path) -> JaegerServer:
    """Start Jaeger on free loopback ports and wait until its query API answers."""
    grpc_port, http_port, query_port, query_grpc_port = free_ports(4)
    config = workdir / "jaeger.yaml"
    config.write_text(
        jaeger_config(
            grpc_port=grpc_port,
            http_port=http_port,
            query_port=query_port,
            query_grpc_port=query_grpc_port,
        )
    )
    proc = ManagedProcess([str(binary), "--config", str(config)], workdir / "jaeger.log")
    proc.start()
    server = JaegerServer(proc, grpc_port, http_port, query_port)

    def ready() -> bool:
        status, _ = http_get(f"{server.query_url}/api/v3/services", timeout=1.0)
        return status == 200 and tcp_open(grpc_port)

    try:
        _wait_ready(proc, ready, 60.0, "Jaeger query API")
    except BaseException:
        proc.stop()
        raise
    return server


# --- The Collector -----------------------------------------------------------------------------


def otelcol_validate(
    binary: Path, configs: Sequence[Path], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``memtrace-otelcol validate --config=...`` (several configs merge in order)."""
    args = [str(binary), "validate", *(f"--config={path}" for path in configs)]
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def otelcol_components(binary: Path) -> str:
    """The output of ``memtrace-otelcol components`` (YAML listing every built-in component)."""
    done = subprocess.run(
        [str(binary), "components"], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


@dataclass
class CollectorServer:
    """A running Collector on the repository's ``otelcol.yaml`` with loopback endpoints."""

    process: ManagedProcess
    otlp_grpc_port: int
    otlp_http_port: int
    health_port: int
    traces_path: Path

    @property
    def otlp_grpc_endpoint(self) -> str:
        """``127.0.0.1:<port>`` of the OTLP gRPC receiver."""
        return f"127.0.0.1:{self.otlp_grpc_port}"

    @property
    def otlp_http_url(self) -> str:
        """Base URL of the OTLP/HTTP receiver (append ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.otlp_http_port}"

    def traces_files(self) -> list[Path]:
        """The JSON Lines files written so far (the live file and rotated ones)."""
        return sorted(
            self.traces_path.parent.glob(f"{self.traces_path.stem}*{self.traces_path.suffix}")
        )

    def read_lines(self) -> list[dict[str, Any]]:
        """Every complete line of every file, parsed (a line still being written is left out)."""
        lines: list[dict[str, Any]] = []
        for path in self.traces_files():
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # the exporter is mid-write; the next poll sees it whole
        return lines

    def file_spans(self) -> list[dict[str, Any]]:
        """Every OTLP/JSON span in the files."""
        return [
            span
            for line in self.read_lines()
            for rs in line.get("resourceSpans", [])
            for ss in rs.get("scopeSpans", [])
            for span in ss.get("spans", [])
        ]

    def wait_for_file_spans(
        self, span_ids: set[str], *, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Poll the files until every span id in ``span_ids`` is there; return all file spans."""

        def probe() -> list[dict[str, Any]] | None:
            self.process.check_alive()
            spans = self.file_spans()
            return spans if span_ids <= {s["spanId"] for s in spans} else None

        return wait_until(
            probe,
            timeout=timeout,
            interval=0.25,
            what=f"{len(span_ids)} spans in {self.traces_path}",
        )


def collector_env(
    *,
    grpc_port: int,
    http_port: int,
    health_port: int,
    metrics_port: int,
    traces_path: Path,
    jaeger_endpoint: str,
    tempo_endpoint: str,
    sample_percent: int = 0,
    decision_wait: str = "1s",
) -> dict[str, str]:
    """Environment for ``collector_config/otelcol.yaml`` with every endpoint on loopback."""
    return {
        "MEMTRACE_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
        "MEMTRACE_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
        "MEMTRACE_HEALTH_ENDPOINT": f"127.0.0.1:{health_port}",
        "MEMTRACE_COLLECTOR_METRICS_HOST": "127.0.0.1",
        "MEMTRACE_COLLECTOR_METRICS_PORT": str(metrics_port),
        "MEMTRACE_TRACES_PATH": str(traces_path),
        "MEMTRACE_JAEGER_OTLP_ENDPOINT": jaeger_endpoint,
        "MEMTRACE_TEMPO_OTLP_ENDPOINT": tempo_endpoint,
        "MEMTRACE_SAMPLE_PERCENT": str(sample_percent),
        "MEMTRACE_TAIL_DECISION_WAIT": decision_wait,
        "MEMTRACE_BATCH_TIMEOUT": "200ms",
        "MEMTRACE_MEMORY_LIMIT_MIB": "512",
        "MEMTRACE_MEMORY_SPIKE_MIB": "128",
    }


def start_collector(
    binary: Path,
    workdir: Path,
    *,
    jaeger_endpoint: str,
    tempo_endpoint: str | None = None,
    configs: Sequence[Path] = (CONFIG_DIR / "otelcol.yaml",),
    sample_percent: int = 0,
    decision_wait: str = "1s",
) -> CollectorServer:
    """Start the Collector on the repository's config(s) and wait until its health check is 200.

    ``tempo_endpoint`` defaults to a loopback port nobody listens on: the Tempo exporter then
    retries in the background without touching the other exporters.
    """
    grpc_port, http_port, health_port, metrics_port, unused_port = free_ports(5)
    traces_path = workdir / "traces" / "traces.jsonl"
    env = collector_env(
        grpc_port=grpc_port,
        http_port=http_port,
        health_port=health_port,
        metrics_port=metrics_port,
        traces_path=traces_path,
        jaeger_endpoint=jaeger_endpoint,
        tempo_endpoint=tempo_endpoint or f"127.0.0.1:{unused_port}",
        sample_percent=sample_percent,
        decision_wait=decision_wait,
    )
    args = [str(binary), *(f"--config={path}" for path in configs)]
    proc = ManagedProcess(args, workdir / "otelcol.log", env=env)
    proc.start()
    server = CollectorServer(proc, grpc_port, http_port, health_port, traces_path)

    def ready() -> bool:
        status, _ = http_get(f"http://127.0.0.1:{health_port}/", timeout=1.0)
        return status == 200 and tcp_open(grpc_port)

    try:
        _wait_ready(proc, ready, 60.0, "Collector health check")
    except BaseException:
        proc.stop()
        raise
    return server


# --- pytest fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jaeger_bin() -> Path:
    """The Jaeger v2 binary (skips, or fails under CI=true, when missing)."""
    return require_binary(JAEGER_ENV, "Jaeger v2")


@pytest.fixture(scope="module")
def otelcol_bin() -> Path:
    """The project's Collector binary (skips, or fails under CI=true, when missing)."""
    return require_binary(OTELCOL_ENV, "memtrace-otelcol (OpenTelemetry Collector)")


@pytest.fixture(scope="module")
def jaeger(jaeger_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JaegerServer]:
    """A Jaeger v2 on loopback for the whole test module, stopped afterwards."""
    server = start_jaeger(jaeger_bin, tmp_path_factory.mktemp("jaeger"))
    try:
        yield server
    finally:
        server.process.stop()


@pytest.fixture(scope="module")
def collector(
    otelcol_bin: Path, jaeger: JaegerServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CollectorServer]:
    """The Collector on ``otelcol.yaml``, forwarding to the ``jaeger`` fixture, writing files to a
    temporary folder; tail sampling decides after 1 s and keeps no baseline share (0 %), so only
    the always-keep policies let traces through."""
    server = start_collector(
        otelcol_bin, tmp_path_factory.mktemp("otelcol"), jaeger_endpoint=jaeger.otlp_grpc_endpoint
    )
    try:
        yield server
    finally:
        server.process.stop()

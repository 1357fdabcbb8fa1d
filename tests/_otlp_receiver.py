"""An in-process OTLP/HTTP trace receiver on loopback: the real exporter posts protobuf to it."""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Receiver:
    """Collects the spans of every request it gets."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.bodies: list[bytes] = []
        """Each request's protobuf bytes as sent (after gzip, if any, is undone)."""
        self.lock = threading.Lock()
        self.url = ""


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve ``POST /v1/traces`` on a free port of 127.0.0.1 for the duration of the block."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            with receiver.lock:
                receiver.bodies.append(body)
                for rs in request.resource_spans:
                    for ss in rs.scope_spans:
                        receiver.spans.extend(ss.spans)
            payload = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (a hung Collector)."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self._held.append(conn)  # keep it open, read nothing, answer nothing

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._held:
            conn.close()
        self._sock.close()

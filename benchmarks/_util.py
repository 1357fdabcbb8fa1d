"""Small timing helpers shared by the benchmarks (no timing assertions: figures are printed)."""

from __future__ import annotations

import gc
import hashlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Link, Tracer

from memtrace_otel.semconv import attributes as A


def best_of(fn: Callable[[], None], *, number: int, repeat: int = 7) -> float:
    """CPU seconds per call: the best of ``repeat`` runs of ``number`` calls.

    CPU time of this process, not wall time: on a shared 2-core machine other processes would
    otherwise dominate the figure.
    """
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        for _ in range(number):
            fn()
        best = min(best, (time.process_time() - start) / number)
    return best


def interleaved(
    fns: dict[str, Callable[[], None]], *, number: int, repeat: int = 9
) -> dict[str, float]:
    """``best_of`` for several functions, alternating them so drifts in machine load hit all alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], best_of(fn, number=number, repeat=1))
    return best


def verdict(value: float, goal: float, *, higher_is_better: bool = False) -> str:
    """'meets goal' or 'MISSES goal' for a printed figure."""
    ok = value >= goal if higher_is_better else value <= goal
    return "meets goal" if ok else "MISSES goal"


def by_hand(
    tracer: Tracer,
    span: ReadableSpan,
    late: Iterable[str] = (),
    values: Mapping[str, str] | None = None,
) -> Callable[[], None]:
    """A function writing, with the SDK alone, the payload of ``span`` (one recorded span): its
    name, kind, attributes and links at start, its events, then the ``late`` attributes (those an
    instrumentation can only know at the end, e.g. the outputs).

    What a hand-written instrumentation must do on every call is done on every call: each link
    is made from its writer's span context, and the ``memtrace.variable.digest`` of a variable
    whose canonical value is in ``values`` (by ref) is computed (sha256, as the contract asks of
    any writer); other event attributes are copied as recorded.
    """
    attributes = dict(span.attributes or {})
    at_end = {key: attributes.pop(key) for key in late if key in attributes}
    links = [(link.context, dict(link.attributes or {})) for link in span.links]
    events = []
    for event in span.events:
        event_attributes = dict(event.attributes or {})
        value = (values or {}).get(str(event_attributes.get(DIGEST_REF, "")))
        events.append((event.name, event_attributes, value))
    name, kind = span.name, span.kind

    def write() -> None:
        with tracer.start_as_current_span(
            name, kind=kind, attributes=attributes, links=[Link(c, a) for c, a in links]
        ) as hand:
            for event_name, event_attributes, value in events:
                if value is not None:
                    event_attributes = {
                        **event_attributes,
                        DIGEST: "sha256:" + hashlib.sha256(value.encode()).hexdigest(),
                    }
                hand.add_event(event_name, event_attributes)
            if at_end:
                hand.set_attributes(at_end)

    return write


DIGEST, DIGEST_REF = A.MEMTRACE_VARIABLE_DIGEST, A.MEMTRACE_VARIABLE_REF


_RECEIVER = """
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def orphaned():  # the benchmark's end (or death) closes our stdin: leave with it
    sys.stdin.read()
    os._exit(0)

threading.Thread(target=orphaned, daemon=True).start()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the exporter's session reuses its connection

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def otlp_sink() -> Iterator[str]:
    """An OTLP/HTTP trace endpoint on loopback, in a process of its own (what a Collector costs
    is not the app's): it reads each request and answers 200. Yields the ``/v1/traces`` URL."""
    process = subprocess.Popen(
        [sys.executable, "-c", _RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1/traces"
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def s3_sink() -> Iterator[str]:
    """An S3 API on loopback (moto's server, a process of its own) with one bucket; the AWS
    settings point at it for the duration of the block. Yields the bucket's ``s3://`` URL."""
    import os
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    settings = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        import fsspec

        fsspec.filesystem("s3", skip_instance_cache=True).mkdir("bench-content")
        yield "s3://bench-content"
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        process.terminate()
        process.wait(10)

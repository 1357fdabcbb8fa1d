"""``memtrace serve``: the report as a local web app over any source, where people review verdicts.

It loads the sources (files, ``jaeger+http://``, ``tempo+http://``), attributes the failed cases
and serves the report; ``reload`` re-reads the sources. A review (confirm, reject, or name the
right op) is sent as a ``memtrace.review`` span parented to the verdict span (contract v0.3,
section 5) to the OTLP endpoint of ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``; a later reload, or
``memtrace attribute``, reads it back with the traces and shows the measured precision.

Security: the server binds 127.0.0.1 unless ``--host`` says otherwise. Every write (review,
reload) needs the server's token in the ``X-Memtrace-Token`` header (a header a cross-origin page
cannot send without a preflight the server never grants). On loopback the served page carries the
token; bound beyond loopback it does not, ``--write-token`` is required, and the reviewer types it in.

Trust: feedback and reviews are read under the trust policy of ``memtrace attribute`` (the same
``MEMTRACE_FEEDBACK_KEY``, ``--feedback-skew`` and ``--feedback-allow-service``; docs/feedback.md),
and with the key set every review the server sends is signed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import ipaddress
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from memtrace_otel.attribution import get_method
from memtrace_otel.cli._backend import add_backend_options, http_options
from memtrace_otel.export._configure import ENDPOINT_VARS, resolve_exporter
from memtrace_otel.job import BatchSummary, load_store_graphs, run_batch
from memtrace_otel.job._batch import failed_cases
from memtrace_otel.job._reviews import send_review, verdict_span_index
from memtrace_otel.reporting import check_base_url, write_report
from memtrace_otel.semconv import ReviewLabel, SpanRecord
from memtrace_otel.sources import DEFAULT_SKEW_SECONDS, OutcomeRule, TrustPolicy

DEFAULT_PORT = 8765
MAX_BODY = 64 * 1024


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="the report as a local web app over any source, where people review verdicts",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument("sources", nargs="+", metavar="SOURCE", help="trace files or a backend URL")
    parser.add_argument("--cases", metavar="FILE", help="a cases file (else: feedback, judges)")
    parser.add_argument("--method", default="evidence", help="attribution method (evidence)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT})")
    parser.add_argument(
        "--write-token",
        help="the token writes need (required when --host is not loopback; default: a random "
        "one, printed on stderr)",
    )
    parser.add_argument("--jaeger-url", metavar="URL", help="Jaeger UI base URL, for span links")
    parser.add_argument("--tempo-url", metavar="URL", help="Grafana base URL or a link template")
    parser.add_argument(
        "--feedback-skew",
        type=float,
        default=DEFAULT_SKEW_SECONDS,
        metavar="SECONDS",
        help="refuse feedback and reviews timestamped later than the load plus SECONDS (300)",
    )
    parser.add_argument(
        "--feedback-allow-service",
        action="append",
        default=[],
        metavar="NAME",
        help="accept unsigned feedback and reviews naming a case or verdict by id alone from "
        "this service.name (repeatable; a convenience, not a defence, docs/feedback.md)",
    )
    add_backend_options(parser)
    parser.set_defaults(func=run)


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds loopback only (``localhost`` included)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class App:
    """The served report: rebuilt from the sources on demand, reviews sent through ``exporter``."""

    def __init__(
        self,
        args: argparse.Namespace,
        *,
        token: str,
        exporter: SpanExporter | None,
        options: Mapping[str, Any],
    ) -> None:
        self.args = args
        self.token = token
        self.exporter = exporter
        self.options = dict(options)
        self.method = get_method(args.method)
        self.lock = threading.Lock()
        self.folder = Path(tempfile.mkdtemp(prefix="memtrace-serve-"))
        self.verdict_spans: dict[str, dict[str, Any]] = {}
        self.reload()

    def reload(self) -> BatchSummary:
        """Read the sources again, attribute, and rewrite the report."""
        with self.lock:
            # A policy per load: its clock (the future bound) is the time of this load.
            rule = OutcomeRule(trust=self.trust())
            loading = BatchSummary()
            outcomes: list[Any] = []
            spans: list[SpanRecord] = []
            graphs = load_store_graphs(
                self.args.sources,
                summary=loading,
                outcomes=outcomes,
                options=self.options,
                reviews_out=spans,
                trust=rule.trust,
            )
            verdicts, summary = run_batch(
                self.args.sources,
                self.method,
                cases_file=self.args.cases,
                graphs=graphs,
                outcomes=outcomes,
                loaded=loading,
                source_options=self.options,
                rule=rule,
            )
            cases = {
                case.case_id: case
                for _, case in failed_cases(graphs, self.args.cases, BatchSummary(), outcomes, rule)
            }
            # The newest verdict span of each case is the one a review is parented to.
            by_case: dict[str, dict[str, Any]] = {}
            for span in sorted(verdict_span_index(spans).values(), key=lambda s: s["time"]):
                if span["case_id"]:
                    by_case[str(span["case_id"])] = span
            self.verdict_spans = by_case
            serve = {
                "token": self.token if is_loopback(self.args.host) else None,
                "reviews": self.exporter is not None,
                "reviewable": {v.case_id: v.case_id in by_case for v in verdicts},
            }
            write_report(
                self.folder,
                verdicts,
                graphs,
                summary,
                jaeger_url=self.args.jaeger_url,
                tempo_url=self.args.tempo_url,
                sources=self.args.sources,
                cases=cases,
                serve=serve,
            )
            return summary

    def trust(self) -> TrustPolicy:
        """The trust policy, with ``MEMTRACE_FEEDBACK_KEY`` read now (raises ``ValueError`` on
        a bad skew)."""
        return TrustPolicy.from_env(
            skew_seconds=getattr(self.args, "feedback_skew", DEFAULT_SKEW_SECONDS),
            allowed_services=getattr(self.args, "feedback_allow_service", None) or (),
        )

    def review(self, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """Send one review; the HTTP status and the JSON answer."""
        case_id, label, op_id = body.get("case_id"), body.get("label"), body.get("op_id")
        if not isinstance(case_id, str) or label not in {str(v) for v in ReviewLabel}:
            return 400, {"error": "give case_id and a label: confirmed, rejected or other_op"}
        if op_id is not None and not isinstance(op_id, str):
            return 400, {"error": "op_id is a span id"}
        if self.exporter is None:
            return 409, {"error": "no OTLP endpoint: set OTEL_EXPORTER_OTLP_ENDPOINT"}
        span = self.verdict_spans.get(case_id)
        if span is None:
            return 409, {
                "error": f"no verdict span for case {case_id} in the sources: send it first "
                "(memtrace attribute --write-back), then reload"
            }
        try:
            sent = send_review(
                self.exporter,
                verdict_trace_id=span["trace_id"],
                verdict_span_id=span["span_id"],
                label=str(label),
                op_id=op_id,
                key=self.trust().key,  # signed when a key is set, as memtrace feedback signs
            )
        except ValueError as exc:
            return 400, {"error": str(exc)}
        if not sent:
            return 502, {"error": "the OTLP endpoint did not accept the review"}
        return 200, {"sent": True, "verdict_span_id": span["span_id"]}

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def make_server(app: App, host: str, port: int) -> http.server.ThreadingHTTPServer:
    """The HTTP server of ``app`` (not started)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "memtrace-serve"

        def log_message(self, format: str, *args: Any) -> None:
            print(f"memtrace serve: {format % args}", file=sys.stderr)

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Mapping[str, Any]) -> None:
            self._send(status, json.dumps(data).encode(), "application/json")

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].split("#", 1)[0]
            if path == "/favicon.ico":  # browsers ask; the report has none
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            relative = "index.html" if path in ("", "/") else path.lstrip("/")
            target = (app.folder / relative).resolve()
            if app.folder.resolve() not in target.parents or not target.is_file():
                self._send(404, b"not found", "text/plain; charset=utf-8")
                return
            types = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
            kind = types.get(target.suffix, "application/octet-stream")
            self._send(200, target.read_bytes(), f"{kind}; charset=utf-8")

        def do_POST(self) -> None:
            if not secrets.compare_digest(self.headers.get("X-Memtrace-Token", ""), app.token):
                self._json(403, {"error": "writes need the server's token (X-Memtrace-Token)"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._json(413, {"error": "body too large"})
                return
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._json(400, {"error": "the body is not JSON"})
                return
            if self.path == "/api/review" and isinstance(body, dict):
                self._json(*app.review(body))
            elif self.path == "/api/reload":
                summary = app.reload()
                self._json(200, {"reloaded": True, "cases": summary.cases})
            else:
                self._send(404, b"not found", "text/plain; charset=utf-8")

    return http.server.ThreadingHTTPServer((host, port), Handler)


def prepare(args: argparse.Namespace) -> tuple[App, http.server.ThreadingHTTPServer]:
    """Check the arguments, build the app and its server (raises ``ValueError`` on bad ones)."""
    if not is_loopback(args.host) and not args.write_token:
        raise ValueError(f"--host {args.host} is beyond loopback: give --write-token for writes")
    for url, option in ((args.jaeger_url, "--jaeger-url"), (args.tempo_url, "--tempo-url")):
        if url:
            check_base_url(url, option)
    TrustPolicy(skew_seconds=args.feedback_skew)  # a bad --feedback-skew fails here
    exporter = resolve_exporter() if any(os.environ.get(v) for v in ENDPOINT_VARS) else None
    options: dict[str, Any] = {"http": http_options(args)}
    app = App(
        args,
        token=args.write_token or secrets.token_urlsafe(24),
        exporter=exporter,
        options=options,
    )
    return app, make_server(app, args.host, args.port)


def run(args: argparse.Namespace) -> int:
    try:
        app, server = prepare(args)
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 2
    port = server.server_address[1]
    print(f"memtrace serve: http://{args.host}:{port}/ (token {app.token})", file=sys.stderr)
    if app.exporter is None:
        print(
            "memtrace serve: no OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT): reviews are off",
            file=sys.stderr,
        )
    key = app.trust().key
    print(
        f"memtrace serve: reviews are signed with key id {key.key_id}; unsigned feedback and "
        "reviews are refused"
        if key is not None
        else "memtrace serve: no MEMTRACE_FEEDBACK_KEY: reviews are sent unsigned, and feedback "
        "and reviews are read as unverified (docs/feedback.md)",
        file=sys.stderr,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 130
    finally:
        with contextlib.suppress(OSError):
            server.server_close()
        app.close()
    return 0

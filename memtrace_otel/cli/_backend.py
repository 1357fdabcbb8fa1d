"""The backend options of the commands that read jaeger+/tempo+ sources (``export``,
``attribute``): one set of flags, one place that turns them into :class:`HttpOptions`."""

from __future__ import annotations

import argparse
import os

from memtrace_otel.semconv.env import ENV_MEMTRACE_BACKEND_TOKEN
from memtrace_otel.sources import HttpOptions


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """Add the ``backend options`` group (auth, timeouts, retries, TLS) to ``parser``."""
    backend = parser.add_argument_group("backend options (jaeger+/tempo+ sources)")
    backend.add_argument(
        "--token",
        help=f"bearer token (default: ${ENV_MEMTRACE_BACKEND_TOKEN}); prefer the variable over "
        "this flag, which other users can see in the process list",
    )
    backend.add_argument("--user", help="basic-auth user (password from user:pass@ in the URL)")
    backend.add_argument(
        "--header",
        action="append",
        type=_header,
        default=[],
        metavar="'NAME: VALUE'",
        help="extra request header (repeatable), e.g. 'X-Scope-OrgID: tenant-1'",
    )
    backend.add_argument(
        "--timeout", type=float, default=30.0, help="seconds any one connect or read may wait (30)"
    )
    backend.add_argument(
        "--total-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="seconds one request may take in all, body included: a body that trickles in "
        "is cut off here and the run fails (300)",
    )
    backend.add_argument(
        "--retries", type=int, default=4, help="retries on 429/5xx/network errors (4)"
    )
    backend.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    backend.add_argument("--ca-file", help="PEM bundle of CAs to trust")
    backend.add_argument("--client-cert", help="PEM client certificate (mutual TLS)")
    backend.add_argument("--client-key", help="key of the client certificate")


def http_options(args: argparse.Namespace) -> HttpOptions:
    """The :class:`HttpOptions` the backend flags of ``args`` describe.

    Raises:
        ValueError: a negative number, or both a token and a user.
    """
    token = args.token or os.environ.get(ENV_MEMTRACE_BACKEND_TOKEN) or None
    return HttpOptions(
        timeout=args.timeout,
        total_timeout=args.total_timeout,
        retries=args.retries,
        token=token if not args.user else None,
        username=args.user,
        headers=dict(args.header),
        verify=not args.insecure,
        ca_file=args.ca_file,
        client_cert=args.client_cert,
        client_key=args.client_key,
    )

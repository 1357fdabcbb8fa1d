"""``memtrace attribute``: the batch job."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from memtrace_otel.attribution import (
    get_method,
    method_names,
    run_batch,
    summary_table,
    write_summary,
)
from memtrace_otel.attribution._writeback import verdict_span_writer

_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def register(subparsers: Any) -> None:
    """Add the ``attribute`` subcommand."""
    parser = subparsers.add_parser(
        "attribute",
        help="find each failed case's earliest decisive faulty operation",
        description=(
            "Read exported traces, find the failed cases (from judge ops or --cases), and write "
            "one verdict per case: the earliest decisive faulty operation and its error type."
        ),
    )
    parser.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="trace files, directories, globs or jaeger+http(s):// / tempo+http(s):// URLs",
    )
    parser.add_argument(
        "--cases",
        help="cases file (JSON Lines: case_id, question, gold_answers, evidence_refs, verdict)",
    )
    parser.add_argument(
        "--method",
        default="evidence",
        choices=method_names(),
        help="attribution method (default: evidence)",
    )
    parser.add_argument(
        "--out", help="verdicts file (JSON Lines, appended; cases already in it are skipped)"
    )
    parser.add_argument(
        "--report", metavar="DIR", help="write summary.json, summary.md (and the HTML report) here"
    )
    parser.add_argument(
        "--write-back",
        action="store_true",
        help="send each verdict as a memtrace.attribution span to the OTLP endpoint in OTEL_EXPORTER_OTLP_ENDPOINT",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="stop at the first bad record instead of skipping and counting it",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the batch job; exit 0 when every case ran and no record was skipped, else 1."""
    try:
        method = get_method(args.method)
    except ValueError as exc:  # e.g. a model-based method with no endpoint configured
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 2
    on_verdict = None
    provider = None
    if args.write_back:
        if not any(os.environ.get(v) for v in _ENDPOINT_VARS):
            print(
                "memtrace: error: --write-back needs OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT)",
                file=sys.stderr,
            )
            return 2
        from memtrace_otel.instrumentation import configure

        provider = configure(service_name="memtrace-attribution", set_global=False)
        on_verdict = verdict_span_writer(provider)
    try:
        verdicts, summary = run_batch(
            args.sources,
            method,
            cases_file=args.cases,
            out=args.out,
            strict=args.strict,
            progress=None if args.quiet else sys.stderr,
            on_verdict=on_verdict,
        )
    finally:
        if provider is not None:
            provider.shutdown()
    usage = getattr(method, "usage", None)
    if isinstance(usage, dict):
        summary.model_usage = dict(usage)
        print(
            "model usage: " + ", ".join(f"{k}={v}" for k, v in sorted(usage.items())),
            file=sys.stderr,
        )
    if args.out is None:
        for verdict in verdicts:
            print(verdict.to_json())
    print(summary_table(summary), file=sys.stderr)
    if args.report:
        write_summary(summary, args.report)
    return 0 if summary.ok else 1

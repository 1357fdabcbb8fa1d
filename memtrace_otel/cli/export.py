"""``memtrace export SOURCE --out DIR``: save what a source yields as OTLP JSON Lines.

So a batch can run later on files: query Jaeger or Tempo once (or convert a MemTraceBench
export, or merge a directory of Collector files), then analyse offline as often as needed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from memtrace_otel._progress import Progress
from memtrace_otel.cli import EXIT_OK, EXIT_USAGE
from memtrace_otel.cli._backend import add_backend_options, http_options
from memtrace_otel.sources import (
    BACKEND_SCHEMES,
    SourceStats,
    export_source,
    open_source,
)


def show_progress(progress: Progress) -> Callable[[SourceStats], None]:
    """An ``export_source`` progress callback drawing on ``progress`` (the package's one bar)."""

    def update(stats: SourceStats) -> None:
        parts = []
        if stats.traces_total:
            parts.append(
                f"{min(stats.traces_fetched, stats.traces_total)}/{stats.traces_total} traces"
            )
        elif stats.traces_fetched:
            parts.append(f"{stats.traces_fetched} traces")
        if stats.files:
            parts.append(f"{stats.files} file{'s' if stats.files != 1 else ''}")
        if stats.skipped:
            parts.append(f"{stats.skipped} skipped")
        progress.update(stats.records - progress.count, ", ".join(parts))

    return update


def register(subparsers: Any) -> None:
    """Add the ``export`` subcommand."""
    parser = subparsers.add_parser(
        "export",
        help="save traces from files or a backend as OTLP JSON Lines",
        description=(
            "Read every span from SOURCE (a file, directory or glob of trace files, or "
            "jaeger+http(s)://host:16686?service=NAME&lookback=2h, or "
            "tempo+http(s)://host:3200?q=TRACEQL) and write them to DIR/traces.jsonl as OTLP "
            "JSON Lines; MemTraceBench cases and labels go to DIR/cases.jsonl and labels.jsonl."
        ),
    )
    parser.add_argument("source", metavar="SOURCE", help="trace files or a backend URL")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--strict", action="store_true", help="stop at the first bad record")
    parser.add_argument("--force", action="store_true", help="replace an existing traces.jsonl")
    parser.add_argument(
        "--batch-size", type=int, default=512, metavar="N", help="spans per line (512)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    add_backend_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Export ``args.source`` to ``args.out``; return the exit code (0: done)."""
    is_backend = args.source.startswith(BACKEND_SCHEMES)
    http = None
    if is_backend:
        try:
            http = http_options(args)
        except ValueError as exc:
            print(f"memtrace export: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        source = open_source(args.source, strict=args.strict, http=http)
    except ValueError as exc:
        print(f"memtrace export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    progress = Progress(None if args.quiet else sys.stderr, "exporting", unit="span")
    try:
        result = export_source(
            source,
            args.out,
            batch_size=args.batch_size,
            overwrite=args.force,
            progress=show_progress(progress),
        )
    finally:
        progress.close()
    stats = source.stats
    print(f"memtrace export: wrote {result.spans:,} spans to {result.traces_path}", file=sys.stderr)
    if result.cases_path is not None:
        print(
            f"memtrace export: wrote {len(source.cases)} cases to {result.cases_path} and "
            f"{len(source.labels)} labels to {result.labels_path}",
            file=sys.stderr,
        )
    print(f"memtrace export: {stats.summary()}", file=sys.stderr)
    for message in stats.errors:
        print(f"memtrace export:   {message}", file=sys.stderr)
    return EXIT_OK

"""``memtrace export SOURCE --out DIR``: save what a source yields as OTLP JSON Lines.

So a batch can run later on files: query Jaeger or Tempo once (or convert a MemTraceBench
export, or merge a directory of Collector files), then analyse offline as often as needed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import IO, Any

from memtrace_otel.cli._backend import add_backend_options, http_options
from memtrace_otel.sources import (
    BACKEND_SCHEMES,
    SourceStats,
    export_source,
    open_source,
)


class Progress:
    """A one-line progress indicator on stderr: redrawn in place on a terminal, a line every
    few seconds otherwise (CI logs), nothing when quiet."""

    def __init__(
        self, stream: IO[str], *, quiet: bool = False, interval: float | None = None
    ) -> None:
        self.stream = stream
        self.quiet = quiet
        self.tty = stream.isatty()
        self.interval = interval if interval is not None else (0.2 if self.tty else 5.0)
        self.started = time.monotonic()
        self._last = 0.0

    def line(self, stats: SourceStats) -> str:
        """The progress text for ``stats``."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        parts = [f"{stats.records:,} spans", f"{stats.records / elapsed:,.0f}/s"]
        if stats.traces_total:
            done = min(stats.traces_fetched, stats.traces_total)
            width = 20
            filled = int(width * done / stats.traces_total)
            parts.insert(
                0, f"[{'#' * filled}{'.' * (width - filled)}] {done}/{stats.traces_total} traces"
            )
        elif stats.traces_fetched:
            parts.append(f"{stats.traces_fetched} traces")
        if stats.files:
            parts.append(f"{stats.files} file{'s' if stats.files != 1 else ''}")
        if stats.skipped:
            parts.append(f"{stats.skipped} skipped")
        return "exporting: " + ", ".join(parts)

    def update(self, stats: SourceStats) -> None:
        """Show ``stats`` if the interval has passed."""
        now = time.monotonic()
        if self.quiet or now - self._last < self.interval:
            return
        self._last = now
        if self.tty:
            self.stream.write("\r\033[K" + self.line(stats))
        else:
            self.stream.write(self.line(stats) + "\n")
        self.stream.flush()

    def done(self) -> None:
        """End the in-place line on a terminal."""
        if self.tty and not self.quiet and self._last:
            self.stream.write("\r\033[K")
            self.stream.flush()


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
            return 2
    try:
        source = open_source(args.source, strict=args.strict, http=http)
    except ValueError as exc:
        print(f"memtrace export: {exc}", file=sys.stderr)
        return 2
    progress = Progress(sys.stderr, quiet=args.quiet)
    try:
        result = export_source(
            source,
            args.out,
            batch_size=args.batch_size,
            overwrite=args.force,
            progress=progress.update,
        )
    finally:
        progress.done()
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
    return 0

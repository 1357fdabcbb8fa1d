"""Save what a source yields as OTLP JSON Lines (the Collector's file format) for later batches."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memtrace_otel.errors import SourceError
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.sources._common import SourceStats
from memtrace_otel.sources._source import Source

TRACES_FILE = "traces.jsonl"
CASES_FILE = "cases.jsonl"
LABELS_FILE = "labels.jsonl"


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_source` wrote.

    Attributes:
        traces_path: the OTLP JSON Lines file.
        spans: spans written.
        lines: lines (``ExportTraceServiceRequest`` objects) written.
        cases_path: the cases file (MemTraceBench sources only), else ``None``.
        labels_path: the labels file (MemTraceBench sources only), else ``None``.
    """

    traces_path: Path
    spans: int
    lines: int
    cases_path: Path | None = None
    labels_path: Path | None = None


def export_source(
    source: Source,
    out_dir: str | os.PathLike[str],
    *,
    batch_size: int = 512,
    overwrite: bool = False,
    progress: Callable[[SourceStats], None] | None = None,
) -> ExportResult:
    """Write every record of ``source`` to ``out_dir/traces.jsonl`` as OTLP JSON Lines.

    Records are written ``batch_size`` to a line, in the order the source yields them; the file
    appears under its final name only when complete. MemTraceBench cases and labels go to
    ``cases.jsonl`` and ``labels.jsonl`` beside it.

    Args:
        source: where the records come from.
        out_dir: the directory to write into (created if needed).
        batch_size: spans per line.
        overwrite: replace existing files instead of refusing.
        progress: called with the source's statistics after every line.

    Raises:
        SourceError: the output exists (without ``overwrite``) or cannot be written.
        DecodeError, BackendError: from the source (strict decoding, unreachable backend).
    """
    from memtrace_otel.export import dumps_request  # the SDK: only a run that exports needs it

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    directory = Path(out_dir)
    target = directory / TRACES_FILE
    if target.exists() and not overwrite:
        raise SourceError(f"{target} exists: give --force (overwrite=True) to replace it")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SourceError(
            f"{directory}: cannot create the directory ({exc.strerror or exc})"
        ) from None
    partial = directory / (TRACES_FILE + ".partial")
    spans = 0
    lines = 0
    try:
        with open(partial, "w", encoding="utf-8") as out:
            batch: list[SpanRecord] = []
            for record in source.records():
                batch.append(record)
                if len(batch) >= batch_size:
                    out.write(dumps_request(batch) + "\n")
                    spans += len(batch)
                    lines += 1
                    batch = []
                    if progress is not None:
                        progress(source.stats)
            if batch:
                out.write(dumps_request(batch) + "\n")
                spans += len(batch)
                lines += 1
        os.replace(partial, target)
    except OSError as exc:
        raise SourceError(f"{target}: cannot write ({exc.strerror or exc})") from None
    finally:
        if partial.exists():
            partial.unlink()
    if progress is not None:
        progress(source.stats)
    cases_path = labels_path = None
    if source.cases or source.labels:
        cases_path = directory / CASES_FILE
        labels_path = directory / LABELS_FILE
        _write_json_lines(cases_path, [c.as_dict() for c in source.cases])
        _write_json_lines(labels_path, [lb.as_dict() for lb in source.labels])
    return ExportResult(target, spans, lines, cases_path, labels_path)


def _write_json_lines(path: Path, items: list[dict[str, object]]) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            for item in items:
                out.write(json.dumps(item, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise SourceError(f"{path}: cannot write ({exc.strerror or exc})") from None

"""The batch job around the attribution methods: load, find the failed cases, attribute, record.

:func:`run_batch` is its one entry point (``memtrace attribute`` calls it), run as one
:class:`RunOptions` value says (checked when it is made): it reads the sources
into store graphs (in this process, spilled to disk, or partitioned by store over a process pool
or Dask), finds the failed cases (feedback, evaluation events, judge ops or a cases file), asks a
method of :mod:`memtrace_otel.attribution` for each verdict, and appends the verdicts to a
resumable, locked file. Beside it: the OTLP write-back of verdicts, the reading of reviews and
feedback, and the benchmark scoring of verdicts.
"""

from memtrace_otel.job._batch import (
    CONTENT_NOTICE,
    BatchSummary,
    failed_cases,
    load_store_graphs,
    parse_summary_line,
    read_verdicts,
    store_of,
    summary_markdown,
    summary_table,
    write_summary,
)
from memtrace_otel.job._feedback import FeedbackStats, feedback_cases
from memtrace_otel.job._options import RunOptions
from memtrace_otel.job._run import run_batch

__all__ = [
    "CONTENT_NOTICE",
    "BatchSummary",
    "FeedbackStats",
    "RunOptions",
    "failed_cases",
    "feedback_cases",
    "load_store_graphs",
    "parse_summary_line",
    "read_verdicts",
    "run_batch",
    "store_of",
    "summary_markdown",
    "summary_table",
    "write_summary",
]

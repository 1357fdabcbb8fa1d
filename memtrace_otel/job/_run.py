"""``run_batch``: the batch job's one entry point, run in this process or scaled out, as one
:class:`~memtrace_otel.job.RunOptions` value says.

The dispatch lives here, above both ways of running, so that neither imports the other back:
:mod:`._batch` holds what one process does and what every way shares, :mod:`._executors` the
scaled runs (built on :mod:`._batch` and :mod:`._partitions`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import networkx as nx

from memtrace_otel.attribution._base import Method
from memtrace_otel.attribution._model import Verdict
from memtrace_otel.errors import MemtraceError
from memtrace_otel.job._batch import BatchSummary, QuietHeap, _run_in_process
from memtrace_otel.job._executors import run_scaled
from memtrace_otel.job._options import RunOptions
from memtrace_otel.job._reviews import precision_of, read_verdict_spans
from memtrace_otel.sources import Outcome

__all__ = ["RunOptions", "run_batch"]


def run_batch(
    sources: Sequence[str],
    method: Method,
    options: RunOptions | None = None,
    *,
    graphs: dict[str, nx.MultiDiGraph] | None = None,
    loaded: BatchSummary | None = None,
    outcomes: Sequence[Outcome] | None = None,
    **fields: Any,
) -> tuple[list[Verdict], BatchSummary]:
    """Attribute every failed case of ``sources``.

    Args:
        sources: file paths, directories, globs or backend URLs.
        method: the attribution method.
        options: how to run (:class:`RunOptions`: cases file, verdicts file, executor, memory
            bound, outcome rule, ...); default: in memory, failed cases from the traces.
        graphs: already built store graphs (skips loading ``sources``; the run stays in this
            process whatever the executor).
        loaded: what loading ``graphs`` counted (records, skips, a capped source), when the
            caller loaded them: merged into the summary.
        outcomes: evaluations already read with ``graphs`` (see :func:`load_store_graphs`);
            without ``graphs`` they are read from ``sources`` (scaled runs too).
        **fields: :class:`RunOptions` fields, as a shorthand (``cases_file="cases.jsonl"``) or
            to change some of ``options``; checked as ``RunOptions(...)`` is (a wrong name is a
            ``TypeError``, a bad executor or size a ``ValueError``).

    Returns:
        The verdicts of this run (resumed cases excluded) and the summary.

    People's reviews of verdict spans give ``summary.review_precision`` in every way of running,
    screened by ``rule.trust``; a scaled run takes them from the lines its scans found holding
    them, and reads the files it did not scan in a pass of their own
    (:func:`~memtrace_otel.job._reviews.read_verdict_spans`).
    """
    options = RunOptions(**fields) if options is None else dataclasses.replace(options, **fields)
    if graphs is None and options.scaled:
        scanned: dict[str, list[tuple[int, Any]]] = {}
        verdicts, summary = run_scaled(sources, method, options, verdict_lines=scanned)
        return _with_reviews(verdicts, summary, sources, scanned, options)
    with QuietHeap() as heap:
        return _run_in_process(
            heap, sources, method, options, graphs=graphs, loaded=loaded, outcomes=outcomes
        )


def _with_reviews(
    verdicts: list[Verdict],
    summary: BatchSummary,
    sources: Sequence[str],
    scanned: dict[str, list[tuple[int, Any]]],
    options: RunOptions,
) -> tuple[list[Verdict], BatchSummary]:
    """A scaled run's results, with the precision people's reviews give its verdicts."""
    try:
        spans = list(read_verdict_spans(sources, scanned))
        precision = precision_of(spans, options.rule.trust)
    except (MemtraceError, OSError) as exc:  # the run read these files: rare, and said
        summary.source_errors.append(f"reviews not read: {exc}")
        precision = None
    if precision is not None:
        summary.review_precision = precision
    return verdicts, summary

"""``run_batch``: the batch job's one entry point, run in this process or scaled out.

The dispatch lives here, above both ways of running, so that neither imports the other back:
:mod:`._batch` holds what one process does and what every way shares, :mod:`._executors` the
scaled runs (built on :mod:`._batch` and :mod:`._partitions`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import networkx as nx

from memtrace_otel.attribution._base import Method
from memtrace_otel.attribution._batch import BatchSummary, QuietHeap, _run_in_process
from memtrace_otel.attribution._executors import ViewMaker, run_scaled
from memtrace_otel.attribution._model import Verdict
from memtrace_otel.attribution._reviews import precision_of, read_verdict_spans
from memtrace_otel.attribution._verdict_log import VerdictLog
from memtrace_otel.errors import MemtraceError
from memtrace_otel.sources import DEFAULT_RULE, Outcome, OutcomeRule

__all__ = ["run_batch"]


def run_batch(
    sources: Sequence[str],
    method: Method,
    *,
    cases_file: str | None = None,
    out: str | os.PathLike[str] | VerdictLog | None = None,
    strict: bool = False,
    progress: TextIO | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
    graphs: dict[str, nx.MultiDiGraph] | None = None,
    executor: str | None = None,
    memory_bound: int | str | None = None,
    redo_stale: bool = False,
    source_options: Mapping[str, Any] | None = None,
    loaded: BatchSummary | None = None,
    outcomes: Sequence[Outcome] | None = None,
    rule: OutcomeRule = DEFAULT_RULE,
    view: ViewMaker | None = None,
    views: dict[str, Any] | None = None,
) -> tuple[list[Verdict], BatchSummary]:
    """Attribute every failed case of ``sources``.

    Args:
        sources: file paths, directories, globs or backend URLs.
        method: the attribution method.
        cases_file: a cases file; without it failed cases come from judge ops.
        out: a verdicts file to append to (resumable; a path, or a :class:`VerdictLog` the
            caller opened); ``None`` keeps verdicts in memory only. Only final verdicts are
            skipped by the next run; the summary then counts every verdict in the file.
        strict: stop at the first bad record instead of skipping and counting it.
        progress: where to draw a progress line (stderr in the CLI), or ``None``.
        on_verdict: called with each new verdict (write-back, live reports).
        graphs: already built store graphs (skips loading ``sources``).
        executor: ``local[N]`` or ``dask://HOST:PORT``: partition the work by store and run it
            there (``docs/scale.md``); verdicts and summary are those of the in-process run.
        memory_bound: run in this process but spill records per store to a SQLite temp file
            to stay near this many bytes (``"512M"``); ignored with ``graphs``.
        redo_stale: redo final verdicts older than the newest op of their store (new traces or
            feedback arrived since).
        source_options: options for backend sources (``max_traces``, ``limit``).
        loaded: what loading ``graphs`` counted (records, skips, a capped source), when the
            caller loaded them: merged into the summary.
        outcomes: evaluations already read with ``graphs`` (see :func:`load_store_graphs`);
            without ``graphs`` they are read from ``sources`` (scaled runs too).
        rule: which evaluations count as failures (default: ``incorrect`` or score 0).
        view: scaled runs only: draws each failed case's report page while its store's graph
            is held (:class:`~memtrace_otel.reporting.ReportViews`), so the report needs no
            second load.
        views: with ``view``, filled with those pages by case id.

    Returns:
        The verdicts of this run (resumed cases excluded) and the summary.

    People's reviews of verdict spans give ``summary.review_precision`` in every way of running,
    screened by ``rule.trust``; a scaled run reads them in a pass of their own
    (:func:`~memtrace_otel.attribution._reviews.read_verdict_spans`).
    """
    if graphs is None and (executor is not None or memory_bound is not None):
        verdicts, summary = run_scaled(
            sources,
            method,
            executor=executor,
            memory_bound=memory_bound,
            cases_file=cases_file,
            out=out,
            strict=strict,
            progress=progress,
            on_verdict=on_verdict,
            redo_stale=redo_stale,
            source_options=source_options,
            rule=rule,
            view=view,
            views=views,
        )
        try:
            precision = precision_of(list(read_verdict_spans(sources)), rule.trust)
        except (MemtraceError, OSError) as exc:  # the run read these files: rare, and said
            summary.source_errors.append(f"reviews not read: {exc}")
            precision = None
        if precision is not None:
            summary.review_precision = precision
        return verdicts, summary
    with QuietHeap() as heap:
        return _run_in_process(
            heap,
            sources,
            method,
            cases_file,
            out,
            strict,
            progress,
            on_verdict,
            graphs,
            redo_stale,
            source_options or {},
            loaded,
            outcomes,
            rule,
        )

"""How one batch run runs: :class:`RunOptions`, one value checked when it is made.

Every way of running (in this process, spilled to disk, on a process pool or Dask) takes the same
value, so a wrong option fails where it was written, not deep inside a partition.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TextIO

import networkx as nx

from memtrace_otel.attribution._model import Case, Verdict
from memtrace_otel.job._verdict_log import VerdictLog
from memtrace_otel.sources import OutcomeRule
from memtrace_otel.sources._outcomes import DEFAULT_RULE

__all__ = ["DEFAULT_RETRIES", "ExecutorSpec", "RunOptions", "parse_executor", "parse_size"]

VERDICT_TRACES = ("culprit", "new")
"""Where a verdict span goes: into the culprit's trace, as its child (default), or a new trace."""

DEFAULT_RETRIES = 2
"""How often a partition whose worker was lost is run again before it is reported."""

_EXECUTOR = re.compile(r"^local(?:\[(\d+)\])?$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ExecutorSpec:
    """A parsed ``--executor`` value.

    >>> parse_executor("local[3]")
    ExecutorSpec(kind='local', workers=3, address='')
    >>> parse_executor("inline").kind
    'inline'
    >>> parse_executor("dask://127.0.0.1:8786").address
    'tcp://127.0.0.1:8786'
    """

    kind: str
    workers: int = 1
    address: str = ""


def parse_executor(spec: str) -> ExecutorSpec:
    """Parse ``inline``, ``local``, ``local[N]``, ``dask://HOST:PORT`` or ``tcp://HOST:PORT``.

    Raises:
        ValueError: anything else.
    """
    text = spec.strip()
    if text == "inline":
        return ExecutorSpec("inline")
    match = _EXECUTOR.match(text)
    if match:
        workers = int(match.group(1)) if match.group(1) else (os.cpu_count() or 1)
        if workers < 1:
            raise ValueError(f"executor {spec!r}: local[N] needs N >= 1")
        return ExecutorSpec("local", workers)
    for scheme in ("dask://", "tcp://"):
        if text.startswith(scheme) and len(text) > len(scheme):
            return ExecutorSpec("dask", address="tcp://" + text[len(scheme) :])
    raise ValueError(f"executor {spec!r}: expected inline, local, local[N] or dask://HOST:PORT")


def parse_size(text: str | int) -> int:
    """Bytes from ``512M``, ``2G``, ``100k`` or a plain number of bytes.

    >>> parse_size("1.5G"), parse_size("64M"), parse_size(4096)
    (1610612736, 67108864, 4096)

    Raises:
        ValueError: not a size, or not positive.
    """
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(text)
        if not match:
            raise ValueError(f"size {text!r}: expected a number with an optional K, M, G or T")
        power = " kmgt".index(match.group(2).lower() or " ")
        value = int(float(match.group(1)) * 1024**power)
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return value


ViewMaker = Callable[[nx.MultiDiGraph, str, "Verdict | None", "Case | None"], Any]
"""``(graph, case id, verdict, case) -> page``: what a run keeps of a case for its report
(:class:`~memtrace_otel.reporting.ReportViews`); picklable, for the executors' workers."""


@dataclass(frozen=True)
class RunOptions:
    """How :func:`~memtrace_otel.job.run_batch` runs. Checked when made: a bad executor or size,
    a negative retry count or an option of the wrong kind raises here.

    >>> RunOptions(executor="local[2]", memory_bound="64M").bound
    67108864
    >>> RunOptions(executor="locl")
    Traceback (most recent call last):
    ...
    ValueError: executor 'locl': expected inline, local, local[N] or dask://HOST:PORT

    Attributes:
        cases_file: a cases file; without it failed cases come from feedback, evaluations and
            judge ops.
        out: a verdicts file to append to (resumable; a path, or a :class:`VerdictLog` the
            caller opened); ``None`` keeps verdicts in memory only. Only final verdicts are
            skipped by the next run; the summary then counts every verdict in the file.
        strict: stop at the first bad record instead of skipping and counting it.
        progress: where to draw a progress line (stderr in the CLI), or ``None``.
        on_verdict: called with each new verdict (write-back, live reports).
        executor: ``inline``, ``local[N]`` or ``dask://HOST:PORT``: partition the work by store
            and run it there (``docs/scale.md``); verdicts and summary are those of the
            in-process run. Ignored when the caller gives built graphs.
        memory_bound: run in this process but spill records per store to a SQLite temp file to
            stay near this many bytes (``"512M"``); ignored with built graphs.
        redo_stale: redo final verdicts older than the newest op of their store.
        source_options: options for backend sources (``max_traces``, ``limit``, ``http``), and
            ``content`` (the content store URL references are read from).
        rule: which evaluations count as failures (default: ``incorrect`` or score 0).
        view: scaled runs only: draws each failed case's report page while its store's graph
            is held (:class:`~memtrace_otel.reporting.ReportViews`).
        views: with ``view``, filled with those pages by case id.
        retries: scaled runs: runs of a lost worker's partition beyond the first.
        partitions: scaled runs: how many partitions (default: four per worker).
        spill_dir: with ``memory_bound``: where the spill file goes.
        resolve_content: scaled runs: resolve the content references the records carry
            (``REFERENCE`` capture), from ``source_options["content"]`` or where each
            reference points, as an in-memory run does. ``False`` skips the look for them (the
            CLI's byte scan found none).
    """

    cases_file: str | None = None
    out: str | os.PathLike[str] | VerdictLog | None = None
    strict: bool = False
    progress: TextIO | None = None
    on_verdict: Callable[[Verdict], None] | None = None
    executor: str | None = None
    memory_bound: int | str | None = None
    redo_stale: bool = False
    source_options: Mapping[str, Any] = field(default_factory=dict)
    rule: OutcomeRule = DEFAULT_RULE
    view: ViewMaker | None = None
    views: dict[str, Any] | None = None
    retries: int = DEFAULT_RETRIES
    partitions: int | None = None
    spill_dir: str | None = None
    resolve_content: bool = True

    def __post_init__(self) -> None:
        for name in ("cases_file", "spill_dir"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name}={value!r}: expected a path as a str, or None")
        if self.out is not None and not isinstance(self.out, str | os.PathLike | VerdictLog):
            raise TypeError(f"out={self.out!r}: expected a path, a VerdictLog or None")
        if not isinstance(self.rule, OutcomeRule):
            raise TypeError(f"rule={self.rule!r}: expected an OutcomeRule")
        if not isinstance(self.source_options, Mapping):
            raise TypeError(f"source_options={self.source_options!r}: expected a mapping")
        for name in ("on_verdict", "view"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"{name}={value!r}: expected a callable or None")
        if self.views is not None and self.view is None:
            raise ValueError("views is filled by view: give both or neither")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries={self.retries!r}: expected an int >= 0")
        if self.partitions is not None and (
            isinstance(self.partitions, bool)
            or not isinstance(self.partitions, int)
            or self.partitions < 1
        ):
            raise ValueError(f"partitions={self.partitions!r}: expected an int >= 1 or None")
        if self.executor is not None:
            parse_executor(self.executor)
        if self.memory_bound is not None:
            parse_size(self.memory_bound)
        # A read-only copy: the caller's mapping may change after the options are made.
        object.__setattr__(self, "source_options", MappingProxyType(dict(self.source_options)))

    @property
    def executor_spec(self) -> ExecutorSpec | None:
        """The parsed executor, or ``None``."""
        return parse_executor(self.executor) if self.executor is not None else None

    @property
    def bound(self) -> int | None:
        """The memory bound in bytes, or ``None``."""
        return parse_size(self.memory_bound) if self.memory_bound is not None else None

    @property
    def scaled(self) -> bool:
        """Whether the run is partitioned or spilled (an executor or a memory bound given)."""
        return self.executor is not None or self.memory_bound is not None

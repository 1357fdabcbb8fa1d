"""``memtrace attribute``: the batch job."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from memtrace_otel.attribution import (
    BatchSummary,
    Verdict,
    failed_cases,
    get_method,
    load_store_graphs,
    method_names,
    run_batch,
    summary_table,
)
from memtrace_otel.attribution._executors import parse_executor, parse_size
from memtrace_otel.attribution._verdict_log import VerdictLog
from memtrace_otel.attribution._writeback import (
    VERDICT_TRACES,
    otlp_target,
    protocol_hint,
    send_verdicts,
)
from memtrace_otel.cli import EXIT_NOTHING_TO_ATTRIBUTE
from memtrace_otel.cli._backend import add_backend_options, http_options
from memtrace_otel.export._configure import ENDPOINT_VARS, resolve_exporter
from memtrace_otel.reporting import check_base_url, label_accuracy, load_labels, write_report
from memtrace_otel.sources import Outcome, OutcomeRule

NO_FAILURES_HINT = (
    "memtrace: nothing to attribute: no answer in these traces is marked wrong. Mark one with\n"
    "  memtrace feedback --traceparent <answer traceparent> --wrong [--expected TEXT]\n"
    "(or memtrace_otel.instrumentation.send_feedback() in Python; the app gets the traceparent "
    "from last_answer()), emit gen_ai.evaluation.result events, record judge ops, or pass "
    "--cases FILE. See docs/feedback.md."
)


def register(subparsers: Any) -> None:
    """Add the ``attribute`` subcommand."""
    parser = subparsers.add_parser(
        "attribute",
        help="find each failed case's earliest decisive faulty operation",
        description=(
            "Read exported traces, find the failed cases (from feedback spans and "
            "gen_ai.evaluation.result events or log records, judge ops, or --cases), and write "
            "one verdict per case: the earliest decisive faulty operation and its error type. "
            "Exit status: 0 all ran, 1 a case failed to run or records were skipped, 2 bad "
            "usage, 3 no failed case found without --cases (nothing attributed)."
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
        "--failure-labels",
        default="incorrect",
        metavar="LABELS",
        help="comma-separated gen_ai.evaluation.score.label values that mark a failure "
        "(default: incorrect)",
    )
    parser.add_argument(
        "--success-labels",
        default="correct",
        metavar="LABELS",
        help="labels that mark a success (default: correct)",
    )
    parser.add_argument(
        "--score-threshold",
        type=float,
        metavar="X",
        help="a score below X is a failure, at or above X a success (default: 0 fails, 1 "
        "succeeds, other scores are undecided)",
    )
    parser.add_argument(
        "--evaluation-name",
        action="append",
        metavar="NAME",
        help="read only evaluations of this gen_ai.evaluation.name (repeatable; default: all)",
    )
    parser.add_argument(
        "--method",
        default="evidence",
        choices=method_names(),
        help="attribution method (default: evidence)",
    )
    parser.add_argument(
        "--out",
        help="verdicts file (JSON Lines, appended; cases with a final verdict in it are skipped, "
        "cases not found or capped are retried; locked while a run writes it)",
    )
    parser.add_argument(
        "--redo-stale",
        action="store_true",
        help="redo verdicts in --out made before newer ops (new traces, new feedback) of their "
        "memory store arrived",
    )
    parser.add_argument(
        "--max-traces",
        type=int,
        metavar="N",
        help="the most traces a jaeger+/tempo+ source loads (default 20000); when reached, the "
        "summary says so and the exit status is 1",
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        help="write summary.json, summary.md and the HTML report (DIR/index.html) here",
    )
    parser.add_argument(
        "--labels",
        metavar="FILE",
        help="ground-truth labels (JSON Lines: case_id, error_type, op_id, op_name, source): "
        "accuracy on stderr and in the report",
    )
    parser.add_argument(
        "--jaeger-url",
        metavar="URL",
        help="Jaeger UI base URL (http://localhost:16686): the report links each op to its span",
    )
    parser.add_argument(
        "--tempo-url",
        metavar="URL",
        help="Grafana base URL with a Tempo data source of uid 'tempo', or a link template "
        "with {trace_id} and {span_id}: the report links each op to its span",
    )
    parser.add_argument(
        "--write-back",
        action="store_true",
        help="send each verdict as a memtrace.attribution span to the OTLP endpoint of "
        "OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT over OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (default "
        "http/protobuf); spans not accepted are counted (exit status 1) and, with --out, resent "
        "by the next run",
    )
    parser.add_argument(
        "--verdict-trace",
        choices=VERDICT_TRACES,
        default="culprit",
        help="with --write-back: put each verdict span in the culprit's trace as a child of the "
        "culprit op span (culprit, the default: Jaeger and Tempo show it in that trace), or in a "
        "trace of its own (new); either way it links to the culprit",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="stop at the first bad record instead of skipping and counting it",
    )
    parser.add_argument(
        "--executor",
        metavar="EXECUTOR",
        help="partition the work by memory store and run it on local[N] (a pool of N "
        "processes; local: one per core) or dask://HOST:PORT (a dask.distributed scheduler); "
        "default: this process (docs/scale.md)",
    )
    parser.add_argument(
        "--memory-bound",
        metavar="SIZE",
        help="without --executor: spill span records per store to a SQLite temp file to keep "
        "memory near SIZE (512M, 2G) on exports larger than RAM",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    add_backend_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the batch job; exit 0 when every case ran and no record was skipped, else 1."""
    try:
        method = get_method(args.method)
        for url, option in ((args.jaeger_url, "--jaeger-url"), (args.tempo_url, "--tempo-url")):
            if url:
                check_base_url(url, option)
    except ValueError as exc:  # e.g. a model-based method with no endpoint configured
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 2
    try:
        executor = getattr(args, "executor", None)
        bound = getattr(args, "memory_bound", None)
        if executor is not None and parse_executor(executor).kind == "dask":
            try:
                import dask.distributed  # noqa: F401 - only checked for here
            except ImportError:
                raise ValueError(
                    "--executor dask:// needs dask.distributed: pip install 'memtrace-otel[dask]'"
                ) from None
        if bound is not None:
            parse_size(bound)
        check_paths(args)
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 2
    try:
        rule = OutcomeRule(
            failure_labels=args.failure_labels,
            success_labels=args.success_labels,
            threshold=args.score_threshold,
            names=args.evaluation_name,
        )
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 2
    labels = load_labels(args.labels) if args.labels else None
    if args.max_traces is not None and args.max_traces < 1:
        print("memtrace: error: --max-traces must be >= 1", file=sys.stderr)
        return 2
    if args.write_back and not any(os.environ.get(v) for v in ENDPOINT_VARS):
        print(
            "memtrace: error: --write-back needs OTEL_EXPORTER_OTLP_ENDPOINT "
            "(or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)",
            file=sys.stderr,
        )
        return 2
    exporter = resolve_exporter() if args.write_back else None  # a bad protocol fails here
    options: dict[str, Any] = {}
    if args.max_traces is not None:
        options["max_traces"] = args.max_traces
    try:
        options["http"] = http_options(args)
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        # The verdicts file is checked and locked before anything is loaded.
        log = stack.enter_context(VerdictLog(args.out)) if args.out else None
        return _run(args, method, executor, bound, labels, log, exporter, options, rule)


def _run(
    args: argparse.Namespace,
    method: Any,
    executor: str | None,
    bound: str | None,
    labels: Any,
    log: VerdictLog | None,
    exporter: SpanExporter | None,
    options: dict[str, Any],
    rule: OutcomeRule,
) -> int:
    scaled = executor is not None or bound is not None
    progress = None if args.quiet else sys.stderr
    # The graphs are built here, once, so that the report can draw each case from them
    # (a scaled run never holds every graph: its report, if asked for, loads them afterwards).
    started = time.perf_counter()
    loading = BatchSummary()
    outcomes: list[Outcome] = []
    graphs = (
        None
        if scaled
        else load_store_graphs(
            args.sources,
            strict=args.strict,
            summary=loading,
            outcomes=outcomes,
            progress=progress,
            options=options,
        )
    )
    verdicts, summary = run_batch(
        args.sources,
        method,
        cases_file=args.cases,
        out=log,
        strict=args.strict,
        progress=progress,
        graphs=graphs,
        executor=executor,
        memory_bound=bound,
        outcomes=outcomes,
        rule=rule,
        redo_stale=args.redo_stale,
        source_options=options,
        loaded=loading,
    )
    if exporter is not None:
        _write_back(exporter, verdicts, log, summary, trace=args.verdict_trace)
    summary.seconds = round(time.perf_counter() - started, 3)
    usage = getattr(method, "usage", None)
    if isinstance(usage, dict):
        summary.model_usage = dict(usage)
        print(
            "model usage: " + ", ".join(f"{k}={v}" for k, v in sorted(usage.items())),
            file=sys.stderr,
        )
    if log is None:
        for verdict in verdicts:
            print(verdict.to_json())
    print(summary_table(summary), file=sys.stderr)
    if summary.cases == 0 and args.cases is None:
        print(NO_FAILURES_HINT, file=sys.stderr)
    # With --out, the file also holds the verdicts of earlier (resumed) runs: list them all.
    listed: list[Verdict] = log.verdicts() if log is not None else verdicts
    if labels is not None:
        accuracy = label_accuracy(listed, labels)
        print(_accuracy_line(accuracy), file=sys.stderr)
    if args.report:
        if graphs is None:
            outcomes = []
            graphs = load_store_graphs(
                args.sources, strict=args.strict, outcomes=outcomes, options=options
            )
        # The failed cases again (cheap: the graphs are built), for what each page leads with.
        cases = {
            case.case_id: case
            for _, case in failed_cases(graphs, args.cases, BatchSummary(), outcomes, rule)
        }
        index = write_report(  # also writes summary.json and summary.md
            args.report,
            listed,
            graphs,
            summary,
            labels=labels,
            jaeger_url=args.jaeger_url,
            tempo_url=args.tempo_url,
            sources=args.sources,
            cases=cases,
        )
        print(f"report: {index}", file=sys.stderr)
    if summary.cases == 0 and args.cases is None:
        return EXIT_NOTHING_TO_ATTRIBUTE
    return 0 if summary.ok else 1


def check_paths(args: argparse.Namespace) -> None:
    """Refuse, before any work, paths the run could not read or write at its end.

    Raises:
        ValueError: ``--cases`` or ``--labels`` is not a readable file; ``--out`` is a folder
            or cannot be created; ``--report`` is a file or cannot be created.
    """
    for option, path in (("--cases", args.cases), ("--labels", args.labels)):
        if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            what = "no such file" if not os.path.lexists(path) else "not a readable file"
            raise ValueError(f"{option} {path}: {what}")
    if args.out is not None:
        if os.path.isdir(args.out):
            raise ValueError(f"--out {args.out}: is a folder; name the verdicts file")
        _check_creatable("--out", args.out, os.path.exists(args.out))
    if args.report is not None:
        if os.path.lexists(args.report) and not os.path.isdir(args.report):
            raise ValueError(f"--report {args.report}: not a folder")
        _check_creatable("--report", args.report, os.path.isdir(args.report))


def _check_creatable(option: str, path: str, exists: bool) -> None:
    """``path`` is writable if it exists, else its nearest existing parent is a writable folder
    (the missing folders are made)."""
    if exists:
        if not os.access(path, os.W_OK):
            raise ValueError(f"{option} {path}: not writable")
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: cannot be created ({parent} is not a writable folder)")


def _write_back(
    exporter: SpanExporter,
    verdicts: list[Verdict],
    log: VerdictLog | None,
    summary: BatchSummary,
    *,
    trace: str = "culprit",
) -> None:
    """Send the verdict spans not sent yet (with --out: also those earlier runs failed to send;
    pending verdicts wait for their final version) and count what the endpoint refused."""
    entries = log.unsent() if log is not None else []
    todo = [entry.verdict for entry in entries] if log is not None else verdicts
    result = send_verdicts(todo, exporter, trace=trace)
    if log is not None:
        log.mark_sent(entries[i] for i in result.sent)
    summary.written_back = len(result.sent)
    summary.write_back_failed = result.failed
    if result.failed:
        endpoint, protocol = otlp_target()
        summary.write_back_error = (
            f"{result.error}: {endpoint} over {protocol}{protocol_hint(endpoint, protocol)}"
            + ("; the next run with --write-back resends them" if log is not None else "")
        )


def _accuracy_line(accuracy: dict[str, Any]) -> str:
    def share(correct: int, total: int) -> str:
        return f"{correct}/{total}" + (f" ({100 * correct / total:.1f}%)" if total else "")

    return (
        "accuracy against labels: error type "
        + share(accuracy["error_type_correct"], accuracy["compared"])
        + ", culprit op "
        + share(accuracy["op_id_correct"], accuracy["op_id_compared"])
        + f"; {len(accuracy['labelled_without_verdict'])} labelled cases without a verdict"
    )

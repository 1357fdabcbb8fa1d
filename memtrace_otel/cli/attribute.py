"""``memtrace attribute``: the batch job."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from memtrace_otel.attribution import Verdict, get_method, method_names
from memtrace_otel.attribution._model import load_cases
from memtrace_otel.attribution._semantic import check_default_model, default_encoder
from memtrace_otel.cli import EXIT_FAILURES, EXIT_NOTHING_TO_ATTRIBUTE, EXIT_OK, EXIT_USAGE
from memtrace_otel.cli._backend import add_backend_options, http_options
from memtrace_otel.job import (
    BatchSummary,
    RunOptions,
    failed_cases,
    load_store_graphs,
    run_batch,
    summary_table,
)
from memtrace_otel.job._batch import QuietHeap
from memtrace_otel.job._executors import default_executor
from memtrace_otel.job._options import VERDICT_TRACES
from memtrace_otel.job._verdict_log import VerdictLog
from memtrace_otel.reporting._labels import label_accuracy, load_labels
from memtrace_otel.reporting._links import check_base_url
from memtrace_otel.semconv.env import OTLP_ENDPOINT_VARS
from memtrace_otel.sources import (
    DEFAULT_SKEW_SECONDS,
    ContentResolver,
    Outcome,
    OutcomeRule,
    TrustPolicy,
    expand_paths,
)
from memtrace_otel.sources._content import reference_kinds

if TYPE_CHECKING:  # the SDK is imported by a run that writes back (a run that does not starts
    from opentelemetry.sdk.trace.export import SpanExporter  # some 0.03 s sooner)

NO_FAILURES_HINT = (
    "memtrace: nothing to attribute: no answer in these traces is marked wrong. Mark one with\n"
    "  memtrace feedback --traceparent <answer traceparent> --wrong [--expected TEXT]\n"
    "(or memtrace_otel.instrumentation.send_feedback() in Python; the app gets the traceparent "
    "from last_answer()), emit gen_ai.evaluation.result events, record judge ops, or pass "
    "--cases FILE. See docs/feedback.md."
)

_SAMPLING_HINT = (
    "A Collector with tail sampling exports a trace only after its decision_wait (about 30 s in "
    "collector_config/otelcol.yaml): run again in a minute, or widen the window (lookback=)."
)


def nothing_hint(summary: BatchSummary) -> str:
    """Why a run without a cases file found nothing to attribute, told apart: no traces at all
    (a service or window that matches nothing, traces not exported yet), feedback naming answers
    that are not in these traces, or traces where no answer is marked wrong."""
    if summary.records == 0:
        return (
            "memtrace: nothing to attribute: no traces were found for these sources (for a "
            "jaeger+/tempo+ source: no trace of that ?service= in that window). This is not "
            "'nothing marked wrong': nothing was read. " + _SAMPLING_HINT
        )
    unknown = len(summary.feedback.get("unknown", ()))
    if unknown:
        return (
            f"memtrace: nothing to attribute: {unknown} feedback name answers whose traces are "
            "not in these sources (not exported yet, outside the window, or in another "
            "service: pass that service as a source too); a later run picks them up. "
            + _SAMPLING_HINT
        )
    return NO_FAILURES_HINT


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
        "--feedback-skew",
        type=float,
        default=DEFAULT_SKEW_SECONDS,
        metavar="SECONDS",
        help="refuse feedback timestamped later than the run's start plus SECONDS (default "
        "300): feedback may come days late, never from the future",
    )
    parser.add_argument(
        "--feedback-allow-service",
        action="append",
        default=[],
        metavar="NAME",
        help="accept unsigned feedback that names a case by id alone from this service.name "
        "(repeatable; a convenience, not a defence: service.name can be forged; set "
        "MEMTRACE_FEEDBACK_KEY to require signatures, docs/feedback.md)",
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
        help="partition the work by memory store and run it inline (this process, one "
        "partition at a time), on local[N] (a pool of N processes; local: one per core) or "
        "dask://HOST:PORT (a dask.distributed scheduler); default: inline for JSON Lines files, "
        "a spill to disk (--memory-bound 512M) for other files, in memory for jaeger+/tempo+ "
        "URLs (docs/scale.md)",
    )
    parser.add_argument(
        "--memory-bound",
        metavar="SIZE",
        help="without --executor: spill span records per store to a SQLite temp file to keep "
        "memory near SIZE (512M, 2G), an explicit cap instead of the default streaming",
    )
    parser.add_argument(
        "--content",
        metavar="URL",
        help="read the values of REFERENCE capture (memtrace.variable.value_ref, gen_ai.*_ref) "
        "from this content store (any fsspec URL, your own credentials); default: where each "
        "reference points. Each object is verified against its digest (MEMTRACE_DIGEST_KEY for "
        "keyed ones); the report then contains content",
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
        # The sentence model is checked once, here, not found broken by every case. Cases
        # without their expected answer are located by meaning: the encoder is built now,
        # before any trace is in memory (built later, its load adds to the run's peak). A cases
        # file whose every case holds its answer (or evidence) may need it for none: it is then
        # built when a case first does.
        if _answers_known(args.cases):
            check_default_model()
        else:
            default_encoder()
    except ValueError as exc:  # e.g. a model-based method with no endpoint configured
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        # The run's options, checked here (a bad --executor or --memory-bound fails now).
        options = RunOptions(
            cases_file=args.cases,
            strict=args.strict,
            progress=None if args.quiet else sys.stderr,
            executor=getattr(args, "executor", None),
            memory_bound=getattr(args, "memory_bound", None),
            redo_stale=args.redo_stale,
        )
        spec = options.executor_spec
        if spec is not None and spec.kind == "dask":
            try:
                import dask.distributed  # noqa: F401 - only checked for here
            except ImportError:
                raise ValueError(
                    "--executor dask:// needs dask.distributed: pip install 'memtrace-otel[dask]'"
                ) from None
        content = getattr(args, "content", None)
        if content:
            ContentResolver(content)  # a bad URL, no fsspec or a short key fails here
        check_paths(args)
        if not options.scaled:
            executor, bound = default_executor(args.sources)  # stream by store (docs/scale.md)
            resolve = True
            if executor == "inline" and not content:  # plain JSON Lines: a byte scan says
                kinds = reference_kinds(  # whether they hold content references to resolve
                    [path for spec in args.sources for path in expand_paths(spec)]
                )
                resolve = kinds.memtrace or kinds.upstream
            options = dataclasses.replace(
                options, executor=executor, memory_bound=bound, resolve_content=resolve
            )
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        rule = OutcomeRule(
            failure_labels=args.failure_labels,
            success_labels=args.success_labels,
            threshold=args.score_threshold,
            names=args.evaluation_name,
            trust=TrustPolicy.from_env(
                skew_seconds=args.feedback_skew, allowed_services=args.feedback_allow_service
            ),
        )
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    labels = load_labels(args.labels) if args.labels else None
    if args.max_traces is not None and args.max_traces < 1:
        print("memtrace: error: --max-traces must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    if args.write_back and not any(os.environ.get(v) for v in OTLP_ENDPOINT_VARS):
        print(
            "memtrace: error: --write-back needs OTEL_EXPORTER_OTLP_ENDPOINT "
            "(or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    exporter = None
    if args.write_back:
        from memtrace_otel.export._configure import resolve_exporter

        exporter = resolve_exporter()  # a bad protocol fails here
    source_options: dict[str, Any] = {}
    if args.max_traces is not None:
        source_options["max_traces"] = args.max_traces
    if getattr(args, "content", None):
        source_options["content"] = args.content
    try:
        source_options["http"] = http_options(args)
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    options = dataclasses.replace(options, rule=rule, source_options=source_options)
    with contextlib.ExitStack() as stack:
        # The verdicts file is checked and locked before anything is loaded.
        log = stack.enter_context(VerdictLog(args.out)) if args.out else None
        return _run(args, method, dataclasses.replace(options, out=log), labels, exporter)


def _answers_known(cases: str | None) -> bool:
    """Whether every case of the cases file ``cases`` gives its expected answer or evidence
    (``False`` without one, or when it cannot be read: the run reports that)."""
    if cases is None:
        return False
    try:
        return all(c.gold_answers or c.evidence_refs for c in load_cases(cases, strict=False))
    except (OSError, ValueError):
        return False


def _run(
    args: argparse.Namespace,
    method: Any,
    options: RunOptions,
    labels: Any,
    exporter: SpanExporter | None,
) -> int:
    scaled, progress, rule = options.scaled, options.progress, options.rule
    log = options.out if isinstance(options.out, VerdictLog) else None
    # An in-memory run builds the graphs here, once, so that the report can draw each case
    # from them; a scaled run never holds every graph: it draws each case's page while the
    # case's store graph is in memory (ReportViews), and the report reuses those pages.
    started = time.perf_counter()
    loading = BatchSummary()
    outcomes: list[Outcome] = []
    views: dict[str, Any] | None = {} if scaled and args.report else None
    if args.report:  # the HTML report's module (and its templates) only when one is written
        from memtrace_otel.reporting import ReportViews, write_report
    drawer = (
        ReportViews(
            labels,
            check_base_url(args.jaeger_url, "--jaeger-url") if args.jaeger_url else None,
            check_base_url(args.tempo_url, "--tempo-url") if args.tempo_url else None,
        )
        if views is not None
        else None
    )

    # Loading runs under the batch job's GC policy (QuietHeap: the collector off while records
    # and graphs are built, then what they hold frozen): with the collector on, its full
    # collections traverse every record again and loading took twice as long.
    def attribute(scaled: bool) -> tuple[list[Verdict], BatchSummary, dict[str, Any] | None]:
        with contextlib.ExitStack() as stack:
            graphs = None
            if not scaled:
                heap = stack.enter_context(QuietHeap())
                graphs = load_store_graphs(
                    args.sources,
                    strict=options.strict,
                    summary=loading,
                    outcomes=outcomes,
                    progress=progress,
                    options=options.source_options,
                    trust=rule.trust,
                )
                heap.loaded()
            verdicts, summary = run_batch(
                args.sources,
                method,
                dataclasses.replace(options, view=drawer, views=views),
                graphs=graphs,
                loaded=loading,
                outcomes=outcomes,
            )
        return verdicts, summary, graphs

    verdicts, summary, graphs = attribute(scaled)
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
        print(nothing_hint(summary), file=sys.stderr)
    # With --out, the file also holds the verdicts of earlier (resumed) runs: list them all.
    listed: list[Verdict] = log.verdicts() if log is not None else verdicts
    if labels is not None:
        accuracy = label_accuracy(listed, labels)
        print(_accuracy_line(accuracy), file=sys.stderr)
    if args.report:
        cases = None
        if graphs is not None:
            # The failed cases again (cheap: the graphs are built), for what each page leads with.
            cases = {
                case.case_id: case
                for _, case in failed_cases(graphs, args.cases, BatchSummary(), outcomes, rule)
            }
        index = write_report(  # also writes summary.json and summary.md
            args.report,
            listed,
            graphs or {},
            summary,
            labels=labels,
            jaeger_url=args.jaeger_url,
            tempo_url=args.tempo_url,
            sources=args.sources,
            cases=cases,
            views=views,
        )
        print(f"report: {index}", file=sys.stderr)
    if summary.cases == 0 and args.cases is None:
        return EXIT_NOTHING_TO_ATTRIBUTE
    return EXIT_OK if summary.ok else EXIT_FAILURES


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
    from memtrace_otel.job._writeback import otlp_target, protocol_hint, send_verdicts

    entries = log.unsent() if log is not None else []
    todo = [entry.verdict for entry in entries] if log is not None else verdicts
    # Verdicts made from resolved content: their reasons may quote it; the backend gets refs.
    result = send_verdicts(
        todo,
        exporter,
        trace=trace,
        textless=summary.resolved_content or bool(summary.content),
    )
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

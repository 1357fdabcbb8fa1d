"""``memtrace graph SOURCE... --case ID``: one case's evolution subgraph as HTML, DOT, GraphML or JSON."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import networkx as nx

from memtrace_otel.attribution import Verdict, get_method, load_cases, method_names
from memtrace_otel.cli import EXIT_FAILURES, EXIT_OK, EXIT_USAGE
from memtrace_otel.errors import GraphError
from memtrace_otel.graph import case_subgraph, graph_index, to_dot, to_node_link_json, write_graphml
from memtrace_otel.job import BatchSummary, load_store_graphs, read_verdicts
from memtrace_otel.reporting import case_html, case_view, check_base_url
from memtrace_otel.semconv import JudgeVerdict
from memtrace_otel.sources import SourceStats

FORMATS = ("html", "dot", "graphml", "json")
NO_METHOD = "none"


def register(subparsers: Any) -> None:
    """Add the ``graph`` subcommand."""
    parser = subparsers.add_parser(
        "graph",
        help="draw one case's evolution subgraph (html, dot, graphml or json)",
        description=(
            "Read exported traces and write the evolution subgraph of one case: everything its "
            "answer depends on. The html page marks the culprit op (found with --method, or "
            "taken from --verdicts) and the evidence path, and opens offline."
        ),
    )
    parser.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="trace files, directories, globs or jaeger+http(s):// / tempo+http(s):// URLs",
    )
    parser.add_argument("--case", required=True, metavar="ID", help="the case id")
    parser.add_argument("--format", default="html", choices=FORMATS, help="default: html")
    parser.add_argument("-o", "--output", metavar="FILE", help="where to write (default: stdout)")
    parser.add_argument(
        "--method",
        default="evidence",
        choices=[*method_names(), NO_METHOD],
        help="attribution method that marks the culprit in the html page (default: evidence; "
        "'none' draws no culprit)",
    )
    parser.add_argument(
        "--verdicts", metavar="FILE", help="take the case's verdict from this verdicts file instead"
    )
    parser.add_argument("--cases", metavar="FILE", help="cases file with the case's evidence refs")
    parser.add_argument("--jaeger-url", metavar="URL", help="Jaeger UI base URL, for span links")
    parser.add_argument(
        "--tempo-url",
        metavar="URL",
        help="Grafana base URL (Tempo data source uid 'tempo') or a link template with {trace_id}",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="stop at the first bad record instead of skipping it",
    )
    parser.set_defaults(func=run)


def find_case_graph(graphs: dict[str, nx.MultiDiGraph], case_id: str) -> nx.MultiDiGraph:
    """The store graph holding the ops of ``case_id``.

    Raises:
        GraphError: no loaded op belongs to the case.
    """
    for _store, G in sorted(graphs.items()):
        if graph_index(G).ops_of(case_id):
            return G
    known = sorted({c for G in graphs.values() for c in graph_index(G).case_ops})
    nearest = difflib.get_close_matches(case_id, known, n=5, cutoff=0.0) if known else []
    hint = (
        f"; nearest of the {len(known)} case ids: {', '.join(nearest)}"
        if nearest
        else "; the sources hold no case ids"
    )
    raise GraphError(f"no op belongs to case {case_id!r} in the sources{hint}")


def _verdict(args: argparse.Namespace, G: nx.MultiDiGraph) -> Verdict | None:
    if args.verdicts:
        found = None
        for verdict in read_verdicts(args.verdicts):
            if verdict.case_id == args.case:
                found = verdict  # the last line for a case wins, as in the report
        if found is None:
            print(
                f"memtrace: no verdict for case {args.case!r} in {args.verdicts}", file=sys.stderr
            )
        return found
    if args.method == NO_METHOD:
        return None
    case = graph_index(G).case_from_graph(args.case)
    if args.cases:
        given = [c for c in load_cases(args.cases, strict=False) if c.case_id == args.case]
        if given:
            case = given[-1]
    if case.verdict == JudgeVerdict.CORRECT:
        print(f"memtrace: case {args.case!r} was judged correct: no culprit", file=sys.stderr)
        return None
    return get_method(args.method).attribute(G, case)


def run(args: argparse.Namespace) -> int:
    """Write the case's subgraph; exit 0, 1 when records were skipped (the graph may miss
    them: said on stderr), or 2 when the case is not in the sources."""
    try:
        jaeger = check_base_url(args.jaeger_url, "--jaeger-url") if args.jaeger_url else None
        tempo = check_base_url(args.tempo_url, "--tempo-url") if args.tempo_url else None
        if args.format == "html" and not args.verdicts and args.method != NO_METHOD:
            get_method(args.method)  # a model method without its endpoint fails here, early
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    loading = BatchSummary()
    graphs = load_store_graphs(args.sources, strict=args.strict, summary=loading)
    G = find_case_graph(graphs, args.case)
    if args.format == "html":
        verdict = _verdict(args, G)
        view = case_view(G, args.case, verdict, jaeger_url=jaeger, tempo_url=tempo)
        _emit(args.output, case_html(view, verdict=verdict))
    elif args.format == "dot":
        _emit(args.output, to_dot(case_subgraph(G, args.case)))
    elif args.format == "json":
        _emit(args.output, to_node_link_json(case_subgraph(G, args.case), indent=2) + "\n")
    else:
        H = case_subgraph(G, args.case)
        if args.output and args.output != "-":
            write_graphml(H, args.output)
        else:
            # networkx writes GraphML to a path; go through a temporary file for stdout.
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp, "case.graphml")
                write_graphml(H, path)
                sys.stdout.write(path.read_text(encoding="utf-8"))
    if args.output and args.output != "-":
        print(f"{args.format}: {os.fspath(args.output)}", file=sys.stderr)
    return _report_loading(loading)


def _report_loading(loading: BatchSummary) -> int:
    """Say what reading the sources skipped or changed; 1 when a record was skipped."""
    stats = SourceStats(
        records=loading.records,
        skipped=loading.skipped_records,
        skipped_by_kind=loading.skipped_by_kind,
        truncated_values=loading.truncated_values,
        replaced_surrogates=loading.replaced_surrogates,
        duplicates=loading.duplicates,
    )
    if stats.skipped or stats.truncated_values or stats.replaced_surrogates:
        print(f"memtrace: read {stats.summary()}", file=sys.stderr)
    for message in loading.source_errors[:5]:
        print(f"memtrace:   {message}", file=sys.stderr)
    if stats.skipped:
        print("memtrace: the graph may lack the skipped records", file=sys.stderr)
        return EXIT_FAILURES
    return EXIT_OK


def _emit(output: str | None, text: str) -> None:
    if output and output != "-":
        Path(output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)

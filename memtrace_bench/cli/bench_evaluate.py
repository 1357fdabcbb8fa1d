"""``memtrace bench evaluate DIR --method M``: score attribution methods on a generated benchmark.

Two modes. ``gold`` (default) gives each method what the benchmark knows: the cases file with
gold answers and evidence refs, and the judge ops in the traces. ``production`` gives it what a
deployed app has: the failed cases with the wrong answer only (no gold answer, no evidence refs,
no judge ops), and with ``--capture off`` no captured values either. Every mode prints, per
method, the exact-match accuracies per system and label, the rates of right, wrong and abstained
verdicts, accuracy per confidence bucket and the per-label confusion matrix, then one table with
every method side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memtrace_bench.cli.bench_annotations import ANNOTATION, bench_folder, score_annotations
from memtrace_bench.systems.metrics import evaluate, format_report, load_jsonl
from memtrace_otel.attribution import get_method, method_names
from memtrace_otel.cli import EXIT_FAILURES, EXIT_OK, EXIT_USAGE
from memtrace_otel.job import load_store_graphs, run_batch
from memtrace_otel.job._scoring import (
    ProductionScore,
    format_production,
    production_view,
    score_verdicts,
)

BASELINES = ("blame-generate", "blame-retrieve")
"""Constant baselines added by ``--baselines`` (no model, no network)."""


def register(bench: Any) -> None:
    """Add ``bench evaluate``."""
    p = bench.add_parser(
        "evaluate",
        help="score attribution methods against a benchmark's labels",
        description=(
            "Run attribution methods on DIR/traces.jsonl with DIR/cases.jsonl and score the "
            "verdicts against DIR/labels.jsonl: error-type and op-id accuracy (exact match) per "
            "system and label, injected and natural (counterfactual) failures separately; the "
            "rates of right, wrong and abstained verdicts; accuracy per confidence bucket; the "
            "per-label confusion matrix; and all methods side by side. MemTraceBench annotations "
            "are their own group, scored on the annotated op-... id."
        ),
    )
    p.add_argument(
        "directory",
        metavar="DIR",
        help=(
            "a `memtrace bench generate` or `memtrace export` output directory, or MemTraceBench "
            "JSON files (a file or a folder), scored against their annotations"
        ),
    )
    p.add_argument(
        "--method",
        action="append",
        choices=method_names(),
        help="method to score (repeatable; default: evidence). Model-backed methods (llm, "
        "all-at-once, step-by-step, binary-search) read OPENAI_BASE_URL/OPENAI_MODEL",
    )
    p.add_argument(
        "--baselines",
        action="store_true",
        help=f"also score the constant baselines ({', '.join(BASELINES)})",
    )
    p.add_argument(
        "--mode",
        choices=("gold", "production"),
        default="gold",
        help="gold: cases with gold answers and evidence refs, judge ops in the traces "
        "(default); production: only the wrong answer, no judge ops",
    )
    p.add_argument(
        "--capture",
        choices=("on", "off"),
        default="on",
        help="off: strip every captured value from the traces first (content capture off)",
    )
    p.add_argument("--json", dest="json_out", help="also write the scores as JSON here")
    p.set_defaults(func=run)


def _production_cases(cases_file: Path, out: Path) -> None:
    """The failed cases as a person flags them: the wrong answer, no gold, no evidence refs."""
    with open(out, "w", encoding="utf-8") as handle:
        for row in load_jsonl(cases_file):
            if row.get("verdict") == "correct":
                continue
            kept = {
                "case_id": row["case_id"],
                "question": row.get("question", ""),
                "verdict": "incorrect",
            }
            if row.get("prediction") is not None:
                kept["prediction"] = row["prediction"]
            handle.write(json.dumps(kept) + "\n")


def run(args: argparse.Namespace) -> int:
    """Score each method; exit 1 when a case failed to run."""
    with bench_folder(args.directory) as folder:
        return _run(args, folder)


def _run(args: argparse.Namespace, folder: Path) -> int:
    labels = load_jsonl(folder / "labels.jsonl") if (folder / "labels.jsonl").exists() else []
    correct = {
        str(row["case_id"])
        for row in load_jsonl(folder / "cases.jsonl")
        if row.get("verdict") == "correct"
    }
    names = list(dict.fromkeys([*(args.method or ["evidence"]), *(BASELINES * args.baselines)]))
    try:
        methods = [
            get_method(name, **({"bench_dir": folder} if name == "replay" else {}))
            for name in names
        ]
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    started = time.perf_counter()
    graphs = load_store_graphs([str(folder / "traces.jsonl")])
    production = args.mode == "production"
    if production or args.capture == "off":
        graphs = {
            store: production_view(G, capture=args.capture == "on", judges=not production)
            for store, G in graphs.items()
        }
    load_seconds = time.perf_counter() - started
    print(
        f"== mode {args.mode}, capture {args.capture}: {len(graphs)} stores loaded in "
        f"{load_seconds:.1f} s"
    )
    results: dict[str, Any] = {}
    overview: list[tuple[str, Any, ProductionScore, float]] = []
    status = EXIT_OK
    with tempfile.TemporaryDirectory() as tmp:
        cases_file = folder / "cases.jsonl"
        if production:
            cases_file = Path(tmp) / "cases.jsonl"
            _production_cases(folder / "cases.jsonl", cases_file)
        for name, method in zip(names, methods, strict=True):
            started = time.perf_counter()
            verdicts, summary = run_batch([], method, cases_file=str(cases_file), graphs=graphs)
            seconds = time.perf_counter() - started
            predictions = [json.loads(v.to_json()) for v in verdicts]
            entry: dict[str, Any] = {
                "seconds": round(seconds, 2),
                "cases": summary.cases,
                "mode": args.mode,
                "capture": args.capture,
            }
            annotated = score_annotations(labels, predictions)
            for source in ("injected", "counterfactual"):
                subset = [row for row in labels if row.get("source") == source]
                if not subset and annotated is not None:
                    continue  # a MemTraceBench file: its labels are annotations only
                report = evaluate(subset, predictions)
                entry[source] = report.to_json()
                print(f"== {name}: {source} failures ({report.overall.total} labelled)")
                print(format_report(report))
            if annotated is not None:
                entry[ANNOTATION] = annotated.to_json()
                print(
                    f"== {name}: annotated failures ({annotated.overall.total} labelled; exact "
                    "match on the error type and on the annotated op id)"
                )
                print(format_report(annotated))
            everything = evaluate(labels, predictions)
            score = score_verdicts(labels, predictions)
            entry["all"] = everything.to_json()
            entry["production"] = score.to_json()
            blamed_correct = sum(1 for p in predictions if p["case_id"] in correct)
            entry["correct_cases_blamed"] = blamed_correct
            print(f"== {name}: all labelled failures")
            print(format_production(score))
            print(f"correct cases blamed: {blamed_correct}")
            usage = getattr(method, "usage", None)
            if isinstance(usage, dict):
                entry["usage"] = dict(usage)
            rate = summary.cases / seconds if seconds else 0.0
            print(
                f"{name}: {summary.cases} cases in {seconds:.1f} s ({rate:.0f} cases/s); "
                f"{len(summary.failed)} failed to run"
            )
            if summary.failed:
                status = EXIT_FAILURES
            results[name] = entry
            overview.append((name, everything, score, rate))
    print(format_overview(overview))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return status


def format_overview(rows: list[tuple[str, Any, ProductionScore, float]]) -> str:
    """Every method side by side: per-system accuracies, then the production rates."""
    systems = sorted({s for _, report, _, _ in rows for s in report.by_system})
    head = "method".ljust(15) + "".join(f"{s[:12]:>14}" for s in systems)
    head += f"{'all':>14}{'wrong':>7}{'abst':>7}{'>=0.8 acc':>11}"
    lines = ["== methods side by side (error type / op accuracy; all labelled failures)", head]
    for name, report, score, _ in rows:
        cells = []
        for system in [*systems, None]:
            s = report.overall if system is None else report.by_system.get(system)
            cells.append(
                f"{s.error_type_accuracy:.2f}/{s.op_id_accuracy:.2f}".rjust(14) if s else " " * 14
            )
        trusted = score.trusted()
        lines.append(
            name.ljust(15)
            + "".join(cells)
            + f"{score.wrong_rate:>7.2f}{score.abstention_rate:>7.2f}"
            + (f"{trusted.accuracy:>11.2f}" if trusted.total else f"{'-':>11}")
        )
    return "\n".join(lines)

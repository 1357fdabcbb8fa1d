"""``memtrace bench evaluate DIR --method M``: score an attribution method on a generated benchmark."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from memtrace_otel.attribution import get_method, method_names, run_batch
from memtrace_otel.cli.bench_annotations import ANNOTATION, bench_folder, score_annotations
from memtrace_otel.systems.metrics import evaluate, format_report, load_jsonl


def register(bench: Any) -> None:
    """Add ``bench evaluate``."""
    p = bench.add_parser(
        "evaluate",
        help="score attribution methods against a benchmark's labels",
        description=(
            "Run attribution methods on DIR/traces.jsonl with DIR/cases.jsonl and score the "
            "verdicts against DIR/labels.jsonl: error-type and op-id accuracy (exact match) per "
            "system and label, injected and natural (counterfactual) failures separately; "
            "MemTraceBench annotations as their own group, on the annotated op-... id."
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
        help="method to score (repeatable; default: evidence)",
    )
    p.add_argument("--json", dest="json_out", help="also write the scores as JSON here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Score each method; exit 1 when a case failed to run."""
    with bench_folder(args.directory) as folder:
        return _run(args, folder)


def _run(args: argparse.Namespace, folder: Path) -> int:
    labels = load_jsonl(folder / "labels.jsonl") if (folder / "labels.jsonl").exists() else []
    results: dict[str, Any] = {}
    status = 0
    for name in args.method or ["evidence"]:
        try:
            options = {"bench_dir": folder} if name == "replay" else {}
            method = get_method(name, **options)
        except ValueError as exc:
            print(f"memtrace: error: {exc}", file=sys.stderr)
            return 2
        started = time.perf_counter()
        verdicts, summary = run_batch(
            [str(folder / "traces.jsonl")], method, cases_file=str(folder / "cases.jsonl")
        )
        seconds = time.perf_counter() - started
        predictions = [json.loads(v.to_json()) for v in verdicts]
        entry: dict[str, Any] = {"seconds": round(seconds, 2), "cases": summary.cases}
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
                f"== {name}: annotated failures ({annotated.overall.total} labelled; exact match "
                "on the error type and on the annotated op id)"
            )
            print(format_report(annotated))
        usage = getattr(method, "usage", None)
        if isinstance(usage, dict):
            entry["usage"] = dict(usage)
        print(
            f"{name}: {summary.cases} cases in {seconds:.1f} s "
            f"({summary.cases / seconds if seconds else 0:.0f} cases/s incl. loading); "
            f"{len(summary.failed)} failed to run"
        )
        if summary.failed:
            status = 1
        results[name] = entry
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return status

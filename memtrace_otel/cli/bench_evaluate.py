"""``memtrace bench evaluate DIR --method M``: score an attribution method on a generated benchmark."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from memtrace_otel.attribution import get_method, method_names, run_batch
from memtrace_otel.systems.metrics import evaluate, format_report, load_jsonl


def register(bench: Any) -> None:
    """Add ``bench evaluate``."""
    p = bench.add_parser(
        "evaluate",
        help="score attribution methods against a benchmark's labels",
        description=(
            "Run attribution methods on DIR/traces.jsonl with DIR/cases.jsonl and score the "
            "verdicts against DIR/labels.jsonl: error-type and op-id accuracy (exact match) per "
            "system and label, injected and natural (counterfactual) failures separately."
        ),
    )
    p.add_argument("directory", metavar="DIR", help="a `memtrace bench generate` output directory")
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
    folder = Path(args.directory)
    labels = load_jsonl(folder / "labels.jsonl")
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
        for source in ("injected", "counterfactual"):
            subset = [row for row in labels if row.get("source") == source]
            report = evaluate(subset, predictions)
            entry[source] = report.to_json()
            print(f"== {name}: {source} failures ({report.overall.total} labelled)")
            print(format_report(report))
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

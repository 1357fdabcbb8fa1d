"""``memtrace demo``: the main job on the embedded default, end to end, offline.

The four reference memory systems run a small seeded workload with injected faults, traced to an
OTLP JSON Lines file (the Collector's file format); ``memtrace attribute`` then reads that file,
prints the verdict table and the accuracy against the ground-truth labels, and writes the report.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="run the reference memory systems, then attribute their failures (offline)",
        description=(
            "Run the four reference memory systems (long-context, RAG, Mem0-style, "
            "EverMemOS-style) on a small seeded workload with injected faults, trace them to an "
            "OTLP JSON Lines file, then run `memtrace attribute` on it: the verdict table, the "
            "accuracy against the labels, and a report folder. No servers, no API keys."
        ),
    )
    parser.add_argument(
        "--out", default="memtrace-demo", help="output folder (default: memtrace-demo)"
    )
    parser.add_argument(
        "--users", type=int, default=6, help="synthetic users per system (default: 6)"
    )
    parser.add_argument("--seed", type=int, default=7, help="workload and fault seed (default: 7)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Generate, attribute, score."""
    from memtrace_bench.systems import run_demo
    from memtrace_bench.systems.metrics import evaluate, format_report, load_jsonl
    from memtrace_otel.cli import main

    if args.users < 1:
        print("memtrace: error: --users must be at least 1", file=sys.stderr)
        return 2
    folder = Path(args.out)
    started = time.perf_counter()
    print(
        f"== 1/3 running the reference memory systems -> {folder / 'traces.jsonl'}", file=sys.stderr
    )
    bench = run_demo(folder, users=args.users, seed=args.seed)
    print(bench.table(), file=sys.stderr)

    print("== 2/3 memtrace attribute (method: evidence)", file=sys.stderr)
    verdicts_path = folder / "verdicts.jsonl"
    verdicts_path.unlink(missing_ok=True)
    argv = [
        "attribute",
        str(folder / "traces.jsonl"),
        "--cases",
        str(folder / "cases.jsonl"),
        "--out",
        str(verdicts_path),
        "--report",
        str(folder / "report"),
        "--labels",  # the report's accuracy section
        str(folder / "labels.jsonl"),
        "--quiet",
    ]
    status = main(argv)

    print("== 3/3 accuracy against the ground-truth labels", file=sys.stderr)
    labels = load_jsonl(folder / "labels.jsonl")
    predictions = load_jsonl(verdicts_path)
    scores: dict[str, Any] = {}
    for source in ("injected", "counterfactual"):
        report = evaluate([row for row in labels if row.get("source") == source], predictions)
        scores[source] = report.to_json()
        name = (
            "injected faults"
            if source == "injected"
            else "natural failures (counterfactual labels)"
        )
        print(f"-- {name}: {report.overall.total} labelled cases")
        print(format_report(report))
    (folder / "report").mkdir(parents=True, exist_ok=True)
    (folder / "report" / "accuracy.json").write_text(
        json.dumps(scores, indent=2, sort_keys=True) + "\n"
    )
    seconds = time.perf_counter() - started
    print(
        f"\ndone in {seconds:.1f} s: traces {folder / 'traces.jsonl'}, verdicts {verdicts_path}, "
        f"report {folder / 'report'}",
        file=sys.stderr,
    )
    return status

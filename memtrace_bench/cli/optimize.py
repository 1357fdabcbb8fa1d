"""``memtrace optimize``: improve reference systems from fine-grained verdicts.

    memtrace optimize --systems long_context,rag --users 40 --seed 0 --rounds 4 --out opt/
    OPENAI_BASE_URL=... memtrace optimize --systems mem0 --optimizer-model my-model --out opt/

Per system it writes ``<out>/<system>/report.json`` and ``report.md`` (plus traces per round
and ``state.json``, from which an interrupted run resumes), and prints a summary table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memtrace_bench.optimize import ReferenceSystem, optimize, split_workload
from memtrace_bench.systems import generate_workload, make_engine, resolve_systems
from memtrace_otel.cli import EXIT_OK, EXIT_USAGE

__all__ = ["cmd_optimize", "register"]


def register(subparsers: Any) -> None:
    """Add the ``optimize`` subcommand."""
    p = subparsers.add_parser(
        "optimize",
        help="fix a memory system from attribution verdicts and measure the held-out gain",
        description=(
            "Trace the system on a train split, attribute its failures, turn the verdicts into "
            "new versions of the blamed ops' prompts or parameters (kept only when the train "
            "score does not drop), and score a held-out split before and after."
        ),
    )
    p.add_argument("--systems", default="all", help="systems (comma-separated or all)")
    p.add_argument("--users", type=int, default=40, help="synthetic users (default 40)")
    p.add_argument("--seed", type=int, default=0, help="workload and split seed (default 0)")
    p.add_argument(
        "--heldout", type=float, default=0.5, help="share of users held out (default 0.5)"
    )
    p.add_argument("--rounds", type=int, default=4, help="most rounds (default 4)")
    p.add_argument("--out", required=True, help="output directory (resumes when re-run)")
    p.add_argument(
        "--engine", choices=("offline", "openai"), default="offline", help="the systems' model"
    )
    p.add_argument("--model", default=None, help="chat model of the openai engine")
    p.add_argument(
        "--optimizer-model",
        default=None,
        help="OpenAI-compatible model that rewrites prompts (default: parameters only)",
    )
    p.add_argument("--base-url", default=None, help="endpoint (else $OPENAI_BASE_URL)")
    p.add_argument("--batch-size", type=int, default=8, help="feedback notes per aggregation")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_optimize)


def cmd_optimize(args: argparse.Namespace) -> int:
    """Run ``optimize``."""
    try:
        names = resolve_systems(args.systems)
        workload = generate_workload(args.users, args.seed)
        train, heldout = split_workload(workload, seed=args.seed, heldout=args.heldout)
        engine = make_engine(args.engine, model=args.model, base_url=args.base_url)
        chat = None
        if args.optimizer_model:
            from memtrace_otel.attribution import OpenAIChatModel

            chat = OpenAIChatModel(model=args.optimizer_model, base_url=args.base_url)
        rows = []
        for name in names:
            result = optimize(
                ReferenceSystem(name, engine=engine),
                train,
                heldout,
                Path(args.out) / name,
                rounds=args.rounds,
                model=chat,
                batch_size=args.batch_size,
                progress=None if args.no_progress else sys.stderr,
            )
            rows.append(result.report)
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # Accuracy as a share (0..1) before and after; the gain in percentage points.
    print(
        f"{'system':<13} {'held-out acc. before':>20} {'after':>7} {'gain (points)':>13} "
        f"{'rounds':>6} {'s':>6}"
    )
    for r in rows:
        held = r["heldout"]
        print(
            f"{r['system']:<13} {held['before']:>20.3f} {held['after']:>7.3f} "
            f"{held['gain_points']:>+13.2f} {r['rounds_run']:>6} {r['seconds']:>6.1f}"
        )
    summary = {r["system"]: r["heldout"] for r in rows}
    (Path(args.out) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return EXIT_OK

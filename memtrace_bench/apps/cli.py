"""``memtrace bench apps``: run the suite of real apps in each capture mode and score the verdicts.

``register(bench_subparsers)`` adds the subcommand to ``memtrace bench`` (the bench wing lists
this module among its subcommand modules); ``benchmarks/bench_apps.py`` runs the same
:func:`main` without the ``memtrace`` command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from memtrace_bench.apps.runner import (
    APPS,
    AppRun,
    AppSpec,
    available_modes,
    classic_app,
    run_app,
    score,
    summary_rows,
)
from memtrace_bench.apps.scenario import ROLES, make_world

__all__ = ["CLASSIC_PIN", "classic_python", "main", "register"]

CLASSIC_PIN = "1.0.11"
"""The mem0 1.x the classic app runs in (the last 1.x)."""
SMALL = dict.fromkeys(ROLES, 1)
"""``--small``: one question of each role (the size of the ``make test`` run)."""
REPO = Path(__file__).resolve().parents[2]


def classic_python(required: bool = False) -> str | None:
    """The interpreter of the mem0 1.x environment, created once by
    ``scripts/mem0_legacy_env.sh`` (``MEMTRACE_MEM0_LEGACY_PIN`` = :data:`CLASSIC_PIN`);
    ``None`` when it cannot be made (``RuntimeError`` if ``required``)."""
    script = REPO / "scripts" / "mem0_legacy_env.sh"
    if not script.exists():
        if required:
            raise RuntimeError(f"{script} is missing: the mem0 1.x environment cannot be made")
        return None
    env = {**os.environ, "MEMTRACE_MEM0_LEGACY_PIN": CLASSIC_PIN}
    env.pop("MEMTRACE_MEM0_LEGACY_VENV", None)
    done = subprocess.run(
        ["bash", str(script), sys.executable],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if done.returncode != 0:
        if required:
            raise RuntimeError(f"could not create the mem0 1.x environment:\n{done.stderr[-2000:]}")
        return None
    return done.stdout.strip().splitlines()[-1]


def register(bench: Any) -> None:
    """Add ``apps`` to ``memtrace bench``'s subparsers."""
    p = bench.add_parser(
        "apps",
        help="run the suite of real apps and score the verdicts",
        description=(
            "Run every app of the suite (mem0 2.x, mem0 1.x classic, a manual-API RAG app) under "
            "opentelemetry-instrument against the scripted model server, in each capture mode; "
            "flag the wrong answers with memtrace feedback (about half with --expected), run "
            "memtrace attribute with no cases file, and print per app and mode: error type and "
            "op accuracy (an abstention counts as wrong), wrong verdicts above 0.3, abstentions, "
            "correct answers blamed, the split with and without an expected answer, per label."
        ),
    )
    p.add_argument("--out", default="bench-apps", help="working directory (default: bench-apps)")
    p.add_argument("--apps", default="all", help="comma-separated: mem0, mem0-classic, rag (all)")
    p.add_argument(
        "--modes",
        default="all",
        help=f"comma-separated capture modes: {', '.join(available_modes())} (all)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--small", action="store_true", help="one question per role (a smoke run)")
    p.add_argument("--misses", action="store_true", help="print every wrong verdict's reason")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    modes = available_modes() if args.modes == "all" else args.modes.split(",")
    wanted = ["mem0", "mem0-classic", "rag"] if args.apps == "all" else args.apps.split(",")
    apps: list[AppSpec] = []
    for name in wanted:
        if name == "mem0-classic":
            python = classic_python(required=os.environ.get("CI") == "true")
            if python is None:
                print("memtrace: skipping mem0-classic: no mem0 1.x environment", file=sys.stderr)
                continue
            apps.append(classic_app(python))
        elif name in APPS:
            apps.append(APPS[name])
        else:
            print(f"memtrace: unknown app {name!r}", file=sys.stderr)
            return 2
    out = Path(args.out)
    runs: list[AppRun] = []
    for spec in apps:
        world = make_world(args.seed, SMALL if args.small else None, classic=spec.classic)
        for mode in modes:
            print(f"== {spec.name} {mode}", file=sys.stderr, flush=True)
            run = run_app(spec, mode, out / spec.name / mode, world)
            runs.append(run)
            if run.dropped:
                print(f"   dropped: {dict(run.dropped)}", file=sys.stderr)
    print("\n".join(summary_rows(runs)))
    if args.misses:
        for run in runs:
            for miss in score(run).misses:
                print(json.dumps({"app": run.app, "mode": run.mode, **miss}, ensure_ascii=False))
    return 0


def _standalone(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_apps")
    sub = parser.add_subparsers()
    register(sub)
    args = parser.parse_args(["apps", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))

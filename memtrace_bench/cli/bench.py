"""``memtrace bench``: build and score attribution benchmarks.

``memtrace bench generate`` runs the reference memory systems over a workload and writes
``traces.jsonl``, ``cases.jsonl`` and ``labels.jsonl``. More ``bench`` subcommands live in
their own modules: list the module in :data:`SUBCOMMAND_MODULES`; it exposes
``register(bench_subparsers)``, adding its parser and setting ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

from memtrace_bench.systems import (
    ENGINES,
    FAULTS,
    HARD_STORES,
    SYSTEMS,
    FaultSpec,
    generate_benchmark,
    generate_hard_benchmark,
    generate_workload,
    load_locomo,
    make_engine,
    resolve_systems,
)

SUBCOMMAND_MODULES: tuple[str, ...] = ("bench_evaluate", "bench_memtracebench", "bench_apps")
"""Modules in ``memtrace_bench.cli`` that add ``bench`` subcommands (e.g. ``"bench_evaluate"``)."""

EXIT_OK = 0
EXIT_USAGE = 2


def register(subparsers: Any) -> None:
    """Add ``bench`` and its subcommands to the top-level parser."""
    parser = subparsers.add_parser(
        "bench",
        help="generate and score attribution benchmarks",
        description="Generate and score attribution benchmarks built from the reference systems.",
    )
    bench = parser.add_subparsers(title="bench commands", metavar="SUBCOMMAND")

    def no_subcommand(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    parser.set_defaults(func=no_subcommand)
    _register_generate(bench)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"memtrace_bench.cli.{name}").register(bench)


def _register_generate(bench: Any) -> None:
    p = bench.add_parser(
        "generate",
        help="run the reference systems and write traces, cases and labels",
        description=(
            "Run the reference memory systems over a workload (synthetic users or LoCoMo) and "
            "write traces.jsonl (OTLP JSON Lines), cases.jsonl and labels.jsonl (ground truth "
            "from injected faults and counterfactual replay) into --out."
        ),
    )
    p.add_argument(
        "--out", required=True, help="output directory (its benchmark files are replaced)"
    )
    p.add_argument(
        "--systems", default="all", help=f"comma-separated: {', '.join(SYSTEMS)} (default: all)"
    )
    p.add_argument(
        "--dataset",
        default="synthetic",
        help="synthetic (default), or locomo[:conv-26,conv-30,...] read from ../shared",
    )
    p.add_argument(
        "--users",
        type=int,
        default=20,
        help="synthetic users (LoCoMo: at most this many conversations when none are named)",
    )
    p.add_argument(
        "--sessions", type=int, default=6, help="sessions per synthetic user (default 6)"
    )
    p.add_argument(
        "--questions", type=int, default=None, help="at most this many questions per conversation"
    )
    p.add_argument("--seed", type=int, default=0, help="workload and fault seed (default 0)")
    p.add_argument(
        "--faults",
        default="none",
        help=f"none (default), all[=RATE], or NAME[=RATE],... with NAME one of {', '.join(FAULTS)} or an op kind",
    )
    p.add_argument(
        "--engine",
        default="offline",
        choices=ENGINES,
        help="model behind LLM steps (default offline)",
    )
    p.add_argument(
        "--model", default=None, help="chat model of the openai engine (or $OPENAI_MODEL)"
    )
    p.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)"
    )
    p.add_argument(
        "--embeddings-model",
        default=None,
        help="embeddings model (default: offline hashed vectors)",
    )
    p.add_argument(
        "--judge",
        default="deterministic",
        choices=("deterministic", "llm"),
        help="judge (default deterministic)",
    )
    p.add_argument(
        "--set",
        dest="options",
        action="append",
        default=[],
        metavar="SYSTEM.KEY=VALUE",
        help="a system option, e.g. rag.top_k=5 or long_context.window_tokens=4000 (repeatable)",
    )
    p.add_argument(
        "--locomo-path", default=None, help="locomo10.json (default ../shared/datasets/locomo)"
    )
    p.add_argument(
        "--difficulty",
        default="easy",
        choices=("easy", "hard"),
        help="easy (default): the workload above through the systems; hard: LoCoMo "
        "conversations with planted facts, realistic failure modes, noise and disorder "
        "(see docs/systems.md)",
    )
    p.add_argument(
        "--stores",
        type=int,
        default=None,
        help=f"hard: stores per system (default {HARD_STORES}; one targeted failure each)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=cmd_generate)


def _parse_options(items: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        system, dot, field = key.partition(".")
        if not sep or not dot or not field:
            raise ValueError(f"--set expects SYSTEM.KEY=VALUE, got {item!r}")
        resolve_systems([system])
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out.setdefault(system, {})[field] = value
    return out


def cmd_generate(args: argparse.Namespace) -> int:
    """Run ``bench generate``."""
    if args.difficulty == "hard":
        return _generate_hard(args)
    if args.stores is not None:
        print("memtrace: error: --stores applies to --difficulty hard only", file=sys.stderr)
        return EXIT_USAGE
    try:
        systems = resolve_systems(args.systems)
        faults = FaultSpec.parse(args.faults)
        options = _parse_options(args.options)
        dataset, _, names = args.dataset.partition(":")
        if dataset == "synthetic":
            workload = generate_workload(args.users, args.seed, sessions=args.sessions)
            if args.questions is not None:
                workload = _cap_questions(workload, args.questions)
        elif dataset == "locomo":
            chosen = [n.strip() for n in names.split(",") if n.strip()] or None
            workload = load_locomo(
                args.locomo_path, conversations=chosen, max_questions=args.questions
            )
            if chosen is None:
                workload = type(workload)(workload.name, workload.conversations[: args.users], None)
        else:
            raise ValueError(
                f"unknown dataset {args.dataset!r}: expected synthetic or locomo[:ids]"
            )
        engine = make_engine(
            args.engine,
            model=args.model,
            base_url=args.base_url,
            embeddings_model=args.embeddings_model,
        )
        summary = generate_benchmark(
            args.out,
            workload=workload,
            systems=systems,
            seed=args.seed,
            faults=faults,
            engine=engine,
            judge=args.judge,
            options=options,
            progress=None if args.no_progress else sys.stderr,
        )
    except (ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"memtrace: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    print(summary.table())
    return EXIT_OK


_EASY_ONLY: dict[str, object] = {
    "faults": "none",
    "engine": "offline",
    "dataset": "synthetic",
    "judge": "deterministic",
    "options": [],
    "questions": None,
    "model": None,
    "base_url": None,
    "embeddings_model": None,
}
"""Options of the easy benchmark, with their defaults (the hard one plants its own faults)."""


def _generate_hard(args: argparse.Namespace) -> int:
    from memtrace_otel.errors import MemtraceError

    given = [k for k, default in _EASY_ONLY.items() if getattr(args, k) != default]
    if given:
        names = ", ".join("--" + k.replace("_", "-").replace("options", "set") for k in given)
        print(f"memtrace: error: {names} do(es) not apply to --difficulty hard", file=sys.stderr)
        return EXIT_USAGE
    try:
        summary = generate_hard_benchmark(
            args.out,
            stores=args.stores if args.stores is not None else HARD_STORES,
            seed=args.seed,
            systems=resolve_systems(args.systems),
            locomo_path=args.locomo_path,
            progress=None if args.no_progress else sys.stderr,
        )
    except (ValueError, OSError, MemtraceError) as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(summary.table())
    return EXIT_OK


def _cap_questions(workload: Any, limit: int) -> Any:
    from dataclasses import replace

    conversations = tuple(
        replace(c, questions=c.questions[:limit], _turns={}) for c in workload.conversations
    )
    return replace(workload, conversations=conversations)

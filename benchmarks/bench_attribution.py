"""Attribution throughput of the `evidence` method, in cases per second on one core.

Two generated benchmarks are built once: the easy one (the four reference systems, 20 users,
injected faults plus natural failures) and the hard one (`--difficulty hard`: LoCoMo-based
stores with paraphrase, multi-fact questions, noise, stale reads, query-only retrieves). The
store graphs are loaded once (loading is reported separately); then every failed case is
attributed with `evidence` in gold mode (cases with expected answers and evidence refs) and in
production mode (the wrong answer only, `memtrace bench evaluate --mode production`), and, as the
same-run baseline, with the constant `blame-generate` (which only looks up the case's ops).

Goal: >= 200 cases/s for `evidence` on one core, in every mode, caches emptied before each round.

Run: .venv/bin/python benchmarks/bench_attribution.py [--users 20] [--stores 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import verdict

from memtrace_bench.cli.bench_evaluate import _production_cases
from memtrace_bench.systems import generate_benchmark, generate_hard_benchmark, generate_workload
from memtrace_otel.attribution import get_method
from memtrace_otel.graph import graph_index
from memtrace_otel.job import BatchSummary, failed_cases, load_store_graphs
from memtrace_otel.job._scoring import production_view


def _cold() -> None:
    """Empty the attribution caches (per-store corpora, token caches, sentence vectors), as at a
    run's start."""
    from memtrace_otel.attribution import _semantic, _text, _tokens
    from memtrace_otel.graph import _index

    for index in list(_index._cache.values()):
        index.memo.clear()
    _text.segment_words.cache_clear()
    _text.entity_tokens.cache_clear()
    _tokens._content_tokens.cache_clear()
    encoder = _semantic.default_encoder()
    if encoder is not None:
        encoder.clear_cache()


def _measure(out: Path, label: str) -> None:
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
    for mode, (gs, cases) in modes.items():
        work = failed_cases(gs, str(cases), BatchSummary())
        timings = {}
        for name in ("blame-generate", "evidence"):
            method = get_method(name)
            best = float("inf")
            for _ in range(3):
                _cold()  # every cache the method fills is part of its work
                t0 = time.process_time()
                for store, case in work:
                    method.attribute(gs[store], case)
                best = min(best, time.process_time() - t0)
            timings[name] = best
        n = len(work)
        rate = n / timings["evidence"]
        print(
            f"  {mode:<10} {n:4d} failed cases: blame-generate {n / timings['blame-generate']:8.0f} "
            f"cases/s; evidence {rate:6.0f} cases/s, "
            f"{timings['evidence'] / timings['blame-generate']:.1f}x the baseline's time "
            f"(goal >= 200 cases/s: {verdict(rate, 200, higher_is_better=True)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=20, help="easy benchmark: synthetic users")
    parser.add_argument("--stores", type=int, default=100, help="hard benchmark: stores per system")
    args = parser.parse_args()
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
        _measure(easy, "easy")
        _measure(hard, "hard")


if __name__ == "__main__":
    main()

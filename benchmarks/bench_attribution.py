"""Attribution throughput of the `evidence` method, in cases per second on one core.

A generated benchmark (the four reference systems, 20 users, injected faults plus natural failures)
is built once; the store graphs are loaded once (loading is reported separately); then every failed
case is attributed with `evidence` and, as the same-run baseline, with the constant
`blame-generate` (which only looks up the case's ops).

Goal: >= 200 cases/s for `evidence` on one core.

Run: .venv/bin/python benchmarks/bench_attribution.py [--users 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import verdict

from memtrace_otel.attribution import (
    BatchSummary,
    failed_cases,
    get_method,
    graph_index,
    load_store_graphs,
)
from memtrace_otel.systems import generate_benchmark, generate_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        t0 = time.process_time()
        generate_benchmark(
            out, workload=generate_workload(args.users, 0), seed=0, faults="all=0.05"
        )
        generate_s = time.process_time() - t0
        t0 = time.process_time()
        summary = BatchSummary()
        graphs = load_store_graphs([str(out / "traces.jsonl")], summary=summary)
        for G in graphs.values():
            graph_index(G)
        load_s = time.process_time() - t0
        work = failed_cases(graphs, str(out / "cases.jsonl"), BatchSummary())
    timings = {}
    for name in ("blame-generate", "evidence"):
        method = get_method(name)
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            for store, case in work:
                method.attribute(graphs[store], case)
            best = min(best, time.process_time() - t0)
        timings[name] = best
    n = len(work)
    rate = n / timings["evidence"]
    print(
        f"bench_attribution: {n} failed cases over {len(graphs)} stores ({summary.records} spans)"
    )
    print(
        f"  generate the benchmark: {generate_s:.1f} s CPU; load + index the graphs: {load_s:.1f} s CPU"
    )
    print(f"  blame-generate (baseline): {n / timings['blame-generate']:8.0f} cases/s")
    print(
        f"  evidence:                  {rate:8.0f} cases/s, "
        f"{timings['evidence'] / timings['blame-generate']:.1f}x the baseline's time "
        f"(goal >= 200 cases/s: {verdict(rate, 200, higher_is_better=True)})"
    )


if __name__ == "__main__":
    main()

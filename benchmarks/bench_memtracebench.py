"""MemTraceBench fidelity at full size: two recordings of one run, one verdict.

Generates a faulty run of the four reference systems (6 synthetic users, 6 sessions, 12 questions
each: over 200 annotated failures), records it with zjunlp's real smartcomment 0.1.2 recorder as
MemBase records its systems (the Python 3.12 environment of `make smartcomment`), imports the
MemTraceBench files and attributes them with `evidence`, and compares with the verdicts on our
own spans of the same run. Prints the agreement (goal >= 98 %), the failures left without a
verdict and without a reason (goal 0), and the paper's exact-match accuracy of the imported
verdicts against the annotations (error type; annotated op id), with the recording's cost in
wall seconds against the cost of generating the run (the same-run baseline).

Run: .venv/bin/python benchmarks/bench_memtracebench.py [--users 6] [--questions 12]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import verdict

from memtrace_bench.memtracebench import export_memtracebench
from memtrace_bench.methods import compare_recordings
from memtrace_otel.attribution import get_method
from memtrace_otel.cli import main as memtrace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench, mtb = Path(tmp) / "bench", Path(tmp) / "mtb"
        started = time.perf_counter()
        code = memtrace(
            [
                "bench",
                "generate",
                "--out",
                str(bench),
                "--users",
                str(args.users),
                "--sessions",
                str(args.sessions),
                "--questions",
                str(args.questions),
                "--faults",
                "all",
                "--seed",
                str(args.seed),
                "--no-progress",
            ]
        )
        if code != 0:
            raise SystemExit(code)
        generate_s = time.perf_counter() - started
        started = time.perf_counter()
        summary = export_memtracebench(bench, mtb)
        record_s = time.perf_counter() - started
        started = time.perf_counter()
        report = compare_recordings(bench, mtb, get_method("evidence"))
        compare_s = time.perf_counter() - started
    scores = report.annotation_scores["overall"]
    print(
        f"bench_memtracebench: {len(summary.files)} smartcomment graphs, "
        f"{summary.operations} operations, {summary.annotations} annotations "
        f"({summary.annotations_skipped} labels without a recorded op)"
    )
    print(
        f"  generate the run: {generate_s:.1f} s; record with smartcomment: {record_s:.1f} s "
        f"({record_s / generate_s:.1f}x the run); attribute both + compare: {compare_s:.1f} s"
    )
    print(
        f"  agreement (same error type and op on both recordings): {report.agree}/"
        f"{report.annotated} = {report.agreement:.1%} "
        f"(goal >= 98 %: {verdict(report.agreement, 0.98, higher_is_better=True)})"
    )
    print(
        f"  imported failures without a verdict: {report.no_verdict_imported}, of them without "
        f"a reason: {report.empty_reasons} (goal 0: {verdict(report.empty_reasons, 0)})"
    )
    print(
        f"  exact match vs annotations (imported verdicts): error type "
        f"{scores['error_type_accuracy']:.1%}, op id {scores['op_id_accuracy']:.1%} "
        f"over {scores['total']}"
    )
    for row in report.disagreements[:5]:
        print(f"  differs: {row}")


if __name__ == "__main__":
    main()

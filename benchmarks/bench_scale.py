"""The batch job at scale: one process vs a 2-worker Dask cluster, and the memory-bounded run.

Prints, for a workload of at least 2,000 failed cases over at least 500 memory stores:

- wall seconds of the single-process run (``run_batch``, no executor) and of the same job on a
  ``dask.distributed`` LocalCluster with 2 worker processes (cluster start-up not counted),
  their ratio (goal >= 1.6x on this 2-core machine), and whether verdicts are identical;
- the peak memory (RSS of a fresh process) of the single-process run with ``memory_bound`` set
  to a tenth of the export's size, next to the unbounded run's (goal: the growth over the
  interpreter's baseline stays under the bound + 20%).

Workload: generating 500 stores with the systems' generator takes minutes, so a small fault-
injected workload (``memtrace bench generate --users 4 --faults all=0.1``: 16 user stores, 4
systems) is generated once and replicated: each copy renames its users (``user-01`` ->
``r007-user-01``, so stores, cases and refs get new ids) and maps every span and trace id
through a hash, so no span is a duplicate of another copy's.

Run: ``.venv/bin/python benchmarks/bench_scale.py [--copies 32] [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HEX_ID = re.compile(rb'"([0-9a-f]{32}|[0-9a-f]{16})"')


def build_workload(folder: Path, copies: int) -> tuple[int, int]:
    """Generate the base workload and write ``copies`` renamed copies; (cases, stores)."""
    from memtrace_otel.cli import main

    base = folder / "base"
    if not (base / "traces.jsonl").exists():
        started = time.perf_counter()
        code = main(
            [
                "bench", "generate", "--users", "4", "--faults", "all=0.1",
                "--out", str(base), "--no-progress",
            ]
        )  # fmt: skip
        assert code == 0
        print(f"generated the base workload in {time.perf_counter() - started:.1f} s")
    traces = (base / "traces.jsonl").read_bytes().splitlines(keepends=True)
    cases = (base / "cases.jsonl").read_bytes().splitlines(keepends=True)
    with open(folder / "traces.jsonl", "wb") as t_out, open(folder / "cases.jsonl", "wb") as c_out:
        for copy in range(copies):
            prefix = f"r{copy:03d}-user-".encode()

            def new_id(match: re.Match[bytes], copy: int = copy) -> bytes:
                old = match.group(1)
                digest = hashlib.blake2b(b"%d:" % copy + old, digest_size=len(old) // 2)
                return b'"' + digest.hexdigest().encode() + b'"'

            for line in traces:
                t_out.write(_HEX_ID.sub(new_id, line.replace(b"user-", prefix)))
            for line in cases:
                c_out.write(_HEX_ID.sub(new_id, line.replace(b"user-", prefix)))
    rows = [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]
    failed = sum(1 for row in rows if row.get("verdict") != "correct")
    return failed, len({row["store_id"] for row in rows})


_CHILD = r"""
import json, sys, time
from memtrace_otel.attribution import get_method, run_batch

def status(field):
    # VmRSS: resident now; VmHWM: this process's peak (ru_maxrss would also count the parent's
    # peak, which Linux carries across fork and exec).
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

folder, bound = sys.argv[1], (sys.argv[2] if sys.argv[2] != "-" else None)
baseline = status("VmRSS")
started = time.perf_counter()
verdicts, summary = run_batch(
    [folder + "/traces.jsonl"], get_method("evidence"), cases_file=folder + "/cases.jsonl",
    memory_bound=bound,
)
print(json.dumps({
    "seconds": time.perf_counter() - started,
    "baseline": baseline,
    "peak": status("VmHWM"),
    "verdicts": [v.to_json() for v in verdicts],
    "attributed": summary.attributed,
}))
"""


def run_child(folder: Path, bound: str | None) -> dict[str, object]:
    """One single-process run in a fresh interpreter (for a clean peak RSS)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder), bound or "-"],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def run_dask(folder: Path) -> tuple[float, list[str]]:
    """The same job on a 2-worker LocalCluster; wall seconds (start-up excluded)."""
    from dask.distributed import LocalCluster

    from memtrace_otel.attribution import get_method, run_batch

    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
    ) as cluster:
        address = "dask://" + cluster.scheduler_address.removeprefix("tcp://")
        started = time.perf_counter()
        verdicts, _ = run_batch(
            [str(folder / "traces.jsonl")],
            get_method("evidence"),
            cases_file=str(folder / "cases.jsonl"),
            executor=address,
        )
        return time.perf_counter() - started, [v.to_json() for v in verdicts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=32)
    parser.add_argument("--workdir", help="keep the workload here (default: a temp folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(args.workdir or temp)
        folder.mkdir(parents=True, exist_ok=True)
        failed, stores = build_workload(folder, args.copies)
        size = os.path.getsize(folder / "traces.jsonl")
        print(f"workload: {failed} failed cases over {stores} stores, {size / 2**20:.0f} MiB")

        single = run_child(folder, None)
        dask_seconds, dask_verdicts = run_dask(folder)
        same = dask_verdicts == single["verdicts"]
        speedup = float(single["seconds"]) / dask_seconds  # type: ignore[arg-type]
        print(f"single process: {single['seconds']:.1f} s, {single['attributed']} verdicts")
        print(f"dask, 2 workers: {dask_seconds:.1f} s, verdicts identical: {same}")
        print(f"speedup: {speedup:.2f}x (goal >= 1.6x)")

        bound = size // 10
        bounded = run_child(folder, str(bound))
        mib = 2**20
        growth = int(bounded["peak"]) - int(bounded["baseline"])  # type: ignore[call-overload]
        print(
            f"unbounded single process: peak RSS {int(single['peak']) / mib:.0f} MiB"  # type: ignore[call-overload]
        )
        print(
            f"memory bound {bound / mib:.0f} MiB (export / 10): peak RSS "
            f"{int(bounded['peak']) / mib:.0f} MiB, {int(bounded['baseline']) / mib:.0f} MiB "  # type: ignore[call-overload]
            f"resident after imports, growth {growth / mib:.0f} MiB = {growth / bound:.2f}x the bound "
            f"(goal <= 1.2x); verdicts identical: {bounded['verdicts'] == single['verdicts']}"
        )


if __name__ == "__main__":
    main()

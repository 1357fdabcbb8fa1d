"""Where the CPU of one ``memtrace attribute`` process goes, phase by phase.

Runs ``memtrace attribute ARGS`` in this process with ``time.process_time`` around the batch
job's phases (the scan of the plan, each partition's loading and, inside it, the OTLP-JSON
decoding, each store's graph build and attribution) and prints the seconds of each, the total,
and the load average. The phases nest: ``load_partition`` includes ``FileReader.decode``, and
``run_partition`` includes loading, building and attribution. The wrappers cost a little
(some 1 %), so compare runs of this script with each other, not with ``bench_scale.py``.

Run: ``.venv/bin/python benchmarks/bench_phases.py copy-00.jsonl --cases cases-00.jsonl
--out verdicts.jsonl --quiet`` (the copies that ``bench_scale.py --workdir W`` leaves in W).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections import Counter
from typing import Any


def _timed(
    owner: Any, name: str, label: str, seconds: dict[str, float], calls: Counter[str]
) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[label] = seconds.get(label, 0.0) + time.process_time() - started
            calls[label] += 1

    setattr(owner, name, wrapper)


def main(argv: list[str]) -> int:
    started = time.process_time()
    load = os.getloadavg()
    from memtrace_otel import cli
    from memtrace_otel.job import _executors
    from memtrace_otel.sources._files import FileReader

    imported = time.process_time()
    seconds: dict[str, float] = {}
    calls: Counter[str] = Counter()
    for owner, name in (
        (_executors, "scan_range"),
        (_executors, "run_partition"),
        (_executors, "load_partition"),
        (FileReader, "decode"),
        (_executors, "build_graph"),
        (_executors, "attribute_store"),
    ):
        _timed(owner, name, name, seconds, calls)
    code = cli.main(["attribute", *argv])
    total = time.process_time() - started
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", file=sys.stderr)
    print(f"{'importing the CLI':<20} {imported - started:7.2f} s", file=sys.stderr)
    for label, value in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"{label:<20} {value:7.2f} s  ({calls[label]} calls)", file=sys.stderr)
    print(f"{'total':<20} {total:7.2f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

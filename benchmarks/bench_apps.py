"""The suite of real apps (``memtrace bench apps``, issue 29): every app under
``opentelemetry-instrument`` in each capture mode, faults planted by the scripted model server,
wrong answers flagged with ``memtrace feedback``, ``memtrace attribute`` with no cases file; prints
error type and op accuracy per app, mode and label.

    python benchmarks/bench_apps.py [--apps mem0,mem0-classic] [--modes off,PRODUCTION,SPAN_AND_EVENT]
                                    [--seed 0] [--small] [--misses] [--out bench-apps]
"""

from __future__ import annotations

import sys

from memtrace_bench.apps.cli import _standalone

if __name__ == "__main__":
    sys.exit(_standalone())

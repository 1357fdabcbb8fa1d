"""Loader throughput and memory on a generated OTLP JSON Lines file.

Prints, for one file of at least 200 MB of memory-operation spans (what our instrumentation
writes: op attributes, variable events with values, lineage links):

- the loader's throughput as a ratio to the bare parse of the same lines in the same run, like
  for like (goal >= 0.4: decoding into records may cost at most 2.5x the bare JSON parse): the
  loader with the optional orjson parser (when installed) against ``orjson.loads``, and with
  the standard library alone against ``json.loads`` (the orjson loader's ratio to
  ``json.loads`` is printed too, but flatters it);
- the loader's peak memory (RSS of a fresh process) on a 50 MB and on the 200 MB file
  (goal: flat, under 300 MB, whatever the file size).

Run: ``.venv/bin/python benchmarks/bench_sources.py [--size-mb 200] [--small-mb 50]``.
The files go to a temporary directory, deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from memtrace_otel.export import dumps_request
from memtrace_otel.semconv import EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import attributes as attr
from memtrace_otel.sources import _files, iter_records

SPANS_PER_LINE = 64
THROUGHPUT_GOAL = 0.4
MEMORY_GOAL_MB = 300


def _template_spans(line: int) -> list[SpanRecord]:
    """One batch of memory-op spans, ids unique per line."""
    resource = MappingProxyType({"service.name": "rag-bench", "telemetry.sdk.language": "python"})
    spans = []
    for i in range(SPANS_PER_LINE):
        trace_id = f"{line:016x}{i // 8:016x}"
        span_id = f"{line:08x}{i:08x}"
        ref_in = f"memory:{line}-{i}@1"
        ref_out = f"memory:{line}-{i}@2"
        value = ("Ana moved to Porto in May and works at the harbour. " * 6)[: 200 + i * 3]
        events = (
            EventRecord(
                attr.MEMTRACE_VARIABLE_EVENT,
                1_700_000_000_000_000_000 + i,
                MappingProxyType(
                    {
                        attr.MEMTRACE_VARIABLE_REF: ref_out,
                        attr.MEMTRACE_VARIABLE_ROLE: "output",
                        attr.MEMTRACE_VARIABLE_CATEGORY: "memory",
                        attr.MEMTRACE_VARIABLE_DIGEST: "sha256:" + "ab" * 32,
                        attr.MEMTRACE_VARIABLE_VALUE: value,
                    }
                ),
            ),
        )
        spans.append(
            SpanRecord(
                trace_id=trace_id,
                span_id=span_id,
                name="update_memory",
                parent_span_id=f"{line:08x}{0:08x}" if i else None,
                start_time_unix_nano=1_700_000_000_000_000_000 + i,
                end_time_unix_nano=1_700_000_000_000_500_000 + i,
                attributes=MappingProxyType(
                    {
                        attr.MEMTRACE_OP_KIND: "update",
                        attr.MEMTRACE_OP_NAME: "rag.merge",
                        attr.MEMTRACE_OP_INPUTS: (ref_in, f"message:{line}-{i}@1"),
                        attr.MEMTRACE_OP_OUTPUTS: (ref_out,),
                        attr.MEMTRACE_STAGE: "construction",
                        attr.MEMTRACE_SYSTEM: "rag",
                        attr.GEN_AI_MEMORY_STORE_ID: "user-42",
                        attr.GEN_AI_OPERATION_NAME: "update_memory",
                        attr.GEN_AI_MEMORY_RECORD_COUNT: 3,
                    }
                ),
                events=events,
                links=(
                    LinkRecord(
                        f"{line + 1:032x}",
                        f"{i + 1:016x}",
                        MappingProxyType({attr.MEMTRACE_VARIABLE_REF: ref_in}),
                    ),
                ),
                resource_attributes=resource,
                scope_name="memtrace_otel",
                scope_version="0.1.0",
            )
        )
    return spans


_MARK = 0xABCDEF12
"""A line number whose hex form appears only in ids: one encoded line becomes every line."""


def generate(path: str, size_mb: int) -> tuple[int, int]:
    """Write at least ``size_mb`` MB of OTLP JSON Lines; return (bytes, spans).

    One line is encoded with our writer (``dumps_request``); the others are copies with the
    line number replaced in every span id, so span ids stay unique across the file.
    """
    template = dumps_request(_template_spans(_MARK)) + "\n"
    mark = f"{_MARK:08x}"
    assert template.count(mark) >= SPANS_PER_LINE
    target = size_mb * 1_000_000
    written = 0
    spans = 0
    line = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            line += 1
            text = template.replace(mark, f"{line:08x}")
            out.write(text)
            written += len(text)  # ASCII
            spans += SPANS_PER_LINE
    return written, spans


def time_json_loads(path: str, loads: Callable[[bytes], Any] = json.loads) -> float:
    """CPU seconds to read the file line by line and parse every line with ``loads``."""
    start = time.process_time()
    with open(path, "rb") as f:
        for raw in f:
            loads(raw)
    return time.process_time() - start


def time_loader(path: str) -> tuple[float, int]:
    """CPU seconds for ``iter_records`` over the file, and the records it yielded."""
    start = time.process_time()
    count = 0
    for _ in iter_records(path, strict=True):
        count += 1
    return time.process_time() - start, count


_PEAK_SCRIPT = """
import resource, sys
from memtrace_otel.sources import _files, iter_records
n = sum(1 for _ in iter_records(sys.argv[1], strict=True))
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_rss_mb(path: str) -> tuple[float, int]:
    """Peak RSS (MB) of a fresh process that loads ``path``, and its record count."""
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, path], check=True, capture_output=True, text=True
    ).stdout.split()
    return int(out[1]) / 1024, int(out[0])  # ru_maxrss is in KiB on Linux


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--small-mb", type=int, default=50)
    parser.add_argument(
        "--repeat", type=int, default=2, help="alternating timing runs (best counts)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memtrace-bench-") as tmp:
        big = os.path.join(tmp, "big.jsonl")
        small = os.path.join(tmp, "small.jsonl")
        t0 = time.perf_counter()
        big_bytes, big_spans = generate(big, args.size_mb)
        small_bytes, _ = generate(small, args.small_mb)
        print(
            f"generated {big_bytes / 1e6:.0f} MB ({big_spans} spans) and "
            f"{small_bytes / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s"
        )

        # CPU time, best of `--repeat` alternating runs: other processes on the machine slow
        # both sides, and the best run is the least disturbed one. The loader runs with the
        # optional orjson parser when it is installed, and once more with the standard parser
        # alone (what a plain install gets).
        variants = [("loader", _files._fast_loads)]
        if _files._fast_loads is not None:
            variants.append(("loader, stdlib json only", None))
        # Like for like: each loader against the bare parse by the parser it uses (orjson's
        # against orjson.loads, the stdlib one's against json.loads).
        parsers: dict[str, Callable[[bytes], Any]] = {"json": json.loads}
        if _files._fast_loads is not None:
            parsers["orjson"] = _files._fast_loads
        parse_runs: dict[str, list[float]] = {name: [] for name in parsers}
        loader_runs: dict[str, list[float]] = {name: [] for name, _ in variants}
        for attempt in range(args.repeat):
            for name, loads in parsers.items():
                parse_runs[name].append(time_json_loads(big, loads))
            for name, fast in variants:
                if attempt and fast is None and len(variants) > 1:
                    continue  # the stdlib-only figure is informative: one run keeps us < 3 min
                _files._fast_loads = fast
                loader_s, records = time_loader(big)
                loader_runs[name].append(loader_s)
                if records != big_spans:
                    print(f"ERROR: the loader yielded {records} records, expected {big_spans}")
                    return 1
        _files._fast_loads = variants[0][1]
        for name, runs in parse_runs.items():
            print(f"{name}.loads : {min(runs):6.2f} s  {big_bytes / 1e6 / min(runs):7.1f} MB/s")
        json_s = min(parse_runs["json"])
        for name, runs in loader_runs.items():
            loader_s = min(runs)
            parser_name = "orjson" if name == "loader" and "orjson" in parsers else "json"
            ratio = min(parse_runs[parser_name]) / loader_s
            verdict = "ok" if ratio >= THROUGHPUT_GOAL else "BELOW GOAL"
            print(
                f"{name} ({parser_name}): {loader_s:6.2f} s  {big_bytes / 1e6 / loader_s:7.1f} "
                f"MB/s  ratio to {parser_name}.loads {ratio:.2f} (goal >= {THROUGHPUT_GOAL}) "
                f"{verdict}"
                + (f"; to json.loads {json_s / loader_s:.2f}" if parser_name != "json" else "")
            )

        small_peak, _ = peak_rss_mb(small)
        big_peak, _ = peak_rss_mb(big)
        flat = big_peak <= small_peak * 1.25 + 10
        ok = big_peak < MEMORY_GOAL_MB and flat
        print(
            f"peak RSS: {small_peak:.0f} MB on {small_bytes / 1e6:.0f} MB, "
            f"{big_peak:.0f} MB on {big_bytes / 1e6:.0f} MB "
            f"(goal: flat, < {MEMORY_GOAL_MB} MB) {'ok' if ok else 'BELOW GOAL'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The batch job at scale: local process pool, a real Dask cluster, the SQLite spill, fsspec URLs.

Every scaled run is compared with the single-process run over the same generated workload.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.attribution import EvidenceMethod, get_method
from memtrace_otel.attribution._model import Case, Verdict
from memtrace_otel.cli import main
from memtrace_otel.job import run_batch
from memtrace_otel.job._executors import (
    SpillIndex,
    make_partitions,
    parse_executor,
    parse_size,
    plan_sources,
    run_scaled,
)
from memtrace_otel.job._partitions import Partition
from tests.conftest import shared_path

distributed = pytest.importorskip("dask.distributed")


class SlowMethod(EvidenceMethod):
    """The evidence method, slowed down so a worker can be killed while it runs."""

    def attribute(self, G: Any, case: Case) -> Verdict:
        time.sleep(0.02)
        return super().attribute(G, case)


class PoisonMethod(EvidenceMethod):
    """Raises an unexpected error on one store's cases (a poison partition)."""

    def __init__(self, poison: str) -> None:
        super().__init__()
        self.poison = poison

    def attribute(self, G: Any, case: Case) -> Verdict:
        if case.case_id.startswith(self.poison + ":"):
            raise ZeroDivisionError("poisoned store")
        return super().attribute(G, case)


def _exit_soon() -> None:
    """Kill this worker process right after answering (as a crash or an OOM kill would)."""
    threading.Timer(0.05, os._exit, (1,)).start()


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("scale")
    code = main(
        [
            "bench",
            "generate",
            "--users",
            "3",
            "--faults",
            "all=0.3",
            "--out",
            str(folder),
            "--no-progress",
        ]
    )
    assert code == 0
    return folder


@pytest.fixture(scope="module")
def baseline(workload: Path) -> tuple[list[Verdict], dict[str, Any]]:
    verdicts, summary = run_batch(
        [str(workload / "traces.jsonl")],
        get_method("evidence"),
        cases_file=str(workload / "cases.jsonl"),
    )
    assert len(verdicts) > 20  # a workload worth partitioning
    return verdicts, _plain(summary)


def _plain(summary: Any) -> dict[str, Any]:
    data: dict[str, Any] = summary.to_json()
    data.pop("seconds")
    return data


def _run(workload: Path, **options: Any) -> tuple[list[Verdict], dict[str, Any]]:
    method = options.pop("method", None) or get_method("evidence")
    verdicts, summary = run_batch(
        [options.pop("source", str(workload / "traces.jsonl"))],
        method,
        cases_file=str(workload / "cases.jsonl"),
        **options,
    )
    return verdicts, _plain(summary)


def test_parse_options() -> None:
    assert parse_executor("local[2]").workers == 2
    assert parse_executor("dask://10.0.0.1:8786").address == "tcp://10.0.0.1:8786"
    assert parse_size("2G") == 2 * 1024**3
    for bad in ("local[0]", "spark://x", "dask://"):
        with pytest.raises(ValueError):
            parse_executor(bad)
    with pytest.raises(ValueError):
        parse_size("lots")


def test_an_inline_run_holds_one_partition_at_a_time(
    workload: Path, baseline: tuple[list[Verdict], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition's line tables (24 bytes a line) are made just before it runs and dropped
    after: when a partition starts, no earlier one is still alive, and the verdicts are the
    single process's."""
    import gc
    import weakref

    from memtrace_otel.job import _executors

    seen: list[weakref.ref[Partition]] = []
    alive_at_start: list[int] = []
    run_partition = _executors.run_partition

    def watching(partition: Partition, *args: Any, **kwargs: Any) -> Any:
        gc.collect()
        alive_at_start.append(sum(ref() is not None for ref in seen))
        seen.append(weakref.ref(partition))
        return run_partition(partition, *args, **kwargs)

    monkeypatch.setattr(_executors, "run_partition", watching)
    assert _run(workload, executor="inline", partitions=5) == baseline
    assert len(alive_at_start) == 5 and alive_at_start == [0] * 5


def test_partitions_split_by_store_and_cover_every_store(workload: Path) -> None:
    plan = plan_sources([str(workload / "traces.jsonl")])
    partitions = make_partitions(plan, 4)
    stores = [s for p in partitions for s in p.stores]
    assert sorted(stores) == sorted(plan.records)  # each store in exactly one partition
    assert len(partitions) == 4
    assert all(chunk.lines for p in partitions for chunk in p.chunks)  # JSON Lines: by line


def test_local_pool_matches_single_process(
    workload: Path, baseline: tuple[list[Verdict], dict[str, Any]]
) -> None:
    assert _run(workload, executor="local[2]") == baseline


def test_judge_mode_matches_single_process(workload: Path) -> None:
    source = [str(workload / "traces.jsonl")]
    single = run_batch(source, get_method("evidence"))
    pooled = run_batch(source, get_method("evidence"), executor="local[2]")
    assert pooled[0] == single[0] and _plain(pooled[1]) == _plain(single[1])


def test_memory_bound_spills_and_matches(
    workload: Path, baseline: tuple[list[Verdict], dict[str, Any]], tmp_path: Path
) -> None:
    assert _run(workload, memory_bound="8M") == baseline
    spill = SpillIndex(1 << 20, str(tmp_path))
    from memtrace_otel.sources import open_source

    records = list(open_source(str(workload / "traces.jsonl")).records())
    for record in records:
        spill.add(record)
    spill.finish()
    store = sorted(spill.records)[1]
    assert spill.store_records(store) == [
        r for r in records if r.attributes.get("gen_ai.memory.store.id") == store
    ]
    spill.close()
    assert not Path(spill.path).exists()


def test_fsspec_url_source(workload: Path, baseline: tuple[list[Verdict], dict[str, Any]]) -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe("/scale-test/traces.jsonl", (workload / "traces.jsonl").read_bytes())
    try:
        assert _run(workload, source="memory://scale-test/") == baseline
        assert _run(workload, source="memory://scale-test/*.jsonl", memory_bound="8M") == baseline
    finally:
        fs.rm("/scale-test", recursive=True)


def _latest(path: Path) -> dict[str, dict[str, Any]]:
    """The latest verdict of each case in a verdicts file, without when it was made."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["case_id"]: {k: v for k, v in r.items() if k != "attributed_at"} for r in rows}


def test_cli_executor_writes_the_same_verdicts(workload: Path, tmp_path: Path) -> None:
    args = [str(workload / "traces.jsonl"), "--cases", str(workload / "cases.jsonl"), "--quiet"]
    assert main(["attribute", *args, "--out", str(tmp_path / "a.jsonl")]) == 0
    assert (
        main(["attribute", *args, "--out", str(tmp_path / "b.jsonl"), "--executor", "local[2]"])
        == 0
    )
    assert _latest(tmp_path / "a.jsonl") == _latest(tmp_path / "b.jsonl")
    assert main(["attribute", *args, "--executor", "spark://x"]) == 2


@pytest.fixture(scope="module")
def cluster() -> Any:
    import cloudpickle

    # The workers cannot import this test module: ship the test methods by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
    ) as local:
        yield local
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _address(cluster: Any) -> str:
    return "dask://" + cluster.scheduler_address.removeprefix("tcp://")


def test_dask_matches_single_process(
    workload: Path, baseline: tuple[list[Verdict], dict[str, Any]], cluster: Any
) -> None:
    # A file:// URL: the workers read the source themselves, through fsspec.
    url = "file://" + str(workload / "traces.jsonl")
    assert _run(workload, source=url, executor=_address(cluster)) == baseline


def test_dask_survives_a_killed_worker(
    workload: Path, baseline: tuple[list[Verdict], dict[str, Any]], cluster: Any
) -> None:
    client = distributed.Client(cluster, set_as_default=False)
    try:
        victim = sorted(client.scheduler_info()["workers"])[0]
        killed = threading.Event()

        def kill_when_busy() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                processing = client.processing(workers=[victim]).get(victim)
                if processing:  # the victim holds a partition right now
                    break
                time.sleep(0.05)
            try:
                client.run(_exit_soon, workers=[victim])
            finally:
                killed.set()

        killer = threading.Thread(target=kill_when_busy, daemon=True)
        killer.start()
        verdicts, summary = _run(workload, executor=_address(cluster), method=SlowMethod())
        killer.join(30)
        assert killed.is_set()
        assert victim not in client.scheduler_info()["workers"]  # it really died
    finally:
        client.close()
    assert [v.to_json() for v in verdicts] == [v.to_json() for v in baseline[0]]
    assert summary["failed"] == [] and summary["attributed"] == baseline[1]["attributed"]


def test_dask_broadcast_to_a_frozen_worker_falls_back(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker that stops answering (SIGSTOP: alive, connected, silent) left the broadcast of the
    # run's shared arguments waiting for good, every other worker idle. Each try is bounded: the
    # engine gives up on the broadcast and sends the arguments with each task instead.
    import signal

    from memtrace_otel.job import _executors

    monkeypatch.setattr(_executors, "_SCATTER_TIMEOUT", 1.0)
    engine = _executors._DaskEngine(cluster.scheduler_address, retries=1)
    try:
        pids = engine._client.run(os.getpid)
        frozen = pids[sorted(pids)[0]]
        os.kill(frozen, signal.SIGSTOP)
        try:
            args = [{"settings": list(range(1000))}]
            assert engine._scatter(args) is args  # not futures: sent with each task
        finally:
            os.kill(frozen, signal.SIGCONT)
    finally:
        engine.close()


def test_dask_poison_partition_is_reported(
    workload: Path, baseline: tuple[list[Verdict], dict[str, Any]], cluster: Any
) -> None:
    poison = "rag:user-02"
    verdicts, summary = _run(workload, executor=_address(cluster), method=PoisonMethod(poison))
    failures = summary["failed"]
    assert len(failures) == 1 and failures[0]["case_id"].startswith("partition ")
    assert "ZeroDivisionError" in failures[0]["error"] and poison in failures[0]["error"]
    # Every case outside the poison partition's stores still got its verdict.
    lost = set(failures[0]["error"].rsplit("(stores ", 1)[1].rstrip(")").split(", "))
    expected = [v for v in baseline[0] if v.store_id not in lost]
    assert verdicts == expected and expected


def _hostile_copy(workload: Path, folder: Path) -> Path:
    """The workload's traces with bad input of every kind a scan or a partition counts."""
    lines = (workload / "traces.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) > 200
    first, second = json.loads(lines[40]), json.loads(lines[-40])
    # One resource holding spans of two stores: only a full decode can tell the stores apart.
    first["resourceSpans"][0]["scopeSpans"][0]["spans"] += second["resourceSpans"][0]["scopeSpans"][
        0
    ]["spans"]
    bad_span = json.loads(lines[60])
    bad_span["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "not-hex"
    # Two resources of two stores on one line, the second with a bad span: each store's partition
    # drops the other's spans before decoding, so the bad span is counted once.
    two_stores = json.loads(lines[90])
    other = json.loads(lines[-90])
    other["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "not-hex-either"
    two_stores["resourceSpans"] += other["resourceSpans"]
    long_value = json.loads(lines[80])
    long_value["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"].append(
        {"key": "huge", "value": {"stringValue": "x" * 5000}}
    )
    out = [
        b"\n",  # a blank line before the first value: no error
        *lines[:30],
        *[b"\n", b"  \n"],  # blank lines inside the file: one error
        *lines[30:100],
        *[b'{"resourceSpans": [\n', b"\xff\xfe not utf-8\n"],  # invalid JSON, invalid UTF-8
        json.dumps(first).encode() + b"\n",
        json.dumps(bad_span).encode() + b"\n",
        json.dumps(two_stores).encode() + b"\n",
        json.dumps(long_value).encode() + b"\n",
        *lines[100:150],
        *[lines[120], lines[121]],  # a Collector retry: duplicate spans
        *lines[150:],
        *[b"\n", b"\n"],  # trailing blank lines: no error
    ]
    path = folder / "traces.jsonl"
    path.write_bytes(b"".join(out))
    return path


@pytest.mark.parametrize("executor", ["local[2]", "local[1]"])
def test_bad_input_is_counted_once_by_the_scans_and_partitions(
    workload: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executor: str
) -> None:
    from memtrace_otel.job import _executors

    monkeypatch.setattr(_executors, "_MIN_RANGE", 64 << 10)  # many small ranges
    monkeypatch.setenv("MEMTRACE_MAX_ATTRIBUTE_BYTES", "4096")
    source = str(_hostile_copy(workload, tmp_path))
    single_verdicts, single = run_batch([source], get_method("evidence"))
    verdicts, summary = run_batch([source], get_method("evidence"), executor=executor)
    expected = _plain(single)
    # Exact duplicates (the merged line's two spans, lines 120-121) are dropped and counted;
    # the long-value copy of line 80 says something else under the same span id: a conflict;
    # the two-store line repeats line 90's span.
    assert expected["duplicates"] == 2 + 2 + 1
    assert expected["skipped_by_kind"] == {
        "duplicate_span": 1,
        "empty_line": 1,
        "invalid_json": 1,
        "invalid_utf8": 1,
        "invalid_span": 2,
    }
    assert expected["truncated_values"] == 1
    assert _plain(summary) == expected
    assert verdicts == single_verdicts


def test_a_memtracebench_document_is_read_whole_by_its_partition() -> None:
    # Its records name line 1 of a pretty-printed document: it must not be read as JSON Lines.
    source = [str(shared_path("samples", "smartcomment_export_sample.json"))]
    single_verdicts, single = run_batch(source, get_method("evidence"))
    verdicts, summary = run_batch(source, get_method("evidence"), executor="local[2]")
    assert single_verdicts and verdicts == single_verdicts
    assert _plain(summary) == _plain(single)


def test_every_shared_fixture_gives_the_single_process_summary_on_the_pool() -> None:
    # Jaeger, jaeger-ui, OTLP and Tempo files, some unreadable: each file is its own source, and
    # the summary keeps the first messages per source, as the single process does.
    folder = shared_path("fixtures")
    files = sorted(str(p) for p in folder.rglob("*") if p.is_file())
    assert len(files) > 10
    single_verdicts, single = run_batch(files, get_method("evidence"))
    verdicts, summary = run_batch(files, get_method("evidence"), executor="local[2]")
    assert single.skipped_records > 0 and len(single.source_errors) > 10
    assert verdicts == single_verdicts
    assert _plain(summary) == _plain(single)


def test_inline_matches_single_process(
    workload: Path, baseline: tuple[list[Verdict], dict[str, Any]]
) -> None:
    assert _run(workload, executor="inline") == baseline
    # Many small partitions (a bounded run on a big export): the same again.
    verdicts, summary = run_scaled(
        [str(workload / "traces.jsonl")],
        get_method("evidence"),
        executor="inline",
        cases_file=str(workload / "cases.jsonl"),
        partitions=7,
    )
    assert (verdicts, _plain(summary)) == baseline


def test_cli_streams_by_default_with_the_same_verdicts_and_report(
    workload: Path,
    baseline: tuple[list[Verdict], dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memtrace_otel.job import _executors
    from memtrace_otel.job._executors import default_executor

    traces = str(workload / "traces.jsonl")
    assert default_executor([traces]) == (None, None)  # small: read into memory
    assert default_executor([traces], stream_above=0) == ("inline", None)
    monkeypatch.setattr(_executors, "STREAM_ABOVE_BYTES", 0)  # as an export of a day's traffic
    out, report = tmp_path / "v.jsonl", tmp_path / "report"
    cases = str(workload / "cases.jsonl")
    code = main(
        [
            "attribute",
            traces,
            "--cases",
            cases,
            "--out",
            str(out),
            "--quiet",
            "--report",
            str(report),
        ]
    )
    assert code == 0
    written = {v.case_id: v for v in map(Verdict.from_json, map(json.loads, out.open()))}
    assert written == {v.case_id: v for v in baseline[0]}
    # The report's pages were drawn during the run, from the same graphs.
    pages = sorted((report / "cases").glob("*.js"))
    assert len(pages) == len(written)
    shown = {json.loads(p.read_text().split("(", 1)[1].rsplit(")", 1)[0])["case_id"] for p in pages}
    assert shown == set(written)


def test_an_export_split_by_store_reads_as_the_single_file(
    workload: Path, baseline: tuple[list[Verdict], dict[str, Any]], tmp_path: Path
) -> None:
    """What collector_config/examples/split-by-store.yaml writes: one file per store (the store
    id also on the resource), and the spans naming no store in ``unrouted.jsonl``."""
    from memtrace_otel.semconv import attributes as A

    split = tmp_path / "by-store"
    split.mkdir()
    files: dict[str, Any] = {}
    for line in (workload / "traces.jsonl").read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    store = next(
                        (
                            a["value"]["stringValue"]
                            for a in span.get("attributes", [])
                            if a["key"] == A.GEN_AI_MEMORY_STORE_ID
                        ),
                        None,
                    )
                    name = "unrouted" if store is None else f"store-{store}"
                    extra = (
                        []
                        if store is None
                        else [{"key": A.GEN_AI_MEMORY_STORE_ID, "value": {"stringValue": store}}]
                    )
                    block = {
                        "resource": {"attributes": resource["resource"]["attributes"] + extra},
                        "scopeSpans": [{"scope": scope["scope"], "spans": [span]}],
                    }
                    if name not in files:
                        files[name] = (split / f"{name}.jsonl").open("w")
                    files[name].write(json.dumps({"resourceSpans": [block]}) + "\n")
    for handle in files.values():
        handle.close()
    assert len(files) > 2
    verdicts, summary = _run(workload, source=str(split), executor="inline")
    assert {v.case_id: v for v in verdicts} == {v.case_id: v for v in baseline[0]}
    assert summary["records"] == baseline[1]["records"]


def test_the_streaming_index_holds_a_few_bytes_a_line(tmp_path: Path) -> None:
    """The plan of a streamed run addresses every line of the export, so at a day's traffic it
    must stay small: some 24 bytes a line (offset and line number in arrays), where sets and
    tuples of ints took some 250 (peak memory grew 1.6x from 4x to 16x the data)."""
    import tracemalloc

    from memtrace_otel.job._partitions import Plan, merge_scan, scan_range, split_ranges

    lines = 20_000
    path = tmp_path / "traces.jsonl"
    with open(path, "w") as out:
        for n in range(lines):
            span = {
                "traceId": f"{n // 10 + 1:032x}",
                "spanId": f"{n + 1:016x}",
                "name": "memtrace.retrieve",
                "startTimeUnixNano": "1",
                "endTimeUnixNano": "2",
                "attributes": [
                    {"key": "gen_ai.memory.store.id", "value": {"stringValue": f"u{n % 40}"}}
                ],
            }
            request = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
            out.write(json.dumps(request) + "\n")
    tracemalloc.start()
    try:
        plan = Plan()
        for part in split_ranges(str(path), 1):
            merge_scan(plan, scan_range(part))
        partitions = make_partitions(plan, 8)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(p.records for p in partitions) == lines
    assert [n for p in partitions for c in p.chunks for _, n in c.lines or ()] != []
    assert held / lines < 64, f"{held / lines:.0f} bytes a line"


def test_a_cases_file_with_repeated_ids_is_decided_as_in_one_process(
    workload: Path, tmp_path: Path
) -> None:
    """A streamed run keeps only the cases it may attribute: an id repeated with another verdict
    (correct first, or after), and an incorrect case found in no trace, are decided as one
    process decides them."""
    rows = [json.loads(line) for line in (workload / "cases.jsonl").read_text().splitlines()]
    failed = [row for row in rows if row["verdict"] != "correct"]
    correct = [row for row in rows if row["verdict"] == "correct"]
    assert len(failed) >= 2 and len(correct) >= 2
    extra = [
        {**failed[0], "verdict": "correct"},  # repeated after as correct: the first counts
        {**correct[0], "verdict": "incorrect"},  # correct first, then incorrect
        {**correct[1], "case_id": "no-such:case", "verdict": "incorrect"},
    ]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps(row) + "\n" for row in [*rows, *extra]))
    source = [str(workload / "traces.jsonl")]
    single = run_batch(source, get_method("evidence"), cases_file=str(cases))
    assert "no-such:case" in single[1].cases_not_in_traces
    for options in ({"executor": "inline", "partitions": 5}, {"memory_bound": "64M"}):
        verdicts, summary = run_batch(
            source, get_method("evidence"), cases_file=str(cases), **options
        )
        assert (verdicts, _plain(summary)) == (single[0], _plain(single[1])), options

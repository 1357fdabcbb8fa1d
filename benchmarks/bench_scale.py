"""The batch job at a day's traffic, measured as users run it: ``memtrace attribute`` as a process.

Part 1 (the default): ``memtrace attribute FILES --cases CASES --out VERDICTS`` (the default
method, the generated set's own expected answers) is run as a fresh process on 1x, 4x, 8x and
16x the 40-user benchmark (``memtrace bench generate --users 40``: about 27k spans). Each size
is made of renamed copies of that set (``copy-KK.jsonl``): every copy renames its users
(``user-01`` -> ``r07-user-01``), its prompt stores (``rag`` -> ``r07-rag``) and prompt refs,
and maps every trace and span id through a hash, so stores, ids and prompt stores are all
distinct and no span duplicates another copy's. Size N reads the first N copies as N files.

For each size it prints the CPU time (user + sys) of the child process (``os.wait4``, so its
own children count too), its peak RSS (the child is started from a small launcher process, since
Linux carries the parent's peak into a child's ``ru_maxrss``), spans/s, and the floor measured in
this same run: the CPU time of stdlib ``json.loads`` over the same lines, in a fresh interpreter,
once just before the run and three times just after it; the floor is their median (one reading
of the four can be far off: the first one of a while has run up to 40 % slow, the machine's own
warm-up, and averaging it with one other reading flattered the ratio). Then the ratio, and
beside it the ratio on the least of the four readings, the strictest view.
Nothing carries over
between runs: each run is a fresh interpreter writing a fresh verdicts file (a verdicts file
left from an earlier run would resume its cases), and the copies hold no results.

Goals (issue 34): peak RSS <= 400 MB at 8x and 16x, and 16x within 1.25x of 4x; CPU <= 5x the
``json.loads`` floor at every size; 16x / 1x CPU at most 17.6 (linear within 10 %). The load
average before each run is printed with it: the machine is shared, and CPU time inflates when
the other core is busy.

With ``--reference`` the same runs read copies whose captured values are content references
(``ref-KK.jsonl``): each ``memtrace.variable.value`` became a ``memtrace.variable.value_ref`` to an
object of a ``file://`` content store in the workdir, named by the sha256 of its bytes, as
``REFERENCE`` capture writes them. The batch job then reads every value from the store, verified,
as a user of ``REFERENCE`` runs it (the floor is still ``json.loads`` of the lines it reads).

Part 2 (``--dask``): the single process against a 2-worker Dask cluster (goal >= 1.6x), and the
memory-bounded run (see :func:`dask_main`).

Run: ``.venv/bin/python benchmarks/bench_scale.py [--sizes 1,4,8,16] [--workdir DIR]`` (the
16x size writes 1.6 GB of copies and runs for minutes: run it once, on a quiet machine).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEX_ID = re.compile(rb'"([0-9a-f]{32}|[0-9a-f]{16})"')


def build_workload(folder: Path, copies: int) -> tuple[int, int]:
    """Generate the base workload and write ``copies`` renamed copies; (cases, stores)."""
    from memtrace_otel.cli import EXIT_OK, main

    base = folder / "base"
    if not (base / "traces.jsonl").exists():
        started = time.perf_counter()
        code = main(
            [
                "bench", "generate", "--users", "4", "--faults", "all=0.1",
                "--out", str(base), "--no-progress",
            ]
        )  # fmt: skip
        assert code == EXIT_OK
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
cpu = time.process_time()
verdicts, summary = run_batch(
    [folder + "/traces.jsonl"], get_method("evidence"), cases_file=folder + "/cases.jsonl",
    memory_bound=bound,
)
print(json.dumps({
    "seconds": time.perf_counter() - started,
    "cpu": time.process_time() - cpu,
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


def _import_package() -> None:
    import memtrace_otel.job._executors  # noqa: F401


@dataclass
class DaskRuns:
    """What :func:`run_dask` measured."""

    seconds: list[float] = field(default_factory=list)
    """Wall seconds of each run (cluster start-up excluded)."""
    worker_cpu: list[float] = field(default_factory=list)
    """CPU seconds the two workers spent in each run, together."""
    idle_share: float = 0.0
    """Share of the two cores Dask's own processes (the driver, which hosts the scheduler,
    and the workers) used while no task ran."""
    verdicts: list[str] = field(default_factory=list)
    """The verdicts of the last run."""


_IDLE_SECONDS = 5.0


def run_dask(folder: Path, repeats: int) -> DaskRuns:
    """The same job on a 2-worker LocalCluster, ``repeats`` times."""
    from dask.distributed import Client, LocalCluster

    from memtrace_otel.attribution import get_method
    from memtrace_otel.job import run_batch

    runs = DaskRuns()
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
    ) as cluster:
        address = "dask://" + cluster.scheduler_address.removeprefix("tcp://")
        # The single process imports the package before its clock starts; so do the workers.
        with Client(cluster) as client:
            client.run(_import_package)
            workers, driver = client.run(time.process_time), time.process_time()
            time.sleep(_IDLE_SECONDS)
            idle_cpu = time.process_time() - driver + _cpu_since(client, workers)
            runs.idle_share = idle_cpu / (2 * _IDLE_SECONDS)
            for _ in range(repeats):
                cpu_before = client.run(time.process_time)
                started = time.perf_counter()
                found, _ = run_batch(
                    [str(folder / "traces.jsonl")],
                    get_method("evidence"),
                    cases_file=str(folder / "cases.jsonl"),
                    executor=address,
                )
                runs.seconds.append(time.perf_counter() - started)
                runs.worker_cpu.append(_cpu_since(client, cpu_before))
                runs.verdicts = [v.to_json() for v in found]
    return runs


def _cpu_since(client: Any, before: dict[str, float]) -> float:
    """CPU seconds the workers spent since ``before`` (their ``time.process_time()``), in all."""
    after: dict[str, float] = client.run(time.process_time)
    return sum(after[worker] - before[worker] for worker in before)


def _fixed_work(_: int = 0) -> float:
    """CPU seconds of a fixed pure-Python job (dict churn, like loading and graph building)."""
    started = time.process_time()
    table: dict[int, dict[str, object]] = {}
    for i in range(2_000_000):
        table[i % 50_000] = {"a": i, "b": str(i)}
    return time.process_time() - started


def core_check(rounds: int = 3) -> list[float]:
    """How much CPU time the same job takes when two run at once, against one alone, per round.

    On two independent, steady cores this is 1.0; more means the cores slow each other down
    (shared caches, memory bandwidth, a busy host), which no partitioning can win back.
    """
    import multiprocessing

    inflation = []
    with multiprocessing.get_context("fork").Pool(2) as pool:
        for _ in range(rounds):
            alone = _fixed_work()
            together = pool.map(_fixed_work, [0, 1])
            inflation.append(sum(together) / 2 / alone)
    return inflation


def _seconds(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.1f}" for v in values) + "]"


def dask_main(args: argparse.Namespace) -> None:
    """Part 2: one process vs a 2-worker Dask cluster, and the memory-bounded run, on a
    workload of at least 2,000 failed cases over at least 500 memory stores (16 user stores of
    ``memtrace bench generate --users 4 --faults all=0.1`` replicated ``--copies`` times),
    ``--repeats`` rounds interleaved, the best time of each compared."""
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(args.workdir or temp)
        folder.mkdir(parents=True, exist_ok=True)
        failed, stores = build_workload(folder, args.copies)
        size = os.path.getsize(folder / "traces.jsonl")
        print(f"workload: {failed} failed cases over {stores} stores, {size / 2**20:.0f} MiB")

        # Interleaved, best of each: this machine's speed drifts by +-20% from minute to minute.
        singles: list[float] = []
        single_cpu: list[float] = []
        dasks: list[float] = []
        dask_cpu: list[float] = []
        idle: list[float] = []
        same = True
        for _ in range(args.repeats):
            single = run_child(folder, None)
            singles.append(float(single["seconds"]))  # type: ignore[arg-type]
            single_cpu.append(float(single["cpu"]))  # type: ignore[arg-type]
            runs = run_dask(folder, 1)
            dasks += runs.seconds
            dask_cpu += runs.worker_cpu
            idle.append(runs.idle_share)
            same = same and runs.verdicts == single["verdicts"]
        speedup = min(singles) / min(dasks)
        print(
            f"single process: best {min(singles):.1f} s of {_seconds(singles)}, "
            f"{single['attributed']} verdicts"
        )
        print(
            f"dask, 2 workers: best {min(dasks):.1f} s of {_seconds(dasks)}, "
            f"verdicts identical: {same}"
        )
        print(
            f"speedup: {speedup:.2f}x (best vs best; goal >= 1.6x); per round: "
            + ", ".join(f"{a / b:.2f}x" for a, b in zip(singles, dasks, strict=True))
        )
        # Where the speed-up goes. The workers do more work in all than the single process (the
        # scan, and each runs slower beside the other on two cores), Dask's own processes take
        # a share of the cores even when no task runs, and the workers wait at the start and
        # at the tail. The ceiling is what the first two leave with no waiting at all.
        work = min(dask_cpu) / min(single_cpu)
        fastest = dasks.index(min(dasks))
        busy = dask_cpu[fastest] / (2 * dasks[fastest])  # in the fastest run
        tax = min(idle)
        print(
            f"CPU: single process best {min(single_cpu):.1f} s, the 2 workers best "
            f"{min(dask_cpu):.1f} s in all = {work:.2f}x the work; Dask idle takes "
            f"{tax:.0%} of the 2 cores; workers busy {busy:.0%} of the run"
        )
        print(
            f"ceiling with no waiting: 2 x (1 - {tax:.2f}) / {work:.2f} = "
            f"{2 * (1 - tax) / work:.2f}x"
        )
        control = core_check()
        print(
            "control, a fixed pure-Python job: two at once take "
            + ", ".join(f"{x:.2f}x" for x in control)
            + " the CPU time of one alone (1.00x on independent steady cores)"
        )

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


# --- part 1: the CLI at 1x, 4x, 8x, 16x -------------------------------------------------------
_STORE_ID = re.compile(rb'("gen_ai\.memory\.store\.id","value":\{"stringValue":")([^"]*)"')
_GOAL_RSS = 400 * 10**6
_GOAL_FLOOR = 5.0
_GOAL_LINEAR = 17.6


def reference_copies(folder: Path, pairs: list[tuple[Path, Path]]) -> list[tuple[Path, Path]]:
    """``ref-KK.jsonl`` beside each ``copy-KK.jsonl``: its captured values moved into the content
    store ``folder/content`` (sha256-named objects) and replaced by references to them."""
    store = folder / "content"
    objects = store / "objects" / "sha256"
    objects.mkdir(parents=True, exist_ok=True)
    root = store.absolute().as_uri()
    out = []
    for traces, cases in pairs:
        target = traces.with_name(traces.name.replace("copy-", "ref-"))
        out.append((target, cases))
        if target.exists():
            continue
        with open(traces, "rb") as source, open(target, "w", encoding="utf-8") as sink:
            for line in source:
                request = json.loads(line)
                for resource in request.get("resourceSpans", ()):
                    for scope in resource.get("scopeSpans", ()):
                        for span in scope.get("spans", ()):
                            for event in span.get("events") or ():
                                for kv in event.get("attributes") or ():
                                    _to_reference(kv, objects, root)
                sink.write(json.dumps(request, separators=(",", ":")) + "\n")
    return out


def _to_reference(kv: dict[str, Any], objects: Path, root: str) -> None:
    value = kv.get("value") or {}
    if kv.get("key") != "memtrace.variable.value" or "stringValue" not in value:
        return
    data = value["stringValue"].encode("utf-8", "surrogatepass")
    name = hashlib.sha256(data).hexdigest()
    path = objects / name
    if not path.exists():
        path.write_bytes(data)
    kv["key"] = "memtrace.variable.value_ref"
    kv["value"] = {"stringValue": f"{root}/objects/sha256/{name}"}


def build_copies(folder: Path, copies: int) -> list[tuple[Path, Path]]:
    """The 40-user set, generated once into ``folder/base``, and ``copies`` renamed copies of
    it: ``(traces, cases)`` of each (copies already written are kept)."""
    from memtrace_otel.cli import main

    base = folder / "base"
    if not (base / "traces.jsonl").exists():
        started = time.perf_counter()
        code = main(["bench", "generate", "--users", "40", "--out", str(base), "--no-progress"])
        assert code == 0
        print(f"generated the 40-user set in {time.perf_counter() - started:.1f} s")
    pairs = []
    traces: list[bytes] | None = None
    cases: list[bytes] = []
    for copy in range(copies):
        t_path, c_path = folder / f"copy-{copy:02d}.jsonl", folder / f"cases-{copy:02d}.jsonl"
        pairs.append((t_path, c_path))
        if t_path.exists() and c_path.exists():
            continue
        if traces is None:
            traces = (base / "traces.jsonl").read_bytes().splitlines(keepends=True)
            cases = (base / "cases.jsonl").read_bytes().splitlines(keepends=True)
        tag = b"r%02d-" % copy

        def new_id(match: re.Match[bytes], copy: int = copy) -> bytes:
            old = match.group(1)
            digest = hashlib.blake2b(b"%d:" % copy + old, digest_size=len(old) // 2)
            return b'"' + digest.hexdigest().encode() + b'"'

        def rename(line: bytes, tag: bytes = tag) -> bytes:
            line = line.replace(b"user-", tag + b"user-").replace(b'"prompt:', b'"prompt:' + tag)
            # Prompt stores (no user in their id) get the copy's tag too.
            line = _STORE_ID.sub(
                lambda m: (
                    m.group(1) + (m.group(2) if tag in m.group(2) else tag + m.group(2)) + b'"'
                ),
                line,
            )
            return _HEX_ID.sub(new_id, line)

        with open(t_path, "wb") as out:
            out.writelines(rename(line) for line in traces)
        with open(c_path, "wb") as out:
            out.writelines(rename(line) for line in cases)
    return pairs


_FLOOR = r"""
import json, sys, time
spans = 0
started = time.process_time()
for path in sys.argv[1:]:
    with open(path, "rb") as stream:
        for line in stream:
            value = json.loads(line)
            for resource in value["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    spans += len(scope["spans"])
print(json.dumps({"cpu": time.process_time() - started, "spans": spans}))
"""
"""The floor's process: stdlib ``json.loads`` over every line of the files named, its CPU
seconds (the parse alone: the interpreter's start-up is not in it) and the spans counted."""


def json_floor(paths: list[Path]) -> tuple[float, int]:
    """CPU seconds of stdlib ``json.loads`` over every line of ``paths``, and the spans: measured
    in a fresh interpreter, as the run is (not in this process, whose heap holds what it built)."""
    done = subprocess.run(
        [sys.executable, "-c", _FLOOR, *map(str, paths)], check=True, capture_output=True
    )
    result = json.loads(done.stdout.decode().splitlines()[-1])
    return float(result["cpu"]), int(result["spans"])


@dataclass
class CliRun:
    """One ``memtrace attribute`` process: CPU (user + sys), peak RSS, wall seconds."""

    cpu: float
    rss: int
    seconds: float
    verdicts: int
    summary: str


def child_env(folder: Path) -> dict[str, str]:
    """The children's environment: bytecode cached (in ``folder``), as an installed package's
    is, even where ``PYTHONDONTWRITEBYTECODE`` is set (else every run compiles the package
    again, a second of CPU no user pays); compiled once here, before any run is timed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    subprocess.run(
        [sys.executable, "-c", "import memtrace_otel.cli, memtrace_otel.job._executors"],
        env=env,
        check=True,
    )
    return env


_LAUNCHER = r"""
import json, os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=[
    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
])
_, status, usage = os.wait4(pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime +
                  usage.ru_stime, "maxrss_kib": usage.ru_maxrss}))
"""
"""Starts the run and reports its rusage. Linux carries a process's peak RSS across ``fork`` and
``exec`` into the child's ``ru_maxrss``: spawned straight from this process (hundreds of MB after
building the copies), every run's peak read at least this process's. Started from this small
launcher instead, a run's peak is its own (the launcher's few MB aside)."""


def run_cli(
    paths: list[Path], cases: Path, out: Path, *extra: str, env: dict[str, str] | None = None
) -> CliRun:
    """``memtrace attribute PATHS --cases CASES --out OUT`` as a fresh process, started through
    :data:`_LAUNCHER` (its CPU and peak RSS are the run's alone)."""
    out.unlink(missing_ok=True)  # a verdicts file left over would resume its cases
    command = [
        sys.executable, "-m", "memtrace_otel.cli", "attribute", *map(str, paths),
        "--cases", str(cases), "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        launcher = subprocess.run(
            [sys.executable, "-S", "-c", _LAUNCHER, *command],
            stdout=subprocess.PIPE,
            stderr=errors,
            env=env,
            check=False,
        )
        seconds = time.perf_counter() - started
        errors.seek(0)
        text = errors.read().decode("utf-8", "replace")
    lines = launcher.stdout.decode("utf-8", "replace").splitlines()
    usage = json.loads(lines[-1]) if launcher.returncode == 0 and lines else None
    if usage is None or usage["code"] != 0:
        code = launcher.returncode if usage is None else usage["code"]
        raise SystemExit(f"memtrace attribute failed ({code}):\n{text}")
    verdicts = sum(1 for line in out.read_bytes().splitlines() if line.strip())
    return CliRun(
        cpu=usage["cpu"],
        rss=usage["maxrss_kib"] * 1024,
        seconds=seconds,
        verdicts=verdicts,
        summary=text.strip().splitlines()[0] if text.strip() else "",
    )


def scale_main(args: argparse.Namespace) -> None:
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(args.workdir or temp)
        folder.mkdir(parents=True, exist_ok=True)
        pairs = build_copies(folder, max(sizes))
        if args.reference:
            pairs = reference_copies(folder, pairs)
        extra = args.cli_args.split() if args.cli_args else []
        env = child_env(folder)
        print(
            f"memtrace attribute {'REFERENCE ' if args.reference else ''}COPIES --cases CASES "
            f"--out V {' '.join(extra)}".rstrip()
            + f" (fresh process per run; {os.cpu_count()} cores)"
        )
        header = (
            f"{'size':>4} {'spans':>8} {'CPU s':>7} {'floor s':>7} {'ratio':>6} "
            f"{'peak RSS':>9} {'spans/s':>8} {'wall s':>7} {'verdicts':>8}  load avg"
        )
        print(header)
        rows: dict[int, tuple[CliRun, float]] = {}
        for size in sizes:
            traces = [t for t, _ in pairs[:size]]
            cases = folder / f"cases-x{size}.jsonl"
            with open(cases, "wb") as joined:
                for _, c_path in pairs[:size]:
                    joined.write(c_path.read_bytes())
            # The floor just before the run and three times just after it, their median: one
            # reading can be far off (the first one of a while has run up to 40 % slow), and this
            # machine's speed drifts from minute to minute.
            before, spans = json_floor(traces)
            load = os.getloadavg()
            run = run_cli(traces, cases, folder / f"verdicts-x{size}.jsonl", *extra, env=env)
            after = [json_floor(traces)[0] for _ in range(3)]
            floor = statistics.median([before, *after])
            least = min(before, *after)
            rows[size] = (run, floor)
            print(
                f"{size:>3}x {spans:>8} {run.cpu:>7.2f} {floor:>7.2f} {run.cpu / floor:>5.2f}x "
                f"{run.rss / 1e6:>6.0f} MB {spans / run.cpu:>8.0f} {run.seconds:>7.1f} "
                f"{run.verdicts:>8}  {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  "
                f"(floor {before:.2f} before, {', '.join(f'{a:.2f}' for a in after)} after; "
                f"{run.cpu / least:.2f}x on the least)",
                flush=True,
            )
        print("goals:")
        for size, (run, floor) in rows.items():
            met = run.cpu / floor <= _GOAL_FLOOR
            print(f"  {size}x CPU / json.loads floor {run.cpu / floor:.2f}x <= 5: {_met(met)}")
        for size in (8, 16):
            if size in rows:
                rss = rows[size][0].rss
                print(f"  {size}x peak RSS {rss / 1e6:.0f} MB <= 400 MB: {_met(rss <= _GOAL_RSS)}")
        if 4 in rows and 16 in rows:
            growth = rows[16][0].rss / rows[4][0].rss
            print(f"  16x peak RSS / 4x {growth:.2f} <= 1.25: {_met(growth <= 1.25)}")
        if 1 in rows and 16 in rows:
            linear = rows[16][0].cpu / rows[1][0].cpu
            print(f"  16x / 1x CPU {linear:.1f} <= 17.6: {_met(linear <= _GOAL_LINEAR)}")


def _met(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4,8,16", help="copies of the 40-user set per run")
    parser.add_argument("--cli-args", default="", help="more memtrace attribute options")
    parser.add_argument(
        "--reference", action="store_true", help="copies whose values are content references"
    )
    parser.add_argument("--dask", action="store_true", help="part 2: single process vs Dask")
    parser.add_argument("--copies", type=int, default=32, help="part 2's workload copies")
    parser.add_argument("--workdir", help="keep the workload here (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=3, help="part 2: rounds of single vs dask")
    args = parser.parse_args()
    if args.dask:
        dask_main(args)
    else:
        scale_main(args)


if __name__ == "__main__":
    main()

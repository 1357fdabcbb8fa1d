"""The ``replay`` method: counterfactual replay of a re-runnable pipeline (the reference systems).

It is how the benchmark's labels are made: re-run the case's conversation, correct one op's
output at a time in execution order (the evidence extracted, the old content kept, no delete, the
evidence retrieved, the gold answer), re-run what follows, and blame the earliest op whose
correction makes the answer right. It needs the run to be reproducible, so it takes the benchmark
folder written by ``memtrace bench generate`` (its ``manifest.json`` names workload, seed, faults
and options); the op it finds is then located in the traces by name, inputs and outputs.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import networkx as nx

from memtrace_bench.systems import generate_workload, replay_case
from memtrace_otel.attribution._base import blame, no_verdict
from memtrace_otel.attribution._model import Case, Verdict

_SYNTHETIC = re.compile(r"^synthetic-(\d+)x(\d+)-seed(-?\d+)$")


class ReplayMethod:
    """Counterfactual replay against a generated benchmark.

    Args:
        bench_dir: a ``memtrace bench generate`` output folder (its ``manifest.json``).

    Raises:
        ValueError: no folder given, no manifest, or a workload it cannot rebuild (only the
            synthetic workloads are rebuilt from their name).
    """

    name = "replay"

    def __init__(self, *, bench_dir: str | os.PathLike[str] | None = None) -> None:
        if bench_dir is None:
            raise ValueError(
                "the replay method re-runs a reference system: it needs the benchmark folder "
                "(memtrace bench evaluate DIR --method replay)"
            )
        path = Path(bench_dir) / "manifest.json"
        try:
            manifest: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read the benchmark manifest ({exc})") from None
        match = _SYNTHETIC.match(str(manifest.get("workload", "")))
        if match is None:
            raise ValueError(
                f"{path}: replay rebuilds synthetic workloads only, not {manifest.get('workload')!r}"
            )
        users, sessions, seed = (int(g) for g in match.groups())
        self._workload = generate_workload(users, seed, sessions=sessions)
        self._seed = int(manifest.get("seed", 0))
        self._faults = str(manifest.get("faults") or "none")
        self._options: dict[str, Any] = dict(manifest.get("options") or {})

    def attribute(self, G: nx.MultiDiGraph, case: Case) -> Verdict:
        system = case.case_id.split(":", 1)[0]
        label = replay_case(
            system,
            self._workload,
            case.case_id,
            faults=self._faults,
            seed=self._seed,
            options=self._options.get(system),
        )
        if label.error_type is None:
            return no_verdict(
                G,
                case,
                method=self.name,
                reason=label.reason or "no single correction rescues the answer",
            )
        # Refs are deterministic, so the replayed op's outputs (or, for an op that wrote
        # nothing, its inputs; the traced op may also list its prompt) find its span.
        outputs, inputs = set(label.op_outputs), set(label.op_inputs)
        matches = [
            node
            for node, data in G.nodes(data=True)
            if data.get("type") == "op"
            and data.get("name") == label.op_name
            and (
                set(data.get("outputs", ())) == outputs
                if outputs
                else inputs <= set(data.get("inputs", ())) and not data.get("outputs")
            )
        ]
        if not matches:
            return no_verdict(
                G,
                case,
                method=self.name,
                reason=f"replay blamed {label.op_name} but its span is not in the traces",
            )
        return blame(
            G, case, sorted(matches)[0], method=self.name, confidence=0.95, reason=label.reason
        )

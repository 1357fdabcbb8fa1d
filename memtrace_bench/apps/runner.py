"""Run one app of the suite in one capture mode, end to end, the way a user would.

1. The scripted model (:class:`~memtrace_bench.apps.model.FaultModel`) serves real HTTP on
   127.0.0.1.
2. The app runs as a program under ``opentelemetry-instrument`` (the real distro, our
   ``memtrace_*`` instrumentors from their entry points, the ``memtrace_file`` exporter),
   with ``OTEL_SERVICE_NAME`` set and the metrics and logs exporters ``none``.
3. Labels come from where faults were planted, *checked* against what the run did: the store's
   records at the end, each question's search hits and its answer
   (:func:`check_labels`); a planted fault that did not take effect is dropped and counted.
4. Wrong answers are flagged with ``memtrace feedback`` (every other one with ``--expected``),
   right ones with ``--right``; then ``memtrace attribute`` runs with no cases file.
5. :func:`score` compares its verdicts with the labels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtrace_bench.apps.langmodel import LangFaultModel
from memtrace_bench.apps.model import FaultModel
from memtrace_bench.apps.openai_server import ScriptedOpenAI
from memtrace_bench.apps.scenario import DECLINE, World, make_world
from memtrace_otel.semconv.env import (
    ENV_CAPTURE_MESSAGE_CONTENT,
    ENV_MEMTRACE_CAPTURE_CONTENT,
    ENV_MEMTRACE_CONTENT_URL,
    ENV_MEMTRACE_TRACES_FILE,
)

__all__ = [
    "APPS",
    "MODES",
    "AppRun",
    "AppSpec",
    "Case",
    "Score",
    "check_labels",
    "langmem_app",
    "langmem_python",
    "run_app",
    "score",
]

PROGRAMS = Path(__file__).resolve().parent / "programs"
EMBEDDING_DIMS_KEY = "embedding_dims"
TIMEOUT = 900

MODES: dict[str, dict[str, str]] = {
    "off": {},
    "PRODUCTION": {ENV_MEMTRACE_CAPTURE_CONTENT: "PRODUCTION"},
    "SPAN_AND_EVENT": {ENV_CAPTURE_MESSAGE_CONTENT: "SPAN_AND_EVENT"},
    "REFERENCE": {ENV_MEMTRACE_CAPTURE_CONTENT: "REFERENCE"},
}
"""The capture modes, as the environment an app runs with (``REFERENCE`` also gets a content
store in the run's folder: :func:`_env`)."""


def available_modes() -> list[str]:
    """Every capture mode the suite runs, in the order it prints them."""
    return list(MODES)


@dataclass(frozen=True)
class AppSpec:
    """One app: its program, the interpreter it runs in, and the op each label names."""

    name: str
    program: str
    ops: Mapping[str, str]
    python: str = sys.executable
    classic: bool = False  # mem0 1.x: its world plants merges through mem0's own decisions
    model: Callable[[World], FaultModel] = FaultModel  # the scripted model that reads its prompts
    env: Mapping[str, str] = field(default_factory=dict)


MEM0_OPS = {
    "ExtractionError": "mem0.additive_extraction",
    "UpdateError": "mem0.update",
    "DeletionError": "mem0.delete",
    "RetrievalError": "mem0.search",
    "ResponseError": "openai.chat.completions",
}
MEM0_CLASSIC_OPS = {
    "ExtractionError": "mem0.fact_extraction",
    "UpdateError": "mem0.update",
    "DeletionError": "mem0.delete",
    "RetrievalError": "mem0.search",
    "ResponseError": "openai.chat.completions",
}

LANGGRAPH_OPS = {
    "ExtractionError": "openai.chat.extraction",
    "UpdateError": "openai.chat.update_decision",
    "DeletionError": "langgraph.store.delete",
    "RetrievalError": "langgraph.store.search",
    "ResponseError": "openai.chat.completions",
}
"""The LangGraph app: its note taker's and its tidy-up merge's chat calls, the store's ops."""
LANGMEM_OPS = {
    "ExtractionError": "openai.chat.tool_calls",
    "UpdateError": "langgraph.store.put",
    "DeletionError": "langgraph.store.delete",
    "RetrievalError": "langgraph.store.search",
    "ResponseError": "openai.chat.completions",
}
"""The LangMem app: the manager's tool-call decisions, the store's writes and search, the
agent's answer."""

RAG_OPS = {
    "ExtractionError": "notes.extract",
    "UpdateError": "notes.merge",
    "DeletionError": "notes.expire",
    "RetrievalError": "notes.search",
    "ResponseError": "notes.answer",
}

APPS: dict[str, AppSpec] = {
    "mem0": AppSpec("mem0", "mem0_app.py", MEM0_OPS),
    "langgraph": AppSpec("langgraph", "langgraph_app.py", LANGGRAPH_OPS, model=LangFaultModel),
    # The manual-API app traces its own LLM calls: the OpenAI instrumentor is off for it.
    "rag": AppSpec(
        "rag",
        "rag_app.py",
        RAG_OPS,
        env={"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "memtrace_openai"},
    ),
}
"""The apps of this environment; :func:`classic_app` adds mem0 1.x when its environment exists."""


def langmem_python(required: bool = False) -> str | None:
    """The interpreter of the LangMem environment, created once by ``scripts/langmem_env.sh``
    (``make langmem``); ``None`` when it cannot be made (``RuntimeError`` if ``required``)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "langmem_env.sh"
    done = subprocess.run(
        ["bash", str(script), sys.executable], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        if required:
            raise RuntimeError(f"could not create the LangMem environment:\n{done.stderr[-2000:]}")
        return None
    return done.stdout.strip().splitlines()[-1]


def langmem_app(python: str) -> AppSpec:
    """The LangMem app in its environment (``make langmem``)."""
    # LangMem decides updates and deletions itself, as mem0 1.x does: the same world.
    return AppSpec(
        "langmem", "langmem_app.py", LANGMEM_OPS, python=python, classic=True, model=LangFaultModel
    )


def classic_app(python: str) -> AppSpec:
    """The same mem0 app in the mem0 1.x environment (``make mem0-legacy``)."""
    return AppSpec("mem0-classic", "mem0_app.py", MEM0_CLASSIC_OPS, python=python, classic=True)


@dataclass
class Case:
    """One question: its label (checked), the answer, and how it was flagged."""

    slot: str
    role: str
    label: str | None  # None: a correct answer
    op: str | None
    answer: str
    case_id: str | None
    traceparent: str | None
    expected: str | None = None  # sent with the feedback (about half of the failures)


@dataclass
class AppRun:
    """What one run left behind."""

    app: str
    mode: str
    folder: Path
    world: World
    log: dict[str, Any]
    cases: list[Case]
    dropped: Counter[str]
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    attribute_status: int = 0


def mem0_config(base_url: str, folder: Path, dims: int) -> dict[str, Any]:
    """mem0 offline: the scripted server and embedded Qdrant."""
    openai = {"api_key": "sk-test", "openai_base_url": base_url}
    return {
        "llm": {"provider": "openai", "config": {"model": "gpt-4.1-mini", **openai}},
        "embedder": {
            "provider": "openai",
            "config": {"model": "text-embedding-3-small", EMBEDDING_DIMS_KEY: dims, **openai},
        },
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": "memories",
                "path": str(folder / "qdrant"),
                "embedding_model_dims": dims,
                "on_disk": False,
            },
        },
        "history_db_path": str(folder / "history.db"),
    }


def _env(spec: AppSpec, mode: str, folder: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "MEMTRACE_", "PYTEST_", "APP_"))
    }
    python_dir = str(Path(spec.python).parent)
    env.update(
        {
            "PATH": f"{python_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
            + env.get("PATH", ""),
            "OTEL_SERVICE_NAME": f"apps-{spec.name}",
            "OTEL_TRACES_EXPORTER": "memtrace_file",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            ENV_MEMTRACE_TRACES_FILE: str(folder / "traces.jsonl"),
            "MEM0_TELEMETRY": "false",
        }
    )
    env.update(spec.env)
    env.update(MODES.get(mode, {}))
    if mode == "REFERENCE":
        env[ENV_MEMTRACE_CONTENT_URL] = (folder / "content").as_uri()
    return env


def run_app(
    spec: AppSpec, mode: str, folder: Path, world: World | None = None, seed: int = 0
) -> AppRun:
    """Run ``spec`` once in ``mode`` in ``folder``: the app, the label check, the feedback, the
    batch job. Raises ``RuntimeError`` (with the program's stderr) when the app fails."""
    world = world or make_world(seed, classic=spec.classic)
    folder = folder.absolute()  # the app runs in it (cwd): every path it is given must hold there
    if folder.exists():
        shutil.rmtree(folder)  # a run starts empty: its store, traces and verdicts are its own
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps(world.plan()), encoding="utf-8")
    model = spec.model(world)
    env = _env(spec, mode, folder)
    with ScriptedOpenAI(model, embedder=model.embed) as server:
        env.update(
            {
                "APP_PLAN": str(folder / "plan.json"),
                "APP_LOG": str(folder / "log.json"),
                "APP_OPENAI_BASE_URL": server.base_url,
                "APP_MEM0_CONFIG": json.dumps(mem0_config(server.base_url, folder, world.dims)),
                "APP_EMBEDDING_DIMS": str(world.dims),
            }
        )
        instrument = Path(spec.python).parent / "opentelemetry-instrument"
        if not instrument.exists():
            instrument = Path(sys.executable).parent / "opentelemetry-instrument"
        done = subprocess.run(
            [str(instrument), spec.python, str(PROGRAMS / spec.program)],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        with open(folder / "requests.jsonl", "w", encoding="utf-8") as handle:
            for kind, body in server.requests:
                handle.write(json.dumps({"kind": kind, "body": body}) + "\n")
    (folder / "app.stderr").write_text(done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise RuntimeError(f"{spec.name} ({mode}) failed:\n{done.stderr[-4000:]}")
    log = json.loads((folder / "log.json").read_text(encoding="utf-8"))
    cases, dropped = check_labels(world, log, spec.ops, model.planted)
    run = AppRun(spec.name, mode, folder, world, log, cases, dropped)
    _feedback(run, env)
    _attribute(run, env)
    return run


def check_labels(
    world: World,
    log: Mapping[str, Any],
    ops: Mapping[str, str],
    planted: Mapping[str, int],
) -> tuple[list[Case], Counter[str]]:
    """Each question's label, checked against the run: the store's records at the end, the
    question's hits, the answer. A planted fault that did not take effect is dropped and counted
    (by ``<role>: <reason>``); so is a correct question answered wrongly."""
    slots = world.by_key()
    cases: list[Case] = []
    dropped: Counter[str] = Counter()
    for user, entry in log["users"].items():
        store = {r["memory"] for r in entry["store"]}
        for item in entry["answers"]:
            slot = slots[item["slot"]]
            answer = str(item.get("answer") or "")
            hits = {h["memory"] for h in item.get("hits", [])}
            gold_fact = slot.fact(slot.gold)
            right = slot.gold.lower() in answer.lower()
            role = slot.role
            reason = None
            if slot.label is None:
                if not right:
                    reason = "a correct question answered wrongly"
            elif right:
                reason = "answered right"
            elif (
                role != "retrieval_miss"
                and role not in ("ignore", "decline")
                and not planted.get(slot.key)
            ):
                reason = "the model never acted it out"
            elif role in ("omit", "distort"):
                if gold_fact in store:
                    reason = "the fact was stored"
                elif role == "distort" and slot.fact(slot.wrong_value or "") not in store:
                    reason = "the distorted fact was not stored"
            elif role == "wrong_merge" and world.classic:
                if gold_fact in store or slot.filler_fact not in store:
                    reason = "the record was not overwritten"
            elif role == "wrong_merge":
                if gold_fact in store or slot.fact(slot.value) not in store:
                    reason = "the store does not hold the stale value alone"
            elif role == "wrong_delete":
                if gold_fact in store:
                    reason = "the record survived"
            elif role == "retrieval_miss":
                if gold_fact not in store:
                    reason = "the fact was not stored"
                elif gold_fact in hits:
                    reason = "the fact was retrieved"
            elif role in ("ignore", "decline"):
                if gold_fact not in hits:
                    reason = "the fact was not in the answer's context"
                elif role == "decline" and answer != DECLINE:
                    reason = "the answer did not decline"
            if reason is not None:
                dropped[f"{role}: {reason}"] += 1
                continue
            cases.append(
                Case(
                    slot=slot.key,
                    role=role,
                    label=slot.label,
                    op=ops.get(slot.label) if slot.label else None,
                    answer=answer,
                    case_id=item.get("case_id"),
                    traceparent=item.get("traceparent"),
                )
            )
        del user
    for i, case in enumerate(c for c in cases if c.label is not None):
        if i % 2 == 0:
            case.expected = slots[case.slot].gold
    return cases, dropped


def _memtrace(env: Mapping[str, str], *args: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memtrace_otel.cli", *args],
        cwd=folder,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _feedback(run: AppRun, env: Mapping[str, str]) -> None:
    lines = []
    for case in run.cases:
        if case.traceparent is None:
            continue
        item: dict[str, Any] = {"traceparent": case.traceparent, "correct": case.label is None}
        if case.expected is not None:
            item["expected"] = case.expected
        lines.append(json.dumps(item))
    path = run.folder / "feedback.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    done = _memtrace(
        env,
        "feedback",
        "--from",
        str(path),
        "--traces-file",
        str(run.folder / "traces.jsonl"),
        folder=run.folder,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memtrace feedback failed:\n{done.stderr[-4000:]}")


def _attribute(run: AppRun, env: Mapping[str, str]) -> None:
    out = run.folder / "verdicts.jsonl"
    out.unlink(missing_ok=True)
    done = _memtrace(
        env,
        "attribute",
        str(run.folder / "traces.jsonl"),
        "--out",
        str(out),
        "--quiet",
        folder=run.folder,
    )
    (run.folder / "attribute.stderr").write_text(done.stderr, encoding="utf-8")
    run.attribute_status = done.returncode
    if done.returncode not in (0, 1, 3):
        raise RuntimeError(f"memtrace attribute failed:\n{done.stderr[-4000:]}")
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            data = json.loads(line)
            verdict = data.get("verdict", data)
            run.verdicts[str(verdict.get("case_id"))] = verdict


@dataclass
class Score:
    """One run's figures (an abstention counts as wrong)."""

    failed: int
    type_right: int
    op_right: int
    wrong_confident: int  # wrong verdicts (not abstentions) above confidence 0.3
    abstained: int
    correct: int
    correct_blamed: int
    by_label: dict[str, tuple[int, int, int]]  # label -> (cases, type right, op right)
    by_expected: dict[str, tuple[int, int, int]]  # "with"/"without" -> the same
    misses: list[dict[str, Any]]

    @property
    def type_accuracy(self) -> float:
        return self.type_right / self.failed if self.failed else 0.0

    @property
    def op_accuracy(self) -> float:
        return self.op_right / self.failed if self.failed else 0.0


def score(run: AppRun) -> Score:
    """Compare the run's verdicts with its checked labels."""
    failed = type_right = op_right = wrong_confident = abstained = correct = blamed = 0
    by_label: dict[str, list[int]] = {}
    by_expected: dict[str, list[int]] = {}
    misses: list[dict[str, Any]] = []
    for case in run.cases:
        verdict = run.verdicts.get(str(case.case_id)) or {}
        error_type = verdict.get("error_type")
        if case.label is None:
            correct += 1
            if error_type:
                blamed += 1
                misses.append(_miss(case, verdict))
            continue
        failed += 1
        t_ok = error_type == case.label
        o_ok = t_ok and verdict.get("op_name") == case.op
        type_right += t_ok
        op_right += o_ok
        if not error_type:
            abstained += 1
        elif not t_ok and float(verdict.get("confidence") or 0.0) > 0.3:
            wrong_confident += 1
        for table, key in (
            (by_label, case.label),
            (by_expected, "with" if case.expected else "without"),
        ):
            row = table.setdefault(key, [0, 0, 0])
            row[0] += 1
            row[1] += t_ok
            row[2] += o_ok
        if not o_ok:
            misses.append(_miss(case, verdict))
    return Score(
        failed,
        type_right,
        op_right,
        wrong_confident,
        abstained,
        correct,
        blamed,
        {k: (v[0], v[1], v[2]) for k, v in sorted(by_label.items())},
        {k: (v[0], v[1], v[2]) for k, v in sorted(by_expected.items())},
        misses,
    )


def _miss(case: Case, verdict: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "case": case.case_id,
        "slot": case.slot,
        "role": case.role,
        "label": case.label,
        "op": case.op,
        "expected": case.expected is not None,
        "verdict": verdict.get("error_type"),
        "verdict_op": verdict.get("op_name"),
        "confidence": verdict.get("confidence"),
        "reason": verdict.get("reason"),
    }


def summary_rows(runs: Sequence[AppRun]) -> list[str]:
    """The table ``memtrace bench apps`` prints: per app and mode, then per label."""
    rows = [
        "| app | mode | failed | type | op | wrong >0.3 | abstained | correct (blamed) "
        "| with expected (type/op) | without | dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        s = score(run)
        w = s.by_expected.get("with", (0, 0, 0))
        wo = s.by_expected.get("without", (0, 0, 0))
        rows.append(
            f"| {run.app} | {run.mode} | {s.failed} | {s.type_accuracy:.2f} | {s.op_accuracy:.2f} "
            f"| {s.wrong_confident} | {s.abstained} | {s.correct} ({s.correct_blamed}) "
            f"| {w[1]}/{w[0]}, {w[2]}/{w[0]} | {wo[1]}/{wo[0]}, {wo[2]}/{wo[0]} "
            f"| {sum(run.dropped.values())} |"
        )
    rows += [
        "",
        "| app | mode | label | cases | type right | op right |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        for label, (n, t, o) in score(run).by_label.items():
            rows.append(f"| {run.app} | {run.mode} | {label} | {n} | {t} | {o} |")
    return rows

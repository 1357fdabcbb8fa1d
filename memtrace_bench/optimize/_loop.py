"""The optimisation loop: trace on train, attribute, turn verdicts into new variable versions.

One round: run the system on the train split with tracing; attribute every failed case with the
evidence method; count verdicts per ``(op, error type)``; for the blamed ops, propose new
versions of the variables they own (a prompt rewrite by a model, or a parameter move steered by
the verdict distribution); evaluate each proposal on the train split and keep it only when the
train score does not drop. The held-out split is scored before and after every round for the
report and never consulted when choosing.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_bench.optimize._params import (
    PARAM_SPACES,
    Param,
    blame_counts,
    candidate_values,
    ranked_params,
)
from memtrace_bench.optimize._rewrite import Failure, PromptRewriter, missing_placeholders
from memtrace_bench.systems import (
    SYSTEMS,
    Conversation,
    Engine,
    OfflineEngine,
    Workload,
    run_conversation,
)
from memtrace_bench.systems._base import turn_ref
from memtrace_otel.attribution import ChatModel, Verdict, get_method
from memtrace_otel.errors import ModelError
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import (
    CaptureConfig,
    MemTracer,
    Variable,
    WriterRegistry,
    suppress_tracing,
)
from memtrace_otel.job import load_store_graphs, run_batch
from memtrace_otel.semconv import Category
from memtrace_otel.semconv import attributes as A

__all__ = [
    "OptimisableSystem",
    "OptimizeResult",
    "ReferenceSystem",
    "optimize",
    "split_workload",
]

STATE_FILE = "state.json"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"


# --- the system adapter ----------------------------------------------------------------------
class OptimisableSystem(Protocol):
    """What the optimiser needs from a memory system (the reference ones, or yours).

    ``params`` declares the optimisable parameters and the ops that own them; ``defaults`` their
    starting values; ``prompts`` the prompt templates by step (the key of
    ``prompt:<name>.<key>``). ``run`` answers every question of ``conversations`` with those
    values, recording spans into ``provider`` when given, and returns one cases.jsonl row per
    question (``case_id``, ``verdict`` ``correct``/``incorrect``, ``store_id``, ...).
    """

    name: str
    params: Sequence[Param]

    def defaults(self) -> dict[str, Any]:
        """Starting values of ``params``."""
        ...

    def prompts(self) -> dict[str, str]:
        """Starting prompt templates by step."""
        ...

    def run(
        self,
        conversations: Sequence[Conversation],
        *,
        options: Mapping[str, Any],
        prompt_vars: Mapping[str, Variable],
        provider: TracerProvider | None,
    ) -> list[dict[str, Any]]:
        """Answer every question; one cases.jsonl row each."""
        ...


class ReferenceSystem:
    """One of the four reference systems as an :class:`OptimisableSystem`.

    Args:
        name: ``long_context``, ``rag``, ``mem0`` or ``evermemos``.
        engine: the model of its LLM-backed steps (default: offline rules).
        options: config overrides that are not optimised (kept fixed).
    """

    def __init__(
        self, name: str, *, engine: Engine | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        if name not in SYSTEMS:
            raise ValueError(f"unknown system {name!r}: expected one of {', '.join(SYSTEMS)}")
        self.name = name
        self.engine = engine or OfflineEngine()
        self.fixed = dict(options or {})
        self.params: Sequence[Param] = PARAM_SPACES.get(name, ())
        self._config = SYSTEMS[name].config_class(**self.fixed)

    def defaults(self) -> dict[str, Any]:
        """The config's values of the declared parameters."""
        return {p.name: getattr(self._config, p.name) for p in self.params}

    def prompts(self) -> dict[str, str]:
        """The system's prompt templates."""
        return dict(SYSTEMS[self.name].default_prompts)

    def run(
        self,
        conversations: Sequence[Conversation],
        *,
        options: Mapping[str, Any],
        prompt_vars: Mapping[str, Variable],
        provider: TracerProvider | None,
    ) -> list[dict[str, Any]]:
        """Run every conversation (traced into ``provider`` when given)."""
        rows = []
        capture = CaptureConfig(mode="SPAN_AND_EVENT", max_value_length=16384)
        registry = WriterRegistry()
        for conv in conversations:
            store = f"{self.name}:{conv.conv_id}"
            tracer = None
            if provider is not None:
                tracer = MemTracer(
                    tracer_provider=provider,
                    system=self.name,
                    store_id=store,
                    capture=capture,
                    registry=registry,
                )
            run = run_conversation(
                self.name,
                conv,
                engine=self.engine,
                tracer=tracer,
                prompt_vars=prompt_vars,
                options={**self.fixed, **options},
            )
            for case_id, result in run.results.items():
                question = run.questions[case_id]
                rows.append(
                    {
                        "case_id": case_id,
                        "question": question.question,
                        "gold_answers": list(question.gold_answers),
                        "evidence_refs": [turn_ref(store, e.dia_id) for e in question.evidence],
                        "verdict": "correct" if result.correct else "incorrect",
                        "prediction": result.prediction,
                        "system": self.name,
                        "store_id": store,
                        "conversation": conv.conv_id,
                        "category": question.category,
                    }
                )
        return rows


# --- splits ----------------------------------------------------------------------------------
def split_workload(
    workload: Workload, *, seed: int = 0, heldout: float = 0.5
) -> tuple[list[Conversation], list[Conversation]]:
    """Split by user (conversation), never by question, deterministically by ``seed``.

    Raises:
        ValueError: a fraction outside (0, 1) or fewer than two conversations.

    >>> from memtrace_bench.systems import generate_workload
    >>> train, held = split_workload(generate_workload(4, seed=1), seed=0)
    >>> len(train), len(held), {c.conv_id for c in train} & {c.conv_id for c in held}
    (2, 2, set())
    """
    if not 0 < heldout < 1:
        raise ValueError(f"heldout must be in (0, 1), got {heldout}")
    convs = list(workload.conversations)
    if len(convs) < 2:
        raise ValueError("need at least two conversations (users) to split")

    def key(conv: Conversation) -> str:
        return hashlib.sha256(f"{seed}:{conv.conv_id}".encode()).hexdigest()

    ordered = sorted(convs, key=key)
    n_held = min(max(1, round(len(convs) * heldout)), len(convs) - 1)
    held_ids = {c.conv_id for c in ordered[:n_held]}
    return (
        [c for c in convs if c.conv_id not in held_ids],
        [c for c in convs if c.conv_id in held_ids],
    )


# --- variables and their versions ------------------------------------------------------------
@dataclass
class _State:
    """The current value and version of every optimisable variable, and the finished rounds."""

    params: dict[str, Any]
    prompts: dict[str, str]
    versions: dict[str, int]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    heldout_before: float | None = None
    train_before: float | None = None
    fingerprint: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "prompts": self.prompts,
            "versions": self.versions,
            "rounds": self.rounds,
            "heldout_before": self.heldout_before,
            "train_before": self.train_before,
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _State:
        return cls(
            params=dict(data["params"]),
            prompts=dict(data["prompts"]),
            versions={k: int(v) for k, v in data["versions"].items()},
            rounds=list(data.get("rounds", [])),
            heldout_before=data.get("heldout_before"),
            train_before=data.get("train_before"),
            fingerprint=str(data.get("fingerprint", "")),
        )


def _prompt_id(system: str, key: str) -> str:
    return f"prompt:{system}.{key}"


def _refs(system: OptimisableSystem, state: _State) -> list[str]:
    refs = [
        f"{_prompt_id(system.name, k)}@{state.versions.get(_prompt_id(system.name, k), 1)}"
        for k in sorted(state.prompts)
    ]
    refs += [
        f"{p.variable_id(system.name)}@{state.versions.get(p.variable_id(system.name), 1)}"
        for p in system.params
    ]
    return refs


def _variables(
    system: OptimisableSystem, state: _State
) -> tuple[dict[str, Variable], list[Variable]]:
    prompts = {
        key: Variable(
            _prompt_id(system.name, key),
            state.versions.get(_prompt_id(system.name, key), 1),
            text,
            Category.PROMPT,
        )
        for key, text in state.prompts.items()
    }
    params = [
        Variable(
            p.variable_id(system.name),
            state.versions.get(p.variable_id(system.name), 1),
            json.dumps(state.params[p.name]),
            Category.OTHER,
        )
        for p in system.params
    ]
    return prompts, params


@dataclass
class _Evaluation:
    score: float
    rows: list[dict[str, Any]]
    verdicts: list[Verdict] = field(default_factory=list)


def _evaluate(
    system: OptimisableSystem,
    conversations: Sequence[Conversation],
    state: _State,
    *,
    trace_dir: Path | None,
    attribute: bool = False,
) -> _Evaluation:
    """Score ``state`` on ``conversations``; traced (and attributed) when ``trace_dir`` is set.

    The run's resource names every prompt and parameter version in effect, so each answer span
    in the trace says which versions produced it; the versions are also recorded as outputs of
    ``<system>.load_prompts`` / ``<system>.load_params`` ops that LLM-backed ops link to.
    """
    prompt_vars, param_vars = _variables(system, state)
    if trace_dir is None:
        with suppress_tracing():
            rows = system.run(
                conversations, options=state.params, prompt_vars=prompt_vars, provider=None
            )
        return _Evaluation(_accuracy(rows), rows)
    trace_dir.mkdir(parents=True, exist_ok=True)
    traces, cases = trace_dir / "traces.jsonl", trace_dir / "cases.jsonl"
    traces.unlink(missing_ok=True)
    resource = Resource.create(
        {A.SERVICE_NAME: "memtrace-optimize", A.MEMTRACE_OPTIMIZE_VERSIONS: _refs(system, state)}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(traces)))
    try:
        setup = MemTracer(tracer_provider=provider, system=system.name)
        if prompt_vars:
            with setup.ingest(f"{system.name}.load_prompts", store_id=system.name) as op:
                prompt_vars = {key: op.output(var) for key, var in prompt_vars.items()}
        if param_vars:
            with setup.ingest(f"{system.name}.load_params", store_id=system.name) as op:
                for var in param_vars:
                    op.output(var)
        rows = system.run(
            conversations, options=state.params, prompt_vars=prompt_vars, provider=provider
        )
    finally:
        provider.force_flush()
        provider.shutdown()
    with cases.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    evaluation = _Evaluation(_accuracy(rows), rows)
    if attribute and any(r["verdict"] != "correct" for r in rows):
        graphs = load_store_graphs([str(traces)])
        verdicts, _ = run_batch(
            [str(traces)], get_method("evidence"), cases_file=str(cases), graphs=graphs
        )
        evaluation.verdicts = verdicts
        _attach_prompt_refs(evaluation, graphs)
    return evaluation


def _attach_prompt_refs(evaluation: _Evaluation, graphs: Mapping[str, Any]) -> None:
    """Remember, per verdict, the prompt its culprit op used (``memtrace.prompt.ref``)."""
    refs: dict[str, str] = {}
    for G in graphs.values():
        for verdict in evaluation.verdicts:
            if verdict.op_id is not None and verdict.op_id in G:
                ref = G.nodes[verdict.op_id].get("prompt_ref")
                if ref:
                    refs[verdict.case_id] = str(ref)
    for row in evaluation.rows:
        if row["case_id"] in refs:
            row["prompt_ref"] = refs[row["case_id"]]


def _accuracy(rows: Sequence[Mapping[str, Any]]) -> float:
    return sum(r["verdict"] == "correct" for r in rows) / len(rows) if rows else 0.0


def _distribution(verdicts: Sequence[Verdict]) -> dict[str, int]:
    counts = Counter(
        f"{v.error_type} @ {v.op_name}" if v.op_name else "no culprit" for v in verdicts
    )
    return dict(counts.most_common())


def _diff(ref_old: str, ref_new: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), ref_old, ref_new, lineterm="", n=2
    )
    return "\n".join(lines)


# --- the loop --------------------------------------------------------------------------------
@dataclass
class OptimizeResult:
    """What :func:`optimize` found; ``report`` is the JSON report."""

    report: dict[str, Any]
    out_dir: Path

    @property
    def heldout_before(self) -> float:
        """Held-out accuracy with the starting variables."""
        return float(self.report["heldout"]["before"])

    @property
    def heldout_after(self) -> float:
        """Held-out accuracy with the accepted variables."""
        return float(self.report["heldout"]["after"])


def optimize(
    system: OptimisableSystem,
    train: Sequence[Conversation],
    heldout: Sequence[Conversation],
    out_dir: str | os.PathLike[str],
    *,
    rounds: int = 3,
    model: ChatModel | None = None,
    batch_size: int = 8,
    max_feedback: int = 16,
    progress: IO[str] | None = None,
    on_round: Callable[[int], None] | None = None,
) -> OptimizeResult:
    """Improve ``system`` from fine-grained verdicts on ``train``; score ``heldout`` before/after.

    Args:
        system: the system and its optimisable variables.
        train: conversations whose verdicts steer the changes (and decide acceptance).
        heldout: conversations only scored, never used for choosing.
        out_dir: traces per round, ``state.json`` (resume point) and the reports.
        rounds: the most rounds to run (it stops earlier when a round accepts nothing).
        model: an OpenAI-compatible chat model: prompts of blamed LLM-backed ops are rewritten
            by it. Without one only the declared parameters are searched.
        batch_size: feedback notes per aggregation call.
        max_feedback: the most failures a prompt gets feedback on per round.
        progress: where progress lines go.
        on_round: called after each finished round with its number (tests stop runs there).

    Raises:
        ValueError: no rounds, or an empty split.
        ModelError: the model endpoint failed for good.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not train or not heldout:
        raise ValueError("both the train and the held-out split need conversations")
    overlap = {c.conv_id for c in train} & {c.conv_id for c in heldout}
    if overlap:
        raise ValueError(f"train and held-out share conversations: {', '.join(sorted(overlap))}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rewriter = PromptRewriter(model, batch_size=batch_size) if model is not None else None
    fingerprint = hashlib.sha256(
        json.dumps(
            [
                system.name,
                [c.conv_id for c in train],
                [c.conv_id for c in heldout],
                model.model if model is not None else None,
            ],
        ).encode()
    ).hexdigest()[:16]

    def say(text: str) -> None:
        if progress is not None:
            progress.write(f"optimize {system.name}: {text}\n")
            progress.flush()

    state = _load_state(out / STATE_FILE, fingerprint)
    if state is None:
        prompts = system.prompts()
        state = _State(
            params=system.defaults(),
            prompts=prompts,
            versions={
                **{_prompt_id(system.name, k): 1 for k in prompts},
                **{p.variable_id(system.name): 1 for p in system.params},
            },
            fingerprint=fingerprint,
        )
        state.heldout_before = _evaluate(
            system, heldout, state, trace_dir=out / "heldout-before"
        ).score
        _save_state(out / STATE_FILE, state)
    else:
        say(f"resuming after round {len(state.rounds)}")

    while len(state.rounds) < rounds:
        number = len(state.rounds) + 1
        ev = _evaluate(system, train, state, trace_dir=out / f"round-{number}", attribute=True)
        if state.train_before is None:
            state.train_before = ev.score
        say(f"round {number}: train {ev.score:.3f}, {len(ev.verdicts)} verdicts")
        record = _round(system, train, state, ev, rewriter, max_feedback)
        record["round"] = number
        record["heldout_after"] = _evaluate(system, heldout, state, trace_dir=None).score
        state.rounds.append(record)
        _save_state(out / STATE_FILE, state)
        if on_round is not None:
            on_round(number)
        if not record["accepted"]:
            say(f"round {number}: nothing accepted, stopping")
            break

    final_train = _evaluate(system, train, state, trace_dir=out / "train-final", attribute=True)
    final_held = _evaluate(system, heldout, state, trace_dir=out / "heldout-after")
    report = {
        "system": system.name,
        "train_conversations": [c.conv_id for c in train],
        "heldout_conversations": [c.conv_id for c in heldout],
        "model": model.model if model is not None else None,
        "rounds_run": len(state.rounds),
        "rounds_max": rounds,
        "train": {"before": state.train_before, "after": final_train.score},
        "heldout": {
            "before": state.heldout_before,
            "after": final_held.score,
            "gain_points": round(100 * (final_held.score - (state.heldout_before or 0.0)), 2),
        },
        "verdicts_before": state.rounds[0]["verdicts"] if state.rounds else {},
        "verdicts_after": _distribution(final_train.verdicts),
        "final_versions": _refs(system, state),
        "final_params": state.params,
        "rounds": state.rounds,
        "seconds": round(time.perf_counter() - started, 2),
    }
    (out / REPORT_JSON).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / REPORT_MD).write_text(report_markdown(report), encoding="utf-8")
    say(f"held-out {report['heldout']['before']:.3f} -> {report['heldout']['after']:.3f}")
    return OptimizeResult(report, out)


def _round(
    system: OptimisableSystem,
    train: Sequence[Conversation],
    state: _State,
    ev: _Evaluation,
    rewriter: PromptRewriter | None,
    max_feedback: int,
) -> dict[str, Any]:
    """One round's proposals; mutates ``state`` with what it accepts."""
    score = ev.score
    blame = blame_counts([(v.op_name, v.error_type) for v in ev.verdicts])
    failed = max(len(ev.verdicts), 1)
    record: dict[str, Any] = {
        "train_before": score,
        "verdicts": _distribution(ev.verdicts),
        "accepted": [],
        "rejected": [],
        "skipped": [],
    }
    ranked = ranked_params(system.params, blame)
    owned = {op for p, _ in ranked for op in p.owners}
    by_prompt: dict[str, list[Mapping[str, Any]]] = {}
    verdict_of = {v.case_id: v for v in ev.verdicts}
    for row in ev.rows:
        ref = row.get("prompt_ref")
        if ref and row["case_id"] in verdict_of:
            by_prompt.setdefault(str(ref).rsplit("@", 1)[0], []).append(row)
    for (op, error_type), count in blame.most_common():
        has_prompt = any(
            verdict_of[r["case_id"]].op_name == op for rows in by_prompt.values() for r in rows
        )
        if op not in owned and not (has_prompt and rewriter is not None):
            record["skipped"].append(
                {
                    "op": op,
                    "error_type": error_type,
                    "verdicts": count,
                    "reason": "no optimisable variable for this op"
                    + (" (its prompt needs a model to rewrite)" if has_prompt else ""),
                }
            )

    # Prompts of blamed LLM-backed ops (with a model), most-blamed first.
    if rewriter is not None:
        for var_id, rows in sorted(by_prompt.items(), key=lambda kv: -len(kv[1])):
            key = var_id.split(".", 1)[1]
            if key not in state.prompts:
                continue
            old = state.prompts[key]
            version = state.versions[var_id]
            failures = [
                Failure(
                    r["case_id"],
                    str(verdict_of[r["case_id"]].op_name),
                    str(verdict_of[r["case_id"]].error_type),
                    r["question"],
                    " | ".join(r["gold_answers"]),
                    r["prediction"],
                    verdict_of[r["case_id"]].reason,
                )
                for r in rows[:max_feedback]
            ]
            old_ref, new_ref = f"{var_id}@{version}", f"{var_id}@{version + 1}"
            try:
                new = rewriter.propose(old_ref, old, failures)
            except ModelError as exc:
                record["rejected"].append(
                    {"variable": new_ref, "reason": f"model failed: {exc}", "verdicts": len(rows)}
                )
                continue
            lost = missing_placeholders(old, new)
            if lost:
                record["rejected"].append(
                    {
                        "variable": new_ref,
                        "verdicts": len(rows),
                        "reason": "rewrite drops required placeholder(s) "
                        + ", ".join("{" + p + "}" for p in lost),
                        "diff": _diff(old_ref, new_ref, old, new),
                    }
                )
                continue
            trial = _State(
                dict(state.params),
                {**state.prompts, key: new},
                {**state.versions, var_id: version + 1},
            )
            new_score = _evaluate(system, train, trial, trace_dir=None).score
            entry = {
                "variable": new_ref,
                "verdicts": len(rows),
                "train_before": score,
                "train_after": new_score,
                "diff": _diff(old_ref, new_ref, old, new),
            }
            if new_score < score:
                record["rejected"].append({**entry, "reason": "train score dropped"})
                continue
            state.prompts[key] = new
            state.versions[var_id] = version + 1
            record["accepted"].append(entry)
            score = new_score

    # Declared parameters, most-blamed first; one accepted move per round.
    for param, count in ranked:
        value = state.params[param.name]
        var_id = param.variable_id(system.name)
        version = state.versions[var_id]
        best: tuple[float, Any] | None = None
        tried = []
        for candidate in candidate_values(param, value, count / failed):
            trial = _State(
                {**state.params, param.name: candidate}, dict(state.prompts), dict(state.versions)
            )
            new_score = _evaluate(system, train, trial, trace_dir=None).score
            tried.append({"value": candidate, "train": new_score})
            if best is None or new_score > best[0]:
                best = (new_score, candidate)
        old_ref, new_ref = f"{var_id}@{version}", f"{var_id}@{version + 1}"
        # A parameter move must strictly help on train: a tie would only add a version.
        if best is None or best[0] <= score:
            record["rejected"].append(
                {
                    "variable": new_ref,
                    "verdicts": count,
                    "tried": tried,
                    "reason": "no move improved the train score",
                }
            )
            continue
        new_score, candidate = best
        state.params[param.name] = candidate
        state.versions[var_id] = version + 1
        record["accepted"].append(
            {
                "variable": new_ref,
                "verdicts": count,
                "tried": tried,
                "train_before": score,
                "train_after": new_score,
                "diff": _diff(old_ref, new_ref, json.dumps(value), json.dumps(candidate)),
            }
        )
        score = new_score
        break
    record["train_after"] = score
    return record


def _load_state(path: Path, fingerprint: str) -> _State | None:
    if not path.exists():
        return None
    try:
        state = _State.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError):
        return None  # a torn state file: start over
    return state if state.fingerprint == fingerprint else None


def _save_state(path: Path, state: _State) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def report_markdown(report: Mapping[str, Any]) -> str:
    """The Markdown form of an optimisation report."""
    held, train = report["heldout"], report["train"]
    lines = [
        f"# memtrace optimize: {report['system']}",
        "",
        f"Held-out accuracy: {held['before']:.3f} -> {held['after']:.3f} "
        f"({held['gain_points']:+.2f} points); train {train['before']:.3f} -> {train['after']:.3f}; "
        f"{report['rounds_run']} round(s) in {report['seconds']:.1f} s.",
        "",
        f"Final versions: {', '.join(f'`{r}`' for r in report['final_versions'])}",
        "",
        "## Verdicts on train (before -> after)",
        "",
        "| verdict | before | after |",
        "|---|---|---|",
    ]
    before, after = report["verdicts_before"], report["verdicts_after"]
    for key in dict.fromkeys([*before, *after]):
        lines.append(f"| {key} | {before.get(key, 0)} | {after.get(key, 0)} |")
    for rnd in report["rounds"]:
        lines += [
            "",
            f"## Round {rnd['round']}",
            "",
            f"Train {rnd['train_before']:.3f} -> {rnd['train_after']:.3f}; "
            f"held-out after the round {rnd['heldout_after']:.3f}.",
        ]
        for entry in rnd["accepted"]:
            lines += [
                "",
                f"Accepted `{entry['variable']}` ({entry['verdicts']} verdicts):",
                "",
                "```diff",
                entry["diff"],
                "```",
            ]
        for entry in rnd["rejected"]:
            lines.append(f"- rejected `{entry['variable']}`: {entry['reason']}")
        for entry in rnd["skipped"]:
            lines.append(
                f"- skipped {entry['error_type']} at `{entry['op']}` ({entry['verdicts']}): "
                f"{entry['reason']}"
            )
    return "\n".join(lines) + "\n"

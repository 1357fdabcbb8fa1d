"""Run a system over a conversation, and label failed cases by counterfactual replay.

A :class:`ConversationRun` keeps what replay needs: a snapshot of the system before every
session, the state after the last one, where each question's ops start, and the op log.

Counterfactual replay (the contract's definition, made executable): for a failed case, in
execution order, take each op that may be at fault for it (its :class:`Blame` rule holds for
the case's evidence), replace its output by the oracle's (the evidence fact extracted, the old
content kept, no delete, the evidence retrieved or kept, the gold answer) and re-run what
follows, untraced, from the nearest snapshot, then judge again. The earliest op whose correction
makes the answer right is the decisive op; its kind gives the error type, and the label's
``source`` is ``injected`` when a fault was injected there. A case that no single correction
rescues gets a label without an op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from memtrace_bench.systems._base import (
    Blame,
    CaseOracle,
    CaseResult,
    Correction,
    Judge,
    MemorySystem,
    OpRecord,
    StoreEvidence,
    UnchangedByCorrection,
    case_id_for,
    turn_ref,
)
from memtrace_bench.systems._engine import OfflineEngine
from memtrace_bench.systems._evermemos import EverMemOSSystem
from memtrace_bench.systems._faults import FaultPlan, FaultSpec
from memtrace_bench.systems._judge import DeterministicJudge
from memtrace_bench.systems._long_context import LongContextSystem
from memtrace_bench.systems._mem0 import Mem0System
from memtrace_bench.systems._protocol import Engine
from memtrace_bench.systems._rag import RagSystem
from memtrace_bench.systems._workload import Conversation, Question, Workload
from memtrace_otel.instrumentation import (
    CaptureConfig,
    MemTracer,
    Variable,
    WriterRegistry,
    suppress_tracing,
)
from memtrace_otel.semconv import ERROR_TYPE_BY_KIND, OpKind

SYSTEMS: Mapping[str, type[MemorySystem]] = {
    "long_context": LongContextSystem,
    "rag": RagSystem,
    "mem0": Mem0System,
    "evermemos": EverMemOSSystem,
}
"""The reference systems by name."""

NO_SINGLE_FIX = "no single correction rescues the answer"
"""The reason of a label without an op."""


def resolve_systems(names: str | Sequence[str]) -> list[str]:
    """Validate system names (``all`` or a comma-separated list).

    Raises:
        ValueError: an unknown name.

    >>> resolve_systems("rag,mem0")
    ['rag', 'mem0']
    """
    items = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    if items in (["all"], []):
        return list(SYSTEMS)
    unknown = [n for n in items if n not in SYSTEMS]
    if unknown:
        raise ValueError(
            f"unknown system(s) {', '.join(map(repr, unknown))}: expected {', '.join(SYSTEMS)} or all"
        )
    return list(dict.fromkeys(items))


def store_id_for(system: str, conversation: Conversation) -> str:
    """``<system>:<conversation id>``: each system keeps its own store per conversation."""
    return f"{system}:{conversation.conv_id}"


@dataclass(frozen=True)
class Label:
    """The ground-truth label of one failed case."""

    case_id: str
    error_type: str | None
    op_id: str | None
    op_name: str | None
    source: str
    system: str = ""
    op_kind: str | None = None
    op_index: int | None = None
    fault: str | None = None
    op_inputs: tuple[str, ...] = ()
    op_outputs: tuple[str, ...] = ()
    replays: int = 0
    method: str = "replay"
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """The labels.jsonl row."""
        row = asdict(self)
        row["op_inputs"] = list(self.op_inputs)
        row["op_outputs"] = list(self.op_outputs)
        return row


@dataclass
class ConversationRun:
    """One system run over one conversation, with what replay needs."""

    system: str
    conversation: Conversation
    store_id: str
    factory: Callable[[], MemorySystem]
    judge: Judge
    checkpoints: dict[int, tuple[int, tuple[int, Any]]] = field(default_factory=dict)
    final: tuple[int, Any] = (0, None)
    question_seq: dict[str, int] = field(default_factory=dict)
    questions: dict[str, Question] = field(default_factory=dict)
    log: list[OpRecord] = field(default_factory=list)
    results: dict[str, CaseResult] = field(default_factory=dict)

    def oracle(self, case_id: str) -> CaseOracle:
        """The oracle of a case."""
        question = self.questions[case_id]
        evidence = {turn_ref(self.store_id, e.dia_id): e for e in question.evidence}
        return CaseOracle(case_id, question, evidence)

    def failed(self) -> list[str]:
        """Case ids answered wrong, in question order."""
        return [c for c, r in self.results.items() if not r.correct]


def run_conversation(
    system: str,
    conversation: Conversation,
    *,
    engine: Engine | None = None,
    tracer: MemTracer | None = None,
    judge: Judge | None = None,
    faults: FaultSpec | None = None,
    seed: int = 0,
    prompt_vars: Mapping[str, Variable] | None = None,
    options: Mapping[str, Any] | None = None,
) -> ConversationRun:
    """Ingest every session, then ask every question (traced when ``tracer`` records).

    Args:
        system: a name from :data:`SYSTEMS`.
        conversation: what to ingest and ask.
        engine: the model (default: the offline engine).
        tracer: the tracer ops are recorded with (default: an untraced one).
        judge: the judge (default: deterministic).
        faults: injected faults (default: none).
        seed: the seed fault decisions derive from.
        prompt_vars: prompt variables already traced (default: traced by a setup op).
        options: the system's config overrides.

    Raises:
        ValueError: an unknown system or option.
        EngineUnavailableError: the model endpoint failed.
    """
    cls = SYSTEMS[resolve_systems([system])[0]]
    engine = engine or OfflineEngine()
    judge = judge or DeterministicJudge()
    tracer = tracer or untraced_tracer()
    store_id = store_id_for(system, conversation)
    plan = FaultPlan(faults or FaultSpec(), seed=seed, system=system, store=store_id)
    evidence = StoreEvidence.of(store_id, conversation)
    prompts = dict(prompt_vars) if prompt_vars is not None else cls.trace_prompts(tracer)

    def factory() -> MemorySystem:
        return cls(
            store_id=store_id,
            engine=engine,
            tracer=tracer,
            prompt_vars=prompts,
            faults=plan,
            evidence=evidence,
            options=options,
        )

    run = ConversationRun(system, conversation, store_id, factory, judge)
    instance = factory()
    instance.log = run.log
    for position, session in enumerate(conversation.sessions):
        run.checkpoints[session.index] = (position, instance.snapshot())
        instance.ingest_session(session)
    run.final = instance.snapshot()
    for question in conversation.questions:
        case_id = case_id_for(store_id, question)
        run.questions[case_id] = question
        run.question_seq[case_id] = instance.seq
        run.results[case_id] = instance.ask(question, case_id, judge)
    return run


def untraced_tracer() -> MemTracer:
    """A tracer whose spans go nowhere (replays also run under ``suppress_tracing``)."""
    return MemTracer(
        tracer_provider=TracerProvider(),
        capture=CaptureConfig(mode="NO_CONTENT"),
        registry=WriterRegistry(1),
    )


def may_blame(record: OpRecord, oracle: CaseOracle) -> bool:
    """Whether replay should try correcting ``record`` for this case (its :class:`Blame` rule)."""
    if record.blame is Blame.NEVER:
        return False
    if record.case_id is not None and record.case_id != oracle.case_id:
        return False
    evidence = set(oracle.evidence)
    if record.blame is Blame.LOSS:
        return bool(oracle.carried_by(record.inputs) - oracle.carried_by(record.outputs))
    if record.blame is Blame.DELETE:
        return bool(oracle.carried_by(record.inputs))
    if record.blame is Blame.COMPLETE:
        return evidence <= oracle.carried_by(record.inputs)
    if record.blame is Blame.INCOMPLETE:
        return not evidence <= oracle.carried_by(record.inputs)
    return False


def replay_correct(
    run: ConversationRun, record: OpRecord, case_id: str, *, ideal_downstream: bool = False
) -> bool:
    """Re-run the case with ``record``'s output corrected by the oracle; is the answer right?

    With ``ideal_downstream`` the question's later ops behave ideally too (the contract's
    "with later ops behaving ideally").
    """
    oracle = run.oracle(case_id)
    question = run.questions[case_id]
    system = run.factory()
    system.log = None
    original = tuple((v.ref, v.text) for v in record.outputs)
    system.correction = Correction(record.seq, oracle, ideal_downstream, original)
    try:
        with suppress_tracing():
            result = _rerun(run, system, record, case_id, question)
    except UnchangedByCorrection:
        return False  # the correction changed nothing: this op was not at fault
    if system.target_outputs == original:
        return False
    return result.correct


def _rerun(
    run: ConversationRun, system: MemorySystem, record: OpRecord, case_id: str, question: Question
) -> CaseResult:
    """Re-run from the snapshot before ``record`` (the final state for a question's op)."""
    if record.phase < 0:
        system.restore(run.final)
        system._seq = run.question_seq[case_id]
    else:
        position, snapshot = run.checkpoints[record.phase]
        system.restore(snapshot)
        for session in run.conversation.sessions[position:]:
            system.ingest_session(session)
        system._seq = max(system.seq, run.question_seq[case_id])
    return system.ask(question, case_id, run.judge)


def label_case(run: ConversationRun, case_id: str, *, max_replays: int = 60) -> Label:
    """The ground-truth label of a failed case, by counterfactual replay.

    First pass (the issue's definition): correct one op, re-run what follows as the system
    would. When no single op rescues the case that way, a second pass applies the contract's
    wording, "with later ops behaving ideally": the question's later ops retrieve and keep the
    evidence and answer from it. The label's ``method`` says which pass found the op.

    Raises:
        KeyError: no such case in the run.
        ValueError: the case was answered right (nothing to label).
    """
    result = run.results[case_id]
    if result.correct:
        raise ValueError(f"case {case_id} was answered right; only failed cases get labels")
    oracle = run.oracle(case_id)
    suspects = [r for r in run.log if may_blame(r, oracle)][:max_replays]
    tried = 0
    for method, ideal in (("replay", False), ("replay+ideal-downstream", True)):
        for record in suspects:
            if ideal and record.kind is OpKind.GENERATE:
                continue  # the same as the first pass
            tried += 1
            if replay_correct(run, record, case_id, ideal_downstream=ideal):
                return _label(run, case_id, record, method, tried)
    return Label(
        case_id=case_id,
        error_type=None,
        op_id=None,
        op_name=None,
        source="counterfactual",
        system=run.system,
        replays=tried,
        method="replay",
        reason=f"{NO_SINGLE_FIX} (tried {len(suspects)} ops)",
    )


def _label(run: ConversationRun, case_id: str, record: OpRecord, method: str, tried: int) -> Label:
    kind = ERROR_TYPE_BY_KIND[record.kind]
    return Label(
        case_id=case_id,
        error_type=kind.value if kind is not None else None,
        op_id=record.span_id,
        op_name=record.name,
        source="injected" if record.fault else "counterfactual",
        system=run.system,
        op_kind=record.kind.value,
        op_index=record.seq,
        fault=record.fault,
        op_inputs=record.input_refs,
        op_outputs=record.output_refs,
        replays=tried,
        method=method,
        reason=(
            f"injected {record.fault}; correcting this op alone makes the answer right"
            if record.fault
            else "correcting this op alone makes the answer right"
        ),
    )


def replay_case(
    system: str,
    workload: Workload,
    case_id: str,
    *,
    engine: Engine | None = None,
    judge: Judge | None = None,
    faults: FaultSpec | str | None = None,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
) -> Label:
    """Label one case from scratch: re-run its conversation untraced, then replay.

    The case id is ``<system>:<conversation>:<qid>`` (as in ``cases.jsonl``). The label names the
    op by ``op_index`` (execution order), ``op_name``, ``op_inputs`` and ``op_outputs`` (refs are
    deterministic, so they find the span in a trace of the same run); ``op_id`` is ``None``
    because nothing was traced. A case answered right gets a label with ``error_type=None`` and
    ``reason="answered right"``.

    Raises:
        KeyError: the case's conversation or question is not in the workload.
        ValueError: an unknown system.
    """
    prefix = f"{system}:"
    if not case_id.startswith(prefix):
        raise KeyError(f"case {case_id!r} does not belong to system {system!r}")
    conv_id, _, qid = case_id[len(prefix) :].rpartition(":")
    conversation = workload.conversation(conv_id)
    if not any(q.qid == qid for q in conversation.questions):
        raise KeyError(f"conversation {conv_id} has no question {qid}")
    spec = FaultSpec.parse(faults) if isinstance(faults, str) or faults is None else faults
    with suppress_tracing():
        run = run_conversation(
            system,
            conversation,
            engine=engine,
            judge=judge,
            faults=spec,
            seed=seed,
            options=options,
            prompt_vars=SYSTEMS[system].prompt_variables(),
        )
    if run.results[case_id].correct:
        return Label(
            case_id, None, None, None, "counterfactual", system=system, reason="answered right"
        )
    return label_case(run, case_id)

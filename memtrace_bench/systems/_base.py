"""What the four systems share: traced steps, the op log, oracles, retrieval indexes.

Every step of a system runs inside a :class:`Step`: one op of the trace contract (through the
manual API), one entry in the in-process op log (what counterfactual replay reads), the place
where injected faults strike and where a replay's oracle correction replaces the output.

Variable ids are scoped by the store, which is itself scoped by the system
(``mem0:user-01``): ``msg:<store>:D1:3`` for messages, ``mem:<store>:4`` for mem0 memories,
``query:<store>:q3`` for questions. Memory variables carry ``source_refs`` (the message refs
they derive from) and ``date`` in their meta.

Retrieval ops list as inputs the query and *every live record of the store* they searched
(the candidate set), and write a ``candidates`` variable whose value lists the refs and texts
they returned: a record that carries the evidence but is not among the candidates was stored
but not retrieved; evidence carried by no input record was never stored (or lost before).
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, ClassVar

from memtrace_bench.systems._faults import FaultPlan
from memtrace_bench.systems._judge import DeterministicJudge, Judgement, LLMJudge
from memtrace_bench.systems._protocol import Engine, EngineReplyError
from memtrace_bench.systems._workload import Conversation, Evidence, Question, Session, Turn
from memtrace_otel.attribution._tokens import normalize_answer, overlap
from memtrace_otel.instrumentation import MemTracer, Op, Variable
from memtrace_otel.semconv import Category, OpKind, Stage
from memtrace_otel.semconv import attributes as A

Judge = DeterministicJudge | LLMJudge


class Blame(StrEnum):
    """When counterfactual replay may try correcting an op, for a given case."""

    LOSS = "loss"
    """Its inputs carried evidence of the case that its outputs do not (extract, update, ...)."""
    DELETE = "delete"
    """Its input carried evidence of the case (a delete)."""
    COMPLETE = "complete"
    """Its inputs carried all the evidence of the case, yet the case failed (generate)."""
    INCOMPLETE = "incomplete"
    """It judged candidates sufficient that lacked evidence of the case (a sufficiency check)."""
    NEVER = "never"
    """Never decisive (ingest, judge, bookkeeping)."""


def message_id(store: str, dia_id: str) -> str:
    """``msg:<store>:<dia_id>``: the id of a message variable."""
    return f"msg:{store}:{dia_id}"


def turn_ref(store: str, dia_id: str) -> str:
    """``msg:<store>:<dia_id>@1``: the ref cases.jsonl names as evidence (a dialogue turn of the
    reference systems; an instrumented app's messages are named by
    :func:`memtrace_otel.instrumentors.message_ref`)."""
    return f"{message_id(store, dia_id)}@1"


def case_id_for(store: str, question: Question) -> str:
    """``<store>:<qid>``, e.g. ``mem0:user-01:q3``."""
    return f"{store}:{question.qid}"


def text_of(value: Any) -> str:
    """The text a value holds, for evidence checks (lists and dicts are flattened)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if "text" in value:
            return text_of(value["text"])
        return "\n".join(text_of(v) for v in value.values())
    if isinstance(value, list | tuple):
        return "\n".join(text_of(v) for v in value)
    return str(value)


def source_refs_of(var: Variable) -> tuple[str, ...]:
    """The message refs a variable derives from (its own ref for a message)."""
    if var.category is Category.MESSAGE:
        return (var.ref,)
    refs = (var.meta or {}).get("source_refs") or ()
    return tuple(refs)


@dataclass
class VarInfo:
    """What replay needs to know of one variable: ref, text, source message refs."""

    ref: str
    text: str
    source_refs: frozenset[str]

    @functools.cached_property
    def normalized(self) -> str:
        """The text normalised for key matching (computed once)."""
        return f" {normalize_answer(self.text)} "

    @classmethod
    def of(cls, var: Variable) -> VarInfo:
        """From a variable (tombstones carry nothing)."""
        if var.deleted:
            return cls(var.ref, "", frozenset())
        return cls(var.ref, text_of(var.value), frozenset(source_refs_of(var)))


@dataclass
class OpRecord:
    """One executed op, as replay sees it."""

    seq: int
    kind: OpKind
    name: str
    case_id: str | None
    phase: int
    inputs: tuple[VarInfo, ...]
    outputs: tuple[VarInfo, ...]
    blame: Blame
    input_refs: tuple[str, ...] = ()
    output_refs: tuple[str, ...] = ()
    span_id: str | None = None
    fault: str | None = None
    failed: bool = False


@dataclass(frozen=True)
class CaseOracle:
    """The ground truth of one case: its evidence and gold answer, and what carries them."""

    case_id: str
    question: Question
    evidence: Mapping[str, Evidence]

    @property
    def gold(self) -> str:
        """The gold answer a corrected generate writes."""
        return self.question.gold_answers[0] if self.question.gold_answers else ""

    def carried(self, info: VarInfo) -> set[str]:
        """The evidence refs this variable still carries (derived from them, key words kept)."""
        out = set()
        for ref in info.source_refs & self.evidence.keys():
            if evidence_present(self.evidence[ref], info):
                out.add(ref)
        return out

    def carried_by(self, infos: Iterable[VarInfo]) -> set[str]:
        """The union of :meth:`carried` over variables."""
        out: set[str] = set()
        for info in infos:
            out |= self.carried(info)
        return out


def evidence_present(evidence: Evidence, info: VarInfo) -> bool:
    """Whether the variable's text keeps the evidence's key words (or most of its content)."""
    if evidence.keys:
        return all(f" {normalize_answer(k)} " in info.normalized for k in evidence.keys)
    return overlap(evidence.fact, info.text) >= 0.5


@dataclass(frozen=True)
class Correction:
    """Replace the output of op ``seq`` by the oracle's (a counterfactual replay).

    With ``ideal_downstream``, every later op behaves ideally for the case too: faults undone,
    evidence kept, extracted, retrieved; a delete of an evidence record skipped; the gold answer,
    but only from a context that holds the evidence.
    """

    seq: int
    oracle: CaseOracle
    ideal_downstream: bool = False
    original: tuple[tuple[str, str], ...] | None = None
    """The op's outputs in the recorded run: a correction that reproduces them stops the replay."""


class UnchangedByCorrection(Exception):
    """Raised in a replay when the corrected op wrote what it wrote before (nothing to re-run)."""


@dataclass(frozen=True)
class StoreEvidence:
    """Evidence of every question of a store, so construction faults strike what matters."""

    by_ref: Mapping[str, tuple[Evidence, ...]]

    @classmethod
    def of(cls, store: str, conversation: Conversation) -> StoreEvidence:
        """Collect every question's evidence, by message ref."""
        by_ref: dict[str, list[Evidence]] = {}
        for question in conversation.questions:
            for ev in question.evidence:
                by_ref.setdefault(turn_ref(store, ev.dia_id), []).append(ev)
        return cls({k: tuple(v) for k, v in by_ref.items()})

    def carries(self, info: VarInfo) -> bool:
        """Whether the variable carries evidence of some question."""
        for ref in info.source_refs & self.by_ref.keys():
            if any(evidence_present(ev, info) for ev in self.by_ref[ref]):
                return True
        return False


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one question."""

    case_id: str
    prediction: str
    correct: bool
    score: float
    judge_method: str


class Step:
    """One op of a system: span, op-log entry, fault site and correction point.

    Use as ``with system.step(kind, name, inputs=...) as step:``; ``step.output(var)`` records
    what it wrote, ``step.oracle`` is the case oracle when a replay corrects this op,
    ``step.faulted(name, key)`` decides an injected fault.
    """

    def __init__(
        self,
        system: MemorySystem,
        kind: OpKind,
        name: str,
        inputs: Sequence[Variable],
        *,
        case_id: str | None,
        prompt: str | None,
        stage: Stage | None,
        blame: Blame,
        carry_inputs: Sequence[Variable] | None,
        attributes: Mapping[str, Any] | None,
    ) -> None:
        self.system = system
        self.kind = kind
        self.name = name
        self.inputs = list(inputs)
        self.carry_inputs = list(carry_inputs) if carry_inputs is not None else None
        self.case_id = case_id
        self.blame = blame
        self.outputs: list[Variable] = []
        self.fault: str | None = None
        self.failed = False
        self.seq = -1
        prompt_var = system.prompt_vars.get(prompt) if prompt else None
        attrs: dict[str, Any] = dict(attributes or {})
        if prompt:
            attrs[A.GEN_AI_REQUEST_MODEL] = system.engine.model
        self._op: Op = system.mt.op(
            kind,
            name,
            inputs=self.inputs,
            case_id=case_id,
            prompt=prompt_var,
            stage=stage,
            attributes=attrs or None,
        )

    def __enter__(self) -> Step:
        self.seq = self.system._next_seq()
        self._op.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._op.__exit__(exc_type, exc, tb)
        if self.is_target:
            written = tuple((v.ref, text_of(v.value)) for v in self.outputs)
            self.system.target_outputs = written
            correction = self.system.correction
            if correction is not None and correction.original == written and exc is None:
                raise UnchangedByCorrection(self.name)
        log = self.system.log
        if log is None:
            return
        span_id = None
        if self._op.is_traced:
            span_id = format(self._op.span.get_span_context().span_id, "016x")
        carry = self.carry_inputs if self.carry_inputs is not None else self.inputs
        log.append(
            OpRecord(
                seq=self.seq,
                kind=self.kind,
                name=self.name,
                case_id=self.case_id,
                phase=self.system.phase,
                inputs=tuple(VarInfo.of(v) for v in carry if v.category is not Category.PROMPT),
                outputs=tuple(VarInfo.of(v) for v in self.outputs),
                blame=self.blame,
                input_refs=tuple(v.ref for v in self.inputs),
                output_refs=tuple(v.ref for v in self.outputs),
                span_id=span_id,
                fault=self.fault,
                failed=self.failed,
            )
        )

    @property
    def oracle(self) -> CaseOracle | None:
        """The case oracle when a replay corrects this op (or wants it ideal downstream)."""
        correction = self.system.correction
        if correction is None:
            return None
        if correction.seq == self.seq:
            return correction.oracle
        if correction.ideal_downstream and self.seq > correction.seq:
            return correction.oracle
        return None

    @property
    def is_target(self) -> bool:
        """Whether this is the op a replay corrects (not merely an ideal downstream one)."""
        correction = self.system.correction
        return correction is not None and correction.seq == self.seq

    def keeps(self, record: Variable) -> bool:
        """Whether a delete of ``record`` is undone by the oracle ("no delete")."""
        oracle = self.oracle
        return oracle is not None and (self.is_target or bool(oracle.carried(VarInfo.of(record))))

    def faulted(self, fault: str, key: str) -> bool:
        """Whether the injected ``fault`` strikes this op (never while it is being corrected)."""
        plan = self.system.faults
        if plan is None or self.oracle is not None or not plan.fires(fault, key):
            return False
        self.fault = fault
        return True

    def output(self, var: Variable) -> Variable:
        """Record an output; returns it with its writer's traceparent."""
        out = self._op.output(var)
        self.outputs.append(out)
        return out

    def set_verdict(self, correct: bool) -> None:
        """On the judge op: ``memtrace.judge.verdict``."""
        self._op.set_verdict(correct)

    def add_input(self, var: Variable) -> None:
        """Record one more input after the op started."""
        self._op.input(var)
        self.inputs.append(var)
        if self.carry_inputs is not None:
            self.carry_inputs.append(var)

    def fail(self, exc: BaseException) -> None:
        """Mark the op failed (a malformed model reply) without raising: the pipeline degrades."""
        self.failed = True
        self._op.record_error(exc)


# --- retrieval --------------------------------------------------------------------------------
def dense_search(
    query_vec: Sequence[float], docs: Sequence[tuple[str, Sequence[float]]], k: int
) -> list[tuple[str, float]]:
    """Cosine top-``k`` over unit vectors (positive scores only, ties by position)."""
    scored = [
        (i, key, sum(a * b for a, b in zip(query_vec, vec, strict=False)))
        for i, (key, vec) in enumerate(docs)
    ]
    scored.sort(key=lambda t: (-t[2], t[0]))
    return [(key, round(score, 4)) for _, key, score in scored[:k] if score > 0]


def rrf(rankings: Iterable[Sequence[str]], k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: ``sum 1/(k + rank)`` over the rankings, best first.

    >>> [key for key, _ in rrf([["a", "b"], ["b", "c"]])]
    ['b', 'a', 'c']
    """
    scores: dict[str, float] = {}
    first: dict[str, int] = {}
    position = 0
    for ranking in rankings:
        for rank, key in enumerate(ranking):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank + 1)
            if key not in first:
                first[key] = position
                position += 1
    return sorted(
        ((key, round(s, 6)) for key, s in scores.items()), key=lambda t: (-t[1], first[t[0]])
    )


# --- the system base class --------------------------------------------------------------------
@dataclass
class SystemConfig:
    """Settings every system reads (subclasses add their own)."""

    top_k: int = 5


class MemorySystem(ABC):
    """A memory system run over one store (one user's conversation).

    Subclasses implement :meth:`on_turn`, :meth:`on_session_end`, :meth:`answer`,
    :meth:`live_records`, :meth:`remove_record` and the state copy pair
    :meth:`_copy_state` / :meth:`_set_state`.

    Args:
        store_id: the store (``<system>:<conversation>``).
        engine: the model behind LLM-backed steps.
        tracer: the :class:`MemTracer` ops are recorded with.
        prompt_vars: prompt template variables by step (``None``: the system's defaults, traced
            by a setup op).
        faults: injected faults (``None``: none).
        evidence: the store's question evidence (faults aim at it).
        options: overrides of the system's config fields.
    """

    name: ClassVar[str] = ""
    default_prompts: ClassVar[Mapping[str, str]] = {}
    config_class: ClassVar[type[SystemConfig]] = SystemConfig

    def __init__(
        self,
        *,
        store_id: str,
        engine: Engine,
        tracer: MemTracer,
        prompt_vars: Mapping[str, Variable] | None = None,
        faults: FaultPlan | None = None,
        evidence: StoreEvidence | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.store_id = store_id
        self.engine = engine
        self.mt = tracer
        self.faults = faults
        self.evidence = evidence or StoreEvidence({})
        self.config = make_config(self.config_class, options)
        self.prompt_vars: dict[str, Variable] = dict(
            prompt_vars if prompt_vars is not None else self.trace_prompts(tracer)
        )
        self.correction: Correction | None = None
        self.target_outputs: tuple[tuple[str, str], ...] | None = None
        self.log: list[OpRecord] | None = []
        self.phase = -1
        self._seq = 0

    # -- prompts -------------------------------------------------------------------------------
    @classmethod
    def prompt_variables(cls, overrides: Mapping[str, str] | None = None) -> dict[str, Variable]:
        """The prompt variables (``prompt:<system>.<step>@1``), templates overridable."""
        prompts = {**cls.default_prompts, **(overrides or {})}
        return {
            key: Variable(f"prompt:{cls.name}.{key}", 1, text, Category.PROMPT)
            for key, text in prompts.items()
        }

    @classmethod
    def trace_prompts(
        cls, tracer: MemTracer, overrides: Mapping[str, str] | None = None
    ) -> dict[str, Variable]:
        """Record the prompt variables once, as outputs of a ``<system>.load_prompts`` ingest op,
        so every LLM-backed op links to them instead of repeating their text."""
        variables = cls.prompt_variables(overrides)
        if not variables:
            return variables
        with tracer.ingest(f"{cls.name}.load_prompts", store_id=cls.name) as op:
            return {key: op.output(var) for key, var in variables.items()}

    # -- bookkeeping ---------------------------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @property
    def seq(self) -> int:
        """How many ops ran so far (the next op gets ``seq + 1``)."""
        return self._seq

    def step(
        self,
        kind: OpKind,
        name: str,
        *,
        inputs: Sequence[Variable] = (),
        case_id: str | None = None,
        prompt: str | None = None,
        stage: Stage | None = None,
        blame: Blame = Blame.LOSS,
        carry_inputs: Sequence[Variable] | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> Step:
        """A traced, logged step (see :class:`Step`)."""
        return Step(
            self,
            kind,
            name,
            inputs,
            case_id=case_id,
            prompt=prompt,
            stage=stage,
            blame=blame,
            carry_inputs=carry_inputs,
            attributes=attributes,
        )

    def snapshot(self) -> tuple[int, Any]:
        """The state (with the op counter) a replay restarts from."""
        return (self._seq, self._copy_state())

    def restore(self, snapshot: tuple[int, Any]) -> None:
        """Go back to a snapshot."""
        self._seq = snapshot[0]
        self._set_state(snapshot[1])

    @abstractmethod
    def _copy_state(self) -> Any: ...

    @abstractmethod
    def _set_state(self, state: Any) -> None: ...

    # -- helpers for subclasses ----------------------------------------------------------------
    def memory(
        self, var_id: str, value: Any, sources: Iterable[str], date: str, **meta: Any
    ) -> Variable:
        """A memory variable with ``source_refs`` and ``date`` meta."""
        refs = sorted(set(sources), key=_ref_order)
        return Variable(
            var_id, 1, value, Category.MEMORY, {"source_refs": refs, "date": date, **meta}
        )

    def aims(self, fault: str, value: Any, sources: Iterable[str]) -> bool:
        """Whether ``fault`` is injected at all and this value (derived from ``sources``) carries
        evidence of some question, so the fault may aim at it."""
        if self.faults is None or self.faults.spec.rate(fault) <= 0:
            return False
        return self.evidence.carries(VarInfo("", text_of(value), frozenset(sources)))

    def call_engine(self, step: Step, fn: Callable[[], Any], fallback: Any) -> Any:
        """Run an engine call; a malformed reply marks the op failed and returns ``fallback``."""
        try:
            return fn()
        except EngineReplyError as exc:
            step.fail(exc)
            return fallback

    def case_oracle(self, question: Question, case_id: str) -> CaseOracle:
        """The case's evidence, which question-time faults aim at."""
        return CaseOracle(
            case_id, question, {turn_ref(self.store_id, e.dia_id): e for e in question.evidence}
        )

    # -- the pipeline --------------------------------------------------------------------------
    def message_var(self, turn: Turn) -> Variable:
        """The message variable of a turn (``msg:<store>:<dia_id>@1``)."""
        return Variable(
            message_id(self.store_id, turn.dia_id),
            1,
            turn.text,
            Category.MESSAGE,
            {
                "speaker": turn.speaker,
                "dia_id": turn.dia_id,
                "session": turn.session,
                "date": turn.date,
            },
        )

    def ingest_session(self, session: Session) -> None:
        """Ingest one session: a root ``ingest`` op (one trace) whose outputs are its messages."""
        self.phase = session.index
        with self.step(OpKind.INGEST, f"{self.name}.ingest_session", blame=Blame.NEVER) as root:
            messages = [root.output(self.message_var(t)) for t in session.turns]
            for message, turn in zip(messages, session.turns, strict=True):
                self.on_turn(message, turn)
            self.on_session_end(session)
            self._spurious_delete(session)

    def _spurious_delete(self, session: Session) -> None:
        """The ``spurious_delete`` fault: remove a record that carries evidence."""
        if self.faults is None or not self.faults.fires(
            "spurious_delete", f"session:{session.index}"
        ):
            return
        victims = [r for r in self.live_records() if self.evidence.carries(VarInfo.of(r))]
        if not victims:
            return
        victim = victims[
            self.faults.pick("spurious_delete", f"session:{session.index}", len(victims))
        ]
        with self.step(
            OpKind.DELETE, f"{self.name}.delete", inputs=[victim], blame=Blame.DELETE
        ) as step:
            step.fault = "spurious_delete"
            if not step.keeps(victim):
                step.output(victim.tombstone(meta=victim.meta))
                self.remove_record(victim)

    def ask(self, question: Question, case_id: str, judge: Judge) -> CaseResult:
        """Answer one question (one trace: an ``ingest`` root, the system's ops, the judge)."""
        self.phase = -1
        query = Variable(
            f"query:{case_id}",
            1,
            question.question,
            Category.QUERY,
            {"question_id": question.qid, "category": question.category},
        )
        with self.step(
            OpKind.INGEST, f"{self.name}.ask", case_id=case_id, blame=Blame.NEVER
        ) as root:
            query = root.output(query)
            prediction = self.answer(query, question, case_id)
            return self._judge(prediction, question, case_id, judge)

    def _judge(
        self, prediction: Variable, question: Question, case_id: str, judge: Judge
    ) -> CaseResult:
        gold = Variable(f"gold:{case_id}", 1, list(question.gold_answers), Category.GOLD)
        prompt = "judge" if "judge" in self.prompt_vars and judge.prompt else None
        with self.step(
            OpKind.JUDGE,
            judge.name,
            inputs=[prediction, gold],
            case_id=case_id,
            prompt=prompt,
            blame=Blame.NEVER,
        ) as step:
            text = str(prediction.value or "")
            fallback = Judgement(False, 0.0, "failed", "judge reply malformed")
            judgement: Judgement = self.call_engine(
                step,
                lambda: judge(
                    question.question, question.gold_answers, text, abstention=question.abstention
                ),
                fallback,
            )
            if step.failed:
                from memtrace_bench.systems._judge import judge_answer

                judgement = judge_answer(
                    text, question.gold_answers, abstention=question.abstention
                )
            step.output(
                Variable(
                    f"score:{case_id}",
                    1,
                    judgement.score,
                    Category.SCORE,
                    {"method": judgement.method, "reason": judgement.reason},
                )
            )
            step.set_verdict(judgement.correct)
        return CaseResult(case_id, text, judgement.correct, judgement.score, judgement.method)

    def generate_answer(
        self,
        name: str,
        query: Variable,
        context: Variable,
        lines: Sequence[str],
        question: Question,
        case_id: str,
    ) -> Variable:
        """The shared ``generate`` op: engine answer, ``wrong_answer`` fault, oracle: the gold."""
        with self.step(
            OpKind.GENERATE,
            name,
            inputs=[context, query],
            case_id=case_id,
            prompt="answer",
            blame=Blame.COMPLETE,
        ) as step:
            oracle = step.oracle
            if oracle is not None and (
                step.is_target or set(oracle.evidence) <= oracle.carried(VarInfo.of(context))
            ):
                text = oracle.gold
            else:
                prompt = str(self.prompt_vars["answer"].value)
                text = self.call_engine(
                    step,
                    lambda: self.engine.answer(prompt, question.question, list(lines)),
                    "I don't know.",
                )
                if step.faulted("wrong_answer", f"case:{case_id}"):
                    text = wrong_answer(text, lines, question)
            return step.output(Variable(f"prediction:{case_id}", 1, text, Category.PREDICTION))

    # -- subclass hooks ------------------------------------------------------------------------
    @abstractmethod
    def on_turn(self, message: Variable, turn: Turn) -> None:
        """Process one message."""

    def on_session_end(self, session: Session) -> None:  # noqa: B027 - optional hook
        """Called after a session's last message (optional; does nothing by default)."""

    @abstractmethod
    def answer(self, query: Variable, question: Question, case_id: str) -> Variable:
        """Run retrieval, assembly and generation; return the prediction variable."""

    @abstractmethod
    def live_records(self) -> list[Variable]:
        """The current version of every live record (the candidate set of retrieval)."""

    @abstractmethod
    def remove_record(self, record: Variable) -> None:
        """Drop a record from the store (after a delete op)."""


def make_config(cls: type[SystemConfig], options: Mapping[str, Any] | None) -> Any:
    """A system's config with ``options`` applied.

    Raises:
        ValueError: an option the config does not have, or a value it rejects.
    """
    known = set(cls.__dataclass_fields__)
    unknown = set(options or {}) - known
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(sorted(unknown))} for {cls.__name__}: "
            f"expected {', '.join(sorted(known))}"
        )
    return cls(**dict(options or {}))


def _ref_order(ref: str) -> tuple[int, int, str]:
    """Order message refs by session and turn (``...:D2:10@1`` after ``...:D2:9@1``)."""
    tail = ref.rsplit("@", 1)[0].rsplit(":", 2)
    try:
        return (int(tail[-2].lstrip("D")), int(tail[-1]), ref)
    except (ValueError, IndexError):
        return (0, 0, ref)


def wrong_answer(answer: str, lines: Sequence[str], question: Question) -> str:
    """The ``wrong_answer`` fault: a confident answer that is not the gold one."""
    gold = {normalize_answer(g) for g in question.gold_answers}
    for line in reversed(lines):
        for word in line.split():
            clean = word.strip(".,!?:;[]()'\"")
            if clean[:1].isupper() and normalize_answer(clean) not in gold and len(clean) > 3:
                if not question.abstention and normalize_answer(clean) in normalize_answer(answer):
                    continue
                return clean
    return "Yes." if question.abstention else "I don't know."


def carrying(records: Sequence[Variable], oracle: CaseOracle) -> list[Variable]:
    """The records that carry evidence of the case."""
    return [r for r in records if oracle.carried(VarInfo.of(r))]


Line = tuple[str, tuple[str, ...]]
"""A context line and the message refs it derives from."""


def truncate_before_evidence(lines: list[Line], oracle: CaseOracle) -> list[Line]:
    """The ``truncate_context`` fault: cut the head of the context through its last line that
    carries the case's evidence."""
    hits = [
        i
        for i, (text, refs) in enumerate(lines)
        if oracle.carried(VarInfo("", text, frozenset(refs)))
    ]
    return lines[max(hits) + 1 :] if hits else lines


def context_variable(case_id: str, lines: Sequence[Line]) -> Variable:
    """The assembled context: its text, and the message refs of its lines."""
    refs: set[str] = set()
    for _, line_refs in lines:
        refs.update(line_refs)
    return Variable(
        f"context:{case_id}",
        1,
        "\n".join(text for text, _ in lines),
        Category.CONTEXT,
        {"source_refs": sorted(refs, key=_ref_order), "lines": len(lines)},
    )


def candidates_variable(
    var_id: str, records: Sequence[Variable], scores: Mapping[str, float]
) -> Variable:
    """A candidates variable: the retrieved refs, texts and scores, and their source refs."""
    return Variable(
        var_id,
        1,
        candidates_value(records, scores),
        Category.CANDIDATES,
        {"source_refs": union_sources(records)},
    )


def candidates_value(
    records: Sequence[Variable], scores: Mapping[str, float]
) -> list[dict[str, Any]]:
    """The value of a candidates variable: ref, text and score per retrieved record."""
    return [
        {"ref": r.ref, "text": text_of(r.value), "score": scores.get(r.ref, 0.0)} for r in records
    ]


def union_sources(records: Iterable[Variable]) -> list[str]:
    """The union of the records' ``source_refs``, in message order."""
    refs: set[str] = set()
    for r in records:
        refs.update(source_refs_of(r))
    return sorted(refs, key=_ref_order)


def dumps(value: Any) -> str:
    """Compact JSON (for logs and ids)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)

"""The hard benchmark's pipelines: the four system styles as small interpreters over claims.

Each hard store is a :class:`Scenario` (a LoCoMo conversation slice with planted facts, its
questions, the faults to inject and the system's settings). :func:`execute` runs the system's
pipeline over it and returns the op log: every op with its kind, name, inputs and outputs as
:class:`Rec` s (variables carrying text *and* the :class:`Claim` s that text means). Nothing is
traced here; :mod:`._hard_output` turns a log into spans.

Counterfactual replay re-executes the same pipeline with a :class:`Mode`: ``fix`` names the op
whose output the oracle corrects, ``ideal_from`` makes every op from that one on behave ideally
(faults off, the case's needed claims kept by every selection). Ops run the same code in every
mode; only faults and selections look at the mode, so replays are exact re-executions.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memtrace_bench.systems._hard_facts import Claim, Fact, swapped, undated, unnamed
from memtrace_bench.systems._judge import judge_answer
from memtrace_otel.attribution._tokens import Bm25Index, count_tokens, parse_date
from memtrace_otel.semconv import Category, OpKind, Stage

IDK = "I don't know."


# --- values ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    """One line of a value: its text, what it means, the messages it came from, and when."""

    text: str
    claims: tuple[Claim, ...] = ()
    refs: tuple[str, ...] = ()
    when: str = ""
    fact: Fact | None = None


@dataclass(frozen=True)
class Rec:
    """A variable version as the hard pipelines see it."""

    id: str
    version: int
    category: Category
    lines: tuple[Line, ...] = ()
    deleted: bool = False
    date: str = ""
    items: tuple[str, ...] = ()
    """For candidates and dropped lists: the refs of the records they list."""
    raw: Any = None
    """A value that is not lines (the query text, a decision, a score)."""

    @property
    def ref(self) -> str:
        """``<id>@<version>``."""
        return f"{self.id}@{self.version}"

    @property
    def text(self) -> str:
        """The lines' text."""
        return "\n".join(line.text for line in self.lines)

    def next(self, lines: Sequence[Line], date: str) -> Rec:
        """The next version holding ``lines``."""
        return replace(self, version=self.version + 1, lines=tuple(lines), date=date, raw=None)

    def tombstone(self) -> Rec:
        """The next version, deleted."""
        return replace(self, version=self.version + 1, lines=(), deleted=True, raw=None)


@dataclass(frozen=True)
class Fault:
    """An injected fault at one op (named by its key): ``name`` and its argument (a slot)."""

    name: str
    arg: str = ""
    other: str = ""


@dataclass(frozen=True)
class HTurn:
    """One message of a hard conversation (a LoCoMo turn, or a planted fact)."""

    dia_id: str
    speaker: str
    text: str
    date: str
    fact: Fact | None = None


@dataclass(frozen=True)
class HSession:
    """One sitting: its index, date and turns."""

    index: int
    date: str
    turns: tuple[HTurn, ...]


@dataclass(frozen=True)
class HCase:
    """One question of a hard store.

    ``chain`` holds the slots the reader follows (``caroline.team``, then ``{}.lead`` filled
    with the first hop's value); ``want`` is ``value`` or ``date``.
    """

    qid: str
    question: str
    chain: tuple[str, ...]
    want: str
    gold: str
    needed: frozenset[Claim]
    evidence: tuple[str, ...]
    category: str
    phenomena: tuple[str, ...] = ()
    intended: str | None = None
    """The key of the op the scenario meant to break for this case (``None``: meant correct)."""

    def meant(self, uid: str) -> bool:
        """Whether ``uid`` is the op the scenario meant to break (``trim:*``: any trim)."""
        if self.intended is None:
            return False
        if self.intended.endswith("*"):
            return uid.startswith(self.intended[:-1])
        return uid == self.intended

    def carries(self, claim: Claim) -> bool:
        """Whether a claim is one this case needs (its date only matters for date questions)."""
        return any(
            need.slot == claim.slot
            and need.value == claim.value
            and (self.want != "date" or need.date == claim.date)
            for need in self.needed
        )

    def line_carries(self, line: Line) -> bool:
        """Whether a line holds a needed claim."""
        return any(self.carries(c) for c in line.claims)


@dataclass
class Scenario:
    """One hard store: conversation, questions, faults and settings."""

    system: str
    store_id: str
    conv_id: str
    speakers: tuple[str, ...]
    sessions: tuple[HSession, ...]
    cases: tuple[HCase, ...]
    faults: dict[str, Fault] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    phenomena: tuple[str, ...] = ()

    def turn_ref(self, dia_id: str) -> str:
        """``msg:<store>:<dia_id>@1``."""
        return f"msg:{self.store_id}:{dia_id}@1"


@dataclass(frozen=True)
class Mode:
    """How a run behaves: the original (no correction), or a replay for one case.

    Ops are named by their ``uid`` (stable across replays, which may add or skip ops): ``fix``
    is the op the oracle corrects; with ``ideal``, every op not in ``before`` behaves ideally.
    """

    case: HCase | None = None
    fix: str | None = None
    ideal: bool = False
    before: frozenset[str] = frozenset()


@dataclass
class OpExec:
    """One executed op."""

    seq: int
    uid: str
    kind: OpKind
    name: str
    key: str
    parent: int | None
    case_id: str | None
    stage: Stage | None
    inputs: list[Rec]
    outputs: list[Rec]
    attributes: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None
    candidate: bool = False
    noise: tuple[str, ...] = ()
    """Kinds of spans other services would add under this op (``llm``, ``db``, ``http``, ``queue``)."""


# --- the interpreter ---------------------------------------------------------------------------
class Run:
    """One execution of a scenario's pipeline (the original, or a replay)."""

    def __init__(self, scenario: Scenario, mode: Mode) -> None:
        self.sc = scenario
        self.mode = mode
        self.log: list[OpExec] = []
        self.store: dict[str, Rec] = {}
        self.history: dict[str, Rec] = {}
        self.vars: dict[str, Rec] = {}
        self.predictions: dict[str, str] = {}
        self.count = 0
        self._parent: int | None = None
        self._names: dict[str, int] = {}

    # -- ops -------------------------------------------------------------------------------------
    def oracle_at(self, uid: str) -> HCase | None:
        """The case the op ``uid`` must serve ideally, if any."""
        mode = self.mode
        if mode.case is None:
            return None
        if mode.fix == uid or (mode.ideal and uid not in mode.before):
            return mode.case
        return None

    def uid(self, name: str, key: str) -> str:
        """The op's stable id: its key, else its name and occurrence."""
        if key:
            return key
        n = self._names.get(name, 0) + 1
        self._names[name] = n
        return f"{name}#{n}"

    def active(self, key: str) -> Fault | None:
        """The fault that will strike the op ``key`` (``None`` when it is corrected)."""
        fault = self.sc.faults.get(key)
        return fault if fault is not None and self.oracle_at(key) is None else None

    def begin(
        self,
        kind: OpKind,
        name: str,
        key: str = "",
        *,
        case_id: str | None = None,
        stage: Stage | None = None,
        lossy: bool = False,
        noise: tuple[str, ...] = (),
    ) -> tuple[OpExec, Fault | None, HCase | None]:
        """Start an op: returns it, the fault striking it (``None`` when corrected), its oracle."""
        seq = len(self.log)
        uid = self.uid(name, key)
        oracle = self.oracle_at(uid)
        fault = self.sc.faults.get(key) if key else None
        active = fault if oracle is None else None
        op = OpExec(
            seq, uid, kind, name, key, self._parent, case_id, stage, [], [],
            fault=active.name if active is not None else None,
            candidate=lossy or fault is not None, noise=noise,
        )  # fmt: skip
        self.log.append(op)
        return op, active, oracle

    def write(self, op: OpExec, rec: Rec) -> Rec:
        """Record an output."""
        op.outputs.append(rec)
        self.history[rec.ref] = rec
        return rec

    def root(self, name: str, case_id: str | None = None) -> OpExec:
        """Open a root ``ingest`` op (one trace); children follow until :meth:`close`."""
        self._parent = None
        op, _, _ = self.begin(OpKind.INGEST, name, case_id=case_id)
        self._parent = op.seq
        return op

    def close(self) -> None:
        """Close the current root."""
        self._parent = None

    def new_id(self, prefix: str) -> str:
        """``<prefix>:<store>:<n>``."""
        self.count += 1
        return f"{prefix}:{self.sc.store_id}:{self.count}"

    def put(self, rec: Rec) -> None:
        """Make a record searchable (or replace its live version)."""
        self.store[rec.id] = rec

    def drop(self, rec: Rec) -> None:
        """Remove a record from the store."""
        self.store.pop(rec.id, None)


def when_of(date: str) -> str:
    """An ISO date for ordering (``""`` when it does not parse)."""
    day = parse_date(date)
    return day.isoformat() if day is not None else ""


def message_rec(sc: Scenario, turn: HTurn) -> Rec:
    """The message variable of a turn."""
    claims = turn.fact.claims if turn.fact is not None else ()
    line = Line(turn.text, claims, (sc.turn_ref(turn.dia_id),), when_of(turn.date), turn.fact)
    return Rec(f"msg:{sc.store_id}:{turn.dia_id}", 1, Category.MESSAGE, (line,), date=turn.date)


def transcript_line(turn: HTurn, msg: Rec) -> Line:
    """``[date] speaker: text`` with the message's meaning."""
    line = msg.lines[0]
    return replace(line, text=f"[{turn.date}] {turn.speaker}: {turn.text}")


def memory_line(fact: Fact, refs: tuple[str, ...], when: str) -> Line:
    """The canonical third-person memory sentence of a fact."""
    return Line(fact.memory, fact.claims, refs, when, fact)


def damage(line: Line, fault: Fault, oracle: HCase | None) -> Line | None:
    """A memory line rewritten by a fault (``None``: the line is dropped)."""
    fact = line.fact
    if fact is None or oracle is not None:
        return line
    name = fault.name
    if name in ("drop_fact", "lossy_update", "drop_line", "consolidation_loss"):
        return None
    if name == "entity_swap":
        text, claims = swapped(fact, fault.other)
    elif name == "date_loss":
        text, claims = undated(fact, random.Random(fact.memory))
    elif name == "name_loss":
        text, claims = unnamed(fact)
    else:
        return line
    return replace(line, text=text, claims=claims)


def hits_fault(line: Line, fault: Fault | None) -> bool:
    """Whether a fault aims at this line (its argument names a slot the line has)."""
    return fault is not None and any(c.slot == fault.arg for c in line.claims)


def apply_line_fault(
    lines: Sequence[Line], fault: Fault | None, oracle: HCase | None
) -> list[Line]:
    """Apply a line fault to the lines it aims at."""
    out: list[Line] = []
    for line in lines:
        if fault is not None and hits_fault(line, fault):
            new = damage(line, fault, oracle)
            if new is not None:
                out.append(new)
        else:
            out.append(line)
    return out


# --- reading and judging ----------------------------------------------------------------------
def read_answer(lines: Sequence[Line], case: HCase, *, distract: bool = False) -> str:
    """The simulated reader: follow the case's chain of slots through the lines' claims, the
    most recent claim of a slot winning. With ``distract``, answer with the most recent value of
    another subject's slot of the same relation (a confident wrong answer)."""
    prev = ""
    found: Claim | None = None
    for template in case.chain:
        slot = template.replace("{}", prev.lower())
        hits = [
            (line.when, pos, c)
            for pos, line in enumerate(lines)
            for c in line.claims
            if c.slot == slot
        ]
        if not hits:
            found = None
            break
        found = max(hits, key=lambda h: (h[0], h[1]))[2]
        prev = found.value
    if distract:
        relation = case.chain[-1].rsplit(".", 1)[-1]
        gold = case.gold.lower()
        others = [
            (line.when, pos, c.value if case.want == "value" else c.date)
            for pos, line in enumerate(lines)
            for c in line.claims
            if c.slot.rsplit(".", 1)[-1] == relation
            and (c.value if case.want == "value" else c.date).lower() not in ("", gold)
        ]
        return max(others)[2] if others else IDK
    if found is None:
        return IDK
    if case.want == "date":
        return found.date or IDK
    return found.value


def judged(prediction: str, case: HCase) -> bool:
    """The deterministic judge."""
    return judge_answer(prediction, [case.gold]).correct


# --- retrieval helpers ----------------------------------------------------------------------------
def slots_of(case: HCase) -> set[str]:
    """The relations the question asks about (``city``, ``team``, ``lead``), for retrieval."""
    return {t.rsplit(".", 1)[-1] for t in case.chain}


def rank(records: Sequence[Rec], case: HCase, k: int) -> list[tuple[Rec, float]]:
    """The retriever: BM25 over the question, plus a boost for records that mention what the
    question asks about (a dense retriever that understands paraphrase), best first."""
    if not records:
        return []
    index = Bm25Index([(r.ref, r.text) for r in records])
    scores = dict(index.search(case.question, len(records)))
    wanted = slots_of(case)
    subject = case.chain[0].split(".", 1)[0]
    out = []
    for r in records:
        boost = 0.0
        for line in r.lines:
            for c in line.claims:
                relation = c.slot.rsplit(".", 1)[-1]
                if relation in wanted and (c.slot.startswith(subject) or len(case.chain) > 1):
                    boost = 5.0
        out.append((r, round(scores.get(r.ref, 0.0) + boost, 4)))
    out.sort(key=lambda x: (-x[1], x[0].id))
    return out[:k]


def keep_needed(selected: list[Rec], pool: Iterable[Rec], oracle: HCase | None) -> list[Rec]:
    """The oracle selection: the records carrying the case's needed claims, then the rest."""
    if oracle is None:
        return selected
    needed = [r for r in pool if any(oracle.line_carries(line) for line in r.lines)]
    return [*needed, *[r for r in selected if r not in needed]]


def candidates_rec(var_id: str, records: Sequence[Rec], category: Category) -> Rec:
    """A candidates (or dropped-list) variable listing records."""
    lines: list[Line] = []
    for r in records:
        lines.extend(r.lines)
    return Rec(var_id, 1, category, tuple(lines), items=tuple(r.ref for r in records))


def tokens_of(lines: Iterable[Line]) -> int:
    """Whitespace tokens of the lines."""
    return sum(count_tokens(line.text) for line in lines)

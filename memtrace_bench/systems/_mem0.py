"""The Mem0-style system: the classic (1.x) pipeline of fact extraction and memory decisions.

Per user message: ``mem0.fact_extraction`` (``extract``: facts from the message), for each fact
``mem0.search_existing`` (``retrieve`` in the construction stage: similar existing memories),
``mem0.update_decision`` (``extract``: ADD / UPDATE / DELETE / NONE for every fact), then one
write per decision: ``mem0.add`` (``create``), ``mem0.update`` (``update``), ``mem0.delete``
(``delete``). Per question: ``mem0.search`` (``retrieve``), ``mem0.rerank`` (``filter``: a score
threshold relative to the best hit), ``mem0.assemble``, ``mem0.answer``.

The prompts are variables (``prompt:mem0.fact_extraction@1``, ...), recorded once and referenced
by ``memtrace.prompt.ref``, so an optimiser can propose new versions.

Construction-time searches list the fact and the memories they returned (not the whole store),
to keep traces small; they are bookkeeping for the decision and never blamed themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from memtrace_bench.systems._base import (
    Blame,
    Line,
    MemorySystem,
    SystemConfig,
    VarInfo,
    candidates_variable,
    carrying,
    context_variable,
    source_refs_of,
    truncate_before_evidence,
)
from memtrace_bench.systems._protocol import Decision
from memtrace_bench.systems._workload import Question, Turn
from memtrace_otel.attribution._tokens import bm25_index
from memtrace_otel.instrumentation import Variable
from memtrace_otel.semconv import Category, OpKind, Stage

FACT_EXTRACTION_PROMPT = """You organise personal information. From the conversation lines below, extract
the facts worth remembering about the people speaking: where they live and when they moved,
work, family, pets, preferences, plans, allergies, and requests to forget something.
Write each fact as a short third-person sentence naming the person. Resolve relative dates
("today", "yesterday") against the line's date and write them as "on 8 May 2023".
Ignore greetings and small talk. Reply with a JSON object: {"facts": ["...", "..."]}.

Conversation:
{conversation}"""

UPDATE_DECISION_PROMPT = """You manage a memory store. Compare new facts with existing memories and decide,
for each new fact, one event:
- ADD: new information; give its text.
- UPDATE: it changes or refines an existing memory; give that memory's id and the new text.
- DELETE: it contradicts an existing memory or asks to forget it; give that memory's id.
- NONE: already known.
Existing memories (JSON): {existing}
New facts (JSON): {facts}
Reply with a JSON object: {"memory": [{"id": "<id or null>", "text": "...", "event": "ADD|UPDATE|DELETE|NONE", "old_memory": "<old text or null>"}]}"""

ANSWER_PROMPT = """Answer the question using only these memories about the speakers.
Each memory is "[date] text"; when memories disagree, the most recent is current.
If the memories do not contain the answer, say "I don't know". Answer in a few words.

Memories:
{context}

Question: {question}
Answer:"""


@dataclass
class Mem0Config(SystemConfig):
    """Search sizes and the rerank threshold (relative to the best score; 0 disables it)."""

    top_k: int = 8
    existing_k: int = 5
    threshold: float = 0.2


@dataclass
class _State:
    memories: dict[str, Variable]
    count: int

    def copy(self) -> _State:
        return _State(dict(self.memories), self.count)


class Mem0System(MemorySystem):
    """Fact memories with ADD/UPDATE/DELETE/NONE decisions."""

    name = "mem0"
    default_prompts: ClassVar[Mapping[str, str]] = {
        "fact_extraction": FACT_EXTRACTION_PROMPT,
        "update_decision": UPDATE_DECISION_PROMPT,
        "answer": ANSWER_PROMPT,
    }
    config_class = Mem0Config

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _State({}, 0)

    def _copy_state(self) -> _State:
        return self._state.copy()

    def _set_state(self, state: _State) -> None:
        self._state = state.copy()

    def live_records(self) -> list[Variable]:
        return list(self._state.memories.values())

    def remove_record(self, record: Variable) -> None:
        self._state.memories.pop(record.id, None)

    def _search(self, query: str, k: int) -> list[tuple[Variable, float]]:
        memories = self.live_records()
        index = bm25_index(tuple((m.ref, str(m.value)) for m in memories))
        by_ref = {m.ref: m for m in memories}
        return [(by_ref[ref], score) for ref, score in index.search(query, k)]

    # -- construction --------------------------------------------------------------------------
    def on_turn(self, message: Variable, turn: Turn) -> None:
        if turn.speaker.lower() == "assistant":
            return
        facts = self._extract(message, turn)
        if not facts:
            return
        existing: dict[str, Variable] = {}
        for fact in facts:
            hits = self._search(str(fact.value), self.config.existing_k)
            records = [m for m, _ in hits]
            with self.step(
                OpKind.RETRIEVE,
                "mem0.search_existing",
                inputs=[fact, *records],
                stage=Stage.CONSTRUCTION,
                blame=Blame.NEVER,
            ) as step:
                step.output(
                    candidates_variable(
                        f"candidates:{fact.id}", records, {m.ref: s for m, s in hits}
                    )
                )
            for record in records:
                existing.setdefault(record.id, record)
        decision, decisions, ids = self._decide(message, turn, facts, list(existing.values()))
        for item in decisions:
            self._write(item, decision, ids, message, turn)

    def _extract(self, message: Variable, turn: Turn) -> list[Variable]:
        key = f"turn:{turn.dia_id}"
        with self.step(
            OpKind.EXTRACT, "mem0.fact_extraction", inputs=[message], prompt="fact_extraction"
        ) as step:
            prompt = str(self.prompt_vars["fact_extraction"].value)
            texts: list[str] = self.call_engine(
                step, lambda: self.engine.extract_facts(prompt, [turn.line()]), []
            )
            victims = [i for i, t in enumerate(texts) if self.aims("drop_fact", t, [message.ref])]
            if victims and step.faulted("drop_fact", key):
                assert self.faults is not None
                drop = victims[self.faults.pick("drop_fact", key, len(victims))]
                texts = [t for i, t in enumerate(texts) if i != drop]
            oracle = step.oracle
            if oracle is not None:
                for ref, evidence in oracle.evidence.items():
                    held = oracle.carried_by(VarInfo("", t, frozenset([ref])) for t in texts)
                    if ref == message.ref and ref not in held:
                        texts.append(evidence.fact)
            return [
                step.output(
                    self.memory(
                        f"fact:{self.store_id}:{turn.dia_id}:{i + 1}",
                        text,
                        [message.ref],
                        turn.date,
                    )
                )
                for i, text in enumerate(texts)
            ]

    def _decide(
        self, message: Variable, turn: Turn, facts: list[Variable], existing: list[Variable]
    ) -> tuple[Variable, list[Decision], dict[str, Variable]]:
        ids = {str(i): m for i, m in enumerate(existing)}
        with self.step(
            OpKind.EXTRACT,
            "mem0.update_decision",
            inputs=[*facts, *existing],
            carry_inputs=facts,
            prompt="update_decision",
        ) as step:
            prompt = str(self.prompt_vars["update_decision"].value)
            decisions: list[Decision] = self.call_engine(
                step,
                lambda: self.engine.decide(
                    prompt,
                    [str(f.value) for f in facts],
                    [(k, str(m.value)) for k, m in ids.items()],
                ),
                [],
            )
            oracle = step.oracle
            if oracle is not None:
                kept = " \n".join(d.text for d in decisions if d.event != "DELETE")
                for fact in facts:
                    info = VarInfo.of(fact)
                    if oracle.carried(info) - oracle.carried(VarInfo("", kept, info.source_refs)):
                        decisions.append(Decision("ADD", str(fact.value)))
            value = [
                {
                    "event": d.event,
                    "id": ids[d.id].id if d.id in ids else None,
                    "text": "" if d.event == "DELETE" else d.text,
                    "old_memory": d.old_text,
                }
                for d in decisions
            ]
            decision = step.output(
                Variable(
                    f"decision:{self.store_id}:{turn.dia_id}",
                    1,
                    value,
                    Category.OTHER,
                    {"source_refs": [message.ref], "date": turn.date},
                )
            )
        return decision, decisions, ids

    def _write(
        self,
        item: Decision,
        decision: Variable,
        ids: dict[str, Variable],
        message: Variable,
        turn: Turn,
    ) -> None:
        state = self._state
        old = ids.get(item.id) if item.id is not None else None
        if old is not None and old.id not in state.memories:
            old = None  # already deleted or replaced by an earlier decision of this batch
        if old is not None:
            old = state.memories[old.id]
        event = item.event
        if event in ("UPDATE", "DELETE") and old is None:
            event = "ADD" if event == "UPDATE" else "NONE"
        if event == "ADD":
            with self.step(OpKind.CREATE, "mem0.add", inputs=[decision]) as step:
                state.count += 1
                record = self.memory(
                    f"mem:{self.store_id}:{state.count}", item.text, [message.ref], turn.date
                )
                state.memories[record.id] = step.output(record)
        elif event == "UPDATE":
            assert old is not None
            with self.step(
                OpKind.UPDATE, "mem0.update", inputs=[decision, old], carry_inputs=[decision, old]
            ) as step:
                text = item.text
                key = f"update:{old.ref}"
                if step.oracle is not None:
                    text = f"{str(old.value).rstrip('.')}. {item.text}"  # the old content kept
                elif self.aims("lossy_update", text, [message.ref]) and step.faulted(
                    "lossy_update", key
                ):
                    text = str(old.value)  # the overwrite lost the new information
                refs = sorted({*source_refs_of(old), message.ref})
                new = old.next(text, meta={"source_refs": refs, "date": turn.date})
                state.memories[old.id] = step.output(new)
        elif event == "DELETE":
            assert old is not None
            with self.step(
                OpKind.DELETE,
                "mem0.delete",
                inputs=[decision, old],
                carry_inputs=[old],
                blame=Blame.DELETE,
            ) as step:
                if not step.keeps(old):
                    step.output(old.tombstone(meta=old.meta))
                    state.memories.pop(old.id, None)

    # -- questions -----------------------------------------------------------------------------
    def answer(self, query: Variable, question: Question, case_id: str) -> Variable:
        memories = self.live_records()
        oracle = self.case_oracle(question, case_id)
        with self.step(
            OpKind.RETRIEVE,
            "mem0.search",
            inputs=[query, *memories],
            case_id=case_id,
            carry_inputs=memories,
            attributes={"gen_ai.memory.record.count": len(memories)},
        ) as step:
            hits = self._search(question.question, self.config.top_k)
            chosen = [m for m, _ in hits]
            scores = {m.ref: s for m, s in hits}
            if step.oracle is not None:
                evidence = carrying(memories, step.oracle)
                chosen = [*evidence, *[m for m in chosen if m not in evidence]]
                chosen = chosen[: max(self.config.top_k, len(evidence))]
                for m in evidence:
                    scores[m.ref] = max(scores.values(), default=1.0)
            else:
                aimed = carrying(chosen, oracle)
                if aimed and step.faulted("retrieval_miss", f"case:{case_id}"):
                    chosen = [m for m in chosen if m not in aimed]
            candidates = step.output(candidates_variable(f"candidates:{case_id}", chosen, scores))
        with self.step(OpKind.FILTER, "mem0.rerank", inputs=[candidates], case_id=case_id) as step:
            best = max((scores.get(m.ref, 0.0) for m in chosen), default=0.0)
            kept = [m for m in chosen if scores.get(m.ref, 0.0) >= self.config.threshold * best]
            if step.oracle is not None:
                kept = [m for m in chosen if m in kept or m in carrying(chosen, step.oracle)]
            else:
                aimed = carrying(kept, oracle)
                if aimed and step.faulted("filter_drop", f"case:{case_id}"):
                    kept = [m for m in kept if m not in aimed]
            filtered = step.output(candidates_variable(f"filtered:{case_id}", kept, scores))
        lines: list[Line] = [
            (f"[{(m.meta or {}).get('date', '')}] {m.value}", source_refs_of(m)) for m in kept
        ]
        with self.step(
            OpKind.ASSEMBLE, "mem0.assemble", inputs=[filtered], case_id=case_id
        ) as step:
            cut = truncate_before_evidence(lines, oracle)
            if cut != lines and step.faulted("truncate_context", f"case:{case_id}"):
                lines = cut
            context = step.output(context_variable(case_id, lines))
        return self.generate_answer(
            "mem0.answer", query, context, [t for t, _ in lines], question, case_id
        )

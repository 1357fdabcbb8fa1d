"""The Long-Context system: every turn merged into one record, trimmed to a window budget.

Ops per turn: ``long_context.create`` (the first turn) or ``long_context.memory_update``
(``update``: the turn appended), then ``long_context.trim`` (``update``) when the record exceeds
the window budget. Per question: ``long_context.retrieve`` (passes the record through),
``long_context.assemble``, ``long_context.answer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from memtrace_bench.systems._base import (
    Line,
    MemorySystem,
    SystemConfig,
    VarInfo,
    candidates_variable,
    carrying,
    context_variable,
    truncate_before_evidence,
)
from memtrace_bench.systems._workload import Question, Turn
from memtrace_otel.attribution._tokens import count_tokens
from memtrace_otel.instrumentation import Variable
from memtrace_otel.semconv import OpKind

ANSWER_PROMPT = """You answer questions about a long conversation, using only the transcript below.
Each line is "[date] speaker: message". Resolve relative dates ("yesterday") against the line's date.
If the transcript does not contain the answer, say "I don't know".
Answer in a few words.

Transcript:
{context}

Question: {question}
Answer:"""


@dataclass
class LongContextConfig(SystemConfig):
    """``window_tokens``: the budget of the long-context record (whitespace tokens)."""

    window_tokens: int = 400


@dataclass
class _State:
    record: Variable | None
    lines: list[tuple[str, str]]  # (context line, message ref)
    generation: int

    def copy(self) -> _State:
        return _State(self.record, list(self.lines), self.generation)


class LongContextSystem(MemorySystem):
    """One long-context record per store."""

    name = "long_context"
    default_prompts: ClassVar[Mapping[str, str]] = {"answer": ANSWER_PROMPT}
    config_class = LongContextConfig

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _State(None, [], 1)

    def _copy_state(self) -> _State:
        return self._state.copy()

    def _set_state(self, state: _State) -> None:
        self._state = state.copy()

    def _next_version(self, old: Variable, lines: list[tuple[str, str]], date: str) -> Variable:
        text = "\n".join(line for line, _ in lines)
        refs = [ref for _, ref in lines]
        return old.next(text, meta={"source_refs": refs, "date": date, "turns": len(lines)})

    def on_turn(self, message: Variable, turn: Turn) -> None:
        state = self._state
        line = (turn.line(), message.ref)
        key = f"turn:{turn.dia_id}"
        if state.record is None:
            with self.step(OpKind.CREATE, "long_context.create", inputs=[message]) as step:
                var = self.memory(
                    f"context:{self.store_id}:{state.generation}",
                    turn.line(),
                    [message.ref],
                    turn.date,
                    turns=1,
                )
                state.record = step.output(var)
                state.lines = [line]
        else:
            old = state.record
            with self.step(
                OpKind.UPDATE, "long_context.memory_update", inputs=[old, message]
            ) as step:
                lines = [*state.lines, line]
                if step.faulted("lossy_update", key):
                    lines = self._lose_one(lines, key)
                state.record = step.output(self._next_version(old, lines, turn.date))
                state.lines = lines
        if self._tokens(state.lines) > self.config.window_tokens:
            self._trim(turn)

    def _lose_one(self, lines: list[tuple[str, str]], key: str) -> list[tuple[str, str]]:
        """Drop one older line that carries evidence (a lossy merge)."""
        victims = [
            i for i, (text, ref) in enumerate(lines[:-1]) if self.aims("lossy_update", text, [ref])
        ]
        if not victims:
            return lines
        assert self.faults is not None
        drop = victims[self.faults.pick("lossy_update", key, len(victims))]
        return [item for i, item in enumerate(lines) if i != drop]

    @staticmethod
    def _tokens(lines: list[tuple[str, str]]) -> int:
        return sum(count_tokens(text) for text, _ in lines)

    def _trim(self, turn: Turn) -> None:
        state = self._state
        old = state.record
        assert old is not None
        with self.step(OpKind.UPDATE, "long_context.trim", inputs=[old]) as step:
            oracle = step.oracle
            lines = list(state.lines)
            total = self._tokens(lines)
            budget = self.config.window_tokens
            # Oldest first; the oracle keeps the lines carrying the case's evidence.
            order = [
                i
                for i, (text, ref) in enumerate(lines)
                if oracle is None or not oracle.carried(VarInfo("", text, frozenset([ref])))
            ]
            removed: set[int] = set()
            for i in order:
                if total <= budget or len(removed) == len(lines) - 1:
                    break
                total -= count_tokens(lines[i][0])
                removed.add(i)
            lines = [item for i, item in enumerate(lines) if i not in removed]
            state.record = step.output(self._next_version(old, lines, turn.date))
            state.lines = lines

    def live_records(self) -> list[Variable]:
        record = self._state.record
        return [record] if record is not None else []

    def remove_record(self, record: Variable) -> None:
        self._state.record = None
        self._state.lines = []
        self._state.generation += 1

    def answer(self, query: Variable, question: Question, case_id: str) -> Variable:
        records = self.live_records()
        with self.step(
            OpKind.RETRIEVE,
            "long_context.retrieve",
            inputs=[query, *records],
            case_id=case_id,
            carry_inputs=records,
        ) as step:
            chosen = list(records)
            aimed = carrying(records, self.case_oracle(question, case_id))
            if aimed and step.faulted("retrieval_miss", f"case:{case_id}"):
                chosen = []
            candidates = step.output(candidates_variable(f"candidates:{case_id}", chosen, {}))
        lines: list[Line] = []
        for record in chosen:
            refs = (record.meta or {}).get("source_refs", [])
            for text, ref in zip(str(record.value).splitlines(), refs, strict=False):
                lines.append((text, (ref,)))
        with self.step(
            OpKind.ASSEMBLE, "long_context.assemble", inputs=[candidates], case_id=case_id
        ) as step:
            cut = truncate_before_evidence(lines, self.case_oracle(question, case_id))
            if cut != lines and step.faulted("truncate_context", f"case:{case_id}"):
                lines = cut
            context = step.output(context_variable(case_id, lines))
        return self.generate_answer(
            "long_context.answer", query, context, [text for text, _ in lines], question, case_id
        )

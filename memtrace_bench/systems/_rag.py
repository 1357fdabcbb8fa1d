"""The RAG system: a token-counted buffer of turns, chunked into documents, top-k retrieval.

Ops per turn: ``rag.buffer_update`` (``create`` of the buffer, then ``update``); when the
buffer holds ``chunk_tokens`` or the session ends: ``rag.chunk`` (``extract``: the buffer
becomes a document, and the buffer is emptied) and ``rag.add`` (``create``: the document stored
as a record). Per question: ``rag.retrieve`` (BM25 over the documents by default; cosine over
the engine's embeddings with ``retriever="embedding"``), ``rag.assemble``, ``rag.answer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from memtrace_bench.systems._base import (
    Line,
    MemorySystem,
    SystemConfig,
    candidates_variable,
    carrying,
    context_variable,
    dense_search,
    truncate_before_evidence,
)
from memtrace_bench.systems._workload import Question, Session, Turn
from memtrace_otel.attribution._tokens import bm25_index, count_tokens
from memtrace_otel.instrumentation import Variable
from memtrace_otel.semconv import Category, OpKind

ANSWER_PROMPT = """Answer the question using only the retrieved conversation excerpts below.
Each line is "[date] speaker: message"; resolve relative dates against the line's date.
If the excerpts do not contain the answer, say "I don't know". Answer in a few words.

Excerpts:
{context}

Question: {question}
Answer:"""


@dataclass
class RagConfig(SystemConfig):
    """Chunk size, top-k and the retriever (``bm25`` or ``embedding``)."""

    chunk_tokens: int = 110
    top_k: int = 3
    retriever: str = "bm25"

    def __post_init__(self) -> None:
        if self.retriever not in ("bm25", "embedding"):
            raise ValueError(f"retriever must be 'bm25' or 'embedding', got {self.retriever!r}")


@dataclass
class _State:
    buffer: Variable | None
    lines: list[tuple[str, str]]
    docs: dict[str, Variable]
    chunks: int

    def copy(self) -> _State:
        return _State(self.buffer, list(self.lines), dict(self.docs), self.chunks)


class RagSystem(MemorySystem):
    """Chunked retrieval-augmented generation."""

    name = "rag"
    default_prompts: ClassVar[Mapping[str, str]] = {"answer": ANSWER_PROMPT}
    config_class = RagConfig

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _State(None, [], {}, 0)
        self._vectors: dict[str, list[float]] = {}

    def _copy_state(self) -> _State:
        return self._state.copy()

    def _set_state(self, state: _State) -> None:
        self._state = state.copy()

    def _buffer_version(
        self, old: Variable | None, lines: list[tuple[str, str]], date: str
    ) -> Variable:
        text = "\n".join(t for t, _ in lines)
        meta = {"source_refs": [r for _, r in lines], "date": date, "tokens": count_tokens(text)}
        if old is None:
            return Variable(f"buffer:{self.store_id}", 1, text, Category.MEMORY, meta)
        return old.next(text, meta=meta)

    def on_turn(self, message: Variable, turn: Turn) -> None:
        state = self._state
        old = state.buffer
        kind = OpKind.CREATE if old is None else OpKind.UPDATE
        inputs = [message] if old is None else [old, message]
        with self.step(kind, "rag.buffer_update", inputs=inputs) as step:
            lines = [*state.lines, (turn.line(), message.ref)]
            key = f"turn:{turn.dia_id}"
            victims = [
                i
                for i, (text, ref) in enumerate(lines[:-1])
                if self.aims("lossy_update", text, [ref])
            ]
            if victims and step.faulted("lossy_update", key):
                assert self.faults is not None
                drop = victims[self.faults.pick("lossy_update", key, len(victims))]
                lines = [item for i, item in enumerate(lines) if i != drop]
            state.buffer = step.output(self._buffer_version(old, lines, turn.date))
            state.lines = lines
        if count_tokens(str(state.buffer.value)) >= self.config.chunk_tokens:
            self._flush(turn.date)

    def on_session_end(self, session: Session) -> None:
        if self._state.lines:
            self._flush(session.date)

    def _flush(self, date: str) -> None:
        state = self._state
        buffer = state.buffer
        assert buffer is not None
        state.chunks += 1
        number = state.chunks
        with self.step(OpKind.EXTRACT, "rag.chunk", inputs=[buffer]) as step:
            lines = list(state.lines)
            key = f"chunk:{number}"
            victims = [i for i, (t, r) in enumerate(lines) if self.aims("drop_fact", t, [r])]
            if victims and step.faulted("drop_fact", key):
                assert self.faults is not None
                drop = victims[self.faults.pick("drop_fact", key, len(victims))]
                lines = [item for i, item in enumerate(lines) if i != drop]
            oracle = step.oracle
            if oracle is not None:
                lines = list(state.lines)  # nothing dropped
            chunk = step.output(
                self.memory(
                    f"chunk:{self.store_id}:{number}",
                    "\n".join(t for t, _ in lines),
                    [r for _, r in lines],
                    date,
                    lines=[r for _, r in lines],
                )
            )
            state.buffer = step.output(self._buffer_version(buffer, [], date))
            state.lines = []
        with self.step(OpKind.CREATE, "rag.add", inputs=[chunk]) as step:
            doc = self.memory(
                f"doc:{self.store_id}:{number}",
                chunk.value,
                (chunk.meta or {})["source_refs"],
                date,
                lines=(chunk.meta or {})["lines"],
            )
            state.docs[doc.id] = step.output(doc)

    def live_records(self) -> list[Variable]:
        return list(self._state.docs.values())

    def remove_record(self, record: Variable) -> None:
        self._state.docs.pop(record.id, None)

    def _search(self, query: str, docs: list[Variable]) -> list[tuple[str, float]]:
        k = self.config.top_k
        if self.config.retriever == "embedding":
            missing = [d for d in docs if str(d.value) not in self._vectors]
            if missing:
                vectors = self.engine.embed([str(d.value) for d in missing])
                self._vectors.update(
                    {str(d.value): v for d, v in zip(missing, vectors, strict=True)}
                )
            [qvec] = self.engine.embed([query])
            return dense_search(qvec, [(d.ref, self._vectors[str(d.value)]) for d in docs], k)
        index = bm25_index(tuple((d.ref, str(d.value)) for d in docs))
        return index.search(query, k)

    def answer(self, query: Variable, question: Question, case_id: str) -> Variable:
        docs = self.live_records()
        by_ref = {d.ref: d for d in docs}
        oracle = self.case_oracle(question, case_id)
        with self.step(
            OpKind.RETRIEVE,
            "rag.retrieve",
            inputs=[query, *docs],
            case_id=case_id,
            carry_inputs=docs,
            attributes={"gen_ai.memory.record.count": len(docs)},
        ) as step:
            hits = self._search(question.question, docs)
            chosen = [by_ref[ref] for ref, _ in hits]
            if step.oracle is not None:
                chosen = _with_evidence(chosen, carrying(docs, step.oracle), self.config.top_k)
            else:
                aimed = carrying(chosen, oracle)
                if aimed and step.faulted("retrieval_miss", f"case:{case_id}"):
                    ranked = [by_ref[ref] for ref, _ in self._search(question.question, docs)]
                    rest = [d for d in docs if d not in ranked]
                    chosen = [d for d in [*ranked, *rest] if d not in aimed][: self.config.top_k]
            candidates = step.output(
                candidates_variable(f"candidates:{case_id}", chosen, dict(hits))
            )
        lines: list[Line] = []
        for doc in chosen:
            refs = (doc.meta or {}).get("lines", [])
            for text, ref in zip(str(doc.value).splitlines(), refs, strict=False):
                lines.append((text, (ref,)))
        with self.step(
            OpKind.ASSEMBLE, "rag.assemble", inputs=[candidates], case_id=case_id
        ) as step:
            cut = truncate_before_evidence(lines, oracle)
            if cut != lines and step.faulted("truncate_context", f"case:{case_id}"):
                lines = cut
            context = step.output(context_variable(case_id, lines))
        return self.generate_answer(
            "rag.answer", query, context, [t for t, _ in lines], question, case_id
        )


def _with_evidence(chosen: list[Variable], evidence: list[Variable], k: int) -> list[Variable]:
    """The oracle retrieval: the evidence records first, then the retrieved ones, ``k`` at most
    (more when the evidence alone needs more room)."""
    out = list(evidence)
    for record in chosen:
        if record not in out:
            out.append(record)
    return out[: max(k, len(evidence))]

"""The ``evidence`` method: follow the answer's evidence through the graph to where it was lost.

For each evidence message of a failed case (from the cases file, else found by a BM25 + token
search over the store's messages, fused by reciprocal rank):

1. **Construction.** Follow the message forward, in execution order, through the ops that ran
   before the question: an op whose role is to carry content (``extract``, ``create``,
   ``update``, ``delete``) and that read a variable carrying the evidence but wrote nothing that
   still carries it is a *break*. If no carrier of the evidence is among what the question's
   retrieval searched, the earliest break is the culprit (``ExtractionError`` at an extract or
   create op, ``UpdateError``/``DeletionError`` at an update/delete).
2. **Retrieval.** Stored, but no retrieve output carries it: ``RetrievalError`` at the retrieve
   op; retrieved, but a filter dropped it: ``RetrievalError`` at that filter.
3. **Response.** In the candidates but not in the assembled context: ``ResponseError`` at the
   assemble op; in the context and the answer still wrong: ``ResponseError`` at generate.

The earliest culprit over all evidence messages wins. "Carries" is a content test: the variable's
value holds the answer tokens the evidence holds (and some of its context), or lists a carrier's
ref. Where values were not captured the graph's structure stands in for content, and the verdict
lists what it could not check and lowers its confidence.
"""

from __future__ import annotations

import functools
import heapq
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from memtrace_otel.attribution._base import blame, last_op_of_kind, no_verdict
from memtrace_otel.attribution._index import GraphIndex, graph_index, order_key
from memtrace_otel.attribution._model import Case, Verdict
from memtrace_otel.attribution._text import (
    BM25,
    content_tokens,
    recall,
    reciprocal_rank_fusion,
)
from memtrace_otel.semconv import Category, OpKind

# Ops whose job is to carry memory content forward; a loss there is their fault.
_CARRYING_KINDS = frozenset(
    {OpKind.EXTRACT.value, OpKind.CREATE.value, OpKind.UPDATE.value, OpKind.DELETE.value}
)
_RETRIEVAL_KINDS = frozenset({OpKind.RETRIEVE.value, OpKind.FILTER.value})
_CONTENT_CATEGORIES = frozenset(
    {Category.CANDIDATES.value, Category.CONTEXT.value, Category.MEMORY.value}
)
_NOT_MEMORY = frozenset({Category.QUERY.value, Category.PROMPT.value, Category.GOLD.value})
_CONTEXT_LIMIT = 6
_SHORT = 40  # content tokens: a fact or a record, not a window
_SENTENCE = re.compile(
    r"(?<=[.!?])\s+"
)  # context tokens of an evidence message used in its signature


@dataclass(frozen=True)
class Signature:
    """What a variable must hold to carry one evidence message.

    ``answer``: the gold-answer tokens the message holds; ``context``: its most salient other
    tokens; ``words``: all its content tokens.
    """

    answer: frozenset[str]
    context: frozenset[str]
    words: frozenset[str]
    ref: str

    def carries(self, text: str, *, derived: bool) -> bool:
        """Whether ``text`` still holds the evidence.

        Long values (a long-context window, a document, a candidate list) are tested segment by
        segment, so an answer word elsewhere in the window does not count. ``derived``: the
        variable names the evidence (or a carrier) among its sources, so a short paraphrase
        (an extracted fact) only needs the answer itself.
        """
        for words in _segment_words(text):
            if recall(self.words, words) >= 0.6:
                return True  # (nearly) verbatim
            if self.answer:
                if self._has_answer(words) and (not self.context or self.context & words):
                    return True
            elif len(self.context & words) >= 2:
                return True
        if derived:
            tokens = content_tokens(text)
            if len(tokens) <= _SHORT:
                found = set(tokens)
                return self._has_answer(found) if self.answer else bool(self.context & found)
        return False

    def _has_answer(self, words: frozenset[str] | set[str]) -> bool:
        return recall(self.answer, words) >= (1.0 if len(self.answer) <= 2 else 0.6)


@functools.lru_cache(maxsize=65536)
def _segment_words(text: str) -> tuple[frozenset[str], ...]:
    """Content tokens of each line and sentence of a value (JSON strings were joined by newlines).

    Cached: the same records are tested for every case of their store.
    """
    parts = (part for line in text.splitlines() for part in _SENTENCE.split(line))
    return tuple(words for words in (frozenset(content_tokens(p)) for p in parts) if words)


@dataclass
class _Trail:
    """The forward trace of one evidence message."""

    evidence: str
    carriers: set[str] = field(default_factory=set)
    breaks: list[tuple[tuple[int, int, str, str], str, str]] = field(default_factory=list)
    unchecked: bool = False


class EvidenceMethod:
    """Attribute by following the evidence (default; deterministic; no network).

    Args:
        max_evidence: how many messages the search keeps when the case names none.
    """

    name = "evidence"

    def __init__(self, *, max_evidence: int = 1) -> None:
        if max_evidence < 1:
            raise ValueError(f"max_evidence must be >= 1, got {max_evidence}")
        self.max_evidence = max_evidence
        self.bearing_only = False

    def attribute(self, G: nx.MultiDiGraph, case: Case) -> Verdict:
        index = graph_index(G)
        ops = index.ops_of(case.case_id)
        if not ops:
            return no_verdict(
                G, case, method=self.name, reason=f"case {case.case_id!r} is not in the traces"
            )
        case = _merge(case, index.case_from_graph(case.case_id))
        missing = tuple(_missing_traces(index, ops))
        unchecked: list[str] = []
        if missing:
            unchecked.append(f"{len(missing)} linked trace(s) not loaded")

        question_start = min(G.nodes[op]["start"] for op in ops)
        store = next((G.nodes[op]["store"] for op in ops if G.nodes[op].get("store")), None)
        evidence, searched = self._evidence(index, case, store)
        if not evidence:
            generate = last_op_of_kind(G, case, OpKind.GENERATE)
            if generate is None:
                return no_verdict(
                    G, case, method=self.name, reason="no evidence found and no generate op"
                )
            return blame(
                G,
                case,
                generate,
                method=self.name,
                confidence=0.3,
                reason="no evidence message could be located; blaming the answer by default",
                unchecked=[*unchecked, "evidence not located"],
                missing_traces=missing,
            )
        if searched:
            unchecked.append("evidence located by search, not given")

        culprits: list[tuple[tuple[int, int, str, str], str, str, str]] = []
        signatures = {ref: _signature(G, ref, case.gold_answers) for ref in evidence}
        # Follow the messages that hold the answer itself when there are any: a message that
        # only sets the scene (e.g. "I moved to Helsinki" for "where did she live before?") has
        # no content test strong enough to tell a loss from a rewrite.
        bearing = [ref for ref in evidence if signatures[ref].answer]
        searched_records = set(_searched(index, ops))
        for ref in (bearing or evidence) if self.bearing_only else evidence:
            signature = signatures[ref]
            trail = self._trace_construction(
                index, ref, signature, question_start, set(ops), searched_records
            )
            if trail.unchecked:
                unchecked.append(f"values of {ref}'s descendants not captured")
            found = self._locate(index, case, ops, trail, signature)
            if found is not None:
                op, why = found
                culprits.append((order_key(G.nodes[op]), op, ref, why))
        if culprits:
            _, op, ref, why = min(culprits)
        else:
            generate = last_op_of_kind(G, case, OpKind.GENERATE)
            if generate is None:
                return no_verdict(
                    G,
                    case,
                    method=self.name,
                    reason="evidence reached the context but there is no generate op",
                )
            op, ref, why = (
                generate,
                evidence[0],
                "the evidence reached the answer's context, yet the answer is wrong",
            )
        confidence = 0.9 - 0.2 * bool(unchecked) - 0.2 * bool(missing) - 0.1 * searched
        return blame(
            G,
            case,
            op,
            method=self.name,
            reason=f"{ref}: {why}",
            confidence=max(confidence, 0.1),
            evidence_refs=evidence,
            unchecked=sorted(set(unchecked)),
            missing_traces=missing,
        )

    # -- evidence ------------------------------------------------------------------------------
    def _evidence(self, index: GraphIndex, case: Case, store: str | None) -> tuple[list[str], bool]:
        G = index.G
        given = [ref for ref in case.evidence_refs if ref in G]
        if given:
            return given, False
        candidates = index.store_messages.get(store, []) if store is not None else []
        if not candidates:
            candidates = [m for ms in index.store_messages.values() for m in ms]
        texts = [G.nodes[m].get("value") or "" for m in candidates]
        if not any(texts):
            return [], True
        query = content_tokens(" ".join([case.question, *case.gold_answers]))
        docs = [content_tokens(t) for t in texts]
        bm25 = BM25(docs).ranking(query)
        gold = [content_tokens(g) for g in case.gold_answers]
        overlap = sorted(
            (i for i, d in enumerate(docs) if any(recall(g, d) > 0 for g in gold)),
            key=lambda i: (-max((recall(g, docs[i]) for g in gold), default=0.0), i),
        )
        fused = reciprocal_rank_fusion([bm25, overlap])
        return [candidates[i] for i in fused[: self.max_evidence]], True

    # -- construction ----------------------------------------------------------------------------
    def _trace_construction(
        self,
        index: GraphIndex,
        evidence: str,
        signature: Signature,
        before: int,
        case_ops: set[str],
        searched: set[str],
    ) -> _Trail:
        """Follow ``evidence`` forward through the ops that ran before the question."""
        G = index.G
        trail = _Trail(evidence, carriers={evidence})
        queue: list[tuple[tuple[int, int, str, str], str]] = []
        seen_ops: set[str] = set()

        def push_readers(var: str) -> None:
            for op in index.readers(var):
                data = G.nodes[op]
                if op in seen_ops or op in case_ops or data["start"] >= before:
                    continue
                seen_ops.add(op)
                heapq.heappush(queue, (order_key(data), op))

        push_readers(evidence)
        while queue:
            key, op = heapq.heappop(queue)
            data = G.nodes[op]
            if data["kind"] in _RETRIEVAL_KINDS:
                # A search while writing memory (mem0's per-fact lookup) reads what is stored;
                # its candidates are not new copies of the evidence.
                continue
            carrying_outputs = []
            for out in index.outputs(op):
                verdict = _carries(G, out, signature, trail.carriers)
                if verdict is None:
                    trail.unchecked = True
                    verdict = True  # structure stands in for content
                if verdict:
                    carrying_outputs.append(out)
            if carrying_outputs:
                for out in carrying_outputs:
                    trail.carriers.add(out)
                    push_readers(out)
            elif data["kind"] in _CARRYING_KINDS and self._consumes(
                index, op, trail.carriers, searched
            ):
                trail.breaks.append((key, op, _break_reason(G, op)))
        return trail

    @staticmethod
    def _consumes(index: GraphIndex, op: str, carriers: set[str], searched: set[str]) -> bool:
        """Whether ``op`` was the last holder of a carrier it read.

        A stored record that an op merely consults (mem0's update decision reads the existing
        memories) lives on; only the op that writes its next version, or the op that consumes
        an intermediate (a fact, a buffer) nobody else carries forward, can lose it.
        """
        for var in index.inputs(op):
            if var not in carriers or var in searched:
                continue
            successor = index.next_version(var)
            if successor is None or index.writer(successor) == op:
                return True
        return False

    def _locate(
        self, index: GraphIndex, case: Case, ops: list[str], trail: _Trail, signature: Signature
    ) -> tuple[str, str] | None:
        """The op where this evidence was lost, or ``None`` if it reached the context."""
        G = index.G
        retrievals = [op for op in ops if G.nodes[op]["kind"] == OpKind.RETRIEVE]
        searched = _searched(index, ops)
        stored = [
            v for v in searched if v in trail.carriers or _carries(G, v, signature, trail.carriers)
        ]
        if retrievals and not stored:
            if trail.breaks:
                _, op, why = min(trail.breaks)
                return op, why
            if len(trail.carriers) == 1:
                return (
                    None
                    if not retrievals
                    else (retrievals[0], "the evidence was never stored, and no op dropped it")
                )
            return retrievals[0], "the evidence was stored but not searchable by the retrieval"

        # Retrieval and response: follow the carriers through the case's own ops.
        carriers = set(trail.carriers) | set(stored)
        reached_context = False
        first_retrieve_miss: str | None = None
        for op in ops:
            data = G.nodes[op]
            kind = data["kind"]
            if kind in (OpKind.GENERATE, OpKind.JUDGE):
                continue
            reads = [v for v in index.inputs(op) if v in carriers]
            outs = index.outputs(op)
            carrying = [o for o in outs if _carries(G, o, signature, carriers) is not False]
            if kind == OpKind.RETRIEVE:
                if carrying:
                    carriers.update(carrying)
                elif first_retrieve_miss is None:
                    first_retrieve_miss = op
                continue
            if not reads:
                continue
            if carrying:
                carriers.update(carrying)
                if kind == OpKind.ASSEMBLE:
                    reached_context = True
            elif not any(G.nodes[o].get("category") in _CONTENT_CATEGORIES for o in outs):
                continue  # a check (e.g. a sufficiency decision), not a content transformation
            elif kind == OpKind.FILTER:
                return op, "a filter dropped the retrieved evidence"
            elif kind == OpKind.ASSEMBLE:
                return op, "the retrieved evidence was left out of the assembled context"
        retrieved = any(
            o in carriers
            for op in ops
            if G.nodes[op]["kind"] == OpKind.RETRIEVE
            for o in index.outputs(op)
        )
        if retrievals and not retrieved:
            return first_retrieve_miss or retrievals[0], "the evidence was stored but not retrieved"
        if not reached_context and any(G.nodes[op]["kind"] == OpKind.ASSEMBLE for op in ops):
            assemble = next(op for op in ops if G.nodes[op]["kind"] == OpKind.ASSEMBLE)
            return assemble, "the retrieved evidence was left out of the assembled context"
        return None


def _searched(index: GraphIndex, ops: list[str]) -> list[str]:
    """The records the case's retrieve ops searched (their inputs, less query and prompt)."""
    G = index.G
    return [
        v
        for op in ops
        if G.nodes[op]["kind"] == OpKind.RETRIEVE
        for v in index.inputs(op)
        if G.nodes[v].get("category") not in _NOT_MEMORY
    ]


def _merge(given: Case, traced: Case) -> Case:
    """The cases file wins; the traces fill what it leaves out."""
    return Case(
        case_id=given.case_id,
        question=given.question or traced.question,
        gold_answers=given.gold_answers or traced.gold_answers,
        evidence_refs=given.evidence_refs,
        verdict=given.verdict or traced.verdict,
        prediction=given.prediction or traced.prediction,
        source=given.source,
    )


def _signature(G: nx.MultiDiGraph, ref: str, gold_answers: Iterable[str]) -> Signature:
    text = _text(G.nodes[ref].get("value")) or ""
    words = content_tokens(text)
    answer: set[str] = set()
    for gold in gold_answers:
        answer.update(t for t in content_tokens(gold) if t in words)
    context = [t for t in dict.fromkeys(words) if t not in answer and not t.isdigit()]
    context.sort(key=lambda t: (-len(t), t))  # longer words are rarer: a cheap salience proxy
    return Signature(frozenset(answer), frozenset(context[:_CONTEXT_LIMIT]), frozenset(words), ref)


def _carries(G: nx.MultiDiGraph, var: str, signature: Signature, carriers: set[str]) -> bool | None:
    """Whether ``var`` carries the evidence; ``None`` when its value was not captured."""
    data = G.nodes[var]
    if data.get("deleted"):
        return False
    value = data.get("value")
    if value is None:
        return None
    if any(
        c in value
        for c in carriers
        if c != signature.ref or data.get("category") == Category.CANDIDATES
    ):
        return True
    # Content decides: a memory whose meta names the evidence as its source but lost the
    # content does not carry it.
    meta = data.get("meta")
    sources = meta.get("source_refs") if isinstance(meta, dict) else None
    derived = isinstance(sources, list) and any(
        ref == signature.ref or ref in carriers for ref in sources if isinstance(ref, str)
    )
    return signature.carries(_text(value), derived=derived)


def _text(value: str | None) -> str:
    if value is None:
        return ""
    try:
        decoded = json.loads(value)
    except (ValueError, TypeError):
        return value
    return "\n".join(_strings(decoded)) if not isinstance(decoded, str) else decoded


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
    elif value is not None:
        yield str(value)


def _break_reason(G: nx.MultiDiGraph, op: str) -> str:
    kind = G.nodes[op]["kind"]
    if kind == OpKind.DELETE:
        return "the memory holding the evidence was deleted"
    if kind == OpKind.UPDATE:
        return "an update overwrote the evidence"
    return "the evidence was not extracted into memory"


def _missing_traces(index: GraphIndex, ops: list[str]) -> list[str]:
    """Traces the case's ops (and what they read) link to but that are not loaded."""
    if not index.missing_traces:
        return []
    G = index.G
    missing: set[str] = set()
    for op in ops:
        for link in G.nodes[op].get("links", ()):
            if link["trace_id"] in index.missing_traces:
                missing.add(link["trace_id"])
    return sorted(missing)


__all__ = ["EvidenceMethod", "Signature"]

"""The ``evidence`` method: follow what the right answer needs through the graph to where it was lost.

1. **The clue.** With an expected answer (cases file, feedback, a judge op's gold variable) the
   evidence is the store message that holds it (or the refs the case names). Without one, the
   wrong answer is the clue: the message the question asks about is searched for among the
   store's messages and the records derived from them, passing over the messages the wrong
   answer came from. When neither finds a message the verdict abstains.
2. **Construction.** The evidence is followed forward, in execution order, through the ops that
   ran before the question. A variable *carries* it when it keeps the answer-bearing tokens (the
   answer when known, else the names, numbers and dates the question does not already name: a
   rewrite that swapped the city or dropped the date does not carry). A carrier dies when its
   record gets a next version that does not carry it (an update, a tombstone) or, for an
   intermediate (a fact, a buffer, a decision), when its last consumer ran. The evidence is
   *lost* when no carrier survives to the question (none is searchable then, none is read by
   the question's ops); the op that killed the last carrier is the culprit: content that
   survived on another branch is not lost where one branch dropped it.
3. **Retrieval.** Stored and searchable (contract 4b: a live record of the store before the
   retrieve started, whether or not the retrieve lists it), but no candidates carry it:
   ``RetrievalError`` at the retrieve (also when it read a stale version while the newer one
   that carries it was live). Retrieved but a filter kept nothing that carries it (a filter's
   dropped list, category ``other``, never carries): ``RetrievalError`` at the filter.
4. **Response.** Not in the assembled context: ``ResponseError`` at the assemble op. In the
   context and the answer still wrong: ``ResponseError`` at the generate op.

Every fact of a multi-fact question is followed; the earliest culprit over them wins.

**Without captured values** structure stands in where it decides: tombstones, ops that wrote
nothing, stale versions read. A content loss cannot be seen, so where only content would decide
the verdict abstains and says which values were missing.

**Confidence** is the product of how sure the evidence is (given, found by its answer, or
found by the question alone) and how the culprit was decided (a content test, structure, or
the default of blaming the answer); see ``docs/attribution.md`` for the calibration.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import networkx as nx

from memtrace_otel.attribution._base import blame, last_op_of_kind, no_verdict
from memtrace_otel.attribution._index import GraphIndex, graph_index, order_key
from memtrace_otel.attribution._model import Case, Verdict
from memtrace_otel.attribution._semantic import model_dir
from memtrace_otel.attribution._text import (
    Corpus,
    asks_for_time,
    content_tokens,
    entity_tokens,
    has_tokens,
    is_non_answer,
    recall,
    segment_words,
)
from memtrace_otel.semconv import Category, OpKind

# Ops whose job is to carry memory content forward; a loss there is their fault.
_CARRYING_KINDS = frozenset(
    {OpKind.EXTRACT.value, OpKind.CREATE.value, OpKind.UPDATE.value, OpKind.DELETE.value}
)
# Ops that consult memory without consuming it (mem0's per-fact lookup while writing).
_CONSULTING_KINDS = frozenset({OpKind.RETRIEVE.value})
# Ops that consume a carrier while memory is written (a dedupe filter can drop a fact).
_CONSUMING_KINDS = _CARRYING_KINDS | {OpKind.FILTER.value}
_CONTENT_CATEGORIES = frozenset(
    {Category.CANDIDATES.value, Category.CONTEXT.value, Category.MEMORY.value}
)
_TOPIC_LIMIT = 8
_SHORT = 40  # content tokens: a fact or a record, not a window

# How sure the evidence is, by how it was found.
_SURE_GIVEN = 0.95
_SURE_GOLD = 0.9
_SURE_QUESTION = 0.8  # found by the question alone, well ahead of the runner-up
_SURE_QUESTION_UNCLEAR = 0.55
_SURE_RUNNER_UP = 0.45
_UNEXPLAINED_WRONG = 0.6
_SURE_STALE = 0.7  # a stale read without the evidence followed: structure, not content
_CLEAR_MARGIN = 0.1  # the best match's score lead over the runner-up, relative
_CLOSE = 0.5  # runners-up within this share of the best score stay in the running
_FOUND_BY = {
    "given": "",
    "answer": " (found by the expected answer)",
    "question": " (found by the question; the wrong answer's sources passed over)",
}
# How sure the culprit is, by what decided it.
_BY_CONTENT = "content"
_BY_STRUCTURE = "structure"
_BY_DEFAULT = "default"  # the evidence reached the context: the answer is to blame
_STRUCTURE_UNSEEN = 0.3
_DEFAULT_WHY = "the evidence reached the answer's context, yet the answer is wrong"
_SURE_BY = {_BY_CONTENT: 0.95, _BY_STRUCTURE: 0.85, _BY_DEFAULT: 0.85}


@dataclass(frozen=True)
class Signature:
    """What a variable must hold to carry one evidence message.

    Attributes:
        ref: the evidence message.
        key: the answer-bearing tokens a carrier must keep (the answer's tokens found in the
            evidence, else its names, numbers and dates the question does not name).
        strict: the key tokens that must all be kept (names, numbers, dates).
        gold: the expected answer's tokens (a carrier holding them carries even when the
            evidence phrased the answer otherwise, e.g. "yesterday" resolved to a date).
        gold_strict: the names, numbers and dates among ``gold``.
        topic: other salient tokens of the evidence (what the fact is about).
        words: all the evidence's content tokens.
    """

    ref: str
    key: frozenset[str]
    strict: frozenset[str]
    gold: frozenset[str]
    gold_strict: frozenset[str]
    topic: frozenset[str]
    words: frozenset[str]
    dated: bool = False  # a time question: a record's date (meta) is part of what it says
    loose: bool = False  # the key is a guess (no answer known, no names): any third will do

    def carries(self, text: str, *, derived: bool) -> bool:
        """Whether ``text`` still holds the evidence.

        Long values (a window, a document, a candidate list) are tested line by line and
        sentence by sentence, so an answer word elsewhere in the window does not count.
        ``derived``: the variable names the evidence (or a carrier) among its sources, so it
        need not repeat what the fact is about, only the answer-bearing tokens.
        """
        segments = segment_words(text)
        if derived and len(content_tokens(text)) <= _SHORT:
            segments = (*segments, frozenset().union(*segments))
        for words in segments:
            about = derived or bool(self.topic & words) or not self.topic
            if about and has_tokens(self.gold, self.gold_strict, words):
                return True
            if self.key:
                if about and has_tokens(self.key, self.strict, words):
                    return True
                if about and self.loose and 3 * len(self.key & words) >= len(self.key):
                    return True
            elif recall(self.words, words) >= 0.6 or len(self.topic & words) >= 2:
                return True
        return False


@dataclass
class _Evidence:
    refs: list[str]
    sure: float
    how: str  # "given", "answer" or "question"
    alternates: list[str] = field(default_factory=list)  # runners-up of a question search


@dataclass
class _Finding:
    op: str
    why: str
    by: str  # _BY_CONTENT, _BY_STRUCTURE or _BY_DEFAULT
    unchecked: list[str] = field(default_factory=list)


@dataclass
class _Scope:
    """What every evidence message of one case is followed against."""

    index: GraphIndex
    ops: list[str]
    start: int
    store: str | None
    live: dict[str, str]  # record id -> live ref when the question started
    read_by_case: set[str]


class EvidenceMethod:
    """Attribute by following the evidence (default; deterministic; no network).

    Args:
        max_evidence: how many messages holding the expected answer the search keeps when the
            case names none (without an expected answer the best match is followed, and its
            runners-up only when the answer declined).
    """

    name = "evidence"

    def __init__(self, *, max_evidence: int = 1) -> None:
        if max_evidence < 1:
            raise ValueError(f"max_evidence must be >= 1, got {max_evidence}")
        self.max_evidence = max_evidence
        # A MEMTRACE_EMBEDDING_MODEL naming no model is a configuration error: raise it here,
        # not once per case (the model itself loads on first use, without an expected answer).
        model_dir()

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
        scope = _scope(index, ops)
        evidence = self._evidence(scope, case)
        if evidence.how in ("question", "none"):
            # No expected answer to follow: a stale version read by the question's retrieval
            # is decided by structure alone (contract 4b).
            stale = _stale_read(scope)
            if stale is not None:
                op, why = stale
                return blame(
                    G,
                    case,
                    op,
                    method=self.name,
                    reason=why,
                    confidence=_SURE_STALE,
                    unchecked=[*unchecked, "expected answer"],
                    missing_traces=missing,
                )
        if not evidence.refs:
            return self._without_evidence(scope, case, unchecked, missing)
        if evidence.how != "given":
            unchecked.append("evidence located by search, not given")

        findings: list[tuple[tuple[int, int, str, str], str, _Finding]] = []
        for ref in evidence.refs:
            others = [r for r in evidence.refs if r != ref]
            signature = _signature(scope, ref, case, others)
            if signature is None:
                continue
            finding = self._follow(scope, case, signature)
            findings.append((order_key(G.nodes[finding.op]), ref, finding))
        if not findings:
            return no_verdict(
                G,
                case,
                method=self.name,
                reason="the evidence's values were not captured: cannot tell what it said "
                f"(capture memory values for store {scope.store!r})",
                unchecked=(*unchecked, *(f"value of {r}" for r in evidence.refs)),
                missing_traces=missing,
            )
        _, ref, finding = min(findings, key=lambda t: t[0])
        sure = evidence.sure
        if evidence.how == "question" and case.prediction and not _declined(case):
            # A wrong value came from somewhere the search did not explain: the message the
            # question matches is a weaker clue than when the answer simply declined.
            sure *= _UNEXPLAINED_WRONG
        if evidence.how == "question" and finding.by == _BY_DEFAULT and _declined(case):
            # The best match reached the context, yet the answer declined: either that message
            # is not what the question needs, or the answer ignored it, and without the expected
            # answer nothing tells which. A close runner-up lost on the way is the likelier
            # evidence; with none, abstain.
            for alternate in evidence.alternates:
                signature = _signature(scope, alternate, case)
                other = self._follow(scope, case, signature) if signature else None
                if other is not None and other.by != _BY_DEFAULT and not other.unchecked:
                    ref, finding, sure = alternate, other, _SURE_RUNNER_UP
                    break
            else:
                return no_verdict(
                    G,
                    case,
                    method=self.name,
                    reason=f"{ref}, the message that best matches the question, reached the "
                    "answer's context and the answer declined: without the expected answer "
                    "nothing tells whether the answer ignored it or the question needs another "
                    "message (give the expected answer with the feedback)",
                    evidence_refs=(ref,),
                    unchecked=tuple(sorted({*unchecked, "expected answer"})),
                    missing_traces=missing,
                )
        unchecked.extend(finding.unchecked)
        if finding.unchecked and finding.by != _BY_STRUCTURE:
            return no_verdict(
                G,
                case,
                method=self.name,
                reason=f"{ref}: only content could decide ({finding.why}?), and the values "
                f"on its path were not captured (capture memory values for store "
                f"{scope.store!r})",
                evidence_refs=tuple(evidence.refs),
                unchecked=tuple(sorted(set(unchecked))),
                missing_traces=missing,
            )
        confidence = sure * _SURE_BY[finding.by] - 0.2 * bool(missing)
        if finding.unchecked:
            # Structure decided, but an unseen value upstream may have lost the evidence first.
            confidence = min(confidence, _STRUCTURE_UNSEEN)
        return blame(
            G,
            case,
            finding.op,
            method=self.name,
            reason=f"{ref}{_FOUND_BY[evidence.how]}: {finding.why}",
            confidence=max(confidence, 0.1),
            evidence_refs=evidence.refs,
            unchecked=sorted(set(unchecked)),
            missing_traces=missing,
        )

    def locate(self, G: nx.MultiDiGraph, case: Case) -> tuple[list[str], bool]:
        """The case's evidence messages, and whether they were found by search (not given)."""
        index = graph_index(G)
        ops = index.ops_of(case.case_id)
        if not ops:
            return [], False
        found = self._evidence(
            _scope(index, ops), _merge(case, index.case_from_graph(case.case_id))
        )
        return found.refs, found.how != "given"

    # -- the clue -----------------------------------------------------------------------------
    def _evidence(self, scope: _Scope, case: Case) -> _Evidence:
        G = scope.index.G
        given = [ref for ref in case.evidence_refs if ref in G]
        if given:
            return _Evidence(given, _SURE_GIVEN, "given")
        candidates, corpus = _store_messages(scope)
        if not candidates:
            return _Evidence([], 0.0, "none")
        texts = corpus.texts
        golds = [g for g in case.gold_answers if not is_non_answer(g)]
        if golds:
            bearing = [
                i
                for i, t in enumerate(texts)
                if any(_holds_answer(g, t, G.nodes[candidates[i]]) for g in golds)
            ]
            if bearing:
                ranked = _rank(corpus, case.question, among=bearing)
                return _Evidence(
                    [candidates[i] for i, _ in ranked[: self.max_evidence]], _SURE_GOLD, "answer"
                )
            if case.gold_answers:
                # The answer is phrased otherwise in the messages (paraphrase): the question
                # and the answer together still point at the message.
                ranked = _rank(corpus, " ".join([case.question, *golds]))
                return _Evidence(
                    [candidates[i] for i, _ in ranked[: self.max_evidence]],
                    _SURE_QUESTION_UNCLEAR,
                    "answer",
                )
        # No expected answer: the question points at the message; the wrong answer's own
        # source is passed over (it is what the answer used, not what it should have used).
        wrong = case.prediction or ""
        avoid: set[int] = set()
        if wrong and not is_non_answer(wrong):
            wrong_tokens = frozenset(content_tokens(wrong))
            avoid = {i for i, words in enumerate(corpus.words) if wrong_tokens <= words}
        votes = _record_votes(scope, case.question)
        scored = _rank(corpus, case.question, records=votes, meaning=True)
        # A message is in the running only through a word that tells messages apart, its own
        # or its records', or through its meaning (near the question: a paraphrase).
        telling = corpus.telling(case.question)
        near = {i for i, _ in corpus.meaning_ranking(case.question)}
        scored = [
            (i, score)
            for i, score in scored
            if i not in avoid and (corpus.words[i] & telling or i in votes or i in near)
        ]
        if not scored:
            return _Evidence([], 0.0, "none")
        best = scored[0][1]
        runner_up = scored[1][1] if len(scored) > 1 else 0.0
        margin = (best - runner_up) / best if best > 0 else 0.0
        close = [candidates[i] for i, score in scored[1:3] if score >= _CLOSE * best]
        sure = _SURE_QUESTION if margin >= _CLEAR_MARGIN else _SURE_QUESTION_UNCLEAR
        if not (corpus.words[scored[0][0]] & telling or scored[0][0] in votes):
            sure = _SURE_QUESTION_UNCLEAR  # found by meaning alone: a hint, not proof
        return _Evidence([candidates[scored[0][0]]], sure, "question", close)

    def _without_evidence(
        self, scope: _Scope, case: Case, unchecked: list[str], missing: tuple[str, ...]
    ) -> Verdict:
        """No evidence message: the wrong answer alone may still show who made it up."""
        G = scope.index.G
        generate = last_op_of_kind(G, case, OpKind.GENERATE)
        captured = any(
            G.nodes[m].get("value") for ms in scope.index.store_messages.values() for m in ms
        )
        wrong = case.prediction or ""
        if generate is not None and wrong and not is_non_answer(wrong):
            inputs = [G.nodes[v].get("value") for v in scope.index.inputs(generate)]
            context = [v for v in inputs if v is not None]
            if context and captured:
                words = frozenset(content_tokens(wrong))
                strict = entity_tokens(wrong)
                if not any(
                    has_tokens(words, strict, seg)
                    for v in context
                    for seg in segment_words(_text(v))
                ):
                    return blame(
                        G,
                        case,
                        generate,
                        method=self.name,
                        confidence=0.5,
                        reason="the wrong answer is in nothing the answer's op read: it made it up",
                        unchecked=[*unchecked, "evidence not located"],
                        missing_traces=missing,
                    )
        if not captured:
            reason = (
                "values not captured: the question's evidence cannot be located "
                f"(capture memory values for store {scope.store!r})"
            )
            unchecked = [*unchecked, "message values", "record values", "context values"]
        else:
            reason = (
                "no message holds the expected answer or matches the question, and the wrong "
                "answer does not show where it came from"
            )
            unchecked = [*unchecked, "evidence not located"]
        return no_verdict(
            G,
            case,
            method=self.name,
            reason=reason,
            unchecked=tuple(unchecked),
            missing_traces=missing,
        )

    # -- following one fact --------------------------------------------------------------------
    def _follow(self, scope: _Scope, case: Case, signature: Signature) -> _Finding:
        trail = _construction(scope, signature)
        if trail.lost is not None:
            op, why, by = trail.lost
            return _Finding(op, why, by, trail.unchecked)
        generate = last_op_of_kind(scope.index.G, case, OpKind.GENERATE) or scope.ops[-1]
        return self._after_storage(scope, signature, trail, generate)

    def _after_storage(
        self, scope: _Scope, signature: Signature, trail: _Trail, generate: str
    ) -> _Finding:
        """Follow the stored carriers through the question's own ops.

        Values construction could not check matter only until the evidence is seen, by its
        content, among the question's candidates or in its context.
        """
        index, G = scope.index, scope.index.G
        carriers = set(trail.carriers)
        unchecked = list(trail.unchecked)
        retrieves = [op for op in scope.ops if G.nodes[op]["kind"] == OpKind.RETRIEVE]
        stale = _stale_reads(scope, trail)
        first_miss: str | None = None
        reached_context = False
        retrieved = False
        for op in scope.ops:
            data = G.nodes[op]
            kind = data["kind"]
            if kind in (OpKind.GENERATE, OpKind.JUDGE):
                continue
            reads = [v for v in index.inputs(op) if v in carriers]
            if kind != OpKind.RETRIEVE and not reads:
                continue  # reads no carrier: its outputs' values do not matter here
            outs = index.outputs(op)
            if kind == OpKind.FILTER:
                outs = _kept(G, index, op, reads)
            carrying, unknown = [], False
            for o in outs:
                verdict = _carries(G, o, signature, carriers)
                if verdict is None:
                    unknown = True
                    unchecked.append(f"value of {o}")
                elif verdict:
                    carrying.append(o)
            if kind == OpKind.RETRIEVE:
                if carrying:
                    carriers.update(carrying)
                    if not retrieved:
                        unchecked = []  # seen by its content: what came before is settled
                    retrieved = True
                elif unknown:
                    if stale is not None:
                        return _Finding(*stale, _BY_STRUCTURE, unchecked)
                    return _Finding(generate, _DEFAULT_WHY, _BY_DEFAULT, unchecked)
                elif first_miss is None:
                    first_miss = op
                continue
            if carrying:
                carriers.update(carrying)
                if kind == OpKind.ASSEMBLE and not reached_context:
                    unchecked = []
                    reached_context = True
            elif unknown:
                return _Finding(
                    op, f"{kind} op: its output's content decides", _BY_CONTENT, unchecked
                )
            elif not any(G.nodes[o].get("category") in _CONTENT_CATEGORIES for o in outs):
                if (
                    kind == OpKind.FILTER
                    and index.outputs(op)
                    and any(
                        G.nodes[o].get("category") in _CONTENT_CATEGORIES for o in index.outputs(op)
                    )
                ):
                    return _Finding(op, "a filter kept none of the retrieved evidence", _BY_CONTENT)
                continue  # a check (a sufficiency decision), not a content transformation
            elif kind == OpKind.FILTER:
                return _Finding(op, "a filter dropped the retrieved evidence", _BY_CONTENT)
            elif kind == OpKind.ASSEMBLE:
                return _Finding(
                    op, "the retrieved evidence was left out of the assembled context", _BY_CONTENT
                )
        if retrieves and not retrieved and not reached_context:
            if stale is not None:
                return _Finding(*stale, _BY_STRUCTURE, unchecked)
            return _Finding(
                first_miss or retrieves[0],
                "the evidence was stored but not retrieved",
                _BY_CONTENT,
                unchecked,
            )
        if not reached_context:
            assemble = next(
                (op for op in scope.ops if G.nodes[op]["kind"] == OpKind.ASSEMBLE), None
            )
            if assemble is not None:
                return _Finding(
                    assemble,
                    "the retrieved evidence was left out of the assembled context",
                    _BY_CONTENT,
                    unchecked,
                )
        return _Finding(generate, _DEFAULT_WHY, _BY_DEFAULT, unchecked)


@dataclass
class _Trail:
    """The forward trace of one evidence message through construction."""

    carriers: set[str]
    lost: tuple[str, str, str] | None = None
    unchecked: list[str] = field(default_factory=list)


def _scope(index: GraphIndex, ops: list[str]) -> _Scope:
    G = index.G
    start = min(G.nodes[op]["start"] for op in ops)
    store = next((G.nodes[op]["store"] for op in ops if G.nodes[op].get("store")), None)
    read = {v for op in ops for v in index.inputs(op)}
    return _Scope(index, ops, start, store, index.live_records(store, start), read)


def _construction(scope: _Scope, signature: Signature) -> _Trail:
    """Follow the evidence forward through the ops that ran before the question.

    Carriers are the variables derived from the evidence that still hold it. The evidence
    survives when a carrier is searchable when the question starts (a live record version) or
    is read by the question's ops; otherwise the op that killed the last carrier lost it.
    """
    index, G = scope.index, scope.index.G
    trail = _Trail(carriers={signature.ref})
    # A carrier's consumers: the carrying-kind ops that read it and ran before the question.
    queue: list[tuple[tuple[int, int, str, str], str]] = []
    seen: set[str] = set()
    order: list[str] = []

    def push_readers(var: str) -> None:
        for op in index.readers(var):
            data = G.nodes[op]
            if op in seen or data.get("case") is not None or data["start"] >= scope.start:
                continue
            seen.add(op)
            heapq.heappush(queue, (order_key(data), op))

    push_readers(signature.ref)
    while queue:
        _, op = heapq.heappop(queue)
        data = G.nodes[op]
        if data["kind"] in _CONSULTING_KINDS:
            continue  # a lookup while writing reads what is stored; it makes no new copy
        order.append(op)
        outs = index.outputs(op)
        if data["kind"] == OpKind.FILTER:
            outs = _kept(G, index, op, [v for v in index.inputs(op) if v in trail.carriers])
        for out in outs:
            verdict = _carries(G, out, signature, trail.carriers)
            if verdict is None:
                trail.unchecked.append(f"value of {out}")
                verdict = not G.nodes[out].get("deleted")  # structure stands in for content
            if verdict:
                trail.carriers.add(out)
                push_readers(out)

    live_refs = set(scope.live.values())
    alive = [v for v in trail.carriers if v in live_refs or v in scope.read_by_case]
    if alive:
        return trail
    if len(order) == 0:
        return trail  # never read by any traced op: nothing to blame in construction
    # Nothing survives: the op that ended the last carrier's life lost the evidence.
    deaths: list[tuple[tuple[int, int, str, str], str, str]] = []
    for var in trail.carriers:
        death = _death(scope, var, trail.carriers)
        if death is not None:
            deaths.append((order_key(G.nodes[death[0]]), death[0], death[1]))
    if not deaths:
        return trail
    _, op, why = max(deaths)
    structural = G.nodes[op]["kind"] == OpKind.DELETE or not index.outputs(op)
    trail.lost = (op, why, _BY_STRUCTURE if structural else _BY_CONTENT)
    return trail


def _death(scope: _Scope, var: str, carriers: set[str]) -> tuple[str, str] | None:
    """The op that ended ``var``'s life as a carrier, and why.

    A version dies when its next version does not carry the evidence, unless its content had
    already been handed off: an op that derived its output from ``var`` (the output names the
    same source messages) before the next version was written was the one meant to carry it
    on (a chunker reading a buffer that is reset afterwards, by design). An intermediate with
    no next version dies with its last consumer.
    """
    index, G = scope.index, scope.index.G
    successor = index.next_version(var)
    writer = index.writer(successor) if successor is not None else None
    if successor is not None and writer is not None and G.nodes[writer]["start"] < scope.start:
        if successor in carriers:
            return None
        until = order_key(G.nodes[writer])
        handoffs = [
            op
            for op in _consumers(scope, var)
            if op != writer and order_key(G.nodes[op]) < until and _derives(G, index, op, var)
        ]
        if handoffs:
            last = max(handoffs, key=lambda op: order_key(G.nodes[op]))
            return last, _loss_reason(G, last)
        if G.nodes[successor].get("deleted"):
            return writer, "the memory holding the evidence was deleted"
        return writer, _loss_reason(G, writer)
    consumers = _consumers(scope, var)
    if consumers:
        last = max(consumers, key=lambda op: order_key(G.nodes[op]))
        return last, _loss_reason(G, last)
    return None


def _consumers(scope: _Scope, var: str) -> list[str]:
    """The ops that read ``var`` before the question to carry it on (or drop it)."""
    G = scope.index.G
    return [
        op
        for op in scope.index.readers(var)
        if G.nodes[op].get("case") is None
        and G.nodes[op]["start"] < scope.start
        and G.nodes[op]["kind"] in _CONSUMING_KINDS
    ]


def _kept(G: nx.MultiDiGraph, index: GraphIndex, op: str, reads: Iterable[str]) -> list[str]:
    """What a filter kept: its outputs of the category of what it read (contract 4b: a dropped
    list or scores, category ``other``, never carry). A filter that writes one output and no
    output of its input's category records only what it kept (older instrumentations)."""
    outs = index.outputs(op)
    categories = {G.nodes[v].get("category") for v in reads} - {Category.OTHER.value}
    kept = [o for o in outs if G.nodes[o].get("category") in categories]
    return kept if kept or len(outs) != 1 else outs


def _derives(G: nx.MultiDiGraph, index: GraphIndex, op: str, var: str) -> bool:
    """Whether an output of ``op`` says it came from ``var`` or from its source messages."""
    mine = set(_sources(G, var)) | {var}
    return any(mine & set(_sources(G, out)) for out in index.outputs(op))


def _loss_reason(G: nx.MultiDiGraph, op: str) -> str:
    kind = G.nodes[op]["kind"]
    if kind == OpKind.DELETE:
        return "the memory holding the evidence was deleted"
    if kind == OpKind.UPDATE:
        return "an update lost the evidence (overwrote, dropped or discarded it)"
    if kind == OpKind.FILTER:
        return "a filter dropped the evidence before it was stored"
    return "the evidence was not extracted into memory"


def _stale_reads(scope: _Scope, trail: _Trail) -> tuple[str, str] | None:
    """A retrieve of the question that read an older version of a record whose live version
    carries the evidence (a stale cache, a lagging replica): that retrieve's fault (contract 4b)."""
    carrying = {ref for ref in scope.live.values() if ref in trail.carriers}
    return _stale_read(scope, carrying) if carrying else None


def _stale_read(scope: _Scope, newer: set[str] | None = None) -> tuple[str, str] | None:
    """The first retrieve of the question that read or returned an older version of a record
    while a newer one (among ``newer``, default every live version) was live."""
    index, G = scope.index, scope.index.G
    live = set(scope.live.values()) if newer is None else newer
    live_by_id = {G.nodes[r].get("id"): r for r in live}
    for op in scope.ops:
        if G.nodes[op]["kind"] != OpKind.RETRIEVE:
            continue
        refs = list(index.inputs(op))
        for out in index.outputs(op):
            refs.extend(_listed_refs(G.nodes[out].get("value")))
        for ref in refs:
            data = G.nodes[ref] if ref in G else None
            if data is None or ref in live or data.get("deleted"):
                continue
            if data.get("id") in live_by_id and ref not in scope.live.values():
                current = live_by_id[data["id"]]
                return op, f"it read {ref}, a stale version, while {current} was live"
    return None


def _listed_refs(value: str | None) -> list[str]:
    if not value:
        return []
    try:
        decoded = json.loads(value)
    except (ValueError, TypeError):
        return []
    items = decoded if isinstance(decoded, list) else []
    return [
        str(item["ref"]) if isinstance(item, dict) and "ref" in item else str(item)
        for item in items
        if isinstance(item, dict | str)
    ]


def _rank(
    corpus: Corpus,
    query: str,
    *,
    among: list[int] | None = None,
    records: dict[int, float] | None = None,
    meaning: bool = False,
) -> list[tuple[int, float]]:
    """Message indexes and scores, best first: reciprocal rank of BM25 over the messages (with
    ``meaning``, fused with their rank by sentence similarity: :meth:`Corpus.hybrid_ranking`),
    plus votes from matching records (a record derived from a message often words it like the
    question does)."""
    score: dict[int, float] = {}
    if meaning:
        score.update(corpus.hybrid_ranking(query))
    else:
        for rank, (i, _) in enumerate(corpus.ranking(query)):
            score[i] = score.get(i, 0.0) + 1.0 / (rank + 1)
    for i, vote in (records or {}).items():
        score[i] = score.get(i, 0.0) + vote
    pool = among if among is not None else list(score)
    ordered = sorted(pool, key=lambda i: (-score.get(i, 0.0), i))
    return [(i, score.get(i, 0.0)) for i in ordered]


def _store_messages(scope: _Scope) -> tuple[list[str], Corpus]:
    """The store's messages with a captured value, and their corpus (built once per store)."""
    key = ("messages", scope.store)
    cached = scope.index.memo.get(key)
    if cached is None:
        index, G = scope.index, scope.index.G
        messages = index.store_messages.get(scope.store, []) if scope.store else []
        if not messages:
            messages = [m for ms in index.store_messages.values() for m in ms]
        messages = [m for m in messages if G.nodes[m].get("value")]
        cached = (messages, Corpus([_text(G.nodes[m]["value"]) for m in messages]))
        index.memo[key] = cached
    return cached


def _record_votes(scope: _Scope, question: str) -> dict[int, float]:
    """Votes for messages whose records (any version, any time) match the question."""
    position, sources, corpus = _store_records(scope)
    if not sources:
        return {}
    telling = corpus.telling(question)
    votes: dict[int, float] = {}
    ranked = [i for i, _ in corpus.ranking(question) if corpus.words[i] & telling]
    for rank, i in enumerate(ranked[:3]):
        for source in sources[i]:
            votes[position[source]] = votes.get(position[source], 0.0) + 0.5 / (rank + 1)
    return votes


def _store_records(scope: _Scope) -> tuple[dict[str, int], list[list[str]], Corpus]:
    """The memory variables derived from the store's messages, with their source messages
    (by position among the messages) and their corpus: built once per store."""
    key = ("records", scope.store)
    cached = scope.index.memo.get(key)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    index, G = scope.index, scope.index.G
    messages, _ = _store_messages(scope)
    position = {m: i for i, m in enumerate(messages)}
    texts: list[str] = []
    sources: list[list[str]] = []
    seen: set[str] = set()
    for m in messages:
        for op in index.readers(m):
            for out in index.outputs(op):
                if out in seen:
                    continue
                seen.add(out)
                value = G.nodes[out].get("value")
                if value and G.nodes[out].get("category") == Category.MEMORY:
                    texts.append(_text(value))
                    sources.append([s for s in (_sources(G, out) or [m]) if s in position])
    cached = (position, sources, Corpus(texts))
    index.memo[key] = cached
    return cached


def _sources(G: nx.MultiDiGraph, var: str) -> list[str]:
    meta = G.nodes[var].get("meta")
    sources = meta.get("source_refs") if isinstance(meta, dict) else None
    return [s for s in sources if isinstance(s, str)] if isinstance(sources, list) else []


def _holds_answer(gold: str, text: str, data: dict[str, object]) -> bool:
    words = frozenset(content_tokens(text + " " + _date_of(data)))
    return has_tokens(frozenset(content_tokens(gold)), entity_tokens(gold, anywhere=True), words)


def _date_of(data: dict[str, object]) -> str:
    meta = data.get("meta")
    if isinstance(meta, dict):
        for key in ("date", "timestamp", "time"):
            if isinstance(meta.get(key), str):
                return str(meta[key])
    return ""


def _declined(case: Case) -> bool:
    """Whether the wrong answer declined to answer ("I don't know")."""
    return case.prediction is not None and is_non_answer(case.prediction)


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


def _signature(scope: _Scope, ref: str, case: Case, others: Sequence[str] = ()) -> Signature | None:
    """What a carrier of ``ref`` must hold; ``None`` when its value was not captured.

    ``others``: the case's other evidence messages; the words ``ref`` shares with them are
    what joins the facts of a multi-fact question ("the payments team").
    """
    G = scope.index.G
    data = G.nodes[ref]
    value = data.get("value")
    if value is None:
        if not case.gold_answers:
            return None
        text = ""
    else:
        text = _text(value)
    dated = asks_for_time(case.question)
    if dated:
        text = f"{text}\n{_date_of(data)}"
    words = frozenset(content_tokens(text))
    asked = frozenset(content_tokens(case.question))
    golds = [g for g in case.gold_answers if not is_non_answer(g)]
    gold: frozenset[str] = frozenset()
    gold_strict: frozenset[str] = frozenset()
    for g in golds:  # the answer the evidence holds best
        tokens = frozenset(content_tokens(g))
        if not gold or recall(tokens, words) > recall(gold, words):
            gold, gold_strict = tokens, entity_tokens(g, anywhere=True)
    entities = entity_tokens(text)
    loose = False
    if gold and gold <= words:
        key, strict = gold, gold_strict
    elif dated:
        # The answer is a date: the message's date and any relative time ("yesterday") in
        # it; a memory that keeps the date but drops "yesterday" dates the event wrongly.
        key = frozenset(t for t in entities if t.isdigit() or t in _MONTHS) | (words & _RELATIVE)
        strict = key
    else:
        joined: set[str] = set()
        for other in others:
            joined |= words & frozenset(content_tokens(_text(G.nodes[other].get("value"))))
        joined -= _COMMON
        # The names and numbers the question does not name bear the answer (a month only
        # when the question asks when); if the question names them all, the evidence
        # confirms its premise and must keep them.
        entities = entities - _MONTHS
        key = frozenset(entities - asked) or frozenset(joined) or entities
        if not key:
            loose = True
            key = frozenset(w for w in words - asked - _COMMON if len(w) > 2)
            key = key or frozenset(words & asked)
        strict = key & entities
    topic_pool = [
        t for t in dict.fromkeys(content_tokens(text)) if t not in key and not t.isdigit()
    ]
    topic_pool.sort(key=lambda t: (t not in asked, -len(t), t))  # the question's words first
    topic = frozenset(topic_pool[:_TOPIC_LIMIT])
    return Signature(ref, key, strict, gold, gold_strict, topic, words, dated, loose)


_MONTHS = frozenset(
    content_tokens(
        "january february march april may june july august september october november december"
    )
)
_VAGUE = frozenset(
    content_tokens(
        "recently lately earlier ago sometime once before previously yesterday today tonight "
        "tomorrow last week weekend month year"
    )
)
_RELATIVE = frozenset(
    content_tokens("yesterday today tonight tomorrow ago last next week weekend month year")
)
# Words so common in chat that they never bear an answer on their own.
_COMMON = frozenset(content_tokens("today yesterday recently lately new just really week day"))


def _carries(G: nx.MultiDiGraph, var: str, signature: Signature, carriers: set[str]) -> bool | None:
    """Whether ``var`` carries the evidence; ``None`` when its value was not captured."""
    data = G.nodes[var]
    if data.get("deleted"):
        return False
    value = data.get("value")
    if value is None:
        return None
    category = data.get("category")
    if any(c in value for c in carriers if c != signature.ref or category == Category.CANDIDATES):
        return True  # names a carrier by ref
    sources = _sources(G, var)
    derived = any(s == signature.ref or s in carriers for s in sources)
    text = _text(value)
    if signature.dated and len(content_tokens(text)) <= _SHORT:
        # A record's date stamp dates what it says, unless it says "recently" (or another
        # time word the evidence did not use): then it has dropped the date on purpose.
        vague = (frozenset(content_tokens(text)) & _VAGUE) - signature.words
        if not vague:
            text = f"{text}\n{_date_of(data)}"
    return signature.carries(text, derived=derived)


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
    elif value is not None and not isinstance(value, bool | float):
        yield str(value)


def _missing_traces(index: GraphIndex, ops: list[str]) -> list[str]:
    """Traces the case's ops (and what they read) link to but that are not loaded."""
    if not index.missing_traces:
        return []
    G = index.G
    missing: set[str] = set()
    for op in ops:
        prompt = G.nodes[op].get("prompt_ref")
        for link in G.nodes[op].get("links", ()):
            # A prompt template's trace is not on the evidence's path.
            if link["trace_id"] in index.missing_traces and (
                not prompt or link.get("ref") != prompt
            ):
                missing.add(link["trace_id"])
    return sorted(missing)


__all__ = ["EvidenceMethod", "Signature"]

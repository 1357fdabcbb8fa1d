"""The ``evidence`` method: follow what the right answer needs through the graph to where it was lost.

1. **The clue.** With an expected answer (cases file, feedback, a judge op's gold variable) the
   evidence is the store message that holds it (or the refs the case names). Without one, the
   wrong answer is the clue: the message the question asks about is searched for among the
   store's messages and the records derived from them, passing over the messages the wrong
   answer came from. When neither finds a message the verdict abstains.
2. **Construction.** The evidence is followed forward, in execution order, through the ops that
   ran before the question. A variable *carries* it when it keeps the answer-bearing tokens (the
   answer when known, else the names, numbers and dates the question does not already name: a
   rewrite that swapped the city or dropped the date does not carry), in a line about the
   evidence unless the value derives from it (its source refs name a carrier, or, without source
   refs, its op read one; a long value only when every line its op read that holds the answer
   is a carrier's line holding the evidence; a line copying such a line; a date only in a line
   that names the asked event). A carrier dies when its
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
the verdict abstains and says which values were missing. An unseen value does not block what
the captured values around it decide: a stored record whose captured value holds the evidence
settles the unseen values before it, and an op that read a carrier seen to hold the evidence
and wrote captured values that do not is the culprit; the verdict lists them in ``unchecked``.

Where the evidence stops, a **named rule** (``_rules.py``: ``not_retrieved``, ``stale_read``,
``filtered_out``, ...) gives the culprit and its error type.

**Confidence** is one function (``_confidence.confidence``) of how sure the evidence is (given,
found by its answer, or found by the question alone), how the culprit was decided (a content
test, structure, or the default of blaming the answer) and what went unchecked; see
``docs/attribution.md`` for the calibration.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import networkx as nx

from memtrace_otel.attribution import _confidence as C
from memtrace_otel.attribution._base import blame, last_op_of_kind, no_verdict
from memtrace_otel.attribution._locate import (
    NAME,
    NUMBER,
    PLACE,
    THING,
    Question,
    Reading,
    addressed,
    name_lexicon,
    place_names,
    placed,
    placed_names,
    read,
    resolved_date,
    says_now,
)
from memtrace_otel.attribution._model import Case, Verdict
from memtrace_otel.attribution._rules import (
    Finding,
    answer_wrong,
    content_unseen,
    declined_with_answer_in_context,
    filtered_out,
    invented,
    left_out_of_context,
    lost_in_construction,
    not_retrieved,
    stale_read,
)
from memtrace_otel.attribution._semantic import default_encoder, model_dir
from memtrace_otel.attribution._text import (
    Corpus,
    asks_for_time,
    content_tokens,
    date_numbers,
    entity_tokens,
    has_tokens,
    is_non_answer,
    recall,
    says_undated,
    segment_words,
    word_count,
)
from memtrace_otel.graph import GraphIndex, graph_index
from memtrace_otel.graph import op_order_key as order_key
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

# How sure the evidence is, by how it was found: the SURE_* factors of ``_confidence``.
_SURE_GIVEN = C.SURE_GIVEN
_SURE_GOLD = C.SURE_GOLD
_SURE_NEAREST = C.SURE_NEAREST
_SURE_QUESTION = C.SURE_QUESTION
_SURE_QUESTION_UNCLEAR = C.SURE_QUESTION_UNCLEAR
_SURE_RUNNER_UP = C.SURE_RUNNER_UP
_SURE_THING = C.SURE_THING
_SEMANTIC_LEAD = 0.05  # cosine lead of the best statement over the next (all-MiniLM-L6-v2)
# Cosine by which the search's best match outweighs a statement of what holds now.
_CURRENT_LEAD = 0.15
_SEMANTIC_FLOOR = 0.2  # below this cosine a statement is not about what the question asks
_CLEAR_MARGIN = 0.1  # the best match's score lead over the runner-up, relative
_CLOSE = 0.5  # runners-up within this share of the best score stay in the running
_FOUND_BY = {
    "given": "",
    "answer": " (found by the expected answer)",
    "question": " (found by the question; the wrong answer's sources passed over)",
}
# Words that name something ("called", "name"): a question's "name" tells no message apart.
_NAMING_WORDS = frozenset(content_tokens("name named called call"))


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
    event: frozenset[str] = frozenset()  # a time question's words for the event it asks about
    rare: bool = False  # the loose key is the words that tell the evidence apart in its store
    # Without an expected answer, to a "where" question whose key is the evidence's place: the
    # words of the store's messages and of the wrong answer (a place a record derived from
    # the evidence names, and none of them does, is the evidence's place in other words).
    known: frozenset[str] | None = None
    subject: frozenset[str] = frozenset()  # the question's names the evidence speaks of
    strangers: frozenset[str] = frozenset()  # the store's other names (not in the evidence)

    def carrying(
        self,
        text: str,
        *,
        derived: bool,
        stamp: str = "",
        copied: Sequence[frozenset[str]] = (),
    ) -> tuple[frozenset[str], ...]:
        """The lines of ``text`` that hold the evidence (none: it does not carry).

        Long values (a window, a document, a candidate list) are tested line by line and
        sentence by sentence, so an answer word elsewhere in the window does not count: a line
        must be about the evidence (share its salient words), or be a copy of a line that
        carried it (``copied``: the carrying lines of what the value's op read).
        ``derived``: the value derives from the evidence (its source refs name it or a carrier,
        or the answer could only have come from a carrier), so it need not repeat what the
        fact is about, only the answer-bearing tokens.
        ``stamp``: the value's own date (meta), read with each of its lines that does not
        say the time vaguely ("recently", a time word the evidence did not use).
        """
        segments = segment_words(text)
        # One statement: a line of one word is a label beside it (a tool call's name, an
        # event such as ADD), not a second statement. (Asked only of a derived value.)
        single = derived and sum(len(words) > 1 for words in segments) <= 1
        stamped = frozenset(content_tokens(stamp)) if stamp else frozenset()
        if stamped:
            segments = tuple(
                words if (words & _VAGUE) - self.words else words | stamped for words in segments
            )
        if derived and word_count(text) <= _SHORT and not self.dated:
            segments = (*segments, frozenset().union(*segments))
        # A date is shared by every fact of its day: in a value of several lines, a date
        # carries only in a line about the event (by the evidence's words or the question's).
        derived_about = derived and (single or not self.dated)
        subject = self.topic | self.event
        copies = [c for c in copied if len(c) >= 3]
        # A line sharing no token with the answer, the key or the evidence can carry nothing
        # (every test below needs one of them), whatever it is about: most lines of a window.
        # (Without a key and without evidence words, the last test holds for any line.)
        relevant = (
            self.gold | self.key | self.words | self.topic if self.key or self.words else None
        )
        out: list[frozenset[str]] = []
        for words in segments:
            if relevant is not None and relevant.isdisjoint(words):
                continue
            if self.dated:  # two of its words: one ("talk") is too easily met by chance
                about = derived_about or len(subject & words) >= min(2, len(subject))
            else:
                about = derived_about or bool(self.topic & words) or not self.topic
            about = about or any(recall(c, words) >= 0.8 for c in copies)
            # A line of someone else is not about it, whoever wrote it (an extraction that read
            # the evidence's record as context and wrote another person's fact).
            about = about and not self.elsewhere(words)
            if about and has_tokens(self.gold, self.gold_strict, words):
                out.append(words)
            elif self.key:
                # A guessed key: a third of it will do, or, in a short value derived from the
                # evidence (an extraction, a record), any of its words that tell the fact
                # apart in the store (the key is then :func:`_rarest`'s).
                loose = self.loose and (
                    3 * len(self.key & words) >= len(self.key)
                    or (self.rare and derived and single and bool(self.key & words))
                )
                if about and (has_tokens(self.key, self.strict, words) or loose):
                    out.append(words)
            elif recall(self.words, words) >= 0.6 or len(self.topic & words) >= 2:
                out.append(words)
        if not out and self.known is not None and derived and single:
            # "moved to the Big Easy", extracted as "lives in New Orleans": a place named
            # after a preposition with a word that no message of the store uses and that is
            # not the wrong answer's could only come from rewording the evidence (a swap takes
            # a known place).
            named = placed_names(text)
            if named - self.known:
                out.append(segments[0] if segments else frozenset(named))
        return tuple(out)

    def elsewhere(self, words: frozenset[str]) -> bool:
        """Whether a line speaks of someone else: it names none of the question's names that
        the evidence speaks of, and names another of the store ("Osric has a tortoise called
        Pistachio" is not Wendeline's tortoise, though it holds the same name)."""
        return bool(self.subject) and not self.subject & words and bool(self.strangers & words)

    def holds(self, words: frozenset[str]) -> bool:
        """Whether a line holds the answer-bearing tokens, whatever it is about (the expected
        answer, or a key that is not a guess)."""
        return has_tokens(self.gold, self.gold_strict, words) or (
            not self.loose and has_tokens(self.key, self.strict, words)
        )


@dataclass
class _Evidence:
    refs: list[str]
    sure: float
    how: str  # "given", "answer" or "question"
    alternates: list[str] = field(default_factory=list)  # runners-up of a question search
    bearing: frozenset[str] = frozenset()  # what the first ref holds of the asked kind


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

    def prepare(self, work: Iterable[tuple[nx.MultiDiGraph, Case]]) -> int:
        """Before a run: encode, in one batched pass, the questions and the messages of every
        store whose case may be located by the question alone (no evidence given, no expected
        answer), so each distinct text is encoded once and in full batches. Optional: verdicts are the same
        without it. Returns how many texts were encoded (0 without the sentence model)."""
        # Only cases without evidence or an expected answer are located by meaning: the model
        # is built for the first of them (a run may need it for none).
        needing = [
            (index, ops, case)
            for G, case in work
            if not case.evidence_refs and not case.gold_answers
            for index in (graph_index(G),)
            if (ops := index.ops_of(case.case_id))
        ]
        encoder = default_encoder() if needing else None
        texts: dict[str, None] = {}
        for index, ops, case in needing if encoder is not None else ():
            corpus = _store_messages(_scope(index, ops))[1]
            asked = (corpus.focus(case.question), Question.of(case.question).text)
            texts.update(dict.fromkeys([*corpus.texts, *asked]))
        return encoder.prefetch(list(texts)) if encoder is not None else 0

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
                return _blame(
                    G,
                    case,
                    stale_read(*stale, []),
                    method=self.name,
                    reason=stale[1],
                    confidence=C.confidence(C.NOTHING_FOLLOWED, C.STALE_READ),
                    unchecked=[*unchecked, "expected answer"],
                    missing_traces=missing,
                )
        if not evidence.refs:
            return self._without_evidence(scope, case, unchecked, missing)
        if evidence.how != "given":
            unchecked.append("evidence located by search, not given")
        earliest = self._earliest(scope, case, evidence)
        if earliest is None:
            return no_verdict(
                G,
                case,
                method=self.name,
                reason="the evidence's values were not captured: cannot tell what it said "
                f"(capture memory values for store {scope.store!r})",
                unchecked=(*unchecked, *(f"value of {r}" for r in evidence.refs)),
                missing_traces=missing,
            )
        return self._judge(scope, case, evidence, *earliest, unchecked, missing)

    def _earliest(
        self, scope: _Scope, case: Case, evidence: _Evidence
    ) -> tuple[str, Finding] | None:
        """The evidence message lost first, and its finding (``None``: no value captured)."""
        findings: list[tuple[tuple[int, int, str, str], str, Finding]] = []
        for ref in evidence.refs:
            others = [r for r in evidence.refs if r != ref]
            signature = _signature(scope, ref, case, others)
            if signature is None:
                continue
            finding = self._follow(scope, case, signature)
            findings.append((order_key(scope.index.G.nodes[finding.op]), ref, finding))
        if not findings:
            return None
        _, ref, finding = min(findings, key=lambda t: t[0])
        return ref, finding

    def _judge(
        self,
        scope: _Scope,
        case: Case,
        evidence: _Evidence,
        ref: str,
        finding: Finding,
        unchecked: list[str],
        missing: tuple[str, ...],
    ) -> Verdict:
        """The verdict of the earliest finding, weighed by how its evidence was found."""
        G = scope.index.G
        sure = evidence.sure
        searched = evidence.how == "question"
        if searched:
            ref, finding, sure = self._superseded(scope, case, evidence, ref, finding, sure)
        if searched and case.prediction and not _declined(case):
            # A wrong value came from somewhere the search did not explain: the message the
            # question matches is a weaker clue than when the answer simply declined.
            sure *= C.UNEXPLAINED_WRONG
        if searched and finding.by == C.DEFAULT and _declined(case):
            if evidence.bearing and not finding.unchecked:
                return self._declined(scope, case, evidence, ref, finding, unchecked, missing)
            alternate = self._alternate(scope, case, evidence)
            if alternate is None:
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
            ref, finding, sure = *alternate, C.SURE_RUNNER_UP
        unchecked.extend([*finding.unchecked, *finding.unseen])
        if finding.unchecked and finding.by != C.STRUCTURE:
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
        return _blame(
            G,
            case,
            finding,
            method=self.name,
            reason=f"{ref}{_FOUND_BY[evidence.how]}: {finding.why}",
            confidence=C.confidence(
                sure,
                finding.by,
                missing_traces=bool(missing),
                searched=searched,
                # Structure decided, but an unseen value upstream may have lost it first.
                unseen_upstream=bool(finding.unchecked),
            ),
            evidence_refs=evidence.refs,
            unchecked=sorted(set(unchecked)),
            missing_traces=missing,
        )

    def _superseded(
        self,
        scope: _Scope,
        case: Case,
        evidence: _Evidence,
        ref: str,
        finding: Finding,
        sure: float,
    ) -> tuple[str, Finding, float]:
        """Without an expected answer, an update that followed a later statement by the user
        ("I eat fish again") superseded the evidence: that is no error. The later statement is
        then what the question needs: one that says something of the asked kind (or names
        something new) and that the update's new version carries (it followed the user)."""
        question = Question.of(case.question)
        if question.before or question.after:
            return ref, finding, sure
        for later in _superseding(scope, finding.op, ref):
            signature = _signature(scope, later, case)
            if (
                signature is not None
                and (_restates(scope, question, later) or bool(signature.strict - _speakers(scope)))
                and set(scope.index.outputs(finding.op)) & _construction(scope, signature).carriers
            ):
                followed = self._follow(scope, case, signature)
                evidence.refs = [later]
                superseded = followed.because(f"it superseded an earlier statement; {followed.why}")
                return later, superseded, min(sure, C.SURE_RUNNER_UP)
        return ref, finding, sure

    def _declined(
        self,
        scope: _Scope,
        case: Case,
        evidence: _Evidence,
        ref: str,
        finding: Finding,
        unchecked: list[str],
        missing: tuple[str, ...],
    ) -> Verdict:
        """A message that holds content of the kind the question asks for, and that the question
        does not name, reached the answer's context, and the answer declined: fixing the answer
        fixes the case (the definition's ResponseError). Moderately sure: the message was found
        by the question, not by the answer."""
        return _blame(
            scope.index.G,
            case,
            declined_with_answer_in_context(finding),
            method=self.name,
            reason=f"{ref}{_FOUND_BY[evidence.how]}, which holds what the question asks for "
            f"({', '.join(sorted(evidence.bearing))}), reached the answer's context and the "
            "answer declined",
            # The sureness of the evidence as located (before a supersession lowered it).
            confidence=C.confidence(evidence.sure, C.DECLINED, missing_traces=bool(missing)),
            evidence_refs=evidence.refs,
            unchecked=sorted({*unchecked, *finding.unchecked, *finding.unseen, "expected answer"}),
            missing_traces=missing,
        )

    def _alternate(
        self, scope: _Scope, case: Case, evidence: _Evidence
    ) -> tuple[str, Finding] | None:
        """The best match reached the context, yet the answer declined: either that message is
        not what the question needs, or the answer ignored it, and without the expected answer
        nothing tells which. A close runner-up lost on the way is the likelier evidence."""
        for alternate in evidence.alternates:
            signature = _signature(scope, alternate, case)
            other = self._follow(scope, case, signature) if signature else None
            if other is not None and other.by != C.DEFAULT and not other.unchecked:
                return alternate, other
        return None

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
        return _by_question(scope, case, candidates, corpus)

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
                    finding = invented(generate)
                    return _blame(
                        G,
                        case,
                        finding,
                        method=self.name,
                        confidence=C.confidence(C.NOTHING_FOLLOWED, C.INVENTED),
                        reason=finding.why,
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
    def _follow(self, scope: _Scope, case: Case, signature: Signature) -> Finding:
        trail = _construction(scope, signature)
        if trail.lost is not None:
            return trail.lost
        generate = last_op_of_kind(scope.index.G, case, OpKind.GENERATE) or scope.ops[-1]
        settled = _settled(scope, trail)
        if settled:
            trail.unchecked = []
        finding = self._after_storage(scope, signature, trail, generate)
        finding.unseen = [*settled, *finding.unseen]
        return finding

    def _after_storage(
        self, scope: _Scope, signature: Signature, trail: _Trail, generate: str
    ) -> Finding:
        """Follow the stored carriers through the question's own ops.

        Values construction could not check matter only until the evidence is seen, by its
        content, among the question's candidates or in its context.
        """
        index, G = scope.index, scope.index.G
        carriers = set(trail.carriers)
        lines = dict(trail.lines)
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
            carrying, unknown = _carrying(scope, outs, signature, carriers, lines, unchecked)
            if kind == OpKind.RETRIEVE:
                if carrying:
                    carriers.update(carrying)
                    if not retrieved:
                        unchecked = []  # seen by its content: what came before is settled
                    retrieved = True
                elif unknown:
                    if stale is not None:
                        return stale_read(*stale, unchecked)
                    return answer_wrong(G, generate, unchecked)
                elif first_miss is None:
                    first_miss = op
                continue
            if carrying:
                carriers.update(carrying)
                if kind == OpKind.ASSEMBLE and not reached_context:
                    unchecked = []
                    reached_context = True
            elif unknown:
                return content_unseen(G, op, unchecked)
            elif not any(G.nodes[o].get("category") in _CONTENT_CATEGORIES for o in outs):
                if kind == OpKind.FILTER and any(
                    G.nodes[o].get("category") in _CONTENT_CATEGORIES for o in index.outputs(op)
                ):
                    return filtered_out(op, kept_nothing=True)
                continue  # a check (a sufficiency decision), not a content transformation
            elif kind == OpKind.FILTER:
                return filtered_out(op, kept_nothing=False)
            elif kind == OpKind.ASSEMBLE:
                return left_out_of_context(op)
        if retrieves and not retrieved and not reached_context:
            if stale is not None:
                return stale_read(*stale, unchecked)
            return not_retrieved(first_miss or retrieves[0], unchecked)
        if not reached_context:
            assemble = next(
                (op for op in scope.ops if G.nodes[op]["kind"] == OpKind.ASSEMBLE), None
            )
            if assemble is not None:
                return left_out_of_context(assemble, unchecked)
        return answer_wrong(G, generate, unchecked)


@dataclass
class _Trail:
    """The forward trace of one evidence message through construction."""

    carriers: set[str]
    lost: Finding | None = None
    unchecked: list[str] = field(default_factory=list)
    lines: dict[str, tuple[frozenset[str], ...]] = field(default_factory=dict)
    """The lines of each carrier that hold the evidence."""
    verified: set[str] = field(default_factory=set)
    """The carriers whose captured value was seen to carry the evidence."""


def _blame(
    G: nx.MultiDiGraph,
    case: Case,
    finding: Finding,
    *,
    method: str,
    reason: str,
    confidence: float,
    unchecked: Sequence[str],
    missing_traces: Sequence[str],
    evidence_refs: Sequence[str] = (),
) -> Verdict:
    """The verdict of a rule's finding: its op, its label."""
    return blame(
        G,
        case,
        finding.op,
        method=method,
        reason=reason,
        confidence=confidence,
        evidence_refs=evidence_refs,
        unchecked=unchecked,
        missing_traces=missing_traces,
        error_type=finding.error_type,
        rule=finding.rule,
    )


def _carrying(
    scope: _Scope,
    outs: Iterable[str],
    signature: Signature,
    carriers: set[str],
    lines: dict[str, tuple[frozenset[str], ...]],
    unchecked: list[str],
) -> tuple[list[str], bool]:
    """The outputs that carry the evidence, and whether any value was not captured (each such
    value is added to ``unchecked``)."""
    carrying, unknown = [], False
    for out in outs:
        verdict = _carries(scope.index, out, signature, carriers, lines)
        if verdict is None:
            unknown = True
            unchecked.append(f"value of {out}")
        elif verdict:
            carrying.append(out)
    return carrying, unknown


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
    if G.nodes[signature.ref].get("value") is not None:
        trail.verified.add(signature.ref)
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
            verdict = _carries(index, out, signature, trail.carriers, trail.lines)
            if verdict is None:
                trail.unchecked.append(f"value of {out}")
                verdict = not G.nodes[out].get("deleted")  # structure stands in for content
            elif verdict:
                trail.verified.add(out)
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
    deaths: list[tuple[tuple[int, int, str, str], str, str, str]] = []
    for var in trail.carriers:
        death = _death(scope, var, trail.carriers)
        if death is not None:
            deaths.append((order_key(G.nodes[death[0]]), death[0], death[1], var))
    if not deaths:
        return trail
    _, op, why, _ = max(deaths)
    structural = G.nodes[op]["kind"] == OpKind.DELETE or not index.outputs(op)
    by = C.STRUCTURE if structural else C.CONTENT
    trail.lost = lost_in_construction(G, op, why, by, trail.unchecked)
    killed = {var for _, o, _, var in deaths if o == op}
    if killed & trail.verified and all(_captured(G, out) for out in index.outputs(op)):
        # Judged from what was captured: the op read a carrier whose value was seen to hold the
        # evidence and wrote captured values that do not. What went unseen elsewhere on the
        # path cannot have lost the evidence before it; it is listed, not blocking.
        trail.lost.unseen, trail.lost.unchecked = trail.lost.unchecked, []
    return trail


def _captured(G: nx.MultiDiGraph, var: str) -> bool:
    """Whether a variable's content is known: its value was captured, or it is a tombstone."""
    data = G.nodes[var]
    return bool(data.get("deleted")) or data.get("value") is not None


def _settled(scope: _Scope, trail: _Trail) -> list[str]:
    """The values construction could not check that a stored carrier made moot: a live record
    version (or a value the question's ops read) whose captured value holds the evidence shows
    it survived, whatever the unseen values before it did."""
    live = set(scope.live.values()) | scope.read_by_case
    return list(trail.unchecked) if trail.verified & live else []


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
        # A hand-off is by design only when the next version resets the variable (a buffer
        # emptied after a chunker took it): a stored record that a later step read as context
        # (mem0's extraction reads the existing memories) and that was then overwritten held
        # the evidence until the overwrite.
        handoffs = (
            [
                op
                for op in _consumers(scope, var)
                if op != writer and order_key(G.nodes[op]) < until and _derives(G, index, op, var)
            ]
            if _is_reset(G, successor)
            else []
        )
        if handoffs:
            last = max(handoffs, key=lambda op: order_key(G.nodes[op]))
            return last, _loss_reason(G, last)
        if G.nodes[successor].get("deleted"):
            merge = _merged_into(scope, var, writer, until)
            if merge is not None:
                return merge, (
                    "a merge lost the evidence: the record it was merged into does not hold it, "
                    "and the merged record was then deleted"
                )
            return writer, "the memory holding the evidence was deleted"
        return writer, _loss_reason(G, writer)
    consumers = _consumers(scope, var)
    if consumers:
        last = max(consumers, key=lambda op: order_key(G.nodes[op]))
        return last, _loss_reason(G, last)
    return None


def _superseding(scope: _Scope, op: str, ref: str) -> list[str]:
    """The later messages an update may have followed when it replaced ``ref``'s content,
    latest first.

    An update is a supersession, not a loss, when besides the record it read something derived
    from a message the user wrote after ``ref`` (a fact extracted from it, or the message):
    the record now says what the user said last.
    """
    index, G = scope.index, scope.index.G
    if G.nodes[op]["kind"] != OpKind.UPDATE:
        return []
    since = G.nodes[ref].get("time") or 0
    later: set[tuple[int, str]] = set()
    for var in index.inputs(op):
        data = G.nodes[var]
        if data.get("category") == Category.MESSAGE:
            origins = [var]
        else:
            writer = index.writer(var)
            if writer is None or data.get("category") != Category.MEMORY:
                continue
            if data.get("id") and any(
                G.nodes[o].get("id") == data.get("id") for o in index.outputs(op)
            ):
                continue  # the record being updated
            origins = _sources(G, var) or [
                v for v in index.inputs(writer) if G.nodes[v].get("category") == Category.MESSAGE
            ]
        for m in origins:
            if m in G and m != ref and (G.nodes[m].get("time") or 0) > since:
                later.add((G.nodes[m].get("time") or 0, m))
    return [m for _, m in sorted(later, reverse=True)]


def _restates(scope: _Scope, question: Question, ref: str) -> bool:
    """Whether a message says something of the kind the question asks for, of its subject."""
    value = scope.index.G.nodes[ref].get("value")
    if not value:
        return False
    lexicon, _, places = _store_reading(scope)
    reading = read(_text(value), question, lexicon, places=places)
    return bool(reading.bearing) and not reading.other_subject


def _merged_into(
    scope: _Scope, var: str, deleter: str, until: tuple[int, int, str, str]
) -> str | None:
    """The update that merged ``var`` into another record before ``var`` was deleted, if any.

    A merge reads both records (itself, or through an LLM call whose output it writes), updates
    one and deletes the other: the deletion is by design, and a value lost in the merge was lost
    by the write. It is the last op that read ``var`` (a search aside) before the deletion.
    """
    index, G = scope.index, scope.index.G
    own = G.nodes[var].get("id")

    def writes_other(op: str) -> bool:
        data = G.nodes[op]
        return (
            data["kind"] == OpKind.UPDATE  # a merge writes into an existing record
            and data.get("case") is None
            and order_key(data) < until
            and any(
                G.nodes[o].get("category") == Category.MEMORY and G.nodes[o].get("id") != own
                for o in index.outputs(op)
            )
        )

    # The rewrite may be an LLM call that got a case id of its own (a chat call outside a
    # question's ops): what matters is that it ran before the deletion. Only the last op that
    # read the record before it was deleted can have merged it: a record read again after an
    # update (a memory manager that reads every record each turn and patched another one) was
    # still alive, and what the later reader decided is what removed it.
    readers = [
        op
        for op in index.readers(var)
        if op != deleter
        and op not in scope.ops
        and G.nodes[op]["kind"] not in _CONSULTING_KINDS
        and order_key(G.nodes[op]) < until
    ]
    if not readers:
        return None
    last = max(readers, key=lambda op: order_key(G.nodes[op]))
    if writes_other(last):
        return last
    for out in index.outputs(last):
        for reader in index.readers(out):
            if writes_other(reader):
                return reader
    return None


def _is_reset(G: nx.MultiDiGraph, var: str) -> bool:
    """Whether a version empties its variable (a captured value with no content words)."""
    value = G.nodes[var].get("value")
    return value is not None and not content_tokens(_text(value))


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
    for out in index.outputs(op):
        sources = _sources(G, out)
        if mine & set(sources):
            return True
        if not sources and G.nodes[out].get("category") in _CONTENT_CATEGORIES:
            return True  # no source refs recorded (optional): it came from what its op read
    return False


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


def _by_question(scope: _Scope, case: Case, candidates: list[str], corpus: Corpus) -> _Evidence:
    """Locate the evidence from the question alone (no expected answer; see ``_locate``).

    The best match that *bears* the answer (content of the asked kind the question does not
    name, about the question's subject) is the evidence; a best match that only restates the
    question is a link, followed to the name it introduces (two facts) or used as an anchor in
    time ("before moving to ..."). The wrong answer's own sources are passed over; when
    nothing else matches, a later statement of the same kind by the speaker (it superseded the
    wrong answer's source) is the likely evidence. ``none`` when nothing qualifies.
    """
    question = Question.of(case.question)
    lexicon, order, places = _store_reading(scope)
    texts = corpus.texts
    wrong = case.prediction or ""
    wrong_tokens = frozenset(content_tokens(wrong) if not is_non_answer(wrong) else ())

    def reading(i: int, linked: frozenset[str] = frozenset()) -> Reading:
        return read(texts[i], question, lexicon, linked, places)

    def bears(i: int, linked: frozenset[str] = frozenset()) -> frozenset[str]:
        return reading(i, linked).bearing - wrong_tokens

    # The wrong answer's sources: what the answer used. A message that holds the wrong answer
    # and another of the kind ("moved from Tallinn to Vienna") stays in the running.
    sources = [i for i, words in enumerate(corpus.words) if wrong_tokens and wrong_tokens <= words]
    avoid = {i for i in sources if not bears(i)}
    # The speaker's own name is in every record about them: it tells none apart.
    speakers = _speakers(scope)
    # The question's subject: the names it asks about (not the speaker's own). A record that
    # matches the question only through them says nothing about which of its messages is meant.
    subject = entity_tokens(case.question) - speakers
    votes = _record_votes(scope, case.question, speakers | subject)
    telling = corpus.telling(case.question) - _NAMING_WORDS - speakers
    # In the running through a word that tells messages apart (its own or its records'), or
    # through its meaning (near the question: a paraphrase); ranked by both.
    near = {i for i, _ in corpus.meaning_ranking(case.question)}
    scored = [
        (i, score)
        for i, score in _rank(corpus, case.question, records=votes, meaning=True)
        if i not in avoid and (corpus.words[i] & telling or i in votes or i in near)
    ]
    if subject:
        scored = _about_subject(corpus, case.question, scored, subject, telling, votes, reading)
    scored = _current_first(corpus, question, scored, avoid)
    ranked = [i for i, _ in scored]
    direct = [i for i in ranked if bears(i) and not reading(i).other_subject]
    # A link restates the question's own words (a message near it in meaning only is not one).
    links = [
        i
        for i in ranked
        if not bears(i) and not reading(i).other_subject and corpus.words[i] & telling
    ]
    # The speaker's own statement links best ("we relocated to Utrecht", not "the weather in
    # Utrecht").
    links.sort(key=lambda i: not reading(i).first_person)
    link = links[0] if links else None
    first = direct[0] if direct else None
    if (
        link is not None
        and reading(link).introduced
        and question.kind != NAME
        and (first is None or ranked.index(link) < ranked.index(first))
    ):
        # "my sister is called Kate": the question's answer is in Kate's messages.
        names = reading(link).introduced
        hop = _hop(corpus, question, names, link, reading, bears)
        if hop is not None:
            return _Evidence(
                [candidates[hop], candidates[link]],
                _SURE_QUESTION_UNCLEAR,
                "question",
                bearing=bears(hop, names),
            )
    chained = _chain(first, question, order, reading, bears, avoid, corpus, telling)
    if chained is not None:
        return _Evidence([candidates[i] for i in chained], _SURE_NEAREST, "question")
    anchor: int | None = None
    side = 1
    if link is not None and (question.before or question.after):
        anchor = link
        side = -1 if question.before else 1
        direct = [i for i in direct if (order[i] > order[link]) == (side > 0) and i != link]
        first = direct[0] if direct else None
    if first is not None:
        # A question anchored by a link needs both facts (where she lived, that she moved).
        refs = [candidates[first]] + ([candidates[anchor]] if anchor is not None else [])
        later = (
            _latest_restatement(first, question, order, reading, bears, texts)
            if question.present and question.kind == PLACE
            else None
        )
        if later is None and question.present and wrong_tokens:
            later = _change_statement(scope, first, order, wrong_tokens, question, reading)
        if later is not None:
            # A present-tense question: a later statement of the same kind by the speaker
            # superseded the best match.
            return _Evidence([candidates[later]], _SURE_RUNNER_UP, "question", bearing=bears(later))
        best = dict(scored)[first]
        rest = [score for i, score in scored if i != first]
        margin = (best - rest[0]) / best if rest and best > 0 else 1.0
        sure = _SURE_QUESTION if margin >= _CLEAR_MARGIN else _SURE_QUESTION_UNCLEAR
        if question.kind == THING:
            # The question names no kind of answer ("what does she do now?"): any content
            # word bears it, so the best match is a weak clue.
            sure = min(sure, _SURE_THING)
        if not (reading(first).first_person or reading(first).mentions):
            # Neither the speaker's own words nor naming the question's subject ("everyone
            # says Oskar runs the data team"): what ties it to the subject is not seen.
            sure = _SURE_NEAREST
        close = [candidates[i] for i in direct[1:3] if dict(scored)[i] >= _CLOSE * best]
        tie = _tie(scope, first, question, order, reading, bears)
        if tie is not None and candidates[tie] not in refs:
            refs.append(candidates[tie])
        return _Evidence(refs, sure, "question", close, bearing=bears(first))
    if anchor is None and sources and question.present:
        anchor, side = max(sources, key=lambda i: order[i]), 1
    found = _statement_of_kind(anchor, side, avoid, question, order, reading, bears, texts)
    if found is None:
        return _Evidence([], 0.0, "none")
    return _Evidence([candidates[found]], _SURE_NEAREST, "question", bearing=bears(found))


def _current_first(
    corpus: Corpus, question: Question, scored: list[tuple[int, float]], avoid: set[int]
) -> list[tuple[int, float]]:
    """``scored`` with the statements of what holds now first, for a question that asks what
    holds now and names no kind of answer ("what does she do now?", "what is his job these
    days?"): a message whose sentence says, in the first person and not asking, what holds at
    present ("I teach a class of ten-year-olds these days", :func:`says_now`) answers the
    question's tense whatever its words. They are ranked among themselves by the search's
    rank, then by meaning; they need share no word with the question. The search's best
    match stays first when it is nearer in meaning by more than ``_CURRENT_LEAD`` ("I started
    a new job as a teacher" against "I'm doing well now")."""
    if question.kind != THING or not question.now:
        return scored
    current = [i for i, text in enumerate(corpus.texts) if i not in avoid and says_now(text)]
    if not current:
        return scored
    rank = {i: r for r, (i, _) in enumerate(scored)}
    cosines = corpus.similarity(question.text) or [0.0] * len(corpus.texts)
    current.sort(key=lambda i: (rank.get(i, len(rank)), -cosines[i], i))
    if scored and cosines[scored[0][0]] - cosines[current[0]] > _CURRENT_LEAD:
        return scored  # the search's best match is clearly nearer what the question asks
    top = max((score for _, score in scored), default=0.0)
    first = [(i, top + 1.0 / (n + 1)) for n, i in enumerate(current)]
    return first + [(i, score) for i, score in scored if i not in set(current)]


def _statement_of_kind(
    anchor: int | None,
    side: int,
    avoid: set[int],
    question: Question,
    order: list[tuple[int, int]],
    reading: Callable[[int], Reading],
    bears: Callable[[int], frozenset[str]],
    texts: Sequence[str],
) -> int | None:
    """Nothing on topic bears the answer: a statement of the asked kind by the speaker, on the
    anchor's side in time (after the wrong answer's source: it superseded it; before or after
    the link the question names). With no anchor either: the statement of the asked kind that
    means most what the question asks, when one leads clearly ("I bought a Tesla" for "what
    car does she drive?")."""
    if anchor is not None:
        return _nearest_statement(anchor, side, order, reading, bears, question, texts)
    pool = [
        i for i in range(len(texts)) if i not in avoid and bears(i) and not reading(i).other_subject
    ]
    return _by_meaning(pool, question, texts)


def _chain(
    first: int | None,
    question: Question,
    order: list[tuple[int, int]],
    reading: Callable[[int], Reading],
    bears: Callable[[int], frozenset[str]],
    avoid: set[int],
    corpus: Corpus,
    telling: set[str],
) -> tuple[int, int] | None:
    """Two facts a present-tense question of a name needs when its best match shares no telling
    word with it and does not name its subject ("who does Ada report to now?", matched only by
    meaning): a statement that names someone for a thing
    ("Elena runs the security team"), and the speaker's own latest statement, naming no one,
    about the same thing ("I switched to the security team"), joined by a two-word phrase
    (:func:`_tie`'s) of uncommon words that only those two messages use. A name spoken to
    ("Thanks, Cal!") is given to no one. "Now" asks for the speaker's latest such statement.
    Returns (the naming statement, the speaker's), or None."""
    if (
        question.kind != NAME
        or not question.present
        or question.before
        or question.after
        or (first is not None and (reading(first).mentions or corpus.words[first] & telling))
    ):
        return None
    phrases = [_phrases(text) - _rare_pairs_of(question) for text in corpus.texts]
    users: dict[tuple[str, str], list[int]] = {}
    for i, found in enumerate(phrases):
        for phrase in found:
            users.setdefault(phrase, []).append(i)
    chains = []
    for phrase, pair in users.items():
        if len(pair) != 2 or set(phrase) & _COMMON or set(pair) & avoid:
            continue
        for own, named in (pair, pair[::-1]):
            # The name a statement gives, not one it speaks to ("Thanks, Cal! ...").
            names = bears(named) - addressed(corpus.texts[named])
            if (
                reading(own).first_person
                and not reading(own).other_subject
                and not bears(own)
                and names
                and not reading(named).other_subject
                and not set(phrase) & names
            ):
                chains.append((named, own))
    if not chains:
        return None
    return max(chains, key=lambda chain: (order[chain[1]], order[chain[0]]))


def _rare_pairs_of(question: Question) -> frozenset[tuple[str, str]]:
    """The question's own two-word phrases (they tie nothing: every match repeats them)."""
    return _phrases(question.text)


def _change_statement(
    scope: _Scope,
    first: int,
    order: list[tuple[int, int]],
    wrong: frozenset[str],
    question: Question,
    reading: Callable[[int], Reading],
) -> int | None:
    """The latest later message that changes what ``first`` says, when the wrong answer
    repeats it: a present-tense question asks for the current value, and an answer that gives
    the value of an earlier statement ("Kasimir is a stonemason") is wrong because a later
    one names that value and a new one ("handed in notice as a stonemason and now works as a
    luthier"). The value is what the wrong answer took from ``first`` beyond the question's
    own words that at most two messages use (the statement and its change)."""
    _, corpus = _store_messages(scope)
    said = corpus.words[first]
    value = frozenset(
        w
        for w in (said & wrong) - question.asked - _COMMON
        if sum(w in m for m in corpus.words) <= 2  # a value tells a fact apart, as _rarest's
    )
    if not value:
        return None
    changes = [
        i
        for i in range(len(corpus.words))
        if order[i] > order[first]
        and value & corpus.words[i]
        and not reading(i).other_subject
        and corpus.words[i] & question.asked
        and frozenset(w for w in corpus.words[i] - said - question.asked - _COMMON if len(w) > 2)
    ]
    return max(changes, key=lambda i: order[i]) if changes else None


def _tie(
    scope: _Scope,
    first: int,
    question: Question,
    order: list[tuple[int, int]],
    reading: Callable[[int], Reading],
    bears: Callable[[int], frozenset[str]],
) -> int | None:
    """The speaker's own statement that ties ``first`` to the question's subject, when a
    present-tense question's best match names no one the question names ("the growth team's
    lead is Felix" for "who is my manager now?", tied by "I switched to the growth team"): the
    answer needs both facts. The tie shares with ``first`` a phrase of two words (a compound
    that names a thing, "growth team") that no other message uses and that is neither the
    question's words nor what ``first`` bears, and bears no answer of the kind itself; the
    speaker's latest such message."""
    if not question.present or reading(first).mentions:
        return None
    _, corpus = _store_messages(scope)
    phrases = [_phrases(text) for text in corpus.texts]
    own = {
        p
        for p in phrases[first]
        if not set(p) <= question.asked and not set(p) & bears(first) and not set(p) <= _COMMON
    }
    users = [i for i in range(len(phrases)) if i != first and own & phrases[i]]
    rare = {p for p in own if sum(p in phrases[i] for i in users) == 1}
    ties = [
        i
        for i in users
        if rare & phrases[i]
        and reading(i).first_person
        and not reading(i).other_subject
        and not bears(i)
    ]
    return max(ties, key=lambda i: order[i]) if ties else None


_CLITICS = frozenset({"m", "s", "d", "t", "ve", "re", "ll"})


@functools.lru_cache(maxsize=1 << 14)
def _phrases(text: str) -> frozenset[tuple[str, str]]:
    """The pairs of consecutive content words of ``text`` (stemmed). The clitic of a
    contraction ("I'm", "she's", "we've") is no word: "I'm officially" is not a phrase."""
    words = [w for w in content_tokens(text) if w not in _CLITICS]
    return frozenset(itertools.pairwise(words))


def _about_subject(
    corpus: Corpus,
    question: str,
    scored: list[tuple[int, float]],
    subject: frozenset[str],
    telling: set[str],
    votes: dict[int, float],
    reading: Callable[[int], Reading],
) -> list[tuple[int, float]]:
    """``scored`` with the messages about the question's named subject first, ranked among
    themselves.

    The subject's name is in every message about them, so it tells none of them apart: among
    them the question's other words do (messages sharing the same ones tie), fused by
    reciprocal rank with their rank by meaning among the same messages (the nearest by
    sentence similarity, however far the whole store's other people's messages are) and the
    records' votes. A message about someone else, or naming no subject, follows.
    """
    on = [i for i, _ in scored if corpus.words[i] & subject and not reading(i).other_subject]
    if len(on) < 2:
        return scored
    beyond = telling - subject
    matched = {i: len(corpus.words[i] & beyond) for i in on}
    levels = sorted(set(matched.values()), reverse=True)
    score = {i: 1.0 / (levels.index(matched[i]) + 1) + votes.get(i, 0.0) for i in on}
    cosines = corpus.similarity(question)
    if cosines is not None:
        by_meaning = sorted(on, key=lambda i: (-cosines[i], i))
        for rank, i in enumerate(by_meaning):
            if cosines[i] > 0:
                score[i] += 1.0 / (rank + 1)
    first = sorted(on, key=lambda i: (-score[i], i))
    floor = min(score.values())
    rest = [(i, s * floor / (1.0 + s) / 2) for i, s in scored if i not in score]
    return [(i, score[i]) for i in first] + rest


def _by_meaning(pool: list[int], question: Question, texts: Sequence[str]) -> int | None:
    """The message of ``pool`` closest in meaning to the question, when it leads the next by
    ``_SEMANTIC_LEAD`` (sentence similarity, :mod:`._semantic`); None without the model."""
    encoder = default_encoder() if pool else None
    if encoder is None:
        return None
    scores = encoder.similarity(question.text, [texts[i] for i in pool])
    ranked = [*sorted(zip(scores, pool, strict=True), reverse=True), (0.0, -1)]
    best, runner_up = ranked[0][0], ranked[1][0]
    return ranked[0][1] if best >= _SEMANTIC_FLOOR and best - runner_up >= _SEMANTIC_LEAD else None


def _hop(
    corpus: Corpus,
    question: Question,
    names: frozenset[str],
    link: int,
    reading: Callable[[int, frozenset[str]], Reading],
    bears: Callable[[int, frozenset[str]], frozenset[str]],
) -> int | None:
    """The best message about a name a link introduced that bears the answer."""
    query = " ".join([question.text, *sorted(names)])
    for i, _ in corpus.ranking(query):
        if i == link or not (corpus.words[i] & names) or placed(corpus.texts[i], names):
            continue  # a name that stands as a place there is not whom the link named
        if bears(i, names) and not reading(i, names).other_subject:
            return i
    return None


def _latest_restatement(
    first: int,
    question: Question,
    order: list[tuple[int, int]],
    reading: Callable[[int], Reading],
    bears: Callable[[int], frozenset[str]],
    texts: Sequence[str],
) -> int | None:
    """A later statement by the speaker of what ``first`` says ("I live in Geneva", later
    "I'm now settled in Oslo"), if one says something else: the later statement that means
    most what the question asks (sentence similarity), else the latest of ``first``'s own
    shape (the same preposition before the place), else the one later statement of any shape."""
    slots = reading(first).slots
    said = bears(first)
    if not slots or not reading(first).first_person:
        return None
    later = [
        i
        for i in _statements(first, 1, order, reading, bears)
        if reading(i).slots and bears(i) - said
    ]
    meant = _latest_meant(later, question, order, texts)
    if meant is not None:
        return meant
    shaped = [i for i in later if reading(i).slots & slots]
    if not shaped:
        # One later statement of where, with another preposition ("relocated to Seattle",
        # later "settled in New York"): the question's "now" asks for it.
        shaped = later
    return max(shaped, key=lambda i: order[i]) if shaped else None


def _latest_meant(
    pool: list[int], question: Question, order: list[tuple[int, int]], texts: Sequence[str]
) -> int | None:
    """The latest message of ``pool`` that means what the question asks (sentence similarity
    at least ``_SEMANTIC_FLOOR``: "I finally settled in Oslo", not "I was in Oslo for a gig"):
    a present-tense question asks for the latest such statement, however near in meaning an
    earlier one is. None without the model or when none is near."""
    encoder = default_encoder() if pool else None
    if encoder is None:
        return None
    scores = encoder.similarity(question.text, [texts[i] for i in pool])
    near = [i for i, score in zip(pool, scores, strict=True) if score >= _SEMANTIC_FLOOR]
    return max(near, key=lambda i: order[i]) if near else None


def _statements(
    anchor: int,
    side: int,
    order: list[tuple[int, int]],
    reading: Callable[[int], Reading],
    bears: Callable[[int], frozenset[str]],
) -> list[int]:
    """The speaker's own statements of the asked kind on ``side`` (1 after, -1 before) of
    ``anchor`` in time."""
    return [
        i
        for i in range(len(order))
        if i != anchor
        and (order[i] > order[anchor]) == (side > 0)
        and reading(i).first_person
        and not reading(i).other_subject
        and bears(i)
    ]


def _nearest_statement(
    anchor: int,
    side: int,
    order: list[tuple[int, int]],
    reading: Callable[[int], Reading],
    bears: Callable[[int], frozenset[str]],
    question: Question,
    texts: Sequence[str],
) -> int | None:
    """The speaker's statement of the asked kind on ``side`` of ``anchor`` in time that means
    most what the question asks (sentence similarity, when the model is there); without the
    model, or when no statement leads clearly, the nearest one of the anchor's own shape (the
    same preposition before a place)."""
    slots = reading(anchor).slots
    pool = _statements(anchor, side, order, reading, bears)
    if not pool:
        return None
    meant = _by_meaning(pool, question, texts)
    if meant is not None:
        return meant
    return min(
        pool,
        key=lambda i: (
            not (reading(i).slots & slots),
            abs(order[i][0] - order[anchor][0]),
            order[i],
        ),
    )


def _speakers(scope: _Scope) -> frozenset[str]:
    """The (stemmed) names of the store's speakers: the messages' ``speaker`` meta, and the
    names its messages speak to ("Thanks, Jon!"). Built once per store."""
    key = ("speakers", scope.store)
    cached = scope.index.memo.get(key)
    if cached is None:
        G = scope.index.G
        messages, corpus = _store_messages(scope)
        names = {
            str(meta["speaker"])
            for meta in (G.nodes[m].get("meta") for m in messages)
            if isinstance(meta, dict) and meta.get("speaker")
        }
        cached = frozenset(t for name in names for t in content_tokens(name)).union(
            *(addressed(text) for text in corpus.texts)
        )
        scope.index.memo[key] = cached
    return cached


def _store_reading(
    scope: _Scope,
) -> tuple[frozenset[str], list[tuple[int, int]], frozenset[str]]:
    """The store's names, its messages' order in time and the names it uses only as places
    (built once per store)."""
    key = ("reading", scope.store)
    cached = scope.index.memo.get(key)
    if cached is None:
        G = scope.index.G
        messages, corpus = _store_messages(scope)
        lexicon = name_lexicon(corpus.texts)
        order = []
        for m in messages:
            data = G.nodes[m]
            writer = data.get("writer")
            outs = G.nodes[writer].get("outputs", []) if writer in G else []
            position = outs.index(m) if m in outs else 0
            order.append((int(data.get("time") or 0), position))
        cached = (lexicon, order, place_names(corpus.texts, lexicon))
        scope.index.memo[key] = cached
    return cached


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
        cached = (
            messages,
            Corpus(_without_boilerplate([_text(G.nodes[m]["value"]) for m in messages])),
        )
        index.memo[key] = cached
    return cached


_TAG = re.compile(r"</?[A-Za-z][\w.:-]*>")


def _positions(scope: _Scope) -> dict[str, int]:
    """Each store message's position in :func:`_store_messages` (built once per store)."""
    key = ("positions", scope.store)
    cached = scope.index.memo.get(key)
    if cached is None:
        messages, _ = _store_messages(scope)
        cached = {m: i for i, m in enumerate(messages)}
        scope.index.memo[key] = cached
    return cached


def _without_boilerplate(texts: list[str]) -> list[str]:
    """``texts`` without the lines most of them repeat (a prompt's instructions wrapped around
    each turn): a line in more than half of at least three texts tells none apart, and its
    words would outweigh the turn's own. A line that is only a markup tag (``<session_1f3a>``)
    says nothing either. A text made only of such lines is kept whole."""
    if len(texts) < 3:
        return texts
    lines = [
        [line.strip() for line in text.splitlines() if not _TAG.fullmatch(line.strip())]
        for text in texts
    ]
    counts: dict[str, int] = {}
    for each in lines:
        for line in set(each):
            if len(line) >= 20:
                counts[line] = counts.get(line, 0) + 1
    common = {line for line, n in counts.items() if 2 * n > len(texts)}
    out = []
    for text, each in zip(texts, lines, strict=True):
        kept = [line for line in each if line not in common]
        changed = len(kept) < len(text.splitlines())
        out.append("\n".join(kept) if changed and any(kept) else text)
    return out


def _record_votes(
    scope: _Scope, question: str, ignore: frozenset[str] = frozenset()
) -> dict[int, float]:
    """Votes for messages whose records (any version, any time) match the question through a
    word that tells them apart (``ignore``: words that never do, such as the speaker's name)."""
    position, sources, corpus = _store_records(scope)
    if not sources:
        return {}
    telling = corpus.telling(question) - ignore
    votes: dict[int, float] = {}
    ranked = [i for i, _ in corpus.ranking(question) if corpus.words[i] & telling]
    for rank, i in enumerate(ranked[:3]):
        if len(sources[i]) != 1:
            continue  # a summary of many messages says nothing about which one matches
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


def _rarest(
    scope: _Scope,
    words: frozenset[str],
    subject: frozenset[str],
    values: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """The words of ``words`` that tell one fact apart in the store: not used by any message
    about someone else than ``subject`` (the question's names: those words are the shape the
    store's statements share, "practising the harp every Thursday evening"), unless they are
    among ``values`` (values another statement holds too, "can't eat peanuts" when
    someone else is, :func:`_slot_values`), and of those the ones the fewest of the subject's
    messages use, when at most two do (the message and a restatement; the words every
    message about the person repeats, "my running buddy Tamsin", are not it). When someone
    else's messages use every word (two people play the same instrument), the fewest of the
    subject's own messages. Empty when no word qualifies."""
    _, corpus = _store_messages(scope)
    tries: list[tuple[frozenset[str], Sequence[frozenset[str]]]] = [(words, corpus.words)]
    if subject:
        shared = frozenset().union(*(m for m in corpus.words if not m & subject))
        shared -= values
        own = [m for m in corpus.words if m & subject]
        tries = [(words - shared, own), (words, own)]
    for some, pool in tries:
        df = {w: sum(w in m for m in pool) for w in some}
        rare = min(df.values(), default=0)
        if 0 < rare <= 2:
            return frozenset(w for w, n in df.items() if n == rare)
    return frozenset()


def _slot_values(scope: _Scope) -> frozenset[str]:
    """The store's words that fill a slot of a shared frame: between the same two words (or
    after the same word at a statement's end) where another message has another word
    ("works as a welder" beside "works as a nurse", "can't eat peanuts at all" beside "can't
    eat shellfish at all"). Those are values of a kind, not the shape statements
    share ("can't eat", "every Thursday evening" stand in every frame alike). Built once per
    store."""
    key = ("slot values", scope.store)
    cached = scope.index.memo.get(key)
    if cached is None:
        _, corpus = _store_messages(scope)
        fillers: dict[tuple[str, str], set[str]] = {}
        for text in corpus.texts:
            seq = content_tokens(text)
            for i in range(1, len(seq)):
                after = seq[i + 1] if i + 1 < len(seq) else ""
                fillers.setdefault((seq[i - 1], after), set()).add(seq[i])
        cached = frozenset(w for words in fillers.values() if len(words) > 1 for w in words)
        scope.index.memo[key] = cached
    return cached


_OPEN = re.compile(r"\b(?:what|which|who|whom|whose|where|when|why|how)\b", re.IGNORECASE)


def _asks_open(question: str) -> bool:
    """Whether a question asks for something it does not name (a wh-question), not for a
    yes or a no ("Is Ana in Porto?").

    >>> _asks_open("Which ingredient does Ana avoid?"), _asks_open("Is Ana in Porto?")
    (True, False)
    """
    return bool(_OPEN.search(question))


def asks_for_number(question: str) -> bool:
    """Whether a question asks for a number ("how many", "how old")."""
    return Question.of(question).kind == NUMBER


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
        # As the search read it: without the lines most of the store's messages repeat.
        _, corpus = _store_messages(scope)
        at = _positions(scope).get(ref)
        text = corpus.texts[at] if at is not None else _text(value)
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
    if dated and not gold and value is not None:
        # No expected answer: the day the message speaks of, resolved against its own date
        # ("today" in a message of 3 April is 3 April), is the answer; a memory that wrote
        # it out ("on 3 April 2023") carries it as well as one that kept "today".
        gold = gold_strict = resolved_date(_text(value), _date_of(data))
    entities = entity_tokens(text)
    question = Question.of(case.question)
    if not golds and value is not None and question.kind == NAME:
        # A name that opens its sentence ("Ilse, my cousin, ...") is a name all the same.
        lexicon, _, places = _store_reading(scope)
        entities |= read(text, question, lexicon, places=places).bearing
    loose = rare = False
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
        # A weekday or a month beside a fact ("practising every Thursday") is not what a
        # question that does not ask when asks for.
        entities = entities - _MONTHS - _WEEKDAYS
        if not asks_for_number(case.question):
            # The day beside a fact ("opening night is 12 May") is not what a question asks
            # for unless it asks when or how many: what the fact says bears the answer.
            entities = entities - date_numbers(text)
        # Without an expected answer the wrong answer's own words are not what a carrier must
        # keep: "Pickle instead of Biscotti", answered "Biscotti", is carried by "Pickle".
        wrong: frozenset[str] = frozenset()
        if not golds and case.prediction and not is_non_answer(case.prediction):
            wrong = frozenset(content_tokens(case.prediction)) - asked
        key = frozenset(entities - asked - wrong) or frozenset(entities - asked)
        # Without an expected answer, a question that asks for something ("what", "which") is
        # not answered by the names it asks about: only a question confirming its premise needs
        # the evidence to keep them. (An expected answer phrased otherwise keeps them: the
        # evidence is then the message that holds it, which names what it is about.)
        open_question = _asks_open(case.question) and not golds
        key = key or frozenset(joined) or (frozenset() if open_question else entities)
        if not key:
            loose = True
            key = frozenset(w for w in words - asked - _COMMON if len(w) > 2)
            key = (key - wrong or key) or frozenset(words & asked)
            if value is not None:
                subject = entity_tokens(case.question) - _speakers(scope)
                rarest = _rarest(scope, key, subject, _slot_values(scope))
                key, rare = rarest or key, bool(rarest)
        strict = key & entities
    topic_pool = [
        t for t in dict.fromkeys(content_tokens(text)) if t not in key and not t.isdigit()
    ]
    topic_pool.sort(key=lambda t: (t not in asked, -len(t), t))  # the question's words first
    topic = frozenset(topic_pool[:_TOPIC_LIMIT])
    event: frozenset[str] = frozenset()
    if dated:
        # What the question asks the date of: its words but the names and the asking.
        event = asked - entity_tokens(case.question, anywhere=True) - _ASKING_TIME
    known = None
    if not golds and value is not None and question.kind == PLACE:
        lexicon, _, places = _store_reading(scope)
        if key and key <= read(text, question, lexicon, places=places).bearing:
            wrong_words = frozenset(content_tokens(case.prediction or ""))
            known = _store_words(scope) | wrong_words
    # Whom the evidence speaks of: the question's names it holds (not the speakers', which are
    # in every record); a line that names another of the store's names instead is not about it.
    subject = words & entity_tokens(case.question) - _speakers(scope)
    strangers = _store_reading(scope)[0] - words - _speakers(scope) if subject else frozenset()
    return Signature(
        ref,
        key,
        strict,
        gold,
        gold_strict,
        topic,
        words,
        dated,
        loose,
        event,
        rare,
        known=known,
        subject=subject,
        strangers=strangers,
    )


def _store_words(scope: _Scope) -> frozenset[str]:
    """Every content token of the store's messages (built once per store)."""
    key = ("words", scope.store)
    cached = scope.index.memo.get(key)
    if cached is None:
        cached = frozenset().union(*_store_messages(scope)[1].words)
        scope.index.memo[key] = cached
    return cached


_MONTHS = frozenset(
    content_tokens(
        "january february march april may june july august september october november december"
    )
)
_WEEKDAYS = frozenset(content_tokens("monday tuesday wednesday thursday friday saturday sunday"))
_VAGUE = frozenset(
    content_tokens(
        "recently lately earlier ago sometime once before previously yesterday today tonight "
        "tomorrow last week weekend month year"
    )
)
_RELATIVE = frozenset(
    content_tokens("yesterday today tonight tomorrow ago last next week weekend month year")
)
_ASKING_TIME = frozenset(content_tokens("when what which date day month year time ago long"))
# Words so common in chat that they never bear an answer on their own.
# Words so common in chat that they never bear an answer on their own: time words, and the
# light verbs and fillers of English ("went", "going well", "got a lot").
_COMMON = frozenset(
    content_tokens(
        "today yesterday recently lately new just really week day year years time times go "
        "goes going went gone get gets getting got make makes made take took come came well "
        "good great lot lots thing things stuff pretty kind sort way again also still even "
        "already give gives gave given giving put puts say says said tell tells told"
    )
)


Lines = dict[str, tuple[frozenset[str], ...]]
"""The lines (content tokens) of each carrier that hold the evidence."""


def _carries(
    index: GraphIndex, var: str, signature: Signature, carriers: set[str], lines: Lines
) -> bool | None:
    """Whether ``var`` carries the evidence; ``None`` when its value was not captured. The
    lines of ``var`` that carry it are recorded in ``lines``."""
    G = index.G
    data = G.nodes[var]
    if data.get("deleted"):
        return False
    value = data.get("value")
    if value is None:
        return None
    text = _text(value)
    writer = index.writer(var)
    read = [v for v in index.inputs(writer) if v in carriers] if writer is not None else []
    copied = [c for v in read for c in _lines_of(index, v, signature, lines)]
    category = data.get("category")
    named = [c for c in carriers if c in value and (c != signature.ref or category == "candidates")]
    if named:  # names a carrier by ref: its lines are the ones copying a carrier's
        held = _held(signature, value)
        known = [c for v in named for c in _lines_of(index, v, signature, lines)] + copied
        lines[var] = tuple(w for w in held if any(recall(c, w) >= 0.8 for c in known)) or held
        return True
    sources = _sources(G, var)
    short = word_count(text) <= _SHORT
    if sources:
        # A short value its op wrote from a carrier derives from it even when its source refs
        # were carried over from the version it replaced (an update names the old sources).
        derived = any(s == signature.ref or s in carriers for s in sources) or (
            short and bool(read)
        )
        if derived and not short:
            # A window lists every message it holds: that it names the evidence does not say
            # which of its lines is the evidence's, unless the answer had no other source.
            derived = _sole_source(index, var, signature, carriers, lines)
    elif short:
        # No source refs recorded (they are optional): a short value is derived from what its
        # writer read, so a fact reworded from a carrier need only keep the answer-bearing
        # tokens.
        derived = bool(read)
    else:
        # A long value (a window, a summary) holds other facts too: derived only when the
        # answer had no other source.
        derived = _sole_source(index, var, signature, carriers, lines)
    stamp = ""
    if signature.dated and short and not says_undated(text):
        # A record's date stamp dates what it says, unless it says "recently" (or another
        # time word the evidence did not use; tested line by line) or that its date is
        # unknown: then it has dropped the date on purpose.
        stamp = _date_of(data)
    found = signature.carrying(text, derived=derived, stamp=stamp, copied=copied)
    if found:
        lines[var] = found
    return bool(found)


def _lines_of(
    index: GraphIndex, var: str, signature: Signature, lines: Lines
) -> tuple[frozenset[str], ...]:
    """A carrier's lines that hold the evidence (the evidence message: all that hold its answer,
    else all of it)."""
    found = lines.get(var)
    if found is None:
        value = index.G.nodes[var].get("value")
        found = (_held(signature, value) or segment_words(_text(value))) if value else ()
        lines[var] = found
    return found


def _sole_source(
    index: GraphIndex, var: str, signature: Signature, carriers: set[str], lines: Lines
) -> bool:
    """Whether the op that wrote ``var`` read a carrier, and every line it read that holds the
    answer is a carrier's line holding the evidence: then the answer in ``var`` can only have
    come from the evidence (copied into a context, or a paraphrase resolved by a summary). Not
    for a time question (a date is shared by every fact of its day) nor for a guessed key
    without an answer."""
    if signature.dated or (signature.loose and not signature.gold):
        return False
    G = index.G
    writer = index.writer(var)
    if writer is None:
        return False
    from_carrier = False
    for v in index.inputs(writer):
        value = G.nodes[v].get("value")
        if value is None:
            continue
        held = _held(signature, value)
        if v in carriers:
            from_carrier = True
            if not set(held) <= set(_lines_of(index, v, signature, lines)):
                return False
        elif held:
            return False
    return from_carrier


@functools.lru_cache(maxsize=1 << 14)
def _held(signature: Signature, value: str) -> tuple[frozenset[str], ...]:
    """The lines of a value that hold the answer-bearing tokens, whatever they are about."""
    answer = signature.gold | signature.key  # a line sharing none of these holds nothing
    return tuple(
        w for w in segment_words(_text(value)) if not answer.isdisjoint(w) and signature.holds(w)
    )


@functools.lru_cache(maxsize=1 << 14)
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

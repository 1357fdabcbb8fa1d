"""The named rules of the ``evidence`` method: each verdict that names a culprit comes from one.

The method (``_evidence.py``) follows the evidence of a failed case through the graph; where it
stops, one rule below says who is to blame and with which label. Each rule returns a
:class:`Finding` that carries the rule's name and its :class:`ErrorType` (contract section 2:
the label of the blamed op's kind), and its docstring says when it fires. The verdict names
its rule in ``Verdict.rule``.

===================================  ===============  ============================================
rule                                 error type       fires when
===================================  ===============  ============================================
``not_extracted``                    ExtractionError  an extract/create let the last carrier die
``overwritten``                      UpdateError      an update (rewrite, merge, NONE) let it die
``deleted``                          DeletionError    a delete tombstoned the last carrier
``dropped_before_storage``           RetrievalError   a filter while writing kept none of it
``lost_in_construction``             the op kind's    an op of another kind ended the last one
``not_retrieved``                    RetrievalError   stored, searchable, no retrieve returned it
``stale_read``                       RetrievalError   a retrieve read an older version of a record
``filtered_out``                     RetrievalError   a filter of the question kept none of it
``left_out_of_context``              ResponseError    retrieved, not in the assembled context
``answer_wrong``                     ResponseError    in the answer's context, the answer wrong
``declined_with_answer_in_context``  ResponseError    no expected answer; declined with it there
``invented``                         ResponseError    no evidence; the answer is in nothing read
``content_unseen``                   (abstains)       a question op's outputs were not captured
===================================  ===============  ============================================

Each rule's docstring says exactly when it fires.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import networkx as nx

from memtrace_otel.attribution import _confidence as C
from memtrace_otel.semconv import ERROR_TYPE_BY_KIND, ErrorType, OpKind

DEFAULT_WHY = "the evidence reached the answer's context, yet the answer is wrong"


@dataclass
class Finding:
    """Where one evidence message was lost, and by which rule.

    Attributes:
        rule: the rule's name (``Verdict.rule``).
        error_type: the label the rule gives ``op`` (``None``: the rule names no culprit).
        op: the blamed op.
        why: the reason, as the verdict gives it after the evidence's ref.
        by: what decided it (``_confidence.CONTENT``, ``STRUCTURE`` or ``DEFAULT``).
        unchecked: the values on the path that were not captured and could have decided (the
            verdict abstains unless structure decided).
        unseen: values not captured that the captured ones made moot (listed in the verdict's
            ``unchecked``, never blocking it).
    """

    rule: str
    error_type: ErrorType | None
    op: str
    why: str
    by: str
    unchecked: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)

    def because(self, why: str) -> Finding:
        """The same finding with another reason."""
        return dataclasses.replace(self, why=why)


def _kind(G: nx.MultiDiGraph, op: str) -> str:
    return str(G.nodes[op].get("kind"))


def _label(G: nx.MultiDiGraph, op: str) -> ErrorType | None:
    """The contract's label of ``op``'s kind (section 2), for ops no rule's own kind covers."""
    try:
        return ERROR_TYPE_BY_KIND[OpKind(G.nodes[op].get("kind"))]
    except ValueError:
        return None


# -- construction: the last carrier died before the question ----------------------------------
def not_extracted(op: str, why: str, by: str, unchecked: list[str]) -> Finding:
    """An ``extract`` or ``create`` op read the last carrier and wrote nothing that carries it
    (a fact extraction that dropped the answer, a create that wrote nothing): ExtractionError."""
    return Finding("not_extracted", ErrorType.EXTRACTION, op, why, by, unchecked)


def overwritten(op: str, why: str, by: str, unchecked: list[str]) -> Finding:
    """An ``update`` op ended the last carrier: its new version does not carry the evidence (a
    rewrite, a merge into another record, a summary), or it wrote nothing (a NONE decision that
    discarded the fact, contract 4b): UpdateError."""
    return Finding("overwritten", ErrorType.UPDATE, op, why, by, unchecked)


def deleted(op: str, why: str, by: str, unchecked: list[str]) -> Finding:
    """A ``delete`` op tombstoned the record version that was the last carrier: DeletionError."""
    return Finding("deleted", ErrorType.DELETION, op, why, by, unchecked)


def dropped_before_storage(op: str, why: str, by: str, unchecked: list[str]) -> Finding:
    """A ``filter`` that ran while memory was written (a dedupe of extracted facts) kept nothing
    that carries the evidence: RetrievalError, the contract's label of a filter."""
    return Finding("dropped_before_storage", ErrorType.RETRIEVAL, op, why, by, unchecked)


_LOSSES = {
    OpKind.EXTRACT.value: not_extracted,
    OpKind.CREATE.value: not_extracted,
    OpKind.UPDATE.value: overwritten,
    OpKind.DELETE.value: deleted,
    OpKind.FILTER.value: dropped_before_storage,
}


def lost_in_construction(
    G: nx.MultiDiGraph, op: str, why: str, by: str, unchecked: list[str]
) -> Finding:
    """No carrier of the evidence survived to the question and ``op`` ended the last one.

    The rule of ``op``'s kind decides (``not_extracted``, ``overwritten``, ``deleted``,
    ``dropped_before_storage``); an op of another kind that wrote the next version of a record
    gets its kind's label (contract section 2; ``None`` for an ingest or a judge).
    """
    rule = _LOSSES.get(_kind(G, op))
    if rule is not None:
        return rule(op, why, by, unchecked)
    return Finding("lost_in_construction", _label(G, op), op, why, by, unchecked)


# -- the question's ops: stored, then not retrieved, filtered or left out ------------------------
def not_retrieved(op: str, unchecked: list[str]) -> Finding:
    """The evidence was stored and searchable (a live record version carries it, contract 4b)
    but no retrieve of the question returned a carrier, and no context carries it: RetrievalError
    at the first retrieve that missed it (else the first retrieve)."""
    return Finding(
        "not_retrieved",
        ErrorType.RETRIEVAL,
        op,
        "the evidence was stored but not retrieved",
        C.CONTENT,
        unchecked,
    )


def stale_read(op: str, why: str, unchecked: list[str]) -> Finding:
    """A retrieve of the question read (or listed) an older version of a record while a newer
    one was live (a stale cache, a lagging replica): RetrievalError at that retrieve, decided by
    structure (contract 4b). With an expected answer it fires when the live version carries the
    evidence; without one, whenever the question's retrieve read a stale version."""
    return Finding("stale_read", ErrorType.RETRIEVAL, op, why, C.STRUCTURE, unchecked)


def filtered_out(op: str, *, kept_nothing: bool) -> Finding:
    """A ``filter`` of the question read a carrier and kept nothing that carries it (its kept
    outputs do not; a dropped list, category ``other``, never carries): RetrievalError there.
    ``kept_nothing``: its kept outputs are not content at all."""
    why = (
        "a filter kept none of the retrieved evidence"
        if kept_nothing
        else "a filter dropped the retrieved evidence"
    )
    return Finding("filtered_out", ErrorType.RETRIEVAL, op, why, C.CONTENT)


def left_out_of_context(op: str, unchecked: list[str] | None = None) -> Finding:
    """The evidence was retrieved (or is searchable) but the ``assemble`` op's context does not
    carry it: ResponseError at the assemble op."""
    return Finding(
        "left_out_of_context",
        ErrorType.RESPONSE,
        op,
        "the retrieved evidence was left out of the assembled context",
        C.LEFT_OUT,
        list(unchecked or ()),
    )


def content_unseen(G: nx.MultiDiGraph, op: str, unchecked: list[str]) -> Finding:
    """An op of the question read a carrier and none of its outputs' values was captured: only
    their content could decide. The verdict abstains (it names what was not captured)."""
    return Finding(
        "content_unseen",
        None,
        op,
        f"{_kind(G, op)} op: its output's content decides",
        C.CONTENT,
        unchecked,
    )


def answer_wrong(G: nx.MultiDiGraph, op: str, unchecked: list[str]) -> Finding:
    """The evidence reached the answer's context (or nothing after storage shows it lost) and the
    answer is still wrong: ResponseError at the generate op. Decided by default, not by content.
    A case without a generate op blames its last op, with that op's kind's label."""
    label = ErrorType.RESPONSE if _kind(G, op) == OpKind.GENERATE.value else _label(G, op)
    return Finding("answer_wrong", label, op, DEFAULT_WHY, C.DEFAULT, unchecked)


# -- without an expected answer -------------------------------------------------------------------
def declined_with_answer_in_context(finding: Finding) -> Finding:
    """No expected answer; the answer declined ("I don't know") although the located message,
    which bears content of the asked kind the question does not name, reached its context
    (``finding`` is ``answer_wrong``'s): fixing the answer fixes the case, ResponseError at the
    generate op, decided ``DECLINED`` (low confidence)."""
    return dataclasses.replace(finding, rule="declined_with_answer_in_context", by=C.DECLINED)


def invented(op: str) -> Finding:
    """No evidence message was located, the store's values and the answer's context were
    captured, and the wrong answer (not a decline) is in nothing the answer's op read: the
    generate op made it up, ResponseError."""
    return Finding(
        "invented",
        ErrorType.RESPONSE,
        op,
        "the wrong answer is in nothing the answer's op read: it made it up",
        C.INVENTED,
    )

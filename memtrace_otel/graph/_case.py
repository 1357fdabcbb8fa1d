"""A case: one judged question, named in the graph by the ``case`` of its ops.

What the traces say about a case (question, gold answers, prediction, the judge's verdict) is read
by :meth:`~memtrace_otel.graph.GraphIndex.case_from_graph`; a cases file or feedback may say more
(:func:`memtrace_otel.attribution.load_cases`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memtrace_otel.sources import Outcome


@dataclass(frozen=True)
class Case:
    """One question whose answer is judged.

    Attributes:
        case_id: the ``memtrace.case.id`` of the question's ops.
        question: the question text ("" when unknown).
        gold_answers: acceptable answers.
        evidence_refs: refs of the source messages holding the answer (``msg:...@1``), if known.
        verdict: ``correct``/``incorrect`` when known (from the cases file or a judge op).
        prediction: the system's answer, when known.
        feedback: the evaluations that flagged it (``memtrace.feedback`` spans, evaluation events
            or log records), oldest first; the last one decided. An expected answer given with
            that one is also in ``gold_answers``.
        source: where the case came from (``cases.jsonl:12``, ``trace`` or ``feedback``).
    """

    case_id: str
    question: str = ""
    gold_answers: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    verdict: str | None = None
    prediction: str | None = None
    feedback: tuple[Outcome, ...] = ()
    source: str = field(default="", compare=False)

"""Failed cases from feedback: outcomes (``memtrace_otel.sources.read_outcomes``) resolved to cases.

An outcome names its answer by ``memtrace.case.id``, or by the answer's span context. It is
resolved against the loaded graphs, in this order:

1. its explicit case id, when an op of the graphs carries it;
2. the case of the answer span, when that span is an op;
3. the one case of the answer's trace (or the trace id itself: contract v0.2's default case id).

Outcomes that resolve to no case are counted as *unknown* and reported, never raised: the answer's
trace may not be loaded yet (it arrives later, or lies outside the query window), so such a case
is not marked done and the next run picks it up. Several outcomes for one case: the latest wins
(:func:`~memtrace_otel.sources._outcomes.latest_outcomes`); a success overrides earlier failures and a
judge op's ``incorrect``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx

from memtrace_otel._shim import nodes_of
from memtrace_otel.attribution._model import Case
from memtrace_otel.graph import graph_index
from memtrace_otel.semconv import JudgeVerdict
from memtrace_otel.sources import Outcome, OutcomeRule
from memtrace_otel.sources._outcomes import DEFAULT_RULE, latest_outcomes, outcome_key
from memtrace_otel.sources._trust import DEFAULT_POLICY, UNVERIFIED, TrustPolicy

FEEDBACK_SOURCE = "feedback"
"""``Case.source`` of a case flagged by feedback."""


@dataclass
class FeedbackStats:
    """What the outcomes said: counts for the summary and the "how to mark failures" hint.

    Attributes:
        read: outcomes read (after the rule's name filter).
        failures: cases whose latest outcome is a failure.
        successes: cases whose latest outcome is a success.
        undecided: outcomes the rule could not classify (label and score outside its vocabulary).
        unknown: outcomes naming no loaded case (``case:<id>`` or ``span:<trace>/<span>``).
        refused: outcomes the trust policy refused, by reason (``unsigned``, ``unknown_key``,
            ``altered``, ``replayed``, ``future``, ``id_only``; docs/feedback.md).
        refused_sample: a few of them, as ``reason: where it was read``.
        unverified: outcomes used without a verified signature (no key set).
        signed: whether a key was set, so that every used outcome is verified.
    """

    read: int = 0
    failures: int = 0
    successes: int = 0
    undecided: int = 0
    unknown: list[str] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)
    refused_sample: list[str] = field(default_factory=list)
    unverified: int = 0
    signed: bool = False

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``summary.json``."""
        return dict(self.__dict__)


@dataclass
class StoreCases:
    """What deciding a store's failed cases needs of its graph: small and picklable, so a worker
    of the scaled batch job can send it to the driver instead of the graph.

    Attributes:
        case_ids: the cases the graph holds ops of, in the graph index's order.
        failed: the cases a judge op marked incorrect, sorted.
        span_case: answer span id -> case, for the op spans outcomes name (every op span when
            built without outcomes).
        trace_cases: trace id -> its cases, for the traces outcomes name (every trace without).
    """

    case_ids: list[str]
    failed: list[str]
    span_case: dict[str, str]
    trace_cases: dict[str, list[str]]

    @classmethod
    def of(
        cls, G: nx.MultiDiGraph, outcomes: Sequence[Outcome] | OutcomeIndex | None = None
    ) -> StoreCases:
        """The view of ``G`` (span and trace maps kept to what ``outcomes`` name, if given)."""
        index = graph_index(G)
        spans = traces = None
        if isinstance(outcomes, OutcomeIndex):
            spans, traces = outcomes.span_ids, outcomes.trace_ids
        elif outcomes is not None:
            spans = {o.span_id for o in outcomes if o.span_id}
            traces = {o.trace_id for o in outcomes if o.trace_id}
        span_case: dict[str, str] = {}
        trace_cases: dict[str, list[str]] = {}
        for case_id, ops in index.case_ops.items():
            for op in ops:
                data = nodes_of(G)[op]
                if spans is None or data["span_id"] in spans:
                    span_case[data["span_id"]] = case_id
                if traces is None or data["trace_id"] in traces:
                    cases = trace_cases.setdefault(data["trace_id"], [])
                    if case_id not in cases:
                        cases.append(case_id)
        return cls(list(index.case_ops), sorted(index.failed), span_case, trace_cases)


@dataclass(frozen=True)
class Pick:
    """A failed case chosen for attribution, before its graph is at hand.

    Attributes:
        store: the store whose graph the case is attributed on.
        case_id: the case.
        feedback: the outcomes that flagged it, oldest first (the latest decides); empty when a
            judge op flagged it.
    """

    store: str
    case_id: str
    feedback: tuple[Outcome, ...] = ()

    def case(self, G: nx.MultiDiGraph) -> Case:
        """The case to attribute on ``G`` (the store's graph)."""
        if not self.feedback:
            return Case(case_id=self.case_id, verdict=JudgeVerdict.INCORRECT, source="trace")
        latest = self.feedback[-1]
        base = graph_index(G).case_from_graph(self.case_id)
        gold = base.gold_answers
        if latest.expected:
            gold = (latest.expected, *(g for g in gold if g != latest.expected))
        return replace(
            base,
            gold_answers=gold,
            verdict=JudgeVerdict.INCORRECT.value,
            feedback=self.feedback,
            source=FEEDBACK_SOURCE,
        )


class _Resolver:
    """Outcome -> case over the views of every store, taken in sorted store order."""

    def __init__(self, views: Mapping[str, StoreCases]) -> None:
        self.store_of_case: dict[str, str] = {}
        self.span_case: dict[str, str] = {}
        self.trace_cases: dict[str, set[str]] = defaultdict(set)
        for store, view in sorted(views.items()):
            for case_id in view.case_ids:
                self.store_of_case.setdefault(case_id, store)
            self.span_case.update(view.span_case)
            for trace_id, cases in view.trace_cases.items():
                self.trace_cases[trace_id].update(cases)

    def case_of(self, outcome: Outcome) -> tuple[str | None, bool]:
        """The outcome's case, and whether another store's cases could resolve it otherwise
        (the case id it names is not here, or only the one case of its trace names it)."""
        if outcome.case_id and outcome.case_id in self.store_of_case:
            return outcome.case_id, False
        foreign = bool(outcome.case_id)
        if outcome.span_id and outcome.span_id in self.span_case:
            return self.span_case[outcome.span_id], foreign
        if outcome.trace_id:
            if outcome.trace_id in self.store_of_case:
                return outcome.trace_id, foreign
            cases = self.trace_cases.get(outcome.trace_id, set())
            if len(cases) == 1:
                return next(iter(cases)), True
        return None, False

    def by_id_only(self, outcome: Outcome, case_id: str) -> bool:
        """Whether ``outcome`` reaches ``case_id`` only by naming it: neither its answer span
        nor its trace belongs to the case."""
        if not outcome.case_id or outcome.case_id != case_id:
            return False
        if outcome.span_id and self.span_case.get(outcome.span_id) == case_id:
            return False
        trace = outcome.trace_id
        return not (trace and (trace == case_id or case_id in self.trace_cases.get(trace, ())))


def decide_feedback(
    views: Mapping[str, StoreCases],
    outcomes: Sequence[Outcome],
    stats: FeedbackStats | None = None,
) -> tuple[dict[str, tuple[str, tuple[Outcome, ...] | None]], FeedbackStats, set[str]]:
    """The cases the outcomes decide: ``{case_id: (store, history)}``, ``history`` being the
    outcomes about the case, oldest first (the latest a failure), or ``None`` when the latest
    says the answer was right. Also the counts, and the cases an outcome reached in a way the
    views of other stores could change (see :meth:`_Resolver.case_of`).

    An unverified outcome that reaches its case only by the case id it names, from a trace
    that is not the case's, is refused (``id_only``): a guessed id must not flag a case."""
    if stats is None:
        stats = FeedbackStats(read=len(outcomes))
    resolver = _Resolver(views)
    by_case: dict[str, list[Outcome]] = defaultdict(list)
    unsure: set[str] = set()
    for outcome in outcomes:
        case_id, foreign = resolver.case_of(outcome)
        if case_id is None:
            if outcome.failed is None:
                stats.undecided += 1
            stats.unknown.append(outcome_key(outcome))
            continue
        if outcome.trust == UNVERIFIED and resolver.by_id_only(outcome, case_id):
            stats.refused["id_only"] = stats.refused.get("id_only", 0) + 1
            if len(stats.refused_sample) < 5:
                stats.refused_sample.append(f"id_only: {outcome.source or outcome.origin}")
            continue
        if outcome.failed is None:
            stats.undecided += 1
        stats.unverified += outcome.trust == UNVERIFIED
        by_case[case_id].append(outcome)
        if foreign:
            unsure.add(case_id)
    decided: dict[str, tuple[str, tuple[Outcome, ...] | None]] = {}
    for case_id, found in sorted(by_case.items()):
        latest = latest_outcomes(found, key=lambda _: case_id)[case_id]
        if latest.failed is None:
            continue
        store = resolver.store_of_case[case_id]
        if latest.failed is False:
            stats.successes += 1
            decided[case_id] = (store, None)
            continue
        stats.failures += 1
        history = (*tuple(sorted((o for o in found if o is not latest), key=_when)), latest)
        decided[case_id] = (store, history)
    return decided, stats, unsure


class OutcomeIndex:
    """Outcomes judged by a rule and screened by its trust policy once, indexed by the case,
    span and trace ids they name, for deciding one store at a time (a partition of the scaled
    batch job): an outcome that names none of a store's cases, answer spans or traces resolves
    to no case of it (:meth:`_Resolver.case_of`), so each store's decision takes only those
    that do (:meth:`relevant`), instead of every outcome of the export each time.
    """

    def __init__(self, outcomes: Sequence[Outcome], rule: OutcomeRule = DEFAULT_RULE) -> None:
        self.outcomes = outcomes
        self.rule = rule
        judged = [r for r in (rule.apply(o) for o in outcomes) if r is not None]
        self.read = len(judged)
        self.used, self.refused, self.sample = rule.trust.screen(judged)
        self.span_ids = {o.span_id for o in outcomes if o.span_id}
        self.trace_ids = {o.trace_id for o in outcomes if o.trace_id}
        self._by: tuple[dict[str, list[int]], ...] = ({}, {}, {})  # case, span, trace ids
        for number, outcome in enumerate(self.used):
            for ids, key in zip(
                self._by, (outcome.case_id, outcome.span_id, outcome.trace_id), strict=True
            ):
                if key:
                    ids.setdefault(key, []).append(number)

    def relevant(self, views: Iterable[StoreCases]) -> list[Outcome]:
        """The screened outcomes that may resolve to a case of ``views``, in their order."""
        by_case, by_span, by_trace = self._by
        found: set[int] = set()
        for view in views:
            for case_id in view.case_ids:  # named as the case, or as its trace (contract v0.2)
                found.update(by_case.get(case_id, ()))
                found.update(by_trace.get(case_id, ()))
            for span_id in view.span_case:
                found.update(by_span.get(span_id, ()))
            for trace_id in view.trace_cases:
                found.update(by_trace.get(trace_id, ()))
        return [self.used[number] for number in sorted(found)]


_last_index: OutcomeIndex | None = None


def outcome_index(outcomes: Sequence[Outcome], rule: OutcomeRule) -> OutcomeIndex:
    """The :class:`OutcomeIndex` of these very ``outcomes`` and ``rule`` (the last one is kept:
    a worker decides store after store with the same ones)."""
    global _last_index
    index = _last_index
    if index is None or index.outcomes is not outcomes or index.rule is not rule:
        index = _last_index = OutcomeIndex(outcomes, rule)
    return index


def decide_failed(
    views: Mapping[str, StoreCases],
    outcomes: Sequence[Outcome] | OutcomeIndex = (),
    rule: OutcomeRule = DEFAULT_RULE,
) -> tuple[list[Pick], FeedbackStats, dict[str, int], set[str]]:
    """The failed cases without a cases file, in ``(store, case_id)`` order: every case whose
    latest feedback (``outcomes``, judged by ``rule``) is a failure, and every case a judge op
    marked ``incorrect`` unless a later feedback says the answer was right (docs/feedback.md).
    A case is picked in the first store (sorted) whose graph holds its ops.

    The one decision of the batch job, in one process (views of every graph) and at scale
    (views sent back by the workers).

    Given an :class:`OutcomeIndex` (made with ``rule``), only the outcomes that may resolve to
    a case of ``views`` are taken: the same picks, and counts of those alone.

    Returns:
        The picks, the feedback counts, the cases found per way (``judge``, ``feedback``), and
        the picked cases other stores' views could change (see :func:`decide_feedback`).
    """
    if isinstance(outcomes, OutcomeIndex):
        used = outcomes.relevant(views.values())
        read, refused, sample = outcomes.read, dict(outcomes.refused), list(outcomes.sample)
    else:
        judged = [r for r in (rule.apply(o) for o in outcomes) if r is not None]
        used, refused, sample = rule.trust.screen(judged)
        read = len(judged)
    stats = FeedbackStats(
        read=read, refused=refused, refused_sample=sample, signed=rule.trust.key is not None
    )
    decided, stats, unsure = decide_feedback(views, used, stats)
    where: dict[str, str] = {}
    for store, view in sorted(views.items()):
        for case_id in view.case_ids:
            where.setdefault(case_id, store)
    picks = [
        Pick(store, case_id)
        for store, view in sorted(views.items())
        for case_id in view.failed
        if where.get(case_id) == store and case_id not in decided
    ]
    flagged = [Pick(s, case_id, h) for case_id, (s, h) in decided.items() if h is not None]
    counts = {"judge": len(picks), "feedback": len(flagged)}
    picks = sorted(picks + flagged, key=lambda p: (p.store, p.case_id))
    return picks, stats, counts, unsure


def feedback_cases(
    graphs: dict[str, nx.MultiDiGraph],
    outcomes: list[Outcome],
    trust: TrustPolicy = DEFAULT_POLICY,
) -> tuple[dict[str, tuple[str, Case | None]], FeedbackStats]:
    """The cases the outcomes decide, by case id.

    Returns:
        ``{case_id: (store, case)}``: ``case`` is the failed case to attribute (question,
        prediction and gold answers from the graph; an expected answer given with the latest
        feedback first among the gold answers), or ``None`` when the latest outcome is a success.
        And the counts. ``trust`` screens the outcomes first (docs/feedback.md).
    """
    views = {store: StoreCases.of(G, outcomes) for store, G in graphs.items()}
    used, refused, sample = trust.screen(outcomes)
    stats = FeedbackStats(
        read=len(outcomes), refused=refused, refused_sample=sample, signed=trust.key is not None
    )
    decided, stats, _ = decide_feedback(views, used, stats)
    return {
        case_id: (store, None if h is None else Pick(store, case_id, h).case(graphs[store]))
        for case_id, (store, h) in decided.items()
    }, stats


def _when(outcome: Outcome) -> int:
    return outcome.time_unix_nano


__all__ = [
    "FEEDBACK_SOURCE",
    "FeedbackStats",
    "OutcomeIndex",
    "Pick",
    "StoreCases",
    "decide_failed",
    "decide_feedback",
    "feedback_cases",
    "outcome_index",
]

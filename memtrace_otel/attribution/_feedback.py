"""Failed cases from feedback: outcomes (``memtrace_otel.sources.read_outcomes``) resolved to cases.

An outcome names its answer by ``memtrace.case.id``, or by the answer's span context. It is
resolved against the loaded graphs, in this order:

1. its explicit case id, when an op of the graphs carries it;
2. the case of the answer span, when that span is an op;
3. the one case of the answer's trace (or the trace id itself: contract v0.2's default case id).

Outcomes that resolve to no case are counted as *unknown* and reported, never raised: the answer's
trace may not be loaded yet (it arrives later, or lies outside the query window), so such a case
is not marked done and the next run picks it up. Several outcomes for one case: the latest wins
(:func:`~memtrace_otel.sources.latest_outcomes`); a success overrides earlier failures and a
judge op's ``incorrect``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx

from memtrace_otel._shim import nodes_of
from memtrace_otel.attribution._index import graph_index
from memtrace_otel.attribution._model import Case
from memtrace_otel.semconv import JudgeVerdict
from memtrace_otel.sources import Outcome, latest_outcomes, outcome_key

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
    """

    read: int = 0
    failures: int = 0
    successes: int = 0
    undecided: int = 0
    unknown: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``summary.json``."""
        return dict(self.__dict__)


class _Resolver:
    def __init__(self, graphs: dict[str, nx.MultiDiGraph]) -> None:
        self.store_of_case: dict[str, str] = {}
        self.span_case: dict[str, str] = {}
        self.trace_cases: dict[str, set[str]] = defaultdict(set)
        for store, G in sorted(graphs.items()):
            for case_id, ops in graph_index(G).case_ops.items():
                self.store_of_case.setdefault(case_id, store)
                for op in ops:
                    data = nodes_of(G)[op]
                    self.span_case[data["span_id"]] = case_id
                    self.trace_cases[data["trace_id"]].add(case_id)

    def case_of(self, outcome: Outcome) -> str | None:
        if outcome.case_id and outcome.case_id in self.store_of_case:
            return outcome.case_id
        if outcome.span_id and outcome.span_id in self.span_case:
            return self.span_case[outcome.span_id]
        if outcome.trace_id:
            if outcome.trace_id in self.store_of_case:
                return outcome.trace_id
            cases = self.trace_cases.get(outcome.trace_id, set())
            if len(cases) == 1:
                return next(iter(cases))
        return None


def feedback_cases(
    graphs: dict[str, nx.MultiDiGraph], outcomes: list[Outcome]
) -> tuple[dict[str, tuple[str, Case | None]], FeedbackStats]:
    """The cases the outcomes decide, by case id.

    Returns:
        ``{case_id: (store, case)}``: ``case`` is the failed case to attribute (question,
        prediction and gold answers from the graph; an expected answer given with the latest
        feedback first among the gold answers), or ``None`` when the latest outcome is a success.
        And the counts.
    """
    stats = FeedbackStats(read=len(outcomes))
    resolver = _Resolver(graphs)
    by_case: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.failed is None:
            stats.undecided += 1
        case_id = resolver.case_of(outcome)
        if case_id is None:
            stats.unknown.append(outcome_key(outcome))
            continue
        by_case[case_id].append(outcome)
    decided: dict[str, tuple[str, Case | None]] = {}
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
        base = graph_index(graphs[store]).case_from_graph(case_id)
        gold = base.gold_answers
        if latest.expected:
            gold = (latest.expected, *(g for g in gold if g != latest.expected))
        decided[case_id] = (
            store,
            replace(
                base,
                gold_answers=gold,
                verdict=JudgeVerdict.INCORRECT.value,
                feedback=history,
                source=FEEDBACK_SOURCE,
            ),
        )
    return decided, stats


def _when(outcome: Outcome) -> int:
    return outcome.time_unix_nano


__all__ = ["FEEDBACK_SOURCE", "FeedbackStats", "feedback_cases"]

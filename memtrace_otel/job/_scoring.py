"""Production-mode scoring: what a verdict is worth when it may abstain.

The benchmark's labels say which op is the earliest decisive fault. In production a verdict
may also abstain (``error_type`` null), so besides accuracy a method is judged by how often it
abstains, how often it names the *wrong* culprit (worse than abstaining: a user acts on it), and
whether its confidence means something (accuracy per confidence bucket).

:func:`production_view` turns a benchmark's graph into what production sees: no judge ops and
no gold answers (a person flagged the answer, nobody wrote the right one), and optionally no
captured values (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` unset: refs, digests and
meta survive, values do not).

>>> labels = [
...     {"case_id": "a", "error_type": "RetrievalError", "op_id": "r1"},
...     {"case_id": "b", "error_type": "ResponseError", "op_id": "g1"},
...     {"case_id": "c", "error_type": "UpdateError", "op_id": "u1"},
... ]
>>> preds = [
...     {"case_id": "a", "error_type": "RetrievalError", "op_id": "r1", "confidence": 0.9},
...     {"case_id": "b", "error_type": "RetrievalError", "op_id": "r1", "confidence": 0.5},
...     {"case_id": "c", "error_type": None, "op_id": None, "confidence": 0.0},
... ]
>>> score = score_verdicts(labels, preds)
>>> score.right, score.wrong, score.abstained
(1, 1, 1)
>>> [(b.low, b.total, b.right) for b in score.buckets if b.total]
[(0.5, 1, 0), (0.8, 1, 1)]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from memtrace_otel.semconv import Category, ErrorType, OpKind

ABSTAIN = "(abstain)"
"""The confusion matrix's column for verdicts that name no error type."""

BUCKET_EDGES = (0.0, 0.3, 0.5, 0.8)
"""Lower edges of the confidence buckets: [0, 0.3), [0.3, 0.5), [0.5, 0.8), [0.8, 1]."""

TRUSTED = 0.8
"""Verdicts at or above this confidence must be right at least 90 % of the time (contract 5)."""


@dataclass
class Bucket:
    """Verdicts whose confidence falls in ``[low, high)`` (the last bucket includes 1.0)."""

    low: float
    high: float
    total: int = 0
    right: int = 0

    @property
    def accuracy(self) -> float:
        """Share of the bucket's verdicts naming the right op and error type."""
        return self.right / self.total if self.total else 0.0


@dataclass
class ProductionScore:
    """Right, wrong and abstained verdicts, the confusion matrix and the calibration buckets.

    A verdict is *right* when both its error type and its op match the label; *wrong* when it
    names a culprit and either differs; *abstained* when it names no error type. A labelled case
    with no verdict counts as abstained.
    """

    total: int = 0
    right: int = 0
    type_right: int = 0
    wrong: int = 0
    wrong_confident: int = 0
    abstained: int = 0
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    buckets: list[Bucket] = field(default_factory=list)

    @property
    def abstention_rate(self) -> float:
        """Share of labelled cases without a culprit."""
        return self.abstained / self.total if self.total else 0.0

    @property
    def wrong_rate(self) -> float:
        """Share of labelled cases given a wrong culprit."""
        return self.wrong / self.total if self.total else 0.0

    @property
    def precision(self) -> float:
        """Share of non-abstaining verdicts that are right."""
        named = self.right + self.wrong
        return self.right / named if named else 0.0

    def trusted(self) -> Bucket:
        """All verdicts of confidence >= :data:`TRUSTED` as one bucket."""
        out = Bucket(TRUSTED, 1.0)
        for b in self.buckets:
            if b.low >= TRUSTED:
                out.total += b.total
                out.right += b.right
        return out

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        trusted = self.trusted()
        return {
            "total": self.total,
            "right": self.right,
            "error_type_right": self.type_right,
            "wrong": self.wrong,
            "wrong_confidence_above_0.3": self.wrong_confident,
            "abstained": self.abstained,
            "abstention_rate": round(self.abstention_rate, 4),
            "wrong_rate": round(self.wrong_rate, 4),
            "precision": round(self.precision, 4),
            "confusion": self.confusion,
            "calibration": [
                {
                    "low": b.low,
                    "high": b.high,
                    "total": b.total,
                    "right": b.right,
                    "accuracy": round(b.accuracy, 4),
                }
                for b in self.buckets
            ],
            "trusted": {"total": trusted.total, "accuracy": round(trusted.accuracy, 4)},
        }


def score_verdicts(
    labels: Iterable[Mapping[str, Any]], predictions: Iterable[Mapping[str, Any]]
) -> ProductionScore:
    """Score verdict rows against ``labels.jsonl`` rows (labels without an error type skipped)."""
    predicted = {str(p.get("case_id")): p for p in predictions}
    score = ProductionScore()
    edges = [*BUCKET_EDGES, 1.0]
    score.buckets = [Bucket(lo, hi) for lo, hi in itertools.pairwise(edges)]
    for label in labels:
        gold = label.get("error_type")
        if not gold:
            continue
        score.total += 1
        pred = predicted.get(str(label.get("case_id"))) or {}
        named = pred.get("error_type")
        row = score.confusion.setdefault(str(gold), {})
        column = str(named) if named else ABSTAIN
        row[column] = row.get(column, 0) + 1
        if not named:
            score.abstained += 1
            continue
        type_ok = named == gold
        ok = type_ok and bool(label.get("op_id")) and pred.get("op_id") == label.get("op_id")
        score.type_right += type_ok
        confidence = float(pred.get("confidence") or 0.0)
        if ok:
            score.right += 1
        else:
            score.wrong += 1
            score.wrong_confident += confidence > 0.3
        bucket = next(b for b in reversed(score.buckets) if confidence >= b.low)
        bucket.total += 1
        bucket.right += ok
    return score


def format_production(score: ProductionScore) -> str:
    """The rates, the calibration buckets and the confusion matrix as text."""
    trusted = score.trusted()
    lines = [
        f"cases {score.total}: right {score.right} ({score.right / max(score.total, 1):.3f}), "
        f"wrong {score.wrong} ({score.wrong_rate:.3f}; {score.wrong_confident} with confidence "
        f"> 0.3), abstained {score.abstained} ({score.abstention_rate:.3f}); "
        f"precision of named culprits {score.precision:.3f}",
        "calibration (right = error type and op):",
    ]
    for b in score.buckets:
        closing = "]" if b.high >= 1.0 else ")"
        lines.append(
            f"  confidence [{b.low:.1f}, {b.high:.1f}{closing}  n={b.total:>5}  "
            f"accuracy {b.accuracy:.3f}"
        )
    lines.append(
        f"  confidence >= {TRUSTED}: n={trusted.total}, accuracy {trusted.accuracy:.3f} "
        f"(goal >= 0.90)"
    )
    lines.append(format_confusion(score.confusion))
    return "\n".join(lines)


def format_confusion(confusion: Mapping[str, Mapping[str, int]]) -> str:
    """Rows: the labelled error type; columns: the predicted one (or abstention)."""
    labels = [e.value for e in ErrorType]
    columns = [*labels, ABSTAIN]
    short = {c: c.replace("Error", "")[:10] for c in columns}
    head = "label \\ verdict".ljust(16) + "".join(short[c].rjust(11) for c in columns)
    rows = [head]
    for label in labels:
        if label not in confusion:
            continue
        row = confusion[label]
        rows.append(label.ljust(16) + "".join(str(row.get(c, 0)).rjust(11) for c in columns))
    return "\n".join(rows)


def production_view(
    G: nx.MultiDiGraph, *, capture: bool = True, judges: bool = False
) -> nx.MultiDiGraph:
    """A copy of a benchmark graph as production sees it.

    Judge ops and gold variables are removed unless ``judges`` (in production a person flags
    the answer; nobody wrote the right one into the trace). With ``capture=False`` every
    variable's value is dropped, as with content capture off; refs, digests, tombstones and meta
    stay.
    """
    H = G.copy()
    drop = (
        []
        if judges
        else [
            n
            for n, d in H.nodes(data=True)
            if (d.get("type") == "op" and d.get("kind") == OpKind.JUDGE)
            or (d.get("type") != "op" and d.get("category") == Category.GOLD)
        ]
    )
    # Variables only the judge wrote (its score) go with it.
    for op in [n for n in drop if H.nodes[n].get("type") == "op"]:
        drop.extend(v for v in H.successors(op) if H.in_degree(v) == 1)
    H.remove_nodes_from(set(drop))
    if not capture:
        for _, data in H.nodes(data=True):
            if data.get("type") != "op":
                data.pop("value", None)
    return H


__all__ = [
    "ABSTAIN",
    "BUCKET_EDGES",
    "TRUSTED",
    "Bucket",
    "ProductionScore",
    "format_confusion",
    "format_production",
    "production_view",
    "score_verdicts",
]

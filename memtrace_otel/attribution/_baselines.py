"""Constant baselines that need no model: every accuracy has a floor to beat."""

from __future__ import annotations

import networkx as nx

from memtrace_otel.attribution._base import blame, first_op_of_kind, last_op_of_kind, no_verdict
from memtrace_otel.attribution._model import Case, Verdict
from memtrace_otel.semconv import OpKind


class BlameGenerate:
    """Always blames the case's answer-generating op (``ResponseError``)."""

    name = "blame-generate"

    def attribute(self, G: nx.MultiDiGraph, case: Case) -> Verdict:
        op = last_op_of_kind(G, case, OpKind.GENERATE)
        if op is None:
            return no_verdict(G, case, method=self.name, reason="the case has no generate op")
        return blame(G, case, op, method=self.name, reason="constant baseline", confidence=0.0)


class BlameRetrieve:
    """Always blames the case's first retrieval op (``RetrievalError``)."""

    name = "blame-retrieve"

    def attribute(self, G: nx.MultiDiGraph, case: Case) -> Verdict:
        op = first_op_of_kind(G, case, OpKind.RETRIEVE)
        if op is None:
            return no_verdict(G, case, method=self.name, reason="the case has no retrieve op")
        return blame(G, case, op, method=self.name, reason="constant baseline", confidence=0.0)

"""The method interface and the helpers every method uses to phrase a verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import networkx as nx

from memtrace_otel.attribution._model import Case, Verdict
from memtrace_otel.graph import graph_index
from memtrace_otel.semconv import ERROR_TYPE_BY_KIND, ErrorType, OpKind
from memtrace_otel.semconv.attributes import MEMTRACE_SOURCE_OP_ID


@runtime_checkable
class Method(Protocol):
    """An attribution method: one failed case in, one verdict out.

    ``G`` holds at least the case's ops and the memory store they read (the batch job passes the
    store's graph); methods must not modify it.
    """

    name: str

    def attribute(self, G: nx.MultiDiGraph, case: Case) -> Verdict:
        """The earliest decisive faulty op of ``case``."""
        ...


def blame(
    G: nx.MultiDiGraph,
    case: Case,
    op: str,
    *,
    method: str,
    reason: str,
    confidence: float,
    evidence_refs: Sequence[str] = (),
    unchecked: Sequence[str] = (),
    missing_traces: Sequence[str] = (),
    error_type: ErrorType | None = None,
    rule: str | None = None,
) -> Verdict:
    """A verdict naming ``op``, its error type the deciding rule's (else taken from its kind).

    ``error_type``: the label of the rule that decided (``None``: the label of ``op``'s kind,
    contract section 2); ``rule``: that rule's name.
    """
    data = G.nodes[op]
    if error_type is None:
        try:
            error_type = ERROR_TYPE_BY_KIND[OpKind(data.get("kind"))]
        except ValueError:
            error_type = None
    return Verdict(
        case_id=case.case_id,
        error_type=error_type.value if error_type is not None else None,
        op_id=op,
        op_name=data.get("name"),
        method=method,
        confidence=round(confidence, 3),
        evidence_refs=tuple(evidence_refs),
        reason=reason,
        system=data.get("system") or _case_attr(G, case, "system"),
        store_id=data.get("store") or _case_attr(G, case, "store"),
        unchecked=tuple(unchecked),
        missing_traces=tuple(missing_traces),
        trace_id=data.get("trace_id"),
        source_op_id=_source_op_id(data),
        rule=rule,
    )


def _source_op_id(data: dict[str, object]) -> str | None:
    attrs = data.get("attributes")
    value = attrs.get(MEMTRACE_SOURCE_OP_ID) if isinstance(attrs, dict) else None
    return value if isinstance(value, str) else None


def no_verdict(
    G: nx.MultiDiGraph, case: Case, *, method: str, reason: str, **extra: object
) -> Verdict:
    """A verdict that names no culprit, with the reason."""
    return Verdict(
        case_id=case.case_id,
        error_type=None,
        op_id=None,
        op_name=None,
        method=method,
        confidence=0.0,
        reason=reason,
        system=_case_attr(G, case, "system"),
        store_id=_case_attr(G, case, "store"),
        **extra,  # type: ignore[arg-type]
    )


def _case_attr(G: nx.MultiDiGraph, case: Case, key: str) -> str | None:
    for op in graph_index(G).ops_of(case.case_id):
        value = G.nodes[op].get(key)
        if value is not None:
            return str(value)
    return None


def last_op_of_kind(G: nx.MultiDiGraph, case: Case, *kinds: OpKind) -> str | None:
    """The case's last op of one of ``kinds`` in execution order."""
    wanted = {k.value for k in kinds}
    found = [op for op in graph_index(G).ops_of(case.case_id) if G.nodes[op]["kind"] in wanted]
    return found[-1] if found else None


def first_op_of_kind(G: nx.MultiDiGraph, case: Case, *kinds: OpKind) -> str | None:
    """The case's first op of one of ``kinds`` in execution order."""
    wanted = {k.value for k in kinds}
    return next(
        (op for op in graph_index(G).ops_of(case.case_id) if G.nodes[op]["kind"] in wanted), None
    )

"""A small, fixed evolution graph for documentation examples and quick experiments."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import networkx as nx

from memtrace_otel.graph._build import build_graph
from memtrace_otel.semconv import EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import attributes as sc

__all__ = ["example_graph", "example_records"]

_TRACE_A = "0000000000000000000000000000000a"  # session 1: a fact is learnt
_TRACE_B = "0000000000000000000000000000000b"  # session 2: the fact changes
_TRACE_C = "0000000000000000000000000000000c"  # a question about it, answered wrongly
_TRACE_UNLOADED = "000000000000000000000000000000ff"


def _var(ref: str, role: str, category: str, value: str, time: int) -> EventRecord:
    return EventRecord(
        sc.MEMTRACE_VARIABLE_EVENT,
        time,
        {
            sc.MEMTRACE_VARIABLE_REF: ref,
            sc.MEMTRACE_VARIABLE_ROLE: role,
            sc.MEMTRACE_VARIABLE_CATEGORY: category,
            sc.MEMTRACE_VARIABLE_DIGEST: "sha256:" + hashlib.sha256(value.encode()).hexdigest(),
            sc.MEMTRACE_VARIABLE_VALUE: value,
        },
    )


def _op(
    trace_id: str,
    span_id: str,
    kind: str,
    name: str,
    stage: str,
    start: int,
    inputs: Sequence[str],
    outputs: Sequence[str],
    events: Sequence[EventRecord] = (),
    *,
    case: str | None = None,
    verdict: str | None = None,
    links: Sequence[LinkRecord] = (),
) -> SpanRecord:
    attributes: dict[str, object] = {
        sc.MEMTRACE_OP_KIND: kind,
        sc.MEMTRACE_OP_NAME: name,
        sc.MEMTRACE_STAGE: stage,
        sc.MEMTRACE_SYSTEM: "mem0",
        sc.GEN_AI_MEMORY_STORE_ID: "u1",
        sc.MEMTRACE_OP_INPUTS: tuple(inputs),
        sc.MEMTRACE_OP_OUTPUTS: tuple(outputs),
    }
    if case is not None:
        attributes[sc.MEMTRACE_CASE_ID] = case
    if verdict is not None:
        attributes[sc.MEMTRACE_JUDGE_VERDICT] = verdict
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=f"{sc.OP_SPAN_NAME_PREFIX}{kind} {name}",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10,
        status_code="OK",
        attributes=attributes,  # type: ignore[arg-type]
        events=tuple(events),
        links=tuple(links),
    )


def _link(trace_id: str, span_id: str, ref: str) -> LinkRecord:
    return LinkRecord(trace_id, span_id, {sc.MEMTRACE_VARIABLE_REF: ref})


def example_records() -> list[SpanRecord]:
    """The span records behind :func:`example_graph` (three traces, nine ops)."""
    a, b, c = _TRACE_A, _TRACE_B, _TRACE_C
    return [
        _op(a, "a000000000000001", "ingest", "mem0.add", "construction", 100, [], ["msg:1@1"],
            [_var("msg:1@1", "output", "message", "I moved to Porto", 105)]),
        _op(a, "a000000000000002", "extract", "mem0.fact_extraction", "construction", 200,
            ["msg:1@1", "prompt:extract@1"], ["fact:1@1"],
            [_var("prompt:extract@1", "input", "prompt", "Extract facts from: {msg}", 201),
             _var("fact:1@1", "output", "memory", "lives in Porto", 205)]),
        _op(a, "a000000000000003", "create", "mem0.add_memory", "construction", 300,
            ["fact:1@1"], ["mem:1@1"], [_var("mem:1@1", "output", "memory", "lives in Porto", 305)],
            links=[_link(a, "a000000000000002", "fact:1@1")]),
        _op(b, "b000000000000001", "ingest", "mem0.add", "construction", 1000, [], ["msg:2@1"],
            [_var("msg:2@1", "output", "message", "I moved on to Lisbon", 1005)]),
        _op(b, "b000000000000002", "update", "mem0.update", "construction", 1100,
            ["mem:1@1", "msg:2@1"], ["mem:1@2"],
            [_var("mem:1@2", "output", "memory", "lives in Lisbon", 1105)],
            links=[_link(a, "a000000000000003", "mem:1@1")]),
        _op(c, "c000000000000001", "retrieve", "mem0.search", "retrieval", 2000,
            ["q:1@1", "mem:1@2"], ["cands:1@1"],
            [_var("q:1@1", "input", "query", "Where do I live?", 2001),
             _var("cands:1@1", "output", "candidates", '["lives in Lisbon"]', 2005)],
            case="c1",
            links=[_link(b, "b000000000000002", "mem:1@2"),
                   _link(_TRACE_UNLOADED, "f000000000000001", "profile:1@1")]),
        _op(c, "c000000000000002", "generate", "mem0.answer", "response", 2100,
            ["cands:1@1"], ["pred:1@1"], [_var("pred:1@1", "output", "prediction", "Porto", 2105)],
            case="c1"),
        _op(c, "c000000000000003", "judge", "llm-judge", "evaluation", 2200,
            ["pred:1@1", "gold:1@1"], ["score:1@1"],
            [_var("gold:1@1", "input", "gold", "Lisbon", 2201),
             _var("score:1@1", "output", "score", "0", 2205)],
            case="c1", verdict="incorrect"),
        _op(c, "c000000000000004", "retrieve", "mem0.search", "retrieval", 3000,
            ["q:2@1"], ["cands:2@1"], case="c2"),
    ]  # fmt: skip


def example_graph() -> nx.MultiDiGraph:
    """A small evolution graph: a fact learnt (trace a), changed (trace b), asked about (trace c).

    Case ``c1`` retrieves ``mem:1@2`` ("lives in Lisbon") but answers "Porto": its judge says
    ``incorrect``. One retrieve op links to a trace that is not loaded.

    >>> G = example_graph()
    >>> G.number_of_nodes(), G.number_of_edges()
    (22, 21)
    """
    return build_graph(example_records())

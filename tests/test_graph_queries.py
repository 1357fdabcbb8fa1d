"""Queries on the evolution graph, on the fixed example graph (three traces, two cases)."""

from __future__ import annotations

import networkx as nx
import pytest

from memtrace_otel.errors import GraphError
from memtrace_otel.graph import (
    build_graph,
    case_subgraph,
    example_graph,
    example_records,
    execution_order,
    graph_index,
    is_op,
    linked_trace_ids,
)
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.semconv import attributes as sc

A1, A2, A3 = "a000000000000001", "a000000000000002", "a000000000000003"
B1, B2 = "b000000000000001", "b000000000000002"
C1, C2, C3, C4 = "c000000000000001", "c000000000000002", "c000000000000003", "c000000000000004"


def op_span(
    span_id: str,
    kind: str,
    inputs: list[str],
    outputs: list[str],
    *,
    start: int,
    end: int | None = None,
    trace_id: str = "1" * 32,
    case: str | None = None,
) -> SpanRecord:
    attributes = {
        sc.MEMTRACE_OP_KIND: kind,
        sc.MEMTRACE_OP_NAME: kind,
        sc.MEMTRACE_OP_INPUTS: tuple(inputs),
        sc.MEMTRACE_OP_OUTPUTS: tuple(outputs),
    }
    if case is not None:
        attributes[sc.MEMTRACE_CASE_ID] = case
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=kind,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1 if end is None else end,
        attributes=attributes,
    )


@pytest.fixture(scope="module")
def G() -> nx.MultiDiGraph:
    return example_graph()


def test_case_subgraph_holds_everything_upstream_across_traces(G: nx.MultiDiGraph) -> None:
    H = case_subgraph(G, "c1")
    assert set(H.nodes) == {
        A1, A2, A3, B1, B2, C1, C2, C3,
        "msg:1@1", "prompt:extract@1", "fact:1@1", "mem:1@1", "msg:2@1", "mem:1@2",
        "q:1@1", "cands:1@1", "pred:1@1", "gold:1@1", "score:1@1",
    }  # fmt: skip
    assert set(H.edges(keys=True)) == {
        (u, v, k) for u, v, k in G.edges(keys=True) if u in H and v in H
    }
    assert {H.nodes[op]["trace_id"][-1] for op in H if is_op(H, op)} == {"a", "b", "c"}


def test_case_subgraph_is_a_copy(G: nx.MultiDiGraph) -> None:
    H = case_subgraph(G, "c2")
    assert set(H.nodes) == {C4, "q:2@1", "cands:2@1"}
    H.add_node("scratch")
    H.nodes[C4]["kind"] = "changed"
    assert "scratch" not in G and G.nodes[C4]["kind"] == "retrieve"
    assert H.graph["case_id"] == "c2" and "case_id" not in G.graph


def test_case_subgraph_follows_version_predecessors() -> None:
    # The retrieve reads mem@2 only; mem@1 and its writer are upstream through the version edge.
    G = build_graph(
        [
            op_span("a000000000000001", "create", [], ["mem@1"], start=1),
            op_span("a000000000000002", "update", [], ["mem@2"], start=2),
            op_span("a000000000000003", "retrieve", ["mem@2"], ["c@1"], start=3, case="k"),
        ]
    )  # fmt: skip
    assert set(case_subgraph(G, "k").nodes) == set(G.nodes)


def test_case_subgraph_of_an_unknown_case_raises(G: nx.MultiDiGraph) -> None:
    with pytest.raises(GraphError, match="nope"):
        case_subgraph(G, "nope")


def test_the_index_follows_versions_and_their_writers(G: nx.MultiDiGraph) -> None:
    index = graph_index(G)
    assert index.next_version("mem:1@1") == "mem:1@2"
    assert index.next_version("mem:1@2") is None
    assert [index.writer(ref) for ref in ("mem:1@1", "mem:1@2")] == [A3, B2]


def test_the_index_names_writers_readers_inputs_and_outputs(G: nx.MultiDiGraph) -> None:
    index = graph_index(G)
    assert index.writer("mem:1@1") == A3
    assert index.readers("mem:1@2") == [C1]
    assert index.writer("gold:1@1") is None  # given, written by no loaded op
    assert index.readers("score:1@1") == []
    assert "mem:1@1" in index.inputs(B2) and index.outputs(B2) == ["mem:1@2"]
    assert index.ops_of("c1") == execution_order(G, index.ops_of("c1"))


def test_execution_order_of_all_nodes(G: nx.MultiDiGraph) -> None:
    order = execution_order(G)
    ops = [n for n in order if is_op(G, n)]
    assert ops == [A1, A2, A3, B1, B2, C1, C2, C3, C4]
    externals = ["gold:1@1", "prompt:extract@1", "q:1@1", "q:2@1"]
    assert order[:4] == externals
    # Every variable right after its writer.
    for var in ("msg:1@1", "fact:1@1", "mem:1@2", "score:1@1"):
        writer = G.nodes[var]["writer"]
        assert order.index(var) == order.index(writer) + 1


def test_execution_order_breaks_ties_deterministically() -> None:
    same_time = [
        op_span("00000000000000b2", "extract", [], ["x@1"], start=5, end=6, trace_id="2" * 32),
        op_span("00000000000000b1", "extract", [], ["y@1"], start=5, end=6, trace_id="2" * 32),
        op_span("00000000000000a9", "extract", [], ["z@1"], start=5, end=6, trace_id="3" * 32),
        op_span("00000000000000ff", "extract", [], ["w@1"], start=5, end=5, trace_id="9" * 32),
    ]
    for records in (same_time, same_time[::-1]):
        G = build_graph(records)
        ops = ["00000000000000b1", "00000000000000a9", "00000000000000ff", "00000000000000b2"]
        assert execution_order(G, ops) == [
            "00000000000000ff",  # ends first
            "00000000000000b1",  # then by trace id, then span id
            "00000000000000b2",
            "00000000000000a9",
        ]
    with pytest.raises(GraphError):
        execution_order(G, ["missing"])


def test_linked_trace_ids_are_the_traces_not_loaded() -> None:
    records = example_records()
    G = build_graph(records)
    assert linked_trace_ids(G) == ["000000000000000000000000000000ff"]
    # Without trace b loaded, the link from trace c to b's update names it too.
    G = build_graph([r for r in records if not r.span_id.startswith("b")])
    assert linked_trace_ids(G) == [
        "0000000000000000000000000000000b",
        "000000000000000000000000000000ff",
    ]
    # The index finds the same ones in its own pass over the nodes.
    assert graph_index(G).missing_traces == set(linked_trace_ids(G))
    assert graph_index(build_graph(records)).missing_traces == {"0" * 30 + "ff"}


def test_the_index_gives_each_caller_its_own_list_of_inputs(G: nx.MultiDiGraph) -> None:
    index = graph_index(G)
    first = index.inputs(B2)
    first.append("not-an-input")
    assert "not-an-input" not in index.inputs(B2) and "mem:1@1" in index.inputs(B2)


def test_the_index_names_the_failed_cases(G: nx.MultiDiGraph) -> None:
    assert graph_index(G).failed == {"c1"}
    correct = SpanRecord(
        trace_id="1" * 32,
        span_id="1" * 16,
        name="judge",
        attributes={
            sc.MEMTRACE_OP_KIND: "judge",
            sc.MEMTRACE_OP_NAME: "llm-judge",
            sc.MEMTRACE_CASE_ID: "c7",
            sc.MEMTRACE_JUDGE_VERDICT: "correct",
        },
    )
    H = build_graph([*example_records(), correct])
    assert graph_index(H).failed == {"c1"} and graph_index(H).judged == {"c1", "c7"}

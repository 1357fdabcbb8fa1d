"""The shipped graph builder makes the very graph of the reference builder, to the order of every
dict: the node and edge attribute dicts, the adjacency dicts, ``G.graph``, the anomalies.

The reference (``tests/_graph_reference.py``) is a frozen copy of the builder before its
per-span speed-ups (issue #34). Inputs: a generated benchmark workload, every shared fixture
trace, the builder tests' hand-made bad inputs, hostile attribute values, and random arrival
orders and chunkings folded with and without a fold index (the live processor's way).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtrace_otel.graph import build_graph, new_graph, remove_ops
from memtrace_otel.graph._build import FoldIndex, fold_records
from memtrace_otel.graph._example import example_records
from memtrace_otel.semconv import EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import attributes as sc
from memtrace_otel.sources import iter_records
from tests import _graph_reference as reference
from tests.conftest import shared_path
from tests.test_graph_build import bad_records, chain, op_span, plain_span, var_event


def dump(G: nx.MultiDiGraph) -> str:
    """Everything in ``G`` in the order it is stored (nodes, each adjacency dict, G.graph)."""
    return json.dumps(
        {
            "nodes": list(G.nodes(data=True)),
            "succ": [(u, [(v, list(keyed.items())) for v, keyed in nbrs.items()]) for u, nbrs in G.succ.items()],
            "pred": [(v, [(u, list(keyed)) for u, keyed in nbrs.items()]) for v, nbrs in G.pred.items()],
            "graph": G.graph,
        },
        default=repr,
    )  # fmt: skip


def assert_same_build(records: list[SpanRecord]) -> None:
    assert dump(build_graph(records)) == dump(reference.build_graph(records))


def hostile_records() -> list[SpanRecord]:
    """Values of every type where the builder expects strings, refs or mappings."""
    weird = {"a": (1, 2), "b": b"\x00\xff"}
    return [
        op_span(
            "a0000000000000f1",
            weird,  # type: ignore[arg-type]
            ["in@1", "in@1", "in@01", "x@0", "@1", "a@b@2", "é@1", "a@١", 5],  # type: ignore[list-item]
            ["out@1", "in@1"],
            events=[
                EventRecord(sc.MEMTRACE_VARIABLE_EVENT, 1, {sc.MEMTRACE_VARIABLE_REF: weird}),
                EventRecord(sc.MEMTRACE_VARIABLE_EVENT, 1, {sc.MEMTRACE_VARIABLE_REF: 7}),
                EventRecord("other.event", 1, {sc.MEMTRACE_VARIABLE_REF: "out@1"}),
                var_event("out@1", value=None,
                          **{sc.MEMTRACE_VARIABLE_VALUE: (1, "x"), sc.MEMTRACE_VARIABLE_META: weird}),
                var_event("out@1", time=-1, **{sc.MEMTRACE_VARIABLE_META: '{"k": [1]}',
                                              sc.MEMTRACE_VARIABLE_TRUNCATED: True}),
                var_event("in@1", "input", None, **{sc.MEMTRACE_VARIABLE_META: "not json",
                                                    sc.MEMTRACE_VARIABLE_DELETED: 1}),
                var_event("in@1", "output", "w", category=3,  # type: ignore[arg-type]
                          **{sc.MEMTRACE_VARIABLE_META: '{"a": NaN}'}),
            ],
            links=[LinkRecord("0" * 32, "b" * 16, {sc.MEMTRACE_VARIABLE_REF: ("in@1",)}),
                   LinkRecord("0" * 32, "c" * 16, {})],
            memtrace__case__id=("c", 1),
            memtrace__stage=7,
            tags=["x", ("y", 2.5)],
            blob=b"\x01\x02",
            nested={"k": {"v": [None, True]}},
            **{"memtrace.system": None},
        ),
        op_span("a0000000000000f2", "judge", "in@1", (), name=None,  # type: ignore[arg-type]
                memtrace__judge__verdict="incorrect"),
        op_span("a0000000000000f3", None, ("in@2",), ("in@3",), name="n", start=5, end=5),
        op_span("a0000000000000f4", "retrieve", ["in@3"], ["ans@1"], start=5, end=5,
                memtrace__op__inputs=["in@3", "in@3"]),
        op_span("a0000000000000f5", "other", [], [], memtrace__op__outputs=7),
        op_span("a0000000000000f6", "generate", [], [], memtrace__op__outputs={"a@1": 1}),
        plain_span("a0000000000000f7", parent="a0000000000000f1"),
    ]  # fmt: skip


def test_a_generated_workload(tmp_path: Path) -> None:
    from memtrace_otel.cli import main

    out = tmp_path / "bench"
    assert main(["bench", "generate", "--users", "2", "--out", str(out)]) == 0
    records = list(iter_records(str(out / "traces.jsonl")))
    assert len(records) > 1000
    assert_same_build(records)
    by_store: dict[Any, list[SpanRecord]] = {}
    for record in records:
        by_store.setdefault(record.attributes.get(sc.GEN_AI_MEMORY_STORE_ID), []).append(record)
    for group in by_store.values():  # as the batch job builds them
        assert_same_build(group)
    rng = random.Random(5)
    shuffled = records[:]
    rng.shuffle(shuffled)
    assert_same_build(shuffled)


def test_every_shared_fixture() -> None:
    root = shared_path("fixtures")
    paths = sorted(root.rglob("*.json"))
    assert paths
    for path in paths:
        assert_same_build(list(iter_records(str(path))))


def test_hand_made_and_hostile_inputs() -> None:
    for records in (example_records(), chain(), bad_records(), hostile_records()):
        assert_same_build(records)
        assert_same_build(records[::-1])
    assert_same_build(example_records() + chain() + bad_records() + hostile_records())


@settings(max_examples=80, deadline=None)
@given(st.data(), st.sampled_from([None, False, True]))
def test_folds_in_any_order_and_chunking(data: st.DataObject, deferred: bool | None) -> None:
    """Chunk after chunk into one graph, with duplicates and a removal, as the live processor
    folds (with a fold index when ``deferred`` is not None): the same graph, the same new ops."""
    base = example_records() + chain() + bad_records() + hostile_records()
    base += [
        op_span(f"f00000000000000{i}", "generate", ["prompt:p@1"], [f"out:{i}@1"], start=40 - i,
                events=[var_event("prompt:p@1", "input", f"P{i}", category="prompt", time=40 - i)])
        for i in range(1, 6)
    ]  # fmt: skip
    extra = data.draw(st.lists(st.sampled_from(base), max_size=8))
    records = data.draw(st.permutations(base + extra))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=6)))
    graphs = (new_graph(), reference.new_graph())
    indexes = (
        (None, None)
        if deferred is None
        else (FoldIndex(deferred=deferred), reference.FoldIndex(deferred=deferred))
    )
    start = 0
    for cut in [*cuts, len(records)]:
        added = fold_records(graphs[0], records[start:cut], indexes[0])
        expected = reference.fold_records(graphs[1], records[start:cut], indexes[1])
        assert added == expected
        start = cut
        if indexes[0] is not None:
            indexes[0].settle(graphs[0])
            indexes[1].settle(graphs[1])
        assert dump(graphs[0]) == dump(graphs[1])
    gone = data.draw(st.lists(st.sampled_from([r.span_id for r in base]), max_size=4))
    assert remove_ops(graphs[0], gone) == reference.remove_ops(graphs[1], gone)
    assert dump(graphs[0]) == dump(graphs[1])
    fold_records(graphs[0], records[:3], indexes[0])
    reference.fold_records(graphs[1], records[:3], indexes[1])
    assert dump(graphs[0]) == dump(graphs[1])


def random_op(rng: random.Random, i: int) -> SpanRecord:
    inputs = [f"v{rng.randrange(40)}@{rng.randrange(1, 4)}" for _ in range(rng.randrange(4))]
    outputs = [f"v{rng.randrange(40)}@{rng.randrange(1, 4)}" for _ in range(rng.randrange(3))]
    events = []
    for ref in inputs + outputs:
        if rng.random() < 0.7:
            meta = {sc.MEMTRACE_VARIABLE_META: json.dumps({"i": i})} if i % 3 else {}
            role = rng.choice(["input", "output"])
            events.append(var_event(ref, role, f"x{i}", time=rng.randrange(50), **meta))
    return op_span(
        f"{i:016x}",
        rng.choice(["extract", "update", "retrieve", "bogus"]),
        inputs,
        outputs,
        events=events,
        start=rng.randrange(100),
        parent=f"{rng.randrange(300):016x}" if i % 4 else None,
        trace_id=f"{rng.randrange(5):032x}",
    )


@pytest.mark.parametrize("seed", range(3))
def test_large_random_workload_folded_in_chunks(seed: int) -> None:
    """Many ops over shared variables, written and read out of time order, with cycles."""
    rng = random.Random(seed)
    records = [random_op(rng, i) for i in range(300)]
    assert_same_build(records)
    G, R = new_graph(), reference.new_graph()
    index, rindex = FoldIndex(deferred=True), reference.FoldIndex(deferred=True)
    for start in range(0, len(records), 37):
        chunk = records[start : start + 37]
        assert fold_records(G, chunk, index) == reference.fold_records(R, chunk, rindex)
    index.settle(G)
    rindex.settle(R)
    assert dump(G) == dump(R)

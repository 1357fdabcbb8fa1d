"""Building the evolution graph from hand-written span records: exact shapes, order, anomalies."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtrace_otel.graph import (
    _build,
    add_records,
    build_graph,
    canonical_form,
    example_records,
    from_node_link_json,
    graph_index,
    new_graph,
    remove_ops,
    to_node_link_json,
)
from memtrace_otel.graph._build import FoldIndex, fold_records
from memtrace_otel.semconv import EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import attributes as sc

TRACE_1 = "00000000000000000000000000000001"
TRACE_2 = "00000000000000000000000000000002"


def var_event(
    ref: str,
    role: str = "output",
    value: str | None = "v",
    *,
    category: str = "memory",
    time: int = 0,
    **extra: Any,
) -> EventRecord:
    attributes: dict[str, Any] = {
        sc.MEMTRACE_VARIABLE_REF: ref,
        sc.MEMTRACE_VARIABLE_ROLE: role,
        sc.MEMTRACE_VARIABLE_CATEGORY: category,
        sc.MEMTRACE_VARIABLE_DIGEST: f"sha256:{ref}:{value}",
        **extra,
    }
    if value is not None:
        attributes[sc.MEMTRACE_VARIABLE_VALUE] = value
    return EventRecord(sc.MEMTRACE_VARIABLE_EVENT, time, attributes)


def op_span(
    span_id: str,
    kind: str | None = "extract",
    inputs: Sequence[str] = (),
    outputs: Sequence[str] = (),
    *,
    events: Sequence[EventRecord] = (),
    trace_id: str = TRACE_1,
    parent: str | None = None,
    start: int = 0,
    end: int | None = None,
    name: str | None = "step",
    links: Sequence[LinkRecord] = (),
    **attributes: Any,
) -> SpanRecord:
    """An op span; extra keyword attributes use ``__`` for ``.`` (``memtrace__case__id``)."""
    attrs: dict[str, Any] = {
        sc.MEMTRACE_OP_INPUTS: tuple(inputs),
        sc.MEMTRACE_OP_OUTPUTS: tuple(outputs),
    }
    if kind is not None:
        attrs[sc.MEMTRACE_OP_KIND] = kind
    if name is not None:
        attrs[sc.MEMTRACE_OP_NAME] = name
    attrs.update({k.replace("__", "."): v for k, v in attributes.items()})
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        name=f"{sc.OP_SPAN_NAME_PREFIX}{kind} {name}",
        parent_span_id=parent,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10 if end is None else end,
        attributes=attrs,
        events=tuple(events),
        links=tuple(links),
    )


def plain_span(span_id: str, parent: str | None = None, name: str = "GET /") -> SpanRecord:
    return SpanRecord(trace_id=TRACE_1, span_id=span_id, name=name, parent_span_id=parent)


def edges(G: nx.MultiDiGraph) -> set[tuple[str, str, str]]:
    return set(G.edges(keys=True))


def anomalies(G: nx.MultiDiGraph, kind: str | None = None) -> list[dict[str, Any]]:
    return [a for a in G.graph["anomalies"] if kind is None or a["type"] == kind]


# --- shapes ---------------------------------------------------------------------------------------

A1, A2, A3 = "a000000000000001", "a000000000000002", "a000000000000003"
B1, B2 = "b000000000000001", "b000000000000002"


def chain() -> list[SpanRecord]:
    return [
        op_span(A1, "ingest", [], ["msg:1@1"], events=[var_event("msg:1@1", value="hi")], start=1),
        op_span(
            A2,
            "extract",
            ["msg:1@1", "prompt@1"],
            ["fact:1@1"],
            events=[var_event("prompt@1", "input", "P", category="prompt", time=21)],
            start=20,
            parent=A1,
        ),
        op_span(A3, "update", ["fact:1@1"], ["fact:1@2"], start=30, trace_id=TRACE_2),
    ]


def test_nodes_and_edges_exactly() -> None:
    G = build_graph(chain())
    assert set(G.nodes) == {A1, A2, A3, "msg:1@1", "prompt@1", "fact:1@1", "fact:1@2"}
    assert edges(G) == {
        (A1, "msg:1@1", "write"),
        ("msg:1@1", A2, "read"),
        ("prompt@1", A2, "read"),
        (A2, "fact:1@1", "write"),
        ("fact:1@1", A3, "read"),
        (A3, "fact:1@2", "write"),
        ("fact:1@1", "fact:1@2", "version"),
    }
    assert G.graph["anomalies"] == []
    assert G.graph["trace_ids"] == [TRACE_1, TRACE_2]


def test_op_node_attributes_exactly() -> None:
    record = op_span(
        A2,
        "retrieve",
        ["q@1", "mem@3"],
        ["cands@1"],
        trace_id=TRACE_2,
        parent=A1,
        start=5,
        end=9,
        name="rag.search",
        links=[LinkRecord(TRACE_1, A1, {sc.MEMTRACE_VARIABLE_REF: "mem@3"})],
        memtrace__system="rag",
        gen_ai__memory__store__id="u1",
        memtrace__case__id="c9",
        memtrace__prompt__ref="p@1",
        gen_ai__request__model="m",
        tags=("x", "y"),
    )
    G = build_graph([record])
    assert G.nodes[A2] == {
        "type": "op",
        "kind": "retrieve",
        "name": "rag.search",
        "span_name": "memtrace.retrieve rag.search",
        "stage": "retrieval",  # the kind's default: the span had none
        "system": "rag",
        "store": "u1",
        "case": "c9",
        "prompt_ref": "p@1",
        "trace_id": TRACE_2,
        "span_id": A2,
        "parent_span_id": A1,
        "start": 5,
        "end": 9,
        "status": "UNSET",
        "inputs": ["q@1", "mem@3"],
        "outputs": ["cands@1"],
        "judge_verdict": None,
        "links": [{"trace_id": TRACE_1, "span_id": A1, "ref": "mem@3"}],
        "service": None,
        "attributes": {"gen_ai.request.model": "m", "tags": ["x", "y"]},
    }


def test_variable_node_attributes_exactly() -> None:
    meta = json.dumps({"speaker": "ana"})
    G = build_graph(
        [
            op_span(
                A1,
                "create",
                [],
                ["mem@1"],
                start=3,
                end=7,
                events=[
                    var_event(
                        "mem@1",
                        value="lives in Po",
                        time=6,
                        **{sc.MEMTRACE_VARIABLE_TRUNCATED: True, sc.MEMTRACE_VARIABLE_META: meta},
                    )
                ],
            ),
            op_span(B1, "delete", ["mem@1"], ["mem@2"], events=[var_event("mem@2", value=None,
                    **{sc.MEMTRACE_VARIABLE_DELETED: True})], start=10),
        ]
    )  # fmt: skip
    assert G.nodes["mem@1"] == {
        "type": "variable",
        "id": "mem",
        "version": 1,
        "category": "memory",
        "digest": "sha256:mem@1:lives in Po",
        "value": "lives in Po",
        "truncated": True,
        "deleted": False,
        "meta": {"speaker": "ana"},
        "writer": A1,
        "external": False,
        "source_span": A1,
        "time": 7,  # the writer's end
    }
    tombstone = G.nodes["mem@2"]
    assert (tombstone["deleted"], tombstone["value"], tombstone["digest"]) == (
        True,
        None,
        "sha256:mem@2:None",
    )


def test_external_inputs_become_external_variables() -> None:
    G = build_graph(chain())
    prompt = G.nodes["prompt@1"]
    assert (prompt["external"], prompt["writer"], prompt["value"], prompt["time"]) == (
        True,
        None,
        "P",
        21,
    )
    # Read, never written, no event: still a node, with nothing known about it.
    G = build_graph([op_span(A1, "retrieve", ["q@1"], [])])
    assert G.nodes["q@1"]["external"] is True
    assert G.nodes["q@1"]["value"] is None and G.nodes["q@1"]["time"] is None


def test_writer_arriving_later_makes_the_variable_internal() -> None:
    reader, writer = chain()[1], chain()[0]
    G = build_graph([reader])
    assert G.nodes["msg:1@1"]["external"] is True
    add_records(G, [writer])
    assert G.nodes["msg:1@1"]["external"] is False
    assert G.nodes["msg:1@1"]["writer"] == A1
    assert G.nodes["msg:1@1"]["value"] == "hi"


def test_output_event_wins_over_a_readers_input_event_in_any_order() -> None:
    writer = op_span(A1, "create", [], ["m@1"], events=[var_event("m@1", value="W", time=50)])
    early_reader = op_span(
        B1, "retrieve", ["m@1"], [], events=[var_event("m@1", "input", "R1", time=1)]
    )
    late_reader = op_span(
        B2, "retrieve", ["m@1"], [], events=[var_event("m@1", "input", "R2", time=90)]
    )
    for order in ([writer, early_reader, late_reader], [late_reader, early_reader, writer]):
        G = new_graph()
        for record in order:
            add_records(G, [record])
        assert (G.nodes["m@1"]["value"], G.nodes["m@1"]["source_span"]) == ("W", A1)
    # Without the writer, the earliest reader's event describes the variable.
    for order in ([early_reader, late_reader], [late_reader, early_reader]):
        assert build_graph(order).nodes["m@1"]["value"] == "R1"  # fmt: skip


def test_plain_and_attribution_spans_are_not_ops() -> None:
    verdict = SpanRecord(
        trace_id=TRACE_2,
        span_id="f000000000000001",
        name=sc.MEMTRACE_ATTRIBUTION_SPAN,
        attributes={sc.MEMTRACE_ATTRIBUTION_OP_ID: A2, sc.MEMTRACE_ATTRIBUTION_ERROR_TYPE: "X"},
        links=(LinkRecord(TRACE_1, A2),),
    )
    G = build_graph([*chain(), plain_span("e000000000000001"), verdict])
    assert "e000000000000001" not in G and "f000000000000001" not in G
    assert G.graph["non_op_spans"] == {"e000000000000001": None, "f000000000000001": None}


def test_op_name_without_kind_is_kind_other() -> None:
    G = build_graph([op_span(A1, None, ["a@1"], ["b@1"], name="evermemos.unnamed")])
    assert (G.nodes[A1]["kind"], G.nodes[A1]["stage"]) == ("other", None)
    assert anomalies(G) == []


def test_version_edges_are_derived_in_any_order() -> None:
    ops = [
        op_span(A1, "create", [], ["x@1"]),
        op_span(A2, "update", ["x@1"], ["x@2"], start=1),
        op_span(A3, "update", ["x@2"], ["x@3"], start=2),
    ]
    expected = {("x@1", "x@2", "version"), ("x@2", "x@3", "version")}
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        G = new_graph()
        for index in order:
            add_records(G, [ops[index]])
        assert {e for e in edges(G) if e[2] == "version"} == expected
    # A gap: no edge across it.
    G = build_graph([ops[0], op_span(A3, "update", [], ["x@3"])])
    assert {e for e in edges(G) if e[2] == "version"} == set()


def test_version_edges_of_zero_padded_versions_in_one_build() -> None:
    # "x@01" is version 1, but "x@2" looking back asks for "x@1": the padded ref looks ahead.
    ops = [op_span(A1, "create", [], ["x@01"]), op_span(A2, "update", ["x@01"], ["x@2"], start=1)]
    expected = {("x@01", "x@2", "version")}
    for order in (ops, ops[::-1]):
        assert {e for e in edges(build_graph(order)) if e[2] == "version"} == expected


def test_cross_trace_lineage() -> None:
    records = [
        op_span(A1, "create", [], ["mem@1"], trace_id=TRACE_1, start=1),
        op_span(B1, "update", ["mem@1"], ["mem@2"], trace_id=TRACE_2, start=100,
                links=[LinkRecord(TRACE_1, A1, {sc.MEMTRACE_VARIABLE_REF: "mem@1"})]),
    ]  # fmt: skip
    G = build_graph(records)
    index = graph_index(G)
    assert [index.writer("mem@1"), index.writer("mem@2")] == [A1, B1]
    assert {G.nodes[op]["trace_id"] for op in (A1, B1)} == {TRACE_1, TRACE_2}
    assert index.next_version("mem@1") == "mem@2"


# --- order independence and idempotence ---------------------------------------------------------


def test_any_arrival_order_gives_the_same_graph() -> None:
    records = example_records() + chain() + [plain_span("e000000000000001")]
    expected = canonical_form(build_graph(records))
    rng = random.Random(3)
    for _ in range(25):
        shuffled = records[:]
        rng.shuffle(shuffled)
        G = new_graph()
        cut = rng.randrange(len(shuffled))
        add_records(G, shuffled[:cut])
        add_records(G, shuffled[cut:])
        assert canonical_form(G) == expected


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_incremental_folds_with_duplicates_match_one_build(data: st.DataObject) -> None:
    base = example_records() + bad_records()
    expected = canonical_form(build_graph(base))
    extra = data.draw(st.lists(st.sampled_from(base), max_size=8))
    records = data.draw(st.permutations(base + extra))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=4)))
    G = new_graph()
    start = 0
    for cut in [*cuts, len(records)]:
        add_records(G, records[start:cut])
        start = cut
    assert canonical_form(G) == expected


@settings(max_examples=60, deadline=None)
@given(st.data(), st.booleans())
def test_indexed_folds_match_one_build(data: st.DataObject, deferred: bool) -> None:
    """The live processor's folds: chunk after chunk into one graph with a FoldIndex (G.graph's
    lists settled only at the end when deferred), shared variables gaining readers in later
    chunks, duplicates, and a removal that makes the index rebuild."""
    shared = [
        op_span(f"f00000000000000{i}", "generate", ["prompt:p@1"], [f"out:{i}@1"], start=40 - i,
                events=[var_event("prompt:p@1", "input", f"P{i}", category="prompt", time=40 - i)])
        for i in range(1, 6)
    ]  # fmt: skip
    base = example_records() + bad_records() + shared
    expected = canonical_form(build_graph(base))
    extra = data.draw(st.lists(st.sampled_from(base), max_size=8))
    records = data.draw(st.permutations(base + extra))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(records)), max_size=6)))
    G = new_graph()
    index = FoldIndex(deferred=deferred)
    start = 0
    for cut in [*cuts, len(records)]:
        fold_records(G, records[start:cut], index)
        start = cut
    index.settle(G)
    assert canonical_form(G) == expected
    remove_ops(G, [shared[-1].span_id])  # G.graph's lists are new: the next fold rebuilds
    fold_records(G, shared[-1:], index)
    index.settle(G)
    assert canonical_form(G) == expected


def test_a_variable_that_only_gains_readers_is_not_derived_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prompt every question reads gains readers in every fold of a live graph; deriving it
    again from all its readers each time made each fold slower than the last."""
    derived: list[str] = []
    original = _build._Fold._derive_variable

    def spy(fold: Any, ref: str) -> None:
        derived.append(ref)
        original(fold, ref)

    monkeypatch.setattr(_build._Fold, "_derive_variable", spy)
    G = new_graph()
    index = FoldIndex()
    for i in range(1, 5):
        reader = op_span(
            f"f00000000000000{i}",
            "generate",
            ["prompt:p@1"],
            [f"out:{i}@1"],
            start=50 - i,
            events=[var_event("prompt:p@1", "input", f"P{i}", category="prompt", time=50 - i)],
        )
        fold_records(G, [reader], index)  # fmt: skip
    assert derived.count("prompt:p@1") == 1  # once, when it was made
    assert G.nodes["prompt:p@1"]["value"] == "P4"  # the earliest reader's event, as one build
    assert canonical_form(G) == canonical_form(
        build_graph(
            op_span(f"f00000000000000{i}", "generate", ["prompt:p@1"], [f"out:{i}@1"],
                    start=50 - i, events=[var_event("prompt:p@1", "input", f"P{i}",
                                                    category="prompt", time=50 - i)])
            for i in range(1, 5)
        )
    )  # fmt: skip


def test_nested_spans_reading_their_parents_output_need_no_exact_cycle_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ingest span writes the message its nested steps read and ends after them (as every
    store of the generated benchmark does): end times do not rise along those edges, start
    times do, so a fresh build proves there is no cycle without the exact check over the whole
    graph; a cycle among the same spans is still found."""
    checked: list[int] = []
    original = _build._ordered_by_time

    def spy(G: nx.MultiDiGraph, region: Any) -> bool:
        checked.append(len(list(region)))
        return original(G, region)

    monkeypatch.setattr(_build, "_ordered_by_time", spy)
    parent = op_span(A1, "ingest", [], ["msg:1@1"], start=0, end=100)
    steps = [
        op_span(A2, "extract", ["msg:1@1"], ["fact:1@1"], start=10, end=20, parent=A1),
        op_span(A3, "update", ["fact:1@1"], ["fact:1@2"], start=30, end=40, parent=A1),
    ]
    G = build_graph([*steps, parent])
    assert checked == []
    assert not anomalies(G, "cycle")
    loop = op_span(B1, "update", ["fact:1@2"], ["msg:1@1"], start=50, end=60, parent=A1)
    G = build_graph([*steps, parent, loop])
    assert checked  # not proven: the exact check ran and found the loop
    assert [a["span_ids"] for a in anomalies(G, "cycle")] == [sorted([A2, A3, B1])]


def test_folding_the_same_spans_again_changes_nothing() -> None:
    G = build_graph(example_records())
    before = canonical_form(G)
    add_records(G, example_records())
    add_records(G, example_records()[:3] * 2)
    assert canonical_form(G) == before


def test_extending_a_json_round_tripped_graph() -> None:
    records = example_records()
    G = from_node_link_json(to_node_link_json(build_graph(records[:5])))
    add_records(G, records[5:])
    assert canonical_form(G) == canonical_form(build_graph(records))


# --- anomalies ---------------------------------------------------------------------------------


def bad_records() -> list[SpanRecord]:
    """One of each kind of bad input."""
    return [
        # The same version written by two ops.
        op_span("d000000000000001", "create", [], ["dup@1"], start=1),
        op_span("d000000000000002", "create", [], ["dup@1"], start=2),
        # A data-flow cycle: c1 reads y writes x, c2 reads x writes y.
        op_span("c000000000000011", "update", ["y@1"], ["x@1"]),
        op_span("c000000000000012", "update", ["x@1"], ["y@1"]),
        # A parent that is not loaded, and a parent loop.
        op_span("e000000000000011", "extract", [], [], parent="9999999999999999"),
        op_span("e000000000000012", "extract", [], [], parent="e000000000000013"),
        plain_span("e000000000000013", parent="e000000000000012"),
        # Malformed refs, an unknown kind, an undeclared event, a bad meta.
        op_span("e000000000000014", "extract", ["nover", "ok@1", "z@0"], [], name="x"),
        op_span("e000000000000015", "reshuffle", [], ["k@1"],
                events=[var_event("ghost@1"), var_event("k@1", **{sc.MEMTRACE_VARIABLE_META: "[1]"})]),
    ]  # fmt: skip


def test_anomalies_are_listed_with_their_span_ids() -> None:
    G = build_graph(bad_records())
    found = {(a["type"], tuple(a["span_ids"]), a["ref"]) for a in G.graph["anomalies"]}
    assert found == {
        ("duplicate_write", ("d000000000000001", "d000000000000002"), "dup@1"),
        ("cycle", ("c000000000000011", "c000000000000012"), None),
        ("missing_parent", ("e000000000000011",), None),
        ("parent_cycle", ("e000000000000012", "e000000000000013"), None),
        ("invalid_ref", ("e000000000000014",), "nover"),
        ("invalid_ref", ("e000000000000014",), "z@0"),
        ("unknown_kind", ("e000000000000015",), None),
        ("undeclared_event", ("e000000000000015",), "ghost@1"),
        ("invalid_meta", ("e000000000000015",), "k@1"),
    }
    [cycle] = anomalies(G, "cycle")
    assert cycle["refs"] == ["x@1", "y@1"]
    [orphan] = anomalies(G, "missing_parent")
    assert orphan["parent_span_id"] == "9999999999999999"
    # The graph is still built: valid refs of the bad spans are there, the bad ones are not.
    assert G.nodes["dup@1"]["writer"] == "d000000000000001"  # the first in execution order
    assert "ok@1" in G and "nover" not in G and "ghost@1" not in G
    assert G.nodes["e000000000000015"]["kind"] == "other"
    assert G.graph["anomalies"] == sorted(
        G.graph["anomalies"], key=lambda a: (a["type"], a["span_ids"], a["ref"] or "")
    )


def test_a_missing_parent_is_resolved_when_it_arrives() -> None:
    child = op_span(A2, "extract", [], [], parent="e000000000000001")
    G = build_graph([child])
    assert [a["span_ids"] for a in anomalies(G, "missing_parent")] == [[A2]]
    add_records(G, [plain_span("e000000000000001")])
    assert anomalies(G) == []


def test_a_cycle_closed_by_a_later_span_is_found() -> None:
    G = build_graph([op_span(A1, "update", ["y@1"], ["x@1"])])
    assert anomalies(G) == []
    add_records(G, [op_span(A2, "update", ["x@1"], ["y@1"])])
    assert [a["span_ids"] for a in anomalies(G, "cycle")] == [[A1, A2]]


def test_conflicting_copies_of_a_span_keep_the_same_one_in_any_order() -> None:
    first = op_span(A1, "create", [], ["m@1"], events=[var_event("m@1", value="one")])
    second = op_span(A1, "create", [], ["m@2"], events=[var_event("m@2", value="two")])
    G1, G2 = build_graph([first, second]), build_graph([second, first])
    assert canonical_form(G1) == canonical_form(G2)
    assert [a["type"] for a in G1.graph["anomalies"]] == ["conflicting_span"]
    assert G1.number_of_nodes() == 2  # one op, one variable: the loser left nothing behind


def test_a_cycle_through_a_version_edge_is_found_in_one_build() -> None:
    # The op reads x@2 and writes x@1, and x@1 -> x@2 is a version edge: a loop, whose every
    # read and write edge rises in time; only the version edge breaks the quick proof.
    G = build_graph([op_span(A1, "update", ["x@2"], ["x@1"], start=5, end=6)])
    [cycle] = anomalies(G, "cycle")
    assert cycle["span_ids"] == [A1] and cycle["refs"] == ["x@1", "x@2"]


def test_deep_chains_and_long_cycles_do_not_recurse() -> None:
    n = 3000
    records = [
        op_span(f"{i + 1:016x}", "update", [f"m@{i + 1}"], [f"m@{i + 2}"], start=i)
        for i in range(n)
    ]
    records.append(op_span(f"{n + 1:016x}", "update", [f"m@{n + 1}"], ["m@1"], start=n))
    G = build_graph(records)
    [cycle] = anomalies(G, "cycle")
    assert len(cycle["span_ids"]) == n + 1
    index = graph_index(G)
    assert all(index.writer(f"m@{i}") == f"{i - 1 or n + 1:016x}" for i in range(1, n + 2))


@pytest.mark.parametrize("bad", [("a", 1), "a@1", 7, None])
def test_inputs_of_any_shape_never_stop_the_build(bad: Any) -> None:
    G = build_graph([op_span(A1, "extract", [], [], **{"memtrace__op__inputs": bad})])
    assert A1 in G
    if bad == "a@1":  # a single string is read as a one-ref list
        assert ("a@1", A1, "read") in edges(G)


def test_attribute_values_of_any_type_never_stop_the_build() -> None:
    weird = {"a": (1, 2)}
    record = op_span(
        A1,
        weird,  # type: ignore[arg-type]
        ["in@1"],
        ["out@1"],
        events=[
            EventRecord(sc.MEMTRACE_VARIABLE_EVENT, 1, {sc.MEMTRACE_VARIABLE_REF: weird}),
            EventRecord(sc.MEMTRACE_VARIABLE_EVENT, 1, {sc.MEMTRACE_VARIABLE_REF: 7}),
            var_event(
                "out@1",
                value=None,
                **{sc.MEMTRACE_VARIABLE_VALUE: (1, "x"), sc.MEMTRACE_VARIABLE_META: weird},
            ),
        ],
        memtrace__case__id=("c", 1),
    )
    G = build_graph([record])
    assert G.nodes[A1]["kind"] == "other" and G.nodes[A1]["case"] == ["c", 1]
    assert G.nodes["out@1"]["value"] == '[1, "x"]'
    assert G.nodes["out@1"]["meta"] == {"a": [1, 2]}
    assert sorted(a["type"] for a in G.graph["anomalies"]) == [
        "invalid_ref",
        "invalid_ref",
        "unknown_kind",
    ]
    json.dumps(canonical_form(G))  # everything is plain JSON-able data


# --- removal (the processor's eviction) ----------------------------------------------------------


def test_removing_ops_gives_the_graph_of_the_remaining_spans() -> None:
    records = example_records()
    kept = [r for r in records if not r.span_id.startswith("c")]
    G = build_graph(records)
    removed = remove_ops(G, [r.span_id for r in records if r.span_id.startswith("c")])
    assert removed == 4
    expected = build_graph(kept)
    assert canonical_form(G)["nodes"] == canonical_form(expected)["nodes"]
    assert canonical_form(G)["edges"] == canonical_form(expected)["edges"]


def test_removing_one_writer_updates_the_duplicate_write_anomaly() -> None:
    G = build_graph(bad_records()[:2])
    remove_ops(G, ["d000000000000001"])
    assert anomalies(G, "duplicate_write") == []
    assert G.nodes["dup@1"]["writer"] == "d000000000000002"


def test_removing_ops_forgets_their_anomalies_and_breaks_cycles() -> None:
    G = build_graph(bad_records())
    remove_ops(G, ["c000000000000011", "e000000000000011", "e000000000000014"])
    kinds = sorted(a["type"] for a in G.graph["anomalies"])
    assert kinds == [
        "duplicate_write",
        "invalid_meta",
        "parent_cycle",
        "undeclared_event",
        "unknown_kind",
    ]

"""The graph builder's output, pinned: the digest of everything a built graph holds, in the order
it holds it (node and edge attribute dicts, both adjacency dicts, ``G.graph``), for fixed inputs:
every shared fixture trace, the builder tests' hand-made and bad inputs, hostile attribute values,
and seeded random workloads with cycles, built at once and folded in chunks with a fold index.

The digests were taken from the builder as it stood before its per-span speed-ups (issue #34),
whose graphs the sped-up builder matched dict for dict against a frozen copy of the old one,
over those inputs and random arrival orders and chunkings. A change to the builder that is meant
to change its graphs updates them: ``python -m tests.test_graph_reference`` prints the new ones.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import networkx as nx
import pytest

from memtrace_otel.graph import build_graph, new_graph
from memtrace_otel.graph._build import FoldIndex, fold_records
from memtrace_otel.graph._example import example_records
from memtrace_otel.semconv import EventRecord, LinkRecord, SpanRecord
from memtrace_otel.semconv import attributes as sc
from memtrace_otel.sources import iter_records
from tests.conftest import shared_path
from tests.test_graph_build import bad_records, chain, op_span, plain_span, var_event


def _plain(value: Any) -> Any:
    """What JSON cannot hold: sets in a fixed order, anything else by its repr."""
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return repr(value)


def digest(G: nx.MultiDiGraph) -> str:
    """The digest of everything in ``G``, in the order it is stored."""
    text = json.dumps(
        {
            "nodes": list(G.nodes(data=True)),
            "succ": [(u, [(v, list(keyed.items())) for v, keyed in nbrs.items()]) for u, nbrs in G.succ.items()],
            "pred": [(v, [(u, list(keyed)) for u, keyed in nbrs.items()]) for v, nbrs in G.pred.items()],
            "graph": G.graph,
        },
        default=_plain,
    )  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


def _hand_made() -> dict[str, list[SpanRecord]]:
    inputs = {
        "example": example_records(),
        "chain": chain(),
        "bad": bad_records(),
        "hostile": hostile_records(),
    }
    inputs |= {f"{name} reversed": records[::-1] for name, records in list(inputs.items())}
    inputs["all"] = example_records() + chain() + bad_records() + hostile_records()
    return inputs


def _random(seed: int) -> dict[str, str]:
    """A seeded workload of 300 ops over shared variables, written and read out of time order
    (with cycles): built at once, and folded 37 spans at a time with a deferred fold index."""
    rng = random.Random(seed)
    records = [random_op(rng, i) for i in range(300)]
    G, index = new_graph(), FoldIndex(deferred=True)
    for start in range(0, len(records), 37):
        fold_records(G, records[start : start + 37], index)
    index.settle(G)
    return {"built": digest(build_graph(records)), "folded": digest(G)}


def _fixtures() -> dict[str, str]:
    root = shared_path("fixtures")
    paths = sorted(root.rglob("*.json"))
    assert paths
    return {
        path.relative_to(root).as_posix(): digest(build_graph(list(iter_records(str(path)))))
        for path in paths
    }


def current() -> dict[str, Any]:
    """The digests of today's builder, for every pinned input."""
    return {
        "hand_made": {name: digest(build_graph(r)) for name, r in _hand_made().items()},
        "random": {str(seed): _random(seed) for seed in range(3)},
        "fixtures": _fixtures(),
    }


PINNED: dict[str, Any] = {
    "fixtures": {
        "jaeger-ui/follows-from-orphan.legacy.json": "c945d6bd245620ae",
        "jaeger-ui/genaiTestTrace.json": "1f76393c9088a6c1",
        "jaeger-ui/multi-reference.legacy.json": "c6a4d1fa91a0070c",
        "jaeger-ui/multiple-orphans.legacy.json": "31618ad8208f840d",
        "jaeger-ui/otlp2jaeger-multi-in-combined.json": "b89536507eec3d22",
        "jaeger-ui/parent-cycle.legacy.json": "2fcd98607427e889",
        "jaeger-ui/tracegraph-testTrace.json": "e38386fc28a9f026",
        "jaeger-ui/v3-getTrace-response.json": "bdd37cc3d9d84089",
        "jaeger/anonymizer-trace_success.json": "259480a61e934e47",
        "jaeger/apiv3-FindTraceSummaries.json": "e38386fc28a9f026",
        "jaeger/apiv3-GetTrace.json": "137264bf1ae11808",
        "jaeger/integration-example_trace.json": "54e16e6d3a1fb5a1",
        "jaeger/integration-link_attributes_trace.json": "dc76ea8ac59fda9c",
        "jaeger/integration-scope_attributes_trace.json": "7efb5895b3c1e8e8",
        "jaeger/memory-otel_traces_01.json": "10e86188c5b2ed0d",
        "jaeger/otlp2jaeger-in.json": "e72d05ad68e7396e",
        "jaeger/otlp2jaeger-out.json": "e72d05ad68e7396e",
        "jaeger/uimodel-domain_01.json": "e38386fc28a9f026",
        "jaeger/uimodel-ui_01.json": "e7101ea8a13285ea",
        "otel-proto/examples-trace.json": "ccad3fbf9a916d04",
        "tempo/tempopb-trace-batches.json": "ccad3fbf9a916d04",
    },
    "hand_made": {
        "all": "1caecce4b6b61f27",
        "bad": "e97d74c0f0bcd176",
        "bad reversed": "3b57af49fe9c93bb",
        "chain": "17ce1195cfdff21b",
        "chain reversed": "ab24c4f9343b88b3",
        "example": "73f9d709fc15f3c3",
        "example reversed": "7275923dd825d85a",
        "hostile": "e32a6bbaad01349f",
        "hostile reversed": "a30145edcad50cd9",
    },
    "random": {
        "0": {"built": "cfc5eadfb07967e1", "folded": "0b52ecbc1b6b764a"},
        "1": {"built": "fde4cb2acb135014", "folded": "6e438dfd76c4eb5b"},
        "2": {"built": "87c7d7ea8c3ae9bd", "folded": "732b61d9ca449fb0"},
    },
}
"""The digests of :func:`current`, as the builder made them before its speed-ups."""


def test_hand_made_bad_and_hostile_inputs() -> None:
    assert {n: digest(build_graph(r)) for n, r in _hand_made().items()} == PINNED["hand_made"]


@pytest.mark.parametrize("seed", range(3))
def test_random_workloads_built_and_folded_in_chunks(seed: int) -> None:
    assert _random(seed) == PINNED["random"][str(seed)]


def test_every_shared_fixture() -> None:
    assert _fixtures() == PINNED["fixtures"]


if __name__ == "__main__":
    print(json.dumps(current(), indent=4, sort_keys=True))

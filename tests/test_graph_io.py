"""Writing the evolution graph: node-link JSON round trips, GraphML, Graphviz DOT."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pydot
import pytest

from memtrace_otel.errors import DecodeError
from memtrace_otel.graph import (
    build_graph,
    canonical_form,
    example_graph,
    example_records,
    from_node_link_json,
    to_dot,
    to_node_link_json,
    write_graphml,
)
from memtrace_otel.semconv import EventRecord, SpanRecord
from memtrace_otel.semconv import attributes as sc


def awkward_graph() -> nx.MultiDiGraph:
    """The example plus quotes, newlines, unicode, nested attributes and anomalies."""
    odd = SpanRecord(
        trace_id="e" * 32,
        span_id="e" * 16,
        name='say "hi"',
        parent_span_id="0" * 15 + "1",  # not loaded: an anomaly
        start_time_unix_nano=1_700_000_000_123_456_789,
        end_time_unix_nano=1_700_000_000_223_456_789,
        attributes={
            sc.MEMTRACE_OP_KIND: "generate",
            sc.MEMTRACE_OP_NAME: 'quote " and \\ backslash',
            sc.MEMTRACE_OP_INPUTS: ("U1:D1:3@1", "user@example.com@2"),
            sc.MEMTRACE_OP_OUTPUTS: ("pred:é@1",),
            "nested": {"a": (1, 2.5, True), "b": None},
            "blob": b"\x00\xff",
        },
        events=(
            EventRecord(
                sc.MEMTRACE_VARIABLE_EVENT,
                5,
                {
                    sc.MEMTRACE_VARIABLE_REF: "pred:é@1",
                    sc.MEMTRACE_VARIABLE_ROLE: "output",
                    sc.MEMTRACE_VARIABLE_CATEGORY: "prediction",
                    sc.MEMTRACE_VARIABLE_DIGEST: "sha256:00",
                    sc.MEMTRACE_VARIABLE_VALUE: 'line one\nline "two" → Lisboa',
                    sc.MEMTRACE_VARIABLE_META: json.dumps({"score": 0.5, "refs": ["a@1"]}),
                },
            ),
        ),
    )
    return build_graph([*example_records(), odd])


def test_node_link_json_round_trips_exactly() -> None:
    G = awkward_graph()
    assert G.graph["anomalies"], "the fixture should carry anomalies"
    text = to_node_link_json(G)
    H = from_node_link_json(text)
    assert isinstance(H, nx.MultiDiGraph)
    assert canonical_form(H) == canonical_form(G)
    assert to_node_link_json(H) == text
    # Variables keep their own "id" attribute: node keys are stored under "node".
    assert H.nodes["U1:D1:3@1"]["id"] == "U1:D1:3"


def test_node_link_json_of_a_case_subgraph_round_trips() -> None:
    from memtrace_otel.graph import case_subgraph

    H = case_subgraph(example_graph(), "c1")
    assert canonical_form(from_node_link_json(to_node_link_json(H, indent=2))) == canonical_form(H)


@pytest.mark.parametrize(
    ("text", "field"),
    [("{not json", None), ("[]", None), ('{"nodes": [], "edges": []}', "graph")],
)
def test_bad_node_link_json_raises_decode_error(text: str, field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        from_node_link_json(text, path="g.json")
    assert info.value.path == "g.json"
    assert info.value.field == field


def test_graphml_keeps_nodes_edges_and_values(tmp_path: Path) -> None:
    G = awkward_graph()
    out = tmp_path / "g.graphml"
    write_graphml(G, out)
    H = nx.read_graphml(out, force_multigraph=True)
    assert set(H.nodes) == set(G.nodes)
    assert sorted((u, v, d["kind"]) for u, v, d in H.edges(data=True)) == sorted(G.edges(keys=True))
    assert H.nodes["pred:é@1"]["value"] == 'line one\nline "two" → Lisboa'
    assert json.loads(H.nodes["pred:é@1"]["meta"]) == {"score": 0.5, "refs": ["a@1"]}
    assert H.nodes["e" * 16]["start"] == 1_700_000_000_123_456_789
    assert json.loads(H.nodes["e" * 16]["inputs"]) == ["U1:D1:3@1", "user@example.com@2"]
    assert json.loads(H.graph["anomalies"]) == G.graph["anomalies"]
    assert "prompt_ref" not in H.nodes["e" * 16]  # None values are left out


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pydot's use of pyparsing
def test_dot_parses_with_every_node_and_edge() -> None:
    G = awkward_graph()
    text = to_dot(G)
    [dot] = pydot.graph_from_dot_data(text)
    names = {node.get_name().strip('"') for node in dot.get_nodes()} - {"node"}
    assert {n.replace("\\\\", "\\").replace('\\"', '"') for n in names} == set(G.nodes)
    pairs = sorted(
        (e.get_source().strip('"'), e.get_destination().strip('"')) for e in dot.get_edges()
    )
    assert pairs == sorted((u, v) for u, v in G.edges())
    shapes = {node.get_name().strip('"'): node.get_shape() for node in dot.get_nodes()}
    assert shapes["a000000000000001"] == "box" and shapes["msg:1@1"] == "ellipse"
    assert 'label="generate\\nquote \\" and \\\\ backslash"' in text

"""The live EvolutionGraphProcessor: buffering, folding, limits, eviction, threads, shutdown."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import networkx as nx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from memtrace_otel._internal import quiet_internal_errors
from memtrace_otel._shim import nodes_of, pred_of, succ_of
from memtrace_otel.export import span_to_record
from memtrace_otel.graph import build_graph, canonical_form
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.processing import DEFAULT_MAX_BUFFER, DEFAULT_MAX_OPS, EvolutionGraphProcessor
from memtrace_otel.semconv import CaptureMode
from memtrace_otel.semconv import attributes as sc
from memtrace_otel.semconv import env as E


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def emit_op(
    tracer: Tracer,
    name: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    *,
    store: str = "s",
    start: int | None = None,
) -> None:
    span = tracer.start_span(
        name,
        start_time=start,
        attributes={
            sc.MEMTRACE_OP_KIND: "update",
            sc.MEMTRACE_OP_NAME: name,
            sc.MEMTRACE_OP_INPUTS: list(inputs),
            sc.MEMTRACE_OP_OUTPUTS: list(outputs),
            sc.GEN_AI_MEMORY_STORE_ID: store,
        },
    )
    span.end(end_time=None if start is None else start + 1)


# --- configuration ----------------------------------------------------------------------------


def test_limits_resolve_argument_then_environment_then_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(E.ENV_MEMTRACE_PROCESSOR_MAX_BUFFER, raising=False)
    monkeypatch.delenv(E.ENV_MEMTRACE_PROCESSOR_MAX_OPS, raising=False)
    monkeypatch.setenv(E.ENV_MEMTRACE_PROCESSOR_FOLD_INTERVAL, "0")
    p = EvolutionGraphProcessor()
    assert (p.max_buffer, p.max_ops, p.fold_interval) == (DEFAULT_MAX_BUFFER, DEFAULT_MAX_OPS, 0)
    monkeypatch.setenv(E.ENV_MEMTRACE_PROCESSOR_MAX_BUFFER, "17")
    monkeypatch.setenv(E.ENV_MEMTRACE_PROCESSOR_MAX_OPS, "99")
    p = EvolutionGraphProcessor()
    assert (p.max_buffer, p.max_ops) == (17, 99)
    p = EvolutionGraphProcessor(max_buffer=3, max_ops=4)
    assert (p.max_buffer, p.max_ops) == (3, 4)


@pytest.mark.parametrize(
    ("kwargs", "env"),
    [
        ({"max_buffer": 0}, {}),
        ({"max_ops": -1}, {}),
        ({"max_ops": 2.5}, {}),
        ({"fold_interval": -1}, {}),
        ({"fold_interval": float("nan")}, {}),
        ({"max_buffer": 0}, {E.ENV_MEMTRACE_PROCESSOR_MAX_BUFFER: "17"}),
    ],
)
def test_bad_limits_raise_value_error(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, float], env: dict[str, str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError):
        EvolutionGraphProcessor(**kwargs)  # type: ignore[arg-type]


# --- buffering and folding -------------------------------------------------------------------


def test_a_full_buffer_drops_and_counts(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(max_buffer=5, fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for i in range(8):
        emit_op(tracer, f"op{i}", [], [f"x{i}@1"])
    stats = processor.stats
    assert (stats["received"], stats["dropped"], stats["buffered"]) == (5, 3, 5)
    G = processor.graph()
    assert sorted(n for n in G if "@" in n) == [f"x{i}@1" for i in range(5)]
    assert processor.stats["buffered"] == 0 and processor.stats["folded"] == 5


def test_the_first_drop_is_logged_once_and_every_drop_counted(
    provider: TracerProvider, caplog: pytest.LogCaptureFixture
) -> None:
    processor = EvolutionGraphProcessor(max_buffer=2, fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with caplog.at_level("WARNING", logger="memtrace_otel"):
        emit_op(tracer, "op0", [], ["x0@1"])
        emit_op(tracer, "op1", [], ["x1@1"])
        assert not caplog.records  # nothing dropped yet, nothing logged
        for i in range(2, 12):
            emit_op(tracer, f"op{i}", [], [f"x{i}@1"])
    assert processor.stats["dropped"] == 10
    warnings = [r for r in caplog.records if "dropped an ended span" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
    assert "buffer of 2 spans is full" in warnings[0].getMessage()


def test_force_flush_honours_its_timeout(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(max_buffer=5000, fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for i in range(2000):
        emit_op(tracer, "op", [], [f"x{i}@1"])
    # The deadline has passed after the first chunk: the rest stays buffered.
    assert processor.force_flush(timeout_millis=0) is False
    assert 0 < processor.stats["buffered"] < 2000
    assert processor.force_flush() is True
    assert processor.stats["buffered"] == 0 and processor.stats["ops"] == 2000


def test_works_beside_a_batch_span_processor() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    processor = EvolutionGraphProcessor(fold_interval=0.01)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for i in range(50):
        emit_op(tracer, "op", [f"x@{i + 1}"], [f"x@{i + 2}"])
    provider.force_flush()
    provider.shutdown()
    offline = build_graph(span_to_record(s) for s in exporter.get_finished_spans())
    assert canonical_form(processor.graph()) == canonical_form(offline)
    assert processor.stats["dropped"] == 0


def test_the_light_record_folds_like_span_to_record() -> None:
    """The fold reads its own light record of each span, not span_to_record's full copy: links,
    the service name, array and numeric attributes, a status, and events the graph does not read
    (an exception) still give the offline graph of the exported spans."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.trace import Link, Status, StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({sc.SERVICE_NAME: "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = EvolutionGraphProcessor(fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    first = tracer.start_span(
        "write",
        attributes={
            sc.MEMTRACE_OP_KIND: "create",
            sc.MEMTRACE_OP_OUTPUTS: ["m@1"],
            "n": 3,
            "xs": [1, 2],
        },
    )
    first.add_event(
        sc.MEMTRACE_VARIABLE_EVENT,
        {
            sc.MEMTRACE_VARIABLE_REF: "m@1",
            sc.MEMTRACE_VARIABLE_ROLE: "output",
            sc.MEMTRACE_VARIABLE_VALUE: "v1",
            sc.MEMTRACE_VARIABLE_META: '{"k": 1}',
        },
    )
    first.end()
    second = tracer.start_span(
        "read",
        links=[Link(first.get_span_context(), {sc.MEMTRACE_VARIABLE_REF: "m@1"})],
        attributes={
            sc.MEMTRACE_OP_KIND: "retrieve",
            sc.MEMTRACE_OP_INPUTS: ["m@1"],
            sc.MEMTRACE_OP_OUTPUTS: ["c@1"],
            sc.GEN_AI_MEMORY_STORE_ID: "u1",
        },
    )
    second.record_exception(ValueError("boom"))
    second.set_status(Status(StatusCode.ERROR, "boom"))
    second.end()
    tracer.start_span("GET /").end()
    live = processor.graph()
    offline = build_graph(span_to_record(s) for s in exporter.get_finished_spans())
    assert canonical_form(live) == canonical_form(offline)
    read = live.nodes[format(second.get_span_context().span_id, "016x")]
    assert (read["service"], read["status"], len(read["links"])) == ("svc", "ERROR", 1)
    provider.shutdown()


def test_a_hand_made_readable_span_folds_like_an_sdk_span() -> None:
    """The fold reads an SDK span's attributes, events and links from their containers (see
    memtrace_otel/_shim.py, entry 4); a ``ReadableSpan`` made by hand (plain dicts, tuples, no
    attributes at all) has none of them and is read through the public properties."""
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import SpanContext, TraceFlags

    def context(span_id: int) -> SpanContext:
        return SpanContext(7, span_id, is_remote=False, trace_flags=TraceFlags(1))

    spans = [
        ReadableSpan(
            "write",
            context(1),
            attributes={sc.MEMTRACE_OP_KIND: "create", sc.MEMTRACE_OP_OUTPUTS: ("m@1",)},
            events=(
                Event(
                    sc.MEMTRACE_VARIABLE_EVENT,
                    {sc.MEMTRACE_VARIABLE_REF: "m@1", sc.MEMTRACE_VARIABLE_VALUE: "v"},
                    timestamp=5,
                ),
                Event("other", None, timestamp=6),
            ),
            start_time=1,
            end_time=9,
        ),
        ReadableSpan("GET /", context(2), parent=context(1), start_time=2, end_time=3),
    ]
    processor = EvolutionGraphProcessor(fold_interval=0)
    for span in spans:
        processor.on_end(span)
    live = processor.graph()
    assert canonical_form(live) == canonical_form(build_graph(span_to_record(s) for s in spans))
    assert live.nodes["m@1"]["value"] == "v"
    assert processor.stats["conversion_errors"] == 0
    processor.shutdown()


def test_concurrent_threads_give_the_offline_graph(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    processor = EvolutionGraphProcessor(max_buffer=100_000, fold_interval=0.001)
    provider.add_span_processor(processor)
    threads_n, ops_n = 8, 150
    start = threading.Barrier(threads_n + 1)
    snapshots: list[int] = []

    def app_thread(t: int) -> None:
        mt = MemTracer(
            tracer_provider=provider,
            store_id=f"user-{t}",
            capture=CaptureConfig(mode=CaptureMode.SPAN_AND_EVENT),
            registry=WriterRegistry(),
        )
        start.wait()
        memory = mt.variable(f"mem:{t}", "v0", category="memory")
        for i in range(ops_n):
            with mt.update("store.update", inputs=[memory]) as op:
                memory = op.output(memory.next(f"v{i + 1}"))

    def reader_thread() -> None:
        start.wait()
        for _ in range(20):
            snapshots.append(processor.graph().number_of_nodes())

    threads = [threading.Thread(target=app_thread, args=(t,)) for t in range(threads_n)]
    threads.append(threading.Thread(target=reader_thread))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert processor.force_flush()
    live = processor.graph()
    offline = build_graph(span_to_record(s) for s in exporter.get_finished_spans())
    assert canonical_form(live) == canonical_form(offline)
    assert live.number_of_nodes() == threads_n * (ops_n + (ops_n + 1))
    assert snapshots == sorted(snapshots)  # each snapshot is a consistent, growing graph
    stats = processor.stats
    assert (stats["received"], stats["dropped"], stats["folded"]) == (
        threads_n * ops_n,
        0,
        threads_n * ops_n,
    )
    processor.shutdown()


def test_locked_graph_is_the_live_graph(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(fold_interval=0)
    provider.add_span_processor(processor)
    emit_op(provider.get_tracer("t"), "op", [], ["a@1"])
    with processor.locked_graph() as G:
        assert "a@1" in G
        assert G is not processor.graph()


def _layout(G: nx.MultiDiGraph) -> list[object]:
    """Everything of a graph, in the order of every dict: nodes, successors, predecessors."""

    def adjacency(adj: dict[str, dict[str, dict[str, dict[str, object]]]]) -> list[object]:
        return [
            (
                u,
                [
                    (v, [(k, list(d.items())) for k, d in keyed.items()])
                    for v, keyed in nbrs.items()
                ],
            )
            for u, nbrs in adj.items()
        ]

    return [
        list(G.graph.items()),
        [(n, list(d.items())) for n, d in nodes_of(G).items()],
        adjacency(succ_of(G)),
        adjacency(pred_of(G)),
    ]


def test_graph_is_the_live_graph_copied_exactly(provider: TracerProvider) -> None:
    """graph() copies the live graph's dicts itself: the same graph as networkx's copy, to the
    order of every dict, and independent of the live graph."""
    processor = EvolutionGraphProcessor(fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    emit_op(tracer, "create", ["in@1"], ["m@1"], start=10)
    emit_op(tracer, "update", ["m@1", "in@1"], ["m@2", "n@1"], start=20)
    emit_op(tracer, "update", ["m@3"], ["m@4"], start=30)  # m@3 never written: external
    emit_op(tracer, "update", ["m@2"], ["m@3"], store="t", start=40)
    with tracer.start_as_current_span("plain"):
        emit_op(tracer, "child", ["n@1"], ["c@1"], start=50)
    snapshot = processor.graph()
    with processor.locked_graph() as live:
        assert _layout(snapshot) == _layout(live.copy())
        assert snapshot.has_edge("m@2", "m@3", key="version")
        assert succ_of(snapshot)["m@1"] is not succ_of(live)["m@1"]
        keyed = succ_of(snapshot)["m@1"]
        assert all(pred_of(snapshot)[v]["m@1"] is keyed[v] for v in keyed)
        before = _layout(live)
    snapshot.nodes["m@1"]["value"] = "changed"
    snapshot.edges["m@1", "m@2", "version"]["mark"] = 1
    snapshot.add_edge("m@4", "x@1", key="read")
    snapshot.graph["non_op_spans"].clear()
    with processor.locked_graph() as live:
        assert _layout(live) == before


# --- eviction ------------------------------------------------------------------------------------


def test_eviction_drops_the_least_recently_active_stores(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(max_ops=10, fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    # Store "old" is active first, "mid" next, "new" last; "old" is touched again late.
    t = 1_000
    for store in ("old", "mid", "new"):
        for i in range(4):
            t += 10
            emit_op(tracer, "op", [], [f"{store}:{i}@1"], store=store, start=t)
    emit_op(tracer, "op", [], ["old:late@1"], store="old", start=t + 10)
    G = processor.graph()  # 13 ops > 10: evict down to 9
    stores = {d["store"] for _, d in G.nodes(data=True) if d.get("type") == "op"}
    assert stores == {"old", "new"}  # "mid" was the least recently active
    ops = [n for n, d in G.nodes(data=True) if d.get("type") == "op"]
    assert len(ops) == 9
    assert "mid:0@1" not in G and "old:0@1" in G
    stats = processor.stats
    assert (stats["evicted_ops"], stats["evicted_stores"], stats["ops"]) == (4, 1, 9)


def test_a_single_store_over_the_limit_loses_its_oldest_ops(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(max_ops=3, fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for i in range(5):
        emit_op(tracer, "op", [], [f"m:{i}@1"], start=1_000 + i * 10)
    G = processor.graph()  # 5 ops > 3: keep the newest 2 (90% of the limit)
    assert sorted(n for n in G if "@" in n) == ["m:3@1", "m:4@1"]
    assert processor.stats["evicted_stores"] == 0


def test_eviction_works_with_array_store_ids(provider: TracerProvider) -> None:
    """A store id recorded as an array attribute is a list in the graph (not hashable): it
    used to fail every eviction (a fold error) instead of evicting that store."""
    processor = EvolutionGraphProcessor(max_ops=4, fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for i, store in enumerate([("a", "1")] * 3 + [("b", "2")] * 3):
        span = tracer.start_span(
            "op",
            start_time=1_000 + i * 10,
            attributes={
                sc.MEMTRACE_OP_KIND: "create",
                sc.MEMTRACE_OP_OUTPUTS: [f"m:{i}@1"],
                sc.GEN_AI_MEMORY_STORE_ID: list(store),
            },
        )
        span.end(end_time=1_000 + i * 10 + 1)
    G = processor.graph()
    assert {tuple(d["store"]) for _, d in G.nodes(data=True) if d.get("type") == "op"} == {
        ("b", "2")
    }
    stats = processor.stats
    assert (stats["fold_errors"], stats["evicted_stores"], stats["ops"]) == (0, 1, 3)


def test_plain_spans_are_bounded_too(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(max_ops=20, fold_interval=0)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for _ in range(50):
        tracer.start_span("GET /health").end()
    G = processor.graph()
    assert len(G.graph["non_op_spans"]) <= 20
    assert processor.stats["evicted_non_op_spans"] > 0


# --- lifecycle and faults --------------------------------------------------------------------------


def test_shutdown_folds_stops_and_then_drops(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(fold_interval=60)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    emit_op(tracer, "op", [], ["a@1"])
    thread = processor._thread
    assert thread is not None and thread.is_alive()
    processor.shutdown(timeout_millis=5000)
    assert not thread.is_alive()
    assert "a@1" in processor.graph()  # folded during shutdown
    emit_op(tracer, "op", [], ["b@1"])
    assert processor.stats["dropped"] == 1
    assert "b@1" not in processor.graph()
    processor.shutdown()  # a second shutdown is harmless


class _Broken(ReadableSpan):
    """A span the SDK would never produce: no context."""

    def __init__(self) -> None:
        super().__init__(name="broken", context=None)


def test_faults_are_counted_not_raised(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(fold_interval=0)
    provider.add_span_processor(processor)
    emit_op(provider.get_tracer("t"), "op", [], ["a@1"])
    processor.on_end(_Broken())
    with quiet_internal_errors():
        G = processor.graph()
    assert "a@1" in G
    assert processor.stats["conversion_errors"] == 1


def test_faults_are_loud_under_pytest(provider: TracerProvider) -> None:
    processor = EvolutionGraphProcessor(fold_interval=0)
    processor.on_end(_Broken())
    with pytest.raises(AssertionError):
        processor.force_flush()


def test_a_fold_runs_with_the_cyclic_collector_paused(provider: TracerProvider) -> None:
    """Folding a chunk allocates thousands of acyclic containers: with the collector running,
    its collections traversed the live graph again and again (in the app's process). The fold
    pauses it for each chunk and leaves it as it found it."""
    import gc

    graphs = EvolutionGraphProcessor(fold_interval=0)
    provider.add_span_processor(graphs)
    tracer = provider.get_tracer("t")
    for n in range(400):
        emit_op(tracer, f"op{n}", [f"m:{n}@1"], [f"m:{n}@2"])
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    assert gc.isenabled()
    gc.collect()  # the allocation count starts from zero: no collection is due before the fold
    gc.callbacks.append(count)
    try:
        assert graphs.force_flush()
    finally:
        gc.callbacks.remove(count)
    assert graphs.stats["folded"] == 400
    # At most the one collection that is due when the collector resumes (unpaused: a dozen).
    assert len(collections) <= 1, collections
    assert gc.isenabled()

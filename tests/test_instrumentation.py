"""The manual API against the real OpenTelemetry SDK (in-memory exporter)."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import memtrace_otel.instrumentation._capture as capture_module
from memtrace_otel._internal import quiet_internal_errors
from memtrace_otel.instrumentation import (
    CaptureConfig,
    MemTracer,
    Variable,
    WriterRegistry,
    current_op,
    format_traceparent,
    parse_traceparent,
    suppress_tracing,
)
from memtrace_otel.semconv import CaptureMode, Category, OpKind
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E
from memtrace_otel.testing import SequentialIdGenerator, spans_as_dicts

STORE_KINDS = {
    "create": "create_memory",
    "update": "update_memory",
    "delete": "delete_memory",
    "retrieve": "search_memory",
}
DEFAULT_STAGE = {
    "ingest": "construction",
    "extract": "construction",
    "create": "construction",
    "update": "construction",
    "delete": "construction",
    "retrieve": "retrieval",
    "filter": "retrieval",
    "assemble": "response",
    "generate": "response",
    "judge": "evaluation",
}


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def make_tracer(
    capture: CaptureMode = CaptureMode.SPAN_AND_EVENT, **kw: Any
) -> tuple[MemTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SequentialIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    cfg = kw.pop("config", None) or CaptureConfig(mode=capture)
    mt = MemTracer(
        tracer_provider=provider,
        system="mem0",
        store_id="u1",
        capture=cfg,
        registry=WriterRegistry(),
        **kw,
    )
    return mt, exporter


@pytest.mark.parametrize("kind", [k.value for k in OpKind])
def test_every_op_kind_has_the_contract_attributes(kind: str) -> None:
    mt, exporter = make_tracer()
    msg = mt.variable("msg:1", "hello", category="message")
    with mt.op(kind, f"t.{kind}", inputs=[msg], case_id="c1") as op:
        op.output(mt.variable("out:1", {"k": 1}, category="memory"))
    [span] = spans_as_dicts(exporter.get_finished_spans())
    attrs = span["attributes"]
    assert attrs[A.MEMTRACE_OP_KIND] == kind
    assert attrs[A.MEMTRACE_OP_NAME] == f"t.{kind}"
    assert attrs[A.MEMTRACE_STAGE] == DEFAULT_STAGE[kind]
    assert attrs[A.MEMTRACE_OP_INPUTS] == ["msg:1@1"]
    assert attrs[A.MEMTRACE_OP_OUTPUTS] == ["out:1@1"]
    assert attrs[A.MEMTRACE_SYSTEM] == "mem0"
    assert attrs[A.GEN_AI_MEMORY_STORE_ID] == "u1"
    assert attrs[A.MEMTRACE_CASE_ID] == "c1"
    if kind in STORE_KINDS:
        assert span["name"] == STORE_KINDS[kind]
        assert attrs[A.GEN_AI_OPERATION_NAME] == STORE_KINDS[kind]
    else:
        assert span["name"] == f"memtrace.{kind} t.{kind}"
        assert A.GEN_AI_OPERATION_NAME not in attrs
    # value types as the SDK stores them
    raw = exporter.get_finished_spans()[0].attributes
    assert isinstance(raw[A.MEMTRACE_OP_INPUTS], tuple)
    assert all(isinstance(r, str) for r in raw[A.MEMTRACE_OP_OUTPUTS])
    events = span["events"]
    assert [e["attributes"][A.MEMTRACE_VARIABLE_ROLE] for e in events] == ["input", "output"]
    inp, out = (e["attributes"] for e in events)
    assert all(e["name"] == A.MEMTRACE_VARIABLE_EVENT for e in events)
    assert inp == {
        A.MEMTRACE_VARIABLE_REF: "msg:1@1",
        A.MEMTRACE_VARIABLE_ROLE: "input",
        A.MEMTRACE_VARIABLE_CATEGORY: "message",
        A.MEMTRACE_VARIABLE_DIGEST: sha("hello"),
        A.MEMTRACE_VARIABLE_VALUE: "hello",
    }
    assert out[A.MEMTRACE_VARIABLE_VALUE] == '{"k":1}'
    assert out[A.MEMTRACE_VARIABLE_DIGEST] == sha('{"k":1}')


def test_outputs_attribute_is_set_even_when_empty_and_prompt_ref_is_an_input() -> None:
    mt, exporter = make_tracer()
    prompt = mt.variable("prompt:answer", "Answer from {context}", category="prompt")
    with mt.generate("qa.answer", prompt=prompt, stage="response"):
        pass
    [span] = spans_as_dicts(exporter.get_finished_spans())
    assert span["attributes"][A.MEMTRACE_OP_OUTPUTS] == []
    assert span["attributes"][A.MEMTRACE_PROMPT_REF] == "prompt:answer@1"
    assert span["attributes"][A.MEMTRACE_OP_INPUTS] == ["prompt:answer@1"]


def test_capture_off_records_digests_only() -> None:
    mt, exporter = make_tracer(CaptureMode.NO_CONTENT)
    with mt.extract("x", inputs=[mt.variable("m:1", "secret text")]) as op:
        op.output(mt.variable("f:1", "secret fact"))
    [span] = spans_as_dicts(exporter.get_finished_spans())
    dumped = json.dumps(span)
    assert "secret" not in dumped
    digests = [e["attributes"][A.MEMTRACE_VARIABLE_DIGEST] for e in span["events"]]
    assert digests == [sha("secret text"), sha("secret fact")]


def test_redaction_hook_sees_every_value_and_truncation_is_marked() -> None:
    seen: list[str] = []

    def redact(text: str) -> str:
        seen.append(text)
        return text.replace("ana@example.com", "<email>")

    cfg = CaptureConfig(mode="SPAN_ONLY", max_value_length=8, redact=redact)
    mt, exporter = make_tracer(config=cfg)
    with mt.extract("x", inputs=[mt.variable("m:1", "mail ana@example.com")]) as op:
        op.output(mt.variable("f:1", "short"))
    [span] = spans_as_dicts(exporter.get_finished_spans())
    inp, out = (e["attributes"] for e in span["events"])
    assert seen == ["mail ana@example.com", "short"]
    assert inp[A.MEMTRACE_VARIABLE_VALUE] == "mail <em"
    assert inp[A.MEMTRACE_VARIABLE_TRUNCATED] is True
    assert inp[A.MEMTRACE_VARIABLE_DIGEST] == sha("mail ana@example.com")  # digest of the raw value
    assert out[A.MEMTRACE_VARIABLE_VALUE] == "short"
    assert A.MEMTRACE_VARIABLE_TRUNCATED not in out


def test_a_failing_redaction_hook_drops_the_value_never_leaks_it() -> None:
    def redact(text: str) -> str:
        raise RuntimeError("boom")

    mt, exporter = make_tracer(config=CaptureConfig(mode="SPAN_AND_EVENT", redact=redact))
    with quiet_internal_errors(), mt.extract("x") as op:
        op.output(mt.variable("f:1", "private"))
    [span] = spans_as_dicts(exporter.get_finished_spans())
    [event] = span["events"]
    assert A.MEMTRACE_VARIABLE_VALUE not in event["attributes"]
    assert event["attributes"][A.MEMTRACE_VARIABLE_DIGEST] == sha("private")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("NO_CONTENT", CaptureMode.NO_CONTENT),
        ("SPAN_ONLY", CaptureMode.SPAN_ONLY),
        ("EVENT_ONLY", CaptureMode.EVENT_ONLY),
        ("span_and_event", CaptureMode.SPAN_AND_EVENT),
        ("true", CaptureMode.SPAN_AND_EVENT),
        ("False", CaptureMode.NO_CONTENT),
    ],
)
def test_capture_mode_from_the_upstream_variable(
    monkeypatch: pytest.MonkeyPatch, env: str, expected: CaptureMode
) -> None:
    monkeypatch.delenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, raising=False)
    monkeypatch.setenv(E.ENV_CAPTURE_MESSAGE_CONTENT, env)
    assert CaptureConfig().mode is expected


def test_capture_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(E.ENV_CAPTURE_MESSAGE_CONTENT, raising=False)
    monkeypatch.delenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, raising=False)
    assert CaptureConfig().mode is CaptureMode.NO_CONTENT  # default: off
    monkeypatch.setenv(E.ENV_CAPTURE_MESSAGE_CONTENT, "SPAN_ONLY")
    monkeypatch.setenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, "NO_CONTENT")
    # The upstream variable keeps its meaning; ours narrows it for the memory categories only.
    config = CaptureConfig()
    assert config.mode is CaptureMode.SPAN_ONLY
    assert config.memory_mode is CaptureMode.NO_CONTENT
    assert not config.captures(Category.MEMORY) and config.captures(Category.PREDICTION)
    explicit = CaptureConfig(mode="EVENT_ONLY")  # an argument wins over both variables
    assert explicit.mode is CaptureMode.EVENT_ONLY and explicit.captures(Category.MEMORY)
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_VALUE_LENGTH, "10")
    assert CaptureConfig().max_value_length == 10
    assert CaptureConfig(max_value_length=5).max_value_length == 5


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({"mode": "sometimes"}, {}, "invalid capture mode 'sometimes'"),
        ({"max_value_length": 0}, {}, "max_value_length"),
        ({"redact": "not callable"}, {}, "redact must be callable"),
        ({"memory_mode": "most"}, {}, "invalid memory_mode 'most'"),
        # An argument wins over a variable, and a bad one raises whatever the environment says.
        ({"max_value_length": -1}, {E.ENV_MEMTRACE_MAX_VALUE_LENGTH: "10"}, "max_value_length"),
    ],
)
def test_bad_capture_configuration_raises_at_construction(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], env: dict[str, str], message: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=message):
        CaptureConfig(**kwargs)


def test_versions_bump_and_tombstones() -> None:
    mt, exporter = make_tracer()
    with mt.create("c") as op:
        fact = op.output(mt.variable("fact:1", "lives in Porto", category="memory"))
    with mt.update("u", inputs=[fact]) as op:
        fact2 = op.output(fact.next("lives in Lisbon"))
    with mt.delete("d", inputs=[fact2]) as op:
        gone = op.output(fact2.tombstone())
    assert (fact.ref, fact2.ref, gone.ref) == ("fact:1@1", "fact:1@2", "fact:1@3")
    spans = spans_as_dicts(exporter.get_finished_spans())
    assert [s["attributes"][A.MEMTRACE_OP_OUTPUTS] for s in spans] == [
        ["fact:1@1"],
        ["fact:1@2"],
        ["fact:1@3"],
    ]
    assert [s["attributes"].get(A.GEN_AI_MEMORY_RECORD_ID) for s in spans] == ["fact:1"] * 3
    tomb = spans[2]["events"][0]["attributes"]
    assert tomb[A.MEMTRACE_VARIABLE_DELETED] is True
    assert A.MEMTRACE_VARIABLE_VALUE not in tomb
    # the update links to the create, the delete to the update, with the ref on the link
    assert spans[1]["links"] == [
        {
            "trace_id": spans[0]["trace_id"],
            "span_id": spans[0]["span_id"],
            "attributes": {A.MEMTRACE_VARIABLE_REF: "fact:1@1"},
        }
    ]
    assert spans[2]["links"][0]["span_id"] == spans[1]["span_id"]
    # traced inputs are referenced, not repeated: only the output event on the update
    assert [e["attributes"][A.MEMTRACE_VARIABLE_ROLE] for e in spans[1]["events"]] == ["output"]


def test_links_cross_traces_and_processes_through_traceparent() -> None:
    writer_mt, writer_exp = make_tracer()
    with writer_mt.create("store") as op:
        rec = op.output(writer_mt.variable("mem:9", "Ana lives in Porto", category="memory"))
    [written] = spans_as_dicts(writer_exp.get_finished_spans())
    assert rec.traceparent == f"00-{written['trace_id']}-{written['span_id']}-01"
    # Another "process": a fresh registry knows nothing; the traceparent travels in metadata.
    reader_mt, reader_exp = make_tracer()
    stored = reader_mt.variable(
        "mem:9", "Ana lives in Porto", category="memory", traceparent=rec.traceparent
    )
    with reader_mt.retrieve("search", inputs=[stored], case_id="q1"):
        pass
    [read] = spans_as_dicts(reader_exp.get_finished_spans())
    assert read["links"] == [
        {
            "trace_id": written["trace_id"],
            "span_id": written["span_id"],
            "attributes": {A.MEMTRACE_VARIABLE_REF: "mem:9@1"},
        }
    ]
    assert read["events"] == []  # produced by a traced op: referenced, not repeated


def test_ops_nest_as_parent_and_child_in_one_trace() -> None:
    mt, exporter = make_tracer()
    with mt.ingest("ingest") as outer:
        assert current_op() is outer
        with mt.extract("extract") as inner:
            assert current_op() is inner
        assert current_op() is outer
    assert current_op() is None
    inner_span, outer_span = spans_as_dicts(exporter.get_finished_spans())
    assert inner_span["parent_span_id"] == outer_span["span_id"]
    assert inner_span["trace_id"] == outer_span["trace_id"]


def test_user_exceptions_are_recorded_and_reraised_unchanged() -> None:
    mt, exporter = make_tracer()
    error = KeyError("missing")
    with pytest.raises(KeyError) as caught, mt.retrieve("r"):
        raise error
    assert caught.value is error
    [span] = spans_as_dicts(exporter.get_finished_spans())
    assert span["status"] == "ERROR"
    assert [e["name"] for e in span["events"]] == ["exception"]


def test_decorators_sync_and_async() -> None:
    mt, exporter = make_tracer()

    @mt.trace_extract("chunk")
    def chunk(buffer: Variable, *, extra: list[Variable]) -> list[Variable]:
        return [mt.variable("chunk:1", buffer.value[:3], category="memory")]

    @mt.trace_generate("answer", case_id="q1")
    async def answer(ctx: Variable) -> Variable:
        op = current_op()
        assert op is not None
        op.set_attribute(A.GEN_AI_REQUEST_MODEL, "offline")
        return mt.variable("pred:q1", "Porto", category="prediction")

    buf = mt.variable("buf:1", "abcdef", category="message")
    result = chunk(buf, extra=[mt.variable("x:1", "y")])
    assert [v.ref for v in result] == ["chunk:1@1"] and result[0].traceparent is None  # untouched
    pred = asyncio.run(answer(result[0]))
    assert pred.value == "Porto"
    first, second = spans_as_dicts(exporter.get_finished_spans())
    assert first["attributes"][A.MEMTRACE_OP_INPUTS] == ["buf:1@1", "x:1@1"]
    assert first["attributes"][A.MEMTRACE_OP_OUTPUTS] == ["chunk:1@1"]
    assert second["attributes"][A.MEMTRACE_OP_INPUTS] == ["chunk:1@1"]
    assert second["attributes"][A.GEN_AI_REQUEST_MODEL] == "offline"
    assert second["links"][0]["span_id"] == first["span_id"]


@pytest.mark.parametrize("kind", list(OpKind))
def test_each_kind_has_a_context_manager_and_a_decorator_that_are_op_with_the_kind_fixed(
    kind: OpKind,
) -> None:
    mt, exporter = make_tracer()
    options: dict[str, Any] = {"case_id": "c1", "stage": "evaluation", "attributes": {"k": 1}}
    with getattr(mt, kind.value)("t.block", inputs=[mt.variable("m:1", "x")], **options) as op:
        op.output(mt.variable("o:1", "y"))

    @getattr(mt, f"trace_{kind.value}")("t.function", **options)
    def step(var: Variable) -> Variable:
        return var.next("z")

    step(mt.variable("m:2", "x"))
    block, function = spans_as_dicts(exporter.get_finished_spans())
    for span, name, inputs, outputs in (
        (block, "t.block", ["m:1@1"], ["o:1@1"]),
        (function, "t.function", ["m:2@1"], ["m:2@2"]),
    ):
        attrs = span["attributes"]
        assert attrs[A.MEMTRACE_OP_KIND] == kind.value
        assert attrs[A.MEMTRACE_OP_NAME] == name
        assert (attrs[A.MEMTRACE_STAGE], attrs[A.MEMTRACE_CASE_ID], attrs["k"]) == (
            "evaluation",
            "c1",
            1,
        )
        assert (attrs[A.MEMTRACE_OP_INPUTS], attrs[A.MEMTRACE_OP_OUTPUTS]) == (inputs, outputs)
    # The run-time context manager spells out op's keywords (no re-packing): the same ones.
    like_op = [p for p in inspect.signature(MemTracer.op).parameters.values() if p.name != "kind"]
    made = inspect.signature(getattr(MemTracer, kind.value)).parameters.values()
    assert [(p.name, p.kind, p.default) for p in made] == [
        (p.name, p.kind, p.default) for p in like_op
    ]
    with pytest.raises(ValueError, match="unknown stage"):
        getattr(mt, f"trace_{kind.value}")("t.bad", stage="nope")


def test_the_per_kind_table_has_one_row_per_op_kind() -> None:
    per_kind = {name for name in vars(MemTracer) if name.startswith("trace_")} - {"trace_op"}
    assert per_kind == {f"trace_{kind.value}" for kind in OpKind}
    for kind in OpKind:
        manager, decorator = vars(MemTracer)[kind.value], vars(MemTracer)[f"trace_{kind.value}"]
        assert (manager.__qualname__, decorator.__qualname__) == (
            f"MemTracer.{kind.value}",
            f"MemTracer.trace_{kind.value}",
        )
        assert manager.__doc__ and decorator.__doc__ == f"Decorator form of :meth:`{kind.value}`."


def test_async_context_manager_and_concurrent_tasks_keep_their_own_op() -> None:
    mt, exporter = make_tracer()

    async def one(i: int) -> str:
        async with mt.retrieve(f"r{i}", case_id=f"q{i}") as op:
            await asyncio.sleep(0.01)
            assert current_op() is op
            op.output(mt.variable(f"cands:{i}", [i], category="candidates"))
        return f"done{i}"

    async def main() -> list[str]:
        return list(await asyncio.gather(one(1), one(2), one(3)))

    assert asyncio.run(main()) == ["done1", "done2", "done3"]
    spans = spans_as_dicts(exporter.get_finished_spans())
    assert sorted(
        (s["attributes"][A.MEMTRACE_OP_NAME], s["attributes"][A.MEMTRACE_OP_OUTPUTS][0])
        for s in spans
    ) == [("r1", "cands:1@1"), ("r2", "cands:2@1"), ("r3", "cands:3@1")]
    assert all(s["parent_span_id"] is None for s in spans)


def test_suppress_tracing_records_nothing_sync_and_async() -> None:
    mt, exporter = make_tracer()
    with suppress_tracing(), mt.extract("x") as op:
        v = op.output(mt.variable("a:1", "v"))
    assert v.ref == "a:1@1" and not op.is_traced

    async def run() -> None:
        async with suppress_tracing(), mt.extract("y") as op2:
            op2.output(mt.variable("b:1", "v"))

    asyncio.run(run())
    assert exporter.get_finished_spans() == ()


def test_an_injected_internal_fault_neither_raises_nor_loses_the_return_value(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    mt, exporter = make_tracer()

    def broken_digest(self: object, data: bytes) -> str:
        raise RuntimeError("digest exploded")

    # Every value's digest is made by the capture's Digester (keyed or not).
    monkeypatch.setattr(capture_module.Digester, "__call__", broken_digest)

    @mt.trace_extract("x")
    def work(v: Variable) -> Variable:
        return mt.variable("out:1", v.value + "!")

    with quiet_internal_errors(), caplog.at_level(logging.WARNING, "memtrace_otel"):
        out = work(mt.variable("in:1", "value"))
        out2 = work(mt.variable("in:1", "value"))
    assert out.value == "value!" and out2.value == "value!"
    assert exporter.get_finished_spans()  # the spans are still kept
    warnings = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert len(warnings) == 1  # logged once, not per call
    # ...and in the project's tests (MEMTRACE_INTERNAL_ERRORS=raise) the fault is raised.
    with pytest.raises(RuntimeError, match="digest exploded"):
        work(mt.variable("in:1", "value"))
    # even then the op's context was detached: nothing leaks into the next span
    assert current_op() is None
    assert not trace.get_current_span().get_span_context().is_valid


def test_a_fault_at_span_start_runs_the_user_code_untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    mt, exporter = make_tracer()

    def broken_start(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("start exploded")

    monkeypatch.setattr(mt._otel_tracer, "start_span", broken_start)
    with quiet_internal_errors(), mt.extract("x") as op:
        result = op.output(mt.variable("a:1", "v"))
    assert result.ref == "a:1@1"
    assert not op.is_traced
    assert exporter.get_finished_spans() == ()


def test_bad_configuration_raises_at_construction() -> None:
    mt, _ = make_tracer()
    with pytest.raises(ValueError, match="unknown op kind 'remember'"):
        mt.op("remember", "x")
    with pytest.raises(ValueError, match="unknown stage 'later'"):
        mt.extract("x", stage="later")
    with pytest.raises(ValueError, match="op name"):
        mt.extract("")
    with pytest.raises(ValueError, match="unknown op kind"):
        mt.trace_op("remember", "x")
    with pytest.raises(ValueError, match="expected '<id>@<version>'"):
        Variable.from_ref("fact")
    with pytest.raises(ValueError, match="integer >= 1"):
        Variable("fact", 0)
    with pytest.raises(ValueError, match="invalid category"):
        mt.variable("fact", "x", category="feelings")
    with pytest.raises(ValueError, match="store_id"):
        MemTracer(store_id="")
    with pytest.raises(ValueError, match="capture"):
        MemTracer(capture="on")  # type: ignore[arg-type]


def test_bad_data_at_run_time_is_logged_and_degraded(caplog: pytest.LogCaptureFixture) -> None:
    mt, exporter = make_tracer()

    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque>"

    with caplog.at_level(logging.WARNING, "memtrace_otel"):
        with mt.extract("x", inputs=["not-a-ref", 42, "unknown:1@1"]) as op:  # type: ignore[list-item]
            op.output(mt.variable("o:1", Opaque()))
        late = op.output(mt.variable("late:1", "v"))
    assert late.traceparent is None  # the span was closed: ignored, returned unchanged
    [span] = spans_as_dicts(exporter.get_finished_spans())
    assert span["attributes"][A.MEMTRACE_OP_INPUTS] == ["unknown:1@1"]
    assert span["attributes"][A.MEMTRACE_OP_OUTPUTS] == ["o:1@1"]
    assert span["events"][0]["attributes"][A.MEMTRACE_VARIABLE_VALUE] == "<Opaque>"
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "ignoring op input 'not-a-ref'" in messages
    assert "not JSON-serialisable" in messages
    assert "after its op 'x' ended" in messages


def test_registry_is_bounded_and_counts_evictions() -> None:
    registry = WriterRegistry(max_entries=2)
    mt, _ = make_tracer()
    mt.registry = registry
    for i in range(5):
        with mt.create("c") as op:
            op.output(mt.variable(f"r:{i}", i))
    assert len(registry) == 2 and registry.evicted == 3
    assert registry.lookup("r:0@1") is None and registry.lookup("r:4@1") is not None
    with pytest.raises(ValueError, match="max_entries"):
        WriterRegistry(max_entries=0)


def test_traceparent_round_trip_and_garbage() -> None:
    ctx = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert ctx is not None and ctx.is_remote
    assert format_traceparent(ctx) == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    for bad in ["", "00-zz-yy-01", "00-00000000000000000000000000000000-b7ad6b7169203331-01", None]:
        assert parse_traceparent(bad) is None


def test_pytest_plugin_fixtures(
    memtrace_tracer: MemTracer, memtrace_exporter: InMemorySpanExporter
) -> None:
    with memtrace_tracer.create("c") as op:
        op.output(memtrace_tracer.variable("a:1", "v"))
    [span] = spans_as_dicts(memtrace_exporter.get_finished_spans())
    assert span["span_id"] == "0000000000000001"
    assert span["trace_id"] == "00000000000000000000000000000001"
    assert span["events"][0]["attributes"][A.MEMTRACE_VARIABLE_VALUE] == "v"


def test_an_op_can_enrich_a_span_it_did_not_start(
    memtrace_tracer: MemTracer, memtrace_exporter: InMemorySpanExporter
) -> None:
    """``span=``: the op writes its attributes, links and events on the given (current) span
    and leaves its name, its status, the exception and its end to the span's owner."""
    mt = memtrace_tracer
    with mt.create("w") as writer:
        fact = writer.output(mt.variable("fact:1", "Ana lives in Porto", category="memory"))
    tracer = mt._otel_tracer
    with pytest.raises(RuntimeError), tracer.start_as_current_span("chat m") as owner:
        with mt.generate("app.answer", inputs=[fact.ref], span=owner) as op:
            assert op.span is owner and trace.get_current_span() is owner
            op.output(mt.variable("prediction:1", "Porto", category="prediction"))
        assert owner.is_recording()  # the op did not end it
        raise RuntimeError("the owner's failure")
    spans = {s.name: s for s in memtrace_exporter.get_finished_spans()}
    assert "memtrace.generate app.answer" not in spans  # no second span
    chat = spans["chat m"]
    attributes = dict(chat.attributes or {})
    assert attributes[A.MEMTRACE_OP_KIND] == "generate"
    assert attributes[A.MEMTRACE_OP_INPUTS] == ("fact:1@1",)
    assert attributes[A.MEMTRACE_OP_OUTPUTS] == ("prediction:1@1",)
    assert [dict(link.attributes or {}) for link in chat.links] == [
        {A.MEMTRACE_VARIABLE_REF: "fact:1@1"}
    ]
    assert [e.name for e in chat.events].count("exception") == 1  # the owner's, once
    assert mt.registry.lookup("prediction:1@1") == chat.context


def test_links_follow_the_current_writer_of_a_ref(
    memtrace_tracer: MemTracer, memtrace_exporter: InMemorySpanExporter
) -> None:
    """Links are cached per ref, but a ref written again by another op links to the new writer."""
    mt = memtrace_tracer
    writers = []
    for _ in range(2):
        with mt.create("w") as op:
            op.output(mt.variable("doc:1", "v", category="memory"))
        writers.append(op.span.get_span_context())
        with mt.retrieve("r", inputs=["doc:1@1"]):
            pass
    reads = [s for s in memtrace_exporter.get_finished_spans() if s.name == "search_memory"]
    assert [r.links[0].context for r in reads] == writers


def test_add_records_links_known_writers_and_records_the_rest_as_input_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mt, exporter = make_tracer()
    with mt.create("store") as op:
        here = op.output(mt.variable("mem:1", "Ana lives in Porto", category="memory"))
    elsewhere = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with caplog.at_level(logging.WARNING), mt.retrieve("search", case_id="q1") as op:
        op.add_records(
            [
                (here.ref, "Ana lives in Porto", None),  # the registry knows its writer
                ("mem:2@3", "Ana likes tea", elsewhere),  # its metadata names the writer
                ("mem:3@1", "Ana has a cat", None),  # written untraced: an input event
                ("not a ref", "dropped", None),
            ]
        )
    written, read = spans_as_dicts(exporter.get_finished_spans())
    assert read["attributes"][A.MEMTRACE_OP_INPUTS] == ["mem:1@1", "mem:2@3", "mem:3@1"]
    assert [(li["span_id"], li["attributes"]) for li in read["links"]] == [
        (written["span_id"], {A.MEMTRACE_VARIABLE_REF: "mem:1@1"}),
        ("b7ad6b7169203331", {A.MEMTRACE_VARIABLE_REF: "mem:2@3"}),
    ]
    [event] = read["events"]
    assert event["attributes"][A.MEMTRACE_VARIABLE_REF] == "mem:3@1"
    assert event["attributes"][A.MEMTRACE_VARIABLE_ROLE] == "input"
    assert event["attributes"][A.MEMTRACE_VARIABLE_DIGEST] == sha("Ana has a cat")
    assert "not a ref" in caplog.text


def test_add_records_matches_add_inputs_with_variables() -> None:
    """The one-pass form records what one Variable per record would."""
    elsewhere = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    records = [("mem:2@3", "Ana likes tea", elsewhere), ("mem:3@1", "Ana has a cat", None)]
    seen = []
    for use_records in (True, False):
        mt, exporter = make_tracer()
        with mt.retrieve("search") as op:
            if use_records:
                op.add_records(records)
            else:
                op.add_inputs(
                    Variable.from_ref(ref, text, category="memory", traceparent=tp)
                    for ref, text, tp in records
                )
        [span] = spans_as_dicts(exporter.get_finished_spans())
        seen.append((span["attributes"], span["links"], span["events"]))
    assert seen[0] == seen[1]

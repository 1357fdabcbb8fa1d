"""Host-side hardening (issue 23, "Inside the host app"): what an adversarial pass broke.

fork() with busy threads, a lone surrogate in any field, exception text and meta under the capture
settings, the LangGraph retrieval memory in bytes, "logged once", a Collector that never answers,
and internal errors raised into a user's own pytest run. Each test failed before its fix.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel._internal import internal_error_counts, quiet_internal_errors
from memtrace_otel.export import OtlpJsonLinesExporter, configure
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.instrumentors._common import retrieval_memory
from memtrace_otel.instrumentors.langgraph import LangGraphInstrumentor
from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
from memtrace_otel.semconv import Category
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E
from tests._otlp_receiver import SilentServer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_capture_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The settings under test come from arguments; the shell's capture variables must not leak in.
    for name in (E.ENV_CAPTURE_MESSAGE_CONTENT, E.ENV_MEMTRACE_CAPTURE_CONTENT):
        monkeypatch.delenv(name, raising=False)


def _tracer(capture: CaptureConfig) -> tuple[MemTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemTracer(
        tracer_provider=provider, system="rag", capture=capture, registry=WriterRegistry()
    )
    return mt, exporter


# --- fork() with busy threads -------------------------------------------------------------------

FORK_SCRIPT = r"""
import os, sys, threading, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import MemTracer, WriterRegistry

out = sys.argv[1]
exporter = OtlpJsonLinesExporter(out)
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
mt = MemTracer(tracer_provider=provider, system="rag", registry=WriterRegistry())
stop = threading.Event()

def busy(n):
    i = 0
    while not stop.is_set():
        i += 1
        with mt.create("busy") as op:
            op.output(mt.variable(f"t{n}:{i}", "v"))

threads = [threading.Thread(target=busy, args=(n,), daemon=True) for n in range(4)]
for t in threads:
    t.start()
time.sleep(0.2)
children = []
for k in range(10):
    time.sleep(0.01)
    pid = os.fork()
    if pid == 0:
        with mt.create("child") as op:
            op.output(mt.variable(f"child:{k}", "v"))
        exporter.shutdown()
        os._exit(0)
    children.append(pid)
deadline = time.monotonic() + 20
done = {}
while children and time.monotonic() < deadline:
    for pid in list(children):
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            done[pid] = os.waitstatus_to_exitcode(status)
            children.remove(pid)
    time.sleep(0.02)
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
stop.set()
print(f"hung={len(children)} ok={sum(1 for c in done.values() if c == 0)}")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_with_busy_threads_never_hangs_the_child(tmp_path: Path) -> None:
    # Before the at-fork resets, 9 of 10 children hung inside op.output() with 2 threads.
    script = tmp_path / "fork_app.py"
    script.write_text(FORK_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "traces.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "hung=0 ok=10"


# --- one bad character ----------------------------------------------------------------------------

BAD = "bad\ud800char"


def _spans_with_a_surrogate(field: str) -> list[ReadableSpan]:
    mt, exporter = _tracer(CaptureConfig(mode="SPAN_AND_EVENT"))
    for i in range(200):
        with mt.create("rag.store", store_id="user-1") as op:
            op.output(mt.variable(f"doc:{i}", f"value {i}", category="memory"))
    name = BAD if field == "op name" else "rag.store"
    store = BAD if field == "store id" else "user-1"
    ident = f"doc:{BAD}" if field == "variable id" else "doc:bad"
    value = BAD if field == "value" else "fine"
    meta = {"note": BAD} if field == "meta" else None
    case_id = BAD if field == "case id" else None
    with mt.create(name, store_id=store, case_id=case_id) as op:
        op.output(mt.variable(ident, value, category="memory", meta=meta))
    return list(exporter.get_finished_spans())


@pytest.mark.parametrize(
    "field", ["store id", "op name", "value", "meta", "variable id", "case id"]
)
def test_a_lone_surrogate_costs_one_value_not_the_batch(tmp_path: Path, field: str) -> None:
    spans = _spans_with_a_surrogate(field)
    path = tmp_path / "traces.jsonl"
    exporter = OtlpJsonLinesExporter(path)
    with quiet_internal_errors():
        result = exporter.export(spans)
    exporter.shutdown()
    assert result.name == "SUCCESS"
    [line] = path.read_text(encoding="utf-8").splitlines()
    exported = [
        span
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    assert len(exported) == 201  # before: 0 of 201, and nothing counted
    assert "bad\ufffdchar" in line
    stats = exporter.stats()
    assert stats["exported_spans"] == 201 and stats["failed_spans"] == 0
    assert stats["replaced_values"] >= 1


# --- privacy: exception text and meta -------------------------------------------------------------

SECRETS = ("4111 1111 1111 1111", "ana@example.com", "sk-live-12345")
MESSAGE = f"charge failed for card {SECRETS[0]} of {SECRETS[1]} with token {SECRETS[2]}"


def _hide_tokens(text: str) -> str:
    return text.replace(SECRETS[2], "<token>")


def _raise_through_op(mt: MemTracer) -> ReadableSpan:
    with pytest.raises(ValueError), mt.create("rag.store") as op:
        op.output(mt.variable("doc:1", "ok", category="memory"))
        raise ValueError(MESSAGE)
    return op.span  # type: ignore[return-value]


def _everything(span: ReadableSpan) -> str:
    parts = [span.name, span.status.description or ""]
    parts += [json.dumps(dict(span.attributes or {}), default=str)]
    parts += [json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
    return "\n".join(parts)


@pytest.mark.parametrize(
    "make",
    [
        CaptureConfig,  # the default: off
        lambda: CaptureConfig(mode="NO_CONTENT"),
        CaptureConfig.for_production,  # memory on; exception text follows the upstream variable
    ],
    ids=["default", "off", "production"],
)
def test_exception_text_stays_home_when_capture_is_off(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(E.ENV_CAPTURE_MESSAGE_CONTENT, raising=False)
    monkeypatch.delenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, raising=False)
    mt, _ = _tracer(make())
    span = _raise_through_op(mt)
    text = _everything(span)
    assert not any(secret in text for secret in SECRETS), text
    [event] = [e for e in span.events if e.name == A.EXCEPTION_EVENT]
    attrs = event.attributes or {}
    assert attrs[A.EXCEPTION_TYPE] == "ValueError"  # the type stays
    assert A.EXCEPTION_MESSAGE not in attrs
    assert "_raise_through_op" in str(attrs[A.EXCEPTION_STACKTRACE])  # and the frames
    assert span.status.description == "ValueError"


def test_exception_text_passes_the_redaction_hook_when_captured() -> None:
    def hook(text: str) -> str:
        from memtrace_otel.instrumentation import redact_pii

        return _hide_tokens(redact_pii(text))

    mt, _ = _tracer(CaptureConfig(mode="SPAN_AND_EVENT", redact=hook))
    span = _raise_through_op(mt)
    text = _everything(span)
    assert not any(secret in text for secret in SECRETS), text
    [event] = [e for e in span.events if e.name == A.EXCEPTION_EVENT]
    message = (event.attributes or {})[A.EXCEPTION_MESSAGE]
    assert message == "charge failed for card <card> of <email> with token <token>"
    assert span.status.description == f"ValueError: {message}"


def test_meta_keeps_structure_always_and_content_only_as_capture_allows() -> None:
    meta = {"source_refs": ["msg:1@1"], "role": "user", "score": 0.5, "note": SECRETS[1]}

    def recorded(capture: CaptureConfig, category: str) -> dict[str, Any] | None:
        mt, exporter = _tracer(capture)
        with mt.create("rag.store") as op:
            op.output(mt.variable("doc:1", "v", category=category, meta=meta))
        [span] = exporter.get_finished_spans()
        [event] = span.events
        raw = (event.attributes or {}).get(A.MEMTRACE_VARIABLE_META)
        return json.loads(str(raw)) if raw is not None else None

    structure = {"source_refs": ["msg:1@1"], "role": "user", "score": 0.5}
    assert recorded(CaptureConfig(mode="NO_CONTENT"), "memory") == structure
    assert recorded(CaptureConfig(mode="SPAN_ONLY", redact="builtin"), "memory") == {
        **structure,
        "note": "<email>",
    }
    production = CaptureConfig(memory_mode="PRODUCTION")
    assert recorded(production, "memory") == {**structure, "note": "<email>"}
    assert recorded(production, "prediction") == structure  # an answer's meta: content withheld


def test_production_setting_captures_memory_redacted_and_no_prompts_or_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(E.ENV_CAPTURE_MESSAGE_CONTENT, raising=False)
    monkeypatch.setenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, "production")
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_VALUE_LENGTH, "20")
    capture = CaptureConfig()
    assert capture.production and capture.redact is not None
    assert capture.record(f"mail {SECRETS[1]}", Category.MEMORY) == ("mail <email>", False)
    assert capture.record("x" * 30, Category.MESSAGE) == ("x" * 20, True)
    assert capture.record("Porto", Category.GOLD) == ("Porto", False)  # the expected answer
    for category in (Category.PROMPT, Category.CONTEXT, Category.PREDICTION, Category.OTHER):
        assert capture.record("the answer", category) == (None, False)
    # Contract v0.3: the answer the user saw, and what decision and filter ops output (they
    # restate captured records), chosen by op kind and role; never a prompt, the context or
    # another LLM call's completion.
    out = {"role": "output"}
    answer = capture.record("Porto", Category.PREDICTION, kind="generate", answer=True, **out)
    assert answer == ("Porto", False)
    assert capture.record("raw", Category.PREDICTION, kind="generate", **out) == (None, False)
    decided = capture.record('{"event":"DELETE"}', Category.OTHER, kind="update", **out)
    assert decided == ('{"event":"DELETE"}', False)
    assert capture.record("kept", Category.OTHER, kind="filter", **out) == ("kept", False)
    assert capture.record("kept", Category.OTHER, kind="filter", role="input") == (None, False)
    for kind in ("update", "filter"):
        for category in (Category.PROMPT, Category.CONTEXT):
            assert capture.record("prompt", category, kind=kind, **out) == (None, False)
    assert capture.record("raw", Category.OTHER, kind="generate", **out) == (None, False)
    # The upstream variable keeps its meaning: turning it on adds prompts and completions.
    monkeypatch.setenv(E.ENV_CAPTURE_MESSAGE_CONTENT, "SPAN_AND_EVENT")
    assert CaptureConfig().record("the answer", Category.PREDICTION) == ("the answer", False)


@pytest.mark.parametrize("bad", ["SPAN_ONLY", {"mode": "SPAN_ONLY"}, True])
def test_a_wrongly_typed_capture_option_raises_at_instrument(bad: object) -> None:
    instrumentor = OpenAIInstrumentor()
    with pytest.raises(ValueError, match="capture must be a CaptureConfig"):
        instrumentor.instrument(tracer_provider=TracerProvider(), capture=bad)
    assert not instrumentor.is_instrumented_by_opentelemetry


# --- LangGraph retention, in bytes -----------------------------------------------------------------


def test_langgraph_retrieval_memory_is_bounded_in_bytes_and_released_on_uninstrument() -> None:
    budget = 2 * 1024 * 1024
    retrieval_memory.clear()
    previous = retrieval_memory.max_bytes
    retrieval_memory.max_bytes = budget
    provider = TracerProvider()
    instrumentor = LangGraphInstrumentor()
    instrumentor.instrument(tracer_provider=provider, registry=WriterRegistry())  # capture off
    try:
        store = InMemoryStore()
        big = "fact " * 20_000  # 100 kB per item
        for i in range(20):
            store.put(("memories", "dana"), f"k{i}", {"text": f"{i} {big}"})
        tracer = trace.get_tracer("app", tracer_provider=provider)
        peak = 0
        for _ in range(100):  # 100 requests, each a trace searching 20 items of 100 kB
            with tracer.start_as_current_span("request"):
                store.search(("memories",), query="fact", limit=20)
            peak = max(peak, retrieval_memory.bytes)
        # Before: every request's 2 MB of text was kept (200 MB here), even after shutdown.
        assert 0 < peak <= budget
        # Each record is kept cut to the capture's value length (4096 characters by default).
        [kept] = retrieval_memory.of_trace(next(iter(retrieval_memory._by_trace)))[:1]
        assert all(len(text) <= 4096 for _, text, _ in kept.records)
        assert retrieval_memory.evicted > 0
    finally:
        instrumentor.uninstrument()
        retrieval_memory.max_bytes = previous
    assert retrieval_memory.bytes == 0 and not retrieval_memory._by_trace


# --- "logged once" -------------------------------------------------------------------------------


def test_a_value_failing_3000_times_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    def hook(text: str) -> str:
        raise ValueError(f"cannot redact {text!r}")  # a different message every time

    mt, exporter = _tracer(CaptureConfig(mode="SPAN_ONLY", redact=hook))
    before = internal_error_counts().get("capture.redact", 0)
    with quiet_internal_errors(), caplog.at_level(logging.WARNING, "memtrace_otel"):
        for i in range(3000):
            with mt.create("rag.store") as op:
                op.output(mt.variable(f"doc:{i}", f"value {i}", category="memory"))
    warnings = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert len(warnings) == 1  # before: 3000, each with a traceback
    assert internal_error_counts()["capture.redact"] - before == 3000
    assert len(exporter.get_finished_spans()) == 3000


# --- a Collector that accepts and never answers ----------------------------------------------------


def test_shutdown_against_a_silent_collector_keeps_its_budget_and_counts_the_loss(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)  # the exporter's own 10 s per request
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "2000")  # the documented shutdown budget
    caplog.set_level(logging.WARNING)
    with SilentServer() as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.port}")
        provider = configure(service_name="app", set_global=False)
        mt = MemTracer(tracer_provider=provider, system="rag", registry=WriterRegistry())
        for i in range(300):
            with mt.create("rag.store") as op:
                op.output(mt.variable(f"doc:{i}", "v"))
        start = time.monotonic()
        provider.shutdown()
        took = time.monotonic() - start
    # Before: 30 s (the SDK joins its worker that long), and the queued spans were not counted.
    assert took < 10, took
    [line] = [r.getMessage() for r in caplog.records if "were not exported" in r.getMessage()]
    assert line.startswith("memtrace-otel: 300 of 300 spans were not exported"), line
    assert "budget 2.0 s" in line


# --- errors raised into a user's own pytest run ------------------------------------------------------

USER_TEST = """
from opentelemetry.sdk.trace import TracerProvider
from memtrace_otel.instrumentation import CaptureConfig, MemTracer


def broken_hook(text):
    raise ValueError("our bug, not yours")


def test_the_app_works():
    mt = MemTracer(
        tracer_provider=TracerProvider(), capture=CaptureConfig(mode="SPAN_ONLY", redact=broken_hook)
    )
    with mt.create("app.store") as op:
        out = op.output(mt.variable("doc:1", "hello"))
    assert out.value == "hello"
"""


@pytest.mark.parametrize(("setting", "expected"), [(None, 0), ("raise", 1)])
def test_a_user_s_test_suite_gets_the_production_behaviour(
    tmp_path: Path, setting: str | None, expected: int
) -> None:
    (tmp_path / "test_user_app.py").write_text(textwrap.dedent(USER_TEST))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMTRACE_", "PYTEST_"))}
    if setting is not None:
        env["MEMTRACE_INTERNAL_ERRORS"] = setting  # the opt-in this project's conftest sets
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    # Before: the user's test failed with our ValueError.
    assert result.returncode == expected, result.stdout[-2000:]


# --- the production capture setting keeps the memory verdicts ---------------------------------------


@pytest.mark.parametrize("with_cases", [True, False], ids=["cases-file", "no-cases-file"])
def test_production_capture_keeps_the_memory_verdicts_right(
    tmp_path: Path, with_cases: bool
) -> None:
    from memtrace_otel.attribution import EvidenceMethod
    from memtrace_otel.job import run_batch
    from tests._pipeline import EXPECTED, write_workload

    traces, cases = write_workload(tmp_path, capture=CaptureConfig.for_production())
    # No LLM prompt or context text left the process; the answers the users saw did.
    answers = 0
    for line in traces.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for span in rs["scopeSpans"][0]["spans"]:
                for event in span.get("events", []):
                    attrs = {a["key"]: a["value"] for a in event["attributes"]}
                    category = attrs[A.MEMTRACE_VARIABLE_CATEGORY]["stringValue"]
                    if category in ("context", "prompt"):
                        assert A.MEMTRACE_VARIABLE_VALUE not in attrs
                    answers += category == "prediction" and A.MEMTRACE_VARIABLE_VALUE in attrs
    assert answers
    verdicts, _ = run_batch(
        [str(traces)], EvidenceMethod(), cases_file=str(cases) if with_cases else None
    )
    got = {v.case_id: (v.error_type, v.op_name) for v in verdicts}
    # Right, or honestly unsure: never a wrong verdict. Faults that memory content or structure
    # decide are named exactly; those whose deciding value is the assembled context (an LLM
    # prompt, kept home by this setting) may abstain.
    for fault, expected in EXPECTED.items():
        verdict = got[f"case-{fault}"]
        if fault in ("extraction", "update", "deletion", "filter"):
            assert verdict == expected, fault
        else:
            assert verdict in (expected, (None, None)), fault

"""The byte scan over the wire: under REFERENCE no memory text leaves in what the real OTLP/HTTP
exporter sends, ours and the upstream openai-v2 instrumentor's spans alike.

Real parts: the OTel SDK and its OTLP/HTTP protobuf exporter posting to a loopback receiver that
keeps each request's bytes (``tests/_otlp_receiver.py``), the batch job and its written-back
verdict spans, the real ``openai`` client against the scripted server, and
``opentelemetry-instrumentation-openai-v2`` (with ``opentelemetry-util-genai``'s fsspec upload
hook) beside our instrumentor. Each scan is first seen to find text with capture on, so it can
fail.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.attribution import EvidenceMethod
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry, send_feedback
from memtrace_otel.job import run_batch
from memtrace_otel.job._writeback import send_verdicts
from memtrace_otel.semconv import env as E
from tests._otlp_receiver import Receiver, otlp_receiver
from tests._pipeline import FAULTS, run_case

KEY = "k" * 32
SECRET = "sk-live-4eC39HqLyjWDarjtT1zdp7dcAb"
EMAIL = "ana.sousa@example.com"
WIDTH = 12
"""The scan looks for every substring of this many characters of the texts."""


def _pieces(texts: set[str]) -> set[str]:
    out = {t[i : i + WIDTH] for t in texts for i in range(len(t) - WIDTH + 1)}
    return out | {t for t in texts if len(t) < WIDTH and len(t) >= 5}


def _leaks(receiver: Receiver, texts: set[str]) -> list[str]:
    """The pieces of ``texts`` found in the requests' bytes, or in their decoded JSON."""
    with receiver.lock:
        bodies = list(receiver.bodies)
    assert bodies, "the exporter sent nothing"
    decoded = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        decoded.append(json.loads(MessageToJson(request)))
    text = json.dumps(decoded, ensure_ascii=False)
    return sorted(p for p in _pieces(texts) if p.encode() in b"".join(bodies) or p in text)


def _otlp(receiver: Receiver) -> OTLPSpanExporter:
    return OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")


def _workload(
    receiver: Receiver, folder: Path, capture: CaptureConfig
) -> tuple[Path, Path, set[str]]:
    """The attribution pipeline's cases (every fault), a planted secret, an exception and
    feedback, exported over OTLP/HTTP (and to a file the batch job reads); the app's texts."""
    provider = TracerProvider(resource=Resource.create({"service.name": "scan-app"}))
    provider.add_span_processor(SimpleSpanProcessor(_otlp(receiver)))
    traces, cases = folder / "traces.jsonl", folder / "cases.jsonl"
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(traces)))
    entries = []
    for fault in FAULTS:
        mt = MemTracer(
            tracer_provider=provider,
            system="test",
            store_id=f"user-{fault}",
            capture=capture,
            registry=WriterRegistry(),
        )
        entries.append(run_case(mt, provider.get_tracer("test"), f"case-{fault}", fault))
    texts = {
        "Ana keeps her key " + SECRET + " in the notes app",
        "cannot merge 'Ana lives in Porto' with 'Ana lives abroad'",
        "Porto, in the north of Portugal",
        "the assistant forgot my sister moved",
        EMAIL,
    }
    # The user's e-mail as the store id (as mem0's user_id): pseudonymised under REFERENCE.
    mt = MemTracer(tracer_provider=provider, system="test", store_id=EMAIL, capture=capture)
    with mt.create("test.note", inputs=[]) as op:
        op.output(mt.variable("note:1", "Ana keeps her key " + SECRET + " in the notes app"))
    message = "cannot merge 'Ana lives in Porto' with 'Ana lives abroad'"
    with pytest.raises(ValueError), mt.update("test.merge", inputs=[]):
        raise ValueError(message)  # a variable: the frames show source lines, not values
    send_feedback(
        case_id="case-none",
        correct=False,
        expected="Porto, in the north of Portugal",
        comment="the assistant forgot my sister moved",
        tracer_provider=provider,
        capture=capture,
    )
    provider.shutdown()
    cases.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return traces, cases, texts


def _span_texts(traces: Path) -> set[str]:
    """Every value and meta text a capture-on run put into its spans (refs and ids aside)."""
    from memtrace_otel.semconv import attributes as A
    from memtrace_otel.sources import open_source
    from tests.test_content_reference import _leaves

    out: set[str] = set()
    for record in open_source(str(traces)).records():
        for event in record.events:
            value = event.attributes.get(A.MEMTRACE_VARIABLE_VALUE)
            if isinstance(value, str):
                out.update(_leaves(value))
    return out


@pytest.fixture
def digest_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(E.ENV_MEMTRACE_DIGEST_KEY, KEY)
    yield


def test_no_memory_text_in_what_the_otlp_exporter_sends_under_reference(
    tmp_path: Path, digest_key: None
) -> None:
    on_folder, ref_folder = tmp_path / "on", tmp_path / "ref"
    on_folder.mkdir()
    ref_folder.mkdir()
    with otlp_receiver() as on_wire:
        on_traces, _, planted = _workload(on_wire, on_folder, CaptureConfig(mode="SPAN_AND_EVENT"))
    texts = _span_texts(on_traces) | planted
    # The scan finds the text capture on sends: it can fail.
    assert _leaks(on_wire, texts)
    capture = CaptureConfig(
        mode="REFERENCE", content_url=(tmp_path / "content").as_uri(), digest_key=KEY
    )
    with otlp_receiver() as wire:
        traces, cases, _ = _workload(wire, ref_folder, capture)
        writer = capture.content_writer
        assert writer is not None and writer.flush(10_000)
        # The batch job resolves the content (it needs it), then writes its verdicts back.
        verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
        assert summary.resolved_content and any(v.error_type for v in verdicts)
        result = send_verdicts(verdicts, _otlp(wire), textless=True)
        assert len(result.sent) == len(verdicts) and not result.failed
        with wire.lock:
            services = {
                a.value.string_value
                for body in wire.bodies
                for rs in _parse(body).resource_spans
                for a in rs.resource.attributes
                if a.key == "service.name"
            }
        assert services == {"scan-app", "memtrace-attribution"}
        assert _leaks(wire, texts) == []


def _parse(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return request


# --- the upstream openai-v2 instrumentor beside ours ----------------------------------------------

MEMORY = "Ana moved to Porto in May 2023 with her sister Marta"
QUESTION = "Where does Ana live now, and with whom?"
ANSWER = "Ana lives in Porto with her sister Marta"


@pytest.fixture
def upstream_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Forget the GenAI conventions mode the upstream instrumentor caches process-wide from
    ``OTEL_SEMCONV_STABILITY_OPT_IN`` (around each test), and unwrap both instrumentors."""
    from opentelemetry.instrumentation._semconv import (
        _OpenTelemetrySemanticConventionStability as Stability,
    )
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as Upstream

    from memtrace_otel.instrumentors.openai import OpenAIInstrumentor

    for name in (
        "OTEL_SEMCONV_STABILITY_OPT_IN",
        E.ENV_CAPTURE_MESSAGE_CONTENT,
        "OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK",
        E.ENV_GENAI_UPLOAD_BASE_PATH,
        "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT",
    ):
        monkeypatch.delenv(name, raising=False)
    Stability._initialized = False
    yield monkeypatch
    for instrumentor in (OpenAIInstrumentor(), Upstream()):
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    Stability._initialized = False


def _chat_over_otlp(receiver: Receiver, capture: CaptureConfig) -> Any:
    """One chat call (a memory and a secret in the prompt) with upstream and ours enabled,
    exported over OTLP/HTTP; the upstream upload hook's instance (or None)."""
    import openai
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as Upstream

    from memtrace_otel.instrumentors.openai import OpenAIInstrumentor
    from tests._instrumentor_helpers import LLMScript
    from tests._openai_server import ScriptedOpenAI

    provider = TracerProvider(resource=Resource.create({"service.name": "chat-app"}))
    provider.add_span_processor(SimpleSpanProcessor(_otlp(receiver)))
    upstream = Upstream()
    upstream.instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(
        tracer_provider=provider, capture=capture, registry=WriterRegistry()
    )
    messages = [
        {"role": "system", "content": f"Memories:\n{MEMORY}\nAPI key on file: {SECRET}"},
        {"role": "user", "content": QUESTION},
    ]
    with ScriptedOpenAI(LLMScript(answer=lambda prompt: ANSWER)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        reply = client.chat.completions.create(model="gpt-4.1-mini", messages=messages)
        assert reply.choices[0].message.content == ANSWER
    provider.shutdown()
    return upstream


CHAT_TEXTS = {MEMORY, QUESTION, ANSWER, SECRET}

UPSTREAM_SETTINGS: dict[str, dict[str, str]] = {
    # Upstream's own default: content capture off (nothing of the messages on its span).
    "default": {},
    # The legacy conventions with content on: upstream's content goes to log events, not spans.
    "legacy-true": {E.ENV_CAPTURE_MESSAGE_CONTENT: "true"},
    # The latest GenAI conventions with the upload hook and no content capture: the messages go
    # to the content store, the span carries gen_ai.*_ref only (what docs/ tells users to set).
    "upload": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK": "upload",
        E.ENV_CAPTURE_MESSAGE_CONTENT: "NO_CONTENT",
    },
}


@pytest.mark.parametrize("setting", list(UPSTREAM_SETTINGS))
def test_openai_v2_spans_beside_ours_send_no_text_with_the_documented_settings(
    setting: str, upstream_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = dict(UPSTREAM_SETTINGS[setting])
    if setting == "upload":
        pytest.importorskip("opentelemetry.util.genai._upload.completion_hook")
        (tmp_path / "uploads").mkdir()  # fsspec's local store: the hook checks it can write
        env[E.ENV_GENAI_UPLOAD_BASE_PATH] = (tmp_path / "uploads").as_uri()
    for name, value in env.items():
        upstream_env.setenv(name, value)
    capture = CaptureConfig(mode="REFERENCE", content_url=f"memory://chat-{uuid.uuid4().hex}")
    with otlp_receiver() as wire:
        _chat_over_otlp(wire, capture)
        scopes = {
            ss.scope.name
            for body in wire.bodies
            for rs in _parse(body).resource_spans
            for ss in rs.scope_spans
        }
        assert any("openai_v2" in s or "util.genai" in s for s in scopes), scopes
        assert _leaks(wire, CHAT_TEXTS) == []
        if setting == "upload":
            refs = json.dumps([MessageToJson(_parse(b)) for b in wire.bodies])
            assert "gen_ai.input.messages_ref" in refs


def test_openai_v2_with_its_content_capture_on_leaks_the_messages_into_its_span(
    upstream_env: pytest.MonkeyPatch,
) -> None:
    # What docs/ warns about: upstream's own setting puts the messages into its span whatever
    # ours says, so under REFERENCE it must stay NO_CONTENT (or unset), with the upload hook.
    upstream_env.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    upstream_env.setenv(E.ENV_CAPTURE_MESSAGE_CONTENT, "SPAN_ONLY")
    capture = CaptureConfig(mode="REFERENCE", content_url=f"memory://chat-{uuid.uuid4().hex}")
    with otlp_receiver() as wire:
        _chat_over_otlp(wire, capture)
        assert _leaks(wire, CHAT_TEXTS)

"""Reliability promises inside the user's app (docs/reliability.md): privacy and a sick Collector.

The built-in redaction patterns; an app exporting through ``configure()``'s OTLP exporter to a
Collector that is down (connection refused), silent (a loopback server that accepts and never
answers) or rejecting (HTTP 503) keeps its results, raises nothing, stays fast enough and keeps
its memory bounded, and the spans the full queue drops are counted.
"""

from __future__ import annotations

import gc
import json
import logging
import random
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.export import configure
from memtrace_otel.export._configure import resolve_exporter
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.instrumentation import digest as sha_digest
from memtrace_otel.instrumentation._capture import redact_pii
from memtrace_otel.semconv import attributes as A
from memtrace_otel.testing import spans_as_dicts
from tests._openai_server import closed_port
from tests._otlp_receiver import SilentServer

# --- 1. built-in redaction ---------------------------------------------------------------------

PII = "Ana <ana.silva+work@example.co.uk> phoned +351 912 345 678 and (555) 123-4567, paid with 4111-1111-1111-1111."


def test_builtin_patterns_replace_email_phone_and_luhn_valid_cards() -> None:
    assert redact_pii(PII) == ("Ana <<email>> phoned <phone> and <phone>, paid with <card>.")
    # Luhn-invalid digit runs, short numbers, dates and ordinary prose are kept.
    kept = "order 1234 5678 9012 3456, room 42, 3 cats, met on 2024-05-01 at 10:30, 555-1234"
    assert redact_pii(kept) == kept
    assert redact_pii("card 5500 0000 0000 0004 and 378282246310005") == "card <card> and <card>"


def _every_pattern(text: str) -> str:
    """:func:`redact_pii` without its gates: every pattern's plain ``.sub`` in turn."""
    from memtrace_otel.instrumentation import _capture as C

    text = C.redact_secrets(text)
    text = C._EMAIL.sub("<email>", text)
    text = C._CARD.sub(C._card, text)
    return C._PHONE.sub(C._phone, text)


def _numbers_text(rng: random.Random) -> str:
    """A text glued from what the identifier patterns are made of: digit runs of every length
    (Luhn-valid card numbers among them), the separators they allow, "+", "(", ")", "@",
    e-mail addresses, letters, placeholders, non-ASCII digits and letters."""
    luhn_valid = ["4111111111111111", "5500000000000004", "378282246310005", "4111 1111 1111 1111"]
    pieces = ["+", "(", ")", "-", ".", " ", "  ", "@", "_", "x", "Ana", "<card>", "<phone>",
              "ana@example.com", "a.b+c@d-e.org", "٣", "é", "2024-05-01", "10:30", "+351",
              "(555)", "+44 20 7946 0958", "(212) 555-0199", *luhn_valid]  # fmt: skip

    def digits(n: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(n))

    parts = []
    for _ in range(rng.randint(1, 16)):
        kind = rng.random()
        if kind < 0.45:
            parts.append(digits(rng.choice((1, 2, 3, 4, 7, 9, 12, 13, 15, 16, 19, 20))))
        else:
            parts.append(rng.choice(pieces))
    return "".join(parts)


def test_redact_pii_tries_its_patterns_where_they_can_start_and_equals_every_pattern() -> None:
    # redact_pii tries the e-mail pattern only when there is an "@", and on ASCII text the card
    # and phone patterns only at runs of digits, "+" and "(": on texts glued at random from
    # digits, separators and identifiers, that is every pattern's plain .sub in turn.
    rng = random.Random(34)
    kinds = dict.fromkeys(["<email>", "<card>", "<phone>"], 0)
    for _ in range(6000):
        text = _numbers_text(rng)
        expected = _every_pattern(text)
        assert redact_pii(text) == expected, repr(text)
        for placeholder in kinds:
            kinds[placeholder] += expected.count(placeholder) > text.count(placeholder)
    assert min(kinds.values()) >= 100, kinds  # every kind is redacted, many times


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=["Nd"]), max_size=40),
    st.sampled_from(["ana@example.com", "+44 20 7946 0958", "4111111111111111", "(212) 555-0199"]),
    st.text(alphabet=st.characters(blacklist_categories=["Nd"]), max_size=40),
)
def test_a_planted_identifier_never_survives_redaction(
    before: str, secret: str, after: str
) -> None:
    # A space keeps the planted identifier a separate token (an e-mail glued to word characters
    # is a different address, which is redacted as a whole).
    text = redact_pii(f"{before} {secret} {after}")
    assert secret not in text
    assert "<email>" in text or "<phone>" in text or "<card>" in text


def _traced(config: CaptureConfig) -> tuple[MemTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return (
        MemTracer(
            tracer_provider=provider, system="rag", capture=config, registry=WriterRegistry()
        ),
        exporter,
    )


def test_builtin_redaction_is_applied_before_recording_and_digests_stay_raw() -> None:
    mt, exporter = _traced(CaptureConfig(mode="SPAN_AND_EVENT", redact="builtin"))
    structured = {"note": "card 4111 1111 1111 1111", "mail": "bo@example.org"}
    with mt.extract("rag.chunk", inputs=[mt.variable("msg:1", PII, category="message")]) as op:
        op.output(mt.variable("fact:1", structured, category="memory"))
    [span] = spans_as_dicts(exporter.get_finished_spans())
    dumped = json.dumps(span)
    for secret in ("ana.silva", "912 345 678", "123-4567", "4111", "bo@example.org"):
        assert secret not in dumped
    inp, out = (e["attributes"] for e in span["events"])
    assert inp[A.MEMTRACE_VARIABLE_VALUE] == redact_pii(PII)
    assert json.loads(out[A.MEMTRACE_VARIABLE_VALUE]) == {"mail": "<email>", "note": "card <card>"}
    # Attribution compares digests across spans, so they are of the raw value (the documented
    # trade-off: a guessable value can be confirmed by hashing candidates).
    assert inp[A.MEMTRACE_VARIABLE_DIGEST] == sha_digest(PII)
    assert out[A.MEMTRACE_VARIABLE_DIGEST] == sha_digest(
        json.dumps(structured, sort_keys=True, separators=(",", ":"))
    )


def test_builtin_redaction_is_the_only_string_shorthand() -> None:
    assert CaptureConfig(redact="builtin").redact is redact_pii
    with pytest.raises(ValueError, match="builtin"):
        CaptureConfig(redact="pii")  # type: ignore[arg-type]


def test_capture_off_sends_no_value_even_with_a_hook() -> None:
    seen: list[str] = []

    def hook(text: str) -> str:
        seen.append(text)
        return text

    mt, exporter = _traced(CaptureConfig(mode="NO_CONTENT", redact=hook))
    with mt.extract("rag.chunk", inputs=[mt.variable("msg:1", PII)]) as op:
        op.output(mt.variable("fact:1", "Ana lives in Porto"))
    dumped = json.dumps(spans_as_dicts(exporter.get_finished_spans()))
    assert "Ana" not in dumped and "Porto" not in dumped
    assert seen == []  # the value never even reaches the hook


# --- 2. a sick Collector -----------------------------------------------------------------------


class RejectingServer:
    """An HTTP server on 127.0.0.1 answering every export with 503 (an overloaded Collector)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RejectingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def app_call(mt: MemTracer, i: int) -> list[str]:
    """The user's function: a traced retrieval whose result must come back untouched."""
    query = mt.variable(f"q:{i}", f"where does user {i} live?", category="query")
    with mt.retrieve("rag.search", inputs=[query]) as op:
        result = [f"doc-{i}-{j}" for j in range(3)]
        op.output(mt.variable(f"cand:{i}", result, category="candidates"))
    return result


def expected(i: int) -> list[str]:
    return [f"doc-{i}-{j}" for j in range(3)]


@pytest.fixture
def collector_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    # A short export timeout and a small queue keep the test fast and make the queue overflow.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.5")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "128")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    yield monkeypatch


def _per_op_seconds(mt: MemTracer, n: int) -> float:
    worst = 0.0
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        assert app_call(mt, i) == expected(i)
        worst = max(worst, time.perf_counter() - t)
    # A sanity bound, not a benchmark: an op stuck behind the exporter's retries takes seconds.
    assert worst < 5.0, f"one op took {worst:.3f}s"
    return (time.perf_counter() - start) / n


OPS = 800


@pytest.mark.parametrize("state", ["refused", "silent", "rejecting"])
def test_a_sick_collector_never_hurts_the_app(
    state: str,
    collector_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The exporter logs one error per failed batch; pytest would keep every record in memory.
    caplog.set_level(logging.CRITICAL, logger="opentelemetry")
    baseline = MemTracer(
        tracer_provider=TracerProvider(), system="rag", capture=CaptureConfig(mode="SPAN_ONLY")
    )
    base = _per_op_seconds(baseline, OPS)

    servers: dict[str, Any] = {"silent": SilentServer, "rejecting": RejectingServer}
    server = servers[state]() if state in servers else None
    port = server.port if server is not None else closed_port()
    collector_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    if server is not None:
        server.__enter__()
    try:
        provider = configure(service_name="app", set_global=False)
        mt = MemTracer(
            tracer_provider=provider,
            system="rag",
            capture=CaptureConfig(mode="SPAN_ONLY"),
            registry=WriterRegistry(),
        )
        per_op = _per_op_seconds(mt, OPS)
        # Bounded memory: a second round of ops must not grow what is retained, since the
        # queue is already full (a leak would keep every span of the round).
        # A leak grows every round; a backlog the export thread has not drained yet (a busy
        # machine) shows in one round only: the smaller of two rounds' growth is the leak.
        tracemalloc.start()
        _per_op_seconds(mt, OPS)
        gc.collect()  # finished spans sit in reference cycles until the collector runs
        growths = []
        for _ in range(2):
            first = tracemalloc.get_traced_memory()[0]
            _per_op_seconds(mt, OPS)
            gc.collect()
            growths.append(tracemalloc.get_traced_memory()[0] - first)
        grown = min(growths)
        tracemalloc.stop()
        t = time.perf_counter()
        provider.shutdown()  # must come back, whatever the Collector does
        shutdown = time.perf_counter() - t
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    with capsys.disabled():
        print(
            f"\n[collector {state}] {OPS} ops: {per_op * 1e6:.0f} us/op vs {base * 1e6:.0f} us/op "
            f"untraced (+{(per_op - base) * 1e6:.0f} us); memory retained by {OPS} more ops "
            f"{grown / 1e6:.3f} MB; shutdown {shutdown:.2f}s"
        )
    # Keeping the round's 800 spans would retain several MB (each span is a few kB).
    assert grown < 500_000
    assert shutdown < 30


def _dropped(reader: InMemoryMetricReader) -> int:
    data = reader.get_metrics_data()
    total = 0
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != "otel.sdk.processor.span.processed":
                    continue
                for point in metric.data.data_points:
                    if (
                        isinstance(point, NumberDataPoint)
                        and (point.attributes or {}).get("error.type") == "queue_full"
                    ):
                        total += int(point.value)
    return total


def test_queue_overflow_drops_spans_and_counts_them(
    collector_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A hung Collector: the queue fills, later spans are dropped, counted in the SDK's metric."""
    # The SDK's own metrics (otel.sdk.processor.span.*) are opt-in.
    collector_env.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")
    reader = InMemoryMetricReader()
    with SilentServer() as server:
        collector_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.port}")
        provider = TracerProvider()
        # The exporter configure() picks, with a meter provider we can read.
        processor = BatchSpanProcessor(
            resolve_exporter(), meter_provider=MeterProvider(metric_readers=[reader])
        )
        provider.add_span_processor(processor)
        mt = MemTracer(tracer_provider=provider, system="rag", registry=WriterRegistry())
        with caplog.at_level(logging.WARNING, logger="opentelemetry.sdk._shared_internal"):
            for i in range(1000):
                assert app_call(mt, i) == expected(i)
        dropped = _dropped(reader)
        provider.shutdown()
    # 1000 spans, a queue of 128 and a batch of at most 64 in flight to the silent server; each
    # export gives up after its timeout, so on a slow machine a few more batches leave the queue.
    assert 500 <= dropped <= 1000 - 128
    assert any("Queue full" in r.getMessage() for r in caplog.records)

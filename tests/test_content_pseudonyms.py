"""Pseudonymised identifiers (issue 31): under REFERENCE with a digest key, e-mail addresses and
phone numbers in store ids, case ids and refs (``meta.source_refs`` included) leave as keyed
pseudonyms, the same everywhere so the graph still joins; the originals are only in the content
store, listed in the store's manifest, so erasing the store erases them.

Real parts: the OTel SDK, the OTLP JSON Lines exporter, fsspec's memory filesystem, the graph
builder, feedback, ``memtrace content erase`` and ``memtrace content pseudonym``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.cli import main
from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.graph import build_graph
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry, send_feedback
from memtrace_otel.instrumentation._content import looks_personal
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import erase_store, open_source, store_pseudonym

KEY = "k" * 32
EMAIL = "ana.sousa@example.com"
PHONE = "+351912345678"


def _run(tmp_path: Path, capture: CaptureConfig) -> Path:
    """A message written, a fact extracted from it (meta.source_refs), a search reading the fact,
    an answer with a case id, and feedback on it: the store id and case id are the user's
    e-mail, the message's id holds it and her phone number."""
    traces = tmp_path / f"traces-{uuid.uuid4().hex}.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(traces)))
    mt = MemTracer(
        tracer_provider=provider,
        system="test",
        store_id=EMAIL,
        capture=capture,
        registry=WriterRegistry(),
    )
    message_ref = f"msg:{EMAIL}:{PHONE}:1"
    with mt.create("test.message", inputs=[]) as op:
        message = op.output(mt.variable(message_ref, "I moved to Porto", category="message"))
    with mt.extract("test.extract", inputs=[message]) as op:
        fact = op.output(
            mt.variable(
                "fact:1",
                "Ana lives in Porto",
                category="memory",
                meta={"source_refs": [message.ref]},
            )
        )
    with mt.retrieve("test.search", inputs=[], case_id=f"{EMAIL}-q1") as op:
        op.add_inputs([fact])
        op.set_attribute(A.GEN_AI_MEMORY_STORE_ID, EMAIL)  # as mem0's instrumentor does
    with mt.generate("test.answer", inputs=[fact], case_id=f"{EMAIL}-q1") as op:
        op.output(mt.variable("pred:1", "Porto", category="prediction"))
    send_feedback(case_id=f"{EMAIL}-q1", correct=True, tracer_provider=provider, capture=capture)
    provider.shutdown()
    writer = capture.content_writer
    if writer is not None:
        assert writer.flush(10_000)
    return traces


def test_an_identifier_looks_personal_by_its_email_or_phone_not_its_uuid_or_counter() -> None:
    assert looks_personal(EMAIL) and looks_personal(f"msg:{PHONE}:1@1")
    assert not looks_personal("mem0:550e8400-e29b-41d4-a716-446655440000@3")
    assert not looks_personal("fact:1@2") and not looks_personal("user-42")


def test_personal_identifiers_leave_as_pseudonyms_and_the_graph_still_joins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"memory://pseudonyms-{uuid.uuid4().hex}"
    # Without pseudonyms the identifiers leave as they are (the scan below can fail).
    plain = _run(
        tmp_path,
        CaptureConfig(mode="REFERENCE", content_url=url, digest_key=KEY, pseudonymize_ids=False),
    )
    assert EMAIL in plain.read_text() and PHONE in plain.read_text()
    capture = CaptureConfig(mode="REFERENCE", content_url=url, digest_key=KEY)
    assert capture.pseudonymize_ids  # the default under REFERENCE with a key
    traces = _run(tmp_path, capture)
    raw = traces.read_text()
    assert EMAIL not in raw and PHONE not in raw and "ana.sousa" not in raw
    store = capture.pseudonym(EMAIL)
    monkeypatch.setenv(E.ENV_MEMTRACE_DIGEST_KEY, KEY)
    assert store_pseudonym(EMAIL) == store and store.startswith("pii-")
    records = list(open_source(str(traces)).records())
    ops = [r for r in records if A.MEMTRACE_OP_NAME in r.attributes]
    assert {r.attributes.get(A.GEN_AI_MEMORY_STORE_ID) for r in ops} == {store}
    feedback = [r for r in records if A.MEMTRACE_OP_NAME not in r.attributes]
    cases = {r.attributes.get(A.MEMTRACE_CASE_ID) for r in records} - {None}
    assert cases == {store_pseudonym(f"{EMAIL}-q1")} and feedback
    # The graph joins as with raw ids: message -> extract -> fact -> search and answer, and the
    # fact's source_refs name the message's (pseudonymised) ref.
    G = build_graph(records)
    message_ref = store_pseudonym(f"msg:{EMAIL}:{PHONE}:1@1")
    assert G.nodes[message_ref]["writer"] and not G.nodes[message_ref].get("external")
    readers = {
        G.nodes[op]["name"] for _, op, k in G.out_edges("fact:1@1", keys=True) if k == "read"
    }
    assert readers == {"test.search", "test.answer"}
    (fact_event,) = [
        e for r in ops for e in r.events if e.attributes.get(A.MEMTRACE_VARIABLE_REF) == "fact:1@1"
    ]
    meta = json.loads(str(fact_event.attributes[A.MEMTRACE_VARIABLE_META]))
    assert meta["source_refs"] == [message_ref]
    # The originals are only in the content store, listed in the store's manifest.
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    originals = {fs.cat_file(p) for p in fs.find(f"{root}/pseudonyms")}
    assert originals == {EMAIL.encode(), PHONE.encode()}


def test_erase_by_the_real_id_removes_the_mapping_and_leaves_a_pseudonymous_tombstone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"memory://pseudonyms-{uuid.uuid4().hex}"
    capture = CaptureConfig(mode="REFERENCE", content_url=url, digest_key=KEY)
    _run(tmp_path, capture)
    monkeypatch.setenv(E.ENV_MEMTRACE_DIGEST_KEY, KEY)
    result = erase_store(url, EMAIL)
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    assert result.store == capture.pseudonym(EMAIL) and result.deleted >= 4
    assert fs.find(f"{root}/pseudonyms") == []  # the mapping went with the store
    (tomb,) = fs.find(f"{root}/tombstones")
    assert EMAIL not in fs.cat_file(tomb).decode()
    assert main(["content", "pseudonym", EMAIL]) == 0
    assert capsys.readouterr().out.strip() == capture.pseudonym(EMAIL)


def test_identifiers_stay_as_they_are_without_a_key_or_outside_reference() -> None:
    assert CaptureConfig(mode="REFERENCE", content_url="memory://x-ids").pseudonym(EMAIL) == EMAIL
    assert CaptureConfig(mode="SPAN_AND_EVENT", digest_key=KEY).pseudonym(EMAIL) == EMAIL
    on = CaptureConfig(mode="SPAN_AND_EVENT", digest_key=KEY, pseudonymize_ids=True)
    assert on.pseudonym(EMAIL) != EMAIL  # opt-in outside REFERENCE: pseudonyms, no mapping


def test_mem0_user_id_leaves_as_a_pseudonym_and_search_still_reads_what_add_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real mem0 (embedded Qdrant, the scripted OpenAI-compatible server): its user_id is the
    # store id of every op, and the search's hits are the records the add wrote.
    monkeypatch.setenv("MEM0_TELEMETRY", "false")  # mem0 reads it at import: no PostHog events
    pytest.importorskip("mem0")
    import logging

    from mem0 import Memory

    from memtrace_otel.instrumentors.mem0 import Mem0Instrumentor
    from tests._instrumentor_helpers import LLMScript, mem0_config
    from tests._openai_server import ScriptedOpenAI

    logging.getLogger("mem0").setLevel(logging.ERROR)
    traces = tmp_path / "mem0.jsonl"
    capture = CaptureConfig(
        mode="REFERENCE", content_url=f"memory://mem0-{uuid.uuid4().hex}", digest_key=KEY
    )
    instrumentor = Mem0Instrumentor()
    with ScriptedOpenAI(LLMScript()) as server:
        memory = Memory.from_config(mem0_config(server.base_url, tmp_path / "mem0"))
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(traces)))
        instrumentor.instrument(
            tracer_provider=provider, capture=capture, registry=WriterRegistry()
        )
        try:
            memory.add("I moved to Porto last May", user_id=EMAIL, infer=False)
            memory.search("Where do I live?", filters={"user_id": EMAIL}, top_k=5)
        finally:
            instrumentor.uninstrument()
            provider.shutdown()
    raw = traces.read_text()
    assert EMAIL not in raw and "ana.sousa" not in raw
    records = list(open_source(str(traces)).records())
    stores = {r.attributes.get(A.GEN_AI_MEMORY_STORE_ID) for r in records} - {None}
    assert stores == {capture.pseudonym(EMAIL)}
    written = {ref for r in records for ref in r.attributes.get(A.MEMTRACE_OP_OUTPUTS, ())}
    read = {
        ref
        for r in records
        if r.attributes.get(A.MEMTRACE_OP_KIND) == "retrieve"
        for ref in r.attributes.get(A.MEMTRACE_OP_INPUTS, ())
    }
    assert written & read


def test_a_ref_pseudonymised_by_its_cached_id_reads_as_the_whole_ref_would() -> None:
    """Refs are pseudonymised as ``<pseudonym of the id>@<version>`` (the id cached, as every
    write makes a new version): the same text as the whole ref's, whatever the versions, and
    each mapping still written once, listed by the store it came with."""
    import fsspec as fs_module

    from memtrace_otel.instrumentation._content import ContentWriter, Pseudonymizer

    url = f"memory://pseudonym-cache-{uuid.uuid4().hex}"
    writer = ContentWriter(url)
    cached = Pseudonymizer(KEY.encode(), writer)
    reference = Pseudonymizer(KEY.encode())
    ids = [EMAIL, PHONE, "912345678", "fact:1", f"msg:{EMAIL}:{PHONE}", str(uuid.UUID(int=7))]
    versions = ["1", "2", "12345678", "123456789", "3x", "", "²"]
    for version in versions:  # 9 digits may be a phone number: the whole ref decides
        for ident in ids:
            for ref in (f"{ident}@{version}", f"{ident}@{version}@{version}", ident):
                assert cached(ref, EMAIL) == reference.plain(ref), ref
    assert cached(f"msg:{EMAIL}:3@7", EMAIL) == f"msg:{reference.token(EMAIL)}:3@7"
    assert writer.flush(10_000)
    fs = fs_module.filesystem("memory")
    root = url.removeprefix("memory://")
    mappings = fs.find(f"{root}/pseudonyms")
    # The e-mail, the phone and the two 9-digit texts (taken for phone numbers): one object each.
    assert sorted(fs.cat(m).decode() for m in mappings) == sorted(
        [EMAIL, PHONE, "912345678", "123456789"]
    )


@pytest.mark.parametrize("count", [1, 2, 3])
def test_every_input_link_and_output_of_an_op_leaves_pseudonymised(count: int) -> None:
    # One ref and several take different paths through the op's start and end: each leaves
    # as its pseudonym, in order, in the inputs, the links and the outputs alike.
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    capture = CaptureConfig(
        mode="REFERENCE", content_url=f"memory://ops-{uuid.uuid4().hex}", digest_key=KEY
    )
    mt = MemTracer(
        tracer_provider=provider, system="test", store_id=EMAIL, capture=capture,
        registry=WriterRegistry(),
    )  # fmt: skip
    sources = []
    for i in range(count):
        with mt.create("test.message") as op:
            ident = f"msg:{EMAIL}:{i}" if i % 2 == 0 else f"msg:{PHONE}:{i}"
            sources.append(op.output(mt.variable(ident, f"message {i}", category="message")))
    with mt.extract("test.extract", inputs=sources) as op:
        outs = [
            op.output(mt.variable(f"fact:{EMAIL}:{i}", f"fact {i}", category="memory"))
            for i in range(count)
        ]
    span = exporter.get_finished_spans()[-1]
    inputs = [capture.pseudonym(s.ref, EMAIL) for s in sources]
    assert list(span.attributes[A.MEMTRACE_OP_INPUTS]) == inputs
    assert list(span.attributes[A.MEMTRACE_OP_OUTPUTS]) == [
        capture.pseudonym(o.ref, EMAIL) for o in outs
    ]
    assert [link.attributes[A.MEMTRACE_VARIABLE_REF] for link in span.links] == inputs
    assert EMAIL not in str(span.attributes) and PHONE not in str(span.attributes)
    provider.shutdown()
    assert capture.content_writer is not None and capture.content_writer.flush(10_000)

"""Workloads for the report tests: hostile memory content, and one case with a 2,000-node graph.

Both go through the real manual API and SDK into an OTLP JSON Lines file, like
``tests/_pipeline.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, Variable, WriterRegistry

# Would run script if any of it reached the page as HTML: every path sets window.__pwned.
INJECTION = (
    '</script><script>window.__pwned = "script"; alert(1)</script>'
    "<img src=x onerror=\"window.__pwned = 'img'; alert(2)\">"
    "\u2028<!-- & -->"
)
# Would break the page if a value were ever read as template text: the old page template's
# markers (substituted one after another, so a marker inside data was replaced too) and Jinja2's
# own syntax.
MARKERS = (
    "%%SCRIPTS%% %%DATA%% %%STYLE%% %%TITLE%% %%CSP%% "
    "{{ 7 * 7 }} {% raw %}{# comment #}{%- if true -%}"
)


def _tracer(store: str, provider: TracerProvider) -> MemTracer:
    return MemTracer(
        tracer_provider=provider,
        system="test",
        store_id=store,
        capture=CaptureConfig(mode="SPAN_AND_EVENT"),
        registry=WriterRegistry(),
    )


def _ask(
    mt: MemTracer,
    case_id: str,
    memories: list[Variable],
    *,
    keep: int,
    answer: str,
    question: str = "Where does Ana live?",
    tag: str = "",
) -> None:
    """The question's pipeline: retrieve (keeps ``keep`` memories from the end), filter,
    assemble, generate, judge (always wrong)."""
    query = mt.variable(f"query:{case_id}", question, category="query")
    gold = mt.variable(f"gold:{case_id}", ["Porto"], category="gold")
    with mt.retrieve("test.search" + tag, inputs=[query, *memories], case_id=case_id) as op:
        hits = memories[-keep:]
        cands = op.output(
            mt.variable(
                f"cands:{case_id}",
                [{"ref": m.ref, "text": m.value} for m in hits],
                category="candidates",
            )
        )
    with mt.filter("test.rerank" + tag, inputs=[cands], case_id=case_id) as op:
        kept = op.output(mt.variable(f"kept:{case_id}", cands.value, category="candidates"))
    with mt.assemble("test.build_context" + tag, inputs=[kept], case_id=case_id) as op:
        ctx = op.output(
            mt.variable(
                f"ctx:{case_id}", "\n".join(c["text"] for c in kept.value), category="context"
            )
        )
    with mt.generate("test.answer" + tag, inputs=[ctx, query], case_id=case_id) as op:
        pred = op.output(mt.variable(f"pred:{case_id}", answer, category="prediction"))
    with mt.judge("test.judge" + tag, inputs=[pred, gold], case_id=case_id) as op:
        op.set_verdict(False)
        op.output(mt.variable(f"score:{case_id}", 0, category="score"))


def _remember(mt: MemTracer, msg: Variable, text: str, tag: str = "") -> Variable:
    with mt.extract("test.extract_facts" + tag, inputs=[msg]) as op:
        fact = op.output(
            mt.variable(f"fact:{msg.id}", text, category="memory", meta={"source_refs": [msg.ref]})
        )
    with mt.create("test.add" + tag, inputs=[fact]) as op:
        return op.output(
            mt.variable(f"mem:{msg.id}", text, category="memory", meta={"source_refs": [msg.ref]})
        )


def write_hostile_workload(
    folder: Path, payload: str = INJECTION, *, in_op_names: bool = False
) -> tuple[Path, Path]:
    """One failed case whose memories, answer and case id (and, with ``in_op_names``, every op
    name) hold ``payload``, by default script-injection payloads."""
    traces, cases = folder / "traces.jsonl", folder / "cases.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(traces)))
    mt = _tracer("user-hostile", provider)
    case_id = "case-" + payload
    tag = " " + payload if in_op_names else ""
    evidence = mt.variable(
        "msg:h:1", "My sister Ana moved to Porto. " + payload, category="message"
    )
    other = mt.variable("msg:h:2", "I like hiking. " + payload, category="message")
    stored = [
        _remember(mt, evidence, "Ana lives in Porto " + payload, tag),
        _remember(mt, other, "User likes hiking " + payload, tag),
    ]
    # The retrieval keeps only the hiking memory.
    _ask(mt, case_id, stored, keep=1, answer="I don't know " + payload, tag=tag)
    provider.shutdown()
    entry = {
        "case_id": case_id,
        "question": "Where does Ana live?",
        "gold_answers": ["Porto"],
        "evidence_refs": [evidence.ref],
    }
    cases.write_text(json.dumps(entry) + "\n")
    return traces, cases


def write_big_workload(folder: Path, *, messages: int = 370) -> tuple[Path, Path]:
    """One case whose answer depends on every memory of a large store (about 2,000 nodes).

    Each message is extracted into a fact and stored as a memory (5 nodes); every fifth memory
    is updated once (2 more). The question searches all memories and misses the evidence
    (message 0): a RetrievalError.
    """
    traces, cases = folder / "traces.jsonl", folder / "cases.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(traces)))
    mt = _tracer("user-big", provider)
    memories: list[Variable] = []
    evidence_ref = ""
    for number in range(messages):
        if number == 0:
            text, fact = "My sister Ana moved to Porto last May.", "Ana lives in Porto"
        else:
            text = f"Note {number}: I went hiking on trail {number} and liked it."
            fact = f"User hiked trail {number}"
        msg = mt.variable(f"msg:big:{number}", text, category="message")
        if number == 0:
            evidence_ref = msg.ref
        memory = _remember(mt, msg, fact)
        if number % 5 == 4:
            with mt.update("test.merge", inputs=[memory]) as op:
                memory = op.output(memory.next(fact + " (again)"))
        memories.append(memory)
    _ask(mt, "case-big", memories, keep=3, answer="I don't know")
    provider.shutdown()
    entry = {
        "case_id": "case-big",
        "question": "Where does Ana live?",
        "gold_answers": ["Porto"],
        "evidence_refs": [evidence_ref],
    }
    cases.write_text(json.dumps(entry) + "\n")
    return traces, cases

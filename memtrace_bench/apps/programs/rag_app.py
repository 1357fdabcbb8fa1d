"""A notes assistant with its own small memory, traced with memtrace-otel's manual API.

The app keeps notes in process (text, vector, version, the writer's traceparent), extracts them
from what the user says with an LLM, merges a note into a near-duplicate (an LLM rewrite),
expires stale notes in a clean-up job, and answers from the three nearest notes. Each step is
an op of the manual API (README, "manual API"); the app traces its own LLM calls, so it runs
with the OpenAI instrumentor disabled (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=memtrace_openai``)
under ``opentelemetry-instrument``.

    APP_PLAN=plan.json APP_LOG=log.json APP_OPENAI_BASE_URL=... opentelemetry-instrument python rag_app.py
"""

import itertools
import json
import math
import os
from typing import Any

import openai
from opentelemetry import trace

from memtrace_otel import MemTracer
from memtrace_otel.instrumentation import Variable, last_answer
from memtrace_otel.instrumentors import message_ref

TOP_K = 3
THRESHOLD = 0.1
DUPLICATE = 0.8

client = openai.OpenAI(base_url=os.environ["APP_OPENAI_BASE_URL"], api_key="sk-test", max_retries=0)
tracer = trace.get_tracer("notes-assistant")
notes: dict[str, dict[str, Any]] = {}  # note id -> {"var", "vector", "user"}
counter = itertools.count(1)


def ask_model(prompt: str, system: str | None = None) -> str:
    messages: list[Any] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    reply = client.chat.completions.create(model="gpt-4.1-mini", messages=messages)
    return reply.choices[0].message.content or ""


def embed(text: str) -> list[float]:
    return client.embeddings.create(model="text-embedding-3-small", input=[text]).data[0].embedding


def cosine(a: list[float], b: list[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(x * x for x in b)) or 1.0
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm


def remember(mt: MemTracer, user: str, text: str) -> None:
    message = Variable.from_ref(message_ref(text, store_id=user), text, category="message")
    with mt.extract("notes.extract", inputs=[message]) as op:
        reply = ask_model(
            'Extract the facts worth remembering from this message. Reply in JSON: {"facts": '
            f'["..."]}}.\n\nMessage: {text}'
        )
        facts = [
            op.output(mt.variable(f"fact:{user}:{next(counter)}", fact, category="memory"))
            for fact in json.loads(reply).get("facts", [])
        ]
    for fact in facts:
        vector = embed(fact.value)
        mine = [n for n in notes.values() if n["user"] == user]
        near = max(mine, key=lambda n: cosine(vector, n["vector"]), default=None)
        if near is not None and cosine(vector, near["vector"]) >= DUPLICATE:
            old = near["var"]
            with mt.update("notes.merge", inputs=[fact, old]) as op:
                merged = ask_model(
                    "Combine these two notes into one that is true now; the second is newer.\n"
                    f"1. {old.value}\n2. {fact.value}"
                )
                near["var"] = op.output(old.next(merged))
                near["vector"] = embed(merged)
        else:
            with mt.create("notes.create", inputs=[fact]) as op:
                note_id = f"note:{user}:{next(counter)}"
                var = op.output(mt.variable(note_id, fact.value, category="memory"))
                notes[note_id] = {"var": var, "vector": vector, "user": user}


def cleanup(mt: MemTracer, user: str) -> None:
    """The clean-up job: expire notes the model judges stale."""
    with tracer.start_as_current_span("notes-cleanup"):
        mine = {k: n for k, n in notes.items() if n["user"] == user}
        listing = "\n".join(f"[{k}] {n['var'].value}" for k, n in mine.items())
        review = json.loads(
            ask_model(
                "You keep a user's memory tidy. Find notes that are stale or duplicated: pairs "
                "that describe the same thing about the same person, and notes that are no "
                'longer true. Reply in JSON: {"merge": [[older_id, newer_id]], "stale": [id]}.'
                f"\n\nNotes:\n{listing}"
            )
        )
        for note_id in review.get("stale", []):
            note = notes.pop(note_id, None)
            if note is not None:
                with mt.delete("notes.expire", inputs=[note["var"]]) as op:
                    op.output(note["var"].tombstone())


def edit(mt: MemTracer, user: str, note_id: str, text: str) -> None:
    """PUT /notes/<id>: the user corrects a note; the text is theirs."""
    with tracer.start_as_current_span("PUT /notes/{note_id}", kind=trace.SpanKind.SERVER):
        given = mt.variable(f"edit:{note_id}", text, category="message")
        note = notes[note_id]
        with mt.update("notes.edit", inputs=[note["var"], given]) as op:
            note["var"] = op.output(note["var"].next(text))
            note["vector"] = embed(text)


def chat(mt: MemTracer, user: str, question: str, case_id: str) -> dict[str, Any]:
    with tracer.start_as_current_span("POST /chat", kind=trace.SpanKind.SERVER):
        mine = [n for n in notes.values() if n["user"] == user]
        query = mt.variable(f"query:{case_id}", question, category="query")
        with mt.retrieve("notes.search", inputs=[query], case_id=case_id) as op:
            vector = embed(question)
            scored = sorted(((cosine(vector, n["vector"]), n) for n in mine), key=lambda s: -s[0])
            hits = [n["var"] for score, n in scored[:TOP_K] if score >= THRESHOLD]
            # The hits, each linked to the op that wrote it (README: "A read that returns many
            # records"), and the candidates they make, best first.
            op.add_records([(h.ref, h.value, h.traceparent) for h in hits])
            found = op.output(
                mt.variable(
                    f"cands:{case_id}",
                    [{"ref": h.ref, "text": h.value} for h in hits],
                    category="candidates",
                )
            )
        with mt.generate("notes.answer", inputs=[found, query], case_id=case_id) as op:
            context = "\n".join(f"- {h.value}" for h in hits)
            answer = ask_model(
                question, system=f"Answer the question from these notes only.\nNotes:\n{context}"
            )
            op.output(mt.variable(f"answer:{case_id}", answer, category="prediction"))
        ref = last_answer()
        return {
            "answer": answer,
            "hits": [{"id": h.id, "memory": h.value} for h in hits],
            "traceparent": ref.traceparent if ref else None,
            "case_id": case_id,
        }


with open(os.environ["APP_PLAN"], encoding="utf-8") as source:
    plan = json.load(source)
log: dict[str, Any] = {"mem0ai": None, "users": {}}
for entry in plan["users"]:
    user = entry["user"]
    mt = MemTracer(system="notes-assistant", store_id=user)
    for session in entry["sessions"]:
        for message in session:
            remember(mt, user, message)
        cleanup(mt, user)
    for item in entry["edits"]:
        target = next((k for k, n in notes.items() if n["var"].value == item["find"]), None)
        if target is not None:
            edit(mt, user, target, item["text"])
    answers = []
    for i, item in enumerate(entry["questions"]):
        answers.append({"slot": item["slot"], **chat(mt, user, item["question"], f"{user}-q{i}")})
    store = [{"id": k, "memory": n["var"].value} for k, n in notes.items() if n["user"] == user]
    log["users"][user] = {"answers": answers, "store": store}
with open(os.environ["APP_LOG"], "w", encoding="utf-8") as handle:
    json.dump(log, handle)

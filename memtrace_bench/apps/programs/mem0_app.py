"""A personal assistant that remembers what its user says, written the way mem0's docs write one.

No tracing code here but what a user of memtrace-otel writes: the app runs under
``opentelemetry-instrument``, and the thumbs-down button needs the answer's traceparent
(``last_answer()``). The maintenance code opens its own spans, as a web framework (the edit
endpoint) or a job runner (the clean-up job) would.

Works with mem0ai 2.x (``Memory.add`` is ADD-only; the app's clean-up job merges and deletes)
and 1.x (the classic pipeline decides updates and deletions itself; ``search`` takes
``user_id`` and ``limit``).

    APP_PLAN=plan.json APP_LOG=log.json APP_MEM0_CONFIG='{...}' APP_OPENAI_BASE_URL=... \\
        opentelemetry-instrument python mem0_app.py
"""

import json
import os
from importlib.metadata import version
from typing import Any

import openai
from mem0 import Memory
from opentelemetry import trace

from memtrace_otel.instrumentation import last_answer

CLASSIC = int(version("mem0ai").split(".")[0]) < 2
TOP_K = 3

memory = Memory.from_config(json.loads(os.environ["APP_MEM0_CONFIG"]))
client = openai.OpenAI(base_url=os.environ["APP_OPENAI_BASE_URL"], api_key="sk-test", max_retries=0)
tracer = trace.get_tracer("memory-assistant")


def records(user_id: str) -> list[dict[str, Any]]:
    if CLASSIC:
        found = memory.get_all(user_id=user_id, limit=1000)
    else:
        found = memory.get_all(filters={"user_id": user_id}, top_k=1000)
    rows = found["results"] if isinstance(found, dict) else found
    return list(rows)


def chat(user_id: str, question: str) -> dict[str, Any]:
    """POST /chat: answer from the user's memories."""
    with tracer.start_as_current_span("POST /chat", kind=trace.SpanKind.SERVER):
        if CLASSIC:
            hits = memory.search(question, user_id=user_id, limit=TOP_K)
        else:
            hits = memory.search(question, filters={"user_id": user_id}, top_k=TOP_K)
        hits = hits["results"]
        memories = "\n".join(f"- {hit['memory']}" for hit in hits)
        reply = client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[
                {
                    "role": "system",
                    "content": "You are a helpful assistant. Answer the question based on the "
                    f"user's memories.\nUser memories:\n{memories}",
                },
                {"role": "user", "content": question},
            ],
        )
        answer = reply.choices[0].message.content
        ref = last_answer()
        return {
            "answer": answer,
            "hits": [{"id": h["id"], "memory": h["memory"]} for h in hits],
            "traceparent": ref.traceparent if ref else None,
            "case_id": ref.case_id if ref else None,
        }


def edit_memory(memory_id: str, text: str) -> None:
    """PUT /memories/<id>: the user corrects a memory in the app's settings page."""
    with tracer.start_as_current_span("PUT /memories/{memory_id}", kind=trace.SpanKind.SERVER):
        memory.update(memory_id, text)


def ask_model(prompt: str) -> str:
    reply = client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": prompt}]
    )
    return reply.choices[0].message.content or ""


def cleanup(user_id: str) -> None:
    """The nightly clean-up job: merge duplicated notes and drop stale ones (mem0 2.x only adds)."""
    with tracer.start_as_current_span("memory-cleanup") as span:
        span.set_attribute("app.user", user_id)
        listing = "\n".join(f"[{r['id']}] {r['memory']}" for r in records(user_id))
        review = ask_model(
            "You keep a user's memory tidy. Find notes that are stale or duplicated: pairs that "
            "describe the same thing about the same person (the older one first), and notes that "
            'are no longer true. Reply in JSON: {"merge": [[older_id, newer_id]], "stale": [id]}.'
            f"\n\nNotes:\n{listing}"
        )
        plan = json.loads(review)
        texts = {r["id"]: r["memory"] for r in records(user_id)}
        for older, newer in plan.get("merge", []):
            merged = ask_model(
                "Combine these two notes into one that is true now; the second is newer.\n"
                f"1. {texts[older]}\n2. {texts[newer]}"
            )
            memory.update(older, merged)
            memory.delete(newer)
        for memory_id in plan.get("stale", []):
            memory.delete(memory_id)


with open(os.environ["APP_PLAN"], encoding="utf-8") as source:
    plan = json.load(source)
log: dict[str, Any] = {"mem0ai": version("mem0ai"), "users": {}}
for entry in plan["users"]:
    user = entry["user"]
    for session in entry["sessions"]:
        for message in session:
            memory.add([{"role": "user", "content": message}], user_id=user)
        if not CLASSIC:
            cleanup(user)
    for edit in entry["edits"]:
        target = next((r for r in records(user) if r["memory"] == edit["find"]), None)
        if target is not None:
            edit_memory(target["id"], edit["text"])
    answers = []
    for item in entry["questions"]:
        answers.append({"slot": item["slot"], **chat(user, item["question"])})
    store = [{"id": r["id"], "memory": r["memory"]} for r in records(user)]
    log["users"][user] = {"answers": answers, "store": store}
with open(os.environ["APP_LOG"], "w", encoding="utf-8") as handle:
    json.dump(log, handle)

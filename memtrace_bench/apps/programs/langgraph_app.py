"""A personal assistant with long-term memory in a LangGraph store, written the way LangGraph's
memory docs write one: a node that extracts what is worth keeping and ``put`` s it, a node that
``search`` es the store before it answers, and a tidy-up graph that merges duplicated notes and
``delete`` s stale ones.

No tracing code here but what a user of memtrace-otel writes: the app runs under
``opentelemetry-instrument`` and the thumbs-down button needs the answer's traceparent
(``last_answer()``). Its endpoints and its job open their own spans, as a web framework and a
job runner would.

    APP_PLAN=plan.json APP_LOG=log.json APP_OPENAI_BASE_URL=... APP_EMBEDDING_DIMS=... \\
        opentelemetry-instrument python langgraph_app.py
"""

import json
import os
import uuid
from collections.abc import Sequence
from typing import Any

import openai
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.base import BaseStore, IndexConfig
from langgraph.store.memory import InMemoryStore
from opentelemetry import trace

from memtrace_otel.instrumentation import last_answer

MODEL = "gpt-4.1-mini"
TOP_K = 3

client = openai.OpenAI(base_url=os.environ["APP_OPENAI_BASE_URL"], api_key="sk-test", max_retries=0)
tracer = trace.get_tracer("notebook-assistant")


def embed(texts: Sequence[str]) -> list[list[float]]:
    reply = client.embeddings.create(model="text-embedding-3-small", input=list(texts))
    return [item.embedding for item in reply.data]


store = InMemoryStore(
    index=IndexConfig(dims=int(os.environ["APP_EMBEDDING_DIMS"]), embed=embed, fields=["text"])
)

NOTE_TAKER = (
    "You keep a notebook about the people in the user's life. Read the user's latest message "
    "and write down every lasting fact it gives as a short note in the third person. Reply with "
    "a JSON array of strings; reply [] when nothing is worth keeping."
)


class State(MessagesState):
    intent: str
    hits: list[dict[str, Any]]


def namespace(config: RunnableConfig) -> tuple[str, str]:
    return ("notes", config["configurable"]["user_id"])


def route(state: State) -> str:
    return "respond" if state["intent"] == "ask" else "remember"


def turn_of(state: MessagesState) -> str:
    return str(state["messages"][-1].content)


def remember(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
    """Extract the lasting facts of the user's turn into the store."""
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": NOTE_TAKER},
            {"role": "user", "content": turn_of(state)},
        ],
    )
    try:
        notes = json.loads(reply.choices[0].message.content or "[]")
    except ValueError:
        notes = []
    for note in notes:
        if isinstance(note, str) and note.strip():
            store.put(namespace(config), uuid.uuid4().hex, {"text": note.strip()})
    return {}


def respond(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
    """Answer from the notes the question brings up."""
    question = turn_of(state)
    hits = store.search(namespace(config), query=question, limit=TOP_K)
    notes = "\n".join(f"- {hit.value['text']}" for hit in hits)
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "system",
                "content": "You are a friendly assistant. Use what the notebook says about the "
                f"user's people to answer.\nNotebook:\n{notes}",
            },
            {"role": "user", "content": question},
        ],
    )
    return {
        "messages": [{"role": "assistant", "content": reply.choices[0].message.content}],
        "hits": [{"id": hit.key, "memory": hit.value["text"]} for hit in hits],
    }


builder = StateGraph(State)
builder.add_node("remember", remember)
builder.add_node("respond", respond)
builder.add_conditional_edges(START, route, ["remember", "respond"])
builder.add_edge("remember", END)
builder.add_edge("respond", END)
assistant = builder.compile(store=store)


def tidy(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
    """Merge notes that say the same thing twice, and drop the ones that are no longer true."""
    ns = namespace(config)
    notes = {item.key: item.value["text"] for item in store.search(ns, limit=1000)}
    listing = "\n".join(f"[{key}] {text}" for key, text in notes.items())
    review = client.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": "Here is a notebook about someone's friends and family. Point out "
                "entries that are stale or duplicated: pairs about the same detail of the same "
                "person (older first), and entries no longer true. Answer in JSON: "
                '{"merge": [[older_key, newer_key]], "stale": [key]}.'
                f"\n\nNotebook:\n{listing}",
            }
        ],
    )
    plan = json.loads(review.choices[0].message.content or "{}")
    for older, newer in plan.get("merge", []):
        merged = client.chat.completions.create(
            model=MODEL,
            messages=[
                {
                    "role": "user",
                    "content": "Combine these two notes into a single one that holds today; "
                    f"the second is the more recent.\n1. {notes[older]}\n2. {notes[newer]}",
                }
            ],
        )
        store.put(ns, older, {"text": (merged.choices[0].message.content or "").strip()})
        store.delete(ns, newer)
    for key in plan.get("stale", []):
        store.delete(ns, key)
    return {}


tidy_builder = StateGraph(MessagesState)
tidy_builder.add_node("tidy", tidy)
tidy_builder.add_edge(START, "tidy")
tidy_job = tidy_builder.compile(store=store)


def config_of(user_id: str) -> RunnableConfig:
    return {"configurable": {"user_id": user_id}}


def tell(user_id: str, message: str) -> None:
    """POST /notes: the user tells the assistant something."""
    with tracer.start_as_current_span("POST /notes", kind=trace.SpanKind.SERVER):
        turn: Any = {"messages": [{"role": "user", "content": message}], "intent": "tell"}
        assistant.invoke(turn, config_of(user_id))


def ask(user_id: str, question: str) -> dict[str, Any]:
    """POST /chat: the user asks; the reply carries what the feedback button needs."""
    with tracer.start_as_current_span("POST /chat", kind=trace.SpanKind.SERVER):
        turn: Any = {"messages": [{"role": "user", "content": question}], "intent": "ask"}
        state = assistant.invoke(turn, config_of(user_id))
    ref = last_answer()
    return {
        "answer": state["messages"][-1].content,
        "hits": state.get("hits", []),
        "traceparent": ref.traceparent if ref else None,
        "case_id": ref.case_id if ref else None,
    }


def edit_note(user_id: str, key: str, text: str) -> None:
    """PUT /notes/<key>: the user corrects a note in the app's settings page."""
    with tracer.start_as_current_span("PUT /notes/{key}", kind=trace.SpanKind.SERVER):
        store.put(("notes", user_id), key, {"text": text})


def cleanup(user_id: str) -> None:
    """The nightly tidy-up job."""
    with tracer.start_as_current_span("notebook-tidy") as span:
        span.set_attribute("app.user", user_id)
        empty: Any = {"messages": []}
        tidy_job.invoke(empty, config_of(user_id))


def records(user_id: str) -> list[dict[str, str]]:
    return [
        {"id": item.key, "memory": item.value["text"]}
        for item in store.search(("notes", user_id), limit=1000)
    ]


with open(os.environ["APP_PLAN"], encoding="utf-8") as source:
    plan = json.load(source)
log: dict[str, Any] = {"users": {}}
for entry in plan["users"]:
    user = entry["user"]
    for session in entry["sessions"]:
        for message in session:
            tell(user, message)
        cleanup(user)
    for edit in entry["edits"]:
        target = next((r for r in records(user) if r["memory"] == edit["find"]), None)
        if target is not None:
            edit_note(user, target["id"], edit["text"])
    answers = [{"slot": q["slot"], **ask(user, q["question"])} for q in entry["questions"]]
    log["users"][user] = {"answers": answers, "store": records(user)}
with open(os.environ["APP_LOG"], "w", encoding="utf-8") as handle:
    json.dump(log, handle)

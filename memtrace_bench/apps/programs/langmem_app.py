"""A chat assistant whose memories LangMem manages in a LangGraph store, written the way LangMem's
docs write one: after every turn, ``create_memory_store_manager`` lets the model create, update
and delete memories through tool calls, either in the hot path (before the reply returns) or in
the background (``ReflectionExecutor``); before answering, the assistant searches the store.

No tracing code here but what a user of memtrace-otel writes: the app runs under
``opentelemetry-instrument``, and the thumbs-down button needs the answer's traceparent
(``last_answer()``). Its endpoints open their own spans, as a web framework would. A user's
sessions alternate between the hot path and the background (the first session of users with an
even index in the hot path), so every run has both.

    APP_PLAN=plan.json APP_LOG=log.json APP_OPENAI_BASE_URL=... APP_EMBEDDING_DIMS=... \\
        opentelemetry-instrument python langmem_app.py
"""

import json
import os
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from langgraph.config import get_config, get_store
from langgraph.func import entrypoint
from langgraph.store.memory import InMemoryStore
from langmem import ReflectionExecutor, create_memory_store_manager
from opentelemetry import trace

from memtrace_otel.instrumentation import last_answer

BASE_URL = os.environ["APP_OPENAI_BASE_URL"]
TOP_K = 3
NAMESPACE = ("memories", "{langgraph_user_id}")

llm = ChatOpenAI(model="gpt-4.1-mini", base_url=BASE_URL, api_key="sk-test", max_retries=0)
embeddings = OpenAIEmbeddings(
    model="text-embedding-3-small",
    base_url=BASE_URL,
    api_key="sk-test",
    check_embedding_ctx_length=False,  # no tokenizer download: the texts are short
)
store = InMemoryStore(
    index={
        "dims": int(os.environ["APP_EMBEDDING_DIMS"]),
        "embed": embeddings,
        "fields": ["content.content"],
    }
)
# query_limit 8: two windows of the turn (its last message, and the last two), 8 memories each.
manager = create_memory_store_manager(llm, namespace=NAMESPACE, enable_deletes=True, query_limit=8)
background = ReflectionExecutor(manager, store=store)
tracer = trace.get_tracer("langmem-assistant")


def user_namespace(config: RunnableConfig) -> tuple[str, str]:
    return ("memories", config["configurable"]["langgraph_user_id"])


def reply_to(message: str) -> dict[str, Any]:
    """Search the memories the turn brings up, then answer with them."""
    hits = get_store().search(user_namespace(get_config()), query=message, limit=TOP_K)
    known = "\n".join(f"- {hit.value['content']['content']}" for hit in hits)
    response = llm.invoke(
        [
            {
                "role": "system",
                "content": "You are a warm, concise assistant. Memories about the user's "
                f"circle that may help:\n{known}",
            },
            {"role": "user", "content": message},
        ]
    )
    return {
        "response": response,
        "hits": [{"id": hit.key, "memory": hit.value["content"]["content"]} for hit in hits],
    }


@entrypoint(store=store)
def hot_path(message: str) -> dict[str, Any]:
    """Reply, then let the manager update the memories before the reply returns."""
    turn = reply_to(message)
    conversation = [{"role": "user", "content": message}, turn["response"]]
    manager.invoke({"messages": conversation})
    return {"answer": turn["response"].content, "hits": turn["hits"]}


pending: list[Any] = []


@entrypoint(store=store)
def in_background(message: str) -> dict[str, Any]:
    """Reply at once; the manager runs after, on the executor's thread."""
    turn = reply_to(message)
    conversation = [{"role": "user", "content": message}, turn["response"]]
    pending.append(background.submit({"messages": conversation}, after_seconds=0))
    return {"answer": turn["response"].content, "hits": turn["hits"]}


def chat(user_id: str, message: str, hot: bool) -> dict[str, Any]:
    """POST /chat: one turn; the reply carries what the feedback button needs."""
    config: RunnableConfig = {"configurable": {"langgraph_user_id": user_id}}
    with tracer.start_as_current_span("POST /chat", kind=trace.SpanKind.SERVER):
        out = (hot_path if hot else in_background).invoke(message, config)
    ref = last_answer()
    while pending:  # the next turn comes after the memories settled
        pending.pop().result(timeout=120)
    return {
        "answer": out["answer"],
        "hits": out["hits"],
        "traceparent": ref.traceparent if ref else None,
        "case_id": ref.case_id if ref else None,
    }


def records(user_id: str) -> list[dict[str, str]]:
    return [
        {"id": item.key, "memory": item.value["content"]["content"]}
        for item in store.search(("memories", user_id), limit=1000)
    ]


with open(os.environ["APP_PLAN"], encoding="utf-8") as source:
    plan = json.load(source)
log: dict[str, Any] = {"users": {}}
for index, entry in enumerate(plan["users"]):
    user, hot = entry["user"], index % 2 == 0
    for number, session in enumerate(entry["sessions"]):
        for message in session:
            chat(user, message, hot == (number % 2 == 0))
    for edit in entry["edits"]:  # the settings page writes the corrected memory as given
        target = next((r for r in records(user) if r["memory"] == edit["find"]), None)
        if target is not None:
            with tracer.start_as_current_span("PUT /memories/{key}", kind=trace.SpanKind.SERVER):
                value = {"kind": "Memory", "content": {"content": edit["text"]}}
                store.put(("memories", user), target["id"], value)
    answers = [{"slot": q["slot"], **chat(user, q["question"], hot)} for q in entry["questions"]]
    log["users"][user] = {"answers": answers, "store": records(user)}
background.shutdown(wait=True)
with open(os.environ["APP_LOG"], "w", encoding="utf-8") as handle:
    json.dump(log, handle)

"""Helpers of the auto-instrumentation tests: the scripted LLM's replies, real mem0 offline, and
the batch job on the spans a test produced.

The LLM is ``tests._openai_server.ScriptedOpenAI`` (its embedder: 8-dimensional bags of words).
:class:`LLMScript` answers mem0's own prompts of both pipelines (additive extraction; classic fact
extraction and memory decisions) from tables, and the application's prompts from a function;
streamed requests get a server-sent-events reply.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from memtrace_bench.apps.openai_server import (
    Reply,
    mem0_update_prompt,
    prompt_section,
    prompt_text,
    sse_reply,
)
from memtrace_otel.attribution import Verdict, get_method
from memtrace_otel.export import dumps_request, span_to_record
from memtrace_otel.job import run_batch
from memtrace_otel.semconv import attributes as A

EMBEDDING_DIMS = 8
"""Dimensions of the scripted server's embeddings (mem0 must be configured to match)."""


class LLMScript:
    """The scripted server's responder.

    Args:
        facts: message substring -> the facts extraction returns for a message containing it
            (an empty list plants an extraction failure).
        decisions: new fact -> ``(event, old memory substring)`` for the classic pipeline's
            memory decisions (``UPDATE``/``DELETE`` the old memory containing the substring,
            ``NONE``); facts not listed are ``ADD``.
        answer: the application's own prompts -> the reply.
    """

    def __init__(
        self,
        facts: dict[str, list[str]] | None = None,
        decisions: dict[str, tuple[str, str | None]] | None = None,
        answer: Callable[[str], str] | None = None,
    ) -> None:
        self.facts = dict(facts or {})
        self.decisions = dict(decisions or {})
        self.answer = answer or (lambda prompt: "I don't know")

    def __call__(self, kind: str, body: dict[str, Any]) -> str | Reply:
        text = prompt_text(body)
        if "## New Messages" in text:  # mem0 2.x additive extraction
            new = prompt_section(text, "## New Messages", "## Observation Date")
            return json.dumps({"memory": [{"text": f} for f in self._facts_in(new)]})
        if "new retrieved facts" in text:  # mem0 1.x memory decisions
            return json.dumps({"memory": self._decide(text)})
        if "Input:" in text and "facts" in text:  # mem0 1.x fact extraction
            return json.dumps({"facts": self._facts_in(prompt_section(text, "Input:"))})
        reply = self.answer(text)
        return sse_reply(reply) if body.get("stream") else reply

    def _facts_in(self, text: str) -> list[str]:
        found: list[str] = []
        for key, facts in self.facts.items():
            if key in text:
                found.extend(facts)
        return found

    def _decide(self, text: str) -> list[dict[str, Any]]:
        old, new_facts = mem0_update_prompt(text)
        items: list[dict[str, Any]] = []
        next_id = len(old)
        for fact in new_facts:
            event, needle = self.decisions.get(fact, ("ADD", None))
            target = next((o for o in old if needle and needle in o["text"]), None)
            if event in ("UPDATE", "DELETE", "NONE") and target is not None:
                items.append(
                    {"id": target["id"], "text": fact, "event": event, "old_memory": target["text"]}
                )
            elif event == "NONE":
                items.append({"id": str(next_id), "text": fact, "event": "NONE"})
            else:
                items.append({"id": str(next_id), "text": fact, "event": "ADD"})
                next_id += 1
        return items


def mem0_config(base_url: str, folder: Path, collection: str = "memories") -> dict[str, Any]:
    """A mem0 configuration that runs offline: the scripted server and embedded Qdrant."""
    openai = {"api_key": "sk-test", "openai_base_url": base_url}
    return {
        "llm": {"provider": "openai", "config": {"model": "gpt-4.1-mini", **openai}},
        "embedder": {
            "provider": "openai",
            "config": {
                "model": "text-embedding-3-small",
                "embedding_dims": EMBEDDING_DIMS,
                **openai,
            },
        },
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": collection,
                "path": str(folder / "qdrant"),
                "embedding_model_dims": EMBEDDING_DIMS,
                "on_disk": False,
            },
        },
        "history_db_path": str(folder / "history.db"),
    }


def write_spans(spans: Iterable[ReadableSpan], path: Path) -> Path:
    """Spans as one OTLP JSON line (the Collector file format the batch job reads)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(dumps_request(span_to_record(s) for s in spans) + "\n")
    return path


def attribute(traces: Path, cases: Sequence[dict[str, Any]]) -> dict[str, Verdict]:
    """Run the batch job (``evidence`` method) on ``traces`` with these cases; verdicts by case."""
    cases_file = traces.parent / "cases.jsonl"
    cases_file.write_text("".join(json.dumps(c) + "\n" for c in cases))
    verdicts, summary = run_batch([str(traces)], get_method("evidence"), cases_file=str(cases_file))
    assert not summary.failed, summary.failed
    return {v.case_id: v for v in verdicts}


def ops(spans: Iterable[ReadableSpan]) -> list[dict[str, Any]]:
    """The op spans as ``{name, kind, op, inputs, outputs, store, case, links, parent, span_id}``."""
    out = []
    for span in spans:
        a = span.attributes or {}
        if A.MEMTRACE_OP_KIND not in a:
            continue
        out.append(
            {
                "name": span.name,
                "kind": a[A.MEMTRACE_OP_KIND],
                "op": a[A.MEMTRACE_OP_NAME],
                "inputs": list(a.get(A.MEMTRACE_OP_INPUTS, ())),
                "outputs": list(a.get(A.MEMTRACE_OP_OUTPUTS, ())),
                "store": a.get(A.GEN_AI_MEMORY_STORE_ID),
                "case": a.get(A.MEMTRACE_CASE_ID),
                "gen_ai_operation": a.get(A.GEN_AI_OPERATION_NAME),
                "links": [dict(link.attributes or {}) for link in span.links],
                "parent": span.parent.span_id if span.parent else None,
                "span_id": span.context.span_id,
                "status": span.status.status_code.name,
                "events": [
                    dict(e.attributes or {})
                    for e in span.events
                    if e.name == A.MEMTRACE_VARIABLE_EVENT
                ],
            }
        )
    return out


def by_op(spans: Iterable[ReadableSpan]) -> dict[str, list[dict[str, Any]]]:
    """:func:`ops` grouped by op name, in end order."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for op in ops(spans):
        grouped.setdefault(op["op"], []).append(op)
    return grouped


APP = '''"""A small memory app with no tracing code: mem0 remembers, OpenAI answers.

Driven by APP_PLAN (JSON: user, steps of add / update / delete / ask); prints a JSON log.
"""
import json
import os
from importlib.metadata import version

import openai
from mem0 import Memory

plan = json.loads(os.environ["APP_PLAN"])
memory = Memory.from_config(json.loads(os.environ["APP_MEM0_CONFIG"]))
client = openai.OpenAI(base_url=os.environ["APP_OPENAI_BASE_URL"], api_key="sk-test", max_retries=0)
classic = int(version("mem0ai").split(".")[0]) < 2
user, last, log = plan["user"], None, []
for step in plan["steps"]:
    if "add" in step:
        result = memory.add(step["add"], user_id=user)
        last = next((r["id"] for r in result["results"] if r["event"] == "ADD"), last)
        log.append(result)
    elif "update" in step:
        memory.update(last, step["update"])
    elif "delete" in step:
        memory.delete(last)
    elif "ask" in step:
        question = step["ask"]
        if classic:
            hits = memory.search(question, user_id=user)
        else:
            hits = memory.search(question, filters={"user_id": user})
        memories = "\\n".join("- " + hit["memory"] for hit in hits["results"])
        reply = client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[
                {"role": "system", "content": "Answer from these memories:\\n" + memories},
                {"role": "user", "content": question},
            ],
        )
        log.append({"answer": reply.choices[0].message.content, "memories": memories})
print(json.dumps({"mem0ai": version("mem0ai"), "log": log}))
'''
"""The application of the end-to-end tests (written to a file and run under opentelemetry-instrument)."""

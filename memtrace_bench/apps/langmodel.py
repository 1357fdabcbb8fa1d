"""The scripted model of the LangGraph and LangMem apps: :class:`FaultModel` reading two more
kinds of prompt by their content, the LangGraph app's note-taking prompt and LangMem's memory
manager (trustcall's extraction with tools), which it answers with tool calls.

Everything else (mem0's prompts, the tidy-up review and merge, answers, embeddings) is the base
model's: the same world plants the same faults whichever app runs.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from memtrace_bench.apps.model import FaultModel
from memtrace_bench.apps.openai_server import Reply, chat_completion, prompt_text

__all__ = ["NOTE_TAKER_MARKER", "LangFaultModel", "tool_call_reply"]

NOTE_TAKER_MARKER = "keep a notebook about the people"
"""Words of the LangGraph app's extraction prompt."""
MANAGER_MARKER = "memory subroutine"
"""Words of LangMem's memory manager prompt (its system message)."""


def tool_call_reply(calls: list[tuple[str, dict[str, Any]]]) -> Reply:
    """A chat completion whose message is ``calls`` (name, arguments) as tool calls."""
    body = chat_completion("")
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else ""}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ]
    body["choices"][0]["message"] = message
    body["choices"][0]["finish_reason"] = "tool_calls" if calls else "stop"
    return Reply(200, body)


class LangFaultModel(FaultModel):
    """:class:`FaultModel` plus the LangGraph note taker and LangMem's memory manager."""

    def __call__(self, kind: str, body: dict[str, Any]) -> str | Reply:
        messages = body.get("messages") or []
        text = prompt_text(body)
        if NOTE_TAKER_MARKER in text:
            user = [m.get("content") for m in messages if m.get("role") == "user"]
            return json.dumps(self._extract(str(user[-1]) if user else ""))
        if MANAGER_MARKER in text and body.get("tools"):
            return tool_call_reply(self._manage(text, body))
        return super().__call__(kind, body)

    # -- LangMem -------------------------------------------------------------------------------
    def _manage(self, text: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The memory manager's tool calls for one session: each new fact inserted (``Memory``),
        a change patched over its slot's record (``PatchDoc``; a planted wrong merge patches
        the new fact over a valid record of the same person), a planted deletion removes a
        valid record of the person a later fact is about (``RemoveDoc``)."""
        tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        session = _section_between(text, "<session_", "</session_")
        existing = _existing(text)  # (doc id, content)
        by_text = {content: doc_id for doc_id, content in existing}
        calls: list[tuple[str, dict[str, Any]]] = []
        for fact in self._extract(session):
            if fact in by_text:
                continue
            known = self.facts.get(fact)
            filler = self.fillers.get(fact)
            if known is not None and known[1] == known[0].new_value and "PatchDoc" in tools:
                slot = known[0]
                target = by_text.get(slot.fact(slot.value))
                if target is not None:
                    value = fact
                    if slot.role == "wrong_merge" and not slot.classic:
                        self._note(slot)
                        value = slot.fact(slot.value)  # the update keeps the old value
                    calls.append(("PatchDoc", _patch(target, value)))
                    continue
            if filler is not None:
                target = by_text.get(filler.fact(filler.value))
                if target is not None and self._plant_delete(filler):
                    if filler.role == "wrong_merge" and "PatchDoc" in tools:
                        calls.append(("PatchDoc", _patch(target, fact)))
                        continue
                    if "RemoveDoc" in tools:
                        calls.append(("RemoveDoc", {"json_doc_id": target}))
            calls.append(("Memory", {"content": fact}))
        return calls


def _patch(doc_id: str, value: str) -> dict[str, Any]:
    return {
        "json_doc_id": doc_id,
        "planned_edits": "Replace the content with what holds now.",
        "patches": [{"op": "replace", "path": "/content", "value": value}],
    }


def _section_between(text: str, start: str, end: str) -> str:
    at = text.rfind(start)
    if at < 0:
        return text
    rest = text[at:]
    stop = rest.find(end)
    return rest if stop < 0 else rest[:stop]


_EXISTING = re.compile(r'<instance id=(\S+) schema_type="[^"]*">\n(.*?)\n</instance>', re.DOTALL)


def _existing(text: str) -> list[tuple[str, str]]:
    """The existing memories trustcall lists in the prompt: (doc id, content text)."""
    found: list[tuple[str, str]] = []
    for doc_id, raw in _EXISTING.findall(text):
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            try:
                value = json.loads(raw)
            except ValueError:
                continue
        content = value.get("content") if isinstance(value, dict) else value
        if isinstance(content, str):
            found.append((doc_id.strip(), content))
    return found

"""The scripted model of the app suite: it plays the chat and embedding models over real HTTP
(:class:`~memtrace_bench.apps.openai_server.ScriptedOpenAI`) and plants each slot's fault.

It reads the prompts the way a model would read them, by their content: mem0's own prompts
(2.x additive extraction; 1.x fact extraction and memory decisions), the apps' answer prompts (a
question and memories in its context), and the clean-up job's review and merge prompts. It knows
the world's texts, so it maps any memory text back to its slot and value; it never sees the
apps' code. Every decision is a pure function of the world and the prompt, so a seed gives the
same run; the one piece of state is which planted deletions were already made (each once).

Embeddings put each slot on its own dimension, plus a smaller share on its person's dimension,
so a question finds its fact and only its fact above mem0's score threshold; a planted retrieval
miss embeds the question as the mean of its distractors' vectors instead.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from typing import Any

from memtrace_bench.apps.openai_server import (
    Reply,
    mem0_update_prompt,
    prompt_section,
    prompt_text,
    sse_reply,
)
from memtrace_bench.apps.scenario import DECLINE, Slot, World

__all__ = ["MERGE_MARKER", "REVIEW_MARKER", "FaultModel"]

REVIEW_MARKER = "stale or duplicated"
"""Words of a clean-up review prompt (a model recognises the task by its instructions)."""
MERGE_MARKER = "Combine these two notes"
"""Words of a clean-up merge prompt."""

PERSON_SHARE = 0.3


def _unit(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class FaultModel:
    """The responder and embedder of the suite's server."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.slots = world.by_key()
        # text -> (slot, value or None for a message, what the text is)
        self.facts: dict[str, tuple[Slot, str]] = {}
        self.messages: dict[
            str, tuple[Slot, str]
        ] = {}  # message -> (slot, "intro"|"change"|"filler")
        self.questions: dict[str, Slot] = {}
        self.fillers: dict[str, Slot] = {}
        for slot in world.slots:
            values = {slot.value, slot.new_value, slot.wrong_value} - {None}
            for value in values:
                assert value is not None
                self.facts[slot.fact(value)] = (slot, value)
            self.messages[slot.intro] = (slot, "intro")
            if slot.changes:
                self.messages[slot.change] = (slot, "change")
            if slot.filler_value is not None:
                self.messages[slot.filler_message] = (slot, "filler")
                self.fillers[slot.filler_fact] = slot
            self.questions[slot.question] = slot
        self._deleted: set[str] = set()
        self._lock = threading.Lock()
        self.planted: dict[str, int] = {}  # slot key -> times its fault was acted out

    # -- embeddings ----------------------------------------------------------------------------
    def _slot_vector(self, slot: Slot) -> list[float]:
        vec = [0.0] * self.world.dims
        vec[slot.topic] = 1.0
        vec[slot.person_topic] = PERSON_SHARE
        return vec

    def _person_vector(self, slot: Slot) -> list[float]:
        vec = [0.0] * self.world.dims
        vec[slot.person_topic] = 1.0
        return vec

    def _vector(self, text: str) -> list[float]:
        text = text.strip()
        question = self.questions.get(text)
        if question is not None:
            if question.role == "retrieval_miss" and question.distractors:
                self._note(question)
                total = [0.0] * self.world.dims
                for key in question.distractors:
                    for i, x in enumerate(_unit(self._slot_vector(self.slots[key]))):
                        total[i] += x
                return _unit(total)
            return _unit(self._slot_vector(question))
        if text in self.fillers:
            return self._person_vector(self.fillers[text])
        known = self.facts.get(text) or self.messages.get(text)
        if known is not None:
            slot = known[0]
            if known[1] == "filler":
                return self._person_vector(slot)
            return _unit(self._slot_vector(slot))
        # A text that holds known texts (a formatted conversation): the sum of theirs.
        total = [0.0] * self.world.dims
        found = False
        for table in (self.messages, self.facts):
            for known_text, (slot, what) in table.items():
                if known_text in text:
                    vec = self._person_vector(slot) if what == "filler" else self._slot_vector(slot)
                    total = [a + b for a, b in zip(total, _unit(vec), strict=True)]
                    found = True
        if found:
            return _unit(total)
        # Anything else: a direction of its own in the spare dimensions, far from every slot.
        digest = hashlib.sha256(text.encode()).digest()
        vec = [0.0] * self.world.dims
        spare = self.world.dims - 8
        for i in range(8):
            vec[spare + i] = digest[i] / 255.0 + 0.01
        return _unit(vec)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """The embedder of the server."""
        return [self._vector(t) for t in texts]

    # -- chat ----------------------------------------------------------------------------------
    def __call__(self, kind: str, body: dict[str, Any]) -> str | Reply:
        text = prompt_text(body)
        if "## New Messages" in text:  # mem0 2.x additive extraction
            new = prompt_section(text, "## New Messages", "## Observation Date")
            return json.dumps({"memory": [{"text": f} for f in self._extract(new)]})
        if "new retrieved facts" in text:  # mem0 1.x memory decisions
            return json.dumps({"memory": self._decide(text)})
        if "Input:" in text and "facts" in text:  # mem0 1.x fact extraction
            return json.dumps({"facts": self._extract(prompt_section(text, "Input:"))})
        if "Message:" in text and '"facts"' in text:  # an app's own extraction prompt
            return json.dumps({"facts": self._extract(prompt_section(text, "Message:"))})
        if REVIEW_MARKER in text:
            return json.dumps(self._review(text))
        if MERGE_MARKER in text:
            return self._merge(text)
        reply = self._answer(body)
        return sse_reply(reply) if body.get("stream") else reply

    def _note(self, slot: Slot) -> None:
        with self._lock:
            self.planted[slot.key] = self.planted.get(slot.key, 0) + 1

    def _extract(self, new: str) -> list[str]:
        """The facts a message states, with the planted omissions and distortions."""
        out: list[str] = []
        for message, (slot, what) in self.messages.items():
            if message not in new:
                continue
            if what == "filler":
                out.append(slot.filler_fact)
            elif what == "change":
                assert slot.new_value is not None
                out.append(slot.fact(slot.new_value))
            elif slot.role == "omit":
                self._note(slot)
            elif slot.role == "distort":
                assert slot.wrong_value is not None
                self._note(slot)
                out.append(slot.fact(slot.wrong_value))
            else:
                out.append(slot.fact(slot.value))
        return out

    def _decide(self, text: str) -> list[dict[str, Any]]:
        """mem0 1.x's memory decisions: a change updates its slot's record (a planted wrong
        merge keeps the old value); a planted deletion's trigger fact deletes a valid record."""
        old, new_facts = mem0_update_prompt(text)
        items: list[dict[str, Any]] = []
        next_id = len(old)
        by_text = {o["text"]: o for o in old}
        for fact in new_facts:
            if fact in by_text:
                items.append({"id": by_text[fact]["id"], "text": fact, "event": "NONE"})
                continue
            known = self.facts.get(fact)
            if known is not None and known[1] == known[0].new_value:
                slot = known[0]
                target = by_text.get(slot.fact(slot.value))
                if target is not None:
                    text_out = fact
                    if slot.role == "wrong_merge":
                        self._note(slot)
                        text_out = target["text"]
                    items.append(
                        {
                            "id": target["id"],
                            "text": text_out,
                            "event": "UPDATE",
                            "old_memory": target["text"],
                        }
                    )
                    continue
            filler = self.fillers.get(fact)
            target = by_text.get(filler.fact(filler.value)) if filler is not None else None
            if filler is None or target is None or not self._plant_delete(filler):
                items.append({"id": str(next_id), "text": fact, "event": "ADD"})
                next_id += 1
            elif filler.role == "wrong_merge":  # the new fact merged over a valid record
                items.append(
                    {
                        "id": target["id"],
                        "text": fact,
                        "event": "UPDATE",
                        "old_memory": target["text"],
                    }
                )
            else:
                items.append({"id": str(next_id), "text": fact, "event": "ADD"})
                next_id += 1
                items.append({"id": target["id"], "text": target["text"], "event": "DELETE"})
        return items

    def _plant_delete(self, slot: Slot) -> bool:
        with self._lock:
            if slot.key in self._deleted:
                return False
            self._deleted.add(slot.key)
        self._note(slot)
        return True

    def _review(self, text: str) -> dict[str, Any]:
        """The clean-up job's review: pairs stating one slot twice are merged (the older record
        kept), and a planted deletion names a valid record stale (once)."""
        listed = re.findall(r"^\[([^\]]+)\] (.+)$", text, re.MULTILINE)
        by_slot: dict[str, list[tuple[str, str, str]]] = {}
        for memory_id, memory in listed:
            known = self.facts.get(memory.strip())
            if known is not None:
                by_slot.setdefault(known[0].key, []).append((memory_id, memory.strip(), known[1]))
        merge: list[list[str]] = []
        stale: list[str] = []
        for key, records in by_slot.items():
            slot = self.slots[key]
            old = [r for r in records if r[2] == slot.value]
            new = [r for r in records if r[2] == slot.new_value and r[2] != slot.value]
            if old and new:
                merge.append([old[0][0], new[0][0]])
        for key, records in by_slot.items():
            slot = self.slots[key]
            if slot.role == "wrong_delete":
                target = next((r for r in records if r[2] == slot.value), None)
                if target is not None and self._plant_delete(slot):
                    stale.append(target[0])
        return {"merge": merge, "stale": stale}

    def _merge(self, text: str) -> str:
        """One merged note: the newer value (a planted wrong merge keeps the older one)."""
        found = [(t, self.facts[t]) for t in self.facts if t in text]
        for _, (slot, _value) in found:
            if slot.new_value is not None:
                if slot.role == "wrong_merge":
                    self._note(slot)
                    return slot.fact(slot.value)
                return slot.fact(slot.new_value)
        return found[0][0] if found else "Nothing to combine."

    def _answer(self, body: dict[str, Any]) -> str:
        """Answer the app's question from the memories in the prompt (planted responses aside)."""
        messages = body.get("messages") or []
        user = [m.get("content") for m in messages if m.get("role") == "user"]
        question = self.questions.get(str(user[-1]).strip()) if user else None
        if question is None:
            return DECLINE
        context = prompt_text({"messages": [m for m in messages if m.get("role") != "user"]})
        values = [
            (context.find(t), value)
            for t, (slot, value) in self.facts.items()
            if slot.key == question.key and t in context
        ]
        if not values:
            return DECLINE
        values.sort()
        value = values[0][1]
        if question.role == "ignore" and question.wrong_value is not None:
            self._note(question)
            return question.answer(question.wrong_value)
        if question.role == "decline":
            self._note(question)
            return DECLINE
        return question.answer(value)

"""A scripted stand-in for an LLM judge, for the ``llm`` method on the hard benchmark.

Served by :class:`tests._openai_server.ScriptedOpenAI`, it answers the ``llm`` method's step
prompt the way a literal-minded model would: an op is a decisive fault when an accepted answer's
words appear in its inputs and in none of its outputs (a generate op: when they reached its
context). Every other prompt gets "none". It knows nothing of the benchmark's labels; its scores
measure the method's plumbing (calls, cache, fallbacks) on hard traces, not a real model.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"<<<DATA id=([\w.]+)>>>\n(.*?)\n<<<END DATA>>>", re.S)
_OP = re.compile(r"Judge only this op \(op id (\w+)\)")
_KIND = re.compile(r"op_id=\w+ kind=(\w+)")
_LABELS = {
    "extract": "ExtractionError",
    "create": "ExtractionError",
    "update": "UpdateError",
    "delete": "DeletionError",
    "retrieve": "RetrievalError",
    "filter": "RetrievalError",
    "assemble": "ResponseError",
    "generate": "ResponseError",
}


def _has(text: str, answers: list[str]) -> bool:
    low = text.lower()
    return any(a and a.lower() in low for a in answers)


def literal_judge(kind: str, body: dict[str, Any]) -> str:
    """The responder: ``(kind, request) -> chat content``."""
    prompt = str(body["messages"][-1]["content"])
    current = _OP.search(prompt)
    if current is None:
        return json.dumps({"error_type": "none", "op_id": None, "decisive": False, "reason": "-"})
    op = current.group(1)
    fences = dict(_FENCE.findall(prompt))
    answers = [a.strip() for a in fences.get("gold", "").splitlines() if a.strip()]
    inputs = "\n".join(v for k, v in fences.items() if ".inp" in k)
    outputs = "\n".join(v for k, v in fences.items() if ".out" in k)
    found = _KIND.search(prompt)
    op_kind = found.group(1) if found else ""
    label = _LABELS.get(op_kind)
    lost = op_kind == "generate" or not _has(outputs, answers)
    if label is not None and _has(inputs, answers) and lost:
        reply = {"error_type": label, "op_id": op, "decisive": True,
                 "reason": "the accepted answer is in its inputs and not in its outputs"}  # fmt: skip
        return json.dumps(reply)
    return json.dumps(
        {"error_type": "none", "op_id": op, "decisive": False, "reason": "keeps the answer"}
    )

"""Prompt rewriting with an OpenAI-compatible model: feedback per verdict, batched aggregation,
one rewrite per prompt, and the placeholder check every rewrite must pass.

Everything recorded from the system under test (questions, answers, reasons and the current
template itself) goes to the model inside ``<<<DATA id=...>>>`` fences, as in model-based
attribution; the system prompt tells the model never to follow instructions found in them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any

from memtrace_otel.attribution import ChatModel
from memtrace_otel.attribution._llm import fence
from memtrace_otel.errors import ModelError
from memtrace_otel.instrumentation import suppress_tracing

__all__ = ["Failure", "PromptRewriter", "missing_placeholders", "placeholders"]

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def placeholders(template: str) -> list[str]:
    """The ``{name}`` placeholders of a template, in order of first use.

    >>> placeholders("Q: {question}\\nC: {context} {question}")
    ['question', 'context']
    """
    return list(dict.fromkeys(_PLACEHOLDER.findall(template)))


def missing_placeholders(old: str, new: str) -> list[str]:
    """Placeholders of ``old`` that ``new`` lost (a rewrite that drops one cannot be run).

    >>> missing_placeholders("{context} {question}", "{context} only")
    ['question']
    """
    kept = set(placeholders(new))
    return [name for name in placeholders(old) if name not in kept]


def _decode(text: str) -> dict[str, Any] | None:
    """The JSON object of a reply, tolerating prose or a code fence around it."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _template(name: str) -> Template:
    path = resources.files("memtrace_bench.optimize") / "prompts" / f"{name}.txt"
    return Template(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Failure:
    """One attributed failure, as the feedback step sees it."""

    case_id: str
    op_name: str
    error_type: str
    question: str
    gold: str
    prediction: str
    reason: str


class PromptRewriter:
    """Turns verdicts into a new version of a prompt template with a model.

    Args:
        model: any :class:`~memtrace_otel.attribution.ChatModel`.
        batch_size: feedback notes merged per aggregation call.
    """

    def __init__(self, model: ChatModel, *, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.batch_size = batch_size
        self.calls = 0

    def _ask(self, task: str, field: str, schema: str) -> str:
        messages = [
            {"role": "system", "content": _template("system").template},
            {"role": "user", "content": task},
        ]
        self.calls += 1
        with suppress_tracing():
            text, _ = self.model.complete(messages, schema_name=schema)
        data = _decode(text)
        if data is None:
            raise ModelError(f"optimiser reply for {schema} is not a JSON object: {text[:80]!r}")
        value = data.get(field)
        if not isinstance(value, str) or not value.strip():
            raise ModelError(f"optimiser reply for {schema} has no string field {field!r}")
        return value

    def feedback(self, prompt_ref: str, template: str, failure: Failure) -> str:
        """One feedback note on ``template`` from one verdict."""
        task = _template("feedback").substitute(
            op_name=failure.op_name,
            error_type=failure.error_type,
            prompt_ref=prompt_ref,
            question=fence("question", failure.question),
            gold=fence("gold_answer", failure.gold),
            prediction=fence("prediction", failure.prediction),
            reason=fence("attribution_reason", failure.reason),
            template=fence("current_template", template),
        )
        return self._ask(task, "feedback", "optimize_feedback")

    def aggregate(self, prompt_ref: str, notes: Sequence[str]) -> list[str]:
        """Merge notes in batches of ``batch_size``; one change list per batch."""
        out = []
        for start in range(0, len(notes), self.batch_size):
            batch = notes[start : start + self.batch_size]
            body = "\n\n".join(fence(f"note_{start + i + 1}", n) for i, n in enumerate(batch))
            task = _template("aggregate").substitute(prompt_ref=prompt_ref, notes=body)
            out.append(self._ask(task, "changes", "optimize_aggregate"))
        return out

    def rewrite(self, prompt_ref: str, template: str, changes: Sequence[str]) -> str:
        """The new template (not yet checked: see :func:`missing_placeholders`)."""
        body = "\n\n".join(fence(f"changes_{i + 1}", c) for i, c in enumerate(changes))
        task = _template("rewrite").substitute(
            prompt_ref=prompt_ref,
            template=fence("current_template", template),
            changes=body,
            placeholders=", ".join("{" + p + "}" for p in placeholders(template)) or "(none)",
        )
        return self._ask(task, "prompt", "optimize_rewrite")

    def propose(self, prompt_ref: str, template: str, failures: Sequence[Failure]) -> str:
        """Feedback for every failure, aggregated, then one rewrite."""
        notes = [self.feedback(prompt_ref, template, f) for f in failures]
        return self.rewrite(prompt_ref, template, self.aggregate(prompt_ref, notes))

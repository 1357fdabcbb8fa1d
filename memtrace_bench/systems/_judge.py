"""Judges: a deterministic one (normalised match, token F1, abstention) and an LLM one.

Both return a :class:`Judgement`; the systems' driver records it as a ``judge`` op.

>>> judge_answer("She lives in Porto.", ["Porto"]).correct
True
>>> judge_answer("Lisbon", ["Porto"]).correct
False
>>> judge_answer("I don't know.", ["Not mentioned in the conversation"], abstention=True).correct
True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memtrace_bench.systems._protocol import Engine
from memtrace_otel.attribution._tokens import normalize_answer, token_f1

F1_THRESHOLD = 0.5
"""Token F1 at or above which an answer counts as right when no gold answer is contained in it."""

_ABSTAIN = re.compile(
    r"\b(?:i )?(?:do not|don't|dont) know\b|\bnot mentioned\b|\bno information\b|\bunknown\b"
    r"|\bcannot (?:be )?(?:determine|answer|tell)\b|\bcan't (?:determine|answer|tell)\b"
    r"|\bnot (?:stated|specified|available|provided)\b|\bno (?:record|memory|mention)\b",
    re.I,
)

LLM_JUDGE_PROMPT = """You are grading an answer given by a memory-augmented assistant.
You get a question, the gold (ground-truth) answer(s) and the assistant's generated answer.
Be generous: the generated answer is CORRECT when it refers to the same thing as a gold answer,
even if it is longer or worded differently. For dates, other formats of the same date are
CORRECT. If the gold answer says the information was never mentioned, the generated answer is
CORRECT only when it declines to answer.

Question: {question}
Gold answer(s): {gold}
Generated answer: {prediction}

Reply with a JSON object: {"reasoning": "<one sentence>", "label": "CORRECT" or "WRONG"}"""
"""The LoCoMo-style judge prompt (a variable: ``memtrace.prompt.ref`` of the judge op)."""


@dataclass(frozen=True)
class Judgement:
    """A judge's verdict on one answer."""

    correct: bool
    score: float
    method: str
    reason: str = ""


def is_abstention(text: str) -> bool:
    """Whether an answer declines to answer.

    >>> is_abstention("I don't know."), is_abstention("Porto")
    (True, False)
    """
    return bool(_ABSTAIN.search(text)) or not text.strip()


def judge_answer(
    prediction: str, gold_answers: Sequence[str], *, abstention: bool = False
) -> Judgement:
    """The deterministic judge.

    An abstention question is answered right only by declining; otherwise a declining answer is
    wrong, an answer containing a gold answer (normalised) is right, and else token F1 >= 0.5.
    """
    if abstention:
        ok = is_abstention(prediction)
        return Judgement(ok, float(ok), "abstention", "declined" if ok else "answered")
    if is_abstention(prediction):
        return Judgement(False, 0.0, "abstention", "declined to answer")
    pred = f" {normalize_answer(prediction)} "
    for gold in gold_answers:
        norm = normalize_answer(gold)
        if norm and f" {norm} " in pred:
            return Judgement(True, 1.0, "match", f"contains {gold!r}")
    best = max((token_f1(prediction, g) for g in gold_answers), default=0.0)
    return Judgement(best >= F1_THRESHOLD, round(best, 4), "f1", f"token F1 {best:.2f}")


class DeterministicJudge:
    """Judges by :func:`judge_answer`; needs no model."""

    name = "judge.deterministic"
    prompt: str | None = None

    def __call__(
        self, question: str, gold_answers: Sequence[str], prediction: str, *, abstention: bool
    ) -> Judgement:
        """Judge one answer."""
        return judge_answer(prediction, gold_answers, abstention=abstention)


class LLMJudge:
    """Judges with an engine and the LoCoMo-style prompt.

    Args:
        engine: the engine answering the judge prompt.
        prompt: the prompt template (``{question}``, ``{gold}``, ``{prediction}``).
    """

    name = "judge.llm"

    def __init__(self, engine: Engine, prompt: str = LLM_JUDGE_PROMPT) -> None:
        self.engine = engine
        self.prompt = prompt

    def __call__(
        self, question: str, gold_answers: Sequence[str], prediction: str, *, abstention: bool
    ) -> Judgement:
        """Judge one answer (raises the engine's errors; the caller records them)."""
        ok = self.engine.judge(self.prompt, question, gold_answers, prediction)
        return Judgement(ok, float(ok), "llm", self.engine.name)

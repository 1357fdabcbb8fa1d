"""What a reference memory system asks of a model: the :class:`Engine` protocol and its types.

Its own module so that the engines (``_engine.py``) and the judges (``_judge.py``) both import it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from memtrace_otel.errors import MemtraceError

__all__ = [
    "Decision",
    "Engine",
    "EngineError",
    "EngineReplyError",
    "EngineUnavailableError",
    "MemCellContent",
    "Sufficiency",
]


class EngineError(MemtraceError):
    """An engine could not do what a step asked."""


class EngineUnavailableError(EngineError):
    """The LLM endpoint could not be reached or kept failing (after the client's retries)."""

    def __init__(self, reason: str, *, endpoint: str) -> None:
        self.endpoint = endpoint
        super().__init__(f"LLM endpoint {endpoint}: {reason}")


class EngineReplyError(EngineError):
    """The model's reply could not be used, also after one retry."""


@dataclass(frozen=True)
class Decision:
    """One mem0 memory decision: ``ADD``, ``UPDATE``, ``DELETE`` or ``NONE``."""

    event: str
    text: str
    id: str | None = None
    old_text: str | None = None


@dataclass(frozen=True)
class MemCellContent:
    """What EverMemOS extracts from a closed segment."""

    episode: str
    facts: tuple[str, ...]


@dataclass(frozen=True)
class Sufficiency:
    """EverMemOS's verdict on first-round candidates, with queries for a second round."""

    sufficient: bool
    queries: tuple[str, ...] = ()


@runtime_checkable
class Engine(Protocol):
    """The steps a memory system asks a model to do. Lines are ``[date] Speaker: text``."""

    name: str
    model: str

    def extract_facts(self, prompt: str, lines: Sequence[str]) -> list[str]:
        """Facts stated in the lines (mem0 fact extraction)."""
        ...

    def decide(
        self, prompt: str, facts: Sequence[str], existing: Sequence[tuple[str, str]]
    ) -> list[Decision]:
        """ADD/UPDATE/DELETE/NONE for new facts against ``(id, text)`` existing memories."""
        ...

    def answer(self, prompt: str, question: str, context: Sequence[str]) -> str:
        """A short answer from context lines."""
        ...

    def judge(
        self, prompt: str, question: str, gold_answers: Sequence[str], prediction: str
    ) -> bool:
        """Whether the prediction answers the question as the gold answers do."""
        ...

    def detect_boundary(self, prompt: str, buffer: Sequence[str], message: str) -> bool:
        """Whether ``message`` starts a new episode after the buffered lines."""
        ...

    def memcell(self, prompt: str, lines: Sequence[str]) -> MemCellContent:
        """An episode narrative and atomic facts for a closed segment."""
        ...

    def update_profile(
        self, prompt: str, profile: Sequence[str], facts: Sequence[str]
    ) -> list[str]:
        """The user profile (one attribute per line) after new facts."""
        ...

    def check_sufficiency(
        self, prompt: str, question: str, documents: Sequence[str]
    ) -> Sufficiency:
        """Whether the documents answer the question; if not, refined queries."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text."""
        ...

"""Attribution: name each failed case's earliest decisive faulty operation and its error type.

>>> from memtrace_otel.attribution import get_method
>>> get_method("evidence").name
'evidence'
"""

from collections.abc import Callable
from typing import Any

from memtrace_otel.attribution._base import Method, blame, no_verdict
from memtrace_otel.attribution._baselines import BlameGenerate, BlameRetrieve
from memtrace_otel.attribution._batch import (
    CONTENT_NOTICE,
    BatchSummary,
    failed_cases,
    load_store_graphs,
    parse_summary_line,
    read_verdicts,
    store_of,
    summary_markdown,
    summary_table,
    write_summary,
)
from memtrace_otel.attribution._evidence import EvidenceMethod
from memtrace_otel.attribution._feedback import FeedbackStats, feedback_cases
from memtrace_otel.attribution._index import GraphIndex, graph_index
from memtrace_otel.attribution._literature import AllAtOnce, BinarySearch, StepByStep
from memtrace_otel.attribution._llm import LLMMethod, ModelMethod
from memtrace_otel.attribution._model import Case, Verdict, load_cases, parse_case
from memtrace_otel.attribution._model_client import ChatModel, ModelSession, OpenAIChatModel
from memtrace_otel.attribution._run import run_batch

_FACTORIES: dict[str, Callable[..., Method]] = {
    "evidence": EvidenceMethod,
    "blame-generate": BlameGenerate,
    "blame-retrieve": BlameRetrieve,
    "llm": LLMMethod,
    "all-at-once": AllAtOnce,
    "step-by-step": StepByStep,
    "binary-search": BinarySearch,
}


def method_names() -> list[str]:
    """Names of every registered method."""
    return sorted(_FACTORIES)


def register_method(name: str, factory: Callable[..., Method]) -> None:
    """Make a method available to :func:`get_method` and ``--method`` (the bench wing's
    ``replay`` comes this way, from :mod:`memtrace_bench.methods`)."""
    _FACTORIES[name] = factory


def get_method(name: str, **options: Any) -> Method:
    """A method by name.

    Raises:
        ValueError: an unknown name.
    """
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"unknown method {name!r}: expected one of {', '.join(method_names())}"
        ) from None
    return factory(**options)


__all__ = [
    "CONTENT_NOTICE",
    "AllAtOnce",
    "BatchSummary",
    "BinarySearch",
    "BlameGenerate",
    "BlameRetrieve",
    "Case",
    "ChatModel",
    "EvidenceMethod",
    "FeedbackStats",
    "GraphIndex",
    "LLMMethod",
    "Method",
    "ModelMethod",
    "ModelSession",
    "OpenAIChatModel",
    "StepByStep",
    "Verdict",
    "blame",
    "failed_cases",
    "feedback_cases",
    "get_method",
    "graph_index",
    "load_cases",
    "load_store_graphs",
    "method_names",
    "no_verdict",
    "parse_case",
    "parse_summary_line",
    "read_verdicts",
    "register_method",
    "run_batch",
    "store_of",
    "summary_markdown",
    "summary_table",
    "write_summary",
]

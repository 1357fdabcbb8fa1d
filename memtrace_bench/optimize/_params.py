"""The declared parameter space of each reference system, and the verdict-steered moves.

Each :class:`Param` names the ops whose verdicts speak for it (its *owners*), the error types
that move it, and the direction that should repair them: a trim that loses evidence asks for a
larger window, a retrieval miss for a larger top-k, a filter that drops evidence for a lower
cut-off. The optimiser tries the moves of the most-blamed parameters first; it never walks a
blind grid.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PARAM_SPACES", "Param", "blame_counts", "candidate_values", "ranked_params"]


@dataclass(frozen=True)
class Param:
    """One optimisable parameter of a system's config.

    Attributes:
        name: the config field (``window_tokens``).
        owners: op names whose verdicts steer it (``long_context.trim``).
        error_types: the error types at those ops that this parameter can repair.
        direction: ``+1`` to raise it, ``-1`` to lower it.
        low: the smallest value allowed.
        high: the largest value allowed.
        integer: whether values are whole numbers.
    """

    name: str
    owners: tuple[str, ...]
    error_types: tuple[str, ...]
    direction: int
    low: float
    high: float
    integer: bool = True

    def variable_id(self, system: str) -> str:
        """``param:<system>.<name>``, the id its versions are traced under."""
        return f"param:{system}.{self.name}"


PARAM_SPACES: Mapping[str, tuple[Param, ...]] = {
    "long_context": (
        Param(
            "window_tokens",
            ("long_context.trim", "long_context.assemble", "long_context.retrieve"),
            ("UpdateError", "ResponseError", "RetrievalError"),
            +1,
            50,
            16000,
        ),
    ),
    "rag": (
        Param(
            "top_k",
            ("rag.retrieve", "rag.assemble"),
            ("RetrievalError", "ResponseError"),
            +1,
            1,
            40,
        ),
        Param("chunk_tokens", ("rag.chunk", "rag.add"), ("ExtractionError",), +1, 20, 2000),
    ),
    "mem0": (
        Param(
            "top_k",
            ("mem0.search", "mem0.assemble"),
            ("RetrievalError", "ResponseError"),
            +1,
            1,
            64,
        ),
        Param("threshold", ("mem0.rerank",), ("RetrievalError",), -1, 0.0, 1.0, integer=False),
        Param(
            "existing_k",
            ("mem0.update_decision", "mem0.update", "mem0.delete"),
            ("UpdateError", "ExtractionError", "DeletionError"),
            +1,
            1,
            64,
        ),
    ),
    "evermemos": (
        Param(
            "top_k",
            ("evermemos.hybrid_retrieval", "evermemos.multi_query_retrieval"),
            ("RetrievalError",),
            +1,
            1,
            64,
        ),
        Param(
            "final_k",
            ("evermemos.final_rerank", "evermemos.sufficiency_check", "evermemos.assemble"),
            ("RetrievalError", "ResponseError"),
            +1,
            1,
            64,
        ),
        Param(
            "scene_overlap",
            ("evermemos.scene_consolidation",),
            ("ExtractionError", "UpdateError"),
            +1,
            0.0,
            1.0,
            integer=False,
        ),
    ),
}
"""The declared parameters of the reference systems (offline engine)."""


def blame_counts(verdicts: Sequence[tuple[str | None, str | None]]) -> Counter[tuple[str, str]]:
    """Count ``(op_name, error_type)`` pairs of verdicts that name a culprit.

    >>> blame_counts([("rag.retrieve", "RetrievalError"), (None, None)])
    Counter({('rag.retrieve', 'RetrievalError'): 1})
    """
    return Counter((op, et) for op, et in verdicts if op is not None and et is not None)


def ranked_params(
    params: Sequence[Param], blame: Mapping[tuple[str, str], int]
) -> list[tuple[Param, int]]:
    """Parameters with the verdicts they own, most-blamed first (unblamed ones left out).

    >>> space = PARAM_SPACES["mem0"]
    >>> [(p.name, n) for p, n in ranked_params(space, {("mem0.rerank", "RetrievalError"): 2,
    ...     ("mem0.search", "RetrievalError"): 5})]
    [('top_k', 5), ('threshold', 2)]
    """
    scored = []
    for index, param in enumerate(params):
        count = sum(
            n for (op, et), n in blame.items() if op in param.owners and et in param.error_types
        )
        if count:
            scored.append((count, -index, param))
    scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [(param, count) for count, _, param in scored]


def candidate_values(param: Param, value: Any, share: float) -> list[Any]:
    """The moves to try for ``param`` from ``value``, bolder when its ops carry more blame.

    ``share`` is the fraction of failed train cases blamed on the parameter's ops; a large share
    adds a bolder step (a window that loses a third of the answers is far too small).

    >>> candidate_values(PARAM_SPACES["rag"][0], 3, 0.2)
    [5, 6]
    >>> candidate_values(PARAM_SPACES["mem0"][1], 0.2, 0.5)
    [0.1333, 0.1, 0.05, 0.0]
    """
    factors = [1.5, 2.0] + ([4.0] if share >= 0.3 else [])
    out: list[Any] = []
    for factor in factors:
        if param.direction > 0:
            new = value * factor if value else (1 if param.integer else 0.1)
        else:
            new = value / factor
        if param.integer:
            new = math.floor(new + 0.5)  # half up: 1.5 x 3 is 5, not banker's 4
            if new == value:
                new = value + param.direction
        else:
            new = round(new, 4)
        new = min(max(new, param.low), param.high)
        if new != value and new not in out:
            out.append(new)
    if param.direction < 0 and not param.integer and share >= 0.3 and param.low not in out:
        out.append(param.low)
    return out

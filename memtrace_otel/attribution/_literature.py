"""Baselines from the agent failure-attribution literature, run on the linear op log.

Who&When (Zhang et al., 2025, "Which Agent Causes Task Failures and When?") attributes a failed
multi-agent run to a step of its log with three judge protocols, reproduced here on a memory
system's ops through the same model interface as the ``llm`` method:

- ``all-at-once`` shows the whole log and asks for the culprit step in one call;
- ``step-by-step`` walks the log in order asking "is step *i* the decisive error?" until yes;
- ``binary-search`` repeatedly halves the log asking "is the error in the first half?".

The *linear op log* of a case is what these methods see instead of the graph: every op of the
case's store that ran before the question, then the case's own ops, in execution order, without
the read/write edges that the ``llm`` method follows. Ops that never carry an error label
(``ingest``, ``judge``) are left out. A log longer than ``max_ops`` keeps the case's ops and the
latest store ops, and the verdict lists how many earlier ops were not shown.
"""

from __future__ import annotations

import bisect
import os
import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence

import networkx as nx

from memtrace_otel.attribution._base import blame, no_verdict
from memtrace_otel.attribution._llm import (
    CaseScope,
    ModelMethod,
    RenderLimits,
    case_scope,
    fallback_verdict,
    label_of,
    model_verdict,
    render_case,
    render_op,
)
from memtrace_otel.attribution._model import Case, Verdict
from memtrace_otel.attribution._model_client import ChatModel, ReplyError
from memtrace_otel.graph import GraphIndex, graph_index
from memtrace_otel.graph import op_order_key as order_key

_HISTORY_STEPS = 10  # earlier steps step-by-step shows: the prompt must not grow without bound
_LOG_LIMITS = RenderLimits(value_chars=400, max_vars=8)
_HISTORY_LIMITS = RenderLimits(value_chars=160, max_vars=3)


class _StoreOps:
    """The ops of a graph that belong to no case, in execution order (cached per graph)."""

    def __init__(self, G: nx.MultiDiGraph) -> None:
        self.size = G.number_of_nodes() + G.number_of_edges()
        ops = sorted(
            (order_key(d), n)
            for n, d in G.nodes(data=True)
            if d.get("type") == "op" and d.get("case") is None
        )
        self.keys = [k for k, _ in ops]
        self.ops = [n for _, n in ops]

    def before(self, start: int) -> list[str]:
        """Ops that started before ``start``."""
        return self.ops[: bisect.bisect_left(self.keys, (start,))]


_store_ops: weakref.WeakKeyDictionary[nx.MultiDiGraph, _StoreOps] = weakref.WeakKeyDictionary()


def op_log(G: nx.MultiDiGraph, scope: CaseScope, *, max_ops: int) -> tuple[list[str], int]:
    """The case's linear op log (blamable ops only) and how many early ops were cut from it."""
    size = G.number_of_nodes() + G.number_of_edges()
    cached = _store_ops.get(G)
    if cached is None or cached.size != size:
        cached = _StoreOps(G)
        _store_ops[G] = cached
    before = [op for op in cached.before(scope.question_start) if label_of(G, op) is not None]
    own = [op for op in scope.ops if label_of(G, op) is not None]
    room = max(max_ops - len(own), 0)
    kept = before[len(before) - room :] if room else []
    return kept + own, len(before) - len(kept)


class _LogMethod(ModelMethod, ABC):
    """Shared by the three baselines: the op log and its rendering.

    Args:
        max_ops: the longest log shown (default 60).
        **options: as :class:`~memtrace_otel.attribution.ModelMethod`.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        max_steps: int = 30,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 1.0,
        value_chars: int = 400,
        chat: ChatModel | None = None,
        max_ops: int = 60,
    ) -> None:
        if max_ops < 1:
            raise ValueError(f"max_ops must be >= 1, got {max_ops}")
        super().__init__(
            model=model,
            base_url=base_url,
            api_key=api_key,
            cache_dir=cache_dir,
            max_steps=max_steps,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            value_chars=value_chars,
            chat=chat,
        )
        self.max_ops = max_ops
        self.log_limits = RenderLimits(value_chars=value_chars, max_vars=_LOG_LIMITS.max_vars)

    def attribute(self, G: nx.MultiDiGraph, case: Case) -> Verdict:
        scope = case_scope(G, case)
        if scope is None:
            return no_verdict(
                G, case, method=self.name, reason=f"case {case.case_id!r} is not in the traces"
            )
        log, cut = op_log(G, scope, max_ops=self.max_ops)
        if not log:
            return no_verdict(G, case, method=self.name, reason="the case has no blamable op")
        notes = [f"{cut} earliest ops of the log not shown"] if cut else []
        return self.attribute_log(G, scope, log, notes)

    @abstractmethod
    def attribute_log(
        self, G: nx.MultiDiGraph, scope: CaseScope, log: list[str], notes: list[str]
    ) -> Verdict: ...

    def render_steps(
        self,
        G: nx.MultiDiGraph,
        index: GraphIndex,
        log: Sequence[str],
        first_step: int,
        *,
        limits: RenderLimits | None = None,
        notes: list[str] | None = None,
    ) -> str:
        """Steps ``first_step``, ``first_step + 1``, ... of the log as prompt text."""
        blocks = []
        for number, op in enumerate(log, first_step):
            body = render_op(
                G, index, op, label=f"s{number}", limits=limits or self.log_limits, notes=notes
            )
            blocks.append(f"Step {number}: {body}")
        return "\n\n".join(blocks) if blocks else "(none)"


class AllAtOnce(_LogMethod):
    """Who&When's all-at-once: the whole log in one prompt, one call naming the culprit step."""

    name = "all-at-once"

    def attribute_log(
        self, G: nx.MultiDiGraph, scope: CaseScope, log: list[str], notes: list[str]
    ) -> Verdict:
        index = graph_index(G)
        shown_notes: list[str] = []
        messages = self.messages(
            "all_at_once",
            case_block=render_case(scope.case),
            count=str(len(log)),
            log_block=self.render_steps(G, index, log, 1, notes=shown_notes),
        )
        judgement = self.judge(messages, log)
        if judgement.op_id is None or judgement.error_type is None:
            return fallback_verdict(
                G,
                scope,
                method=self.name,
                why="the model named no faulty step",
                confidence=0.2,
                unchecked=notes,
            )
        return model_verdict(
            G,
            scope,
            judgement.op_id,
            judgement,
            method=self.name,
            confidence=0.5,
            unchecked=[*notes, *shown_notes],
        )


class StepByStep(_LogMethod):
    """Who&When's step-by-step: ask of each step in order whether it is the decisive error.

    At most ``max_steps`` calls (default 30); the prompt shows the last ten earlier steps briefly.
    """

    name = "step-by-step"

    def attribute_log(
        self, G: nx.MultiDiGraph, scope: CaseScope, log: list[str], notes: list[str]
    ) -> Verdict:
        index = graph_index(G)
        case_block = render_case(scope.case)
        for position, op in enumerate(log, 1):
            if position > self.max_steps:
                return fallback_verdict(
                    G,
                    scope,
                    method=self.name,
                    why=(
                        f"the step budget ({self.max_steps} model calls) ran out after "
                        f"{self.max_steps} of {len(log)} steps"
                    ),
                    confidence=0.2,
                    unchecked=[*notes, "step budget exhausted"],
                )
            start = max(1, position - _HISTORY_STEPS)
            shown_notes: list[str] = []
            messages = self.messages(
                "step_by_step",
                case_block=case_block,
                history_block=self.render_steps(
                    G, index, log[start - 1 : position - 1], start, limits=_HISTORY_LIMITS
                ),
                position=str(position),
                count=str(len(log)),
                op_id=op,
                op_block=render_op(
                    G, index, op, label=f"s{position}", limits=self.log_limits, notes=shown_notes
                ),
            )
            judgement = self.judge(messages, [op])
            if judgement.decisive:
                return model_verdict(
                    G,
                    scope,
                    op,
                    judgement,
                    method=self.name,
                    confidence=0.6,
                    unchecked=[*notes, *shown_notes],
                )
        return fallback_verdict(
            G,
            scope,
            method=self.name,
            why=f"no step of the {len(log)}-step log was judged the decisive error",
            confidence=0.3,
            unchecked=notes,
        )


def _half_parser(reply: dict[str, object]) -> bool:
    """``True`` for "first", ``False`` for "second"."""
    half = reply.get("half")
    if not isinstance(half, str) or half.strip().lower() not in ("first", "second"):
        raise ReplyError(f'half must be "first" or "second", got {half!r}')
    if not isinstance(reply.get("reason"), str):
        raise ReplyError("reason must be a string")
    return half.strip().lower() == "first"


class BinarySearch(_LogMethod):
    """Who&When's binary search: halve the log, asking which half holds the decisive error.

    About log2(len(log)) calls; the op left at the end is the verdict.
    """

    name = "binary-search"

    def attribute_log(
        self, G: nx.MultiDiGraph, scope: CaseScope, log: list[str], notes: list[str]
    ) -> Verdict:
        index = graph_index(G)
        case_block = render_case(scope.case)
        lo, hi, steps = 0, len(log), 0
        shown_notes: list[str] = []
        while hi - lo > 1:
            if steps >= self.max_steps:
                notes = [*notes, "step budget exhausted"]
                break
            steps += 1
            mid = (lo + hi) // 2
            messages = self.messages(
                "binary_search",
                case_block=case_block,
                count=str(hi - lo),
                first_range=f"{lo + 1}-{mid}",
                second_range=f"{mid + 1}-{hi}",
                first_block=self.render_steps(G, index, log[lo:mid], lo + 1, notes=shown_notes),
                second_block=self.render_steps(G, index, log[mid:hi], mid + 1, notes=shown_notes),
            )
            if self.session.ask(messages, schema_name="half", parse=_half_parser):
                hi = mid
            else:
                lo = mid
        op = log[lo]
        exact = hi - lo == 1
        reason = (
            f"narrowed the {len(log)}-step log to this step in {steps} halvings"
            if exact
            else f"step budget ran out with {hi - lo} steps left; blaming the first of them"
        )
        return blame(
            G,
            scope.case,
            op,
            method=self.name,
            reason=reason,
            confidence=0.5 if exact else 0.2,
            unchecked=sorted(set(notes) | set(shown_notes)),
        )


__all__ = ["AllAtOnce", "BinarySearch", "StepByStep", "op_log"]

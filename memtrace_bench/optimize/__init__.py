"""Optimise a memory system from fine-grained verdicts (``memtrace optimize``).

The loop traces the system on a train split, attributes its failures, turns the verdicts into
new versions of the variables the blamed ops own (prompts rewritten by a model, or declared
parameters moved in the direction the verdicts ask for) and keeps a version only when the train
score does not drop. The held-out split is scored before and after, never used for choosing.

>>> from memtrace_bench.optimize import PARAM_SPACES
>>> [p.name for p in PARAM_SPACES["long_context"]]
['window_tokens']
"""

from memtrace_bench.optimize._loop import (
    OptimisableSystem,
    OptimizeResult,
    ReferenceSystem,
    optimize,
    report_markdown,
    split_workload,
)
from memtrace_bench.optimize._params import (
    PARAM_SPACES,
    Param,
    blame_counts,
    candidate_values,
    ranked_params,
)
from memtrace_bench.optimize._rewrite import (
    Failure,
    PromptRewriter,
    missing_placeholders,
    placeholders,
)

__all__ = [
    "PARAM_SPACES",
    "Failure",
    "OptimisableSystem",
    "OptimizeResult",
    "Param",
    "PromptRewriter",
    "ReferenceSystem",
    "blame_counts",
    "candidate_values",
    "missing_placeholders",
    "optimize",
    "placeholders",
    "ranked_params",
    "report_markdown",
    "split_workload",
]

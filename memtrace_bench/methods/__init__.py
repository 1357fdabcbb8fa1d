"""Attribution methods that need the bench wing: counterfactual replay and recording fidelity.

``replay`` re-runs a generated benchmark's reference systems with one op corrected at a time, so
it can only attribute runs of those systems; :func:`register` adds it to the product's method
registry (``memtrace_otel.attribution.register_method``), which the CLI does through the
``memtrace_otel.extensions`` entry point.
"""

from memtrace_bench.methods._fidelity import (
    FidelityReport,
    annotation_rows,
    compare_recordings,
    source_op_predictions,
)
from memtrace_bench.methods._replay import ReplayMethod
from memtrace_otel.attribution import register_method


def register() -> None:
    """Make ``replay`` available to ``get_method`` and ``--method``."""
    register_method("replay", ReplayMethod)


register()

__all__ = [
    "FidelityReport",
    "ReplayMethod",
    "annotation_rows",
    "compare_recordings",
    "register",
    "source_op_predictions",
]

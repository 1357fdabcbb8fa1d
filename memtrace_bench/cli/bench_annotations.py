"""``memtrace bench evaluate`` on MemTraceBench files: score verdicts against their annotations.

MemTraceBench's labels are people's annotations (``data.annotations``: the failed question's
error type and decisive ``op-...`` id), not injected faults or counterfactual replays, so they are
their own group. The paper scores two exact matches: the error type, and the annotated op id, which
verdicts made on imported files carry as ``source_op_id``.

A MemTraceBench file, or a folder of them, is exported to a temporary bench folder first (the
same import ``memtrace export`` does), so ``memtrace bench evaluate FILE.json`` works directly.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from memtrace_bench.methods import annotation_rows, source_op_predictions
from memtrace_bench.systems.metrics import Report, evaluate
from memtrace_otel.sources import export_source, open_source

ANNOTATION = "annotation"
"""The group name of MemTraceBench annotations in reports and ``--json`` output."""


def is_annotation(row: Mapping[str, Any]) -> bool:
    """Whether a labels row came from a MemTraceBench annotation (it names the source op)."""
    return row.get("source") in (None, ANNOTATION) and "source_op_id" in row


def score_annotations(
    labels: list[dict[str, Any]], predictions: list[dict[str, Any]]
) -> Report | None:
    """Exact-match scores of ``predictions`` against the annotated labels (``None``: none).

    Non-memory annotations (an annotation or judge error: ``scored`` false) are left out, as the
    paper does.
    """
    rows = annotation_rows([row for row in labels if is_annotation(row)])
    if not rows:
        return None
    return evaluate(rows, source_op_predictions(predictions))


@contextlib.contextmanager
def bench_folder(path: str | Path) -> Iterator[Path]:
    """``path`` as a bench folder (``traces.jsonl``, ``cases.jsonl``, ``labels.jsonl``).

    A generated or exported folder is used as it is; a MemTraceBench JSON file, or a folder of
    them, is imported and exported to a temporary folder that lives as long as the context.
    """
    folder = Path(path)
    if folder.is_dir() and (folder / "traces.jsonl").exists():
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="memtrace-mtb-") as tmp:
        export_source(open_source(str(folder), strict=False), tmp, overwrite=True)
        yield Path(tmp)

"""``memtrace bench memtracebench DIR --out OUT``: record a run as MemTraceBench files.

Records a ``memtrace bench generate`` directory with zjunlp's real ``smartcomment`` recorder (the
Python 3.12 environment ``make smartcomment`` creates), as the paper's MemBase harness records
its systems, our labels becoming ``data.annotations``. With ``--fidelity`` it then attributes the
run twice, on our spans and on the imported files, and prints how often the verdicts agree.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memtrace_bench.memtracebench import export_memtracebench
from memtrace_bench.methods import compare_recordings
from memtrace_otel.attribution import get_method, method_names
from memtrace_otel.errors import MemtraceError


def register(bench: Any) -> None:
    """Add ``bench memtracebench``."""
    p = bench.add_parser(
        "memtracebench",
        help="record a generated run as MemTraceBench files with the real smartcomment recorder",
        description=(
            "Record DIR (a `memtrace bench generate` output) with zjunlp's smartcomment 0.1.2 "
            "into OUT, one MemTraceBench file per memory store, annotated with DIR's labels. "
            "Needs the Python 3.12 environment of `make smartcomment` (or "
            "$MEMTRACE_SMARTCOMMENT_PYTHON)."
        ),
    )
    p.add_argument("directory", metavar="DIR", help="a `memtrace bench generate` directory")
    p.add_argument("--out", required=True, help="folder for the MemTraceBench files")
    p.add_argument(
        "--fidelity",
        action="store_true",
        help="attribute both recordings and report how often their verdicts agree",
    )
    p.add_argument("--method", choices=method_names(), default="evidence")
    p.add_argument("--json", dest="json_out", help="also write the fidelity report as JSON here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Record, and optionally compare; exit 1 when the recorder cannot run."""
    try:
        summary = export_memtracebench(args.directory, args.out)
    except (FileNotFoundError, MemtraceError) as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 1
    print(
        f"recorded {len(summary.files)} graphs ({summary.operations} operations, "
        f"{summary.annotations} annotations, {summary.annotations_skipped} labels without a "
        f"recorded op) -> {args.out}"
    )
    if not args.fidelity:
        return 0
    report = compare_recordings(args.directory, args.out, get_method(args.method))
    print(
        f"fidelity ({args.method}): {report.agree}/{report.annotated} annotated failures get the "
        f"same verdict on both recordings ({report.agreement:.1%}); {report.no_verdict_imported} "
        f"without a verdict on the imported files, {report.empty_reasons} of them without a reason"
    )
    for row in report.disagreements[:10]:
        print("  differs:", json.dumps(row, ensure_ascii=False))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return 0

"""The static HTML report of a batch run: see at a glance which op failed each case, and why.

:func:`write_report` writes a folder that opens from ``file://`` with no network: a summary
(failures by system, error type and op name; accuracy against labels when given), a sortable
list of failed cases, and per case its evolution subgraph drawn with Cytoscape.js (vendored, with
its licence, under ``assets/vendor``): ops and variables in execution order, the evidence path
highlighted, the culprit op marked, and a detail panel with values, attributes, times and links
to the span in Jaeger or Tempo. :func:`case_html` is one case as a single self-contained page
(``memtrace graph --format html``). ``docs/report.md`` describes the page.

>>> from memtrace_otel.graph import example_graph
>>> from memtrace_otel.reporting import case_view
>>> view = case_view(example_graph(), "c1")
>>> len(view["nodes"]) > 0 and view["missing"] is None
True
"""

from typing import TYPE_CHECKING, Any

from memtrace_otel._internal import lazy_names
from memtrace_otel.reporting._labels import Label, label_accuracy, load_labels
from memtrace_otel.reporting._links import check_base_url, jaeger_link, tempo_link
from memtrace_otel.reporting._view import (
    STAGE_ORDER,
    case_row,
    case_view,
    evidence_path,
    summary_data,
    verdict_data,
)

__all__ = [
    "STAGE_ORDER",
    "Label",
    "ReportViews",
    "case_html",
    "case_row",
    "case_view",
    "check_base_url",
    "evidence_path",
    "jaeger_link",
    "json_for_html",
    "label_accuracy",
    "load_labels",
    "summary_data",
    "tempo_link",
    "verdict_data",
    "write_report",
]

_HTML_NAMES = ("ReportViews", "case_html", "json_for_html", "write_report")

if TYPE_CHECKING:
    from memtrace_otel.reporting._html import ReportViews, case_html, json_for_html, write_report

# The page writer (jinja2 and its templates) is imported on first use: a run without a report
# (``memtrace attribute`` without ``--report``) reads labels and links from this package alone.
_lazy = lazy_names(__name__, {name: "memtrace_otel.reporting._html" for name in _HTML_NAMES})


def __getattr__(name: str) -> Any:
    return _lazy(name)

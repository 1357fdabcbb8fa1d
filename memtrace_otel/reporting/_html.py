"""Writing the static HTML report: ``index.html``, ``assets/`` and one ``cases/NNNN.js`` per case.

The report opens from ``file://`` with no network: scripts and styles are files next to
``index.html`` (or inlined, for the one-file case page), and data is JSON. Because memory values
are untrusted, every JSON block is escaped so that no value can close the ``<script>`` element
(``<``, ``>``, ``&``, U+2028 and U+2029 become ``\\uXXXX``), and the page's Content Security Policy
allows no inline script except the exact blocks written here. The page is rendered once by
Jinja2 with autoescaping (``templates/index.html``): no value is ever read as template text.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import networkx as nx

from memtrace_otel._internal import finite_json
from memtrace_otel.attribution import Case, Verdict
from memtrace_otel.job import CONTENT_NOTICE, BatchSummary, write_summary
from memtrace_otel.reporting._labels import Label, load_labels
from memtrace_otel.reporting._links import check_base_url
from memtrace_otel.reporting._view import (
    answer_times,
    case_row,
    case_view,
    short_id,
    store_timeline,
    summary_data,
    verdict_data,
)

__all__ = ["ReportViews", "case_html", "json_for_html", "write_report"]

_ASSET_FILES = ("report.js", "report.css")
_VENDOR_SCRIPTS = ("vendor/cytoscape.min.js", "vendor/cytoscape-dagre.min.js")
_CSP_FILES = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
)
_JSON_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def json_for_html(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element (and as a JavaScript literal).

    >>> json_for_html({"v": "</script><b>&"})
    '{"v":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026"}'
    """
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN or infinity that no loader refused (the live graph, a plugin)
        text = json.dumps(
            finite_json(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    return text.translate(_JSON_ESCAPES)


def _asset(name: str) -> bytes:
    return resources.files("memtrace_otel.reporting").joinpath("assets", name).read_bytes()


@functools.cache
def _template() -> jinja2.Template:
    """The page template, rendered by Jinja2 with autoescaping on.

    Rendering is one pass over the template: the values put into it (titles, case ids, memory
    values inside the JSON blocks) are never read as template text, whatever they contain.
    """
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("memtrace_otel.reporting", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return environment.get_template("index.html")


def _page(
    *,
    csp: str,
    title: str,
    data_blocks: Sequence[tuple[str, Any]],
    inline_style: str | None = None,
    script_files: Sequence[str] = (),
    inline_scripts: Sequence[str] = (),
) -> str:
    """The report page: ``data_blocks`` are ``(element id, data)`` pairs, written as JSON that
    cannot close its ``<script>`` element; everything else but the shipped style and scripts
    is escaped by the template."""
    return _template().render(
        csp=csp,
        title=title,
        inline_style=inline_style,
        data_blocks=[{"id": key, "json": json_for_html(data)} for key, data in data_blocks],
        script_files=list(script_files),
        inline_scripts=list(inline_scripts),
    )


@dataclass(frozen=True)
class ReportViews:
    """Draws a case's page from its store's graph while the batch job holds it (a streaming
    run never holds every graph, so the report is drawn as it goes, not by loading them all
    again). Picklable: executors ship it to their workers.

    Args:
        labels: ground-truth labels by case id, shown beside each verdict.
        jaeger_url: Jaeger UI base URL (checked), to link ops to their spans.
        tempo_url: Grafana base URL or Tempo link template (checked).

    The first page drawn of each store also carries the store's timeline (``timeline``, its
    report keys left for :func:`write_report` to fill in), so a streaming run's report has the
    per-store timelines an in-memory run draws from its graphs.
    """

    labels: Mapping[str, Label] | None = None
    jaeger_url: str | None = None
    tempo_url: str | None = None
    _timelines: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Store -> the case whose page carries its timeline (in this process; a page drawn again,
    by a second round, carries it again)."""

    def __call__(
        self, G: nx.MultiDiGraph, case_id: str, verdict: Verdict | None, case: Case | None
    ) -> dict[str, Any]:
        view = case_view(
            G,
            case_id,
            verdict,
            label=self.labels.get(case_id) if self.labels is not None else None,
            jaeger_url=self.jaeger_url,
            tempo_url=self.tempo_url,
            case=case,
        )
        view["answered"] = answer_times(G).get(case_id)  # the list's order, without the graph
        store = verdict.store_id if verdict is not None else None
        if store is not None and self._timelines.setdefault(store, case_id) == case_id:
            view[TIMELINE_KEY] = dict(store_timeline(G, {}), store=store)
        return view


TIMELINE_KEY = "timeline"
"""The key of a drawn case page (:class:`ReportViews`) that carries its store's timeline."""


def _key_width(count: int) -> int:
    return max(4, len(str(max(count - 1, 0))))


def _labels(labels: Mapping[str, Label] | str | os.PathLike[str] | None) -> dict[str, Label] | None:
    if labels is None:
        return None
    if isinstance(labels, str | os.PathLike):
        return load_labels(labels)
    return dict(labels)


def _unique(verdicts: Iterable[Verdict]) -> list[Verdict]:
    """One verdict per case (the last one written wins, as a rerun's would), in first-seen order."""
    last: dict[str, Verdict] = {}
    for verdict in verdicts:
        last[verdict.case_id] = verdict
    return list(last.values())


def write_report(
    out_dir: str | os.PathLike[str],
    verdicts: Iterable[Verdict],
    graphs: Mapping[str, nx.MultiDiGraph],
    summary: BatchSummary | Mapping[str, Any],
    *,
    labels: Mapping[str, Label] | str | os.PathLike[str] | None = None,
    jaeger_url: str | None = None,
    tempo_url: str | None = None,
    sources: Sequence[str] = (),
    title: str = "memtrace attribution report",
    cases: Mapping[str, Case] | None = None,
    views: Mapping[str, dict[str, Any]] | None = None,
    serve: Mapping[str, Any] | None = None,
) -> Path:
    """Write the static HTML report of a batch run into ``out_dir``.

    Writes ``index.html`` (summary and the list of failed cases), ``assets/`` (the page's script
    and style and the vendored Cytoscape.js with its licences), ``cases/NNNN.js`` (one case's
    graph each, loaded when the case is opened) and, for a :class:`BatchSummary`,
    ``summary.json`` and ``summary.md``. Files of an earlier report in ``out_dir`` are replaced.

    Args:
        out_dir: the report folder (created if missing).
        verdicts: the verdicts to list (one per case; a later verdict for a case wins).
        graphs: the store graphs (``load_store_graphs``); each verdict's case is cut from the
            graph of its ``store_id``.
        summary: the run's summary, or the content of a ``summary.json``.
        labels: ground-truth labels (or a ``labels.jsonl`` path) for accuracy and per-case checks.
        jaeger_url: Jaeger UI base URL, to link each op to its span.
        tempo_url: Grafana base URL (Tempo data source uid ``tempo``) or a link template with
            ``{trace_id}``/``{span_id}``, to link each op to its span.
        sources: the trace sources, shown in the header.
        title: the page title.
        cases: the failed cases by id (question, expected answer, feedback), shown first on
            each case's page; without them, what the traces captured.
        views: case pages already drawn by the run (:class:`ReportViews`, while each store's
            graph was in memory), by case id; ``graphs`` then serves only the other cases.
        serve: set by ``memtrace serve``: the page may then call its own server (reviews,
            reload); ``reviewable`` maps case ids to whether their verdict span was found.

    Returns:
        The path of ``index.html``.

    Raises:
        ValueError: a Jaeger or Tempo URL that is not http(s).
        DecodeError: a bad labels file.
    """
    jaeger = check_base_url(jaeger_url, "--jaeger-url") if jaeger_url else None
    tempo = check_base_url(tempo_url, "--tempo-url") if tempo_url else None
    label_map = _labels(labels)
    folder = Path(out_dir)
    (folder / "assets" / "vendor").mkdir(parents=True, exist_ok=True)
    cases_dir = folder / "cases"
    if cases_dir.is_dir():
        for stale in cases_dir.glob("*.js"):
            if re.fullmatch(r"[0-9]+\.js", stale.name):
                stale.unlink()
    cases_dir.mkdir(exist_ok=True)
    timelines_dir = folder / "timelines"
    if timelines_dir.is_dir():
        for stale in timelines_dir.glob("*.js"):
            if re.fullmatch(r"[0-9]+\.js", stale.name):
                stale.unlink()
    timelines_dir.mkdir(exist_ok=True)
    _copy_assets(folder / "assets")

    empty = nx.MultiDiGraph()
    # The list opens in answer order (then case id), and a case's key (#case=NNNN) is its place
    # in that order.
    times: dict[str, dict[str, int]] = {}

    def answered(verdict: Verdict) -> int | None:
        drawn = views.get(verdict.case_id) if views is not None else None
        if drawn is not None and "answered" in drawn:  # a streaming run drew it with its graph
            return drawn["answered"]  # type: ignore[no-any-return]
        store = verdict.store_id or ""
        if store not in times:
            times[store] = answer_times(graphs.get(store, empty))
        return times[store].get(verdict.case_id)

    # Timelines a streaming run drew with the stores' graphs (ReportViews), by store.
    drawn_timelines: dict[str, dict[str, Any]] = {}
    for drawn_view in (views or {}).values():
        timeline = drawn_view.get(TIMELINE_KEY)
        if timeline is not None:
            drawn_timelines.setdefault(str(timeline["store"]), timeline)

    answer_time = {v.case_id: answered(v) for v in _unique(verdicts)}
    chosen = sorted(
        _unique(verdicts),
        key=lambda v: (answer_time[v.case_id] or 1 << 62, v.case_id),
    )
    width = _key_width(len(chosen))
    rows = []
    for number, verdict in enumerate(chosen):
        key = f"{number:0{width}d}"
        label = label_map.get(verdict.case_id) if label_map is not None else None
        # Ops that name no store are grouped under "" by load_store_graphs.
        drawn = views.get(verdict.case_id) if views is not None else None
        if drawn is not None:
            data = verdict_data(verdict) or {}
            earlier = drawn.get("verdict") or {}
            # the reason naming records by their text, drawn while the graph was in memory
            data["reason_text"] = (
                earlier["reason_text"]
                if earlier.get("reason") == verdict.reason and "reason_text" in earlier
                else short_id(verdict.reason or "")
            )
            view = {k: v for k, v in drawn.items() if k != TIMELINE_KEY}
            view["verdict"] = data
        else:
            G = graphs.get(verdict.store_id or "", empty)
            view = case_view(
                G,
                verdict.case_id,
                verdict,
                label=label,
                jaeger_url=jaeger,
                tempo_url=tempo,
                case=cases.get(verdict.case_id) if cases is not None else None,
            )
        view["key"] = key
        (cases_dir / f"{key}.js").write_text(
            f"window.__memtraceCase({json_for_html(view)});\n", encoding="utf-8"
        )
        rows.append(
            case_row(
                key,
                verdict,
                label,
                len(view["nodes"]) or None,
                view=view,
                answered=answer_time[verdict.case_id],
            )
        )

    # One timeline per store with a failed case: its writes, reads and answers in time order.
    stores: dict[str, dict[str, str]] = {}
    for row, verdict in zip(rows, chosen, strict=True):
        stores.setdefault(verdict.store_id or "", {})[verdict.case_id] = row["key"]
    timeline_index = []
    for number, (store, failed) in enumerate(sorted(stores.items())):
        tkey = f"{number:0{_key_width(len(stores))}d}"
        drawn_timeline = drawn_timelines.get(store)
        if store in graphs or drawn_timeline is None:
            timeline = store_timeline(graphs.get(store, empty), failed)
        else:  # drawn while the store's graph was held; the failed answers' keys are known now
            timeline = {
                **drawn_timeline,
                "events": [
                    {**e, "key": failed.get(str(e["case"])) if e["case"] is not None else None}
                    for e in drawn_timeline["events"]
                ],
            }
        timeline.update(key=tkey, store=store)
        (timelines_dir / f"{tkey}.js").write_text(
            f"window.__memtraceTimeline({json_for_html(timeline)});\n", encoding="utf-8"
        )
        timeline_index.append(
            {
                "key": tkey,
                "store": store,
                "failed": len(failed),
                "events": len(timeline["events"]) + timeline["omitted"],
            }
        )

    if _resolved_content(summary):
        title = f"{title}: CONTAINS CONTENT. {CONTENT_NOTICE}"
    data = {
        "title": title,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "sources": list(sources),
        "single": False,
        "summary": summary_data(summary, chosen, label_map),
        "cases": rows,
        "timelines": timeline_index,
        "serve": dict(serve) if serve is not None else None,
    }
    page = _page(
        # Served by `memtrace serve`, the page talks to its own origin (reviews); never elsewhere.
        csp=_CSP_FILES.replace("connect-src 'none'", "connect-src 'self'") if serve else _CSP_FILES,
        title=title,
        data_blocks=[("memtrace-report", data)],
        script_files=[*_VENDOR_SCRIPTS, "report.js"],
    )
    index = folder / "index.html"
    index.write_text(page, encoding="utf-8")
    if isinstance(summary, BatchSummary):
        write_summary(summary, folder)
    return index


def _resolved_content(summary: BatchSummary | Mapping[str, Any]) -> bool:
    if isinstance(summary, BatchSummary):
        return summary.resolved_content
    content = summary.get("content") or {}
    return bool(content.get("resolved") or content.get("upstream"))


def _copy_assets(target: Path) -> None:
    root = resources.files("memtrace_otel.reporting").joinpath("assets")
    for name in _ASSET_FILES:
        (target / name).write_bytes(root.joinpath(name).read_bytes())
    vendor = root.joinpath("vendor")
    for item in vendor.iterdir():
        if item.is_file():
            (target / "vendor" / item.name).write_bytes(item.read_bytes())


def _inline_script(source: str) -> str:
    # Only these two sequences can end or confuse a script element's content; neither is in
    # the shipped files, and escaping them keeps the JavaScript's meaning.
    source = re.sub(r"</(script)", r"<\\/\1", source, flags=re.IGNORECASE)
    return source.replace("<!--", "<\\!--")


def _sha256(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def case_html(
    view: Mapping[str, Any],
    *,
    verdict: Verdict | None = None,
    title: str | None = None,
) -> str:
    """One case as a single self-contained HTML page (scripts, style and data inlined).

    Args:
        view: the case's :func:`case_view`.
        verdict: its verdict, for the (one-line) case list behind the page.
        title: the page title (default: ``memtrace case <id>``).

    >>> from memtrace_otel.graph import example_graph
    >>> from memtrace_otel.reporting import case_view
    >>> page = case_html(case_view(example_graph(), "c1"))
    >>> page.startswith("<!DOCTYPE html>"), "cdn" in page.lower()
    (True, False)
    """
    case_id = str(view.get("case_id", ""))
    key = "0000"
    data_view = dict(view)
    data_view["key"] = key
    summary = BatchSummary()
    if verdict is not None:
        summary.cases = 1
        summary.add(verdict)
    row = case_row(
        key, verdict, None, len(view.get("nodes", ())) or None, case_id=case_id, view=view
    )
    page_title = title or f"memtrace case {case_id}"
    data = {
        "title": page_title,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "sources": [],
        "single": True,
        "summary": summary_data(summary, [verdict] if verdict else [], None),
        "cases": [row],
        "timelines": [],
        "serve": None,
    }
    scripts = [
        _inline_script(_asset(name).decode("utf-8")) for name in (*_VENDOR_SCRIPTS, "report.js")
    ]
    csp = (
        "default-src 'none'; script-src "
        + " ".join(_sha256(s) for s in scripts)
        + "; style-src 'unsafe-inline'; img-src data:; connect-src 'none'; base-uri 'none'; "
        "form-action 'none'"
    )
    css = _asset("report.css").decode("utf-8")
    return _page(
        csp=csp,
        title=page_title,
        data_blocks=[("memtrace-report", data), (f"memtrace-case-{key}", data_view)],
        inline_style=css,
        inline_scripts=scripts,
    )

"""What the report shows, as plain JSON-ready data: the case list and one case's graph view.

Nothing here knows about HTML. The browser side (``assets/report.js``) draws exactly these
dictionaries, so tests can check the data without a browser and the browser tests only check the
drawing.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

import networkx as nx

from memtrace_otel._shim import nodes_of, pred_of, succ_of
from memtrace_otel.attribution import Case, Verdict
from memtrace_otel.errors import GraphError
from memtrace_otel.graph import READ, WRITE, case_subgraph, execution_order, graph_index
from memtrace_otel.job import BatchSummary
from memtrace_otel.reporting._labels import Label, label_accuracy
from memtrace_otel.reporting._links import jaeger_link, tempo_link
from memtrace_otel.semconv import Stage

__all__ = [
    "MAX_CASE_PAGE_BYTES",
    "MAX_FEEDBACK_LISTED",
    "STAGE_ORDER",
    "answer_times",
    "case_row",
    "case_view",
    "evidence_path",
    "question_data",
    "readable_reason",
    "short_id",
    "store_timeline",
    "summary_data",
    "verdict_data",
]

INPUT_STAGE = "input"
"""Stage of variables no loaded op wrote (messages, questions, gold answers)."""
OTHER_STAGE = "other"
STAGE_ORDER: tuple[str, ...] = (
    INPUT_STAGE,
    Stage.CONSTRUCTION.value,
    Stage.RETRIEVAL.value,
    Stage.RESPONSE.value,
    Stage.EVALUATION.value,
    OTHER_STAGE,
)
"""Stages in the order a pipeline runs them; the graph view collapses nodes by these."""

TIMELINE_MAX_EVENTS = 400
"""The newest events per store the timeline shows (the rest are counted)."""

MAX_VALUE_CHARS = 4000
"""Longer values are cut in the report (the full value stays in the traces)."""
MAX_CASE_PAGE_BYTES = 5_000_000
"""About the largest case page (its ``cases/NNNN.js``): beyond it the graph is collapsed to the
nodes that matter most (the culprit, the evidence path, the question's ops, then the nearest in
execution order) and the page states what was left out (``view["cut"]``)."""
MAX_FEEDBACK_LISTED = 50
"""The most feedback listed on a case's page: the latest ones (the deciding one last); the
earlier ones are counted (``feedback_omitted``)."""
_EXCERPT_CHARS = 48


def evidence_path(G: nx.MultiDiGraph, verdict: Verdict | None) -> list[str]:
    """The nodes on some path from the verdict's evidence to its culprit op, in execution order.

    That is the trail the evidence took until the op that lost it. Without a culprit in ``G``
    it is just the evidence variables found in ``G``.

    >>> from memtrace_otel.graph import example_graph
    >>> v = Verdict("c1", "UpdateError", "b000000000000002", "merge", "evidence", 1.0,
    ...             evidence_refs=("msg:1@1",))
    >>> evidence_path(example_graph(), v)
    ['msg:1@1', 'a000000000000002', 'fact:1@1', 'a000000000000003', 'mem:1@1', 'b000000000000002']
    """
    if verdict is None:
        return []
    sources = [ref for ref in verdict.evidence_refs if ref in G]
    culprit = verdict.op_id
    if culprit is None or culprit not in G:
        return execution_order(G, sources)
    # One shortest trail from each evidence variable to the culprit, walking forward only
    # through the culprit's ancestors. Every node on any such path would be the evidence's whole
    # downstream in a long-lived store (hundreds of nodes): a trail a person can follow is one
    # chain per piece of evidence.
    allowed = nx.ancestors(G, culprit)
    allowed.add(culprit)
    keep: set[str] = set()
    for ref in sources:
        if ref not in allowed:
            continue
        previous: dict[str, str | None] = {ref: None}
        frontier = [ref]
        while frontier and culprit not in previous:
            following = []
            for node in frontier:
                for n in sorted(succ_of(G)[node]):
                    if n in allowed and n not in previous:
                        previous[n] = node
                        following.append(n)
            frontier = following
        step: str | None = culprit if culprit in previous else None
        while step is not None:
            keep.add(step)
            step = previous[step]
    if culprit not in keep:
        return execution_order(G, [*sources, culprit])
    return execution_order(G, keep)


def _iso(ns: Any) -> str | None:
    if not isinstance(ns, int) or ns <= 0:
        return None
    moment = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _cut(value: Any) -> tuple[Any, bool]:
    """A value for the report and whether it was cut short."""
    if value is None or isinstance(value, bool | int | float):
        return value, False
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= MAX_VALUE_CHARS:
        return text, False
    return text[:MAX_VALUE_CHARS], True


def _excerpt_long(value: Any, limit: int = 200) -> str | None:
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _excerpt(value: Any) -> str:
    if value is None:
        return ""
    text = " ".join(str(value).split())
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 1] + "…"


def _plain(value: Any) -> Any:
    """``value`` as something ``json.dumps`` writes (tuples, sets and odd objects included)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _op_node(
    G: nx.MultiDiGraph,
    node: str,
    data: Mapping[str, Any],
    *,
    jaeger_url: str | None,
    tempo_url: str | None,
) -> dict[str, Any]:
    start, end = data.get("start"), data.get("end")
    duration = (end - start) / 1e6 if isinstance(start, int) and isinstance(end, int) else None
    inputs = execution_order(G, [ref for ref in pred_of(G)[node] if READ in pred_of(G)[node][ref]])
    outputs = execution_order(
        G, [ref for ref in succ_of(G)[node] if WRITE in succ_of(G)[node][ref]]
    )
    # What the op itself recorded about a variable can differ from the variable's own value
    # (a reader saw an older copy, or only the reader captured content): keep it when it does.
    seen: dict[str, Any] = {}
    for ref in inputs:
        event = pred_of(G)[node][ref][READ]
        if event.get("value") is not None and event.get("value") != nodes_of(G)[ref].get("value"):
            seen[ref] = _cut(event["value"])[0]
    for ref in outputs:
        event = succ_of(G)[node][ref][WRITE]
        if event.get("value") is not None and event.get("value") != nodes_of(G)[ref].get("value"):
            seen[ref] = _cut(event["value"])[0]
    trace_id, span_id = str(data.get("trace_id") or ""), str(data.get("span_id") or node)
    links: dict[str, str] = {}
    if trace_id:
        if jaeger_url:
            links["jaeger"] = jaeger_link(jaeger_url, trace_id, span_id)
        if tempo_url:
            links["tempo"] = tempo_link(
                tempo_url,
                trace_id,
                span_id,
                start_ms=start // 1_000_000 if isinstance(start, int) else None,
                end_ms=end // 1_000_000 if isinstance(end, int) else None,
            )
    name = str(data.get("name") or data.get("span_name") or node)
    return {
        "id": node,
        "type": "op",
        "label": f"{name}\n({data.get('kind')})",
        "kind": data.get("kind"),
        "name": name,
        "span_name": data.get("span_name"),
        "stage": data.get("stage") or OTHER_STAGE,
        "status": data.get("status"),
        "system": data.get("system"),
        "store": data.get("store"),
        "case": data.get("case"),
        "prompt_ref": data.get("prompt_ref"),
        "judge_verdict": data.get("judge_verdict"),
        "service": data.get("service"),
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": data.get("parent_span_id"),
        "start": _iso(start),
        "end": _iso(end),
        "duration_ms": duration,
        "inputs": inputs,
        "outputs": outputs,
        "seen": seen,
        "attributes": _plain(data.get("attributes") or {}),
        "links": links,
    }


def _variable_node(G: nx.MultiDiGraph, node: str, data: Mapping[str, Any]) -> dict[str, Any]:
    value, cut = _cut(data.get("value"))
    writer = data.get("writer")
    readers = execution_order(G, [op for op in succ_of(G)[node] if READ in succ_of(G)[node][op]])
    if writer is not None and writer in G:
        stage = nodes_of(G)[writer].get("stage") or OTHER_STAGE
    else:
        stage = INPUT_STAGE
    excerpt = _excerpt(data.get("value"))
    if data.get("deleted"):
        excerpt = "(deleted)"
    return {
        "id": node,
        "type": "variable",
        "label": node + ("\n" + excerpt if excerpt else ""),
        "var_id": data.get("id"),
        "version": data.get("version"),
        "category": data.get("category"),
        "stage": stage,
        "value": value,
        "value_cut": cut,
        "digest": data.get("digest"),
        "truncated": bool(data.get("truncated")),
        "deleted": bool(data.get("deleted")),
        "external": bool(data.get("external")),
        "meta": _plain(data.get("meta")),
        "writer": writer,
        "readers": readers,
        "time": _iso(data.get("time")),
    }


def verdict_data(verdict: Verdict | None) -> dict[str, Any] | None:
    """A verdict as plain data (lists instead of tuples)."""
    return _plain(asdict(verdict)) if verdict is not None else None


def question_data(G: nx.MultiDiGraph, case_id: str, case: Case | None = None) -> dict[str, Any]:
    """What a person asks first about a failed case: the question, the expected and the given
    answer, and the feedback that flagged it.

    Taken from ``case`` (a cases-file line or a case flagged by feedback) where it says, else from
    the values the traces captured; ``None`` where neither knows (values not captured). Every
    string is data: the page escapes it.

    >>> from memtrace_otel.graph import example_graph
    >>> sorted(question_data(example_graph(), "c1"))
    ['expected', 'feedback', 'feedback_omitted', 'prediction', 'question', 'source']
    """
    found = graph_index(G).case_from_graph(case_id) if case_id else None
    question = (case.question if case is not None else "") or (found.question if found else "")
    expected = (case.gold_answers if case is not None else ()) or (
        found.gold_answers if found else ()
    )
    prediction = (case.prediction if case is not None else None) or (
        found.prediction if found else None
    )
    feedback = case.feedback if case is not None else ()
    listed = feedback[-MAX_FEEDBACK_LISTED:]
    return {
        "question": question or None,
        "expected": list(expected),
        "prediction": prediction,
        "feedback": [_plain(o.to_json()) for o in listed],
        "feedback_omitted": len(feedback) - len(listed),
        "source": case.source if case is not None else None,
    }


def case_view(
    G: nx.MultiDiGraph,
    case_id: str,
    verdict: Verdict | None = None,
    *,
    label: Label | None = None,
    jaeger_url: str | None = None,
    tempo_url: str | None = None,
    case: Case | None = None,
    max_bytes: int = MAX_CASE_PAGE_BYTES,
) -> dict[str, Any]:
    """Everything the report draws for one case.

    Args:
        G: the store's evolution graph (the whole graph; the case's subgraph is cut from it).
        case_id: the case.
        verdict: its verdict, to mark the culprit and the evidence path.
        label: its ground-truth label, shown beside the verdict.
        jaeger_url: base URL of Jaeger's UI, for links from ops to their spans.
        tempo_url: Grafana base URL or Tempo link template (see :func:`tempo_link`).
        case: the failed case as the batch job saw it (question, expected answer, feedback).
        max_bytes: about the largest view (JSON bytes); beyond it the graph is collapsed and
            ``cut`` says what was left out (see :data:`MAX_CASE_PAGE_BYTES`).

    The nodes are the case's subgraph (:func:`~memtrace_otel.graph.case_subgraph`), plus the
    culprit op with what it read and wrote and the evidence path to it when they lie outside
    (a deletion's tombstone is read by no later op, so the answer does not depend on it).

    Returns:
        ``case_id``, ``question`` (:func:`question_data`), ``verdict``, ``label``, ``nodes`` (execution order, each with ``order``,
        ``stage``, ``culprit``, ``path`` and ``focus`` flags and its details), ``edges``
        (``source``, ``target``, ``key``), ``stages`` (present, in pipeline order),
        ``anomalies``, ``missing`` (why there is no graph, else ``None``) and ``cut`` (what a
        page bound left out, else ``None``).

    >>> from memtrace_otel.graph import example_graph
    >>> v = Verdict("c1", "UpdateError", "b000000000000002", "merge", "evidence", 1.0,
    ...             evidence_refs=("msg:1@1",))
    >>> view = case_view(example_graph(), "c1", v)
    >>> [n["id"] for n in view["nodes"] if n["culprit"]], view["stages"][:2]
    (['b000000000000002'], ['input', 'construction'])
    """
    view: dict[str, Any] = {
        "case_id": case_id,
        "question": question_data(G, case_id, case),
        "verdict": verdict_data(verdict),
        "label": label.to_json() if label is not None else None,
        "nodes": [],
        "edges": [],
        "stages": [],
        "anomalies": [],
        "missing": None,
        "cut": None,
    }
    try:
        H = case_subgraph(G, case_id)
    except GraphError as exc:
        view["missing"] = f"no graph for this case: {exc}"
        return view
    culprit = verdict.op_id if verdict is not None else None
    # The trail is found on the store's graph: the culprit need not be upstream of the answer
    # (a deletion wrote a tombstone no later op read). Add it, with what the culprit read and
    # wrote, so the page can show it.
    path = set(evidence_path(G, verdict))
    extra = set(path)
    if culprit is not None and culprit in G:
        extra.add(culprit)
        extra.update(pred_of(G)[culprit])
        extra.update(succ_of(G)[culprit])
    if not extra <= set(H):
        graph = H.graph
        H = G.subgraph(set(H) | extra).copy()
        H.graph = graph
    case_ops = [
        n for n, d in nodes_of(H).items() if d.get("type") == "op" and d.get("case") == case_id
    ]
    # Nodes that stay visible when their stage is collapsed: the trail to the culprit, and the
    # question's own ops with what they wrote and the external inputs they read.
    focus = set(path) | set(case_ops)
    for op in case_ops:
        focus.update(ref for ref in succ_of(H)[op] if WRITE in succ_of(H)[op][ref])
        focus.update(
            ref
            for ref in pred_of(H)[op]
            if READ in pred_of(H)[op][ref] and nodes_of(H)[ref].get("writer") is None
        )
    if culprit is not None:
        focus.add(culprit)
    # What the graph opens on: the evidence path, the culprit, and the answer (the question's
    # last op and what it wrote); everything else folds into counted groups per stage.
    core = set(path)
    if culprit is not None and culprit in H:
        core.add(culprit)
    answer_ops = execution_order(H, case_ops)[-1:]
    for op in answer_ops:
        core.add(op)
        core.update(ref for ref in succ_of(H)[op] if WRITE in succ_of(H)[op][ref])
    nodes = []
    for order, node in enumerate(execution_order(H)):
        data = nodes_of(H)[node]
        if data.get("type") == "op":
            item = _op_node(H, node, data, jaeger_url=jaeger_url, tempo_url=tempo_url)
        else:
            item = _variable_node(H, node, data)
        item["order"] = order
        item["culprit"] = node == culprit
        item["path"] = node in path
        item["focus"] = node in focus
        item["core"] = node in core
        nodes.append(item)
    view["nodes"] = nodes
    view["edges"] = [
        {"source": u, "target": v, "key": key}
        for u, v, key in sorted(H.edges(keys=True), key=lambda e: (e[0], e[1], str(e[2])))
    ]
    present = {n["stage"] for n in nodes}
    view["stages"] = [s for s in STAGE_ORDER if s in present] + sorted(present - set(STAGE_ORDER))
    view["anomalies"] = _plain(H.graph.get("anomalies", []))
    if view["verdict"] is not None:
        view["verdict"]["reason_text"] = readable_reason(verdict.reason if verdict else "", H)
    _bound(view, max_bytes)
    return view


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def _bound(view: dict[str, Any], max_bytes: int) -> None:
    """Collapse ``view``'s graph to about ``max_bytes`` of JSON, keeping the nodes that matter
    most, and say so in ``view["cut"]`` (``None`` when nothing was cut)."""
    view["cut"] = None
    total = _size(view)
    if total <= max_bytes:
        return
    nodes: list[dict[str, Any]] = view["nodes"]
    sizes = {n["id"]: _size(n) + 1 for n in nodes}
    edge_bytes = _size(view["edges"])
    fixed = total - sum(sizes.values()) - edge_bytes
    per_edge = edge_bytes / max(1, len(view["edges"]))
    degree: dict[str, int] = {}
    for edge in view["edges"]:
        degree[edge["source"]] = degree.get(edge["source"], 0) + 1
        degree[edge["target"]] = degree.get(edge["target"], 0) + 1
    anchor = next((n["order"] for n in nodes if n["culprit"]), len(nodes))

    def rank(node: dict[str, Any]) -> tuple[int, int]:
        level = 0 if node["culprit"] else 1 if node["path"] else 2 if node["focus"] else 3
        return level, abs(node["order"] - anchor)

    budget: float = max_bytes - fixed - 400  # room for the note below
    kept: set[str] = set()
    for node in sorted(nodes, key=rank):
        cost = sizes[node["id"]] + per_edge * degree.get(node["id"], 0)
        if cost <= budget:
            kept.add(node["id"])
            budget -= cost
    view["nodes"] = [n for n in nodes if n["id"] in kept]
    edges = view["edges"]
    view["edges"] = [e for e in edges if e["source"] in kept and e["target"] in kept]
    view["cut"] = {
        "nodes_shown": len(view["nodes"]),
        "nodes": len(nodes),
        "edges_shown": len(view["edges"]),
        "edges": len(edges),
        "bytes": total,
        "max_bytes": max_bytes,
        "reason": (
            f"this case's graph ({len(nodes)} nodes, {total:,} bytes) is larger than the page "
            f"bound ({max_bytes:,} bytes): {len(nodes) - len(view['nodes'])} nodes left out, the "
            "culprit, the evidence path and the question's ops kept first, then the nodes "
            "nearest the culprit; the traces hold the whole graph (memtrace graph)"
        ),
    }
    present = {n["stage"] for n in view["nodes"]}
    view["stages"] = [s for s in view["stages"] if s in present]


_LONG_HEX = re.compile(r"[0-9a-f]{12,}")


def short_id(text: str) -> str:
    """``text`` with every run of 12 or more hex digits cut to its first 8 and an ellipsis (trace
    ids as case ids, digests in refs), for display; the full id stays in the data.

    >>> short_id("0af7651916cd43dd8448eb211c80319c"), short_id("msg:bd3f00aa11223344@1")
    ('0af76519…', 'msg:bd3f00aa…@1')
    """
    return _LONG_HEX.sub(lambda m: m.group(0)[:8] + "…", text)


def _record_label(data: Mapping[str, Any], ref: str) -> str:
    """How a reason names a record: its text when captured, else a short readable label."""
    if data.get("deleted"):
        return f"(deleted) {short_id(ref)}"
    value = data.get("value")
    if value is not None:
        text = " ".join(str(value).split())
        text = text if len(text) <= 80 else text[:79] + "…"
        return f"“{text}” ({short_id(ref)})"
    return f"{data.get('category') or 'record'} {short_id(ref)}"


_REF_TOKEN = re.compile(r"[^\s,;()\[\]\"'“”]+@\d+")


def readable_reason(reason: str, G: nx.MultiDiGraph) -> str:
    """``reason`` with each variable ref it names (``msg:…@1``) replaced by the record's text
    (or, where content was not captured, its category and a short id), for the local report.

    Only this report's copy changes: the verdict and its written-back span keep the refs, so no
    content reaches telemetry that capture did not already put there.

    >>> from memtrace_otel.graph import example_graph
    >>> readable_reason("it dropped msg:1@1.", example_graph())
    'it dropped “I moved to Porto” (msg:1@1).'
    """
    if not reason:
        return reason

    def name(match: re.Match[str]) -> str:
        ref = match.group(0)
        bare = ref.rstrip(".:")
        if bare in G and nodes_of(G)[bare].get("type") == "variable":
            return _record_label(nodes_of(G)[bare], bare) + ref[len(bare) :]
        return short_id(ref)

    return _REF_TOKEN.sub(name, reason)


def answer_times(G: nx.MultiDiGraph) -> dict[str, int]:
    """When each case of ``G`` was answered: the latest end of its ops (ns since the epoch)."""
    times: dict[str, int] = {}
    for data in nodes_of(G).values():
        case, end = data.get("case"), data.get("end")
        if data.get("type") == "op" and case is not None and isinstance(end, int):
            times[str(case)] = max(end, times.get(str(case), 0))
    return times


_WRITE_KINDS = {"ingest", "extract", "create", "update", "delete"}
_READ_KINDS = {"retrieve", "filter", "assemble"}


def store_timeline(
    G: nx.MultiDiGraph,
    failed: Mapping[str, str],
    *,
    limit: int = TIMELINE_MAX_EVENTS,
) -> dict[str, Any]:
    """One store's history in time order: its writes, reads and answers, each answer marked when
    it failed (``failed``: case id -> report key), grouped by trace (a session or request).

    Returns ``{"events": [...], "omitted": n}``: the newest ``limit`` events, each ``time``,
    ``kind``, ``role`` (``write``/``read``/``answer``/``judge``), ``name``, ``case``, ``key``
    (the failed case's report key, else ``None``), ``trace`` (short), ``what`` (an excerpt of
    what the op wrote, when captured).
    """
    events = []
    for node, data in nodes_of(G).items():
        if data.get("type") != "op":
            continue
        kind = str(data.get("kind") or "")
        role = (
            "write"
            if kind in _WRITE_KINDS
            else "read"
            if kind in _READ_KINDS
            else "answer"
            if kind == "generate"
            else "judge"
            if kind == "judge"
            else ""
        )
        if not role:
            continue
        outputs = [r for r in succ_of(G)[node] if WRITE in succ_of(G)[node][r]]
        what = next(
            (
                _excerpt(nodes_of(G)[r].get("value"))
                for r in outputs
                if nodes_of(G)[r].get("value") is not None
            ),
            "",
        )
        case = data.get("case")
        events.append(
            (
                data.get("start") or 0,
                {
                    "time": _iso(data.get("start")),
                    "kind": kind,
                    "role": role,
                    "name": str(data.get("name") or node),
                    "case": case,
                    "key": failed.get(str(case)) if case is not None else None,
                    "trace": short_id(str(data.get("trace_id") or "")),
                    "op": node,
                    "what": what,
                },
            )
        )
    events.sort(key=lambda e: (e[0], e[1]["op"]))
    omitted = max(0, len(events) - limit)
    return {"events": [e for _, e in events[omitted:]], "omitted": omitted}


def case_row(
    key: str,
    verdict: Verdict | None,
    label: Label | None,
    nodes: int | None,
    *,
    case_id: str = "",
    view: Mapping[str, Any] | None = None,
    answered: int | None = None,
) -> dict[str, Any]:
    """One line of the report's list of failed cases (``case_id`` is used without a verdict).

    With the case's ``view`` (:func:`case_view`), the row also carries what a person reads
    first: the question, the answer given and the expected answer, and the reason with records
    named by their text; ``answered`` is when the case was answered (ns).
    """
    question = (view or {}).get("question") or {}
    shown_verdict = (view or {}).get("verdict") or {}
    full_id = verdict.case_id if verdict is not None else case_id
    row: dict[str, Any] = {
        "key": key,
        "case_id": full_id,
        "case_short": short_id(full_id),
        "answered": _iso(answered),
        "question": question.get("question"),
        "prediction": _excerpt_long(question.get("prediction")),
        "expected": " | ".join(str(e) for e in question.get("expected") or []) or None,
        "reason_text": shown_verdict.get("reason_text")
        or (verdict.reason if verdict is not None else ""),
        "system": (verdict.system if verdict is not None else None) or "?",
        "store": verdict.store_id if verdict is not None else None,
        "error_type": verdict.error_type if verdict is not None else None,
        "op_name": verdict.op_name if verdict is not None else None,
        "op_id": verdict.op_id if verdict is not None else None,
        "confidence": verdict.confidence if verdict is not None else None,
        "method": verdict.method if verdict is not None else None,
        "reason": verdict.reason if verdict is not None else "",
        "nodes": nodes,
        "label_error_type": None,
        "label_op_id": None,
        "type_match": None,
        "op_match": None,
    }
    if label is not None:
        predicted = row["error_type"]
        row["label_error_type"] = label.error_type
        row["label_op_id"] = label.op_id
        row["type_match"] = predicted is not None and predicted == label.error_type
        row["op_match"] = row["op_id"] == label.op_id if label.op_id is not None else None
    return row


def summary_data(
    summary: BatchSummary | Mapping[str, Any],
    verdicts: Iterable[Verdict],
    labels: Mapping[str, Label] | None,
) -> dict[str, Any]:
    """The report's summary block: ``summary.json``'s content plus accuracy against labels."""
    data = summary.to_json() if isinstance(summary, BatchSummary) else dict(summary)
    data = _plain(data)
    data["accuracy"] = label_accuracy(verdicts, labels) if labels is not None else None
    return dict(data)

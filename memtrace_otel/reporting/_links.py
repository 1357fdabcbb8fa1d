"""Deep links from an op to its span in Jaeger's UI and in Grafana's Tempo view."""

from __future__ import annotations

import json
from urllib.parse import quote, urlsplit

__all__ = ["check_base_url", "jaeger_link", "tempo_link"]

TEMPO_DATASOURCE_UID = "tempo"
"""The uid of the Tempo data source in Grafana (as provisioned by ``deploy/grafana``)."""

_HOUR_MS = 3_600_000


def check_base_url(url: str, option: str) -> str:
    """``url`` without a trailing slash, after checking it is an absolute http(s) URL.

    Raises:
        ValueError: not an ``http://`` or ``https://`` URL with a host.

    >>> check_base_url("http://localhost:16686/", "--jaeger-url")
    'http://localhost:16686'
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{option} must be an http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


def jaeger_link(base: str, trace_id: str, span_id: str) -> str:
    """The Jaeger UI page of a trace with the span found and highlighted.

    >>> jaeger_link("http://localhost:16686", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    'http://localhost:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736?uiFind=00f067aa0ba902b7'
    """
    return f"{base.rstrip('/')}/trace/{quote(trace_id, safe='')}?uiFind={quote(span_id, safe='')}"


def tempo_link(
    base: str,
    trace_id: str,
    span_id: str,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> str:
    """A link to a span in Tempo.

    Tempo has no UI of its own, so ``base`` is either a template holding ``{trace_id}`` (and
    optionally ``{span_id}``), filled in as is, or the base URL of a Grafana whose Tempo data
    source has uid ``tempo``: the link opens Explore on the trace with the span in focus, over a
    time range around the span (an hour either side) so Grafana finds the trace.

    >>> tempo_link("http://tempo:3200/api/traces/{trace_id}", "ab", "cd")
    'http://tempo:3200/api/traces/ab'
    >>> tempo_link("http://localhost:3000", "ab", "cd").startswith(
    ...     "http://localhost:3000/explore?schemaVersion=1&panes=")
    True
    """
    trace, span = quote(trace_id, safe=""), quote(span_id, safe="")
    if "{trace_id}" in base:
        return base.replace("{trace_id}", trace).replace("{span_id}", span)
    time_range = {"from": "now-7d", "to": "now"}
    if start_ms is not None:
        time_range = {
            "from": str(start_ms - _HOUR_MS),
            "to": str((end_ms if end_ms is not None else start_ms) + _HOUR_MS),
        }
    pane = {
        "datasource": TEMPO_DATASOURCE_UID,
        "queries": [
            {
                "refId": "A",
                "datasource": {"type": "tempo", "uid": TEMPO_DATASOURCE_UID},
                "queryType": "traceql",
                "query": trace_id,
            }
        ],
        "range": time_range,
        "panelsState": {"trace": {"spanId": span_id}},
    }
    panes = quote(json.dumps({"memtrace": pane}, separators=(",", ":")), safe="")
    return f"{base.rstrip('/')}/explore?schemaVersion=1&panes={panes}&orgId=1"

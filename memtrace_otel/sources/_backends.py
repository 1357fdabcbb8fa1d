"""Live backends: Jaeger's query API (api_v3, v1 as fallback) and Tempo's HTTP API.

Both sources search (or take trace ids), fetch whole traces, and then follow span links to the
other traces a case's graph needs (a memory written while ingesting one session is read in
another trace), breadth-first, up to ``follow_links`` hops and ``max_traces`` traces.

Neither API pages its search: each answers at most ``limit`` traces. So the window is searched in
time slices: a slice that comes back full (``limit`` traces) is split in two and searched again,
until every slice holds fewer than ``limit`` traces, i.e. until the window is exhausted. The
whole source stops at ``max_traces`` traces (search and links together); when it does,
``stats.capped`` says so and names the option that raises the bound.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import urllib.parse
from abc import abstractmethod
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from memtrace_otel.errors import BackendError
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.sources._common import Bad, padded_hex_id
from memtrace_otel.sources._documents import decode_value
from memtrace_otel.sources._http import HttpClient, HttpOptions, Response
from memtrace_otel.sources._source import DEFAULT_DEDUPE_WINDOW, Source

DEFAULT_LOOKBACK = "24h"
DEFAULT_LIMIT = 100
"""Traces one search request asks for (a page): full slices are split, never cut."""
DEFAULT_FOLLOW_LINKS = 3
DEFAULT_MAX_TRACES = 20_000
"""The bound on traces one live source loads (search and links); reaching it is reported."""
MAX_TRACES_HINT = "raise it with --max-traces N (or max_traces=N in the source URL)"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """A duration such as ``90s``, ``30m``, ``1h30m``, ``2d`` in seconds.

    Raises:
        ValueError: not a duration.

    >>> parse_duration("1h30m"), parse_duration("250ms")
    (5400.0, 0.25)
    """
    text = text.strip()
    pos = 0
    total = 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}: expected e.g. 30m, 2h, 1d")
    return total


def parse_time(value: str | int | float | datetime) -> float:
    """A point in time (RFC 3339, unix seconds, or a datetime) as unix seconds.

    Raises:
        ValueError: not a time.

    >>> parse_time("2024-01-02T03:04:05Z"), parse_time(1700000000)
    (1704164645.0, 1700000000.0)
    """
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.timestamp()
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"invalid time {value!r}: expected RFC 3339 or unix seconds") from None
    return parse_time(moment)


def _rfc3339(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


def _trace_id(value: str) -> str:
    try:
        return padded_hex_id(value, 32, "trace_id")
    except Bad as bad:
        raise ValueError(f"invalid trace id {value!r}: {bad.reason}") from None


class _BackendSource(Source):
    """Search or take ids, fetch traces, follow links; subclasses speak one API."""

    kind = "backend"

    def __init__(
        self,
        url: str,
        *,
        trace_ids: Sequence[str] = (),
        start: str | int | float | datetime | None = None,
        end: str | int | float | datetime | None = None,
        lookback: str = DEFAULT_LOOKBACK,
        limit: int = DEFAULT_LIMIT,
        follow_links: int = DEFAULT_FOLLOW_LINKS,
        max_traces: int = DEFAULT_MAX_TRACES,
        http: HttpOptions | None = None,
        strict: bool = False,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        max_attribute_bytes: int | None = None,
        max_array_items: int | None = None,
    ) -> None:
        super().__init__(
            strict=strict,
            dedupe_window=dedupe_window,
            max_attribute_bytes=max_attribute_bytes,
            max_array_items=max_array_items,
        )
        if limit < 1 or follow_links < 0 or max_traces < 1:
            raise ValueError("limit and max_traces must be >= 1 and follow_links >= 0")
        self.client = HttpClient(url, http)
        self.trace_ids = [_trace_id(t) for t in trace_ids]
        now = time.time()
        self.end = parse_time(end) if end is not None else now
        self.start = parse_time(start) if start is not None else self.end - parse_duration(lookback)
        if self.start > self.end:
            raise ValueError("start is after end")
        self.limit = limit
        self.follow_links = follow_links
        self.max_traces = max_traces

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.client.base_url!r})"

    # The API of a backend: search one time slice -> records of any number of traces and/or
    # trace ids still to fetch (at most ``limit`` traces); get -> one trace's records, or None
    # when the backend does not have it.
    @abstractmethod
    def _search(self, start: float, end: float) -> tuple[list[SpanRecord], list[str]]: ...

    min_slice = 1e-6
    """The shortest time slice (seconds) the API can express; a full one is not split further."""

    def _slices(self) -> Iterator[tuple[list[SpanRecord], list[str]]]:
        """Search the window slice by slice until every slice holds fewer than ``limit`` traces.

        Yields each slice's result (full slices are split and searched again, not yielded);
        stops, with ``stats.capped`` set, once ``max_traces`` traces were found.
        """
        stats = self.stats
        found: set[str] = set()
        pending = [(self.start, self.end)]
        while pending:
            start, end = pending.pop()
            records, ids = self._search(start, end)
            stats.pages += 1
            traces = set(ids) | {r.trace_id for r in records}
            middle = start + (end - start) / 2
            if self.min_slice >= 1:  # whole seconds: split on one
                middle = float(int(middle))
            if len(traces) >= self.limit and end - start > self.min_slice and start < middle < end:
                pending += [(middle, end), (start, middle)]  # older half first
                continue
            if len(traces) >= self.limit:
                stats.capped = (
                    f"{len(traces)} traces start within {self.min_slice:g} s at "
                    f"{_rfc3339(start)}: the search cannot be sliced further; raise limit "
                    "(limit=N in the source URL)"
                )
            new = traces - found
            if len(found) + len(new) > self.max_traces:
                stats.capped = (
                    f"the window {_rfc3339(self.start)} .. {_rfc3339(self.end)} holds more than "
                    f"max_traces={self.max_traces} traces; loading stopped at the bound: "
                    f"{MAX_TRACES_HINT}, or narrow the window (lookback, start, end)"
                )
                keep = set(sorted(new)[: self.max_traces - len(found)])
                records = [r for r in records if r.trace_id in keep or r.trace_id in found]
                ids = [t for t in ids if t in keep]
                found |= keep
                stats.traces_total = len(found)
                yield records, ids
                return
            found |= new
            stats.traces_total = len(found)
            yield records, ids

    @abstractmethod
    def _get(self, trace_id: str) -> list[SpanRecord] | None: ...

    def _decode(self, body: Any, url: str) -> list[SpanRecord]:
        return decode_value(body, path=url, line=None, on_error=self.on_error)

    def _raw_records(self) -> Iterator[SpanRecord]:
        fetched: set[str] = set()
        not_followed: set[str] = set()
        queue: deque[tuple[str, int]] = deque((t, 0) for t in self.trace_ids)

        def grouped(records: list[SpanRecord], depth: int) -> Iterator[SpanRecord]:
            # Search results concatenate traces: hand them out trace by trace.
            by_trace: dict[str, list[SpanRecord]] = {}
            for record in records:
                by_trace.setdefault(record.trace_id, []).append(record)
            for trace_id, spans in by_trace.items():
                if trace_id in fetched:
                    continue
                fetched.add(trace_id)
                self.stats.traces_fetched += 1
                yield from spans
                for span in spans:
                    for link in span.links:
                        if link.trace_id not in fetched:
                            queue.append((link.trace_id, depth + 1))

        if not self.trace_ids:
            for found, ids in self._slices():
                queue.extend((t, 0) for t in ids)
                yield from grouped(found, 0)
        while queue:
            trace_id, depth = queue.popleft()
            if trace_id in fetched or trace_id in not_followed:
                continue
            if depth > self.follow_links or len(fetched) >= self.max_traces:
                not_followed.add(trace_id)
                self.stats.links_not_followed = len(not_followed)
                if depth <= self.follow_links and not self.stats.capped:
                    self.stats.capped = (
                        f"max_traces={self.max_traces} traces loaded: linked traces were left "
                        f"unfetched; {MAX_TRACES_HINT}"
                    )
                continue
            records = self._get(trace_id)
            if records is None:
                self.stats.traces_missing += 1
                fetched.add(trace_id)  # do not ask again
                continue
            yield from grouped(records, depth)


_JAEGER_INTERNAL = "@jaeger@"


def _without_jaeger_internals(record: SpanRecord) -> SpanRecord:
    """``record`` without the attributes Jaeger adds for itself (``@jaeger@warnings`` from its
    adjusters, ``@jaeger@format``, ``@jaeger@hash``): they are not the application's data."""
    if not any(key.startswith(_JAEGER_INTERNAL) for key in record.attributes):
        return record
    kept = {k: v for k, v in record.attributes.items() if not k.startswith(_JAEGER_INTERNAL)}
    return dataclasses.replace(record, attributes=MappingProxyType(kept))


class JaegerSource(_BackendSource):
    """Traces from Jaeger's query service (api_v3; the v1 API when api_v3 is absent).

    Args:
        url: the query service, ``http(s)://host:16686[/base-path]``.
        service: search for traces of this service (``query.service_name``).
        operation: only traces with a span of this name (``query.operation_name``).
        attributes: span attributes every found trace must have (``query.attributes``).
        trace_ids: fetch these traces instead of searching.
        start: the search window's start (RFC 3339, unix seconds or datetime).
        end: its end (default: now).
        lookback: the window's length when ``start`` is not given (``30m``, ``24h``, ``7d``).
        limit: how many traces one search request returns at most (``query.search_depth``): a
            page. A slice of the window that comes back full is split and searched again.
        raw_traces: ask Jaeger not to run its adjusters (clock-skew, span-id dedupe), which
            rewrite spans.
        api: ``auto`` (api_v3, falling back to v1 on a missing route), ``v3`` or ``v1``.
        follow_links: hops of span links to follow to other traces (0: none).
        max_traces: the bound on traces loaded, search and links together (default 20,000);
            reaching it sets ``stats.capped``, which the batch job reports and fails on.
        http: timeouts, retries, auth, TLS and the response size cap (``max_response_bytes``).
        strict: raise at the first bad record.
        dedupe_window: see :class:`~memtrace_otel.sources.Source`.
        max_attribute_bytes: see :class:`~memtrace_otel.sources.Source` (values of the
            fetched records are cut and counted as for files).
        max_array_items: see :class:`~memtrace_otel.sources.Source`.

    Raises:
        ValueError: neither ``service`` nor ``trace_ids``, or a bad option.
    """

    kind = "jaeger"

    def __init__(
        self,
        url: str,
        *,
        service: str | None = None,
        operation: str | None = None,
        attributes: Mapping[str, str] | None = None,
        raw_traces: bool = True,
        api: str = "auto",
        **options: Any,
    ) -> None:
        super().__init__(url, **options)
        if api not in ("auto", "v3", "v1"):
            raise ValueError(f"api must be auto, v3 or v1, got {api!r}")
        if not service and not self.trace_ids:
            raise ValueError("a Jaeger source needs service= (to search) or trace_id= (to fetch)")
        self.service = service
        self.operation = operation
        self.attributes = dict(attributes or {})
        self.raw_traces = raw_traces
        self.api = api

    def _decode(self, body: Any, url: str) -> list[SpanRecord]:
        return [_without_jaeger_internals(r) for r in super()._decode(body, url)]

    @staticmethod
    def _route_missing(reply: Response) -> bool:
        """A 404 from a server without this API (not Jaeger's JSON 'no traces found')."""
        return reply.status == 404 and not isinstance(reply.body, dict)

    def _use_v1(self) -> None:
        if self.api == "v3":
            raise BackendError("the Jaeger api_v3 routes are missing", url=self.client.base_url)
        self.api = "v1"

    def _search(self, start: float, end: float) -> tuple[list[SpanRecord], list[str]]:
        if self.api != "v1":
            params: dict[str, str | int | None] = {
                "query.service_name": self.service,
                "query.operation_name": self.operation,
                "query.start_time_min": _rfc3339(start),
                "query.start_time_max": _rfc3339(end),
                "query.search_depth": self.limit,
                # Jaeger before the rename (v2.13 and older) reads only the old name.
                "query.num_traces": self.limit,
                "query.raw_traces": "true" if self.raw_traces else None,
                "query.attributes": json.dumps(self.attributes) if self.attributes else None,
            }
            reply = self.client.get("/api/v3/traces", params)
            if not self._route_missing(reply):
                if reply.status == 404:  # {"error": {"httpCode": 404, "message": "No traces..."}}
                    return [], []
                return self._decode(reply.body, self.client.url("/api/v3/traces", params)), []
            self._use_v1()
        v1_params: dict[str, str | int | None] = {
            "service": self.service,
            "operation": self.operation,
            "start": int(start * 1_000_000),
            "end": int(end * 1_000_000),
            "limit": self.limit,
            "tags": json.dumps(self.attributes) if self.attributes else None,
        }
        reply = self.client.get("/api/traces", v1_params)
        if reply.status == 404:
            if self._route_missing(reply):
                raise BackendError(
                    "this Jaeger has neither api_v3 nor the v1 search (removed after v2.20); "
                    "give trace ids instead",
                    url=self.client.url("/api/traces", v1_params),
                    status=404,
                )
            return [], []
        return self._decode(reply.body, self.client.url("/api/traces", v1_params)), []

    def _get(self, trace_id: str) -> list[SpanRecord] | None:
        if self.api != "v1":
            path = f"/api/v3/traces/{trace_id}"
            params: dict[str, str | int | None] = {
                "raw_traces": "true" if self.raw_traces else None
            }
            reply = self.client.get(path, params)
            if not self._route_missing(reply):
                if reply.status == 404:
                    return None
                return self._decode(reply.body, self.client.url(path, params))
            self._use_v1()
        path = f"/api/traces/{trace_id}"
        v1_params: dict[str, str | int | None] = {"raw": "true" if self.raw_traces else None}
        reply = self.client.get(path, v1_params)
        if reply.status == 404:
            return None
        return self._decode(reply.body, self.client.url(path, v1_params))


class TempoSource(_BackendSource):
    """Traces from Grafana Tempo: TraceQL search, then ``/api/v2/traces/{id}`` for each trace.

    Args:
        url: Tempo's HTTP API, ``http(s)://host:3200[/prefix]``.
        query: a TraceQL query (default ``{}``: every trace in the window).
        service: shorthand for ``{ resource.service.name = "<service>" }``.
        trace_ids: fetch these traces instead of searching.
        start: the search window's start; end: its end (default now); lookback: its length.
            Tempo leaves out the newest 30 s unless its ``query_end_cutoff`` is lowered.
        limit: traces per search request; full time slices are split and searched again.
        spss: spans per span set returned by the search (unused for fetching).
        follow_links, max_traces, http, strict, dedupe_window, max_attribute_bytes,
            max_array_items: see :class:`JaegerSource`.

    Raises:
        ValueError: a bad option.
    """

    kind = "tempo"

    def __init__(
        self,
        url: str,
        *,
        query: str | None = None,
        service: str | None = None,
        spss: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__(url, **options)
        if query and service:
            raise ValueError("give a TraceQL query or a service, not both")
        if service:
            query = "{ resource.service.name = " + json.dumps(service) + " }"
        self.query = query or "{}"
        self.spss = spss
        self._v2_works = False

    min_slice = 1.0  # Tempo's search takes whole seconds

    def _search(self, start: float, end: float) -> tuple[list[SpanRecord], list[str]]:
        params: dict[str, str | int | None] = {
            "q": self.query,
            "start": int(start),
            "end": int(end) + 1,
            "limit": self.limit,
            "spss": self.spss,
        }
        reply = self.client.get("/api/search", params)
        if reply.status == 404:
            raise BackendError(
                "no Tempo search API here", url=self.client.url("/api/search", params), status=404
            )
        traces = reply.body.get("traces") if isinstance(reply.body, dict) else None
        if not isinstance(traces, list):
            raise BackendError(
                "unexpected search response (no 'traces' list)",
                url=self.client.url("/api/search", params),
            )
        ids = []
        for item in traces:
            raw = item.get("traceID") if isinstance(item, dict) else None
            try:
                ids.append(padded_hex_id(raw, 32, "traceID"))  # Tempo drops leading zeros
            except Bad:
                continue
        return [], list(dict.fromkeys(ids))

    def _get(self, trace_id: str) -> list[SpanRecord] | None:
        path = f"/api/v2/traces/{trace_id}"
        reply = self.client.get(path)
        if reply.status != 404:
            self._v2_works = True
            return self._decode(reply.body, self.client.url(path))
        if self._v2_works:
            return None
        # Tempo before the v2 API: the v1 route answers {"batches"} or {"resourceSpans"}.
        path = f"/api/traces/{trace_id}"
        reply = self.client.get(path)
        if reply.status == 404:
            return None
        return self._decode(reply.body, self.client.url(path))


# --- URL specs ---------------------------------------------------------------------------------
_INT_OPTIONS = ("limit", "follow_links", "max_traces", "spss")
_COMMON_OPTIONS = frozenset({"start", "end", "lookback", "trace_id", *_INT_OPTIONS})
_JAEGER_OPTIONS = _COMMON_OPTIONS | {"service", "operation", "raw", "api"}
_TEMPO_OPTIONS = _COMMON_OPTIONS | {"q", "query", "service"}


def backend_from_url(
    spec: str, *, strict: bool = False, http: HttpOptions | None = None, **overrides: Any
) -> Source:
    """A :class:`JaegerSource` or :class:`TempoSource` from a ``jaeger+http(s)://`` or
    ``tempo+http(s)://`` spec; query parameters become options, keyword arguments win.

    ``tag.KEY=VALUE`` parameters of a Jaeger spec are attribute filters; ``trace_id`` may repeat.

    Raises:
        ValueError: an unknown scheme or parameter, or a bad value.
    """
    scheme, _, rest = spec.partition("+")
    parts = urllib.parse.urlsplit(rest)
    base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    allowed = _JAEGER_OPTIONS if scheme == "jaeger" else _TEMPO_OPTIONS
    if scheme not in ("jaeger", "tempo"):
        raise ValueError(
            f"unknown backend scheme {scheme!r}: use jaeger+http(s):// or tempo+http(s)://"
        )
    options: dict[str, Any] = {}
    attributes: dict[str, str] = {}
    trace_ids: list[str] = []
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if scheme == "jaeger" and key.startswith("tag."):
            attributes[key[4:]] = value
        elif key not in allowed:
            raise ValueError(
                f"unknown parameter {key!r} in {scheme} source (known: {', '.join(sorted(allowed))})"
            )
        elif key == "trace_id":
            trace_ids += [t for t in value.split(",") if t]
        elif key in _INT_OPTIONS:
            try:
                options[key] = int(value)
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {value!r}") from None
        elif key == "raw":
            options["raw_traces"] = value.lower() not in ("0", "false", "no")
        elif key == "q":
            options["query"] = value
        else:
            options[key] = value
    if trace_ids:
        options["trace_ids"] = trace_ids
    if attributes:
        options["attributes"] = attributes
    options.update(overrides)
    cls = JaegerSource if scheme == "jaeger" else TempoSource
    return cls(base, strict=strict, http=http, **options)

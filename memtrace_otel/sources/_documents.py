"""Which trace format a parsed JSON value is, and the public per-format decoders.

A JSON value is recognised by its shape, never by a file name: the OTLP envelopes
(``resourceSpans``, Jaeger api_v3's ``result``, Tempo's ``batches`` and ``trace``), Jaeger v1
(``data`` of an API response, a trace object, the anonymizer's bare span array) and smartcomment
exports (MemTraceBench). Shapes we recognise but cannot read (Jaeger's domain proto-JSON, trace
summaries, Tempo search results, error bodies) are rejected with
:class:`~memtrace_otel.errors.UnsupportedFormatError` and a reason saying what to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memtrace_otel.errors import DecodeError, UnsupportedFormatError
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.sources._common import (
    INVALID_RECORD,
    UNSUPPORTED_FORMAT,
    OnError,
    collect_into,
    make_error,
    raise_on_error,
)
from memtrace_otel.sources._jaeger import (
    decode_jaeger_spans,
    decode_jaeger_trace,
    is_jaeger_domain_span,
    is_jaeger_span,
)
from memtrace_otel.sources._memtracebench import (
    BenchCase,
    BenchGraph,
    BenchLabel,
    decode_memtracebench,
    is_smartcomment_export,
)
from memtrace_otel.sources._otlp_json import decode_resource_spans
from memtrace_otel.sources._outcomes import Outcome, decode_outcome_logs

_DOMAIN_JSON = (
    "this is Jaeger's internal domain/proto JSON (base64 ids, vStr/vInt64 tags), which Jaeger "
    "writes only in storage dumps; export the trace with the UI's 'Download JSON', "
    "GET /api/traces/{id} or GET /api/v3/traces/{id} instead"
)


@dataclass
class BenchSink:
    """Where MemTraceBench imports put what is not a span: cases, labels, graph ids."""

    cases: list[BenchCase] = field(default_factory=list)
    labels: list[BenchLabel] = field(default_factory=list)
    graphs: list[str] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    """Evaluations read from OTLP log records (``resourceLogs``), judged by the default rule."""

    def add(self, graph: BenchGraph) -> None:
        """Keep the cases and labels of one imported graph."""
        self.cases.extend(graph.cases)
        self.labels.extend(graph.labels)
        self.graphs.append(graph.graph_id)


def _unsupported(reason: str, path: str, line: int | None, on_error: OnError) -> list[SpanRecord]:
    on_error(UNSUPPORTED_FORMAT, UnsupportedFormatError(reason, path=path, line=line))
    return []


def _otlp_envelope(
    obj: dict[str, Any], *, path: str, line: int | None, on_error: OnError, prefix: str = ""
) -> list[SpanRecord] | None:
    """The spans of an OTLP-shaped object, or ``None`` if it has no OTLP envelope."""
    for key in ("resourceSpans", "batches"):
        if key in obj:
            return decode_resource_spans(
                obj[key], path=path, line=line, on_error=on_error, prefix=f"{prefix}{key}"
            )
    for key in ("result", "trace"):
        inner = obj.get(key)
        if type(inner) is dict:
            if not inner:
                return []
            found = _otlp_envelope(
                inner, path=path, line=line, on_error=on_error, prefix=f"{prefix}{key}."
            )
            if found is not None:
                return found
    return None


def decode_value(
    obj: Any,
    *,
    path: str = "",
    line: int | None = None,
    on_error: OnError = raise_on_error,
    bench: BenchSink | None = None,
) -> list[SpanRecord]:
    """The span records of any supported JSON trace document (internal entry point)."""
    if type(obj) is dict:
        if "resourceLogs" in obj and "resourceSpans" not in obj:
            outcomes, errors = decode_outcome_logs(obj["resourceLogs"], path=path, line=line)
            for field_path, reason in errors:
                on_error(INVALID_RECORD, make_error(reason, path=path, line=line, field=field_path))
            if bench is not None:
                bench.outcomes.extend(outcomes)
            return []
        found = _otlp_envelope(obj, path=path, line=line, on_error=on_error)
        if found is not None:
            return found
        data = obj.get("data")
        if type(data) is list:  # Jaeger v1 API response {"data": [trace, ...], ...}
            records: list[SpanRecord] = []
            for i, trace in enumerate(data):
                if type(trace) is not dict:
                    records += _unsupported(
                        f"data[{i}] is not a Jaeger trace object", path, line, on_error
                    )
                    continue
                records += decode_jaeger_trace(
                    trace, path=path, line=line, on_error=on_error, prefix=f"data[{i}]"
                )
            return records
        if is_smartcomment_export(obj):
            graph = decode_memtracebench(obj, path=path, on_error=on_error)
            if bench is not None:
                bench.add(graph)
            return list(graph.records)
        spans = obj.get("spans")
        if type(spans) is list:
            if spans and is_jaeger_domain_span(spans[0]):
                return _unsupported(_DOMAIN_JSON, path, line, on_error)
            return decode_jaeger_trace(obj, path=path, line=line, on_error=on_error)
        if "summaries" in obj:
            return _unsupported(
                "Jaeger trace summaries carry no spans; fetch the traces by id",
                path,
                line,
                on_error,
            )
        if "traces" in obj:
            return _unsupported(
                "a Tempo search result lists trace ids only; fetch each trace by id "
                "(or use a tempo+http:// source)",
                path,
                line,
                on_error,
            )
        if "error" in obj or (data is None and "errors" in obj):
            detail = obj.get("error") or obj.get("errors")
            return _unsupported(
                f"an error response, not traces: {detail!r:.200}", path, line, on_error
            )
        keys = ", ".join(sorted(str(k) for k in obj)[:8])
        return _unsupported(
            f"no known trace envelope (top-level keys: {keys})", path, line, on_error
        )
    if type(obj) is list:
        if not obj:
            return []
        first = obj[0]
        if is_jaeger_span(first):
            return decode_jaeger_spans(
                obj, None, path=path, line=line, on_error=on_error, prefix=""
            )
        if is_jaeger_domain_span(first):
            return _unsupported(_DOMAIN_JSON, path, line, on_error)
        if type(first) is dict:
            records = []
            for item in obj:
                records += decode_value(item, path=path, line=line, on_error=on_error, bench=bench)
            return records
        return _unsupported("a JSON array of non-objects", path, line, on_error)
    return _unsupported(f"a JSON {type(obj).__name__}, not a trace document", path, line, on_error)


def _policy(errors: list[DecodeError] | None) -> OnError:
    return raise_on_error if errors is None else collect_into(errors)


def decode_document(
    obj: Any,
    *,
    path: str = "",
    line: int | None = None,
    errors: list[DecodeError] | None = None,
) -> list[SpanRecord]:
    """The span records of a parsed JSON trace document of any supported format.

    Args:
        obj: the parsed JSON (one line of a JSON Lines file, or a whole document).
        path: the file or URL it came from (for ``source`` and error messages).
        line: its line (JSON Lines) or ``None`` for a whole document.
        errors: ``None`` to raise at the first bad record (strict); a list to collect the
            errors into and skip the bad records (lenient).

    Raises:
        DecodeError: a bad record, naming path, line and field (strict only).
        UnsupportedFormatError: a shape this package recognises but does not read.

    >>> doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
    ...     {"traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174",
    ...      "name": "op", "kind": "SPAN_KIND_SERVER", "startTimeUnixNano": "1"}]}]}]}
    >>> [(r.trace_id, r.kind, r.start_time_unix_nano) for r in decode_document(doc)]
    [('5b8efff798038103d269b633813fc60c', 'SERVER', 1)]
    """
    return decode_value(obj, path=path, line=line, on_error=_policy(errors))


def decode_otlp_json(
    obj: Any,
    *,
    path: str = "",
    line: int | None = None,
    errors: list[DecodeError] | None = None,
) -> list[SpanRecord]:
    """The span records of an OTLP/JSON ``ExportTraceServiceRequest`` or a wrapper of one.

    Accepts ``{"resourceSpans"}``, Jaeger api_v3's ``{"result": ...}``, Tempo's ``{"batches"}``
    and ``{"trace": ...}``, in OTLP/JSON (hex ids, integer enums) or protobuf's JSON mapping
    (base64 ids, enum names).

    Raises:
        DecodeError: a bad record (when ``errors`` is ``None``).
        UnsupportedFormatError: ``obj`` has no OTLP envelope.
    """
    on_error = _policy(errors)
    if type(obj) is dict:
        found = _otlp_envelope(obj, path=path, line=line, on_error=on_error)
        if found is not None:
            return found
    return _unsupported("not an OTLP/JSON trace document", path, line, on_error)


def decode_jaeger(
    obj: Any,
    *,
    path: str = "",
    line: int | None = None,
    errors: list[DecodeError] | None = None,
) -> list[SpanRecord]:
    """The span records of Jaeger v1 JSON: an API response, a trace object or a span array.

    Raises:
        DecodeError: a bad record (when ``errors`` is ``None``).
        UnsupportedFormatError: ``obj`` is not Jaeger v1 JSON.
    """
    on_error = _policy(errors)
    is_v1 = (
        type(obj) is dict
        and ("spans" in obj or type(obj.get("data")) is list)
        and "resourceSpans" not in obj
    ) or (
        type(obj) is list and (not obj or is_jaeger_span(obj[0]) or is_jaeger_domain_span(obj[0]))
    )
    if not is_v1:
        return _unsupported("not Jaeger v1 JSON", path, line, on_error)
    return decode_value(obj, path=path, line=line, on_error=on_error)

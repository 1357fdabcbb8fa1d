"""Trace sources: read span records from files and live backends, wherever users keep traces.

One entry point, :func:`open_source`, takes a path, a directory, a glob, or a backend URL
(``jaeger+http(s)://host:16686?service=...``, ``tempo+http(s)://host:3200?q=...``) and returns a
:class:`Source` whose :meth:`Source.records` streams neutral
:class:`~memtrace_otel.semconv.SpanRecord` objects; :attr:`Source.stats` counts what was read
and skipped. File formats are recognised by content: OTLP/JSON (lines or documents, the
Collector's, Jaeger api_v3's and Tempo's envelopes), the Collector's length-prefixed proto
files, gzip and zstd, Jaeger v1 JSON, and smartcomment/MemTraceBench graph exports.

Lenient mode (the default, as the batch job uses it) skips and counts bad records; strict mode
raises :class:`~memtrace_otel.errors.DecodeError` naming file, line and field.

>>> import json, tempfile, os
>>> line = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "0af7651916cd43dd8448eb211c80319c",
...     "spanId": "b7ad6b7169203331", "name": "memtrace.extract rag.chunk"}]}]}]}
>>> folder = tempfile.mkdtemp()
>>> with open(os.path.join(folder, "traces.jsonl"), "w") as f:
...     _ = f.write(json.dumps(line) + "\\n" + "not json\\n")
>>> source = open_source(folder)
>>> [r.name for r in source.records()]
['memtrace.extract rag.chunk']
>>> source.stats.skipped_by_kind
{'invalid_json': 1}
>>> import shutil; shutil.rmtree(folder)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from memtrace_otel._internal import lazy_names
from memtrace_otel.errors import SourceSpecError
from memtrace_otel.sources._backends import backend_from_url
from memtrace_otel.sources._common import SourceStats
from memtrace_otel.sources._content import ContentResolver, erase_store, parse_age, store_pseudonym
from memtrace_otel.sources._documents import decode_document, decode_jaeger, decode_otlp_json
from memtrace_otel.sources._export import export_source
from memtrace_otel.sources._files import expand_paths
from memtrace_otel.sources._http import HttpOptions
from memtrace_otel.sources._jaeger import ARRAY_ATTRIBUTES
from memtrace_otel.sources._limits import LineReader, RecordCapper, ValueLimits
from memtrace_otel.sources._memtracebench import (
    OTHER_KIND,
    BenchGraph,
    decode_memtracebench,
    load_memtracebench,
)
from memtrace_otel.sources._outcomes import Outcome, OutcomeRule, outcomes_of, read_outcomes
from memtrace_otel.sources._source import FileSource, Source, iter_records
from memtrace_otel.sources._trust import DEFAULT_SKEW_SECONDS, TrustPolicy
from memtrace_otel.sources._upstream import adapt_upstream

if TYPE_CHECKING:
    from memtrace_otel.sources._otlp_proto import decode_otlp_proto

BACKEND_SCHEMES = ("jaeger+http://", "jaeger+https://", "tempo+http://", "tempo+https://")


def open_source(
    spec: str | os.PathLike[str],
    *,
    strict: bool = False,
    http: HttpOptions | None = None,
    **options: Any,
) -> Source:
    """Open a trace source from a spec string.

    Args:
        spec: a file, a directory (read recursively), a glob, or a backend URL:
            ``jaeger+http(s)://host:port[/base]?service=..&lookback=..`` or
            ``tempo+http(s)://host:port[/base]?q=<TraceQL>&lookback=..`` (see ``docs/sources.md``
            for every parameter).
        strict: raise at the first bad record instead of skipping and counting it.
        http: timeouts, retries, auth and TLS for backends.
        **options: backend options (override the URL's parameters), or ``dedupe_window``,
            ``max_attribute_bytes``, ``max_array_items``, ``max_line_bytes`` and
            ``max_document_bytes`` for files (see :class:`FileSource`).

    Raises:
        SourceSpecError: (a ``ValueError``) a malformed backend URL or option, a plain
            ``http://`` URL, or a bad file option; the message names the spec without its
            credentials.

    >>> open_source("jaeger+http://127.0.0.1:16686?service=rag&lookback=2h")
    JaegerSource('http://127.0.0.1:16686')
    """
    text = os.fspath(spec)
    try:
        if text.startswith(BACKEND_SCHEMES):
            return backend_from_url(text, strict=strict, http=http, **options)
        if text.startswith(("http://", "https://")):
            scheme = text.split(":")[0]
            raise ValueError(
                f"say which backend it is: jaeger+{scheme}://... or tempo+{scheme}://..."
            )
        if http is not None:
            raise ValueError("http options apply to backend sources only")
        return FileSource(text, strict=strict, **options)
    except SourceSpecError:
        raise
    except ValueError as exc:
        raise SourceSpecError(f"{_without_credentials(text)}: {exc}") from None


_lazy = lazy_names(__name__, {"decode_otlp_proto": "memtrace_otel.sources._otlp_proto"})


def __getattr__(name: str) -> Any:
    """``decode_otlp_proto``, imported on first use (protobuf's import is 0.02 s of start-up)."""
    return _lazy(name)


def _without_credentials(spec: str) -> str:
    """``spec`` with any ``user:pass@`` of a URL left out (for messages).

    >>> _without_credentials("jaeger+http://ana:s3cret@host:16686/x?service=rag")
    'jaeger+http://host:16686/x?service=rag'
    """
    scheme, sep, rest = spec.partition("://")
    if not sep:
        return spec
    netloc, slash, tail = rest.partition("/")
    netloc, query_sep, query = netloc.partition("?")  # no path: the query follows the host
    host = netloc.rpartition("@")[2]
    return f"{scheme}://{host}{query_sep}{query}{slash}{tail}"


__all__ = [
    "ARRAY_ATTRIBUTES",
    "BACKEND_SCHEMES",
    "DEFAULT_SKEW_SECONDS",
    "OTHER_KIND",
    "BenchGraph",
    "ContentResolver",
    "HttpOptions",
    "LineReader",
    "Outcome",
    "OutcomeRule",
    "RecordCapper",
    "Source",
    "SourceStats",
    "TrustPolicy",
    "ValueLimits",
    "adapt_upstream",
    "decode_document",
    "decode_jaeger",
    "decode_memtracebench",
    "decode_otlp_json",
    "decode_otlp_proto",
    "erase_store",
    "expand_paths",
    "export_source",
    "iter_records",
    "load_memtracebench",
    "open_source",
    "outcomes_of",
    "parse_age",
    "read_outcomes",
    "store_pseudonym",
]

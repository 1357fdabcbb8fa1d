"""Reading the memory store of each span of a raw OTLP JSON line, without decoding it.

The scaled batch job partitions work by memory store; its planning reads only
``gen_ai.memory.store.id`` of each span in the parsed JSON, which is far cheaper than decoding
spans into records, and a partition drops other stores' spans before decoding a line. Both need
to know the wire format, so they live here, next to the OTLP JSON decoder.
"""

from __future__ import annotations

from typing import Any

from memtrace_otel.semconv import attributes as A
from memtrace_otel.sources._upstream import MEMORY_OPERATIONS

NO_STORE = ""
"""The store id of a span that names none."""


def line_stores(
    value: Any, case_stores: set[str], upstream: dict[str, set[str]] | None = None
) -> dict[str, int] | None:
    """Store -> number of spans of a parsed OTLP JSON line (``None``: decode it to tell).

    The public store-id scan: ``{"resourceSpans": [...]}`` in, the stores it holds out.

    A line is left to the partitions only when each of its resources holds spans of one store
    (and holds some): a bad resource or scope is then reported, and a long resource attribute
    cut, by exactly one partition. Stores with a span naming a case go to ``case_stores``, and
    (given ``upstream``) stores with an upstream GenAI memory span, with its trace ids as written
    (:func:`raw_store`), to it.
    """
    if type(value) is not dict or set(value) != {"resourceSpans"}:
        return None
    resources = value["resourceSpans"]
    if type(resources) is not list or not resources:
        return None
    stores: dict[str, int] = {}
    for resource in resources:
        if type(resource) is not dict or type(resource.get("scopeSpans")) is not list:
            return None
        owner: str | None = None
        for scope in resource["scopeSpans"]:
            if type(scope) is not dict or type(scope.get("spans")) is not list:
                return None
            if not scope["spans"]:
                return None
            for span in scope["spans"]:
                store = raw_store(span, upstream)
                if store is None or (owner is not None and store != owner):
                    return None
                owner = store
                if store not in case_stores and names_case(span):
                    case_stores.add(store)
        if owner is None:
            return None
        stores[owner] = stores.get(owner, 0) + sum(len(s["spans"]) for s in resource["scopeSpans"])
    return stores


def names_case(span: dict[str, Any]) -> bool:
    """Whether an undecoded span carries ``memtrace.case.id``."""
    attributes = span.get("attributes")
    return type(attributes) is list and any(
        type(item) is dict and item.get("key") == A.MEMTRACE_CASE_ID for item in attributes
    )


def raw_store(span: Any, upstream: dict[str, set[str]] | None = None) -> str | None:
    """The store id of an undecoded OTLP JSON span (``None``: cannot tell without decoding).

    Given ``upstream``, the trace id (as written) of an upstream GenAI memory span
    (``gen_ai.operation.name`` ``search_memory``, ``create_memory``, ...; no ``memtrace.op.kind``
    or ``.name``) is added to its store's set there, in the same pass over the attributes: a run
    that streams by store gives such a store the spans of its traces that name no store (chat
    calls), which :func:`~memtrace_otel.sources._upstream.adapt_upstream` needs.

    >>> raw_store({"attributes": [{"key": "gen_ai.memory.store.id",
    ...                            "value": {"stringValue": "u1"}}]})
    'u1'
    >>> raw_store({"attributes": []}), raw_store({"attributes": [{"key": "x"}]}) == ""
    ('', True)
    >>> found = {}
    >>> raw_store({"traceId": "0af7651916cd43dd8448eb211c80319c", "attributes": [{"key":
    ...     "gen_ai.operation.name", "value": {"stringValue": "search_memory"}}]}, found), found
    ('', {'': {'0af7651916cd43dd8448eb211c80319c'}})
    """
    if type(span) is not dict:
        return None
    attributes = span.get("attributes")
    if attributes is None:
        return NO_STORE
    if type(attributes) is not list:
        return None
    found: str = NO_STORE
    seen = False
    memory = contract = False
    for item in attributes:
        if type(item) is not dict:
            return None
        key = item.get("key")
        if key == A.GEN_AI_MEMORY_STORE_ID:
            value = item.get("value")
            if seen or type(value) is not dict or set(value) != {"stringValue"}:
                return None  # repeated (the decoder keeps the last), or not a plain string
            if type(value["stringValue"]) is not str:
                return None
            found = value["stringValue"]
            seen = True
        elif upstream is not None:
            if key == A.GEN_AI_OPERATION_NAME:
                value = item.get("value")
                memory = type(value) is dict and value.get("stringValue") in MEMORY_OPERATIONS
            elif key == A.MEMTRACE_OP_KIND or key == A.MEMTRACE_OP_NAME:
                contract = True
    if memory and not contract and upstream is not None:
        # The store is a plain string here: any other store id returned None above.
        traces = upstream.get(found)
        if traces is None:
            traces = upstream[found] = set()
        trace = span.get("traceId")
        if type(trace) is str:
            traces.add(trace)
    return found


def prune_stores(value: Any, wanted: set[str]) -> None:
    """Drop the spans of other stores from a parsed OTLP JSON line before decoding it.

    Lines hold spans of many stores; decoding only ours keeps partitions from repeating each
    other's work (and from counting each other's bad spans). A span whose store cannot be read
    here is kept (the decoded record is filtered again by its store).
    """
    if type(value) is not dict:
        return
    for resource in value.get("resourceSpans") or ():
        if type(resource) is not dict:
            continue
        for scope in resource.get("scopeSpans") or ():
            if type(scope) is dict and type(scope.get("spans")) is list:
                scope["spans"] = [
                    s for s in scope["spans"] if (store := raw_store(s)) is None or store in wanted
                ]

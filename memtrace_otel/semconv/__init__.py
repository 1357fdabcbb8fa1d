"""The trace contract's names and closed value sets (``docs/semantic-conventions.md``).

Attribute names live in :mod:`memtrace_otel.semconv.attributes`, environment variable names in
:mod:`memtrace_otel.semconv.env`; value sets are enums here;
refs are parsed by :func:`parse_ref`; :class:`SpanRecord` is the neutral span every source
converts into.
"""

from memtrace_otel.semconv import attributes, env
from memtrace_otel.semconv.record import (
    SPAN_KINDS,
    STATUS_CODES,
    Attributes,
    AttrValue,
    EventRecord,
    LinkRecord,
    SpanRecord,
    frozen_attributes,
)
from memtrace_otel.semconv.refs import Ref, format_ref, is_ref, parse_ref
from memtrace_otel.semconv.values import (
    DEFAULT_STAGE_BY_KIND,
    DIGEST_BLAKE2B_KEYED,
    DIGEST_HMAC_SHA256,
    DIGEST_SHA256,
    ERROR_TYPE_BY_KIND,
    GEN_AI_OPERATION_BY_KIND,
    MEMORY_STORE_OPERATIONS,
    PRODUCTION,
    REFERENCE,
    SIGNATURE_HMAC_SHA256,
    UPSERT_MEMORY,
    CaptureMode,
    Category,
    ErrorType,
    JudgeVerdict,
    OpKind,
    ReviewLabel,
    Role,
    Stage,
)

CONTRACT_VERSION = "0.3"
"""The version of ``shared/spec/semconv.md`` this package implements."""

__all__ = [
    "CONTRACT_VERSION",
    "DEFAULT_STAGE_BY_KIND",
    "DIGEST_BLAKE2B_KEYED",
    "DIGEST_HMAC_SHA256",
    "DIGEST_SHA256",
    "ERROR_TYPE_BY_KIND",
    "GEN_AI_OPERATION_BY_KIND",
    "MEMORY_STORE_OPERATIONS",
    "PRODUCTION",
    "REFERENCE",
    "SIGNATURE_HMAC_SHA256",
    "SPAN_KINDS",
    "STATUS_CODES",
    "UPSERT_MEMORY",
    "AttrValue",
    "Attributes",
    "CaptureMode",
    "Category",
    "ErrorType",
    "EventRecord",
    "JudgeVerdict",
    "LinkRecord",
    "OpKind",
    "Ref",
    "ReviewLabel",
    "Role",
    "SpanRecord",
    "Stage",
    "attributes",
    "env",
    "format_ref",
    "frozen_attributes",
    "is_ref",
    "parse_ref",
]

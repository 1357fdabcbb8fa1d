"""Closed value sets of the trace contract, as enums, and the maps between them."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class OpKind(StrEnum):
    """What an operation does (contract section 2)."""

    INGEST = "ingest"
    EXTRACT = "extract"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    RETRIEVE = "retrieve"
    FILTER = "filter"
    ASSEMBLE = "assemble"
    GENERATE = "generate"
    JUDGE = "judge"


class Stage(StrEnum):
    """Which phase of the memory pipeline an op belongs to."""

    CONSTRUCTION = "construction"
    RETRIEVAL = "retrieval"
    RESPONSE = "response"
    EVALUATION = "evaluation"


class Category(StrEnum):
    """What a variable holds (contract section 3)."""

    MESSAGE = "message"
    MEMORY = "memory"
    QUERY = "query"
    CANDIDATES = "candidates"
    CONTEXT = "context"
    PROMPT = "prompt"
    PREDICTION = "prediction"
    GOLD = "gold"
    SCORE = "score"
    OTHER = "other"


class Role(StrEnum):
    """Whether a variable event describes something the op read or wrote."""

    INPUT = "input"
    OUTPUT = "output"


class ErrorType(StrEnum):
    """The five attribution labels (contract sections 2 and 5)."""

    EXTRACTION = "ExtractionError"
    UPDATE = "UpdateError"
    DELETION = "DeletionError"
    RETRIEVAL = "RetrievalError"
    RESPONSE = "ResponseError"


class JudgeVerdict(StrEnum):
    """The value of ``memtrace.judge.verdict`` on judge ops."""

    CORRECT = "correct"
    INCORRECT = "incorrect"


class CaptureMode(StrEnum):
    """Values of ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (upstream names)."""

    NO_CONTENT = "NO_CONTENT"
    SPAN_ONLY = "SPAN_ONLY"
    EVENT_ONLY = "EVENT_ONLY"
    SPAN_AND_EVENT = "SPAN_AND_EVENT"


class ReviewLabel(StrEnum):
    """(v0.3) Score labels of a person's review of a verdict (a ``memtrace.review`` evaluation)."""

    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    OTHER_OP = "other_op"
    """The verdict named the wrong op; ``memtrace.review.op_id`` names the right one."""


PRODUCTION: Final = "PRODUCTION"
"""Project value of ``MEMTRACE_CAPTURE_CONTENT``: the memory pipeline's categories, redacted and cut."""
REFERENCE: Final = "REFERENCE"
"""(v0.3) Project capture value: every value goes to the content store, none into a span."""

DIGEST_SHA256: Final = "sha256:"
"""Prefix of an unkeyed digest (contract section 3)."""
DIGEST_HMAC_SHA256: Final = "hmac-sha256:"
"""(v0.3) Prefix of a digest keyed with ``MEMTRACE_DIGEST_KEY`` (HMAC-SHA256)."""
DIGEST_BLAKE2B_KEYED: Final = "b2k:"
"""(v0.3) Prefix of a keyed BLAKE2b digest, which readers also accept."""
SIGNATURE_HMAC_SHA256: Final = "hmac-sha256"
"""(v0.3) Scheme of ``memtrace.feedback.signature`` (``hmac-sha256:<key id>:<hex>``)."""


ERROR_TYPE_BY_KIND: Final[dict[OpKind, ErrorType | None]] = {
    OpKind.INGEST: None,
    OpKind.EXTRACT: ErrorType.EXTRACTION,
    OpKind.CREATE: ErrorType.EXTRACTION,
    OpKind.UPDATE: ErrorType.UPDATE,
    OpKind.DELETE: ErrorType.DELETION,
    OpKind.RETRIEVE: ErrorType.RETRIEVAL,
    OpKind.FILTER: ErrorType.RETRIEVAL,
    OpKind.ASSEMBLE: ErrorType.RESPONSE,
    OpKind.GENERATE: ErrorType.RESPONSE,
    OpKind.JUDGE: None,
}
"""The label an op of each kind gets when it is the decisive fault; ``None``: never blamed."""

DEFAULT_STAGE_BY_KIND: Final[dict[OpKind, Stage]] = {
    OpKind.INGEST: Stage.CONSTRUCTION,
    OpKind.EXTRACT: Stage.CONSTRUCTION,
    OpKind.CREATE: Stage.CONSTRUCTION,
    OpKind.UPDATE: Stage.CONSTRUCTION,
    OpKind.DELETE: Stage.CONSTRUCTION,
    OpKind.RETRIEVE: Stage.RETRIEVAL,
    OpKind.FILTER: Stage.RETRIEVAL,
    OpKind.ASSEMBLE: Stage.RESPONSE,
    OpKind.GENERATE: Stage.RESPONSE,
    OpKind.JUDGE: Stage.EVALUATION,
}
"""The stage an op of each kind is in unless the caller says otherwise."""

GEN_AI_OPERATION_BY_KIND: Final[dict[OpKind, str]] = {
    OpKind.CREATE: "create_memory",
    OpKind.UPDATE: "update_memory",
    OpKind.DELETE: "delete_memory",
    OpKind.RETRIEVE: "search_memory",
}
"""Upstream ``gen_ai.operation.name`` of ops that read or write a memory store."""

UPSERT_MEMORY: Final = "upsert_memory"
"""Upstream operation name for writes that may create or update (mem0's ``add``)."""

MEMORY_STORE_OPERATIONS: Final[frozenset[str]] = frozenset(
    [*GEN_AI_OPERATION_BY_KIND.values(), UPSERT_MEMORY]
)

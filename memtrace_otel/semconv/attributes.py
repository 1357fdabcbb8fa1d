"""Every attribute, event and link name of the trace contract (``docs/semantic-conventions.md``).

This is the only module that spells a ``"memtrace.`` string; everything else imports the constant.
Upstream OpenTelemetry GenAI names (``gen_ai.*``) are reused where they exist.
"""

from __future__ import annotations

from typing import Final

# --- Operation span attributes (contract section 2) -------------------------------------------
MEMTRACE_OP_KIND: Final = "memtrace.op.kind"
"""Required. The operation kind, one of :class:`memtrace_otel.semconv.OpKind`."""
MEMTRACE_OP_NAME: Final = "memtrace.op.name"
"""Required. The concrete step, e.g. ``mem0.fact_extraction``."""
MEMTRACE_OP_INPUTS: Final = "memtrace.op.inputs"
"""Required. ``string[]`` of variable refs (``<id>@<version>``) the op read."""
MEMTRACE_OP_OUTPUTS: Final = "memtrace.op.outputs"
"""Required. ``string[]`` of variable refs the op wrote."""
MEMTRACE_STAGE: Final = "memtrace.stage"
"""Required. One of :class:`memtrace_otel.semconv.Stage`."""
MEMTRACE_SYSTEM: Final = "memtrace.system"
"""Recommended. ``long_context``, ``rag``, ``mem0``, ``evermemos`` or the user's own name."""
MEMTRACE_CASE_ID: Final = "memtrace.case.id"
"""Conditional. On every op that serves one question (retrieval, response, evaluation)."""
MEMTRACE_PROMPT_REF: Final = "memtrace.prompt.ref"
"""Conditional. On LLM-backed ops: the variable ref of the prompt template used."""
MEMTRACE_OP_INFERRED: Final = "memtrace.op.inferred"
"""Set by readers, never by instrumentation: ``string[]`` of what a reader inferred about an op
rebuilt from upstream GenAI spans (its kind, its lineage); verdicts repeat it under ``unchecked``."""
MEMTRACE_JUDGE_VERDICT: Final = "memtrace.judge.verdict"
"""On ``judge`` ops: ``correct`` or ``incorrect`` (:class:`memtrace_otel.semconv.JudgeVerdict`)."""
MEMTRACE_SOURCE_OP_ID: Final = "memtrace.source.op_id"
"""On ops imported from another recorder (MemTraceBench / smartcomment): that file's op id
(``op-<hex>``), which verdicts carry as ``source_op_id`` so they score against its annotations."""
MEMTRACE_SOURCE_CHAIN: Final = "memtrace.source.chain"
"""On imported ops whose recorder chained variables inside the op (raw response -> cleaned ->
result): a JSON array of ``{"ref", "from"}`` steps, the detail behind the op's inputs/outputs."""

# --- Variable events (contract section 3) ------------------------------------------------------
MEMTRACE_VARIABLE_EVENT: Final = "memtrace.variable"
"""Name of the span event recorded per output variable and per untraced input."""
MEMTRACE_VARIABLE_REF: Final = "memtrace.variable.ref"
"""Required on variable events and on lineage links: ``<id>@<version>``."""
MEMTRACE_VARIABLE_ROLE: Final = "memtrace.variable.role"
"""Required. ``input`` or ``output`` (:class:`memtrace_otel.semconv.Role`)."""
MEMTRACE_VARIABLE_CATEGORY: Final = "memtrace.variable.category"
"""Required. One of :class:`memtrace_otel.semconv.Category`."""
MEMTRACE_VARIABLE_DIGEST: Final = "memtrace.variable.digest"
"""Required. ``sha256:<hex>`` of the canonical value (``b2k:<key id>:<hex>`` with a digest key); present also when content is not captured."""
MEMTRACE_VARIABLE_VALUE: Final = "memtrace.variable.value"
"""Conditional. The value as a string (JSON when structured), only when capture allows."""
MEMTRACE_VARIABLE_TRUNCATED: Final = "memtrace.variable.truncated"
"""Conditional. ``true`` when the value was cut to the size limit."""
MEMTRACE_VARIABLE_DELETED: Final = "memtrace.variable.deleted"
"""Conditional. ``true`` on a tombstone."""
MEMTRACE_VARIABLE_META: Final = "memtrace.variable.meta"
"""Optional. A JSON object: timestamps, speaker, score, source message refs."""
MEMTRACE_VARIABLE_VALUE_REF: Final = "memtrace.variable.value_ref"
"""Conditional (v0.3, ``REFERENCE`` capture): where the value is in the content store (its URL, or
its path relative to the store), recorded instead of ``memtrace.variable.value``."""

# --- Verdicts written back as telemetry (contract section 5) -----------------------------------
MEMTRACE_ATTRIBUTION_SPAN: Final = "memtrace.attribution"
"""Name of the verdict span, in a new trace, linked to the culprit op span."""
MEMTRACE_ATTRIBUTION_CASE_ID: Final = "memtrace.attribution.case_id"
MEMTRACE_ATTRIBUTION_ERROR_TYPE: Final = "memtrace.attribution.error_type"
MEMTRACE_ATTRIBUTION_OP_ID: Final = "memtrace.attribution.op_id"
MEMTRACE_ATTRIBUTION_OP_NAME: Final = "memtrace.attribution.op_name"
MEMTRACE_ATTRIBUTION_METHOD: Final = "memtrace.attribution.method"
MEMTRACE_ATTRIBUTION_CONFIDENCE: Final = "memtrace.attribution.confidence"
MEMTRACE_ATTRIBUTION_EVIDENCE_REFS: Final = "memtrace.attribution.evidence_refs"
MEMTRACE_REVIEW_SPAN: Final = "memtrace.review"
"""(v0.3) Name of the short span carrying a person's review of a verdict, parented to the verdict
span; also the ``gen_ai.evaluation.name`` of the review's ``gen_ai.evaluation.result`` event
(score label: :class:`memtrace_otel.semconv.ReviewLabel`)."""
MEMTRACE_REVIEW_OP_ID: Final = "memtrace.review.op_id"
"""(v0.3) On a review whose label is ``other_op``: the span id of the op the reviewer names."""

# --- Feedback on answers (contract v0.2, section 5) ---------------------------------------------
MEMTRACE_FEEDBACK_SPAN: Final = "memtrace.feedback"
"""Name of the short span that carries a ``gen_ai.evaluation.result`` event about an answer,
parented to (or linked to) the answer's span; it may come days later, from another service."""
MEMTRACE_FEEDBACK_EXPECTED: Final = "memtrace.feedback.expected"
"""Optional, on the evaluation event or the feedback span: the expected answer, subject to content
capture."""
MEMTRACE_FEEDBACK_SIGNATURE: Final = "memtrace.feedback.signature"
"""(v0.3) Optional, on the evaluation event or the feedback span: ``hmac-sha256:<key id>:<hex>``
over the canonical JSON (sorted keys, no spaces) of ``{traceparent or case_id, label, score,
expected, comment, time}`` with a shared key; the only thing readers trust (contract section 6).
Also on a review's evaluation event, over ``{evaluation, traceparent, label, op_id, time}``
(``memtrace_otel.instrumentation._signing.canonical_review``)."""
MEMTRACE_FEEDBACK_EXPECTED_REF: Final = "memtrace.feedback.expected_ref"
"""(v0.3, ``REFERENCE`` capture) Instead of ``memtrace.feedback.expected``: the content store URL
of the expected answer."""
MEMTRACE_FEEDBACK_COMMENT_REF: Final = "memtrace.feedback.comment_ref"
"""(v0.3, ``REFERENCE`` capture) Instead of ``gen_ai.evaluation.explanation`` on feedback: the
content store URL of the comment."""
MEMTRACE_EXCEPTION_MESSAGE_REF: Final = "memtrace.exception.message_ref"
"""(v0.3, ``REFERENCE`` capture) On the ``exception`` event, instead of ``exception.message``: the
content store URL of the message."""
MEMTRACE_OPTIMIZE_VERSIONS: Final = "memtrace.optimize.versions"
"""Resource attribute of an optimiser run: the prompt and parameter variable refs in effect."""

# --- Upstream OpenTelemetry GenAI names (reused, never redefined) -------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_MEMORY_STORE_ID: Final = "gen_ai.memory.store.id"
GEN_AI_MEMORY_RECORD_ID: Final = "gen_ai.memory.record.id"
GEN_AI_MEMORY_RECORD_COUNT: Final = "gen_ai.memory.record.count"
GEN_AI_MEMORY_RECORDS: Final = "gen_ai.memory.records"
"""Upstream, opt-in: the records stored or returned, a JSON array of ``{content, id, score, metadata}``."""
GEN_AI_MEMORY_QUERY_TEXT: Final = "gen_ai.memory.query.text"
"""Upstream, opt-in: the query of a ``search_memory`` span."""
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
"""Upstream, opt-in: the messages a chat call sent (JSON)."""
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
"""Upstream, opt-in: the messages a chat call returned (JSON)."""
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
"""Upstream, opt-in: the instructions (system prompt) a chat call sent, apart from its messages."""
GEN_AI_INPUT_MESSAGES_REF: Final = "gen_ai.input.messages_ref"
"""Upstream ("Uploading content to external storage"): where ``gen_ai.input.messages`` was uploaded."""
GEN_AI_OUTPUT_MESSAGES_REF: Final = "gen_ai.output.messages_ref"
"""Upstream: where ``gen_ai.output.messages`` was uploaded."""
GEN_AI_SYSTEM_INSTRUCTIONS_REF: Final = "gen_ai.system_instructions_ref"
"""Upstream: where ``gen_ai.system_instructions`` was uploaded."""
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_SYSTEM: Final = "gen_ai.system"
"""Deprecated upstream name of the provider; still read, superseded by ``gen_ai.provider.name``."""
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
"""Upstream: the GenAI provider (``openai``, ...); replaces ``gen_ai.system``."""
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
GEN_AI_EVALUATION_RESULT_EVENT: Final = "gen_ai.evaluation.result"
"""Upstream event (on a span, or a log record's event name) carrying one evaluation of an answer."""
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
"""Upstream: the evaluator's metric, e.g. ``user_feedback``, ``correctness``."""
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
"""Upstream: a numeric score; by default 0 marks a failure and 1 a success (contract section 5)."""
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
"""Upstream: a label; by default ``incorrect`` marks a failure and ``correct`` a success."""

# --- Standard OpenTelemetry names we read ------------------------------------------------------
SERVICE_NAME: Final = "service.name"
EXCEPTION_TYPE: Final = "exception.type"
"""Upstream, on the ``exception`` event: the exception's type (always recorded)."""
EXCEPTION_MESSAGE: Final = "exception.message"
"""Upstream: the exception's message; recorded only as content capture allows, redacted and cut."""
EXCEPTION_STACKTRACE: Final = "exception.stacktrace"
"""Upstream: the stack frames; its last line carries the message only when it is recorded."""
EXCEPTION_ESCAPED: Final = "exception.escaped"
"""Upstream (deprecated, kept for readers): ``"True"`` when the exception left the op's block."""

# --- SDK health metrics (metric names and their attributes, not span attributes) ---------------
METRIC_SDK_SPANS_DROPPED: Final = "memtrace.sdk.spans.dropped"
"""Observable counter (``{span}``): spans ``CountingBatchSpanProcessor`` dropped because its queue was full."""
METRIC_OTEL_COMPONENT_NAME: Final = "otel.component.name"
"""Upstream (OTel SDK health metrics), a data-point attribute: which processor instance a data point is about, e.g. ``memtrace_otel.batching_span_processor/0``."""
METRIC_CONTENT_DROPPED: Final = "memtrace.content.dropped"
"""(v0.3) Observable counter (``{object}``): objects ``REFERENCE`` capture could not write to its
content store (queue full, store unreachable or refusing, shutdown budget spent)."""
METRIC_NAMES: Final[tuple[str, ...]] = (
    METRIC_SDK_SPANS_DROPPED,
    METRIC_OTEL_COMPONENT_NAME,
    METRIC_CONTENT_DROPPED,
)
"""The metric names and data-point attributes above (``METRIC_*``: not span attributes)."""

# --- Names that are not attributes -------------------------------------------------------------
EXCEPTION_EVENT: Final = "exception"
"""Upstream: the span event recording an exception the app raised through an op."""
OP_SPAN_NAME_PREFIX: Final = "memtrace."
"""Ops that touch no memory store are named ``memtrace.<kind> <op.name>``."""
METADATA_TRACEPARENT: Final = "memtrace_traceparent"
"""Key under which a memory record's metadata carries its writer's W3C ``traceparent``."""
METADATA_VERSION: Final = "memtrace_version"
"""Key under which a memory record's metadata carries the version its traced writer gave it
(so a reader in any process names ``<id>@<version>`` without reading the record's history)."""

_NOT_ATTRIBUTES = frozenset(
    [
        "MEMTRACE_VARIABLE_EVENT",
        "MEMTRACE_ATTRIBUTION_SPAN",
        "MEMTRACE_FEEDBACK_SPAN",
        "MEMTRACE_REVIEW_SPAN",
        "GEN_AI_EVALUATION_RESULT_EVENT",
        "EXCEPTION_EVENT",
        "OP_SPAN_NAME_PREFIX",
        "METADATA_TRACEPARENT",
        "METADATA_VERSION",
    ]
)

SPAN_AND_EVENT_NAMES: Final[tuple[str, ...]] = (
    MEMTRACE_VARIABLE_EVENT,
    MEMTRACE_ATTRIBUTION_SPAN,
    MEMTRACE_FEEDBACK_SPAN,
    MEMTRACE_REVIEW_SPAN,
    GEN_AI_EVALUATION_RESULT_EVENT,
    EXCEPTION_EVENT,
)
"""Names of the spans and events the contract defines (not attributes)."""

# Keep this last: it collects every attribute constant defined above.
ALL_ATTRIBUTE_NAMES: Final[tuple[str, ...]] = tuple(
    value
    for key, value in dict(globals()).items()
    if key.isupper()
    and isinstance(value, str)
    and not key.startswith(("METRIC_", "_"))
    and key not in _NOT_ATTRIBUTES
)
"""Every span, event and link attribute name above (not metric names or span names; environment
variables live in :mod:`memtrace_otel.semconv.env`)."""

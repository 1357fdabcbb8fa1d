"""The model behind the model-based attribution methods: a small protocol, an OpenAI-compatible
client, and a session that adds reply validation, an on-disk cache and accounting.

Layers, from the wire up:

- :class:`ChatModel` is all a method needs from a model: ``complete(messages, *, schema_name)``
  returning the reply text and its token usage. Any object with that shape can be injected.
- :class:`OpenAIChatModel` speaks to any OpenAI-compatible ``/v1/chat/completions`` endpoint
  through the ``openai`` client (imported lazily), asks for JSON replies, and retries rate limits,
  server errors, timeouts and refused connections a bounded number of times with exponential
  backoff. When the endpoint stays unreachable it stops retrying until it answers again, so a
  dead endpoint costs one attempt per remaining case rather than a full backoff each.
- :class:`ModelSession` decodes and validates each reply (one corrective retry when it is
  malformed), keeps replies in an on-disk cache keyed by the prompt, counts calls and tokens, and
  runs every call inside :func:`~memtrace_otel.instrumentation.suppress_tracing` so the judge's
  own LLM calls never land in the user's traces.

Every failure that should end the current case surfaces as :class:`~memtrace_otel.errors.ModelError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from memtrace_otel._internal import backoff_delay
from memtrace_otel._openai import endpoint_settings, missing_settings, openai_client
from memtrace_otel.errors import ModelError
from memtrace_otel.instrumentation import suppress_tracing
from memtrace_otel.semconv import env as E

Message = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": ...}``."""

T = TypeVar("T")

_RESPONSE_FORMATS = ("json_object", "json_schema", "none")
_RETRY_STATUSES = frozenset({408, 409, 429})  # plus every 5xx

# JSON Schemas of the replies, by schema name (sent with ``response_format="json_schema"``; the
# session validates every reply itself either way, since many compatible servers ignore them).
REPLY_SCHEMAS: dict[str, dict[str, Any]] = {
    "op_verdict": {
        "type": "object",
        "properties": {
            "error_type": {
                "type": "string",
                "enum": [
                    "ExtractionError",
                    "UpdateError",
                    "DeletionError",
                    "RetrievalError",
                    "ResponseError",
                    "none",
                ],
            },
            "op_id": {"type": ["string", "null"]},
            "decisive": {"type": "boolean"},
            "reason": {"type": "string"},
        },
        "required": ["error_type", "op_id", "decisive", "reason"],
        "additionalProperties": False,
    },
    "half": {
        "type": "object",
        "properties": {
            "half": {"type": "string", "enum": ["first", "second"]},
            "reason": {"type": "string"},
        },
        "required": ["half", "reason"],
        "additionalProperties": False,
    },
}


@runtime_checkable
class ChatModel(Protocol):
    """What the model-based methods need from a model.

    ``model`` names the model (it is part of the cache key). ``complete`` sends the messages and
    returns the reply text and a usage dict with ``prompt_tokens``, ``completion_tokens`` and
    ``attempts`` (HTTP requests made, retries included). It raises
    :class:`~memtrace_otel.errors.ModelError` when no reply could be had.
    """

    model: str

    def complete(
        self, messages: Sequence[Message], *, schema_name: str
    ) -> tuple[str, dict[str, int]]:
        """The model's reply to ``messages``; ``schema_name`` names the expected reply shape."""
        ...


@dataclass(frozen=True)
class EndpointConfig:
    """Where the model lives: resolved argument > environment variable (the endpoint policy of
    :mod:`memtrace_otel._openai`: named, never defaulted; a key unless the endpoint is loopback).

    Attributes:
        model: model name (``MEMTRACE_ATTRIBUTION_MODEL``).
        base_url: the endpoint's base URL, e.g. ``http://127.0.0.1:8000/v1`` (``OPENAI_BASE_URL``).
        api_key: its API key (``OPENAI_API_KEY``).
    """

    model: str
    base_url: str
    api_key: str

    @classmethod
    def resolve(
        cls, *, model: str | None = None, base_url: str | None = None, api_key: str | None = None
    ) -> EndpointConfig:
        """Arguments first, then the environment.

        The base URL is required on purpose: memory content leaves the machine, so where it goes
        must be stated, never defaulted.

        Raises:
            ValueError: something is missing; the message names every missing setting.
        """
        chosen = model or os.environ.get(E.ENV_MEMTRACE_ATTRIBUTION_MODEL, "").strip()
        url, key = endpoint_settings(base_url, api_key)
        missing = [] if chosen else [f"model= or {E.ENV_MEMTRACE_ATTRIBUTION_MODEL}"]
        missing += missing_settings(url, key)
        if not chosen or url is None or key is None:
            raise ValueError(
                "model-based attribution needs an OpenAI-compatible endpoint; missing: "
                + ", ".join(missing)
            )
        return cls(model=chosen, base_url=url, api_key=key)


class OpenAIChatModel:
    """A :class:`ChatModel` on an OpenAI-compatible chat completions endpoint.

    Args:
        model: model name (else ``MEMTRACE_ATTRIBUTION_MODEL``).
        base_url: endpoint base URL (else ``OPENAI_BASE_URL``).
        api_key: API key (else ``OPENAI_API_KEY``).
        timeout: seconds per HTTP request.
        max_retries: retries after a rate limit, server error, timeout or refused connection.
        backoff: first retry delay in seconds; doubles each retry (a ``Retry-After`` header wins
            when longer), capped by ``max_backoff``.
        max_backoff: the longest single delay.
        response_format: ``"json_object"`` (JSON mode, default), ``"json_schema"`` (structured
            output with the reply's schema) or ``"none"`` (servers without either).
        temperature: sampling temperature (0: as repeatable as the server allows).
        max_tokens: cap on reply tokens.

    Raises:
        ValueError: at construction, when the endpoint is not fully configured or an option is
            out of range.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        response_format: str = "json_object",
        temperature: float = 0.0,
        max_tokens: int = 512,
    ) -> None:
        config = EndpointConfig.resolve(model=model, base_url=base_url, api_key=api_key)
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff < 0 or max_backoff < 0:
            raise ValueError("backoff and max_backoff must be >= 0")
        if response_format not in _RESPONSE_FORMATS:
            raise ValueError(
                f"response_format must be one of {', '.join(_RESPONSE_FORMATS)}, "
                f"got {response_format!r}"
            )

        self.model = config.model
        self.base_url = config.base_url
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.response_format = response_format
        self.temperature = temperature
        self.max_tokens = max_tokens
        # Our own retry loop (not the client's) so every retry is counted and bounded here.
        self._client = openai_client(
            config.base_url, config.api_key, timeout=timeout, max_retries=0
        )
        self._unreachable = False

    def complete(
        self, messages: Sequence[Message], *, schema_name: str
    ) -> tuple[str, dict[str, int]]:
        """Send ``messages``; the reply text and its usage (see :class:`ChatModel`).

        Raises:
            ModelError: a non-retryable API error, or retries exhausted.
        """
        import openai

        extra: dict[str, Any] = {}
        if self.response_format == "json_object":
            extra["response_format"] = {"type": "json_object"}
        elif self.response_format == "json_schema":
            schema = REPLY_SCHEMAS.get(schema_name)
            if schema is not None:
                extra["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": schema_name, "schema": schema, "strict": True},
                }
        # A dead endpoint gets one attempt per call until it answers again.
        retries = 0 if self._unreachable else self.max_retries
        attempt = 0
        while True:
            attempt += 1
            try:
                with suppress_tracing():
                    response = self._client.chat.completions.create(
                        model=self.model,
                        messages=[dict(m) for m in messages],  # type: ignore[misc]
                        temperature=self.temperature,
                        max_tokens=self.max_tokens,
                        **extra,
                    )
            except openai.APIStatusError as exc:
                status = exc.status_code
                if (status in _RETRY_STATUSES or status >= 500) and attempt <= retries:
                    time.sleep(self._delay(attempt, exc.response.headers.get("retry-after")))
                    continue
                self._unreachable = False  # it answered, even if with an error
                raise ModelError(_status_reason(exc, attempt), status=status) from None
            except openai.APIConnectionError as exc:  # includes APITimeoutError
                if attempt <= retries:
                    time.sleep(self._delay(attempt, None))
                    continue
                self._unreachable = True
                what = "timed out" if isinstance(exc, openai.APITimeoutError) else "unreachable"
                raise ModelError(
                    f"{self.base_url} {what} after {attempt} attempt(s): {exc}"
                ) from None
            except openai.OpenAIError as exc:
                raise ModelError(f"{type(exc).__name__}: {exc}") from None
            self._unreachable = False
            return _reply_text(response), {**_usage(response), "attempts": attempt}

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        seconds = None
        if retry_after:
            # An HTTP date (not seconds) fails to parse: the exponential delay stands in.
            with contextlib.suppress(ValueError):
                seconds = float(retry_after)
        return float(
            backoff_delay(
                attempt, backoff=self.backoff, max_backoff=self.max_backoff, retry_after=seconds
            )
        )


def _status_reason(exc: Any, attempts: int) -> str:
    message = str(getattr(exc, "message", "") or exc).splitlines()[0][:200]
    return f"{message} after {attempts} attempt(s)"


def _reply_text(response: Any) -> str:
    """The first choice's text; ``""`` when the server sent none (the session calls it malformed)."""
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _usage(response: Any) -> dict[str, int]:
    usage = getattr(response, "usage", None)
    out = {}
    for key in ("prompt_tokens", "completion_tokens"):
        value = getattr(usage, key, None) if usage is not None else None
        out[key] = value if isinstance(value, int) else 0
    return out


class ReplyError(ValueError):
    """A reply that is not what the task asked for (raised by reply parsers)."""


def decode_reply(text: str) -> dict[str, Any]:
    """The JSON object of a reply (a surrounding Markdown code fence is tolerated).

    Raises:
        ReplyError: not a JSON object.

    >>> decode_reply('```json\\n{"half": "first", "reason": "x"}\\n```')
    {'half': 'first', 'reason': 'x'}
    """
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        if body.rstrip().endswith("```"):
            body = body.rstrip()[:-3]
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ReplyError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ReplyError(f"expected a JSON object, got {type(value).__name__}")
    return value


_USAGE_KEYS = (
    "calls",
    "cached_calls",
    "retries",
    "malformed",
    "prompt_tokens",
    "completion_tokens",
    "seconds",
)


class ModelSession:
    """Validation, cache and accounting around a :class:`ChatModel`.

    Args:
        chat: the model.
        cache_dir: a directory for cached replies (created when needed), or ``None`` for none.
            Each validated reply is one JSON file named by the SHA-256 of the model name, the
            reply schema and the messages, written atomically; a later identical prompt reads it
            and makes no call.

    The ``usage`` dict counts ``calls`` (requests answered, retries excluded), ``cached_calls``,
    ``retries`` (extra HTTP attempts after rate limits, errors and timeouts), ``malformed``
    (replies rejected by validation), ``prompt_tokens``, ``completion_tokens`` and ``seconds``
    spent waiting on the model.
    """

    def __init__(self, chat: ChatModel, *, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.chat = chat
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.usage: dict[str, float] = dict.fromkeys(_USAGE_KEYS, 0)

    def ask(
        self,
        messages: Sequence[Message],
        *,
        schema_name: str,
        parse: Callable[[dict[str, Any]], T],
    ) -> T:
        """The parsed reply to ``messages``.

        ``parse`` turns the decoded JSON object into the caller's value and raises
        :class:`ReplyError` when it is not acceptable. A rejected reply gets one corrective retry
        (the model sees its reply and what was wrong with it).

        Raises:
            ModelError: the endpoint failed, or the reply was still malformed after the retry.
        """
        key = cache_key(self.chat.model, schema_name, messages)
        cached = self._cache_get(key)
        if cached is not None:
            try:
                value = parse(decode_reply(cached))
            except ReplyError:
                pass  # stale or hand-edited entry: ask again
            else:
                self.usage["cached_calls"] += 1
                return value
        text = self._call(messages, schema_name)
        try:
            value = parse(decode_reply(text))
        except ReplyError as first:
            self.usage["malformed"] += 1
            retry = [
                *messages,
                {"role": "assistant", "content": text[:2000]},
                {
                    "role": "user",
                    "content": (
                        f"That reply was rejected: {first}. Reply again with only the JSON "
                        "object the task asks for."
                    ),
                },
            ]
            text = self._call(retry, schema_name)
            try:
                value = parse(decode_reply(text))
            except ReplyError as second:
                self.usage["malformed"] += 1
                raise ModelError(f"malformed reply after one corrective retry: {second}") from None
        self._cache_put(key, text)
        return value

    def _call(self, messages: Sequence[Message], schema_name: str) -> str:
        started = time.perf_counter()
        try:
            with suppress_tracing():
                text, usage = self.chat.complete(messages, schema_name=schema_name)
        finally:
            self.usage["seconds"] = round(self.usage["seconds"] + time.perf_counter() - started, 6)
        self.usage["calls"] += 1
        self.usage["retries"] += max(0, int(usage.get("attempts", 1)) - 1)
        self.usage["prompt_tokens"] += int(usage.get("prompt_tokens", 0))
        self.usage["completion_tokens"] += int(usage.get("completion_tokens", 0))
        return text

    # -- cache -------------------------------------------------------------------------------
    def _cache_path(self, key: str) -> Path | None:
        return self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir is not None else None

    def _cache_get(self, key: str) -> str | None:
        path = self._cache_path(key)
        if path is None:
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # missing, or torn by a crash on a file system without atomic rename
        text = entry.get("text") if isinstance(entry, dict) else None
        return text if isinstance(text, str) else None

    def _cache_put(self, key: str, text: str) -> None:
        path = self._cache_path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = json.dumps({"model": self.chat.model, "text": text}, ensure_ascii=False)
        # Write aside, then rename over: readers see the old file or the whole new one.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(entry)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def cache_key(model: str, schema_name: str, messages: Sequence[Message]) -> str:
    """The cache key of a prompt: SHA-256 of the model, the reply schema and the messages.

    >>> len(cache_key("m", "half", [{"role": "user", "content": "hi"}]))
    64
    """
    payload = json.dumps(
        {"model": model, "schema": schema_name, "messages": [dict(m) for m in messages]},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


__all__ = [
    "REPLY_SCHEMAS",
    "ChatModel",
    "EndpointConfig",
    "Message",
    "ModelSession",
    "OpenAIChatModel",
    "ReplyError",
    "cache_key",
    "decode_reply",
]

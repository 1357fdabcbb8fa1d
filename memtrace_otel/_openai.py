"""The package's one way to reach an OpenAI-compatible endpoint: where memory content may go.

Both users of a model, the reference systems' ``openai`` engine and model-based attribution,
resolve their endpoint here and build their client here, so one policy decides:

- the endpoint is the ``base_url`` argument, else ``OPENAI_BASE_URL``; it is never defaulted
  (memory content leaves the machine, so where it goes must be stated);
- the API key is the ``api_key`` argument, else ``OPENAI_API_KEY``; only a loopback endpoint
  may go without one;
- retries are the ``openai`` client's own (connection errors, 408, 429, 5xx, ``Retry-After``),
  as many as the caller says.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from memtrace_otel.semconv.env import ENV_OPENAI_API_KEY, ENV_OPENAI_BASE_URL

if TYPE_CHECKING:
    import openai

_LOOPBACK = re.compile(r"https?://(127\.|localhost[:/]|localhost$|\[::1\])")


def endpoint_settings(base_url: str | None, api_key: str | None) -> tuple[str | None, str | None]:
    """The endpoint and key from the arguments, else the environment (``None`` when missing).

    A loopback endpoint without a key gets a placeholder one (the client insists on a key).

    >>> endpoint_settings("http://127.0.0.1:8000/v1", None)[1]
    'unused'
    """
    url = (base_url or os.environ.get(ENV_OPENAI_BASE_URL, "")).strip() or None
    key = (api_key or os.environ.get(ENV_OPENAI_API_KEY, "")).strip() or None
    if key is None and url is not None and _LOOPBACK.match(url):
        key = "unused"
    return url, key


def missing_settings(base_url: str | None, api_key: str | None) -> list[str]:
    """What :func:`endpoint_settings` could not find, as ``argument= or VARIABLE`` items."""
    missing = []
    if base_url is None:
        missing.append(f"base_url= or {ENV_OPENAI_BASE_URL}")
    if api_key is None:
        missing.append(f"api_key= or {ENV_OPENAI_API_KEY}")
    return missing


def openai_client(
    base_url: str, api_key: str, *, timeout: float, max_retries: int
) -> openai.OpenAI:
    """An ``openai.OpenAI`` client for a resolved endpoint (``openai`` imported on first use)."""
    import openai

    return openai.OpenAI(
        base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
    )

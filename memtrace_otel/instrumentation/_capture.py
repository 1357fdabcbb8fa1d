"""Content capture: what of a variable's value leaves the process, resolved once.

Every value gets a ``sha256`` digest of its canonical form, whatever the settings, so the graph
and attribution work without content. The value itself is recorded only when capture is on; it
passes the redaction hook first and is cut to the size limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from memtrace_otel._internal import data_warning, internal_error
from memtrace_otel.semconv import CaptureMode
from memtrace_otel.semconv.attributes import (
    ENV_CAPTURE_MESSAGE_CONTENT,
    ENV_MEMTRACE_CAPTURE_CONTENT,
    ENV_MEMTRACE_MAX_VALUE_LENGTH,
)

DEFAULT_MAX_VALUE_LENGTH = 4096
"""Characters of a value kept by default (Tempo cuts attributes at 2 KiB unless configured)."""

Redactor = Callable[[str], str]
"""A redaction hook: gets the value as a string, returns what may be recorded."""

BUILTIN_REDACTOR = "builtin"
"""``CaptureConfig(redact="builtin")`` selects :func:`redact_pii` as the hook."""

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# 13-19 digits, optionally grouped by single spaces or dashes (how card numbers are written).
_CARD = re.compile(r"(?<![\w+])\d(?:[ -]?\d){12,18}(?!\w)")
# An optional "+" and country code, then digit groups separated by a space, dot, dash or
# parentheses: "+351 912 345 678", "(555) 123-4567", "555.123.4567".
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]?\d{2,4}){1,4}(?!\w)"
)
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2 == 1:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group())
    return "<card>" if _luhn_ok(digits) else match.group()


def _phone(match: re.Match[str]) -> str:
    text = match.group()
    digits = re.sub(r"\D", "", text)
    # Below 9 digits (7 with a "+") most matches are dates, amounts or ids, not phone numbers;
    # an ISO date is kept whatever its length so memories keep their timeline.
    enough = len(digits) >= (7 if text.startswith("+") else 9)
    if not enough or len(digits) > 15 or _ISO_DATE.fullmatch(text[:10]):
        return text
    return "<phone>"


def redact_pii(text: str) -> str:
    """Replace e-mail addresses, card numbers and phone numbers with placeholders.

    The built-in redaction hook (``CaptureConfig(redact="builtin")``). Card numbers must pass
    the Luhn check, so order numbers and other long ids are kept; phone numbers need 9 to 15
    digits (7 with a leading ``+``). It is a safety net for common identifiers, not a
    guarantee: names and addresses pass through, so pair it with your own hook when needed.

    >>> redact_pii("mail ana@example.com or call +351 912 345 678")
    'mail <email> or call <phone>'
    >>> redact_pii("card 4111 1111 1111 1111, order 1234 5678 9012 3456")
    'card <card>, order 1234 5678 9012 3456'
    >>> redact_pii("moved to Porto on 2024-05-01")
    'moved to Porto on 2024-05-01'
    """
    text = _EMAIL.sub("<email>", text)
    text = _CARD.sub(_card, text)
    return _PHONE.sub(_phone, text)


_LEGACY = {"true": CaptureMode.SPAN_AND_EVENT, "false": CaptureMode.NO_CONTENT}


def parse_capture_mode(value: str | CaptureMode, *, source: str = "capture mode") -> CaptureMode:
    """Parse one of the four upstream values or legacy ``true``/``false`` (any case).

    Raises:
        ValueError: an unknown value.

    >>> parse_capture_mode("span_only")
    <CaptureMode.SPAN_ONLY: 'SPAN_ONLY'>
    >>> parse_capture_mode("true")
    <CaptureMode.SPAN_AND_EVENT: 'SPAN_AND_EVENT'>
    """
    if isinstance(value, CaptureMode):
        return value
    text = str(value).strip()
    if text.lower() in _LEGACY:
        return _LEGACY[text.lower()]
    try:
        return CaptureMode(text.upper())
    except ValueError:
        allowed = ", ".join([*(m.value for m in CaptureMode), "true", "false"])
        raise ValueError(f"invalid {source} {value!r}: expected one of {allowed}") from None


@dataclass(frozen=True)
class CaptureConfig:
    """Content-capture settings, resolved at construction: argument > environment > default.

    Args:
        mode: a :class:`CaptureMode` or its name; ``None`` reads ``MEMTRACE_CAPTURE_CONTENT``,
            then ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, else ``NO_CONTENT``.
            Our values live in span events, so every mode but ``NO_CONTENT`` records them.
        max_value_length: characters kept of a value; ``None`` reads
            ``MEMTRACE_MAX_VALUE_LENGTH``, else 4096.
        redact: a hook every value passes before it is recorded, or ``"builtin"`` for
            :func:`redact_pii` (e-mail, phone and card numbers). If it raises, the value is
            dropped (digest only), never recorded unredacted. The digest is always of the raw
            value: attribution compares digests across spans.

    Raises:
        ValueError: an unknown mode or a non-positive length, from arguments or environment,
            or a ``redact`` that is neither callable nor ``"builtin"``.

    >>> CaptureConfig(mode="SPAN_ONLY", redact="builtin").mask("ana@example.com")
    ('<email>', False)
    """

    mode: CaptureMode | str | None = None
    max_value_length: int | None = None
    redact: Redactor | Literal["builtin"] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.mode is not None:
            mode = parse_capture_mode(self.mode)
        elif os.environ.get(ENV_MEMTRACE_CAPTURE_CONTENT):
            mode = parse_capture_mode(
                os.environ[ENV_MEMTRACE_CAPTURE_CONTENT], source=ENV_MEMTRACE_CAPTURE_CONTENT
            )
        elif os.environ.get(ENV_CAPTURE_MESSAGE_CONTENT):
            mode = parse_capture_mode(
                os.environ[ENV_CAPTURE_MESSAGE_CONTENT], source=ENV_CAPTURE_MESSAGE_CONTENT
            )
        else:
            mode = CaptureMode.NO_CONTENT
        object.__setattr__(self, "mode", mode)

        length: Any = self.max_value_length
        where = "max_value_length"
        if length is None and os.environ.get(ENV_MEMTRACE_MAX_VALUE_LENGTH):
            length, where = os.environ[ENV_MEMTRACE_MAX_VALUE_LENGTH], ENV_MEMTRACE_MAX_VALUE_LENGTH
        if length is None:
            length = DEFAULT_MAX_VALUE_LENGTH
        try:
            length = int(length)
        except (TypeError, ValueError):
            raise ValueError(f"invalid {where} {length!r}: expected a positive integer") from None
        if length < 1:
            raise ValueError(f"invalid {where} {length!r}: expected a positive integer")
        object.__setattr__(self, "max_value_length", length)
        if self.redact == BUILTIN_REDACTOR:
            object.__setattr__(self, "redact", redact_pii)
        elif self.redact is not None and not callable(self.redact):
            raise ValueError(f"redact must be callable or 'builtin', got {self.redact!r}")

    @property
    def captures_values(self) -> bool:
        """Whether values (not only digests) are recorded."""
        return self.mode is not CaptureMode.NO_CONTENT

    def mask(self, text: str) -> tuple[str | None, bool]:
        """Apply the redaction hook and the size limit to one value.

        Returns:
            ``(value, truncated)``; ``value`` is ``None`` when capture is off or the hook failed.
        """
        if not self.captures_values:
            return None, False
        hook = self.redact
        if callable(hook):
            try:
                text = hook(text)
                if not isinstance(text, str):
                    raise TypeError(f"redaction hook returned {type(text).__name__}, not str")
            except Exception:
                internal_error("capture.redact")
                return None, False
        limit: int = self.max_value_length  # type: ignore[assignment]
        if len(text) > limit:
            return text[:limit], True
        return text, False


def canonical_value(value: Any) -> str:
    """The canonical string form of a value: strings as they are, anything else as sorted JSON.

    Values JSON cannot encode fall back to ``repr`` with one warning per type.

    >>> canonical_value({"b": 1, "a": [1, 2]})
    '{"a":[1,2],"b":1}'
    """
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        data_warning(
            f"unserialisable:{type(value).__name__}",
            "memtrace-otel: a %s value is not JSON-serialisable; its repr() is recorded instead",
            type(value).__name__,
        )
        return repr(value)


def digest(text: str) -> str:
    """``sha256:<hex>`` of a canonical value.

    >>> digest("abc")
    'sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
    """
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

"""Signed feedback (contract v0.3 section 6): the one place that canonicalises, signs and verifies.

Anything that can reach the Collector can write any span and any resource attribute,
``service.name`` included, so a reader can trust a feedback only when it carries a signature made
with a key the reader shares. ``memtrace.feedback.signature`` is ``hmac-sha256:<key id>:<hex>``, an
HMAC-SHA256 with the shared key over the canonical JSON (sorted keys, no spaces, ASCII) of the
fields that decide what the feedback does:

- ``traceparent``: the answer's span as ``00-<trace id>-<span id>-01`` (version and flags fixed:
  a link carries no flags on every wire), when the feedback names the answer's span;
- ``case_id``: the ``memtrace.case.id`` it names, when it names one (both when it names both, so
  neither can be changed without breaking the signature);
- ``label``, ``score`` (a float), ``expected`` and ``comment`` (``null`` when absent), as recorded
  (the expected answer after redaction and cuts);
- ``time``: the evaluation event's time, integer nanoseconds since the epoch.

A person's review of a verdict (``memtrace.review``) is signed the same way, in the same
attribute, over :func:`canonical_review`: ``evaluation`` (``"memtrace.review"``, so that a
feedback's signature never verifies as a review's, nor the other way round), ``traceparent``
(the verdict span it judges), ``label``, ``op_id`` (``null`` when absent) and ``time``.

>>> key = FeedbackKey(b"s3cret", "k1")
>>> body = canonical_feedback(traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
...     case_id=None, label="incorrect", score=0.0, expected=None, comment=None, time_unix_nano=5)
>>> body
'{"comment":null,"expected":null,"label":"incorrect","score":0.0,"time":5,"traceparent":"00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01"}'
>>> signature = key.sign(body)
>>> signature.startswith("hmac-sha256:k1:"), key.verify(body, signature)
(True, None)
>>> key.verify(body.replace("incorrect", "correct"), signature)
'altered'
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field

from memtrace_otel._settings import resolve
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E

ALGORITHM = "hmac-sha256"
"""The signature's algorithm prefix."""


def answer_traceparent(trace_id: str, span_id: str) -> str:
    """The canonical form of an answer's span in a signed payload (flags fixed to ``01``)."""
    return f"00-{trace_id.lower()}-{span_id.lower()}-01"


def canonical_feedback(
    *,
    traceparent: str | None,
    case_id: str | None,
    label: str | None,
    score: float | None,
    expected: str | None,
    comment: str | None,
    time_unix_nano: int,
) -> str:
    """The canonical JSON a feedback signature covers (see the module docstring)."""
    payload: dict[str, object] = {
        "label": label,
        "score": None if score is None else float(score),
        "expected": expected,
        "comment": comment,
        "time": int(time_unix_nano),
    }
    if traceparent:
        payload["traceparent"] = traceparent
    if case_id:
        payload["case_id"] = case_id
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def canonical_review(
    *, traceparent: str, label: str | None, op_id: str | None, time_unix_nano: int
) -> str:
    """The canonical JSON a review's signature covers (see the module docstring).

    >>> canonical_review(traceparent="00-" + "a" * 32 + "-" + "c" * 16 + "-01",
    ...     label="confirmed", op_id=None, time_unix_nano=5)
    '{"evaluation":"memtrace.review","label":"confirmed","op_id":null,"time":5,"traceparent":"00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-cccccccccccccccc-01"}'
    """
    payload: dict[str, object] = {
        "evaluation": A.MEMTRACE_REVIEW_SPAN,  # the review's gen_ai.evaluation.name
        "traceparent": traceparent,
        "label": label,
        "op_id": op_id,
        "time": int(time_unix_nano),
    }
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _key_id(value: object) -> str:
    text = str(value)
    if ":" in text or any(c.isspace() for c in text):
        raise ValueError("expected a key id without ':' or spaces")
    return text


def _fingerprint(secret: bytes) -> str:
    return hmac.new(secret, b"memtrace.feedback.key-id", hashlib.sha256).hexdigest()[:8]


@dataclass(frozen=True)
class FeedbackKey:
    """A shared feedback key and its id.

    Args:
        secret: the key's bytes (non-empty).
        key_id: the id written in signatures (no ``:``); empty: a fingerprint of the key.

    Raises:
        ValueError: an empty key, or a key id with ``:`` or whitespace.
    """

    secret: bytes = field(repr=False)
    key_id: str = ""

    def __post_init__(self) -> None:
        if not self.secret:
            raise ValueError("the feedback key is empty")
        if not self.key_id:
            object.__setattr__(self, "key_id", _fingerprint(self.secret))
        if ":" in self.key_id or any(c.isspace() for c in self.key_id):
            raise ValueError(f"a feedback key id has no ':' or spaces, got {self.key_id!r}")

    @classmethod
    def from_env(cls) -> FeedbackKey | None:
        """The key of ``MEMTRACE_FEEDBACK_KEY`` (and ``MEMTRACE_FEEDBACK_KEY_ID``), or ``None``.

        A key id that is not valid is logged once and replaced by the key's fingerprint (the
        one settings resolver, :mod:`memtrace_otel._settings`).
        """
        secret = resolve("key", None, E.ENV_MEMTRACE_FEEDBACK_KEY, "", str)
        if not secret:
            return None
        key_id = resolve("key_id", None, E.ENV_MEMTRACE_FEEDBACK_KEY_ID, "", _key_id)
        return cls(secret.encode("utf-8"), key_id)

    def sign(self, canonical: str) -> str:
        """``hmac-sha256:<key id>:<hex>`` over ``canonical``."""
        digest = hmac.new(self.secret, canonical.encode("utf-8"), hashlib.sha256).hexdigest()
        return f"{ALGORITHM}:{self.key_id}:{digest}"

    def verify(self, canonical: str | None, signature: str | None) -> str | None:
        """``None`` when ``signature`` signs ``canonical`` with this key, else why not:
        ``unsigned``, ``unknown_key`` (another algorithm or key id) or ``altered``."""
        if not signature or canonical is None:
            return "unsigned"
        parts = signature.split(":")
        if len(parts) != 3 or parts[0] != ALGORITHM or parts[1] != self.key_id:
            return "unknown_key"
        if not hmac.compare_digest(self.sign(canonical), signature):
            return "altered"
        return None


__all__ = [
    "ALGORITHM",
    "FeedbackKey",
    "answer_traceparent",
    "canonical_feedback",
    "canonical_review",
]

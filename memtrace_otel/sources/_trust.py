"""The feedback trust policy (contract v0.3 section 6; threat model in docs/feedback.md).

Anything that can reach the Collector can write any span, any event and any resource attribute,
``service.name`` included. So a service allow-list is a convenience, never a defence: only a
signature made with a shared key verifies a feedback. The policy, applied to every outcome
(``memtrace.feedback`` spans, other evaluators' ``gen_ai.evaluation.result`` events and log
records alike) before any of them decides a case:

- **With a key** (``MEMTRACE_FEEDBACK_KEY``): an outcome is used only when its signature verifies.
  Unsigned (``unsigned``), signed with another key (``unknown_key``), altered after signing
  (``altered``) and a signature already carried by another record (``replayed``) are refused.
- **Without a key**: outcomes are used as before, latest wins, and each is marked ``unverified``
  (``allowed`` when its ``service.name`` is on the allow-list).
- **Always**: an outcome timestamped later than the run's start plus a skew bound (5 minutes by
  default) is refused (``future``): feedback may arrive days late, never from the future. And an
  outcome that names its case only by id, from a trace that is not the case's (``id_only``), is
  used only when verified or allowed (checked where cases are resolved,
  :mod:`memtrace_otel.attribution`).

Refusals are counted by reason and reported, never used.

>>> from memtrace_otel.sources import Outcome
>>> policy = TrustPolicy(now_unix_nano=10**18)
>>> used, refused, _ = policy.screen([Outcome(True, case_id="q", time_unix_nano=4 * 10**18)])
>>> used, refused
([], {'future': 1})
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, cast

from memtrace_otel.instrumentation._signing import FeedbackKey


class Screened(Protocol):
    """What the policy reads of an outcome (:class:`~memtrace_otel.sources.Outcome`)."""

    @property
    def time_unix_nano(self) -> int: ...
    @property
    def signature(self) -> str | None: ...
    @property
    def signed(self) -> str | None: ...
    @property
    def origin(self) -> str: ...
    @property
    def service(self) -> str | None: ...
    @property
    def trust(self) -> str: ...
    @property
    def source(self) -> str: ...


OutcomeT = TypeVar("OutcomeT", bound=Screened)

VERIFIED = "verified"
ALLOWED = "allowed"
UNVERIFIED = "unverified"
DEFAULT_SKEW_SECONDS = 300.0
"""How far past the run's start an outcome's time may lie (clock skew) before it is refused."""
REFUSALS = ("unsigned", "unknown_key", "altered", "replayed", "future", "id_only")
"""Why the policy refuses an outcome (the keys of ``summary.json``'s ``feedback.refused``)."""
SAMPLE = 5


@dataclass(frozen=True)
class TrustPolicy:
    """Which outcomes count (see the module docstring).

    Args:
        key: the shared key; ``None``: no signature required (outcomes marked unverified).
        skew_seconds: how far past ``now`` an outcome's time may lie.
        allowed_services: ``service.name`` values whose unsigned outcomes may name a case by id
            alone (a convenience for trusted networks, never a defence).
        now_unix_nano: the run's start; ``None``: the time of screening.

    Raises:
        ValueError: a negative or non-finite skew.
    """

    key: FeedbackKey | None = None
    skew_seconds: float = DEFAULT_SKEW_SECONDS
    allowed_services: frozenset[str] = field(default_factory=frozenset)
    now_unix_nano: int | None = None

    def __post_init__(self) -> None:
        skew = self.skew_seconds
        if isinstance(skew, bool) or not isinstance(skew, int | float) or not 0 <= skew < 1e12:
            raise ValueError(f"the feedback skew must be a number of seconds >= 0, got {skew!r}")
        object.__setattr__(self, "allowed_services", frozenset(self.allowed_services))

    @classmethod
    def from_env(
        cls,
        *,
        skew_seconds: float = DEFAULT_SKEW_SECONDS,
        allowed_services: Iterable[str] = (),
        now_unix_nano: int | None = None,
    ) -> TrustPolicy:
        """The policy with the key of ``MEMTRACE_FEEDBACK_KEY`` (none when unset)."""
        return cls(
            FeedbackKey.from_env(),
            skew_seconds,
            frozenset(allowed_services),
            now_unix_nano if now_unix_nano is not None else time.time_ns(),
        )

    def screen(
        self, outcomes: Iterable[OutcomeT]
    ) -> tuple[list[OutcomeT], dict[str, int], list[str]]:
        """The outcomes this policy lets count, each marked with its trust; the refusals by
        reason; and a few refused ones described (``reason: source``), for the summary."""
        now = self.now_unix_nano if self.now_unix_nano is not None else time.time_ns()
        limit = now + int(self.skew_seconds * 1e9)
        used: list[OutcomeT] = []
        refused: dict[str, int] = {}
        sample: list[str] = []
        carrier: dict[str, str] = {}

        def refuse(reason: str, outcome: OutcomeT) -> None:
            refused[reason] = refused.get(reason, 0) + 1
            if len(sample) < SAMPLE:
                sample.append(f"{reason}: {outcome.source or outcome.origin}")

        for outcome in outcomes:
            if outcome.time_unix_nano > limit:
                refuse("future", outcome)
                continue
            trust = UNVERIFIED
            if self.key is not None:
                reason = self.key.verify(outcome.signed, outcome.signature)
                if reason is None and outcome.signature is not None:
                    first = carrier.setdefault(outcome.signature, outcome.origin)
                    if first != outcome.origin:
                        reason = "replayed"
                if reason is not None:
                    refuse(reason, outcome)
                    continue
                trust = VERIFIED
            elif outcome.service is not None and outcome.service in self.allowed_services:
                trust = ALLOWED
            used.append(
                outcome
                if outcome.trust == trust
                else cast(OutcomeT, replace(cast(Any, outcome), trust=trust))
            )
        return used, refused, sample


DEFAULT_POLICY = TrustPolicy()

__all__ = [
    "ALLOWED",
    "DEFAULT_POLICY",
    "DEFAULT_SKEW_SECONDS",
    "REFUSALS",
    "UNVERIFIED",
    "VERIFIED",
    "TrustPolicy",
]

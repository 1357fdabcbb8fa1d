"""Injected faults: seeded, rate-controlled, one kind of damage per op kind.

Each fault fires at an op with probability ``rate``, decided by a hash of
``(seed, fault, system, store, key)`` where ``key`` names the op by its content (the message,
the record and version, the case), not by its position, so a counterfactual replay that changes
one op upstream does not reshuffle the faults downstream.

Faults aim at what matters: a construction fault fires only at an op that handles evidence of
some question of the store, and damages that evidence; a question-time fault damages the
evidence of its own case. Whether a fault becomes a *label* is decided later, by counterfactual
replay: only if the case fails and undoing that op alone makes the answer right.

>>> spec = FaultSpec.parse("drop_fact=0.5,wrong_answer")
>>> spec.rate("drop_fact"), spec.rate("wrong_answer"), spec.rate("retrieval_miss")
(0.5, 0.2, 0.0)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from memtrace_otel.semconv import OpKind

FAULTS: Mapping[str, OpKind] = MappingProxyType(
    {
        "drop_fact": OpKind.EXTRACT,
        "lossy_update": OpKind.UPDATE,
        "spurious_delete": OpKind.DELETE,
        "retrieval_miss": OpKind.RETRIEVE,
        "filter_drop": OpKind.FILTER,
        "truncate_context": OpKind.ASSEMBLE,
        "wrong_answer": OpKind.GENERATE,
    }
)
"""Fault names and the op kind each damages."""

DEFAULT_RATE = 0.2
"""The rate of a fault named without one."""

_BY_KIND = {kind.value: name for name, kind in FAULTS.items()}


@dataclass(frozen=True)
class FaultSpec:
    """Which faults to inject and how often (0..1 each)."""

    rates: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, rate in self.rates.items():
            if name not in FAULTS:
                raise ValueError(
                    f"unknown fault {name!r}: expected one of {', '.join(FAULTS)} "
                    f"(or an op kind: {', '.join(_BY_KIND)})"
                )
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rate of {name!r} must be within 0..1, got {rate}")

    @classmethod
    def parse(cls, text: str | None) -> FaultSpec:
        """Parse ``none``, ``all[=RATE]``, or ``NAME[=RATE],...`` (a name may be an op kind).

        Raises:
            ValueError: an unknown name or a rate that is not a number within 0..1.

        >>> FaultSpec.parse("all=0.1").rate("lossy_update")
        0.1
        >>> FaultSpec.parse("retrieve=1").rates
        {'retrieval_miss': 1.0}
        """
        if text is None or not text.strip() or text.strip().lower() == "none":
            return cls({})
        rates: dict[str, float] = {}
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            name, _, raw = item.partition("=")
            name = name.strip().lower()
            try:
                rate = float(raw) if raw.strip() else DEFAULT_RATE
            except ValueError:
                raise ValueError(f"fault rate of {name!r} is not a number: {raw!r}") from None
            if name == "all":
                rates.update(dict.fromkeys(FAULTS, rate))
                continue
            rates[_BY_KIND.get(name, name)] = rate
        return cls(rates)

    def rate(self, name: str) -> float:
        """The rate of ``name`` (0 when not injected)."""
        return self.rates.get(name, 0.0)

    def __bool__(self) -> bool:
        return any(rate > 0 for rate in self.rates.values())

    def describe(self) -> str:
        """``drop_fact=0.2,...`` or ``none``."""
        return ",".join(f"{k}={v:g}" for k, v in sorted(self.rates.items())) or "none"


def uniform(*parts: object) -> float:
    """A deterministic number in [0, 1) from the parts.

    >>> uniform("a", 1) == uniform("a", 1), 0 <= uniform("b") < 1
    (True, True)
    """
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class FaultPlan:
    """The fault decisions of one system on one store.

    Args:
        spec: rates per fault.
        seed: the run's seed.
        system: the system name.
        store: the store id.
    """

    def __init__(self, spec: FaultSpec, *, seed: int, system: str, store: str) -> None:
        self.spec = spec
        self.seed = seed
        self.system = system
        self.store = store

    def fires(self, fault: str, key: str) -> bool:
        """Whether ``fault`` strikes the op named by ``key``."""
        rate = self.spec.rate(fault)
        return rate > 0 and uniform(self.seed, fault, self.system, self.store, key) < rate

    def pick(self, fault: str, key: str, n: int) -> int:
        """A deterministic index in ``range(n)`` (which item the fault damages)."""
        return int(uniform("pick", self.seed, fault, self.system, self.store, key) * n) if n else 0

"""``memtrace bench apps``: the suite of real apps (:mod:`memtrace_bench.apps.cli`)."""

from __future__ import annotations

from memtrace_bench.apps.cli import register

__all__ = ["register"]

"""Internal-error policy for code that runs inside the user's app.

Inside an instrumented app nothing of ours may raise or hang. :func:`internal_error` is called
from an ``except`` block: in production it logs one warning per distinct fault (with the
traceback, "your code is fine, telemetry is reduced") and returns, so the caller can degrade;
under pytest, or with ``MEMTRACE_INTERNAL_ERRORS=raise``, it re-raises so bugs cannot hide.
Fault-injection tests turn the loud mode off with :func:`quiet_internal_errors`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar

logger = logging.getLogger("memtrace_otel")

_ENV = "MEMTRACE_INTERNAL_ERRORS"
_MAX_REMEMBERED = 1024
_seen: set[tuple[str, str, str]] = set()
_seen_lock = threading.Lock()
_counts: dict[str, int] = {}
_force_quiet: ContextVar[bool] = ContextVar("memtrace_force_quiet", default=False)


def _loud() -> bool:
    if _force_quiet.get():
        return False
    mode = os.environ.get(_ENV, "").strip().lower()
    if mode == "raise":
        return True
    if mode == "log":
        return False
    # pytest >= 8.2 sets PYTEST_VERSION for the whole session.
    return "PYTEST_VERSION" in os.environ


def internal_error(where: str) -> None:
    """Handle the exception being handled now: re-raise in tests, else log it once and return.

    Args:
        where: a short name of the place that failed (``"capture"``, ``"processor.on_end"``).
    """
    if _loud():
        raise
    exc = sys.exc_info()[1]
    key = (where, type(exc).__name__, str(exc)[:200])
    with _seen_lock:
        _counts[where] = _counts.get(where, 0) + 1
        first = key not in _seen
        if first and len(_seen) < _MAX_REMEMBERED:
            _seen.add(key)
    if first:
        logger.warning(
            "memtrace-otel internal error in %s; your code is fine, telemetry is reduced",
            where,
            exc_info=True,
        )


def internal_error_counts() -> dict[str, int]:
    """How many internal errors each place has swallowed in this process."""
    with _seen_lock:
        return dict(_counts)


@contextlib.contextmanager
def quiet_internal_errors() -> Iterator[None]:
    """Log instead of raising within this block, even under pytest (for fault-injection tests)."""
    token = _force_quiet.set(True)
    try:
        yield
    finally:
        _force_quiet.reset(token)


def data_warning(key: str, message: str, *args: object) -> None:
    """Log a problem with the user's *data* (not our bug) once per ``key``; never raises."""
    with _seen_lock:
        _counts[key] = _counts.get(key, 0) + 1
        first = ("data", key, "") not in _seen
        if first and len(_seen) < _MAX_REMEMBERED:
            _seen.add(("data", key, ""))
    if first:
        logger.warning(message, *args)

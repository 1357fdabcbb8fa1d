"""Internal-error policy for code that runs inside the user's app, and its fork safety.

Inside an instrumented app nothing of ours may raise or hang. :func:`internal_error` is called
from an ``except`` block: it logs one warning (with the traceback, "your code is fine, telemetry
is reduced") per place and exception type, counts every occurrence, and returns, so the caller can
degrade. Only with ``MEMTRACE_INTERNAL_ERRORS=raise`` does it re-raise, so bugs cannot hide: the
project's own test suite sets it (``tests/conftest.py``); a user's test suite running an
instrumented app does not, and gets the production behaviour. Fault-injection tests turn the
loud mode off with :func:`quiet_internal_errors`.

:func:`reinit_after_fork` lets an object holding a lock replace it in a forked child (as the
OpenTelemetry SDK does with ``os.register_at_fork``): a lock held by another thread at ``fork()``
would otherwise stay held forever in the child, which has only the forking thread.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import math
import os
import random
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Generic, Protocol, TypeVar

from memtrace_otel.semconv.env import ENV_INTERNAL_ERRORS

logger = logging.getLogger("memtrace_otel")

_MAX_REMEMBERED = 1024
_seen: set[tuple[str, str]] = set()
_seen_lock = threading.Lock()
_counts: dict[str, int] = {}
_overflow_logged = False
_force_quiet: ContextVar[bool] = ContextVar("memtrace_force_quiet", default=False)


def _loud() -> bool:
    if _force_quiet.get():
        return False
    return os.environ.get(ENV_INTERNAL_ERRORS, "").strip().lower() == "raise"


def _first(key: tuple[str, str], where: str) -> bool:
    """Count one occurrence at ``where``; whether ``key`` is new (and may be logged)."""
    global _overflow_logged
    with _seen_lock:
        _counts[where] = _counts.get(where, 0) + 1
        if key in _seen:
            return False
        if len(_seen) < _MAX_REMEMBERED:
            _seen.add(key)
            return True
        overflow, _overflow_logged = not _overflow_logged, True
    if overflow:
        logger.warning(
            "memtrace-otel: more than %d distinct internal problems; further ones are only "
            "counted (memtrace_otel._internal.internal_error_counts())",
            _MAX_REMEMBERED,
        )
    return False


def internal_error(where: str) -> None:
    """Handle the exception being handled now: log it once per place and type, count it, return.

    With ``MEMTRACE_INTERNAL_ERRORS=raise`` (the project's own tests) it re-raises instead. The
    message of the exception is not part of the key: a value that fails a thousand times, each
    time with its own message, is one warning and a count of a thousand.

    Args:
        where: a short name of the place that failed (``"capture"``, ``"processor.on_end"``).
    """
    if _loud():
        raise
    exc = sys.exc_info()[1]
    if _first((where, type(exc).__name__), where):
        logger.warning(
            "memtrace-otel internal error in %s; your code is fine, telemetry is reduced "
            "(further %s errors here are counted, not logged)",
            where,
            type(exc).__name__,
            exc_info=True,
        )


def internal_error_counts() -> dict[str, int]:
    """How many internal errors (and data warnings) each place has had in this process."""
    with _seen_lock:
        return dict(_counts)


@contextlib.contextmanager
def quiet_internal_errors() -> Iterator[None]:
    """Log instead of raising within this block, even when loud (for fault-injection tests)."""
    token = _force_quiet.set(True)
    try:
        yield
    finally:
        _force_quiet.reset(token)


def data_warning(key: str, message: str, *args: object) -> None:
    """Log a problem with the user's *data* (not our bug) once per ``key``; never raises."""
    if _first(("data", key), key):
        logger.warning(message, *args)


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving names that live in other modules, imported on first use.

    ``homes`` maps each name to its module. A package that must not import the OpenTelemetry SDK
    can so still offer names from :mod:`memtrace_otel.export`.
    """

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    return __getattr__


def backoff_delay(
    attempt: int,
    *,
    backoff: float,
    max_backoff: float,
    retry_after: float | None = None,
    jitter: bool = False,
) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): the package's one retry schedule.

    ``backoff`` doubled each attempt, capped at ``max_backoff``; with ``jitter`` a random 50-100 %
    of that (many workers must not retry in lockstep); a server's ``Retry-After`` (seconds) wins
    when longer, capped too.

    >>> [backoff_delay(n, backoff=1, max_backoff=30) for n in (1, 2, 6)]
    [1.0, 2.0, 30.0]
    >>> backoff_delay(1, backoff=1, max_backoff=30, retry_after=7.5)
    7.5
    """
    delay = float(min(max_backoff, backoff * 2.0 ** (attempt - 1)))
    if jitter:
        delay *= 0.5 + random.random() / 2
    if retry_after is not None:
        delay = max(delay, float(min(retry_after, max_backoff)))
    return delay


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the operating system (glibc's ``malloc_trim``; a
    no-op elsewhere). After a large one-off build (loading a model's weights, then dropping
    the float32 copies) glibc keeps the freed blocks, which count in the resident size for the
    rest of the process; this returns them. Never raises."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        with contextlib.suppress(Exception):
            _malloc_trim(0)


_malloc_trim: Any = None


class GcPaused:
    """Pause Python's cyclic garbage collector for a block that builds many acyclic objects.

    Decoding a line, or folding records into a graph, allocates thousands of small containers
    that live on; with the collector running, each block triggers collections that traverse all
    of them again (a large graph build got twice as slow per span at 10x the size). Nothing such
    a block builds can form a cycle, and the pause ends before control returns to the caller, so
    the application's own garbage is collected as usual. A collector the application turned off
    stays off. The package's one GC pauser: the batch job's ``QuietHeap`` builds on it.
    """

    __slots__ = ("_resume",)

    def __enter__(self) -> None:
        self._resume = gc.isenabled()
        if self._resume:
            gc.disable()

    def __exit__(self, *exc_info: object) -> None:
        if self._resume:
            gc.enable()


class _ForkReinit(Protocol):
    def _reinit_after_fork(self) -> None: ...


_after_fork: weakref.WeakSet[_ForkReinit] = weakref.WeakSet()
_after_fork_functions: list[Callable[[], None]] = []


def reinit_after_fork(obj: _ForkReinit) -> None:
    """Call ``obj._reinit_after_fork()`` in every forked child while ``obj`` lives."""
    _after_fork.add(obj)


def on_fork_in_child(function: Callable[[], None]) -> None:
    """Call ``function`` (a module's lock reset) in every forked child."""
    _after_fork_functions.append(function)


def _reset_locks() -> None:
    global _seen_lock
    _seen_lock = threading.Lock()


def _in_child() -> None:
    # Only the forking thread exists here: nothing else can touch these while we reset them.
    for function in (_reset_locks, *_after_fork_functions):
        with contextlib.suppress(Exception):
            function()
    for obj in list(_after_fork):
        with contextlib.suppress(Exception):
            obj._reinit_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)


K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """A bounded, thread-safe map; the least recently set entries are evicted first (counted in
    :attr:`evicted`). Reads take no lock. In a forked child the lock is replaced, so a parent
    thread holding it at ``fork()`` cannot hang the child; the entries are kept. The package's
    one LRU map (the writer registry and the instrumentors' caches are built on it).

    >>> cache = BoundedCache[str, int](max_entries=2)
    >>> for key, value in (("a", 1), ("b", 2), ("c", 3)):
    ...     cache.set(key, value)
    >>> cache.get("a"), cache.get("c"), len(cache), cache.evicted
    (None, 3, 2, 1)
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self.evicted = 0
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        reinit_after_fork(self)

    def _reinit_after_fork(self) -> None:
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value of ``key``, if known."""
        return self._entries.get(key)

    def set(self, key: K, value: V) -> None:
        """Remember ``value`` for ``key``."""
        with self._lock:
            entries = self._entries
            entries[key] = value
            entries.move_to_end(key)
            if len(entries) > self.max_entries:
                entries.popitem(last=False)
                self.evicted += 1

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()


def finite_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by its name as a string, so that
    strict JSON (``allow_nan=False``: what browsers and other parsers accept) can hold it.

    >>> finite_json({"a": [float("nan"), 1.5], "b": (float("-inf"),)})
    {'a': ['NaN', 1.5], 'b': ['-Infinity']}
    """
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (math.inf, -math.inf):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, Mapping):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value

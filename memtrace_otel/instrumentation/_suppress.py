"""Turn tracing off for a block: our own machinery (judges, exporters) must not trace itself."""

from __future__ import annotations

from types import TracebackType

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from memtrace_otel._shim import SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS_KEY


def is_tracing_suppressed() -> bool:
    """Whether the current context suppresses instrumentation."""
    return bool(otel_context.get_value(_SUPPRESS_KEY))


def is_suppressed_in(context: Context) -> bool:
    """Whether ``context`` suppresses instrumentation (for callers that hold it already)."""
    return bool(otel_context.get_value(_SUPPRESS_KEY, context))


class suppress_tracing:
    """Context manager (``with`` and ``async with``) under which no memtrace op, and no other
    OpenTelemetry instrumentation honouring the standard key, records a span.

    >>> with suppress_tracing():
    ...     is_tracing_suppressed()
    True
    >>> is_tracing_suppressed()
    False
    """

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token: object | None = None

    def __enter__(self) -> None:
        self._token = otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

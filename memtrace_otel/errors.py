"""Typed errors of the offline code (loaders, graph tools, batch jobs).

Error policy by layer: code inside the user's app never raises (see ``memtrace_otel._internal``);
configuration mistakes raise :class:`ValueError` at construction; offline code raises the errors
below, which name the file, line and field; the CLI maps them to an exit code and one line on
stderr.
"""

from __future__ import annotations


class MemtraceError(Exception):
    """Base class of every error this package raises on purpose."""


class DecodeError(MemtraceError):
    """A record could not be decoded.

    Attributes:
        path: the file (or URL) the record came from.
        line: the 1-based line (JSON Lines), record number (proto files) or ``None``.
        field: the JSON path or field name that was wrong, or ``None``.
        reason: what was wrong.
    """

    def __init__(
        self, reason: str, *, path: str = "", line: int | None = None, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.path or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f": field {self.field}"
        return f"{where}: {self.reason}"


class UnsupportedFormatError(DecodeError):
    """The input is recognisably a trace format this package does not read."""


class SourceError(MemtraceError):
    """A trace source (file set or backend) could not be read at all."""


class SourceSpecError(SourceError, ValueError):
    """A source spec (URL, scheme, parameter) or its options are malformed: a usage error.

    Also a ``ValueError``, as these were before it existed."""


class BackendError(SourceError):
    """A live backend (Jaeger, Tempo) answered with an error or could not be reached."""

    def __init__(self, reason: str, *, url: str = "", status: int | None = None) -> None:
        self.url = url
        self.status = status
        prefix = f"{url}: " if url else ""
        suffix = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{prefix}{reason}{suffix}")


class GraphError(MemtraceError):
    """A graph query was given something the graph does not hold."""


class ModelError(MemtraceError):
    """A model endpoint (the LLM judge of model-based attribution) failed for good.

    Raised after bounded retries (rate limits, server errors, timeouts, refused connections) or
    when the model's reply stayed malformed after one corrective retry.

    Attributes:
        reason: what went wrong.
        status: the HTTP status of the last answer, or ``None`` (no answer, or a malformed one).
    """

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        self.reason = reason
        self.status = status
        suffix = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"model endpoint: {reason}{suffix}")


class ModelDirError(MemtraceError, ValueError):
    """A sentence-model directory that cannot be used (a configuration error: a ``ValueError``).

    Attributes:
        path: the file that is wrong (``config.json``, ``model.safetensors``, ``tokenizer.json``).
        reason: what is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


__all__ = [
    "BackendError",
    "DecodeError",
    "GraphError",
    "MemtraceError",
    "ModelDirError",
    "ModelError",
    "SourceError",
    "SourceSpecError",
    "UnsupportedFormatError",
]

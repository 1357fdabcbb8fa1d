"""Trace files: expand paths, sniff the content, stream the records.

What a file holds is read from its first bytes, never from its name:

- gzip (``1f 8b``) or zstd (``28 b5 2f fd``) magic: a compressed file; the decompressed stream is
  sniffed again (the Collector's native zstd compression writes JSON Lines inside one stream);
- ``{`` or ``[`` (after whitespace): JSON. If the first line parses as a complete value the file
  is JSON Lines (the Collector's ``format: json``), read line by line in constant memory;
  otherwise it is one document (an API response, a UI download), read whole;
- a 4-byte big-endian length followed by a zstd frame, a protobuf ``ExportTraceServiceRequest``
  or JSON: the Collector's length-prefixed records (``format: proto``, or any format with the
  legacy per-record ``compression: zstd``).

What is read before parsing is bounded by :class:`ReadLimits`: a line (or a record, after
decompression) over ``max_line_bytes`` is skipped without being held, a document over
``max_document_bytes`` is skipped after reading at most that much; both are counted.
"""

from __future__ import annotations

import fnmatch
import glob
import gzip
import io
import json
import os
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, Protocol

from memtrace_otel._internal import GcPaused
from memtrace_otel.errors import SourceError, SourceSpecError
from memtrace_otel.semconv import SpanRecord
from memtrace_otel.semconv import env as E
from memtrace_otel.sources._common import (
    DECOMPRESSED_TOO_LARGE,
    DOCUMENT_TOO_LARGE,
    EMPTY_FILE,
    EMPTY_LINE,
    INVALID_JSON,
    INVALID_RECORD,
    INVALID_UTF8,
    LINE_TOO_LONG,
    SURROGATE_HINT,
    TRUNCATED,
    UNREADABLE,
    UNSUPPORTED_FORMAT,
    Bad,
    OnError,
    make_error,
    prune_undecodable,
    record_paths,
    replace_surrogates,
)
from memtrace_otel.sources._contract import INVALID_OP, check_op
from memtrace_otel.sources._documents import BenchSink, decode_value
from memtrace_otel.sources._limits import LineReader, LineSource, ReadLimits, RecordCapper

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_FRAME = 256 * 1024 * 1024
"""Largest record length a length-prefixed file may announce; a larger one means a corrupt file
(the Collector cuts zstd frames at 100 MiB). Records over ``max_line_bytes`` are skipped."""
_CHUNK = 1 << 20
"""Bytes read at a time while reading a document or skipping a record."""

_fast_loads: Callable[[bytes | bytearray], Any] | None
try:  # the optional accelerator (pip install 'memtrace-otel[fast]'): parses JSON ~3x faster
    from orjson import loads as _fast_loads
except ImportError:  # the standard parser then does all the work
    _fast_loads = None

_GLOB_CHARS = frozenset("*?[")


class Readable(Protocol):
    """A binary stream we only ``read`` from (files, gzip and zstd readers)."""

    def read(self, size: int = -1, /) -> bytes: ...


_JSON_START = frozenset(b"{[")
_WHITESPACE = b" \t\r\n"


SkipPath = Callable[[str, str], None]
"""Told ``(path, reason)`` for each path a directory walk or glob leaves out as not a regular
file (a FIFO would block the reader forever, a device never ends)."""


def expand_paths(spec: str | os.PathLike[str], on_skip: SkipPath | None = None) -> list[str]:
    """The files a path, directory or glob names, sorted (rotated Collector files sort by time).

    Directories are walked recursively; hidden files and directories (``.name``) are skipped.
    Only regular files are read: FIFOs, sockets and devices found by a walk or a glob, and
    symlinks that lead to none, go to ``on_skip``. Neither a directory walk nor a ``**`` glob
    follows symlinked directories (a link to a parent would never end); name such a
    directory itself to read it.

    Raises:
        SourceError: nothing exists at ``spec``, the glob matches no file, or ``spec`` names
            something that is not a regular file.
    """
    text = os.fspath(spec)
    if _is_url(text):
        return _expand_url(text)
    if os.path.isfile(text):
        return [text]
    if os.path.isdir(text):
        return _regular(_walk(text, None), on_skip)
    if _GLOB_CHARS & set(text):
        if "**" in text:
            candidates = _recursive_glob(text)
        else:
            candidates = (p for p in glob.glob(text) if not os.path.isdir(p))
        matches = _regular(candidates, on_skip)
        if matches:
            return matches
        raise SourceError(f"{text}: the pattern matches no file")
    if os.path.lexists(text):
        raise SourceError(f"{text}: not a regular file ({_file_type(text)})")
    raise SourceError(f"{text}: no such file or directory")


def _walk(root: str, parts: list[str] | None) -> Iterator[str]:
    """The non-hidden files under ``root`` (symlinked directories not entered), whose path
    relative to ``root`` matches the glob components ``parts`` (``None``: every file)."""
    for folder, dirs, files in os.walk(root):  # followlinks=False: no loops
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            path = os.path.join(folder, name)
            if parts is None or _match(parts, os.path.relpath(path, root).split(os.sep)):
                yield path


def _recursive_glob(pattern: str) -> Iterator[str]:
    """A ``**`` glob that never enters symlinked directories (``glob.glob`` does, and loops).

    The pattern's leading components without glob characters are the folder walked; the rest
    is matched component by component (``**``: any number of folders).
    """
    parts = pattern.split(os.sep)
    fixed = 0
    while fixed < len(parts) - 1 and not _GLOB_CHARS & set(parts[fixed]):
        fixed += 1
    root = os.sep.join(parts[:fixed]) or ("/" if pattern.startswith(os.sep) else ".")
    if not os.path.isdir(root):
        return iter(())
    paths = _walk(root, parts[fixed:])
    if fixed == 0 and root == ".":
        return (os.path.relpath(p) for p in paths)
    return paths


def _match(pattern: list[str], parts: list[str]) -> bool:
    """Whether path components ``parts`` match glob components ``pattern``.

    >>> _match(["**", "*.json"], ["a", "b", "x.json"]), _match(["a", "**", "x"], ["a", "x"])
    (True, True)
    >>> _match(["*", "x"], ["a", "b", "x"])
    False
    """
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return (
        bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match(pattern[1:], parts[1:])
    )


def _file_type(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _regular(paths: Iterable[str], on_skip: SkipPath | None) -> list[str]:
    """The regular files among ``paths`` (symlinks followed), sorted; the rest to ``on_skip``."""
    found = []
    for path in paths:
        if os.path.isfile(path):
            found.append(path)
        elif on_skip is not None:
            on_skip(path, f"not a regular file ({_file_type(path)}), not read")
    return sorted(found)


def _is_url(text: str) -> bool:
    """Whether ``text`` is an fsspec URL (``s3://``, ``gs://``, ``file://``, ``memory://``)."""
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.replace("+", "").replace("-", "").isalnum() and len(scheme) > 1


URL_SCHEMES = frozenset(
    {"file", "local", "memory", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "hdfs"}
)
"""fsspec schemes read as trace sources: local and in-memory files and object stores.
Archives (``zip://``, ``tar://``) and remote shells or servers (``ftp://``, ``sftp://``,
``http://``) are refused: a trace URL names files, not a protocol session."""


def _expand_url(text: str) -> list[str]:
    """The files an fsspec URL names (a file, a folder read recursively, or a glob).

    Raises:
        SourceSpecError: a scheme outside :data:`URL_SCHEMES`.
        SourceError: fsspec is missing, the URL names nothing, or cannot be listed.
    """
    scheme = text.partition("://")[0].lower()
    if scheme not in URL_SCHEMES:
        raise SourceSpecError(
            f"{text.partition('://')[0]}://...: unsupported trace source scheme; use a path, "
            "jaeger+http(s)://, tempo+http(s):// or an object store URL ("
            + ", ".join(f"{s}://" for s in sorted(URL_SCHEMES))
            + ")"
        )
    try:
        return _list_url(text)
    except OSError as exc:  # unreachable store, refused credentials, a folder where a file was
        raise SourceError(f"{text}: cannot list: {exc}") from None


def _list_url(text: str) -> list[str]:
    try:
        import fsspec  # optional: pip install 'memtrace-otel[dask]'
    except ImportError:
        raise SourceError(
            f"{text}: URLs of object stores need fsspec: pip install 'memtrace-otel[dask]'"
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(text)
    except (ValueError, ImportError) as exc:  # unknown scheme, or its driver (s3fs...) missing
        raise SourceError(f"{text}: {exc}") from None
    if _GLOB_CHARS & set(path):
        found = [p for p in fs.glob(path) if fs.isfile(p)]
    elif fs.isfile(path):
        found = [path]
    elif fs.isdir(path):
        found = [p for p in fs.find(path) if not os.path.basename(p).startswith(".")]
    else:
        raise SourceError(f"{text}: no such file or directory")
    if not found:
        raise SourceError(f"{text}: the pattern matches no file")
    return sorted(fs.unstrip_protocol(p) for p in found)


def open_binary(path: str) -> IO[bytes]:
    """A local path or an fsspec URL, opened for binary reading."""
    if _is_url(path):
        import fsspec

        return fsspec.open(path, "rb").open()  # type: ignore[no-any-return]
    return open(path, "rb")


class _Prefixed(io.RawIOBase):
    """``head`` followed by the rest of ``stream`` (to sniff a stream that cannot seek)."""

    def __init__(self, head: bytes | bytearray, stream: Readable) -> None:
        self._head = memoryview(head)
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            if not self._head:
                self._head = memoryview(b"")  # let go of the (possibly large) head
            return n
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _read_exactly(stream: Readable, size: int) -> bytes:
    parts = []
    remaining = size
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def _skip_exactly(stream: Readable, size: int) -> int:
    """Read and drop ``size`` bytes a chunk at a time; how many there were."""
    done = 0
    while done < size:
        chunk = stream.read(min(_CHUNK, size - done))
        if not chunk:
            break
        done += len(chunk)
    return done


def _decompress_frame(payload: bytes, limit: int) -> bytes | None:
    """The decompressed record, or ``None`` when it holds more than ``limit`` bytes (a
    decompression bomb is stopped after ``limit + 1`` bytes)."""
    if payload[:4] == ZSTD_MAGIC:
        import zstandard  # optional dependency, only needed for zstd data

        stream: Readable = zstandard.ZstdDecompressor().stream_reader(
            payload, read_across_frames=True
        )
    elif payload[:2] == GZIP_MAGIC:
        stream = gzip.GzipFile(fileobj=io.BytesIO(payload), mode="rb")
    else:
        return payload
    data = _read_exactly(stream, limit + 1)
    return None if len(data) > limit else data


class _OverBudget(Exception):
    """More bytes were decompressed from one file than ``max_decompressed_bytes``."""


class _Budget:
    """The bytes one file may still decompress, shared by every layer (gzip in gzip)."""

    __slots__ = ("cap", "used")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.used = 0

    def spend(self, size: int) -> None:
        self.used += size
        if self.used > self.cap:
            raise _OverBudget


class _Metered:
    """A decompressed stream that spends the file's budget as it is read."""

    __slots__ = ("_budget", "_stream")

    def __init__(self, stream: Readable, budget: _Budget) -> None:
        self._stream = stream
        self._budget = budget

    def read(self, size: int = -1, /) -> bytes:
        # Never more than what is left plus one byte: an endless stream stops at the cap.
        left = self._budget.cap - self._budget.used + 1
        data = self._stream.read(left if size < 0 else min(size, left))
        self._budget.spend(len(data))
        return data


def _stream_size(stream: IO[bytes]) -> int | None:
    """The size of an open file (local or fsspec), or ``None`` when it cannot be known."""
    try:
        return os.fstat(stream.fileno()).st_size
    except (OSError, AttributeError, ValueError):  # io.UnsupportedOperation is both
        size = getattr(stream, "size", None)
        return size if isinstance(size, int) else None


class FileReader:
    """Reads the records of one file under a strict or lenient policy."""

    def __init__(
        self,
        path: str,
        on_error: OnError,
        bench: BenchSink | None,
        capper: RecordCapper | None = None,
        limits: ReadLimits | None = None,
    ) -> None:
        self.path = path
        self.on_error = on_error
        self.bench = bench
        self.capper = capper
        self.limits = limits if limits is not None else ReadLimits.resolve()
        self._budget = _Budget(self.limits.max_decompressed_bytes)

    def fail(
        self, kind: str, reason: str, line: int | None = None, field: str | None = None
    ) -> None:
        self.on_error(kind, make_error(reason, path=self.path, line=line, field=field))

    def fail_bad(self, bad: Bad, line: int | None) -> None:
        """Report ``bad`` once per record it lost (a line of 200 spans lost is 200 skips)."""
        for _ in range(bad.lost):
            self.fail(
                bad.kind, bad.reason + (f" ({bad.lost} records)" if bad.lost > 1 else ""), line
            )

    def records(self) -> Iterator[SpanRecord]:
        """Every record of the file, in file order."""
        try:
            stream: IO[bytes] = open_binary(self.path)
        except OSError as exc:
            self.fail(UNREADABLE, f"cannot open: {exc.strerror or exc}")
            return
        size = _stream_size(stream)
        self._budget = _Budget(self.limits.decompression_budget(size))
        try:
            yield from self._sniffed(stream, depth=0)
        except _OverBudget:
            limits = self.limits
            self.fail(
                DECOMPRESSED_TOO_LARGE,
                f"decompresses to more than {self._budget.cap} bytes "
                f"(max_decompressed_bytes={limits.max_decompressed_bytes}, "
                f"{E.ENV_MEMTRACE_MAX_DECOMPRESSED_BYTES}; max_compression_ratio="
                f"{limits.max_compression_ratio} x {size} bytes, "
                f"{E.ENV_MEMTRACE_MAX_COMPRESSION_RATIO}): the rest of the file is skipped",
            )
        except OSError as exc:
            self.fail(UNREADABLE, f"read error: {exc}")
        finally:
            stream.close()

    def _sniffed(self, stream: Readable, depth: int) -> Iterator[SpanRecord]:
        head = _read_exactly(stream, 64)
        if not head:
            self.fail(
                EMPTY_FILE, "the file is empty" if depth == 0 else "the compressed data is empty"
            )
            return
        rest: IO[bytes] = io.BufferedReader(_Prefixed(head, stream), buffer_size=1 << 16)
        if depth < 2 and head[:2] == GZIP_MAGIC:
            gzip_stream = gzip.GzipFile(fileobj=rest, mode="rb")
            yield from self._compressed(_Metered(gzip_stream, self._budget), depth)
            return
        if depth < 2 and head[:4] == ZSTD_MAGIC:
            try:
                import zstandard
            except ImportError:
                self.fail(
                    UNSUPPORTED_FORMAT,
                    "zstd data needs the 'zstandard' package: pip install 'memtrace-otel[zstd]'",
                )
                return
            reader = zstandard.ZstdDecompressor().stream_reader(rest, read_across_frames=True)
            yield from self._compressed(_Metered(reader, self._budget), depth)
            return
        body = head.lstrip(_WHITESPACE)
        if body and body[0] in _JSON_START:
            yield from self._json_text(rest)
            return
        if len(head) >= 5:
            size = int.from_bytes(head[:4], "big")
            payload = head[4:]
            if 0 < size <= MAX_FRAME and (
                payload[:4] == ZSTD_MAGIC
                or payload[:1] in (b"\x0a", b"{")
                or payload[:2] == GZIP_MAGIC
            ):
                yield from self._framed(rest)
                return
        self.fail(
            UNSUPPORTED_FORMAT,
            f"unknown content (first bytes {head[:8].hex(' ')}): expected OTLP JSON/JSON Lines, "
            "Jaeger JSON, a Collector proto file, or gzip/zstd of one",
        )

    def _compressed(self, stream: Readable, depth: int) -> Iterator[SpanRecord]:
        try:
            yield from self._sniffed(stream, depth + 1)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            self.fail(TRUNCATED, f"corrupt or truncated compressed data ({exc})")
        except Exception as exc:
            # zstandard raises its own ZstdError; name it without importing the optional package.
            if type(exc).__name__ != "ZstdError":
                raise
            self.fail(TRUNCATED, f"corrupt or truncated zstd data ({exc})")

    # --- JSON --------------------------------------------------------------------------------
    def _parse(self, raw: bytes | bytearray, line: int | None) -> Any:
        """One JSON value, or ``Bad`` naming what is wrong with it.

        Lone surrogates (``"\\ud800"``, valid JSON but not Unicode) are replaced by U+FFFD
        and counted in ``replaced_surrogates``: nothing downstream could write them.
        """
        if _fast_loads is not None:
            try:
                return _fast_loads(raw)
            except ValueError:
                # The standard parser decides: it gives the error we report, and it accepts
                # what orjson refuses (NaN literals, lone surrogates, integers beyond 64 bits).
                pass
        try:
            value = json.loads(raw)
            if _fast_loads is None and not SURROGATE_HINT.search(raw):
                return value
            value, replaced = replace_surrogates(value)
            if replaced and self.capper is not None and self.capper.stats is not None:
                self.capper.stats.replaced_surrogates += replaced
            return value
        except UnicodeDecodeError as exc:
            reason = f"not UTF-8 ({exc.reason} at byte {exc.start})"
            return self._salvage(raw, line, reason)
        except json.JSONDecodeError as exc:
            truncated = exc.msg.startswith("Unterminated") or exc.pos >= len(exc.doc.rstrip())
            what = "truncated JSON" if truncated else "invalid JSON"
            raise Bad("", f"{what}: {exc.msg} (column {exc.colno})", INVALID_JSON) from None
        except RecursionError:
            raise Bad("", "JSON nested too deeply", INVALID_JSON) from None

    def _salvage(self, raw: bytes | bytearray, line: int | None, reason: str) -> Any:
        """A value with invalid UTF-8 bytes, kept record by record: each span (or log record)
        holding a bad byte is dropped and reported on its own; the others are kept. When a bad
        byte lies outside every record (a resource attribute), or the text is not JSON, every
        record of the value is reported lost and ``Bad`` is raised: losses count spans."""
        text = bytes(raw).decode("utf-8", "surrogateescape")
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise Bad("", reason, INVALID_UTF8) from None
        dropped, left = prune_undecodable(value)
        if left:  # nothing is reported here: the caller reports the Bad, once per record lost
            bad = Bad("", f"{reason} outside any record: every record of it dropped", INVALID_UTF8)
            bad.lost = max(1, len(dropped) + len(record_paths(value)))
            raise bad
        for field in dropped:
            self.fail(INVALID_UTF8, f"{reason}: this record dropped, the rest kept", line, field)
        value, replaced = replace_surrogates(value)
        if replaced and self.capper is not None and self.capper.stats is not None:
            self.capper.stats.replaced_surrogates += replaced
        return value

    def _line_too_long(self, line: int, what: str) -> None:
        """Report a line (or record) over the line cap, ``what`` saying how long it was."""
        cap = self.limits.max_line_bytes
        self.fail(
            LINE_TOO_LONG,
            f"{what}: longer than max_line_bytes={cap} ({E.ENV_MEMTRACE_MAX_LINE_BYTES}), "
            "skipped without being held in memory",
            line,
        )

    def _json_text(self, stream: IO[bytes]) -> Iterator[SpanRecord]:
        reader = LineReader(stream, self.limits.max_line_bytes)
        lineno = 0
        first = b""
        for raw in reader:
            lineno += 1
            if not raw:
                # Over the line cap before any other line: read the file as JSON Lines (a
                # document on one line is one line, and the line cap applies to it).
                self._line_too_long(lineno, f"a line of {reader.skipped_size} bytes")
                yield from self._json_lines(stream, lineno)
                return
            if raw.strip():
                first = raw
                break
        try:
            first_value = self._parse(first, lineno)
        except Bad:
            first_value = None
        if first_value is not None and type(first_value) in (dict, list):
            records = self.decode(first_value, lineno, len(first))
            del first_value, first  # not kept alive while the rest of the file is read
            yield from records
            del records
            yield from self._json_lines(stream, lineno)
            return
        yield from self._document(first, stream, lineno)

    def _document(self, first: bytes, stream: IO[bytes], lineno: int) -> Iterator[SpanRecord]:
        """A file that is not one value per line: one document (pretty-printed API responses,
        UI downloads), read whole when it is at most ``max_document_bytes``."""
        cap = self.limits.max_document_bytes
        text = bytearray(first)
        while len(text) <= cap:
            chunk = stream.read(min(_CHUNK, cap + 1 - len(text)))
            if not chunk:
                break
            text += chunk
        if len(text) > cap:
            if self._looks_like_lines(text):
                # A JSON Lines file whose first line is broken: go on line by line from what
                # was read (let go of once consumed), then from the rest of the stream.
                rest = io.BufferedReader(_Prefixed(text, stream), buffer_size=1 << 16)
                del text
                yield from self._json_lines(rest, lineno - 1)
            else:
                self.fail(
                    DOCUMENT_TOO_LARGE,
                    f"a JSON document of more than max_document_bytes={cap} bytes "
                    f"({E.ENV_MEMTRACE_MAX_DOCUMENT_BYTES}): the file is skipped",
                )
            return
        try:
            value = self._parse(text, None)
        except Bad as bad:
            if self._looks_like_lines(text):
                # A JSON Lines file whose first line is broken: report line by line.
                yield from self._json_lines(io.BytesIO(text), lineno - 1)
            else:
                self.fail_bad(bad, None)
            return
        size = len(text)
        del text
        yield from self.decode(value, None, size)

    def _looks_like_lines(self, text: bytes | bytearray) -> bool:
        """Whether a text that is not one JSON document has a complete, non-empty JSON object
        on one of its first lines after the first (a pretty-printed document never does)."""
        end = text.find(b"\n")
        for _ in range(49):  # the second to the fiftieth line
            if end < 0:
                return False
            start = end + 1
            end = text.find(b"\n", start)
            line = text[start:end] if end >= 0 else text[start:]
            if line.lstrip()[:1] != b"{":
                continue
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if type(value) is dict and value:
                return True
        return False

    def _json_lines(self, stream: LineSource, lineno: int) -> Iterator[SpanRecord]:
        for line, _, size, value in self.json_line_values(stream, lineno):
            yield from self.decode(value, line, size)

    def json_line_values(
        self,
        stream: LineSource,
        lineno: int,
        *,
        offset: int = 0,
        end: int | None = None,
        data_follows: bool = False,
        head: bool = False,
    ) -> Iterator[tuple[int, int, int, Any]]:
        """The parsed values of the JSON Lines of ``stream``, from where it stands.

        Yields ``(line number, byte offset, size in bytes, value)`` for each line that parses;
        the line-level problems go to ``on_error`` as the loader reports them: blank lines
        followed by data (``empty_line``), lines that are not JSON or not UTF-8, lines over
        ``max_line_bytes`` (``line_too_long``, never held in memory).

        Args:
            stream: positioned at the start of a line.
            lineno: the number of the line before that one (0 at the start of the file).
            offset: the byte offset of the stream's position (to give each line's offset).
            end: stop after the line that reaches this byte offset (``None``: read to the end).
            data_follows: data follows ``end``, so blank lines just before it are an error.
            head: the stream starts the file: blank lines before the first value are no error.
        """
        reader = LineReader(stream, self.limits.max_line_bytes)
        blank_at = None
        leading = head
        for raw in reader:
            lineno += 1
            at = offset
            offset += len(raw) or reader.skipped_size
            # (strip() copies: check cheaply first; an over-long line comes as b"")
            if raw and raw[0] in _WHITESPACE and not raw.strip():
                if blank_at is None and not leading:
                    blank_at = lineno
            else:
                leading = False
                if blank_at is not None:
                    # Blank lines only count when more data follows (a trailing newline is fine).
                    self.fail(EMPTY_LINE, "empty line in a JSON Lines file", blank_at)
                    blank_at = None
                if not raw:
                    self._line_too_long(lineno, f"a line of {reader.skipped_size} bytes")
                else:
                    try:
                        value = self._parse(raw, lineno)
                    except Bad as bad:
                        self.fail_bad(bad, lineno)
                    else:
                        yield lineno, at, len(raw), value
            if end is not None and offset >= end:
                break
        if blank_at is not None and data_follows:
            self.fail(EMPTY_LINE, "empty line in a JSON Lines file", blank_at)

    def parse_or_none(self, raw: bytes, line: int | None = None) -> Any:
        """``raw`` parsed as JSON, or ``None`` once ``on_error`` has been told why it is not
        (a JSON ``null`` also gives ``None``: it holds no spans either)."""
        try:
            return self._parse(raw, line)
        except Bad as bad:
            self.fail_bad(bad, line)
            return None

    def decode(self, value: Any, line: int | None, size: int) -> list[SpanRecord]:
        """The records of one parsed value, decoded from ``size`` bytes of input."""
        records = decode_value(
            value, path=self.path, line=line, on_error=self.on_error, bench=self.bench
        )
        records = self._ops_checked(records, line)
        return self.capper.cap_all(records, size) if self.capper is not None else records

    def _ops_checked(self, records: list[SpanRecord], line: int | None) -> list[SpanRecord]:
        """``records`` without the spans that break the op contract (each one reported)."""
        kept = []
        for record in records:
            checked = check_op(record)
            if isinstance(checked, tuple):
                field, reason = checked
                self.fail(INVALID_OP, f"span {record.span_id}: {reason}", line, field)
            else:
                kept.append(checked)
        return kept

    # --- length-prefixed records -------------------------------------------------------------
    def _framed(self, stream: IO[bytes]) -> Iterator[SpanRecord]:
        number = 0
        while True:
            header = _read_exactly(stream, 4)
            if not header:
                return
            number += 1
            if len(header) < 4:
                self.fail(TRUNCATED, "truncated record length", number)
                return
            size = int.from_bytes(header, "big")
            if size > MAX_FRAME:
                self.fail(
                    TRUNCATED, f"record length {size} exceeds {MAX_FRAME}: corrupt file", number
                )
                return
            if size > self.limits.max_line_bytes:
                skipped = _skip_exactly(stream, size)
                if skipped < size:
                    self.fail(TRUNCATED, f"truncated record: {skipped} of {size} bytes", number)
                    return
                self._line_too_long(number, f"a record of {size} bytes")
                continue
            payload = _read_exactly(stream, size)
            if len(payload) < size:
                self.fail(TRUNCATED, f"truncated record: {len(payload)} of {size} bytes", number)
                return
            try:
                data = _decompress_frame(payload, self.limits.max_line_bytes)
            except Exception as exc:  # gzip, zlib and zstandard errors alike
                self.fail(
                    TRUNCATED, f"corrupt compressed record ({type(exc).__name__}: {exc})", number
                )
                continue
            if data is None:
                self._line_too_long(number, "a record that decompresses to more bytes")
                continue
            if data is not payload:
                self._budget.spend(len(data))
            yield from self._frame(data, number)

    def _frame(self, data: bytes, number: int) -> Iterator[SpanRecord]:
        with GcPaused():
            records = self._frame_records(data, number)
        yield from records

    def _frame_records(self, data: bytes, number: int) -> list[SpanRecord]:
        if data.lstrip(_WHITESPACE)[:1] in (b"{", b"["):
            try:
                value = self._parse(data, number)
            except Bad as bad:
                self.fail_bad(bad, number)
                return []
            return self.decode(value, number, len(data))
        # protobuf is imported by the first framed record that is not JSON (0.02 s of start-up)
        from memtrace_otel.sources._otlp_proto import decode_request_message, parse_request

        try:
            request = parse_request(data, path=self.path, line=number)
        except Bad as bad:
            self.fail(INVALID_RECORD, bad.reason, number)
            return []
        records = decode_request_message(
            request, path=self.path, line=number, on_error=self.on_error
        )
        records = self._ops_checked(records, number)
        return self.capper.cap_all(records, len(data)) if self.capper is not None else records


def read_file(
    path: str,
    on_error: OnError,
    bench: BenchSink | None = None,
    capper: RecordCapper | None = None,
    limits: ReadLimits | None = None,
) -> Iterator[SpanRecord]:
    """The records of one trace file of any supported format, streamed.

    Bad records go to ``on_error`` (which raises in strict mode); an unreadable or
    unrecognised file is reported the same way. With a ``capper``, attribute values over its
    caps are cut and counted in its stats. ``limits`` bound the lines and documents read
    (default: :meth:`ReadLimits.resolve`).
    """
    return FileReader(path, on_error, bench, capper, limits).records()

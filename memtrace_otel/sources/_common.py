"""Shared pieces of the loaders: statistics, the strict/lenient error policy, ids and enums.

Decoders never decide whether a bad record stops the run: they report it to an ``on_error``
callback with a *kind* (a short reason class such as ``invalid_json``), and the caller's policy
either raises the typed error (strict) or counts it and goes on (lenient).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memtrace_otel.errors import DecodeError

# --- Kinds of skipped input (the keys of SourceStats.skipped_by_kind) --------------------------
INVALID_JSON = "invalid_json"
INVALID_UTF8 = "invalid_utf8"
INVALID_SPAN = "invalid_span"
INVALID_RECORD = "invalid_record"
DUPLICATE_SPAN = "duplicate_span"
EMPTY_FILE = "empty_file"
EMPTY_LINE = "empty_line"
TRUNCATED = "truncated"
UNSUPPORTED_FORMAT = "unsupported_format"
UNREADABLE = "unreadable"
LINE_TOO_LONG = "line_too_long"
DOCUMENT_TOO_LARGE = "document_too_large"
DECOMPRESSED_TOO_LARGE = "decompressed_too_large"
NOT_A_REGULAR_FILE = "not_a_regular_file"

MAX_ERROR_MESSAGES = 10
"""How many error messages :class:`SourceStats` keeps (the counts are always complete)."""


@dataclass
class SourceStats:
    """What a source has read so far.

    Attributes:
        records: span records yielded.
        skipped: records (spans, lines, files) skipped in lenient mode.
        skipped_by_kind: ``skipped`` split by reason (``invalid_json``, ``duplicate_span``, ...).
        errors: the first :data:`MAX_ERROR_MESSAGES` error messages, each naming file, line and
            field.
        files: files opened.
        traces_fetched: traces fetched from a live backend.
        traces_missing: trace ids a backend did not have (HTTP 404).
        traces_total: traces a backend search matched, when known (for progress).
        links_not_followed: linked traces left unfetched because a bound was reached.
        pages: search requests a live backend answered (time slices of the window).
        capped: why a live source stopped before exhausting its window (its trace bound was
            reached), naming the option that raises the bound; ``""`` when it did not stop.
        duplicates: exact duplicate spans dropped (at-least-once delivery writes them); not
            skips: nothing is lost. A span id seen again with different content is a skip.
        truncated_values: attribute values cut to the source's size caps (strings and bytes
            longer than ``max_attribute_bytes``, arrays longer than ``max_array_items``); the
            records are kept, so these are not skips.
        replaced_surrogates: lone UTF-16 surrogates (``"\\ud800"`` in JSON: not Unicode text,
            so no UTF-8 file, page or span could hold them) replaced by U+FFFD; the records are
            kept, so these are not skips.
    """

    records: int = 0
    skipped: int = 0
    skipped_by_kind: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    files: int = 0
    traces_fetched: int = 0
    traces_missing: int = 0
    traces_total: int | None = None
    links_not_followed: int = 0
    pages: int = 0
    capped: str = ""
    duplicates: int = 0
    truncated_values: int = 0
    replaced_surrogates: int = 0

    def skip(self, kind: str, message: str) -> None:
        """Count one skipped item of ``kind`` and keep its message if there is room."""
        self.skipped += 1
        self.skipped_by_kind[kind] = self.skipped_by_kind.get(kind, 0) + 1
        if len(self.errors) < MAX_ERROR_MESSAGES:
            self.errors.append(message)

    def summary(self) -> str:
        """One line for humans, e.g. ``1200 records from 3 files; 2 skipped (invalid_json: 2)``.

        >>> s = SourceStats(records=5, files=1)
        >>> s.skip("invalid_json", "a.jsonl:3: invalid JSON")
        >>> s.summary()
        '5 records from 1 file; 1 skipped (invalid_json: 1)'
        >>> s.truncated_values = 2
        >>> s.summary()
        '5 records from 1 file; 1 skipped (invalid_json: 1); 2 attribute values truncated (size cap)'
        """
        parts = [f"{self.records} records"]
        if self.files:
            parts[0] += f" from {self.files} file{'s' if self.files != 1 else ''}"
        if self.traces_fetched:
            parts[0] += f" in {self.traces_fetched} fetched traces"
        if self.skipped:
            kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped_by_kind.items()))
            parts.append(f"{self.skipped} skipped ({kinds})")
        if self.traces_missing:
            parts.append(f"{self.traces_missing} traces not found")
        if self.links_not_followed:
            parts.append(f"{self.links_not_followed} linked traces not fetched (bound reached)")
        if self.truncated_values:
            parts.append(f"{self.truncated_values} attribute values truncated (size cap)")
        if self.replaced_surrogates:
            parts.append(
                f"{self.replaced_surrogates} lone surrogates replaced by U+FFFD (invalid Unicode)"
            )
        if self.duplicates:
            parts.append(f"{self.duplicates} exact duplicate spans dropped")
        if self.capped:
            parts.append(f"INCOMPLETE: {self.capped}")
        return "; ".join(parts)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""Matches JSON text that may decode to a surrogate: a ``\\uD800``-``\\uDFFF`` escape, or the
raw (CESU-8) bytes of one, which ``json.loads`` of bytes lets through. Valid escaped pairs
(an emoji written by ``ensure_ascii``) match too; :func:`replace_surrogates` then finds none."""


RECORD_LISTS = ("spans", "logRecords")
"""The lists whose items are one record each (OTLP and Jaeger spans, OTLP log records)."""
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def _undecodable(value: Any) -> bool:
    if isinstance(value, str):
        return _UNDECODABLE.search(value) is not None
    if isinstance(value, dict):
        return any(_undecodable(k) or _undecodable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_undecodable(v) for v in value)
    return False


def prune_undecodable(value: Any, path: str = "") -> tuple[list[str], bool]:
    """Drop, in place, every record of ``value`` (JSON decoded with ``surrogateescape``) that
    holds an undecodable byte. Returns the field paths dropped and whether undecodable bytes
    remain outside every record.

    >>> doc = {"spans": [{"name": "ok"}, {"name": "bad\\udcff"}], "x": 1}
    >>> prune_undecodable(doc), doc
    ((['spans[1]'], False), {'spans': [{'name': 'ok'}], 'x': 1})
    """
    dropped: list[str] = []
    left = False
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key in RECORD_LISTS and isinstance(item, list):
                kept = []
                for i, record in enumerate(item):
                    if _undecodable(record):
                        dropped.append(f"{where}[{i}]")
                    else:
                        kept.append(record)
                item[:] = kept
            else:
                more, bad = prune_undecodable(item, where)
                dropped += more
                left = left or bad or _undecodable(key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            more, bad = prune_undecodable(item, f"{path}[{i}]")
            dropped += more
            left = left or bad
    elif isinstance(value, str):
        left = _undecodable(value)
    return dropped, left


def record_paths(value: Any, path: str = "") -> list[str]:
    """The field path of every record (see :data:`RECORD_LISTS`) in ``value``."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key in RECORD_LISTS and isinstance(item, list):
                found += [f"{where}[{i}]" for i in range(len(item))]
            else:
                found += record_paths(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += record_paths(item, f"{path}[{i}]")
    return found


def replace_surrogates(value: Any) -> tuple[Any, int]:
    """``value`` (parsed JSON) with each lone surrogate replaced by U+FFFD, and how many were.

    JSON may escape a lone surrogate (``"\\ud800"``), and ``json.loads`` keeps it; no UTF-8
    writer (verdict files, the report, SQLite, OTLP) can encode it afterwards. Keys and nested
    values are replaced too; an unchanged value is returned as the same object.

    >>> replace_surrogates({"op\\ud800": ["a\\udfffb", 1, "ok"]})
    ({'op\\ufffd': ['a\\ufffdb', 1, 'ok']}, 2)
    >>> replace_surrogates("\\U0001F600")
    ('\\U0001f600', 0)
    """
    cls = value.__class__
    if cls is str:
        text, count = _LONE_SURROGATE.subn("\ufffd", value)
        return (text, count) if count else (value, 0)
    if cls is list:
        total = 0
        items = value
        for i, item in enumerate(value):
            new, n = replace_surrogates(item)
            if n:
                if items is value:
                    items = list(value)
                items[i] = new
                total += n
        return items, total
    if cls is dict:
        total = 0
        out: dict[Any, Any] | None = None
        for key, item in value.items():
            new_key, n = replace_surrogates(key)
            new, m = replace_surrogates(item)
            if n or m:
                total += n + m
                if out is None:
                    out = {}
                    for k, v in value.items():  # keep the order, up to this key
                        if k is key:
                            break
                        out[k] = v
            if out is not None:
                out[new_key] = new
        return (value if out is None else out), total
    return value, 0


OnError = Callable[[str, DecodeError], None]
"""Called with (kind, error) for each bad record; raises (strict) or records it (lenient)."""


_fast_loads: Callable[[bytes], Any] | None
try:  # the loaders' optional accelerator: the same values, lone surrogates refused
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - the standard parser does the work
    _fast_loads = None


_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_DIGITS = b"0" * 19


def json_line(raw: bytes, *, path: str, line: int) -> Any:
    """One JSON Lines line (a cases, labels or verdicts file) parsed, lone surrogates replaced
    (U+FFFD, as in the trace files, so ids still match).

    Raises:
        DecodeError: not UTF-8, or not JSON (also nesting too deep, integers too long), naming
            the file and line.
    """
    # orjson reads an integer of over 64 bits as a float: a line with a run of 19 digits (digits
    # mapped to "0" first, a C pass) goes to the standard parser.
    if _fast_loads is not None and _NINETEEN_DIGITS not in raw.translate(_DIGITS_TO_ZERO):
        try:
            return _fast_loads(raw)
        except ValueError:
            # What orjson refuses (lone surrogates, NaN, not UTF-8...) the standard parser
            # takes, or says why not.
            pass
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not UTF-8 ({exc.reason})", path=path, line=line) from None
    except json.JSONDecodeError as exc:
        raise DecodeError(f"invalid JSON: {exc.msg}", path=path, line=line) from None
    except (RecursionError, ValueError) as exc:  # nesting too deep, huge integers
        raise DecodeError(f"invalid JSON: {type(exc).__name__}", path=path, line=line) from None
    return replace_surrogates(value)[0]


def raise_on_error(kind: str, error: DecodeError) -> None:
    """The strict policy: every bad record stops the run."""
    raise error


def collect_into(errors: list[DecodeError]) -> OnError:
    """A lenient policy for the public decoders: bad records go to ``errors``."""

    def on_error(kind: str, error: DecodeError) -> None:
        errors.append(error)

    return on_error


def policy(strict: bool, stats: SourceStats) -> OnError:
    """The policy of a source: raise when ``strict``, else count into ``stats``."""
    if strict:
        return raise_on_error

    def on_error(kind: str, error: DecodeError) -> None:
        stats.skip(kind, str(error))

    return on_error


class Bad(Exception):
    """A field of the record being decoded is wrong; caught by the decoder's record loop.

    Internal: the loop turns it into a :class:`~memtrace_otel.errors.DecodeError` with the full
    field path, file and line, so nothing but typed errors leaves a decoder.
    """

    def __init__(self, field: str, reason: str, kind: str = INVALID_SPAN) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason
        self.kind = kind
        self.lost = 1
        """How many records it loses (every span of a line whose bad byte no span holds)."""


def join_field(prefix: str, field: str) -> str:
    """``prefix.field`` (or ``prefix[3]`` when ``field`` is an index), either may be empty."""
    if not prefix:
        return field
    if not field:
        return prefix
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


# --- Ids ---------------------------------------------------------------------------------------
_HEX32 = re.compile(r"[0-9a-fA-F]{32}")
_HEX16 = re.compile(r"[0-9a-fA-F]{16}")
_HEX_ANY = re.compile(r"[0-9a-fA-F]{1,32}")
ZERO_TRACE_ID = "0" * 32
ZERO_SPAN_ID = "0" * 16


def _b64_id(value: str, nbytes: int) -> str | None:
    text = value.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == nbytes else None


def otlp_trace_id(value: object, field: str) -> str:
    """A trace id from OTLP/JSON (hex, any case) or protobuf JSON (base64), as 32 lowercase hex.

    Hex and base64 never collide: 16 bytes are 32 hex characters but 24 (padded) or 22 base64
    characters, and a padded base64 id contains ``=``.

    >>> otlp_trace_id("5B8EFFF798038103D269B633813FC60C", "traceId")
    '5b8efff798038103d269b633813fc60c'
    >>> otlp_trace_id("W47/95gDgQPSabYzgT/GDA==", "traceId")
    '5b8efff798038103d269b633813fc60c'
    """
    if type(value) is str:
        if len(value) == 32 and _HEX32.fullmatch(value):
            low = value.lower()
            if low != ZERO_TRACE_ID:
                return low
            raise Bad(field, "the trace id is all zeros (invalid)")
        decoded = _b64_id(value, 16) if value else None
        if decoded is not None and decoded != ZERO_TRACE_ID:
            return decoded
        if not value:
            raise Bad(field, "missing trace id")
    elif value is None:
        raise Bad(field, "missing trace id")
    raise Bad(
        field, f"invalid trace id {_short(value)}: expected 32 hex digits or base64 of 16 bytes"
    )


def otlp_span_id(value: object, field: str) -> str:
    """A span id from OTLP/JSON (16 hex) or protobuf JSON (base64 of 8 bytes), lowercase hex.

    >>> otlp_span_id("EEE19B7EC3C1B174", "spanId"), otlp_span_id("7uGbfsPBsXQ=", "spanId")
    ('eee19b7ec3c1b174', 'eee19b7ec3c1b174')
    """
    if type(value) is str:
        if len(value) == 16 and _HEX16.fullmatch(value):
            low = value.lower()
            if low != ZERO_SPAN_ID:
                return low
            raise Bad(field, "the span id is all zeros (invalid)")
        decoded = _b64_id(value, 8) if value else None
        if decoded is not None and decoded != ZERO_SPAN_ID:
            return decoded
        if not value:
            raise Bad(field, "missing span id")
    elif value is None:
        raise Bad(field, "missing span id")
    raise Bad(
        field, f"invalid span id {_short(value)}: expected 16 hex digits or base64 of 8 bytes"
    )


def otlp_parent_id(value: object, field: str) -> str | None:
    """A parent span id, ``None`` when absent, empty or all zeros (a root span)."""
    if value is None or value == "":
        return None
    if type(value) is str and len(value) == 16 and _HEX16.fullmatch(value):
        low = value.lower()
        return None if low == ZERO_SPAN_ID else low
    if type(value) is str:
        decoded = _b64_id(value, 8)
        if decoded is not None:
            return None if decoded == ZERO_SPAN_ID else decoded
    raise Bad(field, f"invalid parent span id {_short(value)}")


def padded_hex_id(value: object, width: int, field: str) -> str:
    """A Jaeger/Tempo hex id that may lack leading zeros, left-padded to ``width`` digits.

    Jaeger's 64-bit trace ids (16 digits) are padded to 32 like every shorter id.

    >>> padded_hex_id("2be38093ead7a083", 32, "traceID")
    '00000000000000002be38093ead7a083'
    >>> padded_hex_id("ff", 16, "spanID")
    '00000000000000ff'
    """
    if type(value) is str and 0 < len(value) <= width and _HEX_ANY.fullmatch(value):
        text = value.lower().rjust(width, "0")
        if text.strip("0"):
            return text
        raise Bad(field, "the id is all zeros (invalid)")
    if value is None or value == "":
        raise Bad(field, "missing id")
    raise Bad(field, f"invalid id {_short(value)}: expected up to {width} hex digits")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def short_repr(value: object) -> str:
    """``repr(value)`` cut to 60 characters, for error messages."""
    return _short(value)


# --- Integers as OTLP/JSON writes them ----------------------------------------------------------
_INT_TEXT = re.compile(r"-?[0-9]{1,20}")


def int64(value: object, field: str) -> int:
    """An int64 written as a JSON string (the OTLP/JSON rule) or a JSON number.

    >>> int64("1544712660000000000", "t"), int64(7, "t")
    (1544712660000000000, 7)
    """
    if type(value) is int:
        return value
    if type(value) is str and _INT_TEXT.fullmatch(value):
        return int(value)
    if type(value) is float and value.is_integer():
        return int(value)
    raise Bad(field, f"expected an integer, got {_short(value)}")


MAX_UINT64 = 2**64 - 1
"""The largest OTLP timestamp (``fixed64``): a later one is invalid, not a time."""


def time_nanos(value: object, field: str) -> int:
    """A timestamp in nanoseconds: absent means 0; negative or beyond uint64 is invalid.

    >>> time_nanos(str(2**64), "t")
    Traceback (most recent call last):
    ...
    memtrace_otel.sources._common.Bad: timestamp 18446744073709551616 beyond the uint64 range
    """
    if value is None:
        return 0
    number = int64(value, field)
    if number < 0:
        raise Bad(field, f"negative timestamp {number}")
    if number > MAX_UINT64:
        raise Bad(field, f"timestamp {number} beyond the uint64 range")
    return number


def finite_double(value: float, field: str) -> float:
    """``value`` when finite; NaN and infinities are invalid (strict JSON, every report and
    every comparison downstream would choke on them).

    >>> finite_double(0.5, "v")
    0.5
    """
    if value - value != 0.0:  # NaN and +-inf, without a call on the hot path
        raise Bad(field, f"non-finite double {value!r}")
    return value


# --- Enums: integers (OTLP/JSON) or names (protobuf JSON, e.g. Tempo) --------------------------
SPAN_KIND_NAMES = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS_NAMES = ("UNSET", "OK", "ERROR")


def span_kind(value: object, field: str) -> str:
    """``kind`` as a number (unknown numbers read as ``UNSPECIFIED``, enums are open) or a name.

    >>> span_kind(2, "kind"), span_kind("SPAN_KIND_CLIENT", "kind"), span_kind(None, "kind")
    ('SERVER', 'CLIENT', 'UNSPECIFIED')
    """
    if value is None:
        return "UNSPECIFIED"
    if type(value) is int:
        return SPAN_KIND_NAMES[value] if 0 <= value < len(SPAN_KIND_NAMES) else "UNSPECIFIED"
    if type(value) is str:
        name = value[10:] if value.startswith("SPAN_KIND_") else value.upper()
        if name in SPAN_KIND_NAMES:
            return name
        if value.isdigit():
            return span_kind(int(value), field)
    raise Bad(field, f"invalid span kind {_short(value)}")


def status_code(value: object, field: str) -> str:
    """``status.code`` as a number or a name (``STATUS_CODE_ERROR``).

    >>> status_code(2, "status.code"), status_code("STATUS_CODE_OK", "status.code")
    ('ERROR', 'OK')
    """
    if value is None:
        return "UNSET"
    if type(value) is int:
        return STATUS_NAMES[value] if 0 <= value < len(STATUS_NAMES) else "UNSET"
    if type(value) is str:
        name = value[12:] if value.startswith("STATUS_CODE_") else value.upper()
        if name in STATUS_NAMES:
            return name
        if value.isdigit():
            return status_code(int(value), field)
    raise Bad(field, f"invalid status code {_short(value)}")


_T = TypeVar("_T")


def positional_constructor(cls: type[_T]) -> Callable[..., _T]:
    """A fast ``cls(*every_field)`` for a frozen, slotted dataclass such as ``SpanRecord``.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, which looks
    the name up every time; for the 18 fields of a span record that is a third of the loader's
    decoding time. This builds (once, from ``dataclasses.fields``, so it follows any change to
    the class) a function that calls each slot's descriptor directly, the way the generated
    ``__init__`` does in spirit. Every field must be passed, in declaration order.

    Raises:
        TypeError: ``cls`` is not a slotted dataclass, or has a ``__post_init__`` that this
            constructor would skip.
    """
    if not dataclasses.is_dataclass(cls) or not hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__; use its constructor")
    names = [f.name for f in dataclasses.fields(cls)]
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    namespace.update({f"_set_{name}": getattr(cls, name).__set__ for name in names})
    body = "\n".join(f"    _set_{name}(record, {name})" for name in names)
    source = f"def make({', '.join(names)}):\n    record = _new(_cls)\n{body}\n    return record\n"
    exec(source, namespace)  # the technique dataclasses itself uses to build __init__
    make: Callable[..., _T] = namespace["make"]
    make.__qualname__ = f"positional_constructor({cls.__name__})"
    return make


def source_label(path: str, line: int | None) -> str:
    """The ``source`` of a record: ``path:line`` (line 1 for a whole document)."""
    return f"{path}:{line if line is not None else 1}"


def make_error(
    reason: str, *, path: str, line: int | None, field: str | None = None
) -> DecodeError:
    """A :class:`DecodeError` naming file, line and field."""
    return DecodeError(reason, path=path, line=line, field=field or None)

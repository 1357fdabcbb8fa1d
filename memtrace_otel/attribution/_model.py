"""Cases and verdicts: the method's input and output records (contract section 5); the cases file.

:class:`Case` lives with the graph (:mod:`memtrace_otel.graph`), which reads cases from traces.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from memtrace_otel.errors import DecodeError
from memtrace_otel.graph._case import Case as Case
from memtrace_otel.semconv import ErrorType, JudgeVerdict
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import LineReader
from memtrace_otel.sources._common import json_line
from memtrace_otel.sources._limits import DEFAULT_MAX_LINE_BYTES, resolve_cap


@dataclass(frozen=True)
class Verdict:
    """The earliest decisive faulty op of one failed case.

    ``error_type`` and ``op_id`` are ``None`` when the method could not name a culprit (the
    ``reason`` says why). ``unchecked`` lists what could not be verified (values not captured,
    traces missing); ``missing_traces`` the linked traces that were not loaded.
    """

    case_id: str
    error_type: str | None
    op_id: str | None
    op_name: str | None
    method: str
    confidence: float
    evidence_refs: tuple[str, ...] = ()
    reason: str = ""
    system: str | None = None
    store_id: str | None = None
    unchecked: tuple[str, ...] = ()
    missing_traces: tuple[str, ...] = ()
    trace_id: str | None = None
    source_op_id: str | None = None
    """The culprit's op id in the file it was imported from (MemTraceBench ``op-...``), if any."""
    rule: str | None = None
    """The named rule that decided the culprit (``evidence``: ``attribution/_rules.py``), if any."""

    def to_json(self) -> str:
        """One JSON Lines line (without the newline)."""
        data = asdict(self)
        data["evidence_refs"] = list(self.evidence_refs)
        data["unchecked"] = list(self.unchecked)
        data["missing_traces"] = list(self.missing_traces)
        return json.dumps(data, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        """A verdict from a decoded JSON object (unknown keys ignored)."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        for key in ("evidence_refs", "unchecked", "missing_traces"):
            if key in known:
                known[key] = tuple(known[key] or ())
        return cls(**known)


_ERROR_TYPES = {e.value for e in ErrorType}
_VERDICTS = {v.value for v in JudgeVerdict}


def _str_list(value: Any, *, path: str, line: int, field_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if type(value) is list and all(type(v) is str for v in value):  # the usual shape, first
        return tuple(value)
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return (str(value),)
    if isinstance(value, list) and all(
        isinstance(v, str | int | float) and not isinstance(v, bool) for v in value
    ):
        return tuple(str(v) for v in value)
    raise DecodeError(
        "expected a string or a list of strings", path=path, line=line, field=field_name
    )


def parse_case(obj: Any, *, path: str = "", line: int = 0) -> Case:
    """One cases-file object as a :class:`Case`.

    Raises:
        DecodeError: not an object, no ``case_id``, or a field of the wrong type.
    """
    if not isinstance(obj, dict):
        raise DecodeError("expected a JSON object", path=path, line=line)
    case_id = obj.get("case_id")
    if not isinstance(case_id, str | int) or isinstance(case_id, bool) or str(case_id) == "":
        raise DecodeError("missing or empty case_id", path=path, line=line, field="case_id")
    question = obj.get("question", "")
    if not isinstance(question, str):
        raise DecodeError("expected a string", path=path, line=line, field="question")
    verdict = obj.get("verdict")
    if verdict is not None and (not isinstance(verdict, str) or verdict not in _VERDICTS):
        raise DecodeError(
            f"expected one of {sorted(_VERDICTS)}", path=path, line=line, field="verdict"
        )
    prediction = obj.get("prediction")
    if prediction is not None and not isinstance(prediction, str):
        prediction = json.dumps(prediction)
    return Case(
        case_id=str(case_id),
        question=question,
        gold_answers=_str_list(
            obj.get("gold_answers"), path=path, line=line, field_name="gold_answers"
        ),
        evidence_refs=_str_list(
            obj.get("evidence_refs"), path=path, line=line, field_name="evidence_refs"
        ),
        verdict=verdict,
        prediction=prediction,
        source=f"{path}:{line}",
    )


def load_cases(
    path: str | os.PathLike[str],
    *,
    strict: bool = True,
    skipped: list[str] | None = None,
    max_line_bytes: int | None = None,
) -> Iterator[Case]:
    """Read a cases file (JSON Lines, contract section 5).

    Args:
        path: the file.
        strict: raise on the first bad line; otherwise skip it and append its error to ``skipped``.
        skipped: collects the messages of skipped lines in lenient mode.
        max_line_bytes: the longest line read; a longer one is a bad line, skipped without
            being held in memory (``None``: ``MEMTRACE_MAX_LINE_BYTES``, else 64 MiB).

    Raises:
        DecodeError: a bad line in strict mode, naming the file, line and field.
        ValueError: a bad ``max_line_bytes`` (argument or environment variable), when the
            first case is asked for.
    """
    cap = resolve_cap(
        "max_line_bytes", max_line_bytes, E.ENV_MEMTRACE_MAX_LINE_BYTES, DEFAULT_MAX_LINE_BYTES
    )
    name = os.fspath(path)
    with open(name, "rb") as handle:
        reader = LineReader(handle, cap)
        for number, raw in enumerate(reader, 1):
            if raw and not raw.strip():
                continue
            try:
                if not raw:
                    raise DecodeError(
                        f"a line of {reader.skipped_size} bytes: longer than max_line_bytes={cap} "
                        f"({E.ENV_MEMTRACE_MAX_LINE_BYTES}), skipped without being held in memory",
                        path=name,
                        line=number,
                    )
                yield parse_case(json_line(raw, path=name, line=number), path=name, line=number)
            except DecodeError as exc:
                if strict:
                    raise
                if skipped is not None:
                    skipped.append(str(exc))

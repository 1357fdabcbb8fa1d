"""``--out``: the verdicts file of incremental runs, its lock and its write-back record.

The file is JSON Lines, appended one whole line per verdict. A case may have several lines (a
verdict redone); the last one counts. Each line carries, beside the verdict, ``attributed_at``
(unix seconds) and, for a verdict that is not final, ``pending`` (why it will be redone):

- ``not_in_traces``: the case's ops were not in the traces read (a search window too small, a
  trace not yet exported);
- ``capped``: a source stopped at its bound, so the case's graph may be incomplete.

Cases whose run failed get no line at all. Only final verdicts are skipped by the next run.

Beside the file live two others: ``<out>.lock`` (held while a run appends, so two runs never
write one file) and ``<out>.sent`` (one line per verdict written back as a span, so a verdict
whose span never left, the Collector down or the run killed, is sent by the next run).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from memtrace_otel.attribution._model import Verdict
from memtrace_otel.errors import DecodeError, MemtraceError

PENDING_NOT_IN_TRACES = "not_in_traces"
PENDING_CAPPED = "capped"
_VERDICT_KEYS = frozenset({"case_id", "error_type", "op_id", "method"})
"""Keys every verdict line has: a file whose lines lack them is not a verdicts file."""


class VerdictFileError(MemtraceError):
    """``--out`` is not a verdicts file, or another run is writing it."""


@dataclass(frozen=True)
class Entry:
    """The latest line of one case in the verdicts file."""

    verdict: Verdict
    attributed_at: float
    pending: str | None = None

    @property
    def key(self) -> str:
        """What identifies this verdict (not just its case) in the write-back record."""
        return f"{self.verdict.case_id}\t{self.attributed_at!r}"


class VerdictLog:
    """The verdicts file ``path``, locked for the life of the object (use ``with``).

    Opening checks, before touching anything, that every complete line is a verdict (a cases
    file or a trace file given as ``--out`` is refused, unchanged); then cuts a torn last line (a
    killed run) and reads the latest verdict of each case.

    Raises:
        VerdictFileError: the file holds something else, or another run holds its lock.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.sent_path = self.path.with_name(self.path.name + ".sent")
        self.entries: dict[str, Entry] = {}
        """The latest entry of each case, in the order cases first appeared."""
        self.repaired = False
        """A torn last line was cut off."""
        self._lock: IO[bytes] | None = None
        self._handle: IO[str] | None = None
        self._sent: set[str] = set()

    def __enter__(self) -> VerdictLog:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> None:
        """Check, lock, repair and read the file (see the class)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        self._check(data)  # refuse a foreign file before creating or changing anything
        lock = open(self.path.with_name(self.path.name + ".lock"), "ab")  # noqa: SIM115
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock.close()
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise VerdictFileError(
                    f"{self.path}: another memtrace attribute run is writing it "
                    f"({lock.name} is locked); wait for it or give another --out"
                ) from None
            raise
        self._lock = lock
        data = self.path.read_bytes() if self.path.exists() else b""  # now under the lock
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as handle:
                handle.truncate(cut)
            data = data[:cut]
            self.repaired = True
        for number, line in enumerate(data.splitlines(), 1):
            if line.strip():
                entry = _entry(line, str(self.path), number)
                self.entries[entry.verdict.case_id] = entry
        if self.sent_path.exists():
            self._sent = {
                line for line in self.sent_path.read_text(encoding="utf-8").splitlines() if line
            }
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def _check(self, data: bytes) -> None:
        lines = data.splitlines()
        if data and not data.endswith(b"\n"):
            lines = lines[:-1]  # a torn last line is a killed run's, repaired under the lock
        for number, line in enumerate(lines, 1):
            if line.strip():
                _entry(line, str(self.path), number)

    def close(self) -> None:
        """Flush the file to disk and release the lock."""
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None
        if self._lock is not None:
            self._lock.close()  # closing releases the lock
            self._lock = None

    def done(self) -> set[str]:
        """The cases with a final verdict (the next run skips them)."""
        return {case_id for case_id, entry in self.entries.items() if entry.pending is None}

    def append(self, verdict: Verdict, pending: str | None = None) -> Entry:
        """Write one verdict line (one write, flushed: appends stay whole)."""
        assert self._handle is not None, "open() first"
        entry = Entry(verdict, round(time.time(), 6), pending)
        data = json.loads(verdict.to_json())
        data["attributed_at"] = entry.attributed_at
        if pending is not None:
            data["pending"] = pending
        self._handle.write(json.dumps(data, ensure_ascii=False, sort_keys=True) + "\n")
        self._handle.flush()
        self.entries[verdict.case_id] = entry
        return entry

    def verdicts(self) -> list[Verdict]:
        """The latest verdict of every case in the file."""
        return [entry.verdict for entry in self.entries.values()]

    def unsent(self) -> list[Entry]:
        """Final verdicts whose span was not written back yet."""
        return [e for e in self.entries.values() if e.pending is None and e.key not in self._sent]

    def mark_sent(self, entries: Iterable[Entry]) -> None:
        """Record that these verdicts' spans were accepted by the OTLP endpoint."""
        keys = [e.key for e in entries if e.key not in self._sent]
        if not keys:
            return
        with open(self.sent_path, "a", encoding="utf-8") as handle:
            handle.write("".join(key + "\n" for key in keys))
            handle.flush()
            os.fsync(handle.fileno())
        self._sent.update(keys)


def _entry(line: bytes, path: str, number: int) -> Entry:
    try:
        data: Any = json.loads(line)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not data.keys() >= _VERDICT_KEYS:
        raise VerdictFileError(
            f"{path}:{number}: not a verdict line (a verdicts file has case_id, error_type, "
            "op_id and method on every line): refusing to append to it; give another --out"
        )
    try:
        verdict = Verdict.from_json(data)
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"not a verdict ({exc})", path=path, line=number) from None
    at = data.get("attributed_at")
    pending = data.get("pending")
    return Entry(
        verdict,
        float(at) if isinstance(at, int | float) else 0.0,
        pending if isinstance(pending, str) else None,
    )

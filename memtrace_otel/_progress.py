"""Progress of the long phases (loading traces, attributing cases), on stderr.

On a terminal: a tqdm bar (count, rate, ETA when the total is known). Anywhere else (a CI log, a
CronJob's output): a plain line every :data:`PLAIN_EVERY` seconds and one at the end, never a
carriage return.
"""

from __future__ import annotations

import time
from typing import IO, Any

PLAIN_EVERY = 10.0
"""Seconds between two plain progress lines."""


class Progress:
    """One phase's progress on ``stream`` (``None``: silent).

    Args:
        stream: where to draw (stderr in the CLI) or ``None``.
        desc: what is being done (``loading traces.jsonl``).
        total: the expected count, when known (for the ETA).
        unit: what is counted (``span``, ``B``, ``case``).
        every: seconds between plain lines when ``stream`` is not a terminal.
    """

    def __init__(
        self,
        stream: IO[str] | None,
        desc: str,
        *,
        total: float | None = None,
        unit: str = "it",
        every: float = PLAIN_EVERY,
    ) -> None:
        self.stream = stream
        self.desc = desc
        self.total = total
        self.unit = unit
        self.count = 0.0
        self.postfix = ""
        self.every = every
        self.started = time.monotonic()
        self._last = self.started
        self._bar: Any = None
        isatty = getattr(stream, "isatty", None)
        if stream is not None and callable(isatty) and isatty():
            from tqdm import tqdm  # only a terminal gets a bar (and pays for the import)

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                unit_scale=unit == "B",
                file=stream,
                leave=False,
                dynamic_ncols=True,
            )

    def update(self, n: float = 1, postfix: str | None = None) -> None:
        """Count ``n`` more; ``postfix``: other figures (``spans=1200 pages=4``)."""
        self.count += n
        if postfix is not None:
            self.postfix = postfix
        if self._bar is not None:
            if postfix is not None:
                self._bar.set_postfix_str(postfix, refresh=False)
            self._bar.update(n)
        elif self.stream is not None:
            now = time.monotonic()
            if now - self._last >= self.every:
                self._last = now
                self._line("")

    def set_total(self, total: float | None) -> None:
        """The expected count, once known."""
        self.total = total
        if self._bar is not None and total is not None:
            self._bar.total = total
            self._bar.refresh()

    def close(self) -> None:
        """End the bar; in plain mode write the closing line."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self.stream is not None:
            self._line("done: ")

    def _line(self, prefix: str) -> None:
        assert self.stream is not None
        elapsed = time.monotonic() - self.started
        rate = self.count / elapsed if elapsed > 0 else 0.0
        amount = _amount(self.count, self.unit)
        of = f" of {_amount(self.total, self.unit)}" if self.total else ""
        eta = ""
        if self.total and rate > 0 and self.count < self.total and not prefix:
            eta = f", about {(self.total - self.count) / rate:.0f} s left"
        extra = f", {self.postfix}" if self.postfix else ""
        self.stream.write(
            f"{self.desc}: {prefix}{amount}{of} in {elapsed:.1f} s "
            f"({_amount(rate, self.unit)}/s){eta}{extra}\n"
        )
        self.stream.flush()


def _amount(value: float, unit: str) -> str:
    if unit == "B":
        for scale, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if value >= scale:
                return f"{value / scale:.1f} {name}"
        return f"{value:.0f} B"
    return f"{value:,.0f} {unit}s"

"""Small timing helpers shared by the benchmarks (no timing assertions: figures are printed)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def best_of(fn: Callable[[], None], *, number: int, repeat: int = 7) -> float:
    """Seconds per call: the best of ``repeat`` runs of ``number`` calls (least disturbed run)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def verdict(value: float, goal: float, *, higher_is_better: bool = False) -> str:
    """'meets goal' or 'MISSES goal' for a printed figure."""
    ok = value >= goal if higher_is_better else value <= goal
    return "meets goal" if ok else "MISSES goal"

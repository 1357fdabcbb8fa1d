"""The bench wing's commands and methods, added to ``memtrace`` as an extension.

``pyproject.toml`` names this module in the ``memtrace_otel.extensions`` entry points; the product's
CLI (:mod:`memtrace_otel.cli`) loads every such extension without importing it by name, calls
:func:`register_methods` before it builds its parsers (so ``--method`` lists the bench's methods),
then :func:`register_commands`.
"""

from __future__ import annotations

import importlib
from typing import Any

COMMANDS: tuple[str, ...] = ("demo", "bench", "optimize")
"""Modules of this package that add a ``memtrace`` subcommand, in the order ``--help`` lists them."""


def register_methods() -> None:
    """Make the bench wing's attribution methods available to ``get_method`` and ``--method``.

    Only the names are registered here: the methods' modules (the reference systems behind
    ``replay``, half a second of imports) load when a method is made, so a command that runs
    another method does not pay for them.
    """
    from memtrace_otel.attribution import register_method

    register_method("replay", _replay)


def _replay(**options: Any) -> Any:
    """``replay``, imported on first use (see :func:`register_methods`)."""
    from memtrace_bench.methods import ReplayMethod

    return ReplayMethod(**options)


def register_commands(subparsers: Any) -> None:
    """Add ``memtrace demo``, ``memtrace bench`` and ``memtrace optimize``."""
    for name in COMMANDS:
        importlib.import_module(f"memtrace_bench.cli.{name}").register(subparsers)

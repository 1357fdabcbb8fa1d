"""The ``memtrace`` command: ``main(argv) -> int``, one module per subcommand.

Data goes to stdout, messages and progress to stderr. Typed errors from
:mod:`memtrace_otel.errors` and operating-system errors (a path that cannot be read or written)
become one line on stderr and exit code 2; Ctrl-C exits 130.
Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code).

Extensions add commands and attribution methods without the product importing them: each entry
point of the group ``memtrace_otel.extensions`` names a module (or object) with an optional
``register_methods()``, called before any parser is built, and an optional
``register_commands(subparsers)``. The bench wing (``memtrace demo``, ``memtrace bench``,
``memtrace optimize``) is one (:mod:`memtrace_bench.cli`). An extension that cannot be loaded is
one warning on stderr; the product's own commands still run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from memtrace_otel import __version__
from memtrace_otel.errors import MemtraceError

# Subcommand modules, in the order ``--help`` lists them.
_COMMAND_MODULES: tuple[str, ...] = (
    "feedback",
    "attribute",
    "graph",
    "export",
    "serve",
)

EXTENSION_GROUP = "memtrace_otel.extensions"
"""Entry-point group of the modules that add commands and methods (the bench wing is one)."""

EXIT_OK = 0
EXIT_FAILURES = 1
EXIT_USAGE = 2
EXIT_NOTHING_TO_ATTRIBUTE = 3
"""``memtrace attribute`` found no failed case: no feedback, judge op or cases file marks one."""
EXIT_INTERRUPTED = 130


def _extensions() -> list[Any]:
    """The loaded ``memtrace_otel.extensions`` entry points, by name; a broken one is a warning."""
    loaded = []
    for point in sorted(entry_points(group=EXTENSION_GROUP), key=lambda p: p.name):
        try:
            loaded.append(point.load())
        except Exception as exc:  # an extension's bug must not take the product's commands down
            print(f"memtrace: warning: extension {point.name!r} not loaded: {exc}", file=sys.stderr)
    return loaded


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand, extensions' included."""
    extensions = _extensions()
    for extension in extensions:
        getattr(extension, "register_methods", lambda: None)()
    parser = argparse.ArgumentParser(
        prog="memtrace",
        description=(
            "Record LLM memory systems as memory evolution graphs on OpenTelemetry "
            "and find the operation that caused each wrong answer."
        ),
    )
    parser.add_argument("--version", action="version", version=f"memtrace-otel {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        module = importlib.import_module(f"memtrace_otel.cli.{name}")
        module.register(subparsers)
    for extension in extensions:
        getattr(extension, "register_commands", lambda _: None)(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return func(args)
    except KeyboardInterrupt:
        print("memtrace: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except MemtraceError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a path that cannot be read or written: one line, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"memtrace: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


def console_main() -> None:
    """Entry point of the ``memtrace`` console script."""
    sys.exit(main())

"""The ``memtrace`` command: ``main(argv) -> int``, one module per subcommand.

Data goes to stdout, messages and progress to stderr. Typed errors from
:mod:`memtrace_otel.errors` and operating-system errors (a path that cannot be read or written)
become one line on stderr and exit code 2; any other exception is a bug: its traceback and exit
code 70; Ctrl-C exits 130 (the table of exit statuses: ``EXIT_*`` below and README.md).
Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (a callable taking the parsed namespace and returning an exit code).

Extensions add commands and attribution methods without the product importing them: each entry
point of the group ``memtrace_otel.extensions`` names a module (or object) with an optional
``register_methods()``, called before any parser is built, and an optional
``register_commands(subparsers)``. The bench wing (``memtrace demo``, ``memtrace bench``,
``memtrace optimize``) is one (:mod:`memtrace_bench.cli`). An extension that cannot be loaded is
one warning on stderr; the product's own commands still run. A product command's run builds
only that command's parser (see :func:`build_parser`), so its start-up does not import the
other commands' modules.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
import traceback
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
    "content",
    "serve",
)

EXTENSION_GROUP = "memtrace_otel.extensions"
"""Entry-point group of the modules that add commands and methods (the bench wing is one)."""

# The exit statuses: one table, in README.md ("Exit statuses"), which a test checks against
# these constants; commands, tests and benchmarks use the names, never the numbers.
EXIT_OK = 0
"""Everything asked was done."""
EXIT_FAILURES = 1
"""Done, with losses: some records or cases skipped, feedback refused, a source capped, a case
that failed to run, a span (feedback, verdict) not exported. The summary says which."""
EXIT_USAGE = 2
"""A usage or input error (bad argument, unreadable file, unusable model directory, the ``batch``
extra not installed): one line on stderr, nothing done."""
EXIT_NOTHING_TO_ATTRIBUTE = 3
"""``memtrace attribute`` found no failed case: no traces for the sources, or no feedback, judge
op or cases file marking an answer wrong (stderr says which)."""
EXIT_INTERNAL = 70
"""An internal error (a bug in memtrace-otel: the traceback is on stderr); ``EX_SOFTWARE``."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C)."""


def _extensions() -> list[Any]:
    """The loaded ``memtrace_otel.extensions`` entry points, by name; a broken one is a warning."""
    loaded = []
    for point in sorted(entry_points(group=EXTENSION_GROUP), key=lambda p: p.name):
        try:
            loaded.append(point.load())
        except Exception as exc:  # an extension's bug must not take the product's commands down
            print(f"memtrace: warning: extension {point.name!r} not loaded: {exc}", file=sys.stderr)
    return loaded


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand, extensions' included.

    Given the ``argv`` it will parse and that names one of the product's own commands, only that
    command's parser is built: the other commands' modules (``serve``'s HTTP server, the
    extensions' commands, which import the bench wing's reference systems: half a second of
    start-up) are not imported. The extensions' methods are still registered, and the parse of
    such an ``argv`` is the same either way.
    """
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
    own = _own_command(argv)
    for name in _COMMAND_MODULES if own is None else (own,):
        module = importlib.import_module(f"memtrace_otel.cli.{name}")
        module.register(subparsers)
    if own is None:
        for extension in extensions:
            getattr(extension, "register_commands", lambda _: None)(subparsers)
    return parser


def _own_command(argv: Sequence[str] | None) -> str | None:
    """``argv``'s command (its first argument) when it is one of :data:`_COMMAND_MODULES`."""
    if argv is not None and len(argv) > 0 and argv[0] in _COMMAND_MODULES:
        return argv[0]
    return None


BATCH_INSTALL = "pip install 'memtrace-otel[batch]'"
"""How the command's own packages are installed (an app's ``pip install memtrace-otel`` has none)."""


def _missing_package(exc: ModuleNotFoundError) -> int:
    """A package of the batch job not installed: one line naming it and the install, exit 2."""
    if (exc.name or "").split(".")[0] in ("memtrace_otel", "memtrace_bench"):
        raise exc  # one of our own modules missing: a bug, not an install choice
    print(
        f"memtrace: error: {exc}: the memtrace command runs the batch job, whose packages "
        f"come with {BATCH_INSTALL}",
        file=sys.stderr,
    )
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    if argv is None:
        argv = sys.argv[1:]
    try:
        parser = build_parser(argv)
    except ModuleNotFoundError as exc:
        return _missing_package(exc)
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
    except ModuleNotFoundError as exc:
        return _missing_package(exc)
    except MemtraceError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a path that cannot be read or written: one line, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"memtrace: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # a bug: its own status, never confused with "some records skipped"
        traceback.print_exc(file=sys.stderr)
        print(
            f"memtrace: internal error (exit {EXIT_INTERNAL}): a bug in memtrace-otel "
            f"{__version__}, not in your input; please report it with the traceback above",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def console_main() -> None:
    """Entry point of the ``memtrace`` console script (and of ``python -m memtrace_otel.cli``).

    Before the process exits, what is still alive (modules, the run's caches: hundreds of
    thousands of objects after a batch run) is frozen out of the garbage collector
    (``gc.freeze``), so the interpreter's last full collection at shutdown does not walk it:
    0.04 s of a 3 s run. Objects are still freed as the interpreter tears down; ``atexit``
    handlers still run. What that collection could still have finalized (a file left open in
    a reference cycle) is not here: every file the command writes is closed when it returns.
    """
    code = main()
    gc.freeze()
    sys.exit(code)

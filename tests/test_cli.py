"""The memtrace command, called as main([...])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memtrace_otel import __version__
from memtrace_otel.cli import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"memtrace-otel {__version__}"


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: memtrace" in capsys.readouterr().err


def test_console_script_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memtrace_otel.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "memory evolution graphs" in done.stdout


_STARTUP = r"""
import sys
from pathlib import Path
from memtrace_otel.cli import EXIT_NOTHING_TO_ATTRIBUTE, main
from memtrace_otel.attribution import method_names

code = main(["attribute", sys.argv[1], "--out", sys.argv[2], "--quiet"])
assert code == EXIT_NOTHING_TO_ATTRIBUTE, code
assert "replay" in method_names()  # the bench wing's method is still offered by name
print(",".join(sorted(m for m in sys.modules if m.startswith(tuple(sys.argv[3:])))))
"""


def test_attribute_does_not_import_what_it_does_not_run(tmp_path: Path) -> None:
    """``memtrace attribute`` without ``--report`` imports neither the bench wing's systems (the
    ``replay`` method's), nor the other commands' modules, nor the report writer."""
    empty = tmp_path / "traces.jsonl"
    empty.write_text("")
    unwanted = [
        "memtrace_bench.systems",
        "memtrace_bench.methods",
        "memtrace_otel.cli.serve",
        "memtrace_otel.cli.graph",
        "memtrace_otel.reporting._html",
        "jinja2",
    ]
    done = subprocess.run(
        [sys.executable, "-c", _STARTUP, str(empty), str(tmp_path / "v.jsonl"), *unwanted],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_replay_is_made_from_its_registered_name() -> None:
    """The lazily registered ``replay`` still reaches the bench wing's method (which asks for
    its benchmark folder)."""
    from memtrace_otel.attribution import get_method
    from memtrace_otel.cli import build_parser

    build_parser(["attribute"])
    with pytest.raises(ValueError, match="re-runs a reference system"):
        get_method("replay")

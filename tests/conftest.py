"""Shared test helpers: where the shared data lives, and how its absence is treated."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The project's own tests want our internal errors raised, not logged (memtrace_otel/_internal.py):
# users' test suites do not set this and get the production behaviour. Subprocesses inherit it.
os.environ.setdefault("MEMTRACE_INTERNAL_ERRORS", "raise")

# Fixtures that start the real backends (jaeger, collector, ...) for any test module.
pytest_plugins = ["tests._backends"]

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ``../shared``; skips the test when it is missing, fails under CI=true."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"shared data missing: {path}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def shared() -> Path:
    """The ``../shared`` folder (skip, or fail under CI=true, when absent)."""
    return shared_path()

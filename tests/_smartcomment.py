"""The Python 3.12 interpreter with zjunlp's ``smartcomment`` recorder, for the tests.

Created (once, then cached in ``~/.cache/memtrace-otel``) by the repo's own
``scripts/smartcomment_env.sh``, which ``make smartcomment`` (and so ``make pytest``) runs first.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def smartcomment_python() -> str:
    """The interpreter's path; skips (fails under CI) when the environment cannot be made."""
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "smartcomment_env.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if run.returncode != 0:
        message = f"no smartcomment environment: {run.stderr.strip()[-500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return run.stdout.strip().splitlines()[-1]

"""The README's "View in Jaeger/Tempo" commands, run verbatim against the real Jaeger v2.

The block is taken from README.md as it is and run by bash, with ``JAEGER`` set to the built
binary, ``app.py`` the README's quick start, and ``memtrace``/``python`` from this environment.
It uses the README's fixed ports (4317, 4318, 16686, 13133): when something else holds them the
test skips (fails under ``CI=true``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._backends import JAEGER_ENV, REPO, require_binary, tcp_open

PORTS = (4317, 4318, 16686, 13133)


def _block(after: str, language: str) -> str:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)
    return next(b for b in blocks if after in b)


def test_the_readme_jaeger_commands_run_verbatim(tmp_path: Path) -> None:
    jaeger = require_binary(JAEGER_ENV, "Jaeger v2")
    busy = [port for port in PORTS if tcp_open(port)]
    if busy:
        message = f"the README's ports are in use here: {busy}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    (tmp_path / "app.py").write_text(_block("MemTracer(", "python"))
    (tmp_path / "deploy").symlink_to(REPO / "deploy")
    commands = _block("$JAEGER --config", "sh")
    env = {
        **os.environ,
        "JAEGER": str(jaeger),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    for name in [v for v in env if v.startswith("OTEL_")]:
        del env[name]
    # Only the test's own lines around the README's: stop Jaeger when the block is done.
    script = "trap 'kill $(jobs -p) 2>/dev/null' EXIT\nset -e\n" + commands
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "write-back:" not in done.stderr or " 0 not sent" in done.stderr
    assert (tmp_path / "report" / "index.html").is_file()
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["capped"] == [] and summary["records"] > 0, done.stderr[-2000:]

"""The README's loop (answer, feedback, attribute) runs as written, on files and on a real Jaeger.

The commands are taken from README.md itself, so the README cannot drift from what works. The
Jaeger section's two lines that start Jaeger are replaced by the test's own Jaeger (on free
ports, never the defaults); its ports are substituted in the remaining lines, which run verbatim.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._backends import (  # noqa: F401  (fixtures)
    JaegerServer,
    http_get,
    jaeger,
    jaeger_bin,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(heading: str) -> list[tuple[str, str]]:
    """The fenced code blocks (language, text) of the README section under ``heading``."""
    start = README.index(heading)
    end = README.find("\n## ", start + len(heading))
    section = README[start : end if end >= 0 else None]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEMTRACE_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        f"{script}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    return result


def _quick_start(folder: Path) -> str:
    (python, code), (shell, commands) = _blocks("## Quick start")
    assert (python, shell) == ("python", "sh")
    assert "quickstart.py" in README[: README.index(code)]  # the README names the file
    (folder / "quickstart.py").write_text(code)
    return commands


def _verdict(folder: Path) -> dict[str, object]:
    (line,) = (folder / "verdicts.jsonl").read_text().splitlines()
    verdict: dict[str, object] = json.loads(line)
    return verdict


def test_quick_start_loop_runs_verbatim(tmp_path: Path) -> None:
    commands = _quick_start(tmp_path)
    result = _run(commands, tmp_path)
    verdict = _verdict(tmp_path)
    assert (verdict["case_id"], verdict["error_type"], verdict["op_name"]) == (
        "q-17",
        "UpdateError",
        "my.merge",
    )
    assert "1 cases flagged wrong" in result.stderr
    assert (tmp_path / "report" / "index.html").exists()


def test_quick_start_without_feedback_says_how_to_mark_and_exits_3(tmp_path: Path) -> None:
    commands = _quick_start(tmp_path)
    lines = [line for line in commands.splitlines() if not line.startswith("memtrace feedback")]
    result = subprocess.run(
        ["bash", "-c", "\n".join(lines)], cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert result.returncode == 3, result.stderr
    assert "memtrace feedback --traceparent" in result.stderr


def test_jaeger_section_loop_runs_verbatim(jaeger: JaegerServer, tmp_path: Path) -> None:  # noqa: F811
    _quick_start(tmp_path)
    (shell, commands), *_ = _blocks("## View in Jaeger/Tempo")
    assert shell == "sh"
    lines = commands.splitlines()
    assert lines[0].startswith("bash scripts/build_backends.sh") and lines[1].startswith("$JAEGER")
    script = "\n".join(lines[2:])
    assert "4318" in script and "16686" in script and "http/protobuf" in script
    script = script.replace("127.0.0.1:4318", f"127.0.0.1:{jaeger.otlp_http_port}")
    script = script.replace("127.0.0.1:16686", f"127.0.0.1:{jaeger.query_port}")
    result = _run(script, tmp_path)
    verdict = _verdict(tmp_path)
    assert (verdict["error_type"], verdict["op_name"]) == ("UpdateError", "my.merge")
    assert "1 cases flagged wrong" in result.stderr

    # --write-back: the verdict span reached Jaeger
    def services() -> list[str] | None:
        status, body = http_get(f"{jaeger.query_url}/api/services")
        found = json.loads(body).get("data") or [] if status == 200 else []
        return found if "memtrace-attribution" in found else None

    assert {"my-agent", "memtrace-feedback"} <= set(
        wait_until(services, timeout=30, what="verdict")
    )


@pytest.mark.parametrize("heading", ["## Quick start", "## View in Jaeger/Tempo"])
def test_the_loop_is_in_the_readme(heading: str) -> None:
    text = "".join(code for _, code in _blocks(heading))
    for step in ("python quickstart.py", "memtrace feedback --traceparent", "memtrace attribute"):
        assert step in text, (heading, step)

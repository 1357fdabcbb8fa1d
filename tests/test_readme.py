"""The README's runnable blocks run as written, in a fresh temporary folder; the rest parse.

The commands are taken from README.md itself, so the README cannot drift from what works: the
quick start (answer, feedback, attribute), the batch job on the quick start's files (attribute,
graph, export, bench), and the Jaeger section on a real Jaeger v2 on loopback. The Jaeger
section's lines that build and start Jaeger are replaced by the test's own Jaeger (on free ports,
never the defaults); its ports are substituted in the remaining lines, which run verbatim.

The blocks that need what a test machine does not have (a backend URL, S3, a dask cluster,
LoCoMo's data file, Docker, Kubernetes) are checked statically: they parse as shell, every
``memtrace`` line parses with the real argument parser, and the files, make targets, compose
services and package extras they name exist.

The commands run with the test's interpreter's folder first on ``PATH``: that is what the
README's ``. .venv/bin/activate`` does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
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
    assert lines[0].startswith("bash scripts/build_backends.sh")
    assert lines[1].startswith(
        "eval \"$(sed 's/^/export /' ~/.cache/memtrace-otel/bin/selected.env)\""
    )
    assert lines[2].startswith("$MEMTRACE_JAEGER_BIN --config deploy/jaeger.yaml &")
    # What the eval line reads is what the build script writes, under the name line 3 uses.
    build = (ROOT / "scripts" / "build_backends.sh").read_text()
    assert 'selected="$cache/selected.env"' in build
    assert "MEMTRACE_JAEGER_BIN=%s" in build
    script = "\n".join(lines[3:])
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


# --- set up and the batch job ------------------------------------------------------------------


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, re.M))


def test_set_up_block_names_make_targets_and_the_venv_it_activates() -> None:
    [(shell, commands)] = _blocks("## Set up")
    assert shell == "sh"
    lines = [line.split("#")[0].strip() for line in commands.splitlines()]
    assert lines[0] == "make install" and lines[1] == ". .venv/bin/activate"
    targets = _make_targets()
    for line in lines:
        if line.startswith("make "):
            assert line.split()[1] in targets, line
    assert re.search(r"^VENV\s*\?=\s*\.venv$", (ROOT / "Makefile").read_text(), re.M)
    assert "pip install 'memtrace-otel" not in README  # not on the index: from the clone


def test_batch_job_block_runs_verbatim_after_the_quick_start(tmp_path: Path) -> None:
    commands = _quick_start(tmp_path)
    _run(commands, tmp_path)
    (shell, batch), *_ = _blocks("## The batch job")
    assert shell == "sh"
    for step in ("memtrace graph", "memtrace export", "memtrace bench generate", "bench evaluate"):
        assert step in batch, step
    result = _run(batch, tmp_path)

    assert _verdict(tmp_path)["op_name"] == "my.merge"  # the rerun skipped the done case
    page = (tmp_path / "q-17.html").read_text()
    assert "<html" in page.lower() and "my.merge" in page
    exported = (tmp_path / "runs" / "today" / "traces.jsonl").read_text().splitlines()
    spans = [
        span
        for line in exported
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    op_names = {
        a["value"].get("stringValue")
        for span in spans
        for a in span.get("attributes", [])
        if a["key"] == "memtrace.op.name"
    }
    assert {"my.merge", "my.answer"} <= op_names
    assert "memtrace.feedback" in {span["name"] for span in spans}
    bench = tmp_path / "bench"
    assert (bench / "labels.jsonl").exists() and (bench / "report" / "index.html").exists()
    assert (bench / "verdicts.jsonl").read_text().strip()
    assert "evidence" in result.stdout + result.stderr
    assert "blame-generate" in result.stdout + result.stderr


# --- blocks checked statically -----------------------------------------------------------------


def _parses_as_shell(block: str) -> None:
    result = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
    assert result.returncode == 0, (block, result.stderr)


def _commands(block: str) -> list[list[str]]:
    """The block's commands as argv lists (continuations joined, comments and ``&`` dropped)."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[-1] == "&":
            words = words[:-1]
        if words:
            found.append(words)
    return found


def _check_memtrace(argv: list[str]) -> None:
    from memtrace_otel.cli import build_parser

    assert "--help" not in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as exc:  # argparse's usage error
        raise AssertionError(f"{shlex.join(argv)}: does not parse ({exc})") from None
    assert hasattr(args, "func"), argv


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


def _check_pip(argv: list[str]) -> None:
    assert argv[:3] == ["pip", "install", "-e"], argv
    target = argv[3]
    match = re.fullmatch(r"\.\[([\w,]+)\]", target)
    assert match, target  # the clone itself, with extras
    assert set(match.group(1).split(",")) <= _extras(), target


def _check_compose(argv: list[str]) -> None:
    import yaml

    assert argv[:3] == ["docker", "compose", "-f"], argv
    path = ROOT / argv[3]
    compose = yaml.safe_load(path.read_text())
    verb, *rest = argv[4:]
    assert verb in {"up", "run"}, argv
    if verb == "run":
        services = [word for word in rest if not word.startswith("-")]
        assert services and services[0] in compose["services"], argv


def _check(argv: list[str]) -> None:
    tool = argv[0]
    if tool == "memtrace":
        _check_memtrace(argv)
    elif tool == "pip":
        _check_pip(argv)
    elif tool == "docker":
        _check_compose(argv)
    elif tool == "kubectl":
        assert argv[1:3] == ["apply", "-k"] and (ROOT / argv[3] / "kustomization.yaml").is_file()
    elif tool == "export":
        for assignment in argv[1:]:
            name, _, value = assignment.partition("=")
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and value, assignment
    elif tool == "opentelemetry-instrument":
        assert shutil.which(tool, path=str(Path(sys.executable).parent)), tool
        assert argv[1:3] == ["python", "app.py"], argv
    else:
        raise AssertionError(f"an unchecked command in the README: {shlex.join(argv)}")


@pytest.mark.parametrize(
    ("heading", "index"),
    [
        ("## The batch job", 1),  # other sources: Jaeger, Tempo, s3://, dask://, LoCoMo, optimize
        ("## Auto-instrumentation", 0),
        ("## View in Jaeger/Tempo", 1),  # docker compose up
        ("## Run batch attribution in production", 0),
        ("## Run batch attribution in production", 1),  # compose run, kubectl
        ("## Review verdicts", 0),  # memtrace serve (a browser session: tests/test_serve.py)
    ],
)
def test_blocks_that_need_other_machines_parse_and_name_real_commands(
    heading: str, index: int
) -> None:
    shell, block = _blocks(heading)[index]
    assert shell == "sh"
    _parses_as_shell(block)
    commands = _commands(block)
    assert commands
    for argv in commands:
        _check(argv)


def test_the_static_check_catches_a_flag_that_does_not_exist() -> None:
    with pytest.raises(AssertionError, match="does not parse"):
        _check(["memtrace", "attribute", "x.jsonl", "--no-such-flag"])
    with pytest.raises(AssertionError):
        _check(["pip", "install", "-e", ".[no-such-extra]"])


def test_the_other_sources_block_covers_s3_dask_jaeger_and_tempo() -> None:
    _, block = _blocks("## The batch job")[1]
    for needle in ("jaeger+http://", "tempo+http://", "s3://", "--executor dask://"):
        assert needle in block, needle


def test_no_copy_paste_trap_remains() -> None:
    # Each of these failed when pasted on a fresh machine (issue 33).
    assert "$JAEGER " not in README  # never set by anything
    assert " traces/*.jsonl" not in README  # the quick start writes ./memtrace-traces.jsonl
    assert "OTEL_SERVICE_NAME" in "".join(b for _, b in _blocks("## Auto-instrumentation"))
    assert "OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none" in README
    assert "MEM0_TELEMETRY=False" in README
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in docs:
        text = path.read_text()
        assert "shared/spec" not in text, path
        assert "project's module proxy" not in text, path

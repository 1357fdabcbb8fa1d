"""The app side installs light: an instrumented app needs the OpenTelemetry API and SDK, the OTLP
exporter and what its instrumentor needs, never the batch job's packages (the ``batch`` extra).

Building a venv per run would take minutes, so the app side runs in a subprocess whose imports
of every package of the ``batch`` extra (read from ``pyproject.toml``) are refused, as if they
were not installed, and must still trace: a manual op and an auto-instrumented OpenAI call end
up as spans in the file ``configure`` writes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from memtrace_otel.semconv import attributes as A
from tests.conftest import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]


def _name(requirement: str) -> str:
    """``'rank-bm25>=0.2.2'`` -> ``'rank-bm25'``."""
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


APP_SIDE = {_name(r) for r in PROJECT["dependencies"]}
BATCH_ONLY = {_name(r) for r in EXTRAS["batch"]} - APP_SIDE
BLOCKED = sorted(name.replace("-", "_") for name in BATCH_ONLY)
"""Import names of the batch extra's packages (each distribution here imports as its name)."""

PRELUDE = """
import importlib.abc, sys
BLOCKED = set({blocked!r})

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def _run_without(blocked: list[str], code: str) -> subprocess.CompletedProcess[str]:
    script = PRELUDE.format(blocked=blocked) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_the_app_side_install_is_the_api_the_sdk_the_exporter_and_the_instrumentor_base() -> None:
    dependencies = {_name(r) for r in PROJECT["dependencies"]}
    assert dependencies == {
        "opentelemetry-api",
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp",
        "opentelemetry-instrumentation",
        "wrapt",
    }
    assert {"networkx", "jinja2", "tqdm", "openai", "fsspec"} <= BATCH_ONLY
    assert {_name(r) for r in EXTRAS["semantic"]} <= BATCH_ONLY
    assert {_name(r) for r in EXTRAS["graph"]} == {"networkx"}


def test_make_install_installs_every_extra() -> None:
    # `make install` is `pip install -e '.[dev]'`: the two-command set-up needs everything.
    dev = {_name(r) for r in EXTRAS["dev"]}
    missing = {
        extra: sorted({_name(r) for r in requirements} - dev)
        for extra, requirements in EXTRAS.items()
        if extra != "dev"
    }
    assert {extra: names for extra, names in missing.items() if names} == {}


def test_the_blocker_refuses_what_it_blocks() -> None:
    done = _run_without(["networkx"], "import networkx")
    assert done.returncode != 0 and "No module named 'networkx'" in done.stderr


def test_an_app_without_the_batch_packages_traces_manual_ops(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    done = _run_without(
        BLOCKED,
        f"""
        import memtrace_otel.instrumentors.langgraph, memtrace_otel.instrumentors.mem0
        import memtrace_otel.instrumentors.openai, memtrace_otel.testing
        from memtrace_otel import MemTracer, configure

        provider = configure(traces_file={str(traces)!r}, batch=False, set_global=False)
        mt = MemTracer(tracer_provider=provider, system="app", store_id="u1")
        with mt.extract("app.extract", inputs=[mt.variable("msg:1", "I live in Porto")]) as op:
            fact = op.output(mt.variable("fact:1", "lives in Porto", category="memory"))

        @mt.trace_retrieve("app.search")
        def search(query):
            return [fact]

        search(mt.variable("query:1", "Where do I live?"))
        provider.shutdown()
        try:
            import memtrace_otel.processing
        except ModuleNotFoundError as exc:
            print("processing:", exc)
        import sys
        print("loaded:", sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
        """,
    )
    assert done.returncode == 0, done.stderr
    spans = [
        span
        for line in traces.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    assert [s["name"] for s in spans] == [
        f"{A.OP_SPAN_NAME_PREFIX}extract app.extract",
        "search_memory",
    ]
    assert "loaded: []" in done.stdout
    # The live graph is the one app-side part that needs more, and says which install.
    assert "pip install 'memtrace-otel[graph]'" in done.stdout


def test_an_app_without_the_batch_packages_traces_its_openai_calls(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    # The app brings openai itself (the `openai` extra: what its instrumentor needs).
    done = _run_without(
        [name for name in BLOCKED if name != "openai"],
        f"""
        import openai
        from memtrace_bench.apps.openai_server import ScriptedOpenAI
        from memtrace_otel import configure
        from memtrace_otel.instrumentors.openai import OpenAIInstrumentor

        provider = configure(traces_file={str(traces)!r}, batch=False, set_global=False)
        OpenAIInstrumentor().instrument(tracer_provider=provider)
        with ScriptedOpenAI(lambda kind, body: "You live in Porto.") as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
            reply = client.chat.completions.create(
                model="gpt-4.1-mini", messages=[{{"role": "user", "content": "Where do I live?"}}]
            )
        print("reply:", reply.choices[0].message.content)
        provider.shutdown()
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "reply: You live in Porto." in done.stdout
    [span] = [
        span
        for line in traces.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    attributes = {a["key"]: a["value"] for a in span["attributes"]}
    assert attributes[A.MEMTRACE_OP_KIND] == {"stringValue": "generate"}


def test_the_command_without_the_batch_packages_says_which_install(tmp_path: Path) -> None:
    done = _run_without(
        BLOCKED,
        f"""
        from memtrace_otel.cli import main
        print("exit", main(["attribute", {str(tmp_path)!r}]))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "exit 2" in done.stdout
    assert "pip install 'memtrace-otel[batch]'" in done.stderr
    assert "Traceback" not in done.stderr

"""``opentelemetry-instrument python app.py`` end to end, with no tracing code in the app.

The same small application (mem0 remembers, OpenAI answers; ``APP`` in the helpers) runs twice,
in parallel subprocesses, each against its own scripted OpenAI-compatible server:

- in the project environment (mem0ai 2.x, the additive pipeline), with a planted extraction
  failure;
- in the legacy environment (mem0ai 1.0.0, the classic pipeline; ``scripts/mem0_legacy_env.sh``
  creates it once, in seconds), with ADD/UPDATE/DELETE/NONE decisions and a planted wrong NONE.

The spans go through the OpenTelemetry distro and our ``memtrace_file`` exporter into an OTLP
JSON Lines file; the test reads them back, builds the graph and runs the batch job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.instrumentors import message_ref
from memtrace_otel.job import load_store_graphs
from tests._instrumentor_helpers import APP, LLMScript, attribute, mem0_config
from tests._openai_server import ScriptedOpenAI

REPO = Path(__file__).resolve().parents[1]
USER = "dana"
TIMEOUT = 180

ADDITIVE_FACTS = {
    "Ana lives in Porto": [],  # planted: the extraction drops the fact
    "hiking": ["User loves hiking on weekends"],
    "cat named Tom": ["User has a cat named Tom"],
}
ADDITIVE_PLAN = [
    {"add": "My sister Ana lives in Porto."},
    {"add": "I love hiking on weekends."},
    {"add": "I have a cat named Tom."},
    {"update": "User has a cat named Tom, aged 3"},
    {"delete": True},
    {"ask": "Where does Ana live?"},
]

CLASSIC_FACTS = {
    "Ana lives in Porto": ["Ana lives in Porto"],
    "love hiking": ["User loves hiking on weekends"],
    "no longer go hiking": ["User no longer goes hiking"],
    "cat named Tom": ["User has a cat named Tom"],
    "Tom turned 3": ["Tom is 3 years old"],
    "moved to Lisbon": ["Ana moved to Lisbon"],
}
CLASSIC_DECISIONS = {
    "User no longer goes hiking": ("DELETE", "hiking"),
    "Tom is 3 years old": ("UPDATE", "Tom"),
    "Ana moved to Lisbon": ("NONE", "Porto"),  # planted: the move is judged already known
}
CLASSIC_PLAN = [
    {"add": "My sister Ana lives in Porto."},
    {"add": "I love hiking on weekends."},
    {"add": "I no longer go hiking."},
    {"add": "I have a cat named Tom."},
    {"add": "Tom turned 3 last week."},
    {"update": "User has a cat named Tom, aged 3"},
    {"delete": True},
    {"add": "Ana moved to Lisbon last month."},
    {"ask": "Where does Ana live now?"},
]


@dataclass
class Run:
    folder: Path
    output: dict[str, Any]
    traces: Path


def _legacy_python() -> Path:
    """The classic-pipeline environment, created if missing (network to PyPI, ~10 s once)."""
    script = REPO / "scripts" / "mem0_legacy_env.sh"
    done = subprocess.run(
        ["bash", str(script), sys.executable], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        message = f"could not create the mem0 1.x environment:\n{done.stderr[-2000:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return Path(done.stdout.strip().splitlines()[-1])


def _start(
    python_dir: Path, folder: Path, server: ScriptedOpenAI, plan: list[dict[str, Any]]
) -> subprocess.Popen[str]:
    folder.mkdir(parents=True, exist_ok=True)
    app = folder / "app.py"
    app.write_text(APP)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "MEMTRACE_", "PYTEST_")) and key != "PYTHONPATH"
    }
    env.update(
        {
            "PATH": f"{python_dir}{os.pathsep}{env.get('PATH', '')}",
            "OTEL_SERVICE_NAME": "memory-app",
            "OTEL_TRACES_EXPORTER": "memtrace_file",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "MEMTRACE_TRACES_FILE": str(folder / "traces.jsonl"),
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_AND_EVENT",
            "MEMTRACE_INTERNAL_ERRORS": "raise",  # our bugs must not hide in the subprocess
            "MEM0_TELEMETRY": "false",
            # Its own mem0 home: both apps start at once, and mem0 clears the local qdrant
            # folder of its home at start (shutil.rmtree), so a shared ~/.mem0 could race.
            "MEM0_DIR": str(folder / "mem0-home"),
            "APP_PLAN": json.dumps({"user": USER, "steps": plan}),
            "APP_MEM0_CONFIG": json.dumps(mem0_config(server.base_url, folder)),
            "APP_OPENAI_BASE_URL": server.base_url,
        }
    )
    instrument = Path(sys.executable).parent / "opentelemetry-instrument"
    return subprocess.Popen(
        [str(instrument), "python", str(app)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str], folder: Path) -> Run:
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 0, stderr[-4000:]
    return Run(folder, json.loads(stdout.strip().splitlines()[-1]), folder / "traces.jsonl")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    legacy = _legacy_python()
    root = tmp_path_factory.mktemp("e2e")
    additive_script = LLMScript(ADDITIVE_FACTS, answer=lambda prompt: "I don't know")
    classic_script = LLMScript(CLASSIC_FACTS, CLASSIC_DECISIONS, answer=lambda prompt: "Porto")
    with ScriptedOpenAI(additive_script) as additive, ScriptedOpenAI(classic_script) as classic:
        # Both apps at once: two cores, and most of each run is importing mem0.
        started = {
            "additive": (
                _start(Path(sys.executable).parent, root / "additive", additive, ADDITIVE_PLAN),
                root / "additive",
            ),
            "classic": (
                _start(legacy.parent, root / "classic", classic, CLASSIC_PLAN),
                root / "classic",
            ),
        }
        yield {name: _finish(process, folder) for name, (process, folder) in started.items()}


def _ops_by_name(run: Run) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    graphs = load_store_graphs([str(run.traces)])
    G = graphs[USER]
    named: dict[str, list[dict[str, Any]]] = {}
    for _, data in G.nodes(data=True):
        if data.get("type") == "op":
            named.setdefault(data["name"], []).append(data)
    return graphs, named


def test_additive_pipeline_app(runs: dict[str, Run]) -> None:
    run = runs["additive"]
    assert run.output["mem0ai"].startswith("2.")
    assert run.output["log"][-1]["answer"] == "I don't know"
    graphs, named = _ops_by_name(run)
    assert set(graphs) == {USER}  # every op carries the user's store
    for name in (
        "mem0.add",
        "mem0.search_existing",
        "mem0.additive_extraction",
        "mem0.dedup",
        "mem0.batch_write",
        "mem0.update",
        "mem0.delete",
        "mem0.search",
        "openai.chat.completions",
    ):
        assert name in named, name
    G = graphs[USER]
    assert any(n.startswith("mem0:") and d.get("type") == "variable" for n, d in G.nodes(data=True))
    # mem0's own LLM calls are its phases, not generate ops: the app's one answer is.
    [generate] = named["openai.chat.completions"]
    [search] = named["mem0.search"]
    assert generate["case"] == search["case"] and generate["store"] == USER

    verdict = attribute(
        run.traces,
        [
            {
                "case_id": search["case"],
                "question": "Where does Ana live?",
                "gold_answers": ["Porto"],
                "evidence_refs": [message_ref("My sister Ana lives in Porto.", store_id=USER)],
            }
        ],
    )[search["case"]]
    assert (verdict.error_type, verdict.op_name) == ("ExtractionError", "mem0.additive_extraction")


def test_classic_pipeline_app_in_the_oldest_pin(runs: dict[str, Run]) -> None:
    run = runs["classic"]
    assert run.output["mem0ai"] == "1.0.0"
    events = [
        r["event"] for entry in run.output["log"] if "results" in entry for r in entry["results"]
    ]
    assert events == ["ADD", "ADD", "DELETE", "ADD", "UPDATE"]  # the NONE returns nothing
    assert run.output["log"][-1]["answer"] == "Porto"
    _, named = _ops_by_name(run)
    for name in (
        "mem0.fact_extraction",
        "mem0.search_existing",
        "mem0.update_decision",
        "mem0.create",
    ):
        assert name in named, name
    # Decision-driven writes read their decision item; public update/delete write versions.
    updates = sorted((op["inputs"], op["outputs"]) for op in named["mem0.update"])
    assert any(i[0].startswith("decision:") for i, _ in updates)
    assert any(o[0].endswith("@3") for _, o in updates)  # the public update of Tom's record
    deletes = named["mem0.delete"]
    assert len(deletes) == 2 and all(op["outputs"] for op in deletes)
    assert len(named["openai.chat.completions"]) == 1  # mem0's own LLM calls are its phases
    # The thread pool of mem0 1.x carried the context: phases are children of their add.
    adds = {op["span_id"] for op in named["mem0.add"]}
    assert all(op["parent_span_id"] in adds for op in named["mem0.fact_extraction"])

    [search] = named["mem0.search"]
    verdict = attribute(
        run.traces,
        [
            {
                "case_id": search["case"],
                "question": "Where does Ana live now?",
                "gold_answers": ["Lisbon"],
                "evidence_refs": [message_ref("Ana moved to Lisbon last month.", store_id=USER)],
            }
        ],
    )[search["case"]]
    assert (verdict.error_type, verdict.op_name) == ("ExtractionError", "mem0.update_decision")

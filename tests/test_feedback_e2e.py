"""The production loop end to end, with real parts and no cases file (issue 17).

1. A mem0 app with no tracing code (real ``mem0ai`` 2.x, and 1.0.0 in the cached legacy
   environment) runs under ``opentelemetry-instrument`` against the scripted OpenAI-compatible
   server, exporting OTLP/HTTP to a real Jaeger v2. Five users, one planted fault each: an
   extraction loss, a wrong update, a delete, a retrieval miss and a response error. For each
   answer the app reads ``last_answer()`` (what its thumbs-down button would keep).
2. A second process (``memtrace feedback --from``) marks every answer wrong, half of them with
   the expected answer.
3. ``memtrace attribute "jaeger+http://..."`` runs with no cases file.

Capture on and capture off. Every planted fault's case must be found from the feedback alone;
its verdict must name the right label and op, or with capture off abstain honestly (no culprit,
a reason): never a confident wrong verdict.
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

from memtrace_otel.cli import main
from tests._backends import (  # noqa: F401  (fixtures)
    JaegerServer,
    http_get,
    jaeger,
    jaeger_bin,
    wait_until,
)
from tests._instrumentor_helpers import LLMScript, mem0_config
from tests._openai_server import ScriptedOpenAI

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 240

# message substring -> the facts mem0's extraction returns for it ([] plants an extraction loss)
FACTS = {
    "Ana lives in Porto": [],
    "hiking": ["User loves hiking on weekends"],
    "Bob lives in Rome": ["Bob lives in Rome"],
    "Erin's dog": ["Erin's dog is called Rex"],
    "Carla works at Siemens": ["Carla works at Siemens"],
    "I keep wondering": ["Where does Carla work?"],
    "Dan lives in Oslo": ["Dan lives in Oslo"],
}

# fault -> the user's steps, the question, the expected answer, (error type, op name by mem0 major)
SCENARIOS: dict[str, dict[str, Any]] = {
    "extraction": {
        "user": "ana",
        "adds": ["My sister Ana lives in Porto.", "I love hiking on weekends."],
        "ask": "Where does Ana live?",
        "expected": "Porto",
        "label": {
            2: ("ExtractionError", "mem0.additive_extraction"),
            1: ("ExtractionError", "mem0.fact_extraction"),
        },
    },
    "update": {
        "user": "bob",
        "adds": ["My friend Bob lives in Rome."],
        "update": ["Bob lives in Rome", "Bob lives in Madrid"],
        "ask": "Where does Bob live?",
        "expected": "Rome",
        "label": {2: ("UpdateError", "mem0.update"), 1: ("UpdateError", "mem0.update")},
    },
    "deletion": {
        "user": "erin",
        "adds": ["Erin's dog is called Rex."],
        "delete": "Erin's dog is called Rex",
        "ask": "What is Erin's dog called?",
        "expected": "Rex",
        "label": {2: ("DeletionError", "mem0.delete"), 1: ("DeletionError", "mem0.delete")},
    },
    "retrieval": {
        "user": "carla",
        # the distractor has the question's very words: with one hit, it wins the search
        "adds": ["Carla works at Siemens.", "I keep wondering: where does Carla work?"],
        "ask": "Where does Carla work?",
        "limit": 1,
        "expected": "Siemens",
        "label": {2: ("RetrievalError", "mem0.search"), 1: ("RetrievalError", "mem0.search")},
    },
    "response": {
        "user": "dan",
        "adds": ["Dan lives in Oslo."],
        "ask": "Where does Dan live?",
        "expected": "Oslo",
        "label": {
            2: ("ResponseError", "openai.chat.completions"),
            1: ("ResponseError", "openai.chat.completions"),
        },
    },
}


def _answer(prompt: str) -> str:
    """The app's LLM: wrong where planted, else it repeats what the memories say."""
    if "Where does Dan live?" in prompt:
        return "Dan lives in Paris"  # planted: the memory said Oslo
    if "Where does Bob live?" in prompt and "Madrid" in prompt:
        return "Bob lives in Madrid"
    return "I don't know"


APP = '''"""A mem0 app with no tracing code; after each answer it keeps last_answer() for feedback."""
import json
import os
from importlib.metadata import version

import openai
from mem0 import Memory

from memtrace_otel.instrumentation import last_answer

scenarios = json.loads(os.environ["APP_SCENARIOS"])
memory = Memory.from_config(json.loads(os.environ["APP_MEM0_CONFIG"]))
client = openai.OpenAI(base_url=os.environ["APP_OPENAI_BASE_URL"], api_key="sk-test", max_retries=0)
major = int(version("mem0ai").split(".")[0])
out = {"mem0ai": version("mem0ai"), "answers": {}}
for fault, s in scenarios.items():
    user, ids = s["user"], {}
    for text in s["adds"]:
        for r in memory.add(text, user_id=user)["results"]:
            if r.get("event") == "ADD":
                ids[r.get("memory") or r.get("text")] = r["id"]
    if "update" in s:
        old, new = s["update"]
        memory.update(ids[old], new)
    if "delete" in s:
        memory.delete(ids[s["delete"]])
    limit = s.get("limit", 10)
    if major < 2:
        hits = memory.search(s["ask"], user_id=user, limit=limit)
    else:
        hits = memory.search(s["ask"], filters={"user_id": user}, top_k=limit)
    memories = "\\n".join("- " + h["memory"] for h in hits["results"])
    reply = client.chat.completions.create(
        model="gpt-4.1-mini",
        messages=[
            {"role": "system", "content": "Answer from these memories:\\n" + memories},
            {"role": "user", "content": s["ask"]},
        ],
    )
    answer = last_answer()
    out["answers"][fault] = {
        "answer": reply.choices[0].message.content,
        "memories": memories,
        "case_id": answer.case_id,
        "traceparent": answer.traceparent,
    }
print(json.dumps(out))
'''


@dataclass
class Run:
    name: str
    major: int
    capture: bool
    service: str
    output: dict[str, Any]


def _legacy_python() -> Path | None:
    """The cached mem0 1.0.0 environment (``scripts/mem0_legacy_env.sh``), or None."""
    script = REPO / "scripts" / "mem0_legacy_env.sh"
    done = subprocess.run(
        ["bash", str(script), sys.executable], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"could not create the mem0 1.x environment:\n{done.stderr[-2000:]}")
        return None
    return Path(done.stdout.strip().splitlines()[-1])


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "MEMTRACE_", "PYTEST_")) and k != "PYTHONPATH"
    }


def _start_app(
    python_dir: Path,
    folder: Path,
    server: ScriptedOpenAI,
    jaeger: JaegerServer,  # noqa: F811
    service: str,
    capture: bool,
) -> subprocess.Popen[str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(APP)
    env = _clean_env()
    env.update(
        {
            "PATH": f"{python_dir}{os.pathsep}{env.get('PATH', '')}",
            "OTEL_SERVICE_NAME": service,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_http_url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            # capture on: everything, through the upstream variable; off: its default
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": (
                "SPAN_AND_EVENT" if capture else "NO_CONTENT"
            ),
            "MEMTRACE_INTERNAL_ERRORS": "raise",
            "MEM0_TELEMETRY": "false",
            # Its own mem0 home: two apps start at once, and mem0 clears the local qdrant folder
            # of its home at start (shutil.rmtree), so a shared ~/.mem0 raced (FileNotFoundError).
            "MEM0_DIR": str(folder / "mem0-home"),
            "APP_SCENARIOS": json.dumps(
                {f: {k: v for k, v in s.items() if k != "label"} for f, s in SCENARIOS.items()}
            ),
            "APP_MEM0_CONFIG": json.dumps(mem0_config(server.base_url, folder)),
            "APP_OPENAI_BASE_URL": server.base_url,
        }
    )
    instrument = Path(sys.executable).parent / "opentelemetry-instrument"
    return subprocess.Popen(
        [str(instrument), "python", str(folder / "app.py")],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _spans_of(jaeger: JaegerServer, trace_id: str) -> list[dict[str, Any]]:  # noqa: F811
    body = jaeger.get_trace_v3(trace_id) or {}
    return [
        span
        for rs in body.get("result", {}).get("resourceSpans", [])
        for ss in rs.get("scopeSpans", [])
        for span in ss.get("spans", [])
    ]


def _send_feedback(
    runs: list[Run],
    jaeger: JaegerServer,  # noqa: F811
    folder: Path,
) -> None:
    """The second process: one `memtrace feedback --from` for every answer of every run."""
    lines = []
    for run in runs:
        for number, (fault, answer) in enumerate(sorted(run.output["answers"].items())):
            item: dict[str, Any] = {
                "traceparent": answer["traceparent"],
                "correct": False,
                "comment": f"wrong ({fault})",
            }
            # half with the expected answer, the other half without (alternating per run)
            if (number + run.capture) % 2 == 0:
                item["expected"] = SCENARIOS[fault]["expected"]
            lines.append(json.dumps(item))
    feedback = folder / "feedback.jsonl"
    feedback.write_text("\n".join(lines) + "\n")
    env = _clean_env()
    env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_http_url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            # the feedback service's own capture setting: expected answers are sent
            "MEMTRACE_CAPTURE_CONTENT": "SPAN_AND_EVENT",
        }
    )
    memtrace = Path(sys.executable).parent / "memtrace"
    done = subprocess.run(
        [str(memtrace), "feedback", "--from", str(feedback)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == len(lines)
    # every answer's trace in Jaeger now holds its feedback span
    for run in runs:
        for answer in run.output["answers"].values():
            trace_id = answer["traceparent"].split("-")[1]

            def arrived(trace_id: str = trace_id) -> bool | None:
                names = [s.get("name") for s in _spans_of(jaeger, trace_id)]
                return True if "memtrace.feedback" in names else None

            wait_until(arrived, timeout=60, interval=0.5, what=f"feedback in trace {trace_id}")


@pytest.fixture(scope="module")
def runs(
    jaeger: JaegerServer,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[Run]]:
    root = tmp_path_factory.mktemp("loop")
    plans: list[tuple[str, int, bool, Path]] = [
        ("v2-on", 2, True, Path(sys.executable).parent),
        ("v2-off", 2, False, Path(sys.executable).parent),
    ]
    legacy = _legacy_python()
    if legacy is not None:
        plans += [("v1-on", 1, True, legacy.parent), ("v1-off", 1, False, legacy.parent)]
    done: list[Run] = []
    # two at a time: two cores, and most of each run is importing mem0
    for batch in (plans[:2], plans[2:]):
        servers = [ScriptedOpenAI(LLMScript(FACTS, answer=_answer)) for _ in batch]
        started = []
        for (name, major, capture, python_dir), server in zip(batch, servers, strict=True):
            server.__enter__()
            service = f"memory-app-{name}"
            process = _start_app(python_dir, root / name, server, jaeger, service, capture)
            started.append((name, major, capture, service, process))
        try:
            for name, major, capture, service, process in started:
                stdout, stderr = process.communicate(timeout=TIMEOUT)
                assert process.returncode == 0, stderr[-4000:]
                output = json.loads(stdout.strip().splitlines()[-1])
                done.append(Run(name, major, capture, service, output))
        finally:
            for server in servers:
                server.__exit__(None, None, None)
    # the answers' traces are in Jaeger before the feedback goes out
    for run in done:
        for answer in run.output["answers"].values():
            trace_id = answer["traceparent"].split("-")[1]
            wait_until(
                lambda t=trace_id: _spans_of(jaeger, t) or None,
                timeout=60,
                interval=0.5,
                what=f"answer trace {trace_id}",
            )
    _send_feedback(done, jaeger, root)
    yield done


def _attribute(
    run: Run,
    jaeger: JaegerServer,  # noqa: F811
    folder: Path,
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    source = f"jaeger+{jaeger.query_url}?service={run.service}&lookback=1h&limit=500"
    out, report = folder / f"{run.name}.jsonl", folder / f"{run.name}-report"
    code = main(["attribute", source, "--out", str(out), "--report", str(report), "--quiet"])
    verdicts = {
        v["case_id"]: v for v in (json.loads(line) for line in out.read_text().splitlines())
    }
    summary = json.loads((report / "summary.json").read_text())
    return code, verdicts, summary


@pytest.fixture(scope="module")
def attributed(
    runs: list[Run],
    jaeger: JaegerServer,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[int, dict[str, Any], dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("verdicts")
    return {run.name: _attribute(run, jaeger, folder) for run in runs}


def _run(runs: list[Run], name: str) -> Run:
    found = [r for r in runs if r.name == name]
    if not found:
        pytest.skip(f"{name}: the mem0 1.x environment is not available")
    return found[0]


NAMES = ["v2-on", "v2-off", "v1-on", "v1-off"]


@pytest.mark.parametrize("name", NAMES)
def test_the_app_ran_with_the_planted_faults(runs: list[Run], name: str) -> None:
    run = _run(runs, name)
    assert run.output["mem0ai"].startswith(f"{run.major}.")
    answers = run.output["answers"]
    assert answers["response"]["answer"] == "Dan lives in Paris"
    assert "Oslo" in answers["response"]["memories"]
    assert answers["update"]["answer"] == "Bob lives in Madrid"
    assert "Siemens" not in answers["retrieval"]["memories"]  # the miss
    assert (
        answers["deletion"]["memories"] == "" and "Porto" not in answers["extraction"]["memories"]
    )
    # every answer got a case id with no user code: the trace id of the search that served it
    assert all(len(a["case_id"]) == 32 for a in answers.values())
    assert len({a["case_id"] for a in answers.values()}) == len(SCENARIOS)


@pytest.mark.parametrize("name", NAMES)
def test_feedback_alone_finds_every_failed_case_in_jaeger(
    runs: list[Run], attributed: dict[str, tuple[int, dict[str, Any], dict[str, Any]]], name: str
) -> None:
    run = _run(runs, name)
    code, verdicts, summary = attributed[name]
    assert code == 0, summary
    assert set(verdicts) == {a["case_id"] for a in run.output["answers"].values()}
    assert summary["cases_by_source"] == {"judge": 0, "feedback": len(SCENARIOS)}
    assert summary["feedback"]["failures"] == len(SCENARIOS)
    assert summary["feedback"]["unknown"] == []


# Combinations known to be wrong (xfail, strict: once one turns right its entry must go). None
# today: with capture on every planted fault is named (with or without the expected answer),
# with capture off every verdict abstains and says which values to capture (issue 17).
_OPEN = "attribution without gold answers / abstention with capture off (issue 17)"
KNOWN_WRONG: dict[tuple[str, str], str] = {}


def _fault_params() -> list[Any]:
    params = []
    for name in NAMES:
        for fault in sorted(SCENARIOS):
            wrong = KNOWN_WRONG.get((name, fault))
            marks = (
                [pytest.mark.xfail(strict=True, reason=f"{_OPEN}: today {wrong}")] if wrong else []
            )
            params.append(pytest.param(name, fault, marks=marks, id=f"{name}-{fault}"))
    return params


@pytest.mark.parametrize(("name", "fault"), _fault_params())
def test_each_planted_fault_is_named_or_honestly_left_open(
    runs: list[Run],
    attributed: dict[str, tuple[int, dict[str, Any], dict[str, Any]]],
    name: str,
    fault: str,
) -> None:
    run = _run(runs, name)
    _, verdicts, _ = attributed[name]
    verdict = verdicts[run.output["answers"][fault]["case_id"]]
    expected = SCENARIOS[fault]["label"][run.major]
    got = (verdict["error_type"], verdict["op_name"])
    if verdict["error_type"] is None:
        # an abstention is honest only with capture off, and says why
        assert not run.capture, f"capture on, yet no culprit: {verdict['reason']}"
        assert verdict["reason"], verdict
        return
    assert got == expected, (
        f"{name} {fault}: {got} (confidence {verdict['confidence']}): {verdict['reason']}"
    )

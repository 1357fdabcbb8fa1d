"""What the three auto-instrumentors share: packaging, discovery, patching, prompt matching."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import wrapt
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.instrumentors import declare_prompt, message_ref
from memtrace_otel.instrumentors._common import (
    Patcher,
    Retrieval,
    Retrieved,
    Target,
    forget_prompts,
    normalise,
    prompt_for,
)
from memtrace_otel.instrumentors.langgraph.package import _instruments as langgraph_instruments
from memtrace_otel.instrumentors.mem0.package import _instruments as mem0_instruments
from memtrace_otel.instrumentors.openai.package import _instruments as openai_instruments
from memtrace_otel.instrumentors.openai.patch import used_records

REPO = Path(__file__).resolve().parents[1]
INSTRUMENTORS = {
    "memtrace_mem0": ("mem0", mem0_instruments, "mem0"),
    "memtrace_openai": ("openai", openai_instruments, "openai"),
    "memtrace_langgraph": ("langgraph", langgraph_instruments, "langgraph"),
}


def test_instruments_match_the_pyproject_extras() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for extra, instruments, _ in INSTRUMENTORS.values():
        assert sorted(extras[extra]) == sorted(instruments), extra
    entry_points = project["entry-points"]["opentelemetry_instrumentor"]
    assert set(entry_points) == set(INSTRUMENTORS)
    # No "instruments" extra: opentelemetry-instrument would require all three libraries at once.
    assert "instruments" not in extras


def test_discovery_imports_none_of_the_libraries() -> None:
    code = """
import json, sys
from importlib.metadata import entry_points
found = {}
for ep in entry_points(group="opentelemetry_instrumentor"):
    if ep.name.startswith("memtrace_"):
        found[ep.name] = list(ep.load()().instrumentation_dependencies())
libraries = [m for m in sys.modules if m.split(".")[0] in ("mem0", "openai", "langgraph", "qdrant_client")]
print(json.dumps({"found": found, "imported": libraries}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result["imported"] == []
    assert result["found"] == {name: list(spec[1]) for name, spec in INSTRUMENTORS.items()}


def test_file_exporter_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import entry_points

    [ep] = [
        e for e in entry_points(group="opentelemetry_traces_exporter") if e.name == "memtrace_file"
    ]
    path = tmp_path / "spans.jsonl"
    monkeypatch.setenv("MEMTRACE_TRACES_FILE", str(path))
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ep.load()()))
    with provider.get_tracer("t").start_as_current_span("hello"):
        pass
    provider.shutdown()
    [line] = path.read_text().splitlines()
    assert json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "hello"


def test_patcher_waits_for_the_import_and_undoes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "late_library.py").write_text(
        "class Client:\n    def call(self, x):\n        return x * 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[Any] = []

    def factory(target: Target) -> Any:
        def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            seen.append(args)
            return wrapped(*args, **kwargs) + 1

        return wrapper

    patcher = Patcher(
        [Target("late_library", "Client.call", "call"), Target("late_library", "Client.gone", "x")],
        factory,
    )
    patcher.apply()
    assert "late_library" not in sys.modules  # nothing imported by us
    module = importlib.import_module("late_library")
    try:
        assert isinstance(module.Client.__dict__["call"], wrapt.FunctionWrapper)
        assert module.Client().call(3) == 7 and seen == [(3,)]
        patcher.undo()
        assert module.Client().call(3) == 6
        patcher.apply()  # again: the module is already imported, so it patches at once
        assert module.Client().call(3) == 7
    finally:
        patcher.undo()
        sys.modules.pop("late_library", None)


def test_prompt_templates() -> None:
    template = declare_prompt(
        "prompt:answer", "Use only these memories:\n{memories}\nAnswer the question: {question}"
    )
    try:
        prompt = normalise(
            "Use only these   memories:\n- Ana lives in Porto\nAnswer the question: where?"
        )
        assert prompt_for(prompt) == template
        assert (
            prompt_for(normalise("Answer the question: where? Use only these memories:")) is None
        )  # order
        with pytest.raises(ValueError, match="no fixed text"):
            declare_prompt("prompt:empty", "{a} {b}")
        with pytest.raises(ValueError):
            declare_prompt("", "Use only these memories: {m}")
    finally:
        forget_prompts()


def test_used_records_match_exact_and_reformatted_text() -> None:
    retrieval = Retrieval(
        1,
        "dana",
        "q1",
        (
            Retrieved("m:1@1", "Ana lives in Porto"),
            Retrieved("m:2@3", "User loves hiking in the Alps on weekends"),
            Retrieved("m:3@1", "User has a cat"),
        ),
    )
    prompt = normalise(
        "Memories: ana LIVES in porto. On weekends, user loves hiking in the alps\nQ?"
    )
    used, source = used_records(prompt, [retrieval])
    assert [r.ref for r in used] == ["m:1@1", "m:2@3"] and source is retrieval


def test_message_refs_are_content_addressed() -> None:
    ref = message_ref("My sister Ana lives in Porto.", store_id="dana")
    assert ref == message_ref("My sister Ana lives in Porto.", store_id="dana")
    assert ref != message_ref("My sister Ana lives in Porto.", store_id="other")
    assert ref != message_ref("My sister Ana lives in Porto.", store_id="dana", role="assistant")
    assert ref.endswith("@1")


@pytest.mark.parametrize(
    ("ref", "text", "score"),
    [
        ("mem0:1@2", "Ana lives in Porto", 0.8164966052612205),
        ('mem0:ü"\\@1', 'She said "olá"\n\t\u2028 😀', 1e-07),
        (None, "no id", None),
        ("mem0:1@1", "", 1.0),
        ("mem0:1@1", None, 0.5),  # not a string: json.dumps's own path
        ("mem0:1@1", {"nested": [1, 2]}, float("nan")),
        ("mem0:1@1", "int score", 3),
        ("mem0:1@1", "surrogate \ud800", -0.0),
    ],
)
def test_candidate_json_is_the_canonical_json_of_the_entry(ref: Any, text: Any, score: Any) -> None:
    from memtrace_otel.instrumentation import canonical_value
    from memtrace_otel.instrumentors._common import candidate_json, candidates_json

    entry: dict[str, Any] = {"text": text}
    if ref is not None:
        entry["ref"] = ref
    if score is not None:
        entry["score"] = score
    assert candidate_json(ref, text, score) == canonical_value(entry)
    assert candidates_json([candidate_json(ref, text, score)] * 2) == canonical_value([entry] * 2)
    assert candidates_json([]) == canonical_value([])

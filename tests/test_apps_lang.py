"""The suite's LangGraph and LangMem apps, small, end to end (issue 29): a LangGraph memory agent
(a note-taking node that ``put`` s, a node that ``search`` es before answering, a tidy-up graph
that merges and ``delete`` s) in the project's environment, and LangMem 0.0.30's memory manager
on a LangGraph store, hot path and background, in the cached environment of
``scripts/langmem_env.sh`` (required under ``CI=true``). Each is a real program under
``opentelemetry-instrument`` against the scripted model server, which plants one question of
each role; wrong answers are flagged with ``memtrace feedback`` (every other one with
``--expected``), ``memtrace attribute`` runs with no cases file, and every planted fault must
get its label and op with ``SPAN_AND_EVENT`` capture.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memtrace_bench.apps.cli import SMALL
from memtrace_bench.apps.runner import APPS, AppRun, langmem_app, langmem_python, run_app
from memtrace_bench.apps.scenario import FAILURE_ROLES, make_world
from memtrace_otel.graph import build_graph, graph_index
from memtrace_otel.instrumentors.openai.patch import TOOL_CALLS_OP_NAME
from memtrace_otel.sources import open_source

LABELS = {"ExtractionError", "UpdateError", "DeletionError", "RetrievalError", "ResponseError"}
SEED = 1


@pytest.fixture(scope="module")
def langgraph_run(tmp_path_factory: pytest.TempPathFactory) -> AppRun:
    spec = APPS["langgraph"]
    # A folder relative to the working directory, as `memtrace bench apps`' default --out is
    # (the app runs inside the folder, so every path it gets must be absolute).
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("apps"))
    try:
        return run_app(spec, "SPAN_AND_EVENT", Path(spec.name), make_world(SEED, SMALL))
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def langmem_run(tmp_path_factory: pytest.TempPathFactory) -> AppRun:
    python = langmem_python(required=os.environ.get("CI") == "true")
    if python is None:
        pytest.skip("no LangMem environment (make langmem)")  # pragma: no cover
    spec = langmem_app(python)
    folder = tmp_path_factory.mktemp("apps") / spec.name
    return run_app(spec, "SPAN_AND_EVENT", folder, make_world(SEED, SMALL, classic=spec.classic))


def _verdicts(run: AppRun) -> dict[str, tuple[str | None, str | None]]:
    """Each failed question's role -> (error type, op) of its verdict."""
    out = {}
    for case in run.cases:
        verdict = run.verdicts.get(str(case.case_id)) or {}
        if case.label is None:  # a correct answer is never blamed
            assert not verdict.get("error_type"), (case, verdict)
            continue
        out[case.role] = (verdict.get("error_type"), verdict.get("op_name"))
    return out


def _check(run: AppRun, roles: set[str]) -> None:
    """The run's shape, and the roles whose planted fault must get its label and op."""
    failed = [c for c in run.cases if c.label is not None]
    assert {c.label for c in failed} == LABELS
    assert sum(c.expected is not None for c in failed) == (len(failed) + 1) // 2
    got = _verdicts(run)
    for case in failed:
        if case.role in roles:
            assert got[case.role] == (case.label, case.op), (case, run.verdicts[case.case_id])


def test_langgraph_app(langgraph_run: AppRun) -> None:
    run = langgraph_run
    assert not run.dropped, run.dropped  # every planted fault took effect
    assert len([c for c in run.cases if c.label]) == len(FAILURE_ROLES)
    _check(run, set(FAILURE_ROLES))


def test_langgraph_omission_without_expected(langgraph_run: AppRun) -> None:
    """An omitted extraction (the note taker kept nothing) is found without an expected answer:
    its extract op joins the user's store, though no write of its node named the store (it
    used to take no store, or the store of the search another user's request made last)."""
    [case] = [c for c in langgraph_run.cases if c.role == "omit"]
    assert case.expected is None
    assert _verdicts(langgraph_run)["omit"] == (case.label, case.op)


def test_langmem_app(langmem_run: AppRun) -> None:
    """Both of LangMem's ways to run: the first session in the hot path, the second (the
    changes, the planted merge and deletion) in the background executor."""
    run = langmem_run
    assert not run.dropped, run.dropped
    assert len([c for c in run.cases if c.label]) == len(FAILURE_ROLES)
    _check(run, set(FAILURE_ROLES))


def test_langmem_manager_reads_each_user_turn_as_a_message(langmem_run: AppRun) -> None:
    """The manager's prompt restates the conversation inside its instructions: its decision
    op reads each user turn it was given as a ``message`` of its own, with the role, and
    neither the instructions nor the assistant's replies as one; its decisions are outputs."""
    users = langmem_run.world.plan()["users"]
    said = {text for user in users for session in user["sessions"] for text in session}
    said |= {q["question"] for user in users for q in user["questions"]}
    records = open_source(langmem_run.folder / "traces.jsonl").records()
    G = build_graph(records)
    index = graph_index(G)
    deciders = [n for n, d in G.nodes(data=True) if d.get("name") == TOOL_CALLS_OP_NAME]
    assert deciders
    for op in deciders:
        messages = [v for v in index.inputs(op) if G.nodes[v].get("category") == "message"]
        assert len(messages) == 1, [G.nodes[v].get("value") for v in messages]
        [message] = messages
        assert G.nodes[message]["value"] in said
        assert (G.nodes[message].get("meta") or {}).get("role") == "user"
    assert any(index.outputs(op) for op in deciders)


def test_the_langmem_environment_script_is_wired_into_make() -> None:
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text(encoding="utf-8")
    assert "scripts/langmem_env.sh" in makefile and "langmem smartcomment" in makefile

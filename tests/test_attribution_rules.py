"""The named rules of the ``evidence`` method (``attribution/_rules.py``, issue 35).

Each test records a small pipeline through the real SDK (the ``Pipe`` of
``test_attribution_evidence``), builds the evolution graph and checks that the verdict names the
rule that decided it, with that rule's error type and op.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.attribution import Case, EvidenceMethod, Verdict, _rules
from memtrace_otel.attribution._confidence import DECIDED, FLOOR, confidence
from memtrace_otel.export import span_to_record
from memtrace_otel.graph import build_graph
from memtrace_otel.instrumentation import MemTracer, Variable
from memtrace_otel.job._scoring import production_view
from memtrace_otel.semconv import ErrorType
from tests.conftest import REPO
from tests.test_attribution_evidence import CASE, Pipe


@pytest.fixture
def pipe(memtrace_tracer: MemTracer, memtrace_exporter: InMemorySpanExporter) -> Pipe:
    return Pipe(memtrace_tracer, memtrace_exporter)


def _named(verdict: Verdict) -> tuple[str | None, str | None, str | None]:
    return verdict.rule, verdict.error_type, verdict.op_name


def _ask_leaving_out(pipe: Pipe, question: str, hit: Variable, context: str, answer: str) -> None:
    """Retrieve ``hit``, assemble a context that leaves it out, answer."""
    mt = pipe.mt
    query = mt.variable(f"query:{CASE}", question, category="query")
    with mt.retrieve("t.search", inputs=[query], case_id=CASE) as op:
        cands = op.output(
            mt.variable(
                f"cands:{CASE}", [{"ref": hit.ref, "text": hit.value}], category="candidates"
            )
        )
    with mt.assemble("t.context", inputs=[cands], case_id=CASE) as op:
        ctx = op.output(mt.variable(f"ctx:{CASE}", context, category="context"))
    with mt.generate("t.answer", inputs=[ctx, query], case_id=CASE) as op:
        op.output(mt.variable(f"pred:{CASE}", answer, category="prediction"))


# -- construction --------------------------------------------------------------------------------
def test_not_extracted(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives somewhere in Europe"))
    pipe.ask("Where does Rosa live?", [rec], "I don't know")
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg])
    assert _named(verdict) == ("not_extracted", ErrorType.EXTRACTION, "t.extract"), verdict.reason


def test_overwritten(pipe: Pipe) -> None:
    msg = pipe.message("Big news: I moved to Helsinki today!")
    rec = pipe.create(pipe.extract([msg], "Rosa moved to Helsinki on 3 February 2023"))
    rec = pipe.update(rec, "Rosa moved to Lyon on 3 February 2023", name="t.rewrite")
    pipe.ask("Where does Rosa live now?", [rec], "Lyon")
    verdict = pipe.verdict(gold=["Helsinki"], evidence=[msg])
    assert _named(verdict) == ("overwritten", ErrorType.UPDATE, "t.rewrite"), verdict.reason


def test_overwritten_by_a_none_decision(pipe: Pipe) -> None:
    msg = pipe.message("I finally settled in Philadelphia.")
    pipe.discard(pipe.extract([msg], "Rosa settled in Philadelphia"))
    pipe.ask("Which city is Rosa living in?", [], "I don't know")
    verdict = pipe.verdict(gold=["Philadelphia"], evidence=[msg])
    assert _named(verdict) == ("overwritten", ErrorType.UPDATE, "t.decide_none"), verdict.reason


def test_deleted(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    pipe.delete(rec)
    pipe.ask("Where does Rosa live?", [], "I don't know")
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg])
    assert _named(verdict) == ("deleted", ErrorType.DELETION, "t.delete"), verdict.reason


def test_dropped_before_storage(pipe: Pipe) -> None:
    # A dedupe filter while memory is written keeps nothing of the fact.
    msg = pipe.message("My friend Bob lives in Rome.")
    fact = pipe.extract([msg], "Bob lives in Rome")
    with pipe.mt.filter("t.dedup", inputs=[fact], stage="construction") as op:
        op.output(pipe.mt.variable("kept:1", [], category="other"))
    pipe.ask("Where does Bob live?", [], "I don't know")
    verdict = pipe.verdict(gold=["Rome"], evidence=[msg])
    assert _named(verdict) == ("dropped_before_storage", ErrorType.RETRIEVAL, "t.dedup"), (
        verdict.reason
    )


# -- the question's ops ----------------------------------------------------------------------------
def test_not_retrieved(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    other = pipe.message("I love hiking.")
    pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    rec2 = pipe.create(pipe.extract([other], "Rosa loves hiking"))
    pipe.ask("Where does Rosa live?", [rec2], "I don't know")
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg])
    assert _named(verdict) == ("not_retrieved", ErrorType.RETRIEVAL, "t.search"), verdict.reason
    assert verdict.confidence == round(confidence(0.95, "content"), 3)


@pytest.mark.parametrize("gold", [True, False], ids=["expected", "no-expected"])
def test_stale_read(pipe: Pipe, gold: bool) -> None:
    old = pipe.message("I live in Prague.", date="13 January 2023")
    new = pipe.message("Big news: I moved to Helsinki today!")
    rec = pipe.create(pipe.extract([old], "Rosa lives in Prague"))
    pipe.update(rec, "Rosa moved to Helsinki and lives in Helsinki", inputs=[new])
    pipe.ask("Where does Rosa live now?", [rec], "Prague")
    if gold:
        verdict = pipe.verdict(gold=["Helsinki"], evidence=[new])
    else:
        verdict = pipe.verdict(prediction="Prague")
        assert verdict.confidence == DECIDED["stale read"]
    assert _named(verdict) == ("stale_read", ErrorType.RETRIEVAL, "t.search"), verdict.reason


def test_filtered_out(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    other = pipe.message("I love hiking.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    rec2 = pipe.create(pipe.extract([other], "Rosa loves hiking"))
    pipe.ask("Where does Rosa live?", [rec, rec2], "I don't know", drop=[rec], dropped_list=True)
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg])
    assert _named(verdict) == ("filtered_out", ErrorType.RETRIEVAL, "t.rerank"), verdict.reason


def test_left_out_of_context(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    _ask_leaving_out(pipe, "Where does Rosa live?", rec, "Rosa loves hiking.", "I don't know")
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg])
    assert _named(verdict) == ("left_out_of_context", ErrorType.RESPONSE, "t.context"), (
        verdict.reason
    )


def test_answer_wrong(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    pipe.ask("Where does Rosa live?", [rec], "Vienna")
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg])
    assert _named(verdict) == ("answer_wrong", ErrorType.RESPONSE, "t.answer"), verdict.reason


# -- without an expected answer --------------------------------------------------------------------
def test_declined_with_answer_in_context(pipe: Pipe) -> None:
    msg = pipe.message("These days I rent a flat in Ljubljana.")
    rec = pipe.create(pipe.extract([msg], "Rosa rents a flat in Ljubljana"))
    pipe.ask("Where does Rosa rent a flat?", [rec], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    assert _named(verdict) == (
        "declined_with_answer_in_context",
        ErrorType.RESPONSE,
        "t.answer",
    ), verdict.reason
    assert 0.1 <= verdict.confidence <= 0.3


def test_invented(pipe: Pipe) -> None:
    msg = pipe.message("I love hiking in the Alps.")
    rec = pipe.create(pipe.extract([msg], "Rosa loves hiking in the Alps"))
    pipe.ask("What is the name of the dentist Rosa sees?", [rec], "Dr. Novak")
    verdict = pipe.verdict(prediction="Dr. Novak")
    assert _named(verdict) == ("invented", ErrorType.RESPONSE, "t.answer"), verdict.reason
    assert verdict.confidence == DECIDED["invented"]


def test_an_abstention_names_no_rule(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    pipe.ask("Where does Rosa live?", [rec], "I don't know")
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg], capture=False)
    assert (verdict.error_type, verdict.rule) == (None, None), verdict.reason


# -- the rules' table and the confidence function ------------------------------------------------
def test_each_rule_says_when_it_fires_and_yields_its_label() -> None:
    tree = ast.parse(Path(_rules.__file__).read_text(encoding="utf-8"))
    rules = [n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    names = {r.name for r in rules}
    assert {"not_retrieved", "stale_read", "filtered_out", "left_out_of_context"} <= names
    for rule in rules:
        assert ast.get_docstring(rule), f"{rule.name} says nowhere when it fires"
    # Searching for RetrievalError lands on the rules that yield it.
    retrieval = {
        r.name for r in rules if any(ast.unparse(n) == "ErrorType.RETRIEVAL" for n in ast.walk(r))
    }
    assert retrieval == {"not_retrieved", "stale_read", "filtered_out", "dropped_before_storage"}


def test_no_other_attribution_module_names_a_label_of_its_own() -> None:
    # The evidence method's labels come from the rules only.
    text = (REPO / "memtrace_otel" / "attribution" / "_evidence.py").read_text(encoding="utf-8")
    assert "ErrorType." not in text


@pytest.mark.parametrize(
    ("found", "decided", "flags", "expected"),
    [
        (0.95, "content", {}, 0.9025),
        (0.9, "structure", {"missing_traces": True}, 0.9 * 0.85 - 0.2),
        (0.8, "default", {"searched": True}, 0.8 * 0.85 * 0.6),
        (0.95, "structure", {"unseen_upstream": True}, 0.3),
        (0.31, "default", {"searched": True, "missing_traces": True}, FLOOR),
        (1.0, "stale read", {"missing_traces": True}, 0.7),  # nothing followed: no penalty
        (0.8, "declined", {}, 0.8 * 0.35),
    ],
)
def test_confidence(found: float, decided: str, flags: dict[str, bool], expected: float) -> None:
    assert confidence(found, decided, **flags) == pytest.approx(expected)


# -- judged from what was captured (issue 30) ----------------------------------------------------
def _verdict_without(pipe: Pipe, uncaptured: Sequence[Variable], **case: Any) -> Verdict:
    """The verdict when the values of ``uncaptured`` were not captured (the rest were)."""
    records = [span_to_record(s) for s in pipe.exporter.get_finished_spans()]
    G = production_view(build_graph(records), capture=True, judges=True)
    for var in uncaptured:
        G.nodes[var.ref].pop("value", None)
    return EvidenceMethod().attribute(G, Case(CASE, **case))


def test_a_stored_record_that_holds_the_evidence_settles_an_unseen_fact_before_it(
    pipe: Pipe,
) -> None:
    # The fact between the message and the record was not captured; the record was, and holds
    # the answer: it was stored, and the retrieve missed it.
    msg = pipe.message("I live in Prague.")
    other = pipe.message("I love hiking.")
    fact = pipe.extract([msg], "Rosa lives in Prague")
    pipe.create(fact)
    rec2 = pipe.create(pipe.extract([other], "Rosa loves hiking"))
    pipe.ask("Where does Rosa live?", [rec2], "I don't know")
    verdict = _verdict_without(pipe, [fact], gold_answers=("Prague",), evidence_refs=(msg.ref,))
    assert _named(verdict) == ("not_retrieved", ErrorType.RETRIEVAL, "t.search"), verdict.reason
    assert f"value of {fact.ref}" in verdict.unchecked


def test_an_update_that_read_the_seen_fact_and_wrote_a_record_without_it_is_blamed(
    pipe: Pipe,
) -> None:
    # mem0 1.x: a decision (its output not captured) beside the fact, then the update that wrote
    # the record. The update read the fact, seen to hold the answer, and wrote a captured record
    # that does not: the unseen decision cannot have lost it before the update.
    old = pipe.message("I work as a nurse.", date="13 January 2023")
    msg = pipe.message("Big news: I moved to Helsinki today!")
    rec = pipe.create(pipe.extract([old], "Rosa works as a nurse"))
    fact = pipe.extract([msg], "Rosa moved to Helsinki")
    mt = pipe.mt
    with mt.extract("t.decide", inputs=[fact, rec]) as op:
        decision = op.output(mt.variable("decision:1", '{"event": "UPDATE"}', category="other"))
    pipe.update(rec, "Rosa works as a nurse in Lyon", name="mem0.update", inputs=[fact, decision])
    pipe.ask("Which city did Rosa move to?", [rec], "Lyon")
    verdict = _verdict_without(
        pipe, [decision], gold_answers=("Helsinki",), evidence_refs=(msg.ref,)
    )
    assert _named(verdict) == ("overwritten", ErrorType.UPDATE, "mem0.update"), verdict.reason
    assert f"value of {decision.ref}" in verdict.unchecked


def test_an_unseen_value_the_captured_ones_do_not_settle_still_abstains(pipe: Pipe) -> None:
    # The record was not captured: whether it held the answer, only its content could tell.
    msg = pipe.message("I live in Prague.")
    other = pipe.message("I love hiking.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    rec2 = pipe.create(pipe.extract([other], "Rosa loves hiking"))
    pipe.ask("Where does Rosa live?", [rec2], "I don't know")
    verdict = _verdict_without(pipe, [rec], gold_answers=("Prague",), evidence_refs=(msg.ref,))
    assert verdict.error_type is None, verdict.reason


def test_left_out_of_context_without_an_expected_answer_is_a_weak_clue(pipe: Pipe) -> None:
    # Found by the question alone, the carrier's key is guessed from the message's words: a
    # context line that words the fact otherwise looks the same as a loss. Not above 0.3.
    msg = pipe.message("These days I rent a flat in Ljubljana.")
    pipe.message("Rosa loves hiking in the hills.")
    rec = pipe.create(pipe.extract([msg], "Rosa rents a flat in Ljubljana"))
    _ask_leaving_out(pipe, "Where does Rosa rent a flat?", rec, "Rosa loves hiking.", "Vienna")
    verdict = pipe.verdict(prediction="Vienna")
    assert _named(verdict) == ("left_out_of_context", ErrorType.RESPONSE, "t.context"), (
        verdict.reason
    )
    assert 0.1 <= verdict.confidence <= 0.3, verdict.confidence

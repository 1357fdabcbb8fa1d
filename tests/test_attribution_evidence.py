"""The ``evidence`` method on the failure modes realistic traces showed (issues 17 and 18).

Each test records a small pipeline through the real SDK (the ``memtrace_tracer`` fixture), builds
the evolution graph from the spans and checks the verdict: a rewrite that swapped the city, a
memory that lost the date or the name, a paraphrased answer, a two-fact question, a filter that
lists what it dropped, content that survived on another branch, a retrieve that lists only the
query, a stale read; then the same without an expected answer, and without captured values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.attribution import Case, EvidenceMethod, Verdict
from memtrace_otel.export import span_to_record
from memtrace_otel.graph import build_graph
from memtrace_otel.instrumentation import MemTracer, Variable
from memtrace_otel.job._scoring import production_view

CASE = "q1"


class Pipe:
    """A tiny memory pipeline: messages -> facts -> records, then one question."""

    def __init__(self, mt: MemTracer, exporter: InMemorySpanExporter) -> None:
        self.mt, self.exporter, self.n = mt, exporter, 0

    def message(self, text: str, date: str = "3 February 2023") -> Variable:
        self.n += 1
        return self.mt.variable(
            f"msg:{self.n}", text, category="message", meta={"date": date, "speaker": "Rosa"}
        )

    def extract(
        self, sources: Sequence[Variable], text: str, *, sourced: bool = True, **meta: Any
    ) -> Variable:
        """``sourced=False``: the fact records no source refs (they are optional)."""
        self.n += 1
        with self.mt.extract("t.extract", inputs=list(sources)) as op:
            if not sourced:
                ident = f"fact:{self.n}"
                return op.output(self.mt.variable(ident, text, category="memory", meta=meta))
            return op.output(self._memory(f"fact:{self.n}", text, sources, meta))

    def create(self, fact: Variable, text: str | None = None) -> Variable:
        self.n += 1
        with self.mt.create("t.add", inputs=[fact]) as op:
            return op.output(self._memory(f"mem:{self.n}", text or fact.value, [fact], {}))

    def update(
        self,
        record: Variable,
        text: str,
        *,
        name: str = "t.update",
        inputs: Sequence[Variable] = (),
    ) -> Variable:
        with self.mt.update(name, inputs=[record, *inputs]) as op:
            return op.output(record.next(text))

    def delete(self, record: Variable) -> None:
        with self.mt.delete("t.delete", inputs=[record]) as op:
            op.output(record.tombstone())

    def discard(self, fact: Variable) -> None:
        """A NONE decision: an update op with the fact as input and no output (contract 4b)."""
        with self.mt.update("t.decide_none", inputs=[fact]):
            pass

    def ask(
        self,
        question: str,
        hits: Sequence[Variable],
        answer: str,
        *,
        searched: Sequence[Variable] | None = None,
        drop: Sequence[Variable] = (),
        dropped_list: bool = False,
    ) -> None:
        """Retrieve ``hits`` (listing ``searched`` as inputs, or only the query), filter out
        ``drop`` (recording the dropped items as an ``other`` variable when asked), assemble,
        answer."""
        mt = self.mt
        query = mt.variable(f"query:{CASE}", question, category="query")
        with mt.retrieve("t.search", inputs=[query, *(searched or ())], case_id=CASE) as op:
            cands = op.output(
                mt.variable(
                    f"cands:{CASE}",
                    [{"ref": h.ref, "text": _text(h)} for h in hits],
                    category="candidates",
                )
            )
        kept_items = [c for c in cands.value if c["ref"] not in {d.ref for d in drop}]
        with mt.filter("t.rerank", inputs=[cands], case_id=CASE) as op:
            kept = op.output(mt.variable(f"kept:{CASE}", kept_items, category="candidates"))
            outs = [kept]
            if dropped_list:
                gone = [c for c in cands.value if c not in kept_items]
                outs.append(op.output(mt.variable(f"dropped:{CASE}", gone, category="other")))
        with mt.filter("t.dedupe", inputs=outs, case_id=CASE) as op:
            final = op.output(mt.variable(f"final:{CASE}", kept_items, category="candidates"))
        with mt.assemble("t.context", inputs=[final], case_id=CASE) as op:
            text = "\n".join(c["text"] for c in kept_items)
            ctx = op.output(mt.variable(f"ctx:{CASE}", text, category="context"))
        with mt.generate("t.answer", inputs=[ctx, query], case_id=CASE) as op:
            op.output(mt.variable(f"pred:{CASE}", answer, category="prediction"))

    def verdict(
        self,
        *,
        gold: Sequence[str] = (),
        evidence: Sequence[Variable] = (),
        prediction: str | None = None,
        capture: bool = True,
    ) -> Verdict:
        records = [span_to_record(s) for s in self.exporter.get_finished_spans()]
        G = production_view(build_graph(records), capture=capture, judges=True)
        case = Case(
            CASE,
            gold_answers=tuple(gold),
            evidence_refs=tuple(v.ref for v in evidence),
            prediction=prediction,
        )
        return EvidenceMethod().attribute(G, case)

    def _memory(
        self, ident: str, text: str, sources: Sequence[Variable], meta: dict[str, Any]
    ) -> Variable:
        refs = [r for s in sources for r in (s.meta or {}).get("source_refs", [s.ref])]
        return self.mt.variable(ident, text, category="memory", meta={"source_refs": refs, **meta})


def _text(var: Variable) -> str:
    return str(var.value)


@pytest.fixture
def pipe(memtrace_tracer: MemTracer, memtrace_exporter: InMemorySpanExporter) -> Pipe:
    return Pipe(memtrace_tracer, memtrace_exporter)


def _culprit(verdict: Verdict) -> tuple[str | None, str | None]:
    return verdict.error_type, verdict.op_name


# --- carriage: the answer-bearing content, not word overlap ---------------------------------------
def test_a_rewrite_that_swapped_the_city_lost_the_fact(pipe: Pipe) -> None:
    msg = pipe.message("Big news: I moved to Helsinki today!")
    rec = pipe.create(pipe.extract([msg], "Rosa moved to Helsinki on 3 February 2023"))
    rec = pipe.update(rec, "Rosa moved to Lyon on 3 February 2023", name="t.rewrite")
    pipe.ask("Where does Rosa live now?", [rec], "Lyon")
    verdict = pipe.verdict(gold=["Helsinki"], evidence=[msg])
    assert _culprit(verdict) == ("UpdateError", "t.rewrite"), verdict.reason
    assert verdict.confidence >= 0.8


def test_a_memory_that_lost_the_date_lost_the_answer(pipe: Pipe) -> None:
    msg = pipe.message("I adopted a parrot named Rex today!")
    fact = pipe.extract([msg], "Rosa adopted a parrot named Rex on 3 February 2023")
    cell = pipe.create(fact)
    cell = pipe.update(cell, "Rosa adopted a parrot named Rex", name="t.memcell")
    pipe.ask("When did Rosa adopt Rex?", [cell], "I don't know")
    verdict = pipe.verdict(gold=["3 February 2023"], evidence=[msg])
    assert _culprit(verdict) == ("UpdateError", "t.memcell"), verdict.reason


def test_a_profile_that_lost_the_name_lost_the_answer(pipe: Pipe) -> None:
    msg = pipe.message("My sister's name is Eva.")
    profile = pipe.create(pipe.extract([msg], "Rosa's sister is named Eva"))
    profile = pipe.update(profile, "Rosa has a sister, named in an earlier chat", name="t.profile")
    pipe.ask("What is the name of Rosa's sister?", [profile], "I don't know")
    verdict = pipe.verdict(gold=["Eva"], evidence=[msg])
    assert _culprit(verdict) == ("UpdateError", "t.profile"), verdict.reason


def test_a_paraphrased_answer_is_followed_by_its_key_names(pipe: Pipe) -> None:
    # The expected answer's words are not in the message: its names carry it.
    msg = pipe.message("Say hi to Rex, the little bird I brought home today!")
    rec = pipe.create(pipe.extract([msg], "Rosa brought home a bird named Rex"))
    pipe.ask("What pet did Rosa get?", [rec], "I don't know")
    verdict = pipe.verdict(gold=["a parrot"], evidence=[msg])
    assert _culprit(verdict) == ("ResponseError", "t.answer"), verdict.reason


def test_an_extraction_that_drops_the_paraphrased_answers_name_lost_it(pipe: Pipe) -> None:
    msg2 = pipe.message("Say hi to Kiwi, my new furry friend!")
    rec2 = pipe.create(pipe.extract([msg2], "Rosa has a new friend"))
    pipe.ask("What pet did Rosa get?", [rec2], "I don't know")
    verdict = pipe.verdict(gold=["a rabbit"], evidence=[msg2])
    assert verdict.error_type == "ExtractionError", verdict.reason


def test_a_record_that_says_its_date_is_unknown_lost_the_date(pipe: Pipe) -> None:
    # Its stamp is the day it was written, not the day of the event.
    msg = pipe.message("I got engaged today, still buzzing!")
    fact = pipe.extract([msg], "Rosa got engaged (date not given).", date="3 February 2023")
    pipe.ask("When did Rosa get engaged?", [pipe.create(fact)], "I don't know")
    verdict = pipe.verdict(gold=["3 February 2023"], evidence=[msg])
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_a_date_on_another_line_of_the_record_does_not_date_the_event(pipe: Pipe) -> None:
    msg = pipe.message("Guess what: today I finally got my licence.")
    cell = pipe.extract(
        [msg],
        "On 3 February 2023 Rosa adopted a parrot, Rex.\nRosa passed the driving test recently.",
        date="3 February 2023",
    )
    pipe.ask("When did Rosa pass the driving test?", [pipe.create(cell)], "I don't know")
    verdict = pipe.verdict(gold=["3 February 2023"], evidence=[msg])
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_a_dated_line_must_name_the_event_by_two_of_its_words(pipe: Pipe) -> None:
    # "talked" meets "talk" by chance: one shared word does not make the chat line about the
    # talk at the conference, so its date does not date that event.
    msg = pipe.message("I gave a talk at a conference today!")
    cell = pipe.extract(
        [msg],
        "On 3 February 2023, Rosa and Bo talked about the weekend.\n"
        "Rosa gave a talk at a conference (date not given).",
        date="3 February 2023",
    )
    pipe.ask("When did Rosa give a talk at a conference?", [pipe.create(cell)], "I don't know")
    verdict = pipe.verdict(gold=["3 February 2023"], evidence=[msg])
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_a_reworded_fact_without_source_refs_is_followed_from_what_its_op_read(
    pipe: Pipe,
) -> None:
    # Source refs are optional: the fact shares no word with the message but the answer, and
    # its extraction read the message, so the NONE decision that discarded it lost the answer.
    msg = pipe.message("I finally settled in Philadelphia, signed the lease and everything.")
    fact = pipe.extract([msg], "Rosa relocated to Philadelphia.", sourced=False)
    pipe.discard(fact)
    pipe.ask("Which city is Rosa living in these days?", [], "I don't know")
    verdict = pipe.verdict(gold=["Philadelphia"], evidence=[msg])
    assert _culprit(verdict) == ("UpdateError", "t.decide_none"), verdict.reason


# --- paths: every fact, every branch --------------------------------------------------------------
def test_a_two_fact_question_follows_the_link_fact(pipe: Pipe) -> None:
    link = pipe.message("I changed teams: I am on the data team now.")
    lead = pipe.message("The data team is led by Maria.")
    rec_link = pipe.create(pipe.extract([link], "Rosa is on the data team"))
    rec_lead = pipe.create(pipe.extract([lead], "The data team is led by Maria"))
    rec_link = pipe.update(rec_link, "Rosa works at Acme", name="t.merge")
    pipe.ask("What is the name of Rosa's boss?", [rec_link, rec_lead], "I don't know")
    verdict = pipe.verdict(gold=["Maria"], evidence=[link, lead])
    # The answer-bearing fact reached the context; the link was lost first, in the merge.
    assert _culprit(verdict) == ("UpdateError", "t.merge"), verdict.reason


def test_content_that_survived_on_another_branch_is_not_lost_there(pipe: Pipe) -> None:
    msg = pipe.message("I'm allergic to penicillin.")
    mt = pipe.mt
    with mt.update("t.buffer_append", inputs=[msg]) as op:
        buffer = op.output(mt.variable("buffer:1", msg.value, category="memory"))
    chunk = pipe.extract([buffer], "I'm allergic to penicillin.")
    pipe.update(buffer, "", name="t.buffer_reset")  # after the chunk took the content
    rec = pipe.create(chunk)
    pipe.delete(rec)
    pipe.ask("What is Rosa allergic to?", [], "I don't know")
    verdict = pipe.verdict(gold=["penicillin"], evidence=[msg])
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason


def test_a_chunk_without_source_refs_took_the_buffer_before_its_reset(pipe: Pipe) -> None:
    # The chunk records no source refs: it read the buffer, so it was the one meant to carry
    # the content on; the reset afterwards is by design.
    greeting = pipe.message("Hello there!")
    msg = pipe.message("I'm allergic to penicillin.")
    mt = pipe.mt
    with mt.update("t.buffer_append", inputs=[greeting, msg]) as op:
        text = f"{greeting.value}\n{msg.value}"
        buffer = op.output(mt.variable("buffer:1", text, category="memory"))
    chunk = pipe.extract([buffer], "Hello there!", sourced=False)  # dropped the line
    pipe.update(buffer, "", name="t.buffer_reset")
    pipe.ask("What is Rosa allergic to?", [pipe.create(chunk)], "I don't know")
    verdict = pipe.verdict(gold=["penicillin"], evidence=[msg])
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


CHAT = [
    "Hey, long time no talk! How have you been since the trip to the lake last spring?",
    "Work has been hectic, but the weekend hikes with the dog keep me sane and happy.",
    "My brother keeps sending pictures of his garden; the tomatoes are huge this year.",
    "We should plan a board game night soon, maybe with the neighbours from upstairs.",
    "The bakery on the corner finally reopened; their cinnamon rolls are worth the queue.",
    "I started reading that mystery novel you recommended, the detective is hilarious.",
]


def _window(pipe: Pipe, name: str, lines: Sequence[str], inputs: Sequence[Variable]) -> Variable:
    """A long window (a rolling context, a summary) written from ``inputs``, without source
    refs."""
    with pipe.mt.update(name, inputs=list(inputs)) as op:
        return op.output(pipe.mt.variable("window:1", "\n".join(lines), category="memory"))


def test_a_summary_that_resolved_a_paraphrase_carries_the_answer(pipe: Pipe) -> None:
    # "Motor City" became "Detroit" in a summary that records no source refs: nothing else the
    # summary read says Detroit, so its line can only have come from the evidence.
    msg = pipe.message("I finally settled in Motor City, signed the lease and everything.")
    window = _window(pipe, "t.append", [*CHAT, f"Rosa: {msg.value}"], [msg])
    with pipe.mt.update("t.summarize", inputs=[window]) as op:
        summary = op.output(window.next("\n".join(["Rosa has lived in Detroit since May.", *CHAT])))
    pipe.ask("Which city is Rosa living in these days?", [summary], "Seattle")
    verdict = pipe.verdict(gold=["Detroit"], evidence=[msg])
    assert _culprit(verdict) == ("ResponseError", "t.answer"), verdict.reason


def test_a_context_copying_the_answer_from_its_one_source_carries_it(pipe: Pipe) -> None:
    # The assembled context records no source refs and rewords nothing: the record's line in it
    # shares no word with the message but the answer, which only the record held.
    msg = pipe.message("After years of talking about it I'm officially a Rome resident.")
    rec = pipe.create(pipe.extract([msg], "Rosa has lived in Rome since 20 April 2022."))
    others = [pipe.create(pipe.extract([pipe.message(c)], c)) for c in CHAT]
    pipe.ask("What city did Rosa move to?", [*others, rec], "Lisbon")
    verdict = pipe.verdict(gold=["Rome"], evidence=[msg])
    assert _culprit(verdict) == ("ResponseError", "t.answer"), verdict.reason


def test_a_context_copying_a_carrying_line_carries_it_beside_another_mention(pipe: Pipe) -> None:
    # Another record also says Rome, so the answer had two sources; the context's line is a
    # copy of the one that carried the evidence.
    msg = pipe.message("After years of talking about it I'm officially a Rome resident.")
    rec = pipe.create(pipe.extract([msg], "Rosa has lived in Rome since 20 April 2022."))
    trip = pipe.message("As a kid I once spent a rainy week visiting Rome with my aunt.")
    other = pipe.create(pipe.extract([trip], "Rosa visited Rome as a child."))
    others = [pipe.create(pipe.extract([pipe.message(c)], c)) for c in CHAT]
    pipe.ask("What city did Rosa move to?", [*others, other, rec], "Lisbon")
    verdict = pipe.verdict(gold=["Rome"], evidence=[msg])
    assert _culprit(verdict) == ("ResponseError", "t.answer"), verdict.reason


def test_a_window_naming_the_evidence_carries_it_only_in_a_line_about_it(pipe: Pipe) -> None:
    # The window lists the message among its sources, and it mentions Boston twice: after the
    # rewrite that swapped the city, the other mention is not the evidence.
    msg = pipe.message("Guess who lives in Boston now? Me!")
    later = pipe.message("I'll let you know when I'm in Boston again. See you soon!")
    mt = pipe.mt
    refs = {"source_refs": [msg.ref, later.ref]}
    with mt.update("t.append", inputs=[msg, later]) as op:
        text = "\n".join([*CHAT, f"Rosa: {msg.value}", f"Rosa: {later.value}"])
        window = op.output(mt.variable("window:1", text, category="memory", meta=refs))
    with mt.update("t.summarize", inputs=[window]) as op:
        text = "\n".join(["Rosa has lived in Rome since 31 August.", *CHAT, f"Rosa: {later.value}"])
        window = op.output(window.next(text))
    pipe.ask("Where does Rosa live now?", [window], "Rome")
    verdict = pipe.verdict(gold=["Boston"], evidence=[msg])
    assert _culprit(verdict) == ("UpdateError", "t.summarize"), verdict.reason


# --- retrieval: filters by what they keep, searchable records, stale versions ------------------
def test_a_filter_that_lists_what_it_dropped_is_the_culprit(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    other = pipe.message("I love hiking.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    rec2 = pipe.create(pipe.extract([other], "Rosa loves hiking"))
    pipe.ask("Where does Rosa live?", [rec, rec2], "I don't know", drop=[rec], dropped_list=True)
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg])
    assert _culprit(verdict) == ("RetrievalError", "t.rerank"), verdict.reason


def test_a_retrieve_listing_only_the_query_still_searched_the_store(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    other = pipe.message("I love hiking.")
    pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    rec2 = pipe.create(pipe.extract([other], "Rosa loves hiking"))
    pipe.ask("Where does Rosa live?", [rec2], "I don't know", searched=None)
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg])
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


def test_a_stale_version_read_blames_the_retrieve(pipe: Pipe) -> None:
    old = pipe.message("I live in Prague.", date="13 January 2023")
    new = pipe.message("Big news: I moved to Helsinki today!")
    rec = pipe.create(pipe.extract([old], "Rosa lives in Prague"))
    stale = rec
    pipe.update(rec, "Rosa moved to Helsinki and lives in Helsinki", inputs=[new])
    pipe.ask("Where does Rosa live now?", [stale], "Prague")
    verdict = pipe.verdict(gold=["Helsinki"], evidence=[new])
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason
    assert "stale" in verdict.reason


# --- without an expected answer: the wrong answer is the clue -----------------------------------
def test_without_gold_the_wrong_answer_leads_to_the_discarded_fact(pipe: Pipe) -> None:
    old = pipe.message("I live in Prague.", date="13 January 2023")
    new = pipe.message("Big news: I moved to Helsinki today!")
    rec = pipe.create(pipe.extract([old], "Rosa lives in Prague"))
    pipe.discard(pipe.extract([new], "Rosa moved to Helsinki"))
    pipe.ask("Which city did Rosa move to?", [rec], "Prague")
    verdict = pipe.verdict(prediction="Prague")
    assert _culprit(verdict) == ("UpdateError", "t.decide_none"), verdict.reason
    assert verdict.evidence_refs == (new.ref,)
    assert "evidence located by search, not given" in verdict.unchecked


def test_without_gold_a_declined_answer_with_the_bearing_message_in_context_blames_it(
    pipe: Pipe,
) -> None:
    msg = pipe.message("These days I rent a flat in Ljubljana.")
    rec = pipe.create(pipe.extract([msg], "Rosa rents a flat in Ljubljana"))
    pipe.ask("Where does Rosa rent a flat?", [rec], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    # The message holds a place the question does not name, it reached the context, and the
    # answer declined: the definition's ResponseError, said with a low confidence (a decline
    # says the context most likely lacked the fact: the message found may not be the one).
    assert _culprit(verdict) == ("ResponseError", "t.answer"), verdict.reason
    assert 0.1 <= verdict.confidence <= 0.3
    assert "ljubljana" in verdict.reason and "expected answer" in verdict.unchecked


def test_without_gold_a_declined_answer_with_only_a_restatement_in_context_abstains(
    pipe: Pipe,
) -> None:
    # The best match restates the question's own place: it is a link, not the answer, and no
    # other message says where she rented before: nothing to blame.
    msg = pipe.message("Finally signed the lease for my flat in Ljubljana!")
    rec = pipe.create(pipe.extract([msg], "Rosa signed a lease in Ljubljana"))
    pipe.ask("Where did Rosa rent before her flat in Ljubljana?", [rec], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    assert verdict.error_type is None and verdict.confidence == 0.0, verdict.reason


def test_without_gold_a_link_anchors_a_before_question_on_the_older_statement(
    pipe: Pipe,
) -> None:
    old = pipe.message("I've rented a tiny studio in Graz since college.", date="2 March 2022")
    other = pipe.message("Marta rents a loft in Bern.", date="9 March 2022")
    pipe.message("My cousin's name is Marta.", date="9 March 2022")
    moved = pipe.message("Signed the lease in Ljubljana, I rent there now!", date="5 May 2023")
    rec = pipe.create(pipe.extract([old], "Rosa rents a studio in Graz"))
    fact = pipe.extract([moved], "Rosa rents in Ljubljana")
    now = pipe.update(rec, "Rosa rents in Ljubljana", inputs=[fact])
    pipe.create(pipe.extract([other], "Marta rents a loft in Bern"))
    pipe.ask("Where did Rosa rent before Ljubljana?", [now], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    # Not Marta's loft (another person's), not the Ljubljana message (it restates the
    # question): the older statement, which the update overwrote.
    assert old.ref in verdict.evidence_refs and other.ref not in verdict.evidence_refs
    assert _culprit(verdict) == ("UpdateError", "t.update"), verdict.reason


def test_without_gold_a_name_a_link_introduces_is_followed_to_its_facts(pipe: Pipe) -> None:
    link = pipe.message("My manager is called Oskar.")
    fact = pipe.message("Oskar teaches a pottery class on weekends.")
    noise = pipe.message("Honestly the weekends fly by.")
    pipe.create(pipe.extract([link], "Rosa's manager is Oskar"))
    kept = pipe.create(pipe.extract([noise], "Weekends fly by"))
    pipe.discard(pipe.extract([fact], "Oskar teaches pottery on weekends"))
    pipe.ask("What does Rosa's manager teach?", [kept], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    assert set(verdict.evidence_refs) == {fact.ref, link.ref}, verdict.reason
    assert _culprit(verdict) == ("UpdateError", "t.decide_none"), verdict.reason


def test_without_gold_another_persons_statement_is_not_the_evidence(pipe: Pipe) -> None:
    mine = pipe.message("I rent a small flat in Graz.", date="2 March 2022")
    cousin = pipe.message("My cousin's name is Marta.", date="9 March 2022")
    theirs = pipe.message("Marta rents a house in Bern.", date="9 March 2022")
    pipe.create(pipe.extract([cousin], "Rosa's cousin is Marta"))
    newer = pipe.message("Moving day is over, my flat in Ljubljana is home now.", date="5 May 2023")
    old_rec = pipe.create(pipe.extract([mine], "Rosa rents a flat in Graz"))
    pipe.create(pipe.extract([theirs], "Marta rents a house in Bern"))
    pipe.create(pipe.extract([newer], "Rosa's home is a flat in Ljubljana"))
    pipe.ask("Where does Rosa rent now?", [old_rec], "Graz")
    verdict = pipe.verdict(prediction="Graz")
    # The wrong answer's source is passed over, Marta's house is about someone else: the later
    # statement of a place by the speaker superseded the old one, and it was not retrieved.
    assert verdict.evidence_refs == (newer.ref,), verdict.reason
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason
    assert verdict.confidence <= 0.5


def test_without_gold_a_time_question_keeps_a_memory_that_wrote_the_day_out(pipe: Pipe) -> None:
    msg = pipe.message(
        "Picked up my new kayak this morning, took it out today!", date="7 June 2023"
    )
    rec = pipe.create(pipe.extract([msg], "Rosa got a new kayak on 7 June 2023"))
    pipe.ask("When did Rosa get the kayak?", [rec], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    # "today" in a message of 7 June is 7 June: the memory kept it, so nothing was lost in
    # extraction; the answer declined with it in its context.
    assert _culprit(verdict) == ("ResponseError", "t.answer"), verdict.reason


def test_without_gold_an_unmatched_question_abstains(pipe: Pipe) -> None:
    msg = pipe.message("I bought a Toyota Corolla today!")
    rec = pipe.create(pipe.extract([msg], "Rosa bought a Toyota Corolla"))
    pipe.delete(rec)
    pipe.ask("Which opera does she like best?", [], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    assert verdict.error_type is None, verdict.reason


def test_without_gold_a_paraphrased_question_is_matched_by_meaning(pipe: Pipe) -> None:
    """No word of the question is in the message: the sentence model finds it (all-MiniLM-L6-v2,
    installed by `make install`), and the verdict stays unsure (meaning is a hint, not proof)."""
    pipe.message("Good morning! How was your weekend?")
    msg = pipe.message("I bought a Toyota Corolla today!")
    rec = pipe.create(pipe.extract([msg], "Rosa bought a Toyota Corolla"))
    pipe.delete(rec)
    pipe.ask("What vehicle does she use?", [], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason
    assert verdict.evidence_refs == (msg.ref,)
    assert verdict.confidence <= 0.5  # a "what" question found by meaning: a weak clue
    assert "evidence located by search, not given" in verdict.unchecked


# --- without captured values: structure where it decides, abstention elsewhere ----------------
def test_capture_off_without_evidence_abstains_and_says_what_is_missing(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    pipe.ask("Where does Rosa live?", [rec], "Lyon")
    verdict = pipe.verdict(prediction="Lyon", capture=False)
    assert verdict.error_type is None
    assert "capture" in verdict.reason and verdict.unchecked


def test_capture_off_a_tombstone_is_seen_but_not_trusted_past_unseen_values(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    pipe.delete(rec)
    pipe.ask("Where does Rosa live?", [], "I don't know")
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg], capture=False)
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason
    # the extraction's output was not seen: it may have lost the fact first
    assert verdict.confidence <= 0.3 and any("value of" in u for u in verdict.unchecked)


def test_capture_off_a_content_loss_abstains(pipe: Pipe) -> None:
    msg = pipe.message("I live in Prague.")
    rec = pipe.create(pipe.extract([msg], "Rosa lives in Prague"))
    pipe.ask("Where does Rosa live?", [rec], "I don't know")
    verdict = pipe.verdict(gold=["Prague"], evidence=[msg], capture=False)
    assert verdict.error_type is None and "not captured" in verdict.reason


def test_a_construction_filter_carries_what_it_kept(pipe: Pipe) -> None:
    # mem0 2.x: extraction -> dedup filter (its kept list, one output) -> batch write.
    msg = pipe.message("My friend Bob lives in Rome.")
    fact = pipe.extract([msg], "Bob lives in Rome")
    mt = pipe.mt
    with mt.filter("t.dedup", inputs=[fact], stage="construction") as op:
        kept = op.output(
            mt.variable("kept:1", [{"ref": fact.ref, "text": fact.value}], category="other")
        )
    rec = pipe.create(kept, "Bob lives in Rome")
    rec = pipe.update(rec, "Bob lives in Madrid")
    pipe.ask("Where does Bob live?", [rec], "Bob lives in Madrid")
    verdict = pipe.verdict(prediction="Bob lives in Madrid")
    assert _culprit(verdict) == ("UpdateError", "t.update"), verdict.reason


# --- the generated benchmarks, at a small size (full size: benchmarks/bench_attribution.py) ------
@pytest.mark.parametrize("difficulty", ["easy", "hard"])
def test_evidence_on_the_generated_benchmarks(tmp_path: Path, difficulty: str) -> None:
    from memtrace_bench.systems import (
        generate_benchmark,
        generate_hard_benchmark,
        generate_workload,
    )
    from memtrace_otel.cli import main

    if difficulty == "hard":
        generate_hard_benchmark(tmp_path, stores=20, seed=3)
    else:
        generate_benchmark(tmp_path, workload=generate_workload(4, 3), seed=3, faults="all=0.05")
    out = tmp_path / "scores.json"
    assert main(["bench", "evaluate", str(tmp_path), "--json", str(out)]) == 0
    scores = json.loads(out.read_text())["evidence"]
    overall = scores["all"]["overall"]
    assert overall["total"] >= 15
    if difficulty == "hard":
        # issue 18: error type >= 0.92 and op >= 0.88 on every system
        for system, score in scores["all"]["by_system"].items():
            assert score["total"] >= 15, system
            assert score["error_type_accuracy"] >= 0.92, (system, score)
            assert score["op_id_accuracy"] >= 0.88, (system, score)
    else:
        # a small, fault-dense easy sample (the full easy benchmark's figure, >= 0.97, is in
        # benchmarks/bench_attribution.py)
        assert overall["error_type_accuracy"] >= 0.9 and overall["op_id_accuracy"] >= 0.85
    assert scores["correct_cases_blamed"] == 0
    # Most verdicts are trusted (confidence >= 0.8), and the trusted ones are right.
    trusted = scores["production"]["trusted"]
    assert trusted["total"] * 2 >= overall["total"], trusted
    assert trusted["accuracy"] >= 0.9, trusted

    # without expected answers and values, never a confident wrong verdict
    argv = ["bench", "evaluate", str(tmp_path), "--mode", "production", "--capture", "off"]
    assert main([*argv, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["evidence"]["production"]["wrong_confidence_above_0.3"] == 0

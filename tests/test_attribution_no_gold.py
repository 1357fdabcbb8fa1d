"""The ``evidence`` method without an expected answer, on the defects real apps showed (issue 30).

Each test is a small pipeline recorded through the real SDK (the ``Pipe`` of
``test_attribution_evidence``): a declined answer, a question and its evidence in other word
forms, a question whose answer is not the date beside it, a legitimate update that followed a
later statement, a record a later step read and an overwrite replaced, and a true source that
shares words with the wrong answer; then the defects the suite of real apps showed (the
question's subject, a place as a copula's complement, a guessed key, a change statement,
instructions repeated around every turn); then the defects the hard benchmark's production
mode showed (a place after an article or over several words, a name in apposition, a place an
extraction reworded, a contraction's clitic, a statement of what holds now, the latest statement
meaning the question, a name spoken to after an interjection, a two-fact chain to the speaker's
latest statement). Every one failed on main before its fix, but three regression guards (the
simple-present change, the link to a place, and an extraction that swapped a place for one the
store names), which pass on main too.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.attribution import Case, EvidenceMethod, Verdict
from memtrace_otel.attribution._semantic import default_encoder
from memtrace_otel.attribution._text import is_non_answer
from memtrace_otel.export import span_to_record
from memtrace_otel.graph import build_graph
from memtrace_otel.instrumentation import MemTracer, Variable
from memtrace_otel.job._scoring import production_view
from tests.test_attribution_evidence import CASE, Pipe


@pytest.fixture
def pipe(memtrace_tracer: MemTracer, memtrace_exporter: InMemorySpanExporter) -> Pipe:
    return Pipe(memtrace_tracer, memtrace_exporter)


def _culprit(verdict: Verdict) -> tuple[str | None, str | None]:
    return verdict.error_type, verdict.op_name


@pytest.mark.parametrize(
    "answer",
    [
        "I don't have that information.",
        "Sorry, I do not have any details about that.",
        "I couldn't find anything about that.",
        "I have no idea.",
        "That wasn't mentioned in our conversations.",
        "I'm afraid I don't know what her role is.",
    ],
)
def test_a_declined_answer_is_read_as_a_decline(answer: str) -> None:
    assert is_non_answer(answer)


@pytest.mark.parametrize(
    "answer", ["Porto", "She has a cat named Rex.", "No, she moved to Oslo.", "None of them."]
)
def test_an_answer_is_not_read_as_a_decline(answer: str) -> None:
    assert not is_non_answer(answer)


def test_a_declined_answer_is_not_an_invention(pipe: Pipe) -> None:
    # Nothing in the store matches the question: the decline says the context lacked the fact;
    # it did not make anything up. Abstain rather than blame the answer.
    msg = pipe.message("The weather was lovely at the beach today.")
    rec = pipe.create(pipe.extract([msg], "Rosa went to the beach"))
    pipe.ask("Which instrument does Rosa's nephew play?", [rec], "I don't have that information.")
    verdict = pipe.verdict(prediction="I don't have that information.")
    assert verdict.error_type != "ResponseError", verdict.reason


def test_word_forms_and_a_weekday_find_the_evidence(pipe: Pipe) -> None:
    # "swimming" meets "swim"; a weekday is a time: the swim message bears the answer, not the
    # date of the piano lessons.
    swim = pipe.message("I'm learning to swim at last, the lessons are every Tuesday.")
    dentist = pipe.message("My piano lessons got moved to 14 March, ugh.")
    rec = pipe.create(pipe.extract([swim], "Rosa is learning to swim"))
    pipe.create(pipe.extract([dentist], "Rosa has piano lessons from 14 March"))
    pipe.ask("Which day are my swimming lessons?", [rec], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    assert verdict.evidence_refs == (swim.ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_the_answers_kind_is_not_the_date_beside_it(pipe: Pipe) -> None:
    # "What role": the role bears the answer; the opening night's date does not, so a record
    # that kept the role and dropped the date still carries the fact.
    msg = pipe.message("Hana got cast as Juliet in the school play, opening night is 12 May!")
    rec = pipe.create(pipe.extract([msg], "Hana was cast as Juliet in the school play"))
    pipe.ask("What role does Hana have in the play?", [rec], "Hana is the director.")
    verdict = pipe.verdict(prediction="Hana is the director.")
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("ResponseError", "t.answer"), verdict.reason


def test_an_update_that_followed_a_later_statement_is_not_blamed(pipe: Pipe) -> None:
    # The user said later that they eat fish again: the update followed them. The record it
    # wrote was live and not retrieved: the search is to blame, not the update.
    old = pipe.message("I went vegetarian this year, my new diet is going well.", "3 January 2023")
    new = pipe.message("I eat fish again, so I'm pescatarian now.", "5 May 2023")
    noise = pipe.message("The gym was packed tonight.", "6 May 2023")
    rec = pipe.create(pipe.extract([old], "Rosa is vegetarian"))
    pipe.update(rec, "Rosa is pescatarian", inputs=[pipe.extract([new], "Rosa is pescatarian")])
    other = pipe.create(pipe.extract([noise], "Rosa goes to the gym"))
    pipe.ask("Which diet is Rosa on?", [other], "I don't know")
    verdict = pipe.verdict(prediction="I don't know")
    assert verdict.error_type != "UpdateError", verdict.reason
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


def test_a_record_read_by_a_later_step_then_overwritten_blames_the_overwrite(pipe: Pipe) -> None:
    # mem0 2.x: a later add's extraction reads the existing records as context (no source refs
    # on what it writes); then the app's own update() overwrites the record. The record held
    # the fact until the overwrite: the overwrite lost it, not the later extraction.
    msg = pipe.message("I work as a nurse at the children's hospital.")
    rec = pipe.create(pipe.extract([msg], "Rosa works as a nurse at the children's hospital"))
    later = pipe.message("Went to a concert tonight, great band.")
    pipe.create(pipe.extract([later, rec], "Rosa went to a concert", sourced=False))
    rec = pipe.update(rec, "Rosa works at a bakery", name="t.app_update")
    pipe.ask("What is Rosa's job?", [rec], "Rosa works at a bakery.")
    verdict = pipe.verdict(prediction="Rosa works at a bakery.")
    assert _culprit(verdict) == ("UpdateError", "t.app_update"), verdict.reason


def test_the_true_source_sharing_words_with_the_wrong_answer_is_not_passed_over(
    pipe: Pipe,
) -> None:
    # The wrong answer restates the question and adds the club: the message that says the day
    # (and the club) is still the evidence; the record dropped the day.
    msg = pipe.message("Sam's cricket coaching moved to Sunday, same club as before.")
    other = pipe.message("Booked the car service for 3 June.")
    rec = pipe.create(pipe.extract([msg], "Sam has cricket coaching at the club"))
    pipe.create(pipe.extract([other], "Rosa booked a car service for 3 June"))
    wrong = "Sam goes to cricket coaching at the club."
    pipe.ask("When does Sam have cricket coaching?", [rec], wrong)
    verdict = pipe.verdict(prediction=wrong)
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


# --- PRODUCTION keeps the assembled context home: what was captured still decides ---------------
def _without_context(pipe: Pipe, prediction: str) -> Verdict:
    records = [span_to_record(s) for s in pipe.exporter.get_finished_spans()]
    G = production_view(build_graph(records))
    for _, data in G.nodes(data=True):
        if data.get("category") == "context":
            data.pop("value", None)
    return EvidenceMethod().attribute(G, Case(CASE, prediction=prediction))


def test_an_uncaptured_context_does_not_hide_a_retrieval_miss(pipe: Pipe) -> None:
    msg = pipe.message("These days I rent a flat in Ljubljana.")
    noise = pipe.message("The gym was packed tonight.")
    pipe.create(pipe.extract([msg], "Rosa rents a flat in Ljubljana"))
    other = pipe.create(pipe.extract([noise], "Rosa goes to the gym"))
    pipe.ask("Where does Rosa rent a flat?", [other], "I don't know.")
    verdict = _without_context(pipe, "I don't know.")
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


@pytest.mark.parametrize("gold", [True, False], ids=["expected", "no-expected"])
def test_a_merge_that_kept_the_old_value_is_blamed_not_the_delete_that_followed(
    pipe: Pipe, gold: bool
) -> None:
    # A clean-up job merges two notes through an LLM rewrite: update(older, merged), then
    # delete(newer). The merged text kept the old job: the merge lost the new one.
    old = pipe.message("I work as a harbour pilot.", "3 January 2023")
    new = pipe.message("New job: I retrained and work as an orthoptist now.", "5 May 2023")
    older = pipe.create(pipe.extract([old], "Rosa works as a harbour pilot"))
    newer = pipe.create(pipe.extract([new], "Rosa works as an orthoptist"))
    mt = pipe.mt
    with mt.generate("t.merge_llm", inputs=[older, newer]) as op:
        merged = op.output(
            mt.variable("merged:1", "Rosa works as a harbour pilot", category="prediction")
        )
    rec = pipe.update(older, "Rosa works as a harbour pilot", name="t.merge", inputs=[merged])
    pipe.delete(newer)
    pipe.ask("What is Rosa's job?", [rec], "Rosa is a harbour pilot.")
    verdict = pipe.verdict(
        gold=["an orthoptist"] if gold else [], prediction="Rosa is a harbour pilot."
    )
    assert _culprit(verdict) == ("UpdateError", "t.merge"), verdict.reason


@pytest.mark.parametrize("gold", [True, False], ids=["expected", "no-expected"])
def test_a_delete_after_an_unrelated_update_is_a_deletion_not_a_merge(
    pipe: Pipe, gold: bool
) -> None:
    # An LLM memory manager (LangMem's) reads every record each turn and decides operations.
    # One turn it patches the age record; a later turn it reads the records again and the
    # sport record is deleted. The patch merged nothing into anything: the deletion lost it.
    sport = pipe.message("I play hurling at weekends now.", "3 January 2023")
    age = pipe.message("I turned 29 last week.", "5 January 2023")
    later = pipe.message("The weather has been grim all week.", "9 January 2023")
    rec_sport = pipe.create(pipe.extract([sport], "Rosa plays hurling at weekends"))
    rec_age = pipe.create(pipe.extract([age], "Rosa is 28"))
    mt = pipe.mt
    with mt.extract("t.manager", inputs=[rec_sport, rec_age, age]) as op:
        patch = op.output(mt.variable("decision:1", "Rosa recently turned 29", category="other"))
    pipe.update(rec_age, "Rosa recently turned 29", inputs=[patch])
    with mt.extract("t.manager", inputs=[rec_sport, later]) as op:
        op.output(mt.variable("decision:2", {"json_doc_id": "a1"}, category="other"))
    pipe.delete(rec_sport)
    pipe.ask("Which sport does Rosa play?", [], "I don't know.")
    verdict = pipe.verdict(gold=["hurling"] if gold else [], prediction="I don't know.")
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason


def test_the_wrong_value_beside_the_right_one_is_not_what_a_carrier_must_keep(pipe: Pipe) -> None:
    # "Pickle instead of Biscotti", answered "Biscotti": the record that kept Pickle carries the
    # fact; it was stored and not retrieved.
    msg = pipe.message("My ferret answers to Pickle now instead of Biscotti.")
    noise = pipe.message("The gym was packed tonight.")
    pipe.create(pipe.extract([msg], "Rosa's ferret is called Pickle"))
    other = pipe.create(pipe.extract([noise], "Rosa goes to the gym"))
    pipe.ask("What is the name of Rosa's ferret?", [other], "The ferret is called Biscotti.")
    verdict = pipe.verdict(prediction="The ferret is called Biscotti.")
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


# --- the question's subject, the answer's kind, supersession (issue 30, the suite of real apps) -
def test_the_subjects_messages_are_told_apart_by_meaning(pipe: Pipe) -> None:
    # "Greer" is in every message about Greer and in the record of one of them: it tells none
    # apart. Among Greer's messages the one that means "a living" is the job: it was never
    # extracted.
    if default_encoder() is None:
        pytest.skip("no sentence model installed")
    classes = pipe.message("My cousin Greer enrolled in evening classes for Icelandic.")
    ferret = pipe.message("My cousin Greer brought home a ferret and named it Quasar.")
    job = pipe.message("My cousin Greer pays the rent working as a harbour pilot.")
    for text in (
        "My aunt Radomir pays the rent working as a cartographer.",
        "My landlady Dagny pays the rent working as a farrier.",
        "My running buddy Tamsin pays the rent working as a glassblower.",
    ):
        pipe.create(pipe.extract([pipe.message(text)], text))
    pipe.message("By the way, Greer celebrated turning 67 over the weekend.")
    rec = pipe.create(pipe.extract([classes], "Greer is studying Icelandic"))
    pipe.create(pipe.extract([ferret], "Greer has a ferret called Quasar"))
    pipe.extract([job], "Greer has a cousin")
    pipe.ask("What does Greer do for a living?", [rec], "I don't have that information.")
    verdict = pipe.verdict(prediction="I don't have that information.")
    assert verdict.evidence_refs == (job.ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_a_place_as_the_complement_of_the_questions_word_bears_the_answer(pipe: Pipe) -> None:
    # "home is Tbilisi" answers "which town does she call home?" though no preposition
    # stands before the place; the record that holds it was not retrieved.
    msg = pipe.message("Quick update about my running buddy Tamsin: these days home is Tbilisi.")
    noise = pipe.message("My running buddy Tamsin plays lacrosse on weekends.")
    pipe.create(pipe.extract([msg], "Tamsin lives in Tbilisi"))
    other = pipe.create(pipe.extract([noise], "Tamsin plays lacrosse"))
    pipe.ask("Which town does Tamsin call home at the moment?", [other], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


def test_the_weekday_beside_a_fact_and_its_shared_shape_are_not_what_a_carrier_keeps(
    pipe: Pipe,
) -> None:
    # "practising the bassoon every Thursday evening": the weekday is not what "which
    # instrument" asks for, and "practising every evening" is the shape another person's
    # statement shares: the record that kept the bassoon carries the fact, and it was not
    # retrieved.
    msg = pipe.message("My running buddy Tamsin has been practising the bassoon every Thursday.")
    other_msg = pipe.message("My landlady Dagny has been practising the marimba every Thursday.")
    pipe.create(pipe.extract([msg], "Tamsin is learning to play the bassoon"))
    other = pipe.create(pipe.extract([other_msg], "Dagny is learning to play the marimba"))
    pipe.ask("Which instrument has Tamsin been taking up?", [other], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


def test_the_subjects_name_is_not_what_a_carrier_must_keep(pipe: Pipe) -> None:
    # The question names Itzel, and the evidence names nothing else: a record about Itzel that
    # says another ingredient does not carry the fact; the extraction distorted it.
    msg = pipe.message("Heads up: my godson Itzel gets hives from anything with fennel in it.")
    rec = pipe.create(pipe.extract([msg], "Itzel is allergic to mango"))
    wrong = "Keep mango away from Itzel."
    pipe.ask("Which ingredient should be kept away from Itzel's plate?", [rec], wrong)
    verdict = pipe.verdict(prediction=wrong)
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def _assert_the_merge_lost_the_change(pipe: Pipe, old: Variable) -> None:
    """Kasimir's later message changes the job ``old`` stated; a merge keeps the old value and
    deletes the new record; asked without an expected answer, the wrong answer repeats the old
    value: the change statement is the evidence and the merge lost it."""
    new = pipe.message(
        "Kasimir handed in notice as a stonemason and now works as a luthier.", "9 May 2023"
    )
    older = pipe.create(pipe.extract([old], "Kasimir works as a stonemason"))
    newer = pipe.create(pipe.extract([new], "Kasimir works as a luthier"))
    mt = pipe.mt
    with mt.generate("t.merge_llm", inputs=[older, newer]) as op:
        merged = op.output(
            mt.variable("merged:1", "Kasimir works as a stonemason", category="prediction")
        )
    rec = pipe.update(older, "Kasimir works as a stonemason", name="t.merge", inputs=[merged])
    pipe.delete(newer)
    wrong = "Kasimir is a stonemason."
    pipe.ask("What does Kasimir do for a living?", [rec], wrong)
    verdict = pipe.verdict(prediction=wrong)
    assert verdict.evidence_refs == (new.ref,), verdict.reason
    assert _culprit(verdict) == ("UpdateError", "t.merge"), verdict.reason


def test_a_wrong_answer_that_repeats_an_earlier_statement_is_followed_to_the_change(
    pipe: Pipe,
) -> None:
    # A present-tense question answered with the earlier value: the later message that names
    # that value and a new one changed it. A merge kept the old value: the merge lost it.
    old = pipe.message("My landlady Kasimir pays the rent working as a stonemason.", "3 May 2023")
    pipe.message("My cousin Marit pays the rent working as a glassblower.", "3 May 2023")
    _assert_the_merge_lost_the_change(pipe, old)


def test_a_record_that_keeps_the_word_that_tells_the_fact_apart_carries_it(pipe: Pipe) -> None:
    # Nothing names the allergen: the record derived from the message kept "kiwi", the one
    # word no other message uses, and then a clean-up deleted it: the delete lost the fact.
    msg = pipe.message("Heads up: my cousin Solveig gets hives from anything with kiwi in it.")
    pipe.message("My cousin Solveig enrolled in evening classes for Basque.")
    noise = pipe.message("By the way, Solveig celebrated turning 25 over the weekend.")
    rec = pipe.create(pipe.extract([msg], "Solveig is allergic to kiwi"))
    other = pipe.create(pipe.extract([noise], "Solveig recently turned 25"))
    pipe.delete(rec)
    pipe.ask("Which ingredient should be kept away from Solveig's plate?", [other], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason


def test_a_question_in_the_simple_present_asks_for_the_latest_change(pipe: Pipe) -> None:
    # "What game keeps him busy?" is in the present tense without an auxiliary; the answer
    # repeats the earlier sport, which a later message dropped for another.
    old = pipe.message("On weekends my cousin Caetano is always out playing hurling.", "3 May 2023")
    new = pipe.message("Caetano dropped hurling for lacrosse this season.", "9 May 2023")
    pipe.create(pipe.extract([old], "Caetano plays hurling at weekends"))
    newer = pipe.create(pipe.extract([new], "Caetano plays lacrosse"))
    older_only = pipe.create(pipe.extract([old], "Caetano plays hurling"))
    wrong = "Caetano spends weekends on hurling."
    pipe.ask("What game keeps Caetano busy on Saturdays?", [older_only], wrong)
    del newer
    verdict = pipe.verdict(prediction=wrong)
    assert verdict.evidence_refs == (new.ref,), verdict.reason
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


def test_a_link_is_not_followed_to_a_name_that_stands_as_a_place(pipe: Pipe) -> None:
    # "home is Ljubljana" does not name a person whose job the question asks: the message
    # where Ljubljana is a place ("packed up in Ljubljana") is not the evidence.
    pipe.message("Quick update about my aunt Henrike: these days home is Ljubljana.")
    job = pipe.message("My aunt Henrike pays the rent working as a luthier.")
    pipe.message("Big news, Henrike packed up in Ljubljana and settled in Hobart.")
    rec = pipe.create(pipe.extract([job], "Henrike works as a luthier"))
    pipe.delete(rec)
    pipe.ask("What does Henrike do for a living?", [], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert job.ref in verdict.evidence_refs, verdict.reason
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason


_PROMPT = "\n".join(
    [
        "You maintain a long-term memory of the user's life for an assistant at home.",
        "Insert new memories, update stale ones and remove contradicted ones with tool calls.",
        "Prefer short facts about people, places, habits and preferences; avoid duplicates.",
        "Each memory should stand on its own and name the person it is about.",
        "When a fact changes, patch the memory that holds the old value instead of adding one.",
        "Remove a memory only when the user says it no longer holds, not when it is old.",
        "Keep the user's own words where they are precise; do not guess missing details.",
        "Dates, towns, jobs and names matter most: copy them exactly as the user gave them.",
        "Do not store greetings, small talk or questions the user asked the assistant.",
        "Think about what the assistant will need to know at the moment of the next chat.",
        "The conversation to consider follows between the session markers below.",
    ]
)


def test_the_instructions_every_message_repeats_do_not_hide_the_turn(pipe: Pipe) -> None:
    # A memory manager's prompt wraps each turn in the same instructions and headers, recorded
    # as the turn's message: those lines tell no message apart (and their capitalised words
    # are no one the turn speaks of); the turn that says where Ilse lives does, and the manager
    # never stored it.
    turns = [
        "On weekends my neighbour Paavo is always out playing lacrosse.",
        "Quick update about my running buddy Ilse: these days home is Tromsø.",
        "My neighbour Paavo pays the rent working as a farrier.",
        "My running buddy Ilse enrolled in evening classes for Georgian.",
    ]
    header = "=============== Human Message ==============="
    msgs = [pipe.message(f"{_PROMPT}\n<session>\n{header}\n{t}\n</session>") for t in turns]
    recs = [
        pipe.create(pipe.extract([m], t))
        for m, t in zip(msgs, turns, strict=True)
        if "Tromsø" not in t
    ]
    pipe.extract([msgs[1]], "Ilse has a running buddy")
    pipe.ask("Which town does Ilse call home at the moment?", recs[-1:], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (msgs[1].ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_a_markup_tag_around_the_turn_is_not_what_a_carrier_must_keep(pipe: Pipe) -> None:
    # Each turn sits between session tags whose ids hold numbers: they are markup, not the
    # answer. The record kept the ferret's name and a clean-up deleted it.
    turns = [
        "My neighbour Paavo brought home a ferret and named it Sprocket.",
        "On weekends my neighbour Paavo is always out playing lacrosse.",
        "My running buddy Ilse enrolled in evening classes for Georgian.",
    ]
    msgs = [
        pipe.message(f"{_PROMPT}\n<session_39716ff9-3034-{i}>\n{t}\n</session_39716ff9-3034-{i}>")
        for i, t in enumerate(turns)
    ]
    recs = [pipe.create(pipe.extract([m], t)) for m, t in zip(msgs, turns, strict=True)]
    pipe.delete(recs[0])
    question = "What is the name of the ferret that belongs to Paavo?"
    pipe.ask(question, recs[1:2], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (msgs[0].ref,), verdict.reason
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason


def test_a_later_statement_of_where_with_another_preposition_supersedes(pipe: Pipe) -> None:
    # "relocated to Tallinn", later "settled in Hobart": both say where the speaker lives,
    # with other prepositions. "Now" asks for the later one; an update lost it.
    old = pipe.message("We packed up and relocated to Tallinn for good.", "3 May 2023")
    new = pipe.message(
        "I finally settled in Hobart, signed the lease and everything.", "9 May 2023"
    )
    friend = pipe.message("Hana, an old friend of mine, has relocated to Boston.", "12 May 2023")
    older = pipe.create(pipe.extract([old], "Rosa lives in Tallinn"))
    newer = pipe.create(pipe.extract([new], "Rosa lives in Hobart"))
    hana = pipe.create(pipe.extract([friend], "Hana lives in Boston"))
    pipe.update(newer, "Rosa signed a lease")
    pipe.ask("Where does Rosa live now?", [older, hana], "Boston")
    verdict = pipe.verdict(prediction="Boston")
    assert verdict.evidence_refs == (new.ref,), verdict.reason
    assert _culprit(verdict) == ("UpdateError", "t.update"), verdict.reason


def test_a_fact_about_a_team_is_tied_to_the_speaker_by_the_teams_name(pipe: Pipe) -> None:
    # "The growth team's lead is Felix" names no one the question names: the speaker's own
    # "I switched to the growth team" ties it to them. An update lost that tie: it is to blame,
    # not the answer that declined with Felix in its context.
    pipe.message("The design team's lead is Omar, I heard he's great.")
    lead = pipe.message("The growth team's lead is Felix, I heard she's great.")
    pipe.message("Heads up, I moved over to the design team.", "3 May 2023")
    moved = pipe.message("I switched to the growth team last week, new desk and all.", "9 May 2023")
    felix = pipe.create(pipe.extract([lead], "The growth team's lead is Felix"))
    rec = pipe.create(pipe.extract([moved], "Rosa switched to the growth team"))
    pipe.update(rec, "Rosa has a new desk")
    pipe.ask("Who is Rosa's manager now?", [felix], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert moved.ref in verdict.evidence_refs, verdict.reason
    assert _culprit(verdict) == ("UpdateError", "t.update"), verdict.reason


def test_a_place_after_an_article_and_in_several_words_bears_the_answer(pipe: Pipe) -> None:
    # "in the Faroe Islands": the place follows the preposition's article and runs over two
    # capitalised words; neither is a person the message is about. The fact was not extracted.
    old = pipe.message("We moved to Tallinn back in the spring.", "3 May 2023")
    new = pipe.message("Fresh start: I live in the Faroe Islands since Monday.", "9 May 2023")
    older = pipe.create(pipe.extract([old], "Rosa lives in Tallinn"))
    pipe.extract([new], "Rosa has a fresh start")
    pipe.ask("Where does Rosa live now?", [older], "Tallinn")
    verdict = pipe.verdict(prediction="Tallinn")
    assert verdict.evidence_refs == (new.ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_a_name_set_off_before_a_possessive_is_the_name_asked_for(pipe: Pipe) -> None:
    # "Ilse, my cousin, ...": a sentence opens with the name, in apposition to "my cousin".
    named = pipe.message("Ilse, my cousin, just started at the bakery downtown.")
    pipe.message("The fence got fixed by the neighbours on Sunday.")
    rec = pipe.create(pipe.extract([named], "Rosa's cousin started at a bakery"))
    pipe.ask("What is Rosa's cousin called?", [rec], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (named.ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


@pytest.mark.parametrize(
    ("extracted", "culprit"),
    [
        # Reworded into a place no message names: the extraction kept the fact and the
        # NONE decision that followed discarded it.
        ("Rosa lives in New York City", ("UpdateError", "t.decide_none")),
        # A place the store already names (the old home): the extraction swapped it.
        ("Rosa lives in Tallinn", ("ExtractionError", "t.extract")),
    ],
)
def test_a_place_reworded_by_the_extraction_is_still_carried(
    pipe: Pipe, extracted: str, culprit: tuple[str, str]
) -> None:
    old = pipe.message("We moved to Tallinn back in the spring.", "3 May 2023")
    new = pipe.message("Something new: I finally live in Gotham, keys in hand.", "9 May 2023")
    older = pipe.create(pipe.extract([old], "Rosa lives in Tallinn"))
    pipe.discard(pipe.extract([new], extracted))
    pipe.ask("Where does Rosa live now?", [older], "Tallinn")
    verdict = pipe.verdict(prediction="Tallinn")
    assert verdict.evidence_refs == (new.ref,), verdict.reason
    assert _culprit(verdict) == culprit, verdict.reason


def test_the_clitic_of_a_contraction_ties_no_message(pipe: Pipe) -> None:
    # "I'm officially in Porto" and "I'm officially a nurse" share "I'm officially", which is
    # no phrase naming a thing: the nurse message is not tied to the question.
    nurse = pipe.message("So I'm officially a nurse now!", "3 May 2023")
    porto = pipe.message("After a long search I'm officially in Porto for good.", "9 May 2023")
    old = pipe.message("We moved to Tallinn back in the spring.", "1 May 2023")
    older = pipe.create(pipe.extract([old], "Rosa lives in Tallinn"))
    pipe.extract([nurse], "Rosa has news")
    pipe.discard(pipe.extract([porto], "Rosa lives in Porto"))
    pipe.ask("Where does Rosa live now?", [older], "Tallinn")
    verdict = pipe.verdict(prediction="Tallinn")
    assert verdict.evidence_refs == (porto.ref,), verdict.reason
    assert _culprit(verdict) == ("UpdateError", "t.decide_none"), verdict.reason


def test_a_statement_of_what_holds_now_answers_a_question_of_what_holds_now(pipe: Pipe) -> None:
    # "What does Rosa do for work now?" names no kind of answer; "I repair violins for an
    # orchestra now" shares no word with it but says, in the first person, what holds now. The
    # message that shares "work" only chats about it. The extraction lost the statement.
    chat = pipe.message("Work was hectic at the gym this week, I need a holiday.")
    now = pipe.message("I repair violins for an orchestra now.")
    pipe.extract([now], "Rosa shared an update")
    rec = pipe.create(pipe.extract([chat], "Rosa had a hectic week at the gym"))
    pipe.ask("What does Rosa do for work now?", [rec], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (now.ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_a_present_tense_question_takes_the_latest_statement_that_means_it(pipe: Pipe) -> None:
    # Two later statements of where both mean what "where does Rosa live now?" asks; the one
    # nearer in meaning ("relocated to Riga") is not the latest ("settled in Porto"): "now"
    # asks for the latest. A NONE decision discarded it.
    home = pipe.message("I live close to Tallinn, by the old harbour.", "3 May 2023")
    riga = pipe.message("We relocated to Riga for good.", "4 May 2023")
    porto = pipe.message("I finally settled in Porto.", "9 May 2023")
    friend = pipe.message("My friend Hana has relocated to Boston.", "12 May 2023")
    pipe.create(pipe.extract([home], "Rosa lives in Tallinn"))
    pipe.create(pipe.extract([riga], "Rosa lives in Riga"))
    pipe.discard(pipe.extract([porto], "Rosa lives in Porto"))
    hana = pipe.create(pipe.extract([friend], "Hana lives in Boston"))
    pipe.ask("Where does Rosa live now?", [hana], "Boston")
    verdict = pipe.verdict(prediction="Boston")
    assert verdict.evidence_refs == (porto.ref,), verdict.reason
    assert _culprit(verdict) == ("UpdateError", "t.decide_none"), verdict.reason


def test_a_name_spoken_to_after_an_interjection_is_not_the_speaker(pipe: Pipe) -> None:
    # "Yeah Rosa, and I'm in Boston now": spoken to Rosa, so its "I" is someone else, and it
    # does not supersede where Rosa said she lives. Her record was deleted.
    home = pipe.message("I live in Tallinn these days, right by the old town.", "3 May 2023")
    other = pipe.message("Yeah Rosa, and I'm in Boston now, the new flat is tiny.", "9 May 2023")
    rec = pipe.create(pipe.extract([home], "Rosa lives in Tallinn"))
    pipe.delete(rec)
    boston = pipe.create(pipe.extract([other], "Someone lives in Boston"))
    pipe.ask("Where does Rosa live now?", [boston], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (home.ref,), verdict.reason
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason


def test_the_speakers_latest_statement_ties_a_name_to_a_question_of_now(pipe: Pipe) -> None:
    # "Who does Rosa answer to these days?" shares no word with "Word is Felix heads the growth
    # guild": only the speaker's latest "I sit with the growth guild" ties Felix to her (the
    # design guild was before). An update lost that tie.
    pipe.message("Word is Omar heads the design guild.", "1 May 2023")
    felix = pipe.message("Word is Felix heads the growth guild.", "1 May 2023")
    old = pipe.message("Last spring I signed up with the design guild.", "3 May 2023")
    new = pipe.message("Since Monday I sit with the growth guild, different floor.", "9 May 2023")
    recs = [pipe.create(pipe.extract([m], m.value)) for m in (felix, old, new)]
    pipe.update(recs[2], "Rosa moved to a different floor")
    pipe.ask("Who does Rosa answer to these days?", recs[:2], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert set(verdict.evidence_refs) == {felix.ref, new.ref}, verdict.reason
    assert _culprit(verdict) == ("UpdateError", "t.update"), verdict.reason


@pytest.mark.parametrize("gold", [True, False], ids=["expected", "no-expected"])
@pytest.mark.parametrize("context", [False, True], ids=["", "records-as-context"])
def test_someone_elses_record_with_the_same_value_does_not_carry_the_fact(
    pipe: Pipe, gold: bool, context: bool
) -> None:
    # Wendeline and Osric both named their tortoise Pistachio. The search returned Osric's
    # record, not Wendeline's: the name in the answer's context is said of someone else, so
    # Wendeline's fact was stored and not retrieved (not ignored by the answer). Also when
    # the extraction of Osric's message read Wendeline's record as context (mem0 2.x): what it
    # wrote is Osric's fact, not a copy of hers.
    msg = pipe.message("My cousin Wendeline adopted a tortoise and called it Pistachio.")
    other_msg = pipe.message("My uncle Osric adopted a tortoise and called it Pistachio.")
    choir = pipe.message("My cousin Wendeline sings in a choir.")
    pipe.create(pipe.extract([choir], "Wendeline sings in a choir"))
    rec = pipe.create(pipe.extract([msg], "Wendeline has a tortoise called Pistachio"))
    read = [other_msg, rec] if context else [other_msg]
    other = pipe.create(pipe.extract(read, "Osric has a tortoise called Pistachio"))
    question = "What is the name of the tortoise that belongs to Wendeline?"
    pipe.ask(question, [other], "I don't know.")
    verdict = pipe.verdict(gold=["Pistachio"] if gold else [], prediction="I don't know.")
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


@pytest.mark.parametrize("kept", ["luthier", "cooper"], ids=["kept", "distorted"])
def test_a_new_value_someone_else_shares_is_what_a_change_statement_says(
    pipe: Pipe, kept: str
) -> None:
    # As the change statement above, but another person's statement names the new job too
    # (whatever their memory kept): "luthier" stands where the wrong answer's "stonemason"
    # stands ("working as a ..."), a value, not the shape statements share. The fact that kept
    # it carries the change. The merge kept the old value: the merge lost it.
    old = pipe.message("My landlady Kasimir pays the rent working as a stonemason.", "3 May 2023")
    marit = pipe.message("My cousin Marit pays the rent working as a luthier.", "3 May 2023")
    tuba = pipe.message("My landlady Kasimir plays the tuba in a brass band.", "4 May 2023")
    pipe.create(pipe.extract([marit], f"Marit works as a {kept}"))
    pipe.create(pipe.extract([tuba], "Kasimir plays the tuba"))
    _assert_the_merge_lost_the_change(pipe, old)


def test_the_shape_one_other_statement_shares_is_not_what_a_carrier_keeps(pipe: Pipe) -> None:
    # One other person's allergy is phrased the same way ("gets hives from anything with"):
    # the phrasing their memory did not keep is shape, not the fact. The memory manager wrote
    # the allergen (a decision of two lines), the record reached the answer, the answer
    # declined: the answer is to blame. (A regression guard: passes on main.)
    msg = pipe.message("Heads up: my aunt Ysolde gets hives from anything with sorrel in it.")
    other = pipe.message("Heads up: my uncle Osric gets hives from anything with lupin in it.")
    pipe.create(pipe.extract([other], "Osric is allergic to lupin"))
    rec = pipe.create(
        pipe.extract([msg], "Ysolde is allergic to sorrel\nMemory"), "Ysolde is allergic to sorrel"
    )
    pipe.ask("Which ingredient should be kept away from Ysolde's plate?", [rec], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("ResponseError", "t.answer"), verdict.reason


def test_a_one_word_label_beside_a_fact_is_not_a_second_statement(pipe: Pipe) -> None:
    # A memory manager's decision holds the fact and its tool's name ("Memory"). Osric's
    # allergy is phrased alike and names the same allergen (his memory kept another one), so
    # the key is every word only Ysolde's message uses: the decision that kept the allergen
    # is one statement and carries the fact, the record was not retrieved.
    msg = pipe.message("Heads up: my aunt Ysolde gets hives from anything with sorrel in it.")
    other = pipe.message("Heads up: my uncle Osric gets hives from anything with sorrel in it.")
    osric = pipe.create(pipe.extract([other], "Osric is allergic to lupin"))
    for text in ("My aunt Ysolde sings in a choir.", "My aunt Ysolde plays the tuba."):
        pipe.create(pipe.extract([pipe.message(text)], text))
    pipe.create(
        pipe.extract([msg], "Ysolde is allergic to sorrel\nMemory"), "Ysolde is allergic to sorrel"
    )
    question = "Which ingredient should be kept away from Ysolde's plate?"
    pipe.ask(question, [osric], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("RetrievalError", "t.search"), verdict.reason


def test_a_verb_another_persons_memory_keeps_is_still_the_statements_shape(pipe: Pipe) -> None:
    # "playing" is how both weekend statements are phrased; Osric's memory keeps it ("plays
    # curling"), which does not make it Wilhelmina's fact: the extraction that wrote another
    # sport lost hers. (A regression guard: passes on main.)
    msg = pipe.message("On weekends my cousin Wilhelmina is always out playing handball.")
    other = pipe.message("On weekends my uncle Osric is always out playing curling.")
    pipe.create(pipe.extract([other], "Osric plays curling at weekends"))
    rec = pipe.create(pipe.extract([msg], "Wilhelmina plays rugby at weekends"))
    wrong = "Wilhelmina spends weekends on rugby."
    pipe.ask("What game keeps Wilhelmina busy on Saturdays and Sundays?", [rec], wrong)
    verdict = pipe.verdict(prediction=wrong)
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("ExtractionError", "t.extract"), verdict.reason


def test_a_value_another_statement_shares_is_not_its_shape(pipe: Pipe) -> None:
    # Ysolde and Osric are both allergic to sorrel, said alike; Bertil's allergy fills the
    # same frame ("anything with ... in it") with another word, so "sorrel" is a value there,
    # not the shape (the relation word "aunt", in two of Ysolde's messages, is not the fact).
    # The record that kept the allergen was deleted: the delete lost the fact.
    msg = pipe.message("Heads up: my aunt Ysolde gets hives from anything with sorrel in it.")
    osric = pipe.message("Heads up: my uncle Osric gets hives from anything with sorrel in it.")
    bertil = pipe.message("Heads up: my nephew Bertil gets hives from anything with lupin in it.")
    pipe.create(pipe.extract([osric], "Osric is allergic to sorrel"))
    pipe.create(pipe.extract([bertil], "Bertil is allergic to lupin"))
    tuba = pipe.message("My aunt Ysolde plays the tuba.")
    other = pipe.create(pipe.extract([tuba], "Ysolde plays the tuba"))
    rec = pipe.create(pipe.extract([msg], "Ysolde is allergic to sorrel"))
    pipe.delete(rec)
    question = "Which ingredient should be kept away from Ysolde's plate?"
    pipe.ask(question, [other], "I don't know.")
    verdict = pipe.verdict(prediction="I don't know.")
    assert verdict.evidence_refs == (msg.ref,), verdict.reason
    assert _culprit(verdict) == ("DeletionError", "t.delete"), verdict.reason

"""The offline engine's grammar: statements -> facts, facts -> canonical sentences, answers.

This is a small rule-based reader, not a language model. It understands the statement shapes
of the synthetic workload (and their canonical third-person renderings, so extracted memories
parse back), resolves ``today``/``yesterday`` against the message date, and answers questions
about the relations it knows. Sentences it does not understand become *generic* facts (the
sentence in the third person), which the answerer can still use by word overlap: that is how
LoCoMo's free text is handled, and why paraphrases the rules miss produce real failures.

>>> facts = parse_statement("Maya", "I finally moved from Lisbon to Porto today!", "8 May 2023")
>>> [f.render() for f in facts]
['Maya moved from Lisbon to Porto on 8 May 2023 and lives in Porto']
>>> [f.render() for f in parse_statement(None, facts[0].render(), None)] == [facts[0].render()]
True
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memtrace_otel.attribution._tokens import (
    DATE_PATTERN,
    content_tokens,
    overlap,
    parse_date,
    shift_date,
)

LIVES_IN = "lives_in"
WORKS_AS = "works_as"
HAS_PET = "has_pet"
SIBLING = "sibling"
FRIEND = "friend"
HOBBY = "hobby"
FOOD = "food"
ALLERGY = "allergy"
CAR = "car"
FORGET = "forget"
GENERIC = "generic"

SINGLE_VALUED = frozenset([LIVES_IN, WORKS_AS, FOOD, CAR])
"""Relations where a new value replaces the old one (a move, a new job)."""

ABSTAIN = "I don't know."
"""What the offline answerer says when the context does not hold the answer."""

_TOPIC_WORDS = {
    ALLERGY: "being allergic",
    WORKS_AS: "work",
    CAR: "car",
    HOBBY: "hobby",
    FOOD: "favourite food",
    HAS_PET: "pet",
    LIVES_IN: "home",
}
_TOPIC_BY_WORD = {
    "allergy": ALLERGY, "allergic": ALLERGY, "allergies": ALLERGY, "job": WORKS_AS,
    "work": WORKS_AS, "car": CAR, "hobby": HOBBY, "hobbies": HOBBY, "food": FOOD,
    "pet": HAS_PET, "home": LIVES_IN, "address": LIVES_IN,
}  # fmt: skip


@dataclass(frozen=True)
class Fact:
    """One understood statement.

    Attributes:
        subject: who it is about (a name).
        relation: one of the relation constants of this module.
        value: the city, job, pet name, sibling name, ... (the whole sentence for ``generic``).
        detail: the pet's species, the employer, ``sister``/``brother``, ``friend``/``colleague``.
        previous: the old value of a move (``moved from X to Y``).
        date: the event's date (``8 May 2023``) when it was phrased as an event.
        event: phrased as an event (moved, adopted, started, bought).
    """

    subject: str
    relation: str
    value: str
    detail: str | None = None
    previous: str | None = None
    date: str | None = None
    event: bool = False

    def render(self) -> str:
        """The canonical third-person sentence (what extraction writes into memory)."""
        s, v, d = self.subject, self.value, self.detail
        on = f" on {self.date}" if self.date else ""
        if self.relation == LIVES_IN:
            if self.event:
                start = (
                    f"{s} moved from {self.previous} to {v}"
                    if self.previous
                    else f"{s} moved to {v}"
                )
                return f"{start}{on} and lives in {v}"
            return f"{s} lives in {v}"
        if self.relation == WORKS_AS:
            at = f" at {d}" if d else ""
            if self.event:
                return f"{s} started a new job as {with_article(v)}{at}{on}"
            return f"{s} works as {with_article(v)}{at}"
        if self.relation == HAS_PET:
            if self.event:
                return f"{s} adopted {with_article(d or 'pet')} named {v}{on}"
            return f"{s} has {with_article(d or 'pet')} named {v}"
        if self.relation == SIBLING:
            return f"{s}'s {d or 'sibling'} is named {v}"
        if self.relation == FRIEND:
            return f"{v} is {s}'s {d or 'friend'}"
        if self.relation == HOBBY:
            return f"{s} enjoys {v}"
        if self.relation == FOOD:
            return f"{s}'s favourite food is {v}"
        if self.relation == ALLERGY:
            return f"{s} is allergic to {v}"
        if self.relation == CAR:
            if self.event:
                return f"{s} bought {with_article(v)}{on}"
            return f"{s} drives {with_article(v)}"
        if self.relation == FORGET:
            return f"{s} asked to forget everything about {_TOPIC_WORDS.get(v, v)}"
        return f"{v}{on}" if self.date and self.date not in v else v


def with_article(noun: str) -> str:
    """``a nurse``, ``an architect``."""
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


# --- statements -------------------------------------------------------------------------------
_NAME = r"[A-Z][a-z]+"
_PLACE = r"[A-Z][a-z]+(?: [A-Z][a-z]+)*"
_SUBJ = r"(?P<s>I|We|[A-Z][a-z]+)"
_POSS = r"(?P<s>My|[A-Z][a-z]+'s)"
_ART = r"(?:a|an)"
_WORDS = r"[a-z]+(?: [a-z]+){0,2}"
_ADV = r"(?:just |finally |recently |now |also |still )*"

# (pattern, relation, event): groups s=subject, v=value, d=detail, p=previous.
_RULES: list[tuple[re.Pattern[str], str, bool]] = [
    (re.compile(rf"^{_SUBJ} {_ADV}(?:moved|relocated) from (?P<p>{_PLACE}) to (?P<v>{_PLACE})"), LIVES_IN, True),
    (re.compile(rf"^{_SUBJ} {_ADV}(?:moved|relocated) to (?P<v>{_PLACE})"), LIVES_IN, True),
    (re.compile(rf"^{_SUBJ} {_ADV}(?:live|lives) in (?P<v>{_PLACE})"), LIVES_IN, False),
    (re.compile(rf"^{_SUBJ}(?:'ve| have) been living in (?P<v>{_PLACE})"), LIVES_IN, False),
    (re.compile(rf"^{_SUBJ} {_ADV}started (?:a new job|working) as {_ART} (?P<v>[a-z]+(?: [a-z]+)?)(?: at (?P<d>{_PLACE}))?$"), WORKS_AS, True),
    (re.compile(rf"^{_SUBJ} {_ADV}(?:work|works) as {_ART} (?P<v>[a-z]+(?: [a-z]+)?)(?: at (?P<d>{_PLACE}))?$"), WORKS_AS, False),
    (re.compile(rf"^{_SUBJ}(?:'m| am| is) {_ART} (?P<v>[a-z]+(?: [a-z]+)?) at (?P<d>{_PLACE})$"), WORKS_AS, False),
    (re.compile(rf"^{_POSS} (?P<d>sister|brother)(?:'s name)? is (?:named |called )?(?P<v>{_NAME})$"), SIBLING, False),
    (re.compile(rf"^{_SUBJ} {_ADV}(?:have|has) a (?P<d>sister|brother) (?:named|called) (?P<v>{_NAME})$"), SIBLING, False),
    (re.compile(rf"^{_SUBJ} {_ADV}adopted {_ART} (?P<d>[a-z]+) (?:named|called) (?P<v>{_NAME})"), HAS_PET, True),
    (re.compile(rf"^{_SUBJ} {_ADV}(?:have|has) {_ART} (?P<d>[a-z]+) (?:named|called) (?P<v>{_NAME})"), HAS_PET, False),
    (re.compile(rf"^(?P<v>{_NAME}) is {_POSS} (?P<d>friend|colleague|neighbour|cousin)$"), FRIEND, False),
    (re.compile(rf"^{_SUBJ} {_ADV}(?:really )?(?:enjoy|enjoys) (?P<v>{_WORDS})$"), HOBBY, False),
    (re.compile(rf"^{_SUBJ}(?:'ve| have| has) {_ADV}taken up (?P<v>{_WORDS})$"), HOBBY, False),
    (re.compile(rf"^{_POSS} favou?rite food is (?P<v>{_WORDS})$"), FOOD, False),
    (re.compile(rf"^Nothing beats (?P<v>{_WORDS}), it's my favou?rite food$"), FOOD, False),
    (re.compile(rf"^{_SUBJ}(?:'m| am| is) allergic to (?P<v>{_WORDS})$"), ALLERGY, False),
    (re.compile(rf"^{_SUBJ} {_ADV}bought {_ART} (?P<v>[A-Z][\w-]*(?: [A-Z0-9][\w-]*)*)"), CAR, True),
    (re.compile(rf"^{_SUBJ} {_ADV}(?:drive|drives) {_ART} (?P<v>[A-Z][\w-]*(?: [A-Z0-9][\w-]*)*)"), CAR, False),
    (re.compile(r"^(?:Please |Actually, |Also, )?(?:please )?forget (?:that I told you about|what I (?:said|told you) about|everything about|about) (?:my |being )?(?P<v>[a-z]+)", re.I), FORGET, False),
    (re.compile(rf"^{_SUBJ} asked to forget everything about (?:being )?(?P<v>[a-z ]+)$"), FORGET, False),
]  # fmt: skip
# "My friend Leo lives in Berlin": a fact about the friend plus who the friend is.
_RELATIVE = re.compile(
    rf"^{_POSS} (?P<d>friend|colleague|neighbour|cousin) (?P<v>{_NAME}) (?P<rest>.+)$"
)
_ON_DATE = re.compile(rf",? on (?P<date>{DATE_PATTERN})")
_RELATIVE_DAY = re.compile(r",? (?P<w>today|yesterday)\b", re.I)
_TRAILING_ADVERB = re.compile(r",? (?:recently|lately|these days|again|now|for a few years now)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_FIRST_PERSON = [
    (re.compile(r"\bI'm\b"), "{s} is"),
    (re.compile(r"\bI am\b"), "{s} is"),
    (re.compile(r"\bI've\b"), "{s} has"),
    (re.compile(r"\bI'd\b"), "{s} would"),
    (re.compile(r"\bI'll\b"), "{s} will"),
    (re.compile(r"\bI was\b"), "{s} was"),
    (re.compile(r"\bI\b"), "{s}"),
    (re.compile(r"\b[Mm]y\b"), "{s}'s"),
    (re.compile(r"\b[Mm]e\b"), "{s}"),
]
_GENERIC_MIN_TOKENS = 3


def split_sentences(text: str) -> list[str]:
    """Sentences without their closing punctuation.

    >>> split_sentences("Hi! I live in Porto. My sister is Ana.")
    ['Hi', 'I live in Porto', 'My sister is Ana']
    """
    out = []
    for part in _SENTENCE_END.split(text.strip()):
        part = part.strip().rstrip(".!?").strip()
        if part:
            out.append(part)
    return out


def parse_statement(speaker: str | None, text: str, date: str | None) -> list[Fact]:
    """The facts a message (or a memory sentence) states.

    Args:
        speaker: who said it (``I``/``my`` refer to them); ``None`` for third-person memories.
        text: the message or memory text.
        date: when it was said (``8 May 2023``), to resolve ``today`` and ``yesterday``.

    >>> [f.render() for f in parse_statement("Maya", "My friend Leo lives in Berlin.", None)]
    ["Leo is Maya's friend", 'Leo lives in Berlin']
    """
    return list(_parse_cached(speaker, text, date))


@functools.lru_cache(maxsize=1 << 16)
def _parse_cached(speaker: str | None, text: str, date: str | None) -> tuple[Fact, ...]:
    # Contexts repeat the same lines across questions and replays: parse each line once.
    facts: list[Fact] = []
    for sentence in split_sentences(text):
        facts.extend(_parse_sentence(speaker, sentence, date))
    return tuple(facts)


def _parse_sentence(speaker: str | None, sentence: str, date: str | None) -> list[Fact]:
    event_date: str | None = None
    found = _ON_DATE.search(sentence)
    if found:
        event_date = found["date"].replace(",", "")
        sentence = (sentence[: found.start()] + sentence[found.end() :]).strip()
    relative = _RELATIVE_DAY.search(sentence)
    if relative:
        if date and event_date is None:
            event_date = date if relative["w"].lower() == "today" else shift_date(date, -1)
        sentence = (sentence[: relative.start()] + sentence[relative.end() :]).strip()
    sentence = re.sub(r"^(?:Big news: |Guess what, |So |Well, |Oh, |By the way, )", "", sentence)
    sentence = sentence.split(" and lives in ")[0]
    sentence = _TRAILING_ADVERB.sub("", sentence)
    rel = _RELATIVE.match(sentence)
    if rel:
        owner = _subject(rel["s"], speaker)
        if owner is not None:
            friend = Fact(owner, FRIEND, rel["v"], detail=rel["d"])
            return [friend, *_parse_sentence(None, f"{rel['v']} {rel['rest']}", date)]
    for pattern, relation, event in _RULES:
        match = pattern.match(sentence)
        if match is None:
            continue
        groups = match.groupdict()
        subject = _subject(groups.get("s") or "I", speaker)
        if subject is None:
            continue
        value = groups["v"].strip()
        if relation == FORGET:
            topic = _TOPIC_BY_WORD.get(value.split()[-1].lower()) or _TOPIC_BY_WORD.get(
                value.split()[0].lower()
            )
            if topic is None:
                continue
            value = topic
        return [
            Fact(
                subject,
                relation,
                value,
                detail=groups.get("d"),
                previous=groups.get("p"),
                date=event_date if event else None,
                event=event,
            )
        ]
    generic = _generic(speaker, sentence, event_date)
    return [generic] if generic is not None else []


def _subject(word: str, speaker: str | None) -> str | None:
    if word in ("I", "We", "My"):
        return speaker
    return word[:-2] if word.endswith("'s") else word


def _generic(speaker: str | None, sentence: str, date: str | None) -> Fact | None:
    """A sentence the rules do not know, kept in the third person when it says something."""
    if sentence.endswith("?") or len(content_tokens(sentence)) < _GENERIC_MIN_TOKENS:
        return None
    text = sentence
    if speaker is not None:
        if not re.search(r"\b(?:I|I'm|I've|I'd|my|My|me|we|We|our)\b", sentence):
            return None
        for pattern, repl in _FIRST_PERSON:
            text = pattern.sub(repl.format(s=speaker), text)
        text = text[0].upper() + text[1:]
    return Fact(speaker or "", GENERIC, text, date=date)


def extract_facts(speaker: str | None, text: str, date: str | None) -> list[str]:
    """Canonical fact sentences for a message (the offline fact extraction).

    >>> extract_facts("Maya", "I adopted a dog named Rex yesterday. Thanks!", "8 May 2023")
    ['Maya adopted a dog named Rex on 7 May 2023']
    """
    return [f.render() for f in parse_statement(speaker, text, date)]


# --- context ----------------------------------------------------------------------------------
CONTEXT_HEADER = re.compile(
    rf"^\[(?P<date>{DATE_PATTERN})\]\s*(?:(?P<speaker>[A-Z][\w .'-]{{0,40}}?): )?"
)


@dataclass(frozen=True)
class ContextFact:
    """A fact read from a context line, with where and when it was said."""

    fact: Fact
    position: int
    line_date: str | None
    line: str


def read_context(lines: Iterable[str]) -> list[ContextFact]:
    """Parse context lines ``[8 May 2023] Speaker: text`` or ``[8 May 2023] memory sentence``.

    >>> [c.fact.render() for c in read_context(["[8 May 2023] Maya: I live in Porto."])]
    ['Maya lives in Porto']
    """
    out: list[ContextFact] = []
    for position, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        match = CONTEXT_HEADER.match(line)
        date = speaker = None
        body = line
        if match:
            date = match["date"].replace(",", "")
            speaker = match["speaker"]
            body = line[match.end() :]
        for fact in parse_statement(speaker, body, date):
            out.append(ContextFact(fact, position, date, line))
    return out


def _when(c: ContextFact) -> tuple[int, int]:
    day = parse_date(c.fact.date or c.line_date or "")
    return (day.toordinal() if day else 0, c.position)


def _forgotten(items: list[ContextFact]) -> list[ContextFact]:
    """Drop facts that a later ``forget`` directive about the same subject and topic erased."""
    forgets = [c for c in items if c.fact.relation == FORGET]
    if not forgets:
        return items
    kept = []
    for c in items:
        erased = any(
            f.fact.subject == c.fact.subject
            and f.fact.value == c.fact.relation
            and _when(f) >= _when(c)
            for f in forgets
        )
        if not erased and c.fact.relation != FORGET:
            kept.append(c)
    return kept


# --- questions --------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuestionSpec:
    """What a question asks: about whom (``Maya`` or ``Maya's sister``), which relation, how."""

    subject: str
    relation: str
    mode: str = "current"  # current | previous | when | name
    detail: str | None = None
    target: str | None = None
    via: str | None = None  # sister/brother: resolve the subject through a sibling fact


_POSSESSOR = r"(?P<s>[A-Z][a-z]+)(?:'s (?P<via>sister|brother))?"
_QUESTIONS: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(rf"^Where does {_POSSESSOR} live(?: now)?\??$"), LIVES_IN, "current"),
    (re.compile(rf"^Where did (?P<s>[A-Z][a-z]+) live before moving to (?P<t>{_PLACE})\??$"), LIVES_IN, "previous"),
    (re.compile(rf"^When did (?P<s>[A-Z][a-z]+) move to (?P<t>{_PLACE})\??$"), LIVES_IN, "when"),
    (re.compile(r"^What (?:is|was) (?P<s>[A-Z][a-z]+)'s (?:current )?job\??$"), WORKS_AS, "current"),
    (re.compile(rf"^What does {_POSSESSOR} do for (?:work|a living)\??$"), WORKS_AS, "current"),
    (re.compile(r"^What is the name of (?P<s>[A-Z][a-z]+)'s (?P<d>sister|brother)\??$"), SIBLING, "current"),
    (re.compile(r"^What is the name of (?P<s>[A-Z][a-z]+)'s (?P<d>[a-z]+)\??$"), HAS_PET, "current"),
    (re.compile(rf"^When did (?P<s>[A-Z][a-z]+) adopt (?P<t>{_NAME})\??$"), HAS_PET, "when"),
    (re.compile(r"^What hobby has (?P<s>[A-Z][a-z]+) taken up\??$"), HOBBY, "current"),
    (re.compile(r"^What is (?P<s>[A-Z][a-z]+)'s favou?rite food\??$"), FOOD, "current"),
    (re.compile(r"^What is (?P<s>[A-Z][a-z]+) allergic to\??$"), ALLERGY, "current"),
    (re.compile(r"^What car does (?P<s>[A-Z][a-z]+) drive\??$"), CAR, "current"),
]  # fmt: skip


def parse_question(question: str) -> QuestionSpec | None:
    """The relation a question asks about, or ``None`` for questions the rules do not know.

    >>> parse_question("Where does Maya's sister live?")
    QuestionSpec(subject='Maya', relation='lives_in', mode='current', detail=None, target=None, via='sister')
    """
    text = question.strip()
    for pattern, relation, mode in _QUESTIONS:
        match = pattern.match(text)
        if match is None:
            continue
        groups = match.groupdict()
        return QuestionSpec(
            subject=groups["s"],
            relation=relation,
            mode=mode,
            detail=groups.get("d"),
            target=groups.get("t"),
            via=groups.get("via"),
        )
    return None


def relation_keywords(spec: QuestionSpec) -> list[str]:
    """Words a refined search query adds for a relation (EverMemOS's second round)."""
    words = {
        LIVES_IN: "lives moved relocated city",
        WORKS_AS: "works job started working",
        HAS_PET: "adopted pet named",
        SIBLING: "sister brother named",
        HOBBY: "enjoys taken hobby",
        FOOD: "favourite food",
        ALLERGY: "allergic",
        CAR: "drives bought car",
    }.get(spec.relation, "")
    return words.split()


def answer_question(question: str, lines: Sequence[str]) -> str:
    """Answer from context lines by the rules, or by the best-overlapping sentence.

    >>> ctx = ["[1 May 2023] Maya: I live in Lisbon.", "[8 May 2023] Maya: I moved to Porto today!"]
    >>> answer_question("Where does Maya live now?", ctx), answer_question("When did Maya move to Porto?", ctx)
    ('Porto', '8 May 2023')
    >>> answer_question("Where did Maya live before moving to Porto?", ctx)
    'Lisbon'
    >>> answer_question("What car does Maya drive?", ctx)
    "I don't know."
    """
    items = _forgotten(read_context(lines))
    spec = parse_question(question)
    if spec is None:
        return _answer_by_overlap(question, items)
    subject = spec.subject
    if spec.via:
        names = _values(items, subject, SIBLING, spec.via)
        if not names:
            return ABSTAIN
        subject = names[-1].fact.value
    found = _values(items, subject, spec.relation, spec.detail)
    if not found:
        return ABSTAIN
    if spec.mode == "current":
        return found[-1].fact.value
    if spec.mode == "when":
        target = (spec.target or "").lower()
        dated = [c for c in found if c.fact.value.lower() == target and c.fact.date]
        return dated[0].fact.date or ABSTAIN if dated else ABSTAIN
    if spec.mode == "previous":
        target = (spec.target or "").lower()
        for c in found:
            if c.fact.value.lower() == target and c.fact.previous:
                return c.fact.previous
        before = []
        for c in found:
            if c.fact.value.lower() == target:
                break
            before.append(c)
        return before[-1].fact.value if before else ABSTAIN
    return found[-1].fact.value


def _values(
    items: list[ContextFact], subject: str, relation: str, detail: str | None
) -> list[ContextFact]:
    chosen = [
        c
        for c in items
        if c.fact.subject == subject
        and c.fact.relation == relation
        and (detail is None or c.fact.detail == detail)
    ]
    return sorted(chosen, key=_when)


def _answer_by_overlap(question: str, items: list[ContextFact]) -> str:
    """Questions the rules do not know: the sentence sharing the most words with the question."""
    best: ContextFact | None = None
    best_score = 0.0
    for c in items:
        score = overlap(question, c.fact.render())
        if score > best_score:
            best, best_score = c, score
    if best is None or best_score < 0.34:
        return ABSTAIN
    if question.lower().startswith(("when", "what date", "what year")):
        return best.fact.date or best.line_date or ABSTAIN
    return best.fact.render()

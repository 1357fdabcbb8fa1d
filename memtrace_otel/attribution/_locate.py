"""Reading messages against a question when no expected answer is known.

Without an expected answer the question alone says what to look for, and word overlap is not
enough: the message that shares most words with the question often only restates it. Three
properties of English questions and statements decide instead (none of them is a list of one
benchmark's predicates):

* **The answer's kind.** A question asks for a place ("where"), a time ("when"), a name ("who",
  "what is X called"), a number ("how many") or some other thing ("what"). A message *bears*
  the answer only when it holds content of that kind that the question does not already name:
  a name after a locative preposition for a place, a date or a relative time for a time, a new
  name for a name, a number, else content words.
* **Links.** A message that only restates the question's own names ("I moved to Zurich", for
  "where did I live before moving to Zurich?") is a link, not the evidence: it anchors the
  search in time ("before", "after"). A message whose only new content is a name it introduces
  ("my sister is called Kate", for "what does my sister do?") links to that name's messages.
* **The subject.** The user's own messages speak in the first person; a message whose subject
  is another named person, one the question and its links do not name ("Sara lives in
  Valencia", for "where does Kofi live?"), is about someone else.

The tense of the question says which of two statements of the same kind wins: a present-tense
question ("where does she live?") asks for the latest one (a later statement supersedes an
older one), a past-tense one anchored by "before" for the one preceding its link.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from memtrace_otel.attribution._text import asks_for_time, content_tokens, entity_tokens
from memtrace_otel.attribution._tokens import STOPWORDS, stem

__all__ = [
    "NAME",
    "NUMBER",
    "PLACE",
    "THING",
    "TIME",
    "Question",
    "Reading",
    "addressed",
    "name_lexicon",
    "place_names",
    "placed",
    "placed_names",
    "read",
    "resolved_date",
    "says_now",
]

TIME = "time"
PLACE = "place"
NAME = "name"
NUMBER = "number"
THING = "thing"

_RAW = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")
_SENTENCE_END = re.compile(r"[.!?:;\n\"(\[]\s*$")
_NUMBER_Q = re.compile(r"\bhow (?:many|much|old|often)\b", re.IGNORECASE)
_PLACE_Q = re.compile(
    r"\bwhere\b|\b(?:which|what) (?:city|country|town|place|village|state)\b", re.IGNORECASE
)
_NAME_Q = re.compile(r"\bwho(?:m|se)?\b|\bname\b|\bcalled\b|\bnamed\b", re.IGNORECASE)
_PAST_Q = re.compile(r"\b(?:did|was|were|had|used to)\b", re.IGNORECASE)
_PAST_VERB = re.compile(r"\b[a-z]{2,}[^e]ed\b", re.IGNORECASE)  # "painted", "moved": not "need"
_PRESENT_Q = re.compile(r"\b(?:does|do|is|are|has|have)\b|\bnow\b|\bcurrent", re.IGNORECASE)
# A name set off as the one spoken to ("Thanks, Jon!", "Hey Deborah!", "Jolene, sorry ..."):
# the speaker is someone else, so the message's "I" is not that person.
_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z]+\b")
_GREETINGS = frozenset(
    [
        "hey",
        "hi",
        "hello",
        "thanks",
        "thank",
        "dear",
        "yo",
        "congrats",
        "congratulations",
        "wow",
        "sorry",
        "welcome",
        # Interjections before a vocative ("Yeah Dave, ...", "Oh Maria, ...").
        "yeah",
        "yes",
        "yep",
        "oh",
        "ah",
        "aw",
        "ok",
        "okay",
        "well",
        "cheers",
    ]
)
# Adverbs that put what a sentence says in the present ("now", "these days").
_NOW = re.compile(
    r"\b(?:now|nowadays|these days|currently|at the moment|at present)\b", re.IGNORECASE
)
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_BEFORE = re.compile(r"\b(?:before|prior to|until)\b", re.IGNORECASE)
_AFTER = re.compile(r"\b(?:after|since)\b", re.IGNORECASE)

# Prepositions that put a place after them ("living in Porto", "moved to Oslo").
_LOCATIVE = frozenset({"in", "to", "from", "at", "near", "into", "around", "outside"})
# Articles: "moved to the Faroe Islands" (a place after the preposition's article), "a Lagos
# native" (a name between an article and its noun modifies that noun: it is no one's name).
_ARTICLES = frozenset({"the", "a", "an"})
# "Ilse, my cousin, ...": a name set off before a possessive in apposition names that person.
_APPOSITION = re.compile(r",\s*(?:my|our|his|her|their)\b", re.IGNORECASE)
_FIRST_SUBJECT = frozenset(
    {"i", "i'm", "i've", "i'd", "i'll", "we", "we're", "we've", "we'd", "we'll"}
)
_FIRST_PERSON = _FIRST_SUBJECT | {"me", "my", "mine", "myself", "us", "our", "ours"}
_COPULA = frozenset({"is", "was", "are", "were"})
# Words that give a name to something ("called Kate", "my sister's name is Dora").
_NAMING = frozenset({"name", "named", "call", "called", "calls", "names", "is"})
_NAMING_STEMS = frozenset(stem(w) for w in ("name", "named", "called", "call", "names"))
# Words that say when, relative to the message's own date.
_TIME_WORDS = frozenset(
    content_tokens(
        "today tonight yesterday tomorrow now ago last week weekend month year morning evening "
        "january february march april may june july august september october november december "
        "monday tuesday wednesday thursday friday saturday sunday"
    )
)
_NUMBER_WORDS = frozenset(
    [
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "dozen",
        "twenty",
        "thirty",
        "hundred",
    ]
)
# Relative days the message's date resolves ("yesterday" in a message of 4 May is 3 May).
_DAY_SHIFT = {"today": 0, "tonight": 0, "now": 0, "yesterday": -1, "tomorrow": 1}


@dataclass(frozen=True)
class Question:
    """What a question asks for.

    Attributes:
        text: the question.
        kind: ``time``, ``place``, ``name``, ``number`` or ``thing``.
        asked: the question's content tokens (stemmed).
        present: it asks about the current state ("where does she live?").
        past: it asks about the past ("where did she live?", "used to").
        before: it asks about what preceded something it names ("before moving to Zurich").
        after: it asks about what followed something it names.
        now: it says "now" (or "these days", "currently"): it asks what holds at present.
    """

    text: str
    kind: str
    asked: frozenset[str]
    present: bool
    before: bool
    after: bool
    past: bool = False
    now: bool = False

    @classmethod
    def of(cls, text: str) -> Question:
        """Read a question.

        >>> q = Question.of("Where did Nina live before moving to Zurich?")
        >>> q.kind, q.present, q.before
        ('place', False, True)
        >>> Question.of("What does Ada's sister do for work?").kind
        'thing'
        """
        if asks_for_time(text):
            kind = TIME
        elif _NUMBER_Q.search(text):
            kind = NUMBER
        elif _PLACE_Q.search(text):
            kind = PLACE
        elif _NAME_Q.search(text):
            kind = NAME
        else:
            kind = THING
        past = bool(_PAST_Q.search(text))
        # Present tense: a present auxiliary, or no past form at all ("what game keeps him
        # busy?", "which food should be kept away from her?": a verb in -ed is past).
        present = not past and (bool(_PRESENT_Q.search(text)) or not _PAST_VERB.search(text))
        return cls(
            text=text,
            kind=kind,
            asked=frozenset(content_tokens(text)),
            present=present,
            before=bool(_BEFORE.search(text)),
            after=bool(_AFTER.search(text)),
            past=past,
            now=bool(_NOW.search(text)),
        )


@dataclass(frozen=True)
class Reading:
    """What one message says, read against a question.

    Attributes:
        bearing: content of the asked kind the question does not name (empty: it bears no
            answer, it is at most a link).
        introduced: names the message introduces ("called Kate") that the question does not
            name: what a link leads to.
        subjects: names in subject position (not after a locative preposition) the question
            does not name.
        other_subject: its subject is another named person, not the user.
        first_person: it speaks of the speaker (I, we, my ...).
        slots: the prepositions before its new places ("in", "to"): the shape of a statement
            of where.
        mentions: it names someone or something the question names.
        placed: the names it puts in the place of a place, whatever the question asks.
        named: the names it uses inside a sentence otherwise (a person, a thing).
    """

    bearing: frozenset[str]
    introduced: frozenset[str]
    subjects: frozenset[str]
    other_subject: bool
    first_person: bool
    slots: frozenset[str]
    mentions: bool = False
    placed: frozenset[str] = frozenset()
    named: frozenset[str] = frozenset()


def addressed(text: str) -> frozenset[str]:
    """The (stemmed) names ``text`` speaks to, as in "Thanks, Jon!" or "Hey Deborah!".

    >>> sorted(addressed("Thanks, Jon! Since I lost my job things have been tough."))
    ['jon']
    >>> sorted(addressed("Hey Deborah! Sounds fun.")), sorted(addressed("I live in Paris."))
    (['deborah'], [])
    """
    out = set()
    for m in _CAPITALISED.finditer(text):
        low = m.group().lower()
        if low in _GREETINGS or low in STOPWORDS:
            continue
        before = text[: m.start()].rstrip()
        after = text[m.end() :].lstrip()
        opens = not before or before[-1] in ".!?,;" or before.split()[-1].lower() in _GREETINGS
        closes = not after or after[0] in ",!?" or (after[0] == "." and after[1:2] in ("", " "))
        if opens and closes:
            out.add(stem(low))
    return frozenset(out)


def says_now(text: str) -> bool:
    """Whether a sentence of ``text`` states, in the first person and not as a question, what
    holds now (an adverb of the present: "now", "these days", "currently").

    >>> says_now("I teach a class of ten-year-olds these days."), says_now("All good now?")
    (True, False)
    >>> says_now("Wow, Maria! Is she better now? I hope so.")
    False
    """
    for sentence in _SENTENCES.split(text):
        if not _NOW.search(sentence) or sentence.rstrip().endswith("?"):
            continue
        if any(w.lower() in _FIRST_SUBJECT for w in _RAW.findall(sentence)):
            return True
    return False


def placed(text: str, names: frozenset[str]) -> bool:
    """Whether every mention of ``names`` (stemmed) in ``text`` stands after a locative
    preposition: there the name is a place, not a person the text speaks of.

    >>> placed("Henrike packed up in Ljubljana.", frozenset({"ljubljana"}))
    True
    >>> placed("Ljubljana is where Kate works.", frozenset({"ljubljana"}))
    False
    """
    words = [m.group().lower() for m in _RAW.finditer(text)]
    found = [i for i, w in enumerate(words) if stem(w.split("'")[0]) in names]
    return bool(found) and all(i and words[i - 1] in _LOCATIVE for i in found)


def name_lexicon(texts: Iterable[str]) -> frozenset[str]:
    """The names of a store: words its messages capitalise where a sentence does not start.

    A capital at a sentence's start says nothing; the same word capitalised mid-sentence
    elsewhere ("my sister's name is Dora") makes "Dora just moved" a name too.

    >>> sorted(name_lexicon(["My sister is Dora.", "Dora moved to Oslo in May."]))
    ['dora', 'oslo']
    """
    out: set[str] = set()
    for text in texts:
        out |= {t for t in entity_tokens(text) if not t.isdigit() and t not in _TIME_WORDS}
    return frozenset(out)


def read(
    text: str,
    question: Question,
    lexicon: frozenset[str],
    linked: frozenset[str] = frozenset(),
    places: frozenset[str] = frozenset(),
) -> Reading:
    """Read ``text`` against ``question``; ``lexicon``: the store's names (:func:`name_lexicon`);
    ``linked``: names a link introduced, which count as named by the question; ``places``: the
    store's names of places (:func:`place_names`), which open a sentence without being its
    subject ("New Zealand was ...", "New chapter: ...", when the store says "moved to New York").

    >>> q = Question.of("Where does Kofi live now?")
    >>> lex = name_lexicon(["My sister is Sara.", "I'm now settled in Oslo.", "Hi Kofi"])
    >>> r = read("Sara lives in Valencia.", q, lex)
    >>> sorted(r.bearing), r.other_subject
    (['valencia'], True)
    >>> r = read("Packing is done and I'm now settled in Oslo.", q, lex)
    >>> sorted(r.bearing), r.other_subject, sorted(r.slots)
    (['oslo'], False, ['in'])
    """
    return _read(text, question, lexicon, linked, places)


def place_names(texts: Iterable[str], lexicon: frozenset[str]) -> frozenset[str]:
    """The names a store's messages use only as places (after a locative preposition, its
    article, or as the next word of a place's name), never as a person or thing inside a
    sentence. A place is not whom a sentence is about.

    >>> lex = name_lexicon(["We moved to New York.", "Lots of New Year plans, Ana said."])
    >>> sorted(place_names(["We moved to New York.", "Ana went to the Big Apple."], lex))
    ['apple', 'big', 'new', 'york']
    >>> sorted(place_names(["We moved to New York.", "Lots of New Year plans, Ana said."], lex))
    ['york']
    """
    placed: set[str] = set()
    named: set[str] = set()
    for text in texts:
        reading = _read(text, _ANYWHERE, lexicon, frozenset(), frozenset())
        placed |= reading.placed
        named |= reading.named
    return frozenset(placed - named)


def _place_slot(
    i: int, words: list[tuple[str, int]], lowered: list[str], text: str, place_at: dict[int, str]
) -> str | None:
    """The slot of word ``i`` when it stands as (part of) a place's name, else None: after a
    locative preposition ("in Porto") or its article ("to the Faroe Islands"); as the next
    capitalised word of a place's name ("New York", "City of London"); or between an article
    and the lowercase noun it modifies ("a Lagos native")."""

    def joined(j: int) -> bool:  # word j runs into word j + 1 with a space only
        end = words[j][1] + len(words[j][0])
        return not text[end : words[j + 1][1]].strip()

    previous = lowered[i - 1] if i else ""
    if previous in _LOCATIVE:
        return previous
    if i >= 2 and previous in _ARTICLES and lowered[i - 2] in _LOCATIVE:
        return lowered[i - 2]
    if i - 1 in place_at and joined(i - 1):
        return place_at[i - 1]
    if previous == "of" and i - 2 in place_at and joined(i - 2) and joined(i - 1):
        return place_at[i - 2]
    if previous in _ARTICLES:
        j = i
        while j + 1 < len(words) and words[j + 1][0][0].isupper() and joined(j):
            j += 1
        after = lowered[j + 1] if j + 1 < len(words) else ""
        noun = after and words[j + 1][0][0].islower() and after not in STOPWORDS
        if noun and stem(after) not in _TIME_WORDS and joined(j):  # not "a Subaru today"
            return previous
    return None


@functools.lru_cache(maxsize=1 << 14)
def _read(
    text: str,
    question: Question,
    lexicon: frozenset[str],
    linked: frozenset[str],
    known_places: frozenset[str],
) -> Reading:
    asked = question.asked | linked
    words = [(m.group(), m.start()) for m in _RAW.finditer(text)]
    lowered = [w.lower() for w, _ in words]
    first_subject_at = next((i for i, w in enumerate(lowered) if w in _FIRST_SUBJECT), None)
    first_person = any(w in _FIRST_PERSON for w in lowered)
    places: set[str] = set()
    subjects: set[str] = set()
    subject_first: list[str] = []  # new subject names before the speaker's "I"
    introduced: set[str] = set()
    mentioned: set[str] = set()
    slots: set[str] = set()
    place_at: dict[int, str] = {}
    named: set[str] = set()
    for i, (word, start) in enumerate(words):
        low = lowered[i]
        token = stem(low.split("'")[0])
        if not word[0].isupper() or low in STOPWORDS or low in _FIRST_PERSON:
            continue
        if token in asked and not token.isdigit():
            # The question's own name, wherever it stands (a sentence often opens with it).
            mentioned.add(token)
            continue
        initial = i == 0 or bool(_SENTENCE_END.search(text, max(0, start - 3), start))
        if initial and (
            token in known_places
            or (token not in lexicon and not _APPOSITION.match(text, start + len(word)))
        ):
            continue  # a capital that only opens a sentence, or a place's name
        if token in _TIME_WORDS or token.isdigit():
            continue
        previous = lowered[i - 1] if i else ""
        slot = _place_slot(i, words, lowered, text, place_at)
        if slot is not None:
            places.add(token)
            slots.add(slot)
            place_at[i] = slot
            continue
        if not initial:
            named.add(token)
        if (
            question.kind == PLACE
            and previous in _COPULA
            and i >= 2
            and stem(lowered[i - 2]) in question.asked
        ):
            # The complement of a copula whose subject is the question's own word ("home is
            # Tbilisi", for "which town does she call home?") is what the question asks for.
            places.add(token)
            slots.add(previous)
            continue
        subjects.add(token)
        if any(w in _NAMING for w in lowered[max(0, i - 2) : i]):
            introduced.add(token)  # a naming statement is about the speaker's relation
        elif (first_subject_at is None or i < first_subject_at) and not mentioned:
            # A name after the question's subject is what the sentence says of it ("Hana got
            # cast as Juliet"), not another subject.
            subject_first.append(token)
    tokens = frozenset(content_tokens(text))
    kind = question.kind
    if kind == TIME:
        relative = frozenset(w for w in lowered if w in _DAY_SHIFT)  # "now" is a stop word
        bearing = frozenset(t for t in tokens if t in _TIME_WORDS or t.isdigit()) | relative
        bearing -= asked
    elif kind == NUMBER:
        bearing = frozenset(t for t in tokens if t.isdigit() or t in _NUMBER_WORDS) - asked
    elif kind == PLACE:
        bearing = frozenset(places)
    elif kind == NAME:
        bearing = frozenset(subjects | places)
    elif introduced:
        bearing = frozenset()  # a naming statement links to the name it gives
    else:
        bearing = frozenset(t for t in tokens - asked - _NAMING_STEMS - _TIME_WORDS if len(t) > 2)
    # For a name question the answer is itself a new name: a second one says whose it is
    # ("my neighbour Tom has a parrot named Pickle" is about Tom's parrot).
    other = len(set(subject_first) | introduced) >= 2 if kind == NAME else bool(subject_first)
    if addressed(text) & question.asked:
        other = True  # spoken to the question's subject: the "I" is someone else
    return Reading(
        bearing=bearing,
        introduced=frozenset(introduced),
        subjects=frozenset(subjects),
        other_subject=other,
        first_person=first_person,
        slots=frozenset(slots),
        mentions=bool(mentioned),
        placed=frozenset(places),
        named=frozenset(named),
    )


_ANYWHERE = Question.of("Where?")


def placed_names(text: str) -> frozenset[str]:
    """The (stemmed) names ``text`` puts in the place of a place, inside its sentences.

    >>> sorted(placed_names("Evan has lived in New Orleans since May."))
    ['new', 'orlean']
    >>> sorted(placed_names("I'm a Lagos native.")), sorted(placed_names("I got a Subaru today!"))
    (['lago'], [])
    """
    return _read(text, _ANYWHERE, frozenset(), frozenset(), frozenset()).placed


def resolved_date(text: str, date: str) -> frozenset[str]:
    """The tokens of the day ``text`` speaks of, resolved against its message's ``date``
    ("yesterday" in a message of 4 May 2023 is 3 May 2023); empty when it names no day.

    >>> sorted(resolved_date("I adopted a cat yesterday!", "4 May 2023"))
    ['2023', '3', 'may']
    >>> sorted(resolved_date("Say hi to Tofu, I brought him home today!", "4 May 2023"))
    ['2023', '4', 'may']
    >>> resolved_date("I went hiking last week.", "4 May 2023")
    frozenset()
    """
    shifts = {_DAY_SHIFT[w.lower()] for w in _RAW.findall(text) if w.lower() in _DAY_SHIFT}
    if len(shifts) != 1:
        return frozenset()
    try:
        day = _dt.datetime.strptime(date.strip().replace(",", ""), "%d %B %Y").date()
    except ValueError:
        return frozenset()
    day += _dt.timedelta(days=shifts.pop())
    return frozenset(content_tokens(f"{day.day} {day.strftime('%B')} {day.year}"))

"""Facts of the hard benchmark: what a planted message says, and how memories rewrite it.

A planted message states one fact about a LoCoMo speaker in the first person, in one of several
phrasings; a *paraphrased* phrasing avoids the answer word altogether ("the Windy City" for
Chicago, "yesterday" for a date, "I look after patients on a ward" for nurse). What the message
means is kept apart from its text as :class:`Claim` s (slot, value, date): the hard systems carry
claims along with text, and their simulated reader answers from the claims it is given, so a
memory that rewrites the text keeps or loses *meaning*, whatever words it shares with the message.

Memories write third-person sentences from a few templates per kind; faults rewrite them the way
the issue saw models do it: the same sentence with another city (an entity swap), without its
date, or without a name.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace

from memtrace_otel.attribution._tokens import shift_date


@dataclass(frozen=True)
class Claim:
    """One unit of meaning: ``slot`` (``caroline.city``) has ``value``; ``date`` when it happened."""

    slot: str
    value: str
    date: str = ""


@dataclass(frozen=True)
class Fact:
    """A planted fact: the message that states it and the memory sentence that keeps it.

    Attributes:
        kind: ``city``, ``job``, ``pet``, ``sister``, ``event``, ``team``, ``lead``.
        subject: who it is about (a speaker, or a team for ``lead``).
        value: the answer word(s).
        date: when it happened (``8 May 2023``).
        message: the first-person message.
        memory: the third-person memory sentence (the date kept when ``dated``).
        paraphrased: the message does not contain ``value``.
        claims: what the message means.
        template: the memory template (``{s}``, ``{v}``, ``{d}``, ``{x}``), for rewrites.
        extra: a second value of the fact (the sister's name, the pet kind).
    """

    kind: str
    subject: str
    value: str
    date: str
    message: str
    memory: str
    paraphrased: bool
    claims: tuple[Claim, ...]
    template: str
    extra: str = ""


CITIES = {
    "Chicago": "the Windy City",
    "New York": "the Big Apple",
    "Paris": "the City of Light",
    "Rome": "the Eternal City",
    "Boston": "Beantown",
    "Philadelphia": "the City of Brotherly Love",
    "New Orleans": "the Big Easy",
    "Detroit": "Motor City",
    "Seattle": "the Emerald City",
    "Denver": "the Mile High City",
    "Nashville": "Music City",
    "Edinburgh": "Auld Reekie",
    "Lisbon": "the Portuguese capital",
    "Madrid": "the Spanish capital",
    "Vienna": "the Austrian capital",
    "Dublin": "the Irish capital",
}
JOBS = {
    "nurse": "I look after patients on a hospital ward now",
    "teacher": "I teach a class of ten-year-olds these days",
    "pilot": "I fly planes for a regional airline now",
    "chef": "I run the kitchen at a little bistro now",
    "lawyer": "I represent clients in court now",
    "dentist": "I spend my days fixing people's teeth",
    "firefighter": "I joined the fire brigade, real fires and all",
    "accountant": "I do people's taxes and keep their books now",
    "architect": "I design houses for a small studio now",
    "electrician": "I wire houses for a living now",
    "pharmacist": "I hand out prescriptions at the chemist's now",
    "journalist": "I write stories for the local paper now",
}
PETS = ["puppy", "kitten", "parrot", "rabbit", "hamster", "tortoise"]
PET_WORDS = {
    "puppy": "a little golden retriever",
    "kitten": "a tiny tabby",
    "parrot": "a chatty grey bird",
    "rabbit": "a floppy-eared bunny",
    "hamster": "a tiny fluffball in a cage",
    "tortoise": "a slow old shell-dweller",
}
NAMES = [
    "Priya", "Marco", "Ines", "Tobias", "Keiko", "Rafael", "Amara", "Lukas", "Sofia", "Dmitri",
    "Hana", "Mateo", "Leila", "Oskar", "Yara", "Felix", "Nadia", "Bruno", "Elena", "Kwame",
    "Freya", "Omar", "Greta", "Ravi", "Clara", "Jonas", "Mira", "Theo", "Zara", "Emil",
]  # fmt: skip
PET_NAMES = [
    "Biscuit", "Pepper", "Mango", "Luna", "Ziggy", "Waffles", "Nugget", "Pickle", "Maple",
    "Olive", "Pretzel", "Comet", "Sprout", "Truffle", "Juniper", "Noodle",
]  # fmt: skip
TEAMS = [
    "payments", "search", "mobile", "data platform", "growth", "security", "billing",
    "design systems", "infrastructure", "analytics",
]  # fmt: skip
EVENTS = {
    # id: (first-person past, third-person past, base form for questions, paraphrase)
    "marathon": ("ran my first marathon", "ran a first marathon", "run a first marathon",
                 "finished all 42 kilometres of the race"),
    "engaged": ("got engaged", "got engaged", "get engaged", "said yes when he proposed"),
    "licence": ("passed my driving test", "passed the driving test", "pass the driving test",
                "finally got my licence"),
    "pottery": ("started pottery classes", "started pottery classes", "start pottery classes",
                "sat down at a potter's wheel for the first time"),
    "talk": ("gave a talk at a conference", "gave a talk at a conference",
             "give a talk at a conference", "stood on a stage in front of three hundred people"),
    "skydiving": ("went skydiving", "went skydiving", "go skydiving",
                  "jumped out of a plane at four thousand metres"),
    "bakery": ("opened my bakery", "opened a bakery", "open a bakery",
               "unlocked the door of my own little shop of breads and cakes"),
    "choir": ("sang my first solo with the choir", "sang a first solo with the choir",
              "sing a first solo with the choir", "had the whole church listening to just me"),
}  # fmt: skip

_CITY_MSG = [
    "Big news: I moved to {v}! The boxes are still everywhere.",
    "I finally settled in {v}, signed the lease and everything.",
    "We packed up and relocated to {v} for good.",
    "Guess who lives in {v} now? Me!",
    "Moving day is finally over, so I'm living in {v} these days.",
    "After years of talking about it I'm officially a {v} resident.",
]
_CITY_PARA = [
    "Big news: I moved to {p}! The boxes are still everywhere.",
    "I finally settled in {p}, signed the lease and everything.",
    "Guess who lives in {p} now? Me!",
    "New chapter: my mail now goes to an address in {p}.",
]
_CITY_MEM = [
    "{s} moved to {v} on {d}.",
    "{s} relocated to {v} on {d}.",
    "{s} has lived in {v} since {d}.",
]
_JOB_MSG = [
    "I started a new job as a {v}, it's exhausting but great.",
    "So I'm officially a {v} now!",
    "Career change done: I work as a {v} since this week.",
    "Started my first week as a {v}; my feet hurt but I love it.",
]
_JOB_MEM = [
    "{s} works as a {v} (since {d}).",
    "{s} started working as a {v} on {d}.",
    "{s} is now a {v} ({d}).",
]
_PET_MSG = [
    "We adopted a {x} and named it {v}!",
    "Meet {v}, our new {x}. Cutest thing ever.",
    "I brought home a {x} today, we're calling it {v}.",
    "The family grew by one {x}: say hi to {v}!",
]
_PET_PARA = ["We brought home {w} and named it {v}!", "Meet {v}, {w} who now rules the flat."]
_PET_MEM = [
    "{s} adopted a {x} named {v} on {d}.",
    "{s}'s new {x} is called {v} (adopted {d}).",
    "On {d} {s} got a {x}, {v}.",
]
_SISTER_MSG = [
    "My sister {v} just became a {x}, we're so proud.",
    "{v}, my little sister, got hired as a {x} this week.",
    "Had dinner with my sister {v}; she's working as a {x} now.",
    "Big week for my sister {v}, she starts as a {x} on Monday.",
]
_SISTER_MEM = [
    "{s}'s sister {v} works as a {x} (since {d}).",
    "{s}'s sister {v} became a {x} on {d}.",
    "{s} has a sister, {v}, who is a {x} ({d}).",
]
_SISTER_NONAME = [
    "{s}'s sister works as a {x} (since {d}).",
    "{s}'s sister became a {x} on {d}.",
    "{s} has a sister who is a {x} ({d}).",
]
_EVENT_MSG = ["I {e} {when}!", "Guess what, I {e} {when}.", "{when_cap} I {e}, still buzzing."]
_EVENT_PARA = ["{when_cap} I {p}!", "Guess what: {when} I {p}."]
_EVENT_MEM = ["{s} {e} on {d}.", "On {d}, {s} {e}.", "{s} {e} ({d})."]
_EVENT_NODATE = ["{s} {e}.", "{s} {e} recently.", "{s} {e} (date not given)."]
_TEAM_MSG = [
    "I switched to the {v} team last week, new desk and all.",
    "Heads up, I moved over to the {v} team.",
    "They reorganised us and I'm on the {v} team now.",
    "New role, same company: I joined the {v} team.",
]
_TEAM_MEM = [
    "{s} works on the {v} team (since {d}).",
    "{s} moved to the {v} team on {d}.",
    "{s} joined the {v} team ({d}).",
]
_LEAD_MSG = [
    "Funny thing, the {x} team is run by {v}, the nicest manager around.",
    "Everyone says {v} runs the {x} team like a clock.",
    "The {x} team's lead is {v}, I heard she's great.",
]
_LEAD_MEM = [
    "The {x} team is led by {v} (as of {d}).",
    "{v} runs the {x} team ({d}).",
    "The lead of the {x} team is {v} ({d}).",
]


def _pick(rng: random.Random, options: list[str]) -> str:
    return options[rng.randrange(len(options))]


_ARTICLE = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")


def articles(text: str) -> str:
    """``a accountant`` -> ``an accountant``.

    >>> articles("She is a accountant and a nurse.")
    'She is an accountant and a nurse.'
    """
    return _ARTICLE.sub(lambda m: m.group(1) + "n ", text)


def render(template: str, subject: str, value: str, date: str, extra: str = "") -> str:
    """Fill a memory template."""
    return articles(template.format(s=subject, v=value, d=date, x=extra))


def slot(subject: str, kind: str) -> str:
    """``caroline.city``."""
    return f"{subject.lower()}.{kind}"


def make_fact(
    rng: random.Random, kind: str, subject: str, date: str, *, value: str = "",
    extra: str = "", paraphrase: bool = False,
) -> Fact:  # fmt: skip
    """A fact of ``kind`` about ``subject`` stated on ``date`` (``value`` drawn when empty).

    >>> f = make_fact(random.Random(1), "city", "Caroline", "8 May 2023", value="Chicago",
    ...               paraphrase=True)
    >>> "Chicago" in f.message, "Chicago" in f.memory, f.claims[0].slot
    (False, True, 'caroline.city')
    """
    claims: tuple[Claim, ...]
    if kind == "city":
        value = value or _pick(rng, sorted(CITIES))
        msg = _pick(rng, _CITY_PARA if paraphrase else _CITY_MSG).format(v=value, p=CITIES[value])
        template = _pick(rng, _CITY_MEM)
        claims = (Claim(slot(subject, "city"), value, date),)
    elif kind == "job":
        value = value or _pick(rng, sorted(JOBS))
        msg = JOBS[value] + "." if paraphrase else _pick(rng, _JOB_MSG).format(v=value)
        template = _pick(rng, _JOB_MEM)
        claims = (Claim(slot(subject, "job"), value, date),)
    elif kind == "pet":
        value = value or _pick(rng, PET_NAMES)
        extra = extra or _pick(rng, PETS)
        if paraphrase:
            msg = _pick(rng, _PET_PARA).format(v=value, w=PET_WORDS[extra])
        else:
            msg = _pick(rng, _PET_MSG).format(v=value, x=extra)
        template = _pick(rng, _PET_MEM)
        claims = (Claim(slot(subject, "pet"), value, date),)
    elif kind == "sister":
        value = value or _pick(rng, NAMES)
        extra = extra or _pick(rng, sorted(JOBS))
        msg = _pick(rng, _SISTER_MSG).format(v=value, x=extra)
        template = _pick(rng, _SISTER_MEM)
        claims = (
            Claim(slot(subject, "sister"), value, date),
            Claim(slot(subject, "sister_job"), extra, date),
        )
    elif kind == "event":
        event = extra or _pick(rng, sorted(EVENTS))
        extra = event
        first, third, _, para = EVENTS[event]
        yesterday = rng.random() < 0.5
        when = "yesterday" if yesterday else "today"
        happened = shift_date(date, -1) if yesterday else date
        event_verb = third
        if paraphrase:
            msg = _pick(rng, _EVENT_PARA).format(p=para, when=when, when_cap=when.capitalize())
        else:
            msg = _pick(rng, _EVENT_MSG).format(e=first, when=when, when_cap=when.capitalize())
        template = _pick(rng, _EVENT_MEM).replace("{e}", event_verb)
        value = happened
        claims = (Claim(slot(subject, "event:" + event), happened, happened),)
        memory = template.format(s=subject, d=happened)
        return Fact(kind, subject, value, happened, msg, memory, True, claims, template, extra)
    elif kind == "team":
        value = value or _pick(rng, TEAMS)
        msg = _pick(rng, _TEAM_MSG).format(v=value)
        template = _pick(rng, _TEAM_MEM)
        claims = (Claim(slot(subject, "team"), value, date),)
    elif kind == "lead":
        value = value or _pick(rng, NAMES)
        msg = _pick(rng, _LEAD_MSG).format(v=value, x=extra)
        template = _pick(rng, _LEAD_MEM)
        claims = (Claim(slot(extra, "lead"), value, date),)
    else:
        raise ValueError(f"unknown fact kind {kind!r}")
    memory = render(template, subject, value, date, extra)
    msg = articles(msg)
    paraphrased = value.lower() not in msg.lower()
    return Fact(kind, subject, value, date, msg, memory, paraphrased, claims, template, extra)


def swapped(fact: Fact, other: str) -> tuple[str, tuple[Claim, ...]]:
    """The memory sentence with its value swapped for ``other`` (most words kept)."""
    text = fact.memory.replace(fact.value, other)
    claims = tuple(replace(c, value=other) if c.value == fact.value else c for c in fact.claims)
    return text, claims


def undated(fact: Fact, rng: random.Random) -> tuple[str, tuple[Claim, ...]]:
    """The memory sentence without its date (an event's date is its value: the claim is gone)."""
    if fact.kind == "event":
        # Records are stamped with the day they were written. When the message said "today",
        # a record that silently drops the date still shows the event's day in its stamp, and
        # an answer reading the stamp is right: the loss is a loss only when the record says
        # the date is vague or unknown.
        said_today = "today" in fact.message.lower()
        templates = _EVENT_NODATE[1:] if said_today else _EVENT_NODATE
        text = _pick(rng, templates).format(s=fact.subject, e=_event_of(fact))
        return text, ()
    text = fact.memory.replace(f" on {fact.date}", "").replace(f" ({fact.date})", "")
    text = text.replace(f" (since {fact.date})", "").replace(f" (as of {fact.date})", "")
    return text, tuple(replace(c, date="") for c in fact.claims)


def _event_of(fact: Fact) -> str:
    return EVENTS[fact.extra][1]


def unnamed(fact: Fact) -> tuple[str, tuple[Claim, ...]]:
    """The sister sentence without the sister's name (the job kept)."""
    index = _SISTER_MEM.index(fact.template) if fact.template in _SISTER_MEM else 0
    text = render(_SISTER_NONAME[index], fact.subject, fact.value, fact.date, fact.extra)
    return text, tuple(c for c in fact.claims if not c.slot.endswith(".sister"))


QUESTIONS = {
    "city": ["Where does {s} live now?", "Which city is {s} living in these days?", "What city did {s} move to?"],
    "job": ["What does {s} do for a living now?", "What is {s}'s job these days?", "What work does {s} do now?"],
    "pet": ["What is the name of {s}'s {x}?", "What did {s} name the new {x}?"],
    "sister": ["What is {s}'s sister called?", "What's the name of {s}'s sister?"],
    "event": ["When did {s} {e}?", "On what date did {s} {e}?"],
    "boss": ["Who is {s}'s manager now?", "Who does {s} report to these days?", "Who leads the team {s} works on now?"],
    "sister_city": ["Which city does {s}'s sister live in?", "Where does {s}'s sister live now?"],
}  # fmt: skip


def question_text(rng: random.Random, kind: str, subject: str, extra: str = "") -> str:
    """A natural question of ``kind`` about ``subject``."""
    e = EVENTS[extra][2] if kind == "event" and extra in EVENTS else ""
    return _pick(rng, QUESTIONS[kind]).format(s=subject, x=extra, e=e)

"""Workloads: conversations with questions, gold answers and evidence, and a seeded generator.

A :class:`Workload` is what the systems ingest and are asked about. The synthetic generator
writes multi-session conversations between a user and an assistant: persona facts, updates
over time (a move, a new job), an explicit request to forget, distractors (friends' cities,
a neighbour's pet, places the user would like to visit), small talk, and a few paraphrases the
offline rules do not understand. Its questions follow the LoCoMo/LongMemEval categories
(``single-hop``, ``multi-hop``, ``temporal``, ``knowledge-update``, ``abstention``); each names
the turns that hold its evidence, and for each evidence turn the words a memory must keep to
still carry it.

>>> w = generate_workload(users=2, seed=7)
>>> [c.conv_id for c in w.conversations]
['user-01', 'user-02']
>>> q = w.conversations[0].questions[0]
>>> q.category, bool(q.evidence), w.conversations[0].turn(q.evidence[0].dia_id) is not None
('single-hop', True, True)
"""

from __future__ import annotations

import datetime as _dt
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from memtrace_bench.systems._facts import (
    ALLERGY,
    CAR,
    FOOD,
    FORGET,
    HAS_PET,
    HOBBY,
    LIVES_IN,
    SIBLING,
    WORKS_AS,
    Fact,
    with_article,
)
from memtrace_otel.attribution._tokens import format_date

CATEGORIES = ("single-hop", "multi-hop", "temporal", "knowledge-update", "abstention")
"""The question categories of the synthetic workload."""

ABSTENTION_ANSWER = "Not mentioned in the conversation"
"""The gold answer of abstention questions."""


@dataclass(frozen=True)
class Turn:
    """One message: ``dia_id`` is ``D<session>:<turn>`` as in LoCoMo."""

    dia_id: str
    speaker: str
    text: str
    session: int
    date: str

    def line(self) -> str:
        """The turn as a context line: ``[8 May 2023] Maya: text``."""
        return f"[{self.date}] {self.speaker}: {self.text}"


@dataclass(frozen=True)
class Session:
    """The turns of one sitting, on one date."""

    index: int
    date: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Evidence:
    """One evidence turn of a question.

    Attributes:
        dia_id: the turn.
        keys: words (normalised) a memory must contain to still carry this evidence; empty
            means "most of the turn's content words" (LoCoMo, where nothing finer is known).
        fact: what a correct extraction of this turn writes (the oracle correction).
    """

    dia_id: str
    keys: tuple[str, ...]
    fact: str


@dataclass(frozen=True)
class Question:
    """A question with its gold answers and evidence."""

    qid: str
    question: str
    gold_answers: tuple[str, ...]
    category: str
    evidence: tuple[Evidence, ...] = ()
    abstention: bool = False


@dataclass(frozen=True)
class Conversation:
    """One user's (or, in LoCoMo, one pair's) sessions and the questions about them."""

    conv_id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    _turns: dict[str, Turn] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for session in self.sessions:
            for turn in session.turns:
                self._turns[turn.dia_id] = turn

    def turn(self, dia_id: str) -> Turn | None:
        """The turn with this ``dia_id``, if any."""
        return self._turns.get(dia_id)

    def turns(self) -> Iterator[Turn]:
        """Every turn in order."""
        for session in self.sessions:
            yield from session.turns

    @property
    def today(self) -> str:
        """The date of the last session (when the questions are asked)."""
        return self.sessions[-1].date if self.sessions else ""


@dataclass(frozen=True)
class Workload:
    """Conversations to run the systems on."""

    name: str
    conversations: tuple[Conversation, ...]
    seed: int | None = None

    def conversation(self, conv_id: str) -> Conversation:
        """The conversation ``conv_id``.

        Raises:
            KeyError: no such conversation.
        """
        for conv in self.conversations:
            if conv.conv_id == conv_id:
                return conv
        raise KeyError(conv_id)


# --- the synthetic generator ------------------------------------------------------------------
_USER_NAMES = [
    "Maya",
    "Noah",
    "Lena",
    "Omar",
    "Iris",
    "Felix",
    "Clara",
    "Hugo",
    "Nina",
    "Theo",
    "Vera",
    "Jonas",
    "Ada",
    "Milo",
    "Rosa",
    "Elias",
    "Zoe",
    "Luca",
    "Mira",
    "Oscar",
    "Talia",
    "Ivan",
    "Greta",
    "Samir",
    "Hana",
    "Pablo",
    "Ingrid",
    "Kofi",
    "Lucia",
    "Anton",
    "Petra",
    "Yusuf",
    "Alma",
    "Bruno",
    "Selma",
    "Tobias",
    "Amara",
    "Viktor",
    "Elena",
    "Rafael",
]
_OTHER_NAMES = [
    "Ana",
    "Leo",
    "Tom",
    "Sara",
    "Ben",
    "Lily",
    "Max",
    "Eva",
    "Sam",
    "Ruth",
    "Paul",
    "Nora",
    "Dan",
    "Kate",
    "Finn",
    "Tess",
    "Luis",
    "Jade",
    "Carl",
    "Ines",
    "Owen",
    "Maren",
    "Axel",
    "Dora",
    "Emil",
    "Freya",
    "Gus",
    "Hilde",
    "Ike",
    "Juno",
]
_PET_NAMES = [
    "Rex",
    "Biscuit",
    "Luna",
    "Pepper",
    "Mochi",
    "Ziggy",
    "Olive",
    "Bruno",
    "Nala",
    "Kiwi",
    "Tofu",
    "Waffles",
    "Comet",
    "Pixel",
    "Maple",
    "Sunny",
    "Fig",
    "Boots",
    "Pickle",
    "Gizmo",
]
_CITIES = [
    "Lisbon",
    "Porto",
    "Madrid",
    "Berlin",
    "Vienna",
    "Prague",
    "Dublin",
    "Oslo",
    "Helsinki",
    "Zurich",
    "Munich",
    "Lyon",
    "Seville",
    "Valencia",
    "Bologna",
    "Krakow",
    "Ghent",
    "Utrecht",
    "Bergen",
    "Tallinn",
    "Riga",
    "Vilnius",
    "Bordeaux",
    "Salzburg",
    "Edinburgh",
    "Copenhagen",
    "Stockholm",
    "Budapest",
    "Ljubljana",
    "Geneva",
]
_JOBS = [
    "nurse", "teacher", "chef", "architect", "pharmacist", "photographer", "accountant",
    "journalist", "electrician", "veterinarian", "librarian", "pilot", "dentist", "baker",
    "lawyer", "software engineer", "graphic designer", "data analyst", "translator", "carpenter",
]  # fmt: skip
_COMPANIES = [
    "Brightway",
    "Medix",
    "Northwind",
    "Solvo",
    "Kestrel",
    "Lumen",
    "Orbital",
    "Tidewater",
    "Acorn",
    "Vantage",
    "Harbor",
    "Quill",
    "Meridian",
    "Cobalt",
    "Juniper",
]
_SPECIES = ["dog", "cat", "parrot", "rabbit", "hamster", "turtle"]
_HOBBIES = [
    "rock climbing", "painting", "chess", "gardening", "salsa dancing", "pottery",
    "birdwatching", "surfing", "knitting", "baking bread", "archery", "origami",
]  # fmt: skip
_FOODS = ["sushi", "lasagna", "ramen", "tacos", "paella", "curry", "pho", "falafel", "risotto"]
_ALLERGIES = ["peanuts", "shellfish", "penicillin", "pollen", "gluten", "strawberries"]
_CARS = [
    "Toyota Corolla", "Honda Civic", "Tesla Model 3", "Volkswagen Golf", "Ford Focus",
    "Subaru Outback", "Mazda CX5", "Volvo XC40",
]  # fmt: skip
_REPLIES = [
    "That's wonderful to hear!", "Thanks for sharing that with me.", "How exciting! Tell me more.",
    "I'll keep that in mind.", "That sounds lovely.", "Good to know!", "Oh, interesting!",
]  # fmt: skip
_SMALL_TALK = [
    "Hi! How are you doing today?", "Not much happening, just a quiet week.",
    "Work has been hectic lately.", "Can you recommend a good podcast?",
    "I slept badly last night.", "It's been raining all week.",
]  # fmt: skip
_HARD_RATE = 0.12


@dataclass
class _Statement:
    """A planned user message: its text, the fact it states, and its session."""

    session: int
    text: str
    fact: Fact | None = None
    tag: str = ""
    dia_id: str = ""
    date: str = ""


def _choose(rng: random.Random, pool: list[str], used: set[str]) -> str:
    choice = rng.choice([p for p in pool if p not in used])
    used.add(choice)
    return choice


def _persona_statements(rng: random.Random, name: str, sessions: int) -> list[_Statement]:
    """The user's planned statements, each tagged so questions can find their evidence."""
    used: set[str] = {name}
    city_a, city_b, city_s, city_f, city_w = (_choose(rng, _CITIES, used) for _ in range(5))
    job_1, job_2, job_s, job_f = (_choose(rng, _JOBS, used) for _ in range(4))
    org_1, org_2 = _choose(rng, _COMPANIES, used), _choose(rng, _COMPANIES, used)
    sister, friend, colleague, neighbour = (_choose(rng, _OTHER_NAMES, used) for _ in range(4))
    pet, pet_n = _choose(rng, _PET_NAMES, used), _choose(rng, _PET_NAMES, used)
    species, species_n = _choose(rng, _SPECIES, used), _choose(rng, _SPECIES, used)
    hobby, food, allergy, car = (
        rng.choice(_HOBBIES),
        rng.choice(_FOODS),
        rng.choice(_ALLERGIES),
        rng.choice(_CARS),
    )
    last = sessions - 1

    def hard() -> bool:
        return rng.random() < _HARD_RATE

    def pick(easy: list[str], difficult: list[str] | None = None) -> str:
        return rng.choice(difficult) if difficult and hard() else rng.choice(easy)

    def at(lo: int, hi: int) -> int:
        return rng.randint(min(lo, last), min(hi, last))

    move_s = at(2, 3)
    plan = [
        _Statement(0, pick([f"I live in {city_a}.", f"I've been living in {city_a} for a few years now."],
                           [f"Life in {city_a} keeps me busy, it's been my home for years."]),
                   Fact(name, LIVES_IN, city_a), "city_a"),
        _Statement(0, pick([f"I work as {with_article(job_1)} at {org_1}.", f"I'm {with_article(job_1)} at {org_1}."],
                           [f"My days are spent as {with_article(job_1)}, which I love."]),
                   Fact(name, WORKS_AS, job_1, detail=org_1), "job_1"),
        _Statement(at(0, 1), pick([f"My sister's name is {sister}.", f"I have a sister called {sister}."]),
                   Fact(name, SIBLING, sister, detail="sister"), "sister"),
        _Statement(at(1, 2), pick([f"{sister} lives in {city_s}.", f"{sister} just moved to {city_s}."]),
                   Fact(sister, LIVES_IN, city_s), "sister_city"),
        _Statement(at(2, 4), f"{sister} works as {with_article(job_s)}.", Fact(sister, WORKS_AS, job_s), "sister_job"),
        _Statement(at(1, 2), pick([f"My favourite food is {food}.", f"Nothing beats {food}, it's my favourite food."]),
                   Fact(name, FOOD, food), "food"),
        _Statement(at(1, 2), f"I'm allergic to {allergy}.", Fact(name, ALLERGY, allergy), "allergy"),
        _Statement(at(1, 3), pick([f"I've taken up {hobby} recently.", f"I really enjoy {hobby}."]),
                   Fact(name, HOBBY, hobby), "hobby"),
        _Statement(at(1, 3), pick([f"I adopted a {species} named {pet} yesterday.", f"I adopted a {species} called {pet} today!"],
                                  [f"Say hi to {pet}, the {species} I brought home today!"]),
                   Fact(name, HAS_PET, pet, detail=species, event=True), "pet"),
        _Statement(at(1, 4), pick([f"I bought a {car} today!", f"I drive a {car}."]),
                   Fact(name, CAR, car, event=True), "car"),
        _Statement(move_s, pick([f"Big news: I moved to {city_b} today!", f"I finally moved from {city_a} to {city_b} today!",
                                 f"We just relocated to {city_b} yesterday."],
                                [f"Packing is done and I'm now settled in {city_b}."]),
                   Fact(name, LIVES_IN, city_b, previous=city_a, event=True), "move"),
        _Statement(at(move_s + 1, 4), pick([f"I started a new job as {with_article(job_2)} at {org_2} today!"],
                                           [f"Today was my first day as {with_article(job_2)} at {org_2}."]),
                   Fact(name, WORKS_AS, job_2, detail=org_2, event=True), "job_2"),
        _Statement(at(0, 2), f"My friend {friend} lives in {city_f}.", None, "distractor"),
        _Statement(at(1, 3), f"My colleague {colleague} works as {with_article(job_f)}.", None, "distractor"),
        _Statement(at(2, 4), f"My neighbour {neighbour} has a {species_n} named {pet_n}.", None, "distractor"),
        _Statement(at(2, 5), f"I'd love to visit {city_w} someday.", None, "distractor"),
        _Statement(at(move_s + 1, 5), f"The weather in {city_b} has been lovely.", None, "distractor"),
        _Statement(at(1, 5), f"I tried a new {rng.choice(_FOODS)} place last weekend, it was fine.", None, "distractor"),
    ]  # fmt: skip
    if rng.random() < 0.5:
        allergy_session = next(s.session for s in plan if s.tag == "allergy")
        plan.append(
            _Statement(
                at(allergy_session + 1, 5),
                rng.choice(
                    [
                        "Please forget that I told you about my allergy.",
                        "Actually, forget what I said about being allergic.",
                    ]
                ),
                Fact(name, FORGET, ALLERGY),
                "forget",
            )
        )
    for index, text in enumerate(rng.sample(_SMALL_TALK, k=min(sessions, len(_SMALL_TALK)))):
        plan.append(_Statement(index % sessions, text))
    # Remember values the questions need, keyed by tag.
    plan.append(_Statement(-1, "", None, f"meta:{species_n}|{pet_n}"))
    return plan


def _conversation(rng: random.Random, conv_id: str, name: str, sessions: int) -> Conversation:
    plan = _persona_statements(rng, name, sessions)
    meta = next(s for s in plan if s.tag.startswith("meta:"))
    plan = [s for s in plan if s is not meta]
    start = _dt.date(2023, 1, 1) + _dt.timedelta(days=rng.randrange(200))
    dates, day = [], start
    for _ in range(sessions):
        dates.append(format_date(day))
        day += _dt.timedelta(days=rng.randint(3, 20))
    built: list[Session] = []
    for index in range(sessions):
        mine = [s for s in plan if s.session == index]
        rng.shuffle(mine)
        # Keep the order the facts must have: a move or new job after what it replaces.
        mine.sort(
            key=lambda s: {"city_a": 0, "job_1": 0, "move": 2, "job_2": 2, "forget": 3}.get(
                s.tag, 1
            )
        )
        turns: list[Turn] = []
        for statement in mine:
            for speaker, text in ((name, statement.text), ("Assistant", rng.choice(_REPLIES))):
                dia = f"D{index + 1}:{len(turns) + 1}"
                if speaker == name:
                    statement.dia_id, statement.date = dia, dates[index]
                turns.append(Turn(dia, speaker, text, index + 1, dates[index]))
        built.append(Session(index + 1, dates[index], tuple(turns)))
    species_n, _pet_n = meta.tag[5:].split("|")
    questions = _questions(rng, name, {s.tag: s for s in plan if s.tag}, species_n)
    return Conversation(conv_id, (name, "Assistant"), tuple(built), tuple(questions))


def _evidence(statement: _Statement, *keys: str) -> Evidence:
    assert statement.fact is not None
    fact = statement.fact
    if fact.event:
        dated = "today" in statement.text or "yesterday" in statement.text
        fact = Fact(
            fact.subject,
            fact.relation,
            fact.value,
            fact.detail,
            fact.previous if "from" in statement.text else None,
            _event_date(statement) if dated else None,
            dated or fact.relation == LIVES_IN,
        )
    return Evidence(statement.dia_id, keys, fact.render())


def _yesterday(date: str) -> str:
    from memtrace_otel.attribution._tokens import shift_date

    return shift_date(date, -1)


def _event_date(statement: _Statement) -> str:
    return _yesterday(statement.date) if "yesterday" in statement.text else statement.date


def _questions(
    rng: random.Random, name: str, by_tag: dict[str, _Statement], other_species: str
) -> list[Question]:
    def fact(tag: str) -> Fact:
        f = by_tag[tag].fact
        assert f is not None
        return f

    pet, sister, move = fact("pet"), fact("sister"), fact("move")
    job_2 = fact("job_2")

    def ev(tag: str, *keys: str) -> Evidence:
        return _evidence(by_tag[tag], *keys)

    abstain = (ABSTENTION_ANSWER,)
    out = [
        ("single-hop", f"What is the name of {name}'s {pet.detail}?", (pet.value,), (ev("pet", pet.value),)),
        ("single-hop", f"What is {name}'s favourite food?", (fact("food").value,), (ev("food", fact("food").value),)),
        ("single-hop", f"What is the name of {name}'s sister?", (sister.value,), (ev("sister", sister.value),)),
        ("single-hop", f"What car does {name} drive?", (fact("car").value,), (ev("car", fact("car").value),)),
        ("single-hop", f"What hobby has {name} taken up?", (fact("hobby").value,), (ev("hobby", fact("hobby").value),)),
        ("multi-hop", f"Where does {name}'s sister live?", (fact("sister_city").value,),
         (ev("sister", sister.value), ev("sister_city", fact("sister_city").value))),
        ("multi-hop", f"What does {name}'s sister do for work?", (fact("sister_job").value,),
         (ev("sister", sister.value), ev("sister_job", fact("sister_job").value))),
        ("knowledge-update", f"Where does {name} live now?", (move.value,), (ev("move", move.value),)),
        ("knowledge-update", f"What is {name}'s current job?", (job_2.value,), (ev("job_2", job_2.value),)),
        ("temporal", f"When did {name} move to {move.value}?", (_event_date(by_tag["move"]),), (ev("move", move.value),)),
        ("temporal", f"Where did {name} live before moving to {move.value}?", (fact("city_a").value,),
         (ev("city_a", fact("city_a").value), ev("move", move.value))),
        ("temporal", f"When did {name} adopt {pet.value}?", (_event_date(by_tag["pet"]),), (ev("pet", pet.value),)),
        ("abstention", f"What is the name of {name}'s {other_species}?", abstain, ()),
        ("abstention", f"Where does {name}'s brother live?", abstain, ()),
    ]  # fmt: skip
    if "forget" in by_tag:
        out.append(
            ("abstention", f"What is {name} allergic to?", abstain, (ev("forget", "forget"),))
        )
    else:
        allergy = fact("allergy").value
        out.append(
            ("single-hop", f"What is {name} allergic to?", (allergy,), (ev("allergy", allergy),))
        )
    return [
        Question(f"q{i + 1}", text, gold, cat, evidence, abstention=gold == abstain)
        for i, (cat, text, gold, evidence) in enumerate(out)
    ]


def generate_workload(users: int, seed: int = 0, *, sessions: int = 6) -> Workload:
    """A seeded synthetic workload: ``users`` conversations of ``sessions`` sessions each.

    The same ``(users, seed, sessions)`` always gives the same workload; user ``k`` is the same
    whatever ``users`` is.

    Raises:
        ValueError: fewer than 1 user, more users than names, or fewer than 4 sessions.
    """
    if users < 1 or users > len(_USER_NAMES):
        raise ValueError(f"users must be between 1 and {len(_USER_NAMES)}, got {users}")
    if sessions < 4:
        raise ValueError(f"sessions must be at least 4, got {sessions}")
    names = list(_USER_NAMES)
    random.Random(f"names:{seed}").shuffle(names)
    conversations = []
    for index in range(users):
        rng = random.Random(f"user:{seed}:{index}")
        conversations.append(_conversation(rng, f"user-{index + 1:02d}", names[index], sessions))
    return Workload(f"synthetic-{users}x{sessions}-seed{seed}", tuple(conversations), seed)

"""The suite's world: people, the facts users tell a memory app about them, and what goes wrong.

A :class:`World` is drawn from a seed. Each user (one memory store) tells the app facts about a
few people in their life; each fact is a *slot* (a person and an attribute) with a value. Every
slot gets one question, asked at the end, and one *role*: the fault planted on that question's
path, a legitimate change, or nothing. The roles:

=====================  =================  ================================================
role                   label              what the scripted model does
=====================  =================  ================================================
``plain``              correct            extracts, retrieves and answers faithfully
``moved``              correct            a later message changes the value (a move, a new
                                          job); the update follows it
``edited``             correct            the user corrects the record through the app's
                                          edit endpoint (the text the caller gave)
``omit``               ExtractionError    the extraction returns nothing for the message
``distort``            ExtractionError    the extraction states another value
``wrong_merge``        UpdateError        after a change, the merge keeps the old value (mem0
                                          2.x's clean-up job); a later fact about the same
                                          person overwrites the record (mem0 1.x's decision)
``wrong_delete``       DeletionError      a valid record is judged stale and deleted
``retrieval_miss``     RetrievalError     the question's embedding ranks distractors (other
                                          slots) above the fact
``ignore``             ResponseError      the answer states another value though the fact
                                          is in its context
``decline``            ResponseError      the answer declines though the fact is in its
                                          context
=====================  =================  ================================================

The texts are written for this suite only (``tests/test_apps_mem0.py`` checks that none of
its sentences appears in the benchmark systems' texts); questions paraphrase their facts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ATTRIBUTES",
    "FAILURE_ROLES",
    "LABEL_OF_ROLE",
    "ROLES",
    "Attribute",
    "Slot",
    "World",
    "make_world",
]


@dataclass(frozen=True)
class Attribute:
    """One kind of fact: how users state it, how memory states it, how it is asked about."""

    name: str
    intro: str  # the user's message; {rel} {name} {v}
    change: str  # a later message changing the value; {name} {old} {v}
    fact: str  # the memory text; {name} {v}
    question: str  # a paraphrase; {name}
    answer: str  # the model's answer; {name} {v}
    values: tuple[str, ...]


ATTRIBUTES: tuple[Attribute, ...] = (
    Attribute(
        "city",
        "Quick update about {rel} {name}: these days home is {v}.",
        "Big news, {name} packed up in {old} and settled in {v}.",
        "{name} lives in {v}",
        "Which town does {name} call home at the moment?",
        "{name} is based in {v}.",
        (
            "Tromsø",
            "Ljubljana",
            "Valparaíso",
            "Tbilisi",
            "Hobart",
            "Windhoek",
            "Tallinn",
            "Ushuaia",
            "Kraków",
            "Cebu",
            "Trondheim",
            "Arequipa",
        ),
    ),
    Attribute(
        "job",
        "{rel} {name} pays the rent working as a {v}.",
        "{name} handed in notice as a {old} and now works as a {v}.",
        "{name} works as a {v}",
        "What does {name} do for a living?",
        "{name} is a {v}.",
        (
            "glassblower",
            "harbour pilot",
            "beekeeper",
            "court stenographer",
            "piano tuner",
            "orthoptist",
            "luthier",
            "cartographer",
            "farrier",
            "sommelier",
            "stonemason",
        ),
    ),
    Attribute(
        "pet",
        "{rel} {name} brought home a ferret and named it {v}.",
        "{name} gave the ferret a new name: it answers to {v} instead of {old}.",
        "{name} has a ferret called {v}",
        "What is the name of the ferret that belongs to {name}?",
        "The ferret is called {v}.",
        (
            "Pickle",
            "Biscotti",
            "Marzipan",
            "Quasar",
            "Nutmeg",
            "Juniper",
            "Pretzel",
            "Dumpling",
            "Sprocket",
            "Waffles",
        ),
    ),
    Attribute(
        "instrument",
        "{rel} {name} has been practising the {v} every Thursday evening.",
        "{name} gave up the {old} and switched to the {v}.",
        "{name} is learning to play the {v}",
        "Which instrument has {name} been taking up?",
        "{name} plays the {v}.",
        (
            "oboe",
            "bassoon",
            "harp",
            "accordion",
            "sitar",
            "theremin",
            "cello",
            "marimba",
            "banjo",
            "euphonium",
        ),
    ),
    Attribute(
        "allergy",
        "Heads up: {rel} {name} gets hives from anything with {v} in it.",
        "Turns out {name} tolerates {old} fine; the real trigger is {v}.",
        "{name} is allergic to {v}",
        "Which ingredient should be kept away from {name}'s plate?",
        "Keep {v} away from {name}.",
        (
            "sesame",
            "kiwi",
            "shellfish",
            "mustard",
            "celery",
            "lupin",
            "buckwheat",
            "hazelnuts",
            "mango",
            "fennel",
        ),
    ),
    Attribute(
        "sport",
        "On weekends {rel} {name} is always out playing {v}.",
        "{name} dropped {old} for {v} this season.",
        "{name} plays {v} at weekends",
        "What game keeps {name} busy on Saturdays and Sundays?",
        "{name} spends weekends on {v}.",
        (
            "curling",
            "water polo",
            "fencing",
            "lacrosse",
            "handball",
            "korfball",
            "squash",
            "hurling",
            "ultimate frisbee",
            "bouldering",
        ),
    ),
    Attribute(
        "language",
        "{rel} {name} enrolled in evening classes for {v}.",
        "{name} stopped the {old} course and picked up {v} instead.",
        "{name} is studying {v}",
        "Which language is {name} trying to master?",
        "{name} is learning {v}.",
        (
            "Icelandic",
            "Amharic",
            "Basque",
            "Tagalog",
            "Welsh",
            "Georgian",
            "Hungarian",
            "Swahili",
            "Quechua",
            "Maltese",
        ),
    ),
)

FILLER = Attribute(
    "age",
    "",
    "",
    "{name} recently turned {v}",
    "",
    "",
    tuple(str(n) for n in range(23, 71)),
)
"""Facts that trigger a planted deletion in the classic pipeline (no question of their own)."""
FILLER_MESSAGE = "By the way, {name} celebrated turning {v} over the weekend."

NAMES = (
    "Oksana",
    "Berit",
    "Tamsin",
    "Ikaika",
    "Zofia",
    "Emeka",
    "Solveig",
    "Rafferty",
    "Yusra",
    "Caetano",
    "Marit",
    "Anouk",
    "Dagny",
    "Lorcan",
    "Itzel",
    "Kasimir",
    "Ottilie",
    "Bashir",
    "Nneka",
    "Thorsten",
    "Ilse",
    "Paavo",
    "Ximena",
    "Radomir",
    "Saoirse",
    "Tevita",
    "Greer",
    "Ludovic",
    "Henrike",
    "Amadou",
)
RELATIONS = (
    "my neighbour",
    "my cousin",
    "my old flatmate",
    "my climbing partner",
    "my aunt",
    "my colleague",
    "my godson",
    "my brother-in-law",
    "my running buddy",
    "my landlady",
)

ROLES = (
    "plain",
    "moved",
    "edited",
    "omit",
    "distort",
    "wrong_merge",
    "wrong_delete",
    "retrieval_miss",
    "ignore",
    "decline",
)
LABEL_OF_ROLE = {
    "plain": None,
    "moved": None,
    "edited": None,
    "omit": "ExtractionError",
    "distort": "ExtractionError",
    "wrong_merge": "UpdateError",
    "wrong_delete": "DeletionError",
    "retrieval_miss": "RetrievalError",
    "ignore": "ResponseError",
    "decline": "ResponseError",
}
FAILURE_ROLES = tuple(r for r, label in LABEL_OF_ROLE.items() if label is not None)
DECLINE = "Sorry, I don't have that information."
"""What the scripted model answers when its context lacks the fact (and for ``decline``)."""


@dataclass
class Slot:
    """One fact about one person, its question and its role."""

    key: str  # "<user>/<person>/<attribute>"
    user: str
    person: str
    relation: str
    attribute: Attribute
    value: str  # the first value the user states
    role: str
    topic: int  # the embedding dimension of this slot (unique within its user)
    person_topic: int
    new_value: str | None = None  # moved / edited / wrong_merge: the later value
    wrong_value: str | None = None  # distort / ignore: the value the model states instead
    distractors: list[str] = field(default_factory=list)  # retrieval_miss: slot keys
    filler_value: str | None = None  # wrong_delete, classic wrong_merge: the trigger fact
    classic: bool = False  # the world of mem0 1.x's classic pipeline

    @property
    def changes(self) -> bool:
        """Whether a later message changes the value."""
        if self.role == "wrong_merge":
            return not self.classic
        return self.role == "moved"

    @property
    def gold(self) -> str:
        """The answer that is right at question time."""
        if self.role in ("moved", "edited") or (self.role == "wrong_merge" and not self.classic):
            assert self.new_value is not None
            return self.new_value
        return self.value

    @property
    def label(self) -> str | None:
        return LABEL_OF_ROLE[self.role]

    def fact(self, value: str) -> str:
        return self.attribute.fact.format(name=self.person, v=value)

    @property
    def intro(self) -> str:
        text = self.attribute.intro.format(rel=self.relation, name=self.person, v=self.value)
        return text[0].upper() + text[1:]

    @property
    def change(self) -> str:
        assert self.new_value is not None
        return self.attribute.change.format(name=self.person, old=self.value, v=self.new_value)

    @property
    def question(self) -> str:
        return self.attribute.question.format(name=self.person)

    def answer(self, value: str) -> str:
        return self.attribute.answer.format(name=self.person, v=value)

    @property
    def filler_message(self) -> str:
        assert self.filler_value is not None
        return FILLER_MESSAGE.format(name=self.person, v=self.filler_value)

    @property
    def filler_fact(self) -> str:
        assert self.filler_value is not None
        return FILLER.fact.format(name=self.person, v=self.filler_value)


@dataclass
class World:
    """Every user's slots, in the order they are told."""

    seed: int
    slots: list[Slot]
    dims: int
    classic: bool = False

    def users(self) -> list[str]:
        return sorted({s.user for s in self.slots})

    def of_user(self, user: str) -> list[Slot]:
        return [s for s in self.slots if s.user == user]

    def by_key(self) -> dict[str, Slot]:
        return {s.key: s for s in self.slots}

    def plan(self) -> dict[str, Any]:
        """What an app does, user by user: two sessions of messages, edits, then questions.

        Session 1 introduces every slot; session 2 brings the changes (and the classic trigger
        facts of planted deletions). Apps run their clean-up job after each session.
        """
        users = []
        for user in self.users():
            slots = self.of_user(user)
            first = [s.intro for s in slots]
            second = []
            for s in slots:
                if s.changes:
                    second.append(s.change)
                if s.filler_value is not None:
                    second.append(s.filler_message)
            edits = [
                {"find": s.fact(s.value), "text": s.fact(s.new_value or s.value)}
                for s in slots
                if s.role == "edited"
            ]
            questions = [{"slot": s.key, "question": s.question} for s in slots]
            users.append(
                {"user": user, "sessions": [first, second], "edits": edits, "questions": questions}
            )
        return {"seed": self.seed, "users": users}


def make_world(
    seed: int = 0,
    per_role: dict[str, int] | None = None,
    people: int = 4,
    *,
    classic: bool = False,
) -> World:
    """Draw a world: ``per_role`` questions of each role (default: the bench's size), spread over
    users of ``people`` people with one slot per attribute at most. ``classic``: for mem0 1.x,
    whose own decisions make the planted merges (on a later fact about the same person)."""
    rng = random.Random(seed)
    counts = dict(per_role) if per_role is not None else default_sizes()
    roles = [role for role in ROLES for _ in range(counts.get(role, 0))]
    rng.shuffle(roles)
    per_user = people * len(ATTRIBUTES) // 2  # half the person x attribute grid
    slots: list[Slot] = []
    names = list(NAMES)
    rng.shuffle(names)
    user_index = 0
    while roles:
        user = f"user-{seed}-{user_index}"
        user_index += 1
        chosen = [names.pop() if names else f"Person{len(slots)}" for _ in range(people)]
        relations = rng.sample(RELATIONS, people)
        grid = [(p, a) for p in range(people) for a in range(len(ATTRIBUTES))]
        rng.shuffle(grid)
        batch, roles = roles[:per_user], roles[per_user:]
        batch += ["plain"] * max(0, 6 - len(batch))  # enough slots for three distractors
        for topic, (role, (p, a)) in enumerate(zip(batch, grid, strict=False)):
            attribute = ATTRIBUTES[a]
            values = rng.sample(attribute.values, 3)
            slot = Slot(
                key=f"{user}/{chosen[p]}/{attribute.name}",
                user=user,
                person=chosen[p],
                relation=relations[p],
                attribute=attribute,
                value=values[0],
                role=role,
                topic=topic,
                person_topic=per_user + p,
                classic=classic,
            )
            if role in ("moved", "edited") or (role == "wrong_merge" and not classic):
                slot.new_value = values[1]
            if role in ("distort", "ignore"):
                slot.wrong_value = values[2]
            if role == "wrong_delete" or (role == "wrong_merge" and classic):
                slot.filler_value = rng.choice(FILLER.values)
            slots.append(slot)
        mine = [s for s in slots if s.user == user]
        for slot in mine:
            if slot.role == "retrieval_miss":
                others = [
                    s
                    for s in mine
                    if s.person != slot.person and s.role not in ("omit", "wrong_delete")
                ]
                others.sort(key=lambda s: (s.attribute.name != slot.attribute.name, s.topic))
                slot.distractors = [s.key for s in others[:3]]
    dims = people * len(ATTRIBUTES) // 2 + people + 8
    return World(seed, slots, dims, classic)


def default_sizes() -> dict[str, int]:
    """The bench's mix: >= 35 failures, >= 5 per label after drops, >= 8 correct answers."""
    return {
        "plain": 5,
        "moved": 3,
        "edited": 2,
        "omit": 4,
        "distort": 4,
        "wrong_merge": 7,
        "wrong_delete": 7,
        "retrieval_miss": 8,
        "ignore": 4,
        "decline": 4,
    }

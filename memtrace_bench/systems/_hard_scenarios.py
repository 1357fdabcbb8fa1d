"""Scenarios of the hard benchmark: LoCoMo conversations with planted facts and one recipe each.

A store takes a few sessions of a LoCoMo conversation (its speakers, dates and turns, a handful
of turns per session), plants facts among the turns (the main speaker's home, job, team, sister,
pet and events; the other speaker's and a friend's, which make wrong answers plausible), asks
one question the recipe means to break and two or three it leaves alone, and names the faults.
Recipes are drawn per system with weights; modifiers (paraphrased evidence, retrieve ops that
list only the query, dropped lists, a second filter, consolidation) are drawn independently.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from memtrace_bench.systems._hard import Fault, HCase, HSession, HTurn, Scenario
from memtrace_bench.systems._hard_facts import (
    CITIES,
    EVENTS,
    JOBS,
    NAMES,
    PET_NAMES,
    TEAMS,
    Fact,
    make_fact,
    question_text,
    slot,
)
from memtrace_bench.systems._workload import Conversation

RECIPES: dict[str, dict[str, float]] = {
    "long_context": {
        "entity_swap": 2, "date_loss": 2, "name_loss": 2, "masked_loss": 2, "link_loss": 2,
        "stale_read": 2, "trim_cut": 2, "budget_cut": 1, "retrieval_miss": 1, "wrong_answer": 1,
        "lossy_update": 1,
    },
    "rag": {
        "chunk_drop": 2, "buffer_loss": 2, "retrieval_miss": 2, "unlisted_miss": 2,
        "filter_drop": 2, "second_filter_drop": 2, "link_lead_miss": 2, "link_loss": 1,
        "evict": 2, "budget_cut": 1, "wrong_answer": 1,
    },
    "mem0": {
        "entity_swap": 2, "date_loss": 2, "name_loss": 1, "masked_loss": 2, "link_loss": 2,
        "none_discard": 3, "stale_read": 2, "consolidation_loss": 2, "spurious_delete": 2,
        "filter_drop": 1, "second_filter_drop": 1, "branch_survival": 2, "budget_cut": 1,
        "wrong_answer": 1, "drop_fact": 1,
    },
    "evermemos": {
        "entity_swap": 2, "date_loss": 2, "name_loss": 2, "masked_loss": 2, "link_loss": 2,
        "consolidation_loss": 2, "round2_recovered": 2, "filter_drop": 1, "retrieval_miss": 1,
        "stale_read": 1,
        "budget_cut": 1, "wrong_answer": 1, "drop_fact": 1, "evict": 1,
    },
}  # fmt: skip
"""Recipes per system, with their weights."""


@dataclass
class Builder:
    """Plants facts into a conversation slice and collects cases and faults."""

    system: str
    store_id: str
    rng: random.Random
    conv: Conversation
    speakers: tuple[str, str]
    n_sessions: int
    first: int
    paraphrase: bool
    plants: dict[int, list[tuple[str, Fact]]] = field(default_factory=dict)
    cases: list[HCase] = field(default_factory=list)
    faults: dict[str, Fault] = field(default_factory=dict)
    config: dict[str, object] = field(default_factory=dict)
    evidence: dict[str, tuple[Fact, ...]] = field(default_factory=dict)
    """The planted facts each question's evidence messages state, by question id."""

    @property
    def me(self) -> str:
        return self.speakers[0]

    @property
    def you(self) -> str:
        return self.speakers[1]

    def date(self, session: int) -> str:
        return self.conv.sessions[self.first + session - 1].date

    def plant(self, session: int, fact: Fact, speaker: str | None = None) -> Fact:
        """Plant a fact in a session (1-based), said by ``speaker`` (default: its subject)."""
        self.plants.setdefault(session, []).append((speaker or fact.subject, fact))
        return fact

    def fact(
        self, kind: str, session: int, subject: str | None = None, *, value: str = "",
        extra: str = "", paraphrase: bool = False, speaker: str | None = None,
    ) -> Fact:  # fmt: skip
        fact = make_fact(
            self.rng, kind, subject or self.me, self.date(session), value=value, extra=extra,
            paraphrase=paraphrase,
        )  # fmt: skip
        return self.plant(session, fact, speaker)

    def friend_city(self, session: int, city: str) -> Fact:
        """``My friend F just moved to Z``: someone else's city, said by the main speaker."""
        friend = self.rng.choice(NAMES)
        fact = make_fact(self.rng, "city", friend, self.date(session), value=city)
        text = self.rng.choice(
            [
                f"My friend {friend} just moved to {city}, so I'll visit a lot.",
                f"{friend}, an old friend of mine, has relocated to {city}.",
                f"Did I tell you {friend} moved to {city}? Still can't believe it.",
            ]
        )
        return self.plant(session, replace(fact, message=text), self.me)

    def case(
        self, kind: str, gold: str, needed: Sequence[Fact], chain: tuple[str, ...],
        *, want: str = "value", category: str = "single-hop", intended: str | None = None,
        extra: str = "", phenomena: Sequence[str] = (),
    ) -> None:  # fmt: skip
        qid = f"q{len(self.cases) + 1}"
        claims = frozenset(
            c for f in needed for c in f.claims if any(c.slot == t or "{}" in t for t in chain)
        )  # a multi-hop chain needs every claim of its facts
        tags = list(phenomena)
        if intended is not None and any(f.paraphrased for f in needed):
            tags.append("paraphrase")
        self.evidence[qid] = tuple(needed)
        self.cases.append(
            HCase(
                qid, question_text(self.rng, kind, self.me, extra), chain, want, gold,
                claims, (), category, tuple(tags), intended,
            )
        )  # fmt: skip

    def fault(self, key: str, name: str, arg: str = "", other: str = "") -> None:
        self.faults[key] = Fault(name, arg, other)


def _pick_other(rng: random.Random, pool: Sequence[str], *avoid: str) -> str:
    options = [p for p in pool if p not in avoid]
    return options[rng.randrange(len(options))]


# --- recipes: each plants the target facts, asks the target question and names the faults ---------
Recipe = Callable[[Builder], None]


def _city_move(b: Builder, *, paraphrase: bool) -> tuple[Fact, Fact, str]:
    """Old city in session 1, the move in session 2, the other speaker's city: (old, new, other)."""
    old_city, new_city, third = b.rng.sample(sorted(CITIES), 3)
    old = b.fact("city", 1, value=old_city)
    new = b.fact("city", 2, value=new_city, paraphrase=paraphrase)
    b.fact("city", 1, b.you, value=third)
    return old, new, third


def _ask_city(b: Builder, new: Fact, intended: str | None, *tags: str) -> None:
    b.case("city", new.value, [new], (slot(b.me, "city"),), category="knowledge-update",
           intended=intended, phenomena=tags)  # fmt: skip


def entity_swap(b: Builder) -> None:
    _old, new, third = _city_move(b, paraphrase=b.paraphrase)
    key = {
        "mem0": f"dec:fact:{b.store_id}:{{dia}}:1",
        "long_context": "sum:3",
        "evermemos": "prof:2",
    }[b.system]
    b.fault(key, "entity_swap", slot(b.me, "city"), other=third)
    _ask_city(b, new, key, "entity_swap")


def date_loss(b: Builder) -> None:
    event = b.rng.choice(sorted(EVENTS))
    fact = b.fact("event", 2, extra=event, paraphrase=b.paraphrase)
    key = {"mem0": "fx:{dia}", "long_context": "sum:3", "evermemos": "mc:2"}[b.system]
    b.fault(key, "date_loss", fact.claims[0].slot)
    b.case("event", fact.value, [fact], (fact.claims[0].slot,), want="date", category="temporal",
           intended=key, extra=event, phenomena=["date_loss"])  # fmt: skip


def name_loss(b: Builder) -> None:
    sister = b.fact("sister", 1)
    if b.system == "mem0":
        # A later message about the sister's new job: the update keeps the job, loses the name.
        job = _pick_other(b.rng, sorted(JOBS), sister.extra)
        later = b.fact("sister", 2, value=sister.value, extra=job)
        key = f"dec:fact:{b.store_id}:{{dia}}:1"
        b.fault(key, "name_loss", slot(b.me, "sister"))
        b.case("sister", later.value, [later], (slot(b.me, "sister"),), intended=key,
               phenomena=["name_loss"])  # fmt: skip
        return
    b.fact("job", 2)  # a later profile rewrite, which is where the name goes
    key = {"long_context": "sum:3", "evermemos": "prof:2"}[b.system]
    b.fault(key, "name_loss", slot(b.me, "sister"))
    b.case("sister", sister.value, [sister], (slot(b.me, "sister"),), intended=key,
           phenomena=["name_loss"])  # fmt: skip


def _teams(b: Builder) -> tuple[Fact, Fact, Fact, Fact]:
    """Old team and its lead (session 1); the new team (session 2) and its lead."""
    t1, t2 = b.rng.sample(TEAMS, 2)
    b1, b2 = b.rng.sample(NAMES, 2)
    old_team = b.fact("team", 1, value=t1)
    b.fact("lead", 1, t1, value=b1, extra=t1, speaker=b.rng.choice(b.speakers))
    lead = b.fact("lead", 1, t2, value=b2, extra=t2, speaker=b.rng.choice(b.speakers))
    new_team = b.fact("team", 2, value=t2)
    return old_team, new_team, lead, old_team


def _ask_boss(b: Builder, new_team: Fact, lead: Fact, intended: str | None, *tags: str) -> None:
    b.case("boss", lead.value, [new_team, lead], (slot(b.me, "team"), "{}.lead"),
           category="multi-hop", intended=intended, phenomena=["multi_hop", *tags])  # fmt: skip


def link_loss(b: Builder) -> None:
    old_team, new_team, lead, _ = _teams(b)
    arg = slot(b.me, "team")
    if b.system == "mem0":
        key = f"dec:fact:{b.store_id}:{{dia}}:1"
        b.fault(key, "keep_old", arg)
    elif b.system == "long_context":
        key = "mu:{dia}"
        b.fault(key, "lossy_update", arg)
    elif b.system == "evermemos":
        key = "prof:2"
        b.fault(key, "entity_swap", arg, other=old_team.value)
    else:
        key = "chunk:{chunk}"
        b.fault(key, "drop_line", arg)
    _ask_boss(b, new_team, lead, key, "link_lost")


def link_lead_miss(b: Builder) -> None:
    _, new_team, lead, _ = _teams(b)
    key = "ret:{qid}"
    b.fault(key, "retrieval_miss", lead.claims[0].slot)
    _ask_boss(b, new_team, lead, key, "answer_fact_lost")


def masked_loss(b: Builder) -> None:
    old, new, third = _city_move(b, paraphrase=b.paraphrase)
    friend = b.friend_city(3, _pick_other(b.rng, sorted(CITIES), old.value, new.value, third))
    arg = slot(b.me, "city")
    early = {"mem0": "fx:{dia}", "long_context": "mu:{dia}", "evermemos": "mc:2"}[b.system]
    later = {"mem0": "fx:{friend}", "long_context": "sum:4", "evermemos": "prof:3"}[b.system]
    early_name = {"mem0": "drop_fact", "long_context": "lossy_update", "evermemos": "drop_fact"}
    b.fault(early, early_name[b.system], arg)
    b.fault(later, "misattribute", arg, other=friend.claims[0].slot)
    _ask_city(b, new, early, "masked_loss")


def stale_read(b: Builder) -> None:
    key = "ret:{qid}"
    if b.system == "evermemos":
        # the scene consolidation rewrote episode 1 to hold episode 2 (the pet); a lagging
        # replica still returns episode 1's first version
        b.config["consolidate_at"] = (3,)
        b.config["round2"] = False
        pet = b.fact("pet", 2)
        b.fault(key, "stale_read", slot(b.me, "pet"))
        b.case("pet", pet.value, [pet], (slot(b.me, "pet"),), intended=key, extra=pet.extra,
               phenomena=["stale_read", "consolidation_tombstone"])  # fmt: skip
        return
    _old, new, _ = _city_move(b, paraphrase=b.paraphrase)
    b.fault(key, "stale_read", slot(b.me, "city"))
    _ask_city(b, new, key, "stale_read")


def trim_cut(b: Builder) -> None:
    pet = b.fact("pet", 1)
    b.config["window_tokens"] = b.rng.choice([140, 170, 200])
    b.case("pet", pet.value, [pet], (slot(b.me, "pet"),), intended="trim:*", extra=pet.extra,
           phenomena=["budget_cut"])  # fmt: skip


def budget_cut(b: Builder) -> None:
    job = b.fact("job", b.rng.choice([1, 2]), paraphrase=b.paraphrase)
    key = "asm:{qid}"
    b.fault(key, "budget_cut", slot(b.me, "job"))
    b.case("job", job.value, [job], (slot(b.me, "job"),), intended=key, phenomena=["budget_cut"])


def retrieval_miss(b: Builder, tag: str = "retrieval_miss") -> None:
    pet = b.fact("pet", b.rng.choice([1, 2]))
    if b.system == "evermemos":
        b.config["round2"] = False  # agentic (multi-query) retrieval switched off
    key = "ret:{qid}"
    b.fault(key, "retrieval_miss", slot(b.me, "pet"))
    b.case("pet", pet.value, [pet], (slot(b.me, "pet"),), intended=key, extra=pet.extra,
           phenomena=[tag])  # fmt: skip


def unlisted_miss(b: Builder) -> None:
    b.config["query_only"] = True
    retrieval_miss(b, "stored_not_listed")


def wrong_answer(b: Builder) -> None:
    _old, new, _third = _city_move(b, paraphrase=b.paraphrase)
    key = "gen:{qid}"
    b.fault(key, "wrong_answer")
    _ask_city(b, new, key, "wrong_answer")


def lossy_update(b: Builder) -> None:
    job = b.fact("job", 1, paraphrase=b.paraphrase)
    key = "mu:{dia}" if b.system == "long_context" else "bu:{next}"
    b.fault(key, "lossy_update", slot(b.me, "job"))
    b.case("job", job.value, [job], (slot(b.me, "job"),), intended=key, phenomena=["lossy_update"])


def chunk_drop(b: Builder) -> None:
    job = b.fact("job", b.rng.choice([1, 2]), paraphrase=b.paraphrase)
    key = "chunk:{chunk}"
    b.fault(key, "drop_line", slot(b.me, "job"))
    b.case("job", job.value, [job], (slot(b.me, "job"),), intended=key, phenomena=["drop_fact"])


def buffer_loss(b: Builder) -> None:
    lossy_update(b)


def filter_drop(b: Builder, key: str = "rr:{qid}", tag: str = "filter_dropped_list") -> None:
    b.config["dropped_list"] = True
    pet = b.fact("pet", b.rng.choice([1, 2]))
    b.fault(key, "filter_drop", slot(b.me, "pet"))
    b.case("pet", pet.value, [pet], (slot(b.me, "pet"),), intended=key, extra=pet.extra,
           phenomena=[tag])  # fmt: skip


def second_filter_drop(b: Builder) -> None:
    b.config["second_filter"] = True
    if b.rng.random() < 0.5:
        filter_drop(b, "dd:{qid}", "two_filters")
    else:
        filter_drop(b, "rr:{qid}", "two_filters")


def evict(b: Builder) -> None:
    pet = b.fact("pet", 1)
    key = "evict:2"
    b.fault(key, "spurious_delete", slot(b.me, "pet"))
    b.case("pet", pet.value, [pet], (slot(b.me, "pet"),), intended=key, extra=pet.extra,
           phenomena=["spurious_delete"])  # fmt: skip


def spurious_delete(b: Builder) -> None:
    job = b.fact("job", 1, paraphrase=b.paraphrase)
    key = "del:{filler2}"
    b.fault(key, "spurious_delete", slot(b.me, "job"))
    b.case("job", job.value, [job], (slot(b.me, "job"),), intended=key,
           phenomena=["spurious_delete"])  # fmt: skip


def none_discard(b: Builder) -> None:
    _old, new, _ = _city_move(b, paraphrase=b.paraphrase)
    key = f"dec:fact:{b.store_id}:{{dia}}:1"
    b.fault(key, "none_discard", slot(b.me, "city"))
    _ask_city(b, new, key, "none_discard")


def consolidation_loss(b: Builder) -> None:
    if b.system == "evermemos":
        b.config["consolidate_at"] = (3,)
        pet = b.fact("pet", 1)
        key = "scene:3"
    else:
        b.config["consolidate_at"] = (2,)
        pet = b.fact("pet", 1)
        b.fact("job", 1)
        key = "cons:2"
    b.fault(key, "consolidation_loss", slot(b.me, "pet"))
    b.case("pet", pet.value, [pet], (slot(b.me, "pet"),), intended=key, extra=pet.extra,
           phenomena=["consolidation_tombstone"])  # fmt: skip


def drop_fact(b: Builder) -> None:
    job_or_pet = "pet" if b.system == "evermemos" else "job"
    fact = b.fact(job_or_pet, 2, paraphrase=b.paraphrase and job_or_pet == "job")
    key = "fx:{dia}" if b.system == "mem0" else "mc:2"
    b.fault(key, "drop_fact", fact.claims[0].slot)
    b.case(job_or_pet, fact.value, [fact], (fact.claims[0].slot,), intended=key,
           extra=fact.extra, phenomena=["drop_fact"])  # fmt: skip


def branch_survival(b: Builder) -> None:
    """mem0: the first statement is not extracted, a later restatement is; the loss that decides
    comes later (a filter)."""
    city = b.rng.choice(sorted(CITIES))
    first = b.fact("city", 1, value=city, paraphrase=b.paraphrase)
    again = make_fact(b.rng, "city", b.me, b.date(2), value=city, paraphrase=not b.paraphrase)
    b.plant(2, again)
    b.fault("fx:{dia}", "drop_fact", slot(b.me, "city"))
    b.config["dropped_list"] = True
    b.fault("rr:{qid}", "filter_drop", slot(b.me, "city"))
    b.case("city", city, [again], (slot(b.me, "city"),), intended="rr:{qid}",
           phenomena=["branch_survival", "filter_dropped_list"])  # fmt: skip
    b.config["_first"] = id(first)


def round2_recovered(b: Builder) -> None:
    """evermemos: round one misses the episode, round two finds it; the final rerank drops it."""
    pet = b.fact("pet", 1)
    b.fault("ret:{qid}", "retrieval_miss", slot(b.me, "pet"))
    b.fault("rr:{qid}", "filter_drop", slot(b.me, "pet"))
    b.config["dropped_list"] = True
    b.case("pet", pet.value, [pet], (slot(b.me, "pet"),), intended="rr:{qid}", extra=pet.extra,
           phenomena=["branch_survival", "filter_dropped_list"])  # fmt: skip


RECIPE_FUNCS: dict[str, Recipe] = {
    "entity_swap": entity_swap, "date_loss": date_loss, "name_loss": name_loss,
    "masked_loss": masked_loss, "link_loss": link_loss, "link_lead_miss": link_lead_miss,
    "stale_read": stale_read, "trim_cut": trim_cut, "budget_cut": budget_cut,
    "retrieval_miss": retrieval_miss, "unlisted_miss": unlisted_miss,
    "wrong_answer": wrong_answer, "lossy_update": lossy_update, "chunk_drop": chunk_drop,
    "buffer_loss": buffer_loss, "filter_drop": filter_drop,
    "second_filter_drop": second_filter_drop, "evict": evict,
    "spurious_delete": spurious_delete, "none_discard": none_discard,
    "consolidation_loss": consolidation_loss, "drop_fact": drop_fact,
    "branch_survival": branch_survival, "round2_recovered": round2_recovered,
}  # fmt: skip


def _controls(b: Builder, recipe: str) -> None:
    """Questions the recipe leaves alone (meant to be answered right)."""
    used = {c.slot for facts in b.plants.values() for _, f in facts for c in f.claims}
    if slot(b.me, "job") not in used and recipe not in ("consolidation_loss",):
        job = b.fact("job", 1 if b.rng.random() < 0.5 else 2)
        b.case("job", job.value, [job], (slot(b.me, "job"),))
    if slot(b.me, "pet") not in used:
        pet = b.fact("pet", 2, value=b.rng.choice(PET_NAMES))
        b.case("pet", pet.value, [pet], (slot(b.me, "pet"),), extra=pet.extra)
    if not any(s.startswith(slot(b.me, "event:")) for s in used):
        event = b.rng.choice(sorted(EVENTS))
        fact = b.fact("event", b.n_sessions, extra=event)
        b.case("event", fact.value, [fact], (fact.claims[0].slot,), want="date",
               category="temporal", extra=event)  # fmt: skip


def build_scenario(
    system: str, index: int, conversations: Sequence[Conversation], seed: int
) -> Scenario:
    """The ``index``-th hard store of ``system`` (deterministic in ``seed``)."""
    rng = random.Random(f"{seed}:{system}:{index}")
    conv = conversations[index % len(conversations)]
    names = RECIPES[system]
    recipe = rng.choices(sorted(names), weights=[names[n] for n in sorted(names)])[0]
    n_sessions = 4
    first = rng.randrange(0, max(1, len(conv.sessions) - n_sessions))
    speakers = conv.speakers if rng.random() < 0.5 else tuple(reversed(conv.speakers))
    store_id = f"{system}:hard-{index:03d}"
    b = Builder(
        system, store_id, rng, conv, (speakers[0], speakers[1]), n_sessions, first,
        paraphrase=rng.random() < 0.45,
    )  # fmt: skip
    RECIPE_FUNCS[recipe](b)
    _controls(b, recipe)
    modifiers = []
    if "query_only" not in b.config and rng.random() < 0.5:
        b.config["query_only"] = True
    if b.config.get("query_only"):
        modifiers.append("query_only_retrieve")
    if rng.random() < 0.25:
        b.config["no_source_refs"] = True
        modifiers.append("no_source_refs")
    if "dropped_list" not in b.config:
        b.config["dropped_list"] = rng.random() < 0.6
    if system in ("mem0", "rag") and "second_filter" not in b.config and rng.random() < 0.3:
        b.config["second_filter"] = True
    if system in ("mem0", "evermemos") and "consolidate_at" not in b.config and rng.random() < 0.5:
        b.config["consolidate_at"] = (3,)
        modifiers.append("consolidation_kept")
    sessions = _sessions(b)
    keys = _resolve_keys(b, sessions)
    faults = {resolved: b.faults[template] for template, resolved in keys.items()}
    cases = tuple(_resolve_case(c, b.evidence[c.qid], sessions, keys) for c in b.cases)
    config = {k: v for k, v in b.config.items() if not k.startswith("_")}
    return Scenario(
        system, store_id, conv.conv_id, (b.me, b.you), sessions, cases, faults, config,
        (recipe, *modifiers),
    )  # fmt: skip


def _sessions(b: Builder) -> tuple[HSession, ...]:
    out = []
    for s in range(1, b.n_sessions + 1):
        source = b.conv.sessions[b.first + s - 1]
        filler = [t for t in source.turns if len(t.text.split()) <= 40][: b.rng.randint(4, 7)]
        turns: list[tuple[str, str, Fact | None]] = [(t.speaker, t.text, None) for t in filler]
        for speaker, fact in b.plants.get(s, []):
            turns.insert(b.rng.randint(1, len(turns)), (speaker, fact.message, fact))
        out.append(
            HSession(
                s, source.date,
                tuple(HTurn(f"D{s}:{i + 1}", sp, text, source.date, fact)
                      for i, (sp, text, fact) in enumerate(turns)),
            )
        )  # fmt: skip
    return tuple(out)


def _dia_of(fact: Fact, sessions: Sequence[HSession]) -> str:
    for session in sessions:
        for turn in session.turns:
            if turn.fact is fact:
                return turn.dia_id
    raise KeyError(fact.message)


def _resolve_keys(b: Builder, sessions: Sequence[HSession]) -> dict[str, str]:
    """Fault keys with their placeholders filled (``{dia}``: the turn stating the fact the fault
    aims at, ``{qid}``: the target case, ...), by template."""
    target = next(c.qid for c in b.cases if c.intended is not None)
    return {key: _resolve(key, fault, b, sessions, target) for key, fault in b.faults.items()}


def _resolve(key: str, fault: Fault, b: Builder, sessions: Sequence[HSession], qid: str) -> str:
    turns = [t for s in sessions for t in s.turns]

    def stating(slot_name: str) -> list[HTurn]:
        return [
            t
            for t in turns
            if t.fact is not None and any(c.slot == slot_name for c in t.fact.claims)
        ]

    if "{qid}" in key:
        return key.replace("{qid}", qid)
    if "{friend}" in key:
        return key.replace("{friend}", stating(fault.other)[0].dia_id)
    if "{dia}" in key:
        hits = stating(fault.arg)
        if fault.name == "drop_fact" and "_first" in b.config:
            return key.replace("{dia}", hits[0].dia_id)
        if fault.name in ("drop_fact", "lossy_update") and key.startswith("mu:"):
            # long_context: the memory update of the turn after the one stating the fact
            last = hits[-1]
            index = turns.index(last)
            return key.replace("{dia}", turns[index + 1].dia_id)
        return key.replace("{dia}", hits[-1].dia_id)
    if "{next}" in key:
        last = stating(fault.arg)[-1]
        index = turns.index(last)
        return key.replace("{next}", turns[index + 1].dia_id)
    if "{chunk}" in key:
        return key.replace("{chunk}", str(_chunk_of(b, sessions, stating(fault.arg)[-1])))
    if "{filler2}" in key:
        session = sessions[1]
        filler = [t for t in session.turns if t.fact is None]
        return key.replace("{filler2}", filler[-1].dia_id)
    return key


def _chunk_of(b: Builder, sessions: Sequence[HSession], turn: HTurn) -> int:
    """Which rag chunk a turn lands in (chunks close every ``chunk_turns`` turns or at a
    session's end)."""
    size = int(b.config.get("chunk_turns", 6))  # type: ignore[call-overload]
    chunk, filled = 1, 0
    for session in sessions:
        for t in session.turns:
            filled += 1
            if t is turn:
                return chunk
            if filled >= size:
                chunk, filled = chunk + 1, 0
        if filled:
            chunk, filled = chunk + 1, 0
    raise KeyError(turn.dia_id)


def _resolve_case(
    case: HCase, evidence: Sequence[Fact], sessions: Sequence[HSession], keys: dict[str, str]
) -> HCase:
    intended = case.intended
    if intended is not None:
        intended = keys.get(intended, intended)  # "trim:*": any op of that name
    return replace(case, evidence=tuple(_dia_of(f, sessions) for f in evidence), intended=intended)

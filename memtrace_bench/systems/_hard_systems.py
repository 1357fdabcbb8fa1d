"""The four system styles of the hard benchmark, as pipelines over :class:`~._hard.Run`.

Op names and shapes follow the reference systems (``docs/systems.md``) and contract v0.2:
retrieve ops may list only the query (``query_only``), filters write what they dropped as an
``other`` variable (``dropped_list``), mem0's decisions are recorded by what they did (a NONE
is an ``update`` with the fact as input and no output), consolidations write the merged record
and tombstone the others in one ``update`` op.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace

from memtrace_bench.systems._hard import (
    Fault,
    HCase,
    HSession,
    HTurn,
    Line,
    Mode,
    Rec,
    Run,
    Scenario,
    apply_line_fault,
    candidates_rec,
    hits_fault,
    judged,
    keep_needed,
    memory_line,
    message_rec,
    rank,
    read_answer,
    slots_of,
    tokens_of,
    transcript_line,
    when_of,
)
from memtrace_bench.systems._hard_facts import Claim, render
from memtrace_otel.semconv import Category, OpKind, Stage


def execute(sc: Scenario, mode: Mode | None = None, only: str | None = None) -> Run:
    """Run the scenario's system (only the question ``only`` when given)."""
    run = Run(sc, mode or Mode())
    pipeline = PIPELINES[sc.system](run)
    for session in sc.sessions:
        pipeline.ingest(session)
    for case in sc.cases:
        if only is None or case.qid == only:
            pipeline.ask(case)
    return run


class Pipeline(ABC):
    """What the four systems share: sessions, questions, the question-time op chain."""

    name = ""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.sc = run.sc
        self.cfg = run.sc.config

    # -- construction ----------------------------------------------------------------------------
    def ingest(self, session: HSession) -> None:
        run = self.run
        root = run.root(f"{self.name}.ingest_session")
        messages = [run.write(root, message_rec(self.sc, t)) for t in session.turns]
        for turn, message in zip(session.turns, messages, strict=True):
            self.on_turn(turn, message)
        self.on_session_end(session)
        run.close()

    @abstractmethod
    def on_turn(self, turn: HTurn, message: Rec) -> None:
        """Ingest one turn (the system's own construction ops)."""

    def on_session_end(self, session: HSession) -> None:
        return None

    # -- questions ---------------------------------------------------------------------------------
    def ask(self, case: HCase) -> None:
        run = self.run
        case_id = f"{self.sc.store_id}:{case.qid}"
        root = run.root(f"{self.name}.ask", case_id)
        query = run.write(root, Rec(f"query:{case_id}", 1, Category.QUERY, raw=case.question))
        context, lines = self.answer(case, case_id, query)
        prediction = self.generate(case, case_id, query, context, lines)
        op, _, _ = run.begin(OpKind.JUDGE, "judge.deterministic", case_id=case_id)
        gold = Rec(f"gold:{case_id}", 1, Category.GOLD, raw=[case.gold])
        op.inputs = [prediction, gold]
        correct = judged(str(prediction.raw), case)
        op.attributes["verdict"] = correct
        run.write(op, Rec(f"score:{case_id}", 1, Category.SCORE, raw=float(correct)))
        run.predictions[case.qid] = str(prediction.raw)
        run.close()

    @abstractmethod
    def answer(self, case: HCase, case_id: str, query: Rec) -> tuple[Rec, list[Line]]:
        """Retrieve and assemble: the answer's context and its lines."""

    def retrieve(
        self, name: str, key: str, case: HCase, case_id: str, query: Rec, k: int,
        out_id: str, extra: Sequence[Rec] = (), pool: Sequence[Rec] | None = None,
    ) -> tuple[Rec, list[Rec]]:  # fmt: skip
        """A question-time retrieve: top ``k`` of the store's live records."""
        run = self.run
        records = list(run.store.values()) if pool is None else list(pool)
        op, fault, oracle = run.begin(
            OpKind.RETRIEVE, name, key, case_id=case_id, lossy=True, noise=("http", "db")
        )
        listed = [] if self.cfg.get("query_only") else records
        op.inputs = [query, *extra, *listed]
        op.attributes["gen_ai.memory.record.count"] = len(records)
        ranked = rank(records, case, len(records))
        chosen = [r for r, _ in ranked]
        if fault is not None and fault.name == "retrieval_miss":
            chosen = [r for r in chosen if not any(hits_fault(x, fault) for x in r.lines)]
        chosen = chosen[:k]
        if fault is not None and fault.name == "stale_read":
            chosen = [self.stale(r, fault) for r in chosen]
        if oracle is not None:
            needed = keep_needed([], records, oracle)
            chosen = [*needed, *[r for r in chosen if r not in needed]][: max(k, len(needed))]
        out = run.write(op, candidates_rec(out_id, chosen, Category.CANDIDATES))
        return out, chosen

    def search_and_filter(
        self, case: HCase, case_id: str, query: Rec, names: tuple[str, str, str], k: int,
        keep: int,
    ) -> tuple[Rec, list[Rec]]:  # fmt: skip
        """Retrieve top ``k``, keep ``keep`` (a rerank), and with ``second_filter`` one fewer (a
        dedupe or threshold): ``names`` are the three ops' names."""
        retrieve, rerank, second = names
        cands, chosen = self.retrieve(
            retrieve, f"ret:{case.qid}", case, case_id, query, k, f"candidates:{case_id}"
        )
        src, kept = self.filter(
            rerank, f"rr:{case.qid}", case_id, cands, chosen, keep, f"reranked:{case_id}"
        )
        if self.cfg.get("second_filter"):
            src, kept = self.filter(
                second, f"dd:{case.qid}", case_id, src, kept, keep - 1,
                f"{second.rsplit('.', 1)[-1]}:{case_id}",
            )  # fmt: skip
        return src, kept

    def append_turn(
        self, slot: str, var_id: str, kinds: tuple[OpKind, OpKind], names: tuple[str, str],
        key: str, turn: HTurn, message: Rec, noise: tuple[str, ...] = (),
    ) -> Rec:  # fmt: skip
        """Append a turn to a running record (a transcript, a buffer): the first turn creates
        it; a fault at the op drops an older line it aims at."""
        run = self.run
        old = run.vars.get(slot)
        line = transcript_line(turn, message)
        first = old is None
        op, fault, _ = run.begin(
            kinds[0] if first else kinds[1], names[0] if first else names[1], key, noise=noise
        )
        if old is None:
            op.inputs = [message]
            new = Rec(var_id, 1, Category.MEMORY, (line,), date=turn.date)
        else:
            op.inputs = [old, message]
            new = old.next([*_drop_hit(old.lines, fault), line], turn.date)
        run.vars[slot] = run.write(op, new)
        return new

    def merge(self, name: str, key: str, first: Rec, second: Rec, date: str) -> None:
        """A consolidation: ``first``'s next version holds both, ``second`` is tombstoned, in
        one ``update`` op (contract v0.2)."""
        run = self.run
        op, fault, _ = run.begin(OpKind.UPDATE, name, key, noise=("llm",))
        op.inputs = [first, second]
        lines = apply_line_fault([*first.lines, *second.lines], fault, None)
        merged = run.write(op, first.next(lines, date))
        run.write(op, second.tombstone())
        run.put(merged)
        run.drop(second)

    def stale(self, record: Rec, fault: Fault) -> Rec:
        """An older version of ``record`` whose claims on the fault's slot differ (a lagging
        replica or cache); the record itself when there is none."""

        def claims(rec: Rec) -> set[tuple[str, str]]:
            return {(c.slot, c.value) for x in rec.lines for c in x.claims if c.slot == fault.arg}

        current = claims(record)
        for version in range(record.version - 1, 0, -1):
            old = self.run.history.get(f"{record.id}@{version}")
            if old is not None and not old.deleted and claims(old) != current:
                return old
        return record

    def filter(
        self, name: str, key: str, case_id: str, source: Rec, records: list[Rec], keep: int,
        out_id: str, extra: Sequence[Rec] = (),
    ) -> tuple[Rec, list[Rec]]:  # fmt: skip
        """A filter keeping the first ``keep`` records; the dropped ones as an ``other`` list."""
        run = self.run
        op, fault, oracle = run.begin(OpKind.FILTER, name, key, case_id=case_id, lossy=True)
        op.inputs = [source, *extra]
        kept = records[:keep]
        if fault is not None and fault.name == "filter_drop":
            kept = [r for r in records if not any(hits_fault(x, fault) for x in r.lines)][:keep]
        if oracle is not None:
            kept = [r for r in records if r in kept or any(oracle.line_carries(x) for x in r.lines)]
        out = run.write(op, candidates_rec(out_id, kept, source.category))
        dropped = [r for r in records if r not in kept]
        if self.cfg.get("dropped_list", True) and dropped:
            run.write(op, candidates_rec(f"dropped:{out_id}", dropped, Category.OTHER))
        return out, kept

    def evict(self, key: str, name: str) -> None:
        """A retention job deletes a record (the ``spurious_delete`` fault aims it)."""
        run = self.run
        fault = self.sc.faults[key]
        victims = [r for r in run.store.values() if any(hits_fault(x, fault) for x in r.lines)]
        if not victims:
            return
        op, active, _ = run.begin(OpKind.DELETE, name, key, noise=("db",))
        op.inputs = [victims[0]]
        if active is not None:
            run.write(op, victims[0].tombstone())
            run.drop(victims[0])

    def assemble(
        self, case: HCase, case_id: str, inputs: list[Rec], lines: list[Line]
    ) -> tuple[Rec, list[Line]]:
        """The context: the lines in order, cut to the token budget (natural or a fault's)."""
        run = self.run
        op, fault, oracle = run.begin(
            OpKind.ASSEMBLE, f"{self.name}.assemble", f"asm:{case.qid}", case_id=case_id,
            lossy=True,
        )  # fmt: skip
        op.inputs = list(inputs)
        budget: int | None = self.cfg.get("context_tokens")
        if fault is not None and fault.name == "budget_cut":
            hit = [i for i, x in enumerate(lines) if hits_fault(x, fault)]
            if hit:
                budget = max(1, tokens_of(lines[: hit[0]]))
        kept = lines
        if budget is not None:
            kept, used = [], 0
            for x in lines:
                used += tokens_of([x])
                if used > budget:
                    break
                kept.append(x)
            op.attributes["context.budget_tokens"] = budget
        if oracle is not None:
            kept = [x for x in lines if x in kept or oracle.line_carries(x)]
        context = Rec(f"context:{case_id}", 1, Category.CONTEXT, tuple(kept))
        return run.write(op, context), kept

    def generate(
        self, case: HCase, case_id: str, query: Rec, context: Rec, lines: list[Line]
    ) -> Rec:
        run = self.run
        op, fault, oracle = run.begin(
            OpKind.GENERATE, f"{self.name}.answer", f"gen:{case.qid}", case_id=case_id,
            lossy=True, noise=("llm",),
        )  # fmt: skip
        op.inputs = [context, query]
        if oracle is not None and covers(lines, case):
            text = case.gold
        else:
            text = read_answer(lines, case, distract=fault is not None)
        return run.write(op, Rec(f"prediction:{case_id}", 1, Category.PREDICTION, raw=text))


def covers(lines: Sequence[Line], case: HCase) -> bool:
    """Whether the lines hold every claim the case needs."""
    return all(
        any(case.carries(c) and c.slot == need.slot for x in lines for c in x.claims)
        for need in case.needed
    )


def _drop_hit(lines: Sequence[Line], fault: Fault | None) -> list[Line]:
    return [x for x in lines if not hits_fault(x, fault)] if fault is not None else list(lines)


# --- long_context --------------------------------------------------------------------------------
class LongContextPipeline(Pipeline):
    """One transcript record per store: appended per turn, summarised per session, trimmed to a
    window; the question reads it whole (within the context budget)."""

    name = "long_context"

    def on_turn(self, turn: HTurn, message: Rec) -> None:
        new = self.append_turn(
            "record", f"context:{self.sc.store_id}:1", (OpKind.CREATE, OpKind.UPDATE),
            ("long_context.create", "long_context.memory_update"), f"mu:{turn.dia_id}", turn,
            message,
        )  # fmt: skip
        self.run.put(new)
        window = int(self.cfg.get("window_tokens", 100_000))
        if tokens_of(new.lines) > window:
            self.trim(turn, window)

    def trim(self, turn: HTurn, window: int) -> None:
        run = self.run
        record = run.vars["record"]
        op, _, oracle = run.begin(
            OpKind.UPDATE, "long_context.trim", f"trim:{turn.dia_id}", lossy=True
        )
        op.inputs = [record]
        lines = list(record.lines)
        total = tokens_of(lines)
        kept: list[Line] = []
        for i, x in enumerate(lines):
            protected = oracle is not None and oracle.line_carries(x)
            if total > window and not protected and i < len(lines) - 1:
                total -= tokens_of([x])
                continue
            kept.append(x)
        new = run.write(op, record.next(kept, turn.date))
        run.vars["record"] = new
        run.put(new)

    def on_session_end(self, session: HSession) -> None:
        if session.index < 2:
            return
        run = self.run
        record = run.vars["record"]
        key = f"sum:{session.index}"
        op, fault, _ = run.begin(OpKind.UPDATE, "long_context.summarize", key, noise=("llm",))
        op.inputs = [record]
        cutoff = when_of(session.date)
        lines: list[Line] = []
        for x in record.lines:
            if x.when >= cutoff or x.text.startswith("Summary:") or not x.text.startswith("["):
                lines.append(x)  # this session's turns, and earlier summaries, stay as they are
            elif x.fact is not None:
                lines.append(memory_line(x.fact, x.refs, x.when))
        if fault is not None and fault.name == "misattribute":
            lines = [_misattributed(x, fault) for x in lines]
        else:
            lines = apply_line_fault(lines, fault, None)
        new = run.write(op, record.next(lines, session.date))
        run.vars["record"] = new
        run.put(new)

    def answer(self, case: HCase, case_id: str, query: Rec) -> tuple[Rec, list[Line]]:
        candidates, chosen = self.retrieve(
            "long_context.retrieve", f"ret:{case.qid}", case, case_id, query, 1,
            f"candidates:{case_id}",
        )  # fmt: skip
        lines = [x for r in chosen for x in r.lines]
        return self.assemble(case, case_id, [candidates], lines)


def _misattributed(line: Line, fault: Fault) -> Line:
    """A summary that turns someone else's fact into the speaker's (``other`` -> ``arg``)."""
    fact = line.fact
    if fact is None or not any(c.slot == fault.other for c in line.claims):
        return line
    subject = fault.arg.split(".", 1)[0].capitalize()
    text = render(fact.template, subject, fact.value, fact.date, fact.extra)
    claims = (Claim(fault.arg, fact.value, fact.date),)
    return replace(line, text=text, claims=claims, fact=replace(fact, subject=subject))


# --- rag -------------------------------------------------------------------------------------------
class RagPipeline(Pipeline):
    """A buffer of turns chunked into documents; top-k retrieval, rerank, optional dedupe."""

    name = "rag"

    def on_turn(self, turn: HTurn, message: Rec) -> None:
        new = self.append_turn(
            "buffer", f"buffer:{self.sc.store_id}", (OpKind.CREATE, OpKind.UPDATE),
            ("rag.buffer_update", "rag.buffer_update"), f"bu:{turn.dia_id}", turn, message,
        )  # fmt: skip
        if len(new.lines) >= int(self.cfg.get("chunk_turns", 6)):
            self.flush(turn.date)

    def on_session_end(self, session: HSession) -> None:
        buffer = self.run.vars.get("buffer")
        if buffer is not None and buffer.lines:
            self.flush(session.date)
        key = f"evict:{session.index}"
        if key in self.sc.faults:
            self.evict(key, "rag.evict")

    def flush(self, date: str) -> None:
        run = self.run
        buffer = run.vars["buffer"]
        number = int(run.vars.get("chunks", Rec("n", 0, Category.OTHER)).version) + 1
        run.vars["chunks"] = Rec("n", number, Category.OTHER)
        op, fault, _ = run.begin(OpKind.EXTRACT, "rag.chunk", f"chunk:{number}", noise=("queue",))
        op.inputs = [buffer]
        chunk = Rec(
            f"chunk:{self.sc.store_id}:{number}", 1, Category.MEMORY,
            tuple(_drop_hit(buffer.lines, fault)), date=date,
        )  # fmt: skip
        run.write(op, chunk)
        op, _, _ = run.begin(OpKind.UPDATE, "rag.buffer_reset", f"reset:{number}")
        op.inputs = [buffer]
        run.vars["buffer"] = run.write(op, buffer.next([], date))
        op, _, _ = run.begin(OpKind.CREATE, "rag.add", f"add:{number}", noise=("db",))
        op.inputs = [chunk]
        doc = run.write(op, replace(chunk, id=f"doc:{self.sc.store_id}:{number}"))
        run.put(doc)

    def answer(self, case: HCase, case_id: str, query: Rec) -> tuple[Rec, list[Line]]:
        src, kept = self.search_and_filter(
            case, case_id, query, ("rag.retrieve", "rag.rerank", "rag.dedupe"),
            int(self.cfg.get("top_k", 4)), int(self.cfg.get("rerank_keep", 3)),
        )  # fmt: skip
        lines = [x for r in kept for x in r.lines]
        return self.assemble(case, case_id, [src], lines)


# --- mem0 ------------------------------------------------------------------------------------------
class Mem0Pipeline(Pipeline):
    """Fact extraction, ADD/UPDATE/DELETE/NONE recorded by what they did, consolidation."""

    name = "mem0"

    def on_turn(self, turn: HTurn, message: Rec) -> None:
        run = self.run
        generic = turn.fact is None and _hash_share(turn.dia_id + self.sc.store_id) < 0.35
        delete_key = f"del:{turn.dia_id}"
        if turn.fact is None and not generic and delete_key not in self.sc.faults:
            return
        key = f"fx:{turn.dia_id}"
        op, fault, _ = run.begin(OpKind.EXTRACT, "mem0.fact_extraction", key, noise=("llm",))
        op.inputs = [message]
        ref = message.lines[0].refs
        if turn.fact is not None:
            lines = [memory_line(turn.fact, ref, message.lines[0].when)]
        else:
            lines = [
                Line(f"{turn.speaker} mentioned: {_gist(turn.text)}", (), ref, when_of(turn.date))
            ]
        if fault is not None and fault.name == "misattribute":
            lines = [_misattributed(x, fault) for x in lines]
        else:
            lines = apply_line_fault(lines, fault, None)
        facts = [
            run.write(op, Rec(f"fact:{self.sc.store_id}:{turn.dia_id}:{i + 1}", 1,
                              Category.MEMORY, (x,), date=turn.date))
            for i, x in enumerate(lines)
        ]  # fmt: skip
        for fact in facts:
            self.decide(fact, turn)
        if delete_key in self.sc.faults:
            self.spurious_delete(delete_key, facts or [message])

    def decide(self, fact: Rec, turn: HTurn) -> None:
        run = self.run
        slots = {c.slot for x in fact.lines for c in x.claims}
        existing = [
            r for r in run.store.values()
            if slots & {c.slot for x in r.lines for c in x.claims}
        ][:3]  # fmt: skip
        op, _, _ = run.begin(
            OpKind.RETRIEVE, "mem0.search_existing", f"se:{fact.id}", stage=Stage.CONSTRUCTION,
            noise=("db",),
        )  # fmt: skip
        op.inputs = [fact, *existing]
        run.write(op, candidates_rec(f"candidates:{fact.id}", existing, Category.CANDIDATES))
        key = f"dec:{fact.id}"
        fault = run.active(key)
        old = existing[0] if existing else None
        if fault is not None and fault.name == "none_discard":
            op, _, _ = run.begin(OpKind.UPDATE, "mem0.update", key, noise=("llm",))
            op.inputs = [fact, *existing]
            op.attributes["mem0.event"] = "NONE"
            return
        if old is None:
            op, _, _ = run.begin(OpKind.CREATE, "mem0.add", key, noise=("llm", "db"))
            op.inputs = [fact]
            op.attributes["mem0.event"] = "ADD"
            rec = Rec(run.new_id("mem"), 1, Category.MEMORY, fact.lines, date=fact.date)
            run.put(run.write(op, rec))
            return
        op, _, _ = run.begin(OpKind.UPDATE, "mem0.update", key, noise=("llm", "db"))
        op.inputs = [fact, old]
        op.attributes["mem0.event"] = "UPDATE"
        lines = list(fact.lines)
        if fault is not None and fault.name == "keep_old":
            lines = list(old.lines)
        elif fault is not None:
            lines = apply_line_fault(lines, fault, None)
        rec = run.write(op, old.next(lines, fact.date))
        run.put(rec)

    def spurious_delete(self, key: str, inputs: list[Rec]) -> None:
        run = self.run
        fault = self.sc.faults[key]
        victims = [r for r in run.store.values() if any(hits_fault(x, fault) for x in r.lines)]
        if not victims:
            return
        op, active, _ = run.begin(OpKind.DELETE, "mem0.delete", key, noise=("llm", "db"))
        op.inputs = [*inputs[:1], victims[0]]
        op.attributes["mem0.event"] = "DELETE"
        if active is not None:
            run.write(op, victims[0].tombstone())
            run.drop(victims[0])

    def on_session_end(self, session: HSession) -> None:
        if session.index not in self.cfg.get("consolidate_at", ()):
            return
        run = self.run
        key = f"cons:{session.index}"
        fault = self.sc.faults.get(key)
        records = sorted(
            run.store.values(), key=lambda r: (r.lines[0].when if r.lines else "", r.id)
        )
        target = [
            r for r in records if fault is not None and any(hits_fault(x, fault) for x in r.lines)
        ]
        first = target[0] if target else (records[0] if records else None)
        if first is None:
            return
        speaker = _subject(first)
        others = [r for r in records if r is not first and _subject(r) == speaker]
        if not others:
            return
        self.merge("mem0.consolidate", key, first, others[0], session.date)

    def answer(self, case: HCase, case_id: str, query: Rec) -> tuple[Rec, list[Line]]:
        src, kept = self.search_and_filter(
            case, case_id, query, ("mem0.search", "mem0.rerank", "mem0.threshold"),
            int(self.cfg.get("top_k", 5)), int(self.cfg.get("rerank_keep", 4)),
        )  # fmt: skip
        lines = [replace(x, text=f"[{r.date}] {x.text}") for r in kept for x in r.lines]
        return self.assemble(case, case_id, [src], lines)


def _subject(record: Rec) -> str:
    for x in record.lines:
        if x.fact is not None:
            return x.fact.subject
        return x.text.split(" ", 1)[0]
    return ""


def _gist(text: str) -> str:
    words = text.split()
    return " ".join(words[:14]) + ("..." if len(words) > 14 else "")


def _hash_share(text: str) -> float:
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") / 2**32


PROFILE_KINDS = frozenset({"city", "job", "sister", "team"})
"""Fact kinds EverMemOS keeps in the profile rather than in episodes."""


# --- evermemos -------------------------------------------------------------------------------------
class EverMemOSPipeline(Pipeline):
    """Episodes per session, scene consolidation, a profile, two retrieval rounds."""

    name = "evermemos"

    def on_turn(self, turn: HTurn, message: Rec) -> None:
        self.append_turn(
            "buffer", f"buffer:{self.sc.store_id}", (OpKind.EXTRACT, OpKind.EXTRACT),
            ("evermemos.boundary_detection", "evermemos.boundary_detection"),
            f"bd:{turn.dia_id}", turn, message, noise=("llm",),
        )  # fmt: skip

    def on_session_end(self, session: HSession) -> None:
        run = self.run
        buffer = run.vars.get("buffer")
        if buffer is None or not buffer.lines:
            return
        n = session.index
        op, _, _ = run.begin(OpKind.EXTRACT, "evermemos.session_end", f"se:{n}")
        op.inputs = [buffer]
        segment = run.write(
            op,
            Rec(
                f"segment:{self.sc.store_id}:{n}",
                1,
                Category.MEMORY,
                buffer.lines,
                date=session.date,
            ),
        )
        run.vars["buffer"] = run.write(op, buffer.next([], session.date))
        op, fault, _ = run.begin(
            OpKind.EXTRACT, "evermemos.memcell_extraction", f"mc:{n}", noise=("llm",)
        )
        op.inputs = [segment]
        facts = [memory_line(x.fact, x.refs, x.when) for x in segment.lines if x.fact is not None]
        speakers = " and ".join(self.sc.speakers)
        # The episode's gist is of the chat around the facts: a gist restating a fact would
        # carry it past a later loss, unseen by the replay (which reads what lines claim).
        chat = [x for x in segment.lines if x.fact is None][:2]
        topics = _gist(" ".join(x.text.split(": ", 1)[-1] for x in chat)) or "several things"
        episode = Line(
            f"On {session.date}, {speakers} talked: {topics}", (), (), when_of(session.date)
        )
        lines = [episode, *apply_line_fault(facts, fault, None)]
        memcell = run.write(
            op,
            Rec(
                f"memcell:{self.sc.store_id}:{n}",
                1,
                Category.MEMORY,
                tuple(lines),
                date=session.date,
            ),
        )
        op, _, _ = run.begin(OpKind.CREATE, "evermemos.memcell_store", f"ms:{n}", noise=("db",))
        op.inputs = [memcell]
        # The episode keeps the narrative and the episodic facts; stable attributes (home, job,
        # family, team) go to the profile, as EverMemOS splits episodic and profile memory.
        episodic = tuple(
            x for x in memcell.lines if x.fact is None or x.fact.kind not in PROFILE_KINDS
        )
        stored = run.write(
            op, replace(memcell, id=f"episode:{self.sc.store_id}:{n}", lines=episodic)
        )
        run.put(stored)
        if n in self.cfg.get("consolidate_at", ()):
            self.consolidate(n, session.date)
        self.profile(memcell, n, session.date)
        if f"evict:{n}" in self.sc.faults:
            self.evict(f"evict:{n}", "evermemos.episode_evict")

    def consolidate(self, n: int, date: str) -> None:
        run = self.run
        episodes = [r for r in run.store.values() if r.id.startswith("episode:")]
        episodes.sort(key=lambda r: int(r.id.rsplit(":", 1)[1]))
        if len(episodes) < 3:
            return
        self.merge("evermemos.scene_consolidation", f"scene:{n}", episodes[0], episodes[1], date)

    def profile(self, memcell: Rec, n: int, date: str) -> None:
        run = self.run
        old = run.vars.get("profile")
        key = f"prof:{n}"
        kind = OpKind.CREATE if old is None else OpKind.UPDATE
        op, fault, _ = run.begin(kind, "evermemos.profile_update", key, noise=("llm",))
        op.inputs = [memcell] if old is None else [old, memcell]
        lines = list(old.lines) if old is not None else []
        for x in memcell.lines:
            if x.fact is None or x.fact.kind not in PROFILE_KINDS:
                continue
            first = x.claims[0].slot if x.claims else ""
            lines = [y for y in lines if not (y.claims and y.claims[0].slot == first)]
            lines.append(x)
        if fault is not None and fault.name == "misattribute":
            lines = [_misattributed(x, fault) for x in lines]
        else:
            lines = apply_line_fault(lines, fault, None)
        if old is None:
            new = Rec(f"profile:{self.sc.store_id}", 1, Category.MEMORY, tuple(lines), date=date)
        else:
            new = old.next(lines, date)
        run.vars["profile"] = run.write(op, new)

    def answer(self, case: HCase, case_id: str, query: Rec) -> tuple[Rec, list[Line]]:
        run = self.run
        k = int(self.cfg.get("top_k", 3))
        cands, chosen = self.retrieve(
            "evermemos.hybrid_retrieval", f"ret:{case.qid}", case, case_id, query, k,
            f"candidates:{case_id}",
        )  # fmt: skip
        op, _, _ = run.begin(
            OpKind.FILTER, "evermemos.sufficiency_check", f"suff:{case.qid}", case_id=case_id,
            noise=("llm",),
        )  # fmt: skip
        op.inputs = [query, cands]
        wanted = slots_of(case)
        sufficient = any(
            c.slot.rsplit(".", 1)[-1] in wanted for r in chosen for x in r.lines for c in x.claims
        )
        run.write(op, candidates_rec(f"sufficient:{case_id}", chosen, Category.CANDIDATES))
        verdict = Rec(
            f"sufficiency:{case_id}", 1, Category.OTHER,
            raw={"is_sufficient": sufficient, "refined_queries": [] if sufficient else [case.question]},
        )  # fmt: skip
        run.write(op, verdict)
        pool, records = cands, chosen
        if not sufficient and self.cfg.get("round2", True):
            pool, more = self.retrieve(
                "evermemos.multi_query_retrieval", f"ret2:{case.qid}", case, case_id, query,
                2 * k, f"candidates2:{case_id}", extra=[verdict],
            )  # fmt: skip
            records = [*more, *[r for r in chosen if r not in more]]  # fused: round two first
        final_k = int(self.cfg.get("final_k", 3))
        src, kept = self.filter(
            "evermemos.final_rerank", f"rr:{case.qid}", case_id, pool, records, final_k,
            f"final:{case_id}",
        )  # fmt: skip
        profile = run.vars.get("profile")
        lines = list(profile.lines) if profile is not None else []
        lines += [x for r in kept for x in r.lines]
        inputs = [src] if profile is None else [src, profile]
        return self.assemble(case, case_id, inputs, lines)


PIPELINES: dict[str, Callable[[Run], Pipeline]] = {
    "long_context": LongContextPipeline,
    "rag": RagPipeline,
    "mem0": Mem0Pipeline,
    "evermemos": EverMemOSPipeline,
}
"""The hard pipelines by system name."""

__all__ = ["PIPELINES", "Pipeline", "execute"]

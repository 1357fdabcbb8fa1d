"""The EverMemOS-style system: episodes (MemCells), scenes, a profile, agentic retrieval.

Per turn: ``evermemos.boundary_detection`` (``extract``: does this message start a new episode?
its outputs are the running buffer's next version and, at a boundary, the closed segment). At a
boundary or the session's end a segment is finalised: ``evermemos.memcell_extraction``
(``extract``: an episode narrative, atomic facts and metadata), ``evermemos.memcell_store``
(``create``: the searchable episode record), ``evermemos.scene_consolidation`` (``create`` or
``update`` of the scene it joins) and ``evermemos.profile_update`` (``create``/``update`` of the
user profile).

Per question, two rounds: ``evermemos.hybrid_retrieval`` (``retrieve``: BM25 and embeddings fused
by reciprocal rank), ``evermemos.sufficiency_check`` (``filter``: enough to answer? if not,
refined queries), when insufficient ``evermemos.multi_query_retrieval`` (``retrieve``: every
refined query, fused with round one by RRF), then ``evermemos.final_rerank`` (``filter``),
``evermemos.assemble`` (profile and episodes) and ``evermemos.answer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from memtrace_bench.systems._base import (
    Blame,
    Line,
    MemorySystem,
    SystemConfig,
    VarInfo,
    candidates_variable,
    carrying,
    context_variable,
    dense_search,
    rrf,
    source_refs_of,
    truncate_before_evidence,
)
from memtrace_bench.systems._protocol import MemCellContent, Sufficiency
from memtrace_bench.systems._workload import Question, Session, Turn
from memtrace_otel.attribution._tokens import bm25_index, content_tokens
from memtrace_otel.instrumentation import Variable
from memtrace_otel.semconv import Category, OpKind

BOUNDARY_PROMPT = """You segment a conversation into episodes. Given the lines of the current episode and a new
message, decide whether the new message starts a new episode (a new topic or a long pause).
Current episode:
{buffer}
New message:
{message}
Reply with a JSON object: {"should_end": true or false}"""

MEMCELL_PROMPT = """Summarise this conversation segment as an episode for long-term memory, and list its atomic facts.
Keep names, places, dates (resolve "today"/"yesterday" against the line's date) and numbers.
Segment:
{conversation}
Reply with a JSON object: {"episode": "<a faithful third-person narrative>", "facts": ["...", "..."]}"""

PROFILE_PROMPT = """Maintain a user profile: one short third-person line per stable attribute (home, job,
family, pets, preferences, allergies). Apply the new facts: replace changed attributes, drop
attributes the user asked to forget, keep the rest.
Profile:
{profile}
New facts:
{facts}
Reply with a JSON object: {"profile": ["...", "..."]}"""

SUFFICIENCY_PROMPT = """Decide whether the retrieved memories are enough to answer the question. If not, write up to
three refined search queries that would find what is missing (names, places, events).
Question: {question}
Memories:
{documents}
Reply with a JSON object: {"is_sufficient": true or false, "refined_queries": ["..."]}"""

ANSWER_PROMPT = """Answer the question from the user profile and the episodes below. Lines start with their date;
resolve relative dates against it, and prefer the most recent information when facts changed.
If the memories do not contain the answer, say "I don't know". Answer in a few words.

{context}

Question: {question}
Answer:"""


@dataclass
class EverMemOSConfig(SystemConfig):
    """Round sizes: ``top_k`` per retriever in round one, ``final_k`` after the rerank."""

    top_k: int = 4
    final_k: int = 4
    scene_overlap: float = 0.25


@dataclass
class _State:
    buffer: Variable | None
    lines: list[tuple[str, str]]
    episodes: dict[str, Variable]
    scenes: dict[str, Variable]
    scene_words: dict[str, frozenset[str]]
    profile: Variable | None
    segments: int

    def copy(self) -> _State:
        return _State(
            self.buffer,
            list(self.lines),
            dict(self.episodes),
            dict(self.scenes),
            dict(self.scene_words),
            self.profile,
            self.segments,
        )


class EverMemOSSystem(MemorySystem):
    """Episodic memory with scenes, a profile and two-round retrieval."""

    name = "evermemos"
    default_prompts: ClassVar[Mapping[str, str]] = {
        "boundary": BOUNDARY_PROMPT,
        "memcell": MEMCELL_PROMPT,
        "profile": PROFILE_PROMPT,
        "sufficiency": SUFFICIENCY_PROMPT,
        "answer": ANSWER_PROMPT,
    }
    config_class = EverMemOSConfig

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._state = _State(None, [], {}, {}, {}, None, 0)
        self._vectors: dict[str, list[float]] = {}

    def _copy_state(self) -> _State:
        return self._state.copy()

    def _set_state(self, state: _State) -> None:
        self._state = state.copy()

    def live_records(self) -> list[Variable]:
        return list(self._state.episodes.values())

    def remove_record(self, record: Variable) -> None:
        self._state.episodes.pop(record.id, None)

    def _buffer(self, lines: list[tuple[str, str]], date: str) -> Variable:
        old = self._state.buffer
        text = "\n".join(t for t, _ in lines)
        meta = {"source_refs": [r for _, r in lines], "date": date}
        if old is None:
            return Variable(f"buffer:{self.store_id}", 1, text, Category.MEMORY, meta)
        return old.next(text, meta=meta)

    # -- construction --------------------------------------------------------------------------
    def on_turn(self, message: Variable, turn: Turn) -> None:
        state = self._state
        line = (turn.line(), message.ref)
        inputs = [message] if state.buffer is None else [state.buffer, message]
        segment: Variable | None = None
        with self.step(
            OpKind.EXTRACT, "evermemos.boundary_detection", inputs=inputs, prompt="boundary"
        ) as step:
            prompt = str(self.prompt_vars["boundary"].value)
            buffered = [t for t, _ in state.lines]
            ends = bool(buffered) and self.call_engine(
                step, lambda: self.engine.detect_boundary(prompt, buffered, turn.line()), False
            )
            if ends:
                segment = step.output(self._segment(state.lines, turn.date))
                state.lines = []
            state.lines.append(line)
            state.buffer = step.output(self._buffer(state.lines, turn.date))
        if segment is not None:
            self._finalize(segment)

    def on_session_end(self, session: Session) -> None:
        state = self._state
        if not state.lines or state.buffer is None:
            return
        with self.step(OpKind.EXTRACT, "evermemos.session_end", inputs=[state.buffer]) as step:
            segment = step.output(self._segment(state.lines, session.date))
            state.lines = []
            state.buffer = step.output(self._buffer([], session.date))
        self._finalize(segment)

    def _segment(self, lines: list[tuple[str, str]], date: str) -> Variable:
        self._state.segments += 1
        return self.memory(
            f"segment:{self.store_id}:{self._state.segments}",
            "\n".join(t for t, _ in lines),
            [r for _, r in lines],
            date,
            lines=[r for _, r in lines],
        )

    def _finalize(self, segment: Variable) -> None:
        state = self._state
        number = segment.id.rsplit(":", 1)[1]
        date = str((segment.meta or {}).get("date", ""))
        refs = list((segment.meta or {}).get("lines", []))
        lines = str(segment.value).splitlines()
        with self.step(
            OpKind.EXTRACT, "evermemos.memcell_extraction", inputs=[segment], prompt="memcell"
        ) as step:
            prompt = str(self.prompt_vars["memcell"].value)
            content: MemCellContent = self.call_engine(
                step, lambda: self.engine.memcell(prompt, lines), MemCellContent("", ())
            )
            episode_lines = content.episode.splitlines()
            facts = list(content.facts)
            key = f"segment:{number}"
            text = "\n".join([*episode_lines, *facts])
            victims = sorted({ref for ref in refs if self.aims("drop_fact", text, [ref])})
            if victims and step.faulted("drop_fact", key):
                assert self.faults is not None
                ref = victims[self.faults.pick("drop_fact", key, len(victims))]
                episode_lines, facts = self._without(ref, refs, lines, episode_lines, facts)
            oracle = step.oracle
            if oracle is not None:
                for ref, evidence in oracle.evidence.items():
                    text = "\n".join([*episode_lines, *facts])
                    if ref in refs and ref not in oracle.carried(
                        VarInfo("", text, frozenset([ref]))
                    ):
                        episode_lines.append(lines[refs.index(ref)])
                        facts.append(evidence.fact)
            participants = sorted(
                {t.split("] ", 1)[-1].split(":", 1)[0] for t in lines if ": " in t}
            )
            value = {
                "episode": "\n".join(episode_lines),
                "facts": facts,
                "date": date,
                "participants": participants,
                "text": "\n".join([*episode_lines, *(f"[{date}] {f}" for f in facts)]),
            }
            memcell = step.output(
                self.memory(f"memcell:{self.store_id}:{number}", value, refs, date)
            )
        with self.step(OpKind.CREATE, "evermemos.memcell_store", inputs=[memcell]) as step:
            episode = step.output(
                self.memory(
                    f"episode:{self.store_id}:{number}", value["text"], refs, date, facts=len(facts)
                )
            )
            state.episodes[episode.id] = episode
        self._consolidate_scene(episode, date)
        self._update_profile(memcell, facts, date)

    @staticmethod
    def _without(
        ref: str, refs: list[str], lines: list[str], episode: list[str], facts: list[str]
    ) -> tuple[list[str], list[str]]:
        """The memcell without what came from one message (a dropped fact)."""
        line = lines[refs.index(ref)]
        body = line.split(": ", 1)[-1]
        words = set(content_tokens(body))
        kept_lines = [e for e in episode if e != line]
        kept_facts = [
            f for f in facts if len(words & set(content_tokens(f))) < max(2, len(words) // 2)
        ]
        return kept_lines, kept_facts

    def _consolidate_scene(self, episode: Variable, date: str) -> None:
        state = self._state
        words = frozenset(content_tokens(str(episode.value)))
        best, best_score = None, 0.0
        for scene_id, scene_words in state.scene_words.items():
            score = len(words & scene_words) / max(1, len(words | scene_words))
            if score > best_score:
                best, best_score = scene_id, score
        if best is not None and best_score >= self.config.scene_overlap:
            old = state.scenes[best]
            members = [*(old.value or {}).get("members", []), episode.id]
            with self.step(
                OpKind.UPDATE,
                "evermemos.scene_consolidation",
                inputs=[old, episode],
                blame=Blame.NEVER,
            ) as step:
                value = {"members": members, "text": f"scene of {len(members)} episodes"}
                refs = sorted({*source_refs_of(old), *source_refs_of(episode)})
                state.scenes[best] = step.output(
                    old.next(value, meta={"source_refs": refs, "date": date})
                )
                state.scene_words[best] = state.scene_words[best] | words
        else:
            scene_id = f"scene:{self.store_id}:{len(state.scenes) + 1}"
            with self.step(
                OpKind.CREATE, "evermemos.scene_consolidation", inputs=[episode], blame=Blame.NEVER
            ) as step:
                value = {"members": [episode.id], "text": "scene of 1 episode"}
                state.scenes[scene_id] = step.output(
                    self.memory(scene_id, value, source_refs_of(episode), date)
                )
                state.scene_words[scene_id] = words

    def _update_profile(self, memcell: Variable, facts: list[str], date: str) -> None:
        state = self._state
        old = state.profile
        old_lines = str(old.value).splitlines() if old is not None and old.value else []
        old_refs = list((old.meta or {}).get("source_refs", [])) if old is not None else []
        kind = OpKind.CREATE if old is None else OpKind.UPDATE
        inputs = [memcell] if old is None else [old, memcell]
        # A profile summarises: only losing what the old profile held is a fault of this op.
        carry = [] if old is None else [old]
        with self.step(
            kind, "evermemos.profile_update", inputs=inputs, prompt="profile", carry_inputs=carry
        ) as step:
            prompt = str(self.prompt_vars["profile"].value)
            lines: list[str] = self.call_engine(
                step, lambda: self.engine.update_profile(prompt, old_lines, facts), list(old_lines)
            )
            refs = sorted({*old_refs, *source_refs_of(memcell)})
            key = f"profile:{memcell.id}"
            victims = [i for i, t in enumerate(lines) if self.aims("lossy_update", t, refs)]
            if old is not None and victims and step.faulted("lossy_update", key):
                assert self.faults is not None
                drop = victims[self.faults.pick("lossy_update", key, len(victims))]
                lines = [t for i, t in enumerate(lines) if i != drop]
            oracle = step.oracle
            if oracle is not None:
                for line in old_lines:  # the old content kept
                    if line not in lines and oracle.carried(VarInfo("", line, frozenset(refs))):
                        lines.insert(0, line)
            text = "\n".join(lines)
            if old is None:
                new = self.memory(f"profile:{self.store_id}", text, refs, date)
            else:
                new = old.next(text, meta={"source_refs": refs, "date": date})
            state.profile = step.output(new)

    # -- questions -----------------------------------------------------------------------------
    def _rank(self, query: str, episodes: list[Variable], k: int, *, dense: bool) -> list[str]:
        index = bm25_index(tuple((e.ref, str(e.value)) for e in episodes))
        ranked = [ref for ref, _ in index.search(query, k)]
        if not dense:
            return ranked
        missing = [e for e in episodes if str(e.value) not in self._vectors]
        if missing:
            vectors = self.engine.embed([str(e.value) for e in missing])
            self._vectors.update({str(e.value): v for e, v in zip(missing, vectors, strict=True)})
        [qvec] = self.engine.embed([query])
        dense_ranked = [
            r
            for r, _ in dense_search(
                qvec, [(e.ref, self._vectors[str(e.value)]) for e in episodes], k
            )
        ]
        return [ref for ref, _ in rrf([ranked, dense_ranked])][:k]

    def answer(self, query: Variable, question: Question, case_id: str) -> Variable:
        episodes = self.live_records()
        by_ref = {e.ref: e for e in episodes}
        oracle = self.case_oracle(question, case_id)
        k = self.config.top_k
        with self.step(
            OpKind.RETRIEVE,
            "evermemos.hybrid_retrieval",
            inputs=[query, *episodes],
            case_id=case_id,
            carry_inputs=episodes,
            attributes={"gen_ai.memory.record.count": len(episodes)},
        ) as step:
            round1 = self._rank(question.question, episodes, k, dense=True)
            round1 = self._retrieval_fault_or_fix(step, round1, episodes, oracle, case_id, "r1")
            candidates = step.output(
                candidates_variable(f"candidates:{case_id}", [by_ref[r] for r in round1], {})
            )
        with self.step(
            OpKind.FILTER,
            "evermemos.sufficiency_check",
            inputs=[query, candidates],
            case_id=case_id,
            prompt="sufficiency",
            carry_inputs=[candidates],
        ) as step:
            prompt = str(self.prompt_vars["sufficiency"].value)
            docs = [str(by_ref[r].value) for r in round1]
            verdict: Sufficiency = self.call_engine(
                step,
                lambda: self.engine.check_sufficiency(prompt, question.question, docs),
                Sufficiency(True),
            )
            if step.oracle is not None and verdict.sufficient:
                asked = self.call_engine(
                    step,
                    lambda: self.engine.check_sufficiency(prompt, question.question, []),
                    Sufficiency(False, (question.question,)),
                )
                verdict = Sufficiency(False, asked.queries or (question.question,))
            step.blame = Blame.INCOMPLETE if verdict.sufficient else Blame.NEVER
            sufficiency = step.output(
                Variable(
                    f"sufficiency:{case_id}",
                    1,
                    {"is_sufficient": verdict.sufficient, "refined_queries": list(verdict.queries)},
                    Category.OTHER,
                )
            )
        fused = round1
        pool = candidates
        if not verdict.sufficient and verdict.queries:
            with self.step(
                OpKind.RETRIEVE,
                "evermemos.multi_query_retrieval",
                inputs=[query, sufficiency, *episodes],
                case_id=case_id,
                carry_inputs=episodes,
            ) as step:
                rankings = [round1] + [
                    self._rank(q, episodes, k, dense=False) for q in verdict.queries
                ]
                fused = [ref for ref, _ in rrf(rankings)][: 2 * k]
                fused = self._retrieval_fault_or_fix(step, fused, episodes, oracle, case_id, "r2")
                pool = step.output(
                    candidates_variable(f"candidates2:{case_id}", [by_ref[r] for r in fused], {})
                )
        with self.step(
            OpKind.FILTER, "evermemos.final_rerank", inputs=[pool], case_id=case_id
        ) as step:
            final = fused[: self.config.final_k]
            pooled = [by_ref[r] for r in fused]
            if step.oracle is not None:
                keep = {e.ref for e in carrying(pooled, step.oracle)}
                final = [*[r for r in fused if r in keep], *[r for r in final if r not in keep]]
                final = final[: max(self.config.final_k, len(keep))]
            else:
                aimed = {e.ref for e in carrying([by_ref[r] for r in final], oracle)}
                if aimed and step.faulted("filter_drop", f"case:{case_id}"):
                    final = [r for r in final if r not in aimed]
            chosen = step.output(
                candidates_variable(f"final:{case_id}", [by_ref[r] for r in final], {})
            )
        profile = self._state.profile
        lines: list[Line] = []
        if profile is not None and profile.value:
            pdate = (profile.meta or {}).get("date", "")
            for text in str(profile.value).splitlines():
                lines.append((f"[{pdate}] {text}", source_refs_of(profile)))
        for ref in final:
            episode = by_ref[ref]
            lines.extend(
                (text, source_refs_of(episode)) for text in str(episode.value).splitlines()
            )
        inputs = [chosen] if profile is None else [chosen, profile]
        with self.step(
            OpKind.ASSEMBLE, "evermemos.assemble", inputs=inputs, case_id=case_id
        ) as step:
            cut = truncate_before_evidence(lines, oracle)
            if cut != lines and step.faulted("truncate_context", f"case:{case_id}"):
                lines = cut
            context = step.output(context_variable(case_id, lines))
        return self.generate_answer(
            "evermemos.answer", query, context, [t for t, _ in lines], question, case_id
        )

    def _retrieval_fault_or_fix(
        self,
        step: Any,
        ranked: list[str],
        episodes: list[Variable],
        oracle: Any,
        case_id: str,
        tag: str,
    ) -> list[str]:
        fix = step.oracle
        if fix is not None:
            evidence = [e.ref for e in carrying(episodes, fix)]
            return [*evidence, *[r for r in ranked if r not in evidence]][
                : max(len(ranked), len(evidence))
            ]
        by_ref = {e.ref: e for e in episodes}
        aimed = {e.ref for e in carrying([by_ref[r] for r in ranked], oracle)}
        if aimed and step.faulted("retrieval_miss", f"case:{case_id}:{tag}"):
            return [r for r in ranked if r not in aimed]
        return ranked

"""A memory-backed assistant traced with the upstream GenAI conventions only (no memtrace names).

It is the shape of an app whose memory layer is traced by another instrumentation (mem0's own
tracing, OpenLIT, LoongSuite, hand-written spans): ``search_memory`` / ``create_memory`` /
``update_memory`` / ``delete_memory`` client spans with ``gen_ai.memory.*`` attributes, chat spans
with ``gen_ai.input.messages`` / ``gen_ai.output.messages`` when capture is on, noise spans (HTTP
server, database), and outcomes as ``gen_ai.evaluation.result`` events, some on the answer span,
some on an evaluator's span parented to it. Nothing in it says which op wrote what.

Faults are planted one per failed question, and :func:`run_app` returns the ground truth: for
each failed case (the answer's trace id) the label and the span id of the planted op.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Span, SpanKind, Tracer

from memtrace_otel.export import OtlpJsonLinesExporter
from memtrace_otel.semconv import attributes as A
from tests._openai_server import Reply

# Upstream names this app writes (spelled here on purpose: it plays another instrumentation).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
STORE = "gen_ai.memory.store.id"
RECORD_ID = "gen_ai.memory.record.id"
RECORD_COUNT = "gen_ai.memory.record.count"
RECORDS = "gen_ai.memory.records"
QUERY = "gen_ai.memory.query.text"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
MODEL = "gen_ai.request.model"
EVALUATION = "gen_ai.evaluation.result"

FAULTS = ("extraction", "update", "deletion", "retrieval", "stale", "response")
LABELS = {
    "extraction": "ExtractionError",
    "update": "UpdateError",
    "deletion": "DeletionError",
    "retrieval": "RetrievalError",
    "stale": "RetrievalError",
    "response": "ResponseError",
}


@dataclass(frozen=True)
class Slot:
    """One fact about a user: how they say it, how it is stored, how it is asked."""

    key: str
    said: str
    stored: str
    question: str
    values: tuple[str, ...]


SLOTS = (
    Slot(
        "city",
        "I finally moved to {v} in March, the flat is tiny but I love it.",
        "Lives in {v}",
        "Which city do I live in these days?",
        ("Porto", "Lyon", "Utrecht", "Gdansk", "Valencia", "Tampere"),
    ),
    Slot(
        "employer",
        "Started the new job at {v} on Monday, wish me luck!",
        "Works at {v}",
        "Where am I working now?",
        ("Hexagon Labs", "Brightwell", "Northwind", "Quarry Bank", "Lumen Health", "Orbis"),
    ),
    Slot(
        "pet",
        "We adopted a beagle puppy and named him {v}.",
        "Has a beagle called {v}",
        "What did we name the puppy?",
        ("Biscuit", "Pepper", "Mochi", "Waffles", "Juniper", "Ziggy"),
    ),
    Slot(
        "sister",
        "My sister {v} is coming over for the weekend.",
        "Has a sister named {v}",
        "What's my sister called?",
        ("Ines", "Marta", "Freya", "Oona", "Clara", "Yasmin"),
    ),
    Slot(
        "food",
        "Honestly nothing beats {v} on a Friday night.",
        "Favourite Friday dinner is {v}",
        "What do I like to eat on Fridays?",
        ("ramen", "paella", "pierogi", "shakshuka", "pho", "lasagne"),
    ),
    Slot(
        "class",
        "I've been going to {v} classes twice a week.",
        "Takes {v} classes",
        "Which classes have I been taking?",
        ("pottery", "salsa", "climbing", "life drawing", "judo", "ceramics"),
    ),
    Slot(
        "car",
        "Traded the old hatchback in for a {v}.",
        "Drives a {v}",
        "What car do I drive now?",
        ("Skoda Octavia", "Volvo V60", "Mazda 3", "Kia Niro", "Fiat Panda", "Honda Jazz"),
    ),
    Slot(
        "doctor",
        "My new GP is Dr. {v}, much nicer than the last one.",
        "GP is Dr. {v}",
        "Who is my GP?",
        ("Okafor", "Lindqvist", "Moreau", "Haddad", "Novak", "Tanaka"),
    ),
    Slot(
        "language",
        "I'm learning {v} before the trip in June.",
        "Is learning {v}",
        "Which language am I learning?",
        ("Portuguese", "Japanese", "Finnish", "Greek", "Turkish", "Korean"),
    ),
    Slot(
        "allergy",
        "Just so you know, I'm allergic to {v}.",
        "Allergic to {v}",
        "What am I allergic to?",
        ("peanuts", "shellfish", "sesame", "kiwi", "penicillin", "latex"),
    ),
    Slot(
        "team",
        "Big match tonight, I've supported {v} since I was six.",
        "Supports {v}",
        "Which team do I support?",
        ("Benfica", "Celtic", "Ajax", "Napoli", "Feyenoord", "Sevilla"),
    ),
    Slot(
        "partner",
        "My partner {v} just started night shifts at the hospital.",
        "Partner is {v}",
        "What is my partner's name?",
        ("Tomas", "Priya", "Noor", "Elias", "Rafa", "Sunniva"),
    ),
)

NOISE_SENTENCES = (
    "The weather has been awful all week.",
    "Can you remind me to water the plants?",
    "Work was busy today, nothing special.",
)


@dataclass
class Truth:
    """The planted fault of one failed case (case id: the answer's trace id)."""

    case_id: str
    label: str
    span_id: str
    fault: str
    question: str
    expected: str
    answer: str


@dataclass
class AppRun:
    """What one run of the app wrote and what it planted."""

    traces: Path
    failed: dict[str, Truth] = field(default_factory=dict)
    correct: list[str] = field(default_factory=list)


def _hex(span: Span) -> str:
    return format(span.get_span_context().span_id, "016x")


def _trace_hex(span: Span) -> str:
    return format(span.get_span_context().trace_id, "032x")


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


class _Memory:
    """The app's memory store: records by id, and the app's own slot index."""

    def __init__(self, tracer: Tracer, store: str, capture: bool) -> None:
        self.tracer, self.store, self.capture = tracer, store, capture
        self.records: dict[str, str] = {}
        self.history: dict[str, list[str]] = {}
        self.by_slot: dict[str, str] = {}
        self.counter = 0

    def _span(self, operation: str) -> Span:
        span = self.tracer.start_span(f"{operation} {self.store}", kind=SpanKind.CLIENT)
        span.set_attribute(OPERATION, operation)
        span.set_attribute(PROVIDER, "acme-memory")
        span.set_attribute(STORE, self.store)
        return span

    def _records_attr(self, span: Span, items: Sequence[tuple[str, str, float | None]]) -> None:
        if self.capture:
            records = [
                {"id": rid, "content": text, **({"score": score} if score is not None else {})}
                for rid, text, score in items
            ]
            span.set_attribute(RECORDS, json.dumps(records))

    def add(
        self,
        app: _App,
        text: str,
        facts: Sequence[tuple[str, str]],
        *,
        extracted: Sequence[str] | None = None,
    ) -> tuple[str, str]:
        """``memory.add(messages)``: one ``upsert_memory`` span around the extraction call.

        ``facts`` are (slot, text) pairs the app stores (a known slot is updated in place);
        ``extracted`` is what the extraction call returned (default: the facts' texts).
        Returns the span ids of the add and of the extraction call.
        """
        span = self._span("upsert_memory")
        with trace_api.use_span(span, end_on_exit=False):
            chat = app.chat(
                text,
                json.dumps(
                    {"facts": list(extracted if extracted is not None else [f for _, f in facts])}
                ),
                system="Extract durable facts about the user as a JSON list.",
            )
            chat.finish()
        written: list[tuple[str, str, float | None]] = []
        for slot, fact in facts:
            rid = self.by_slot.get(slot)
            if rid is None or rid not in self.records:
                self.counter += 1
                rid = f"mem-{self.store}-{self.counter:03d}"
                self.history[rid] = []
                self.by_slot[slot] = rid
            self.records[rid] = fact
            self.history[rid].append(fact)
            written.append((rid, fact, None))
        span.set_attribute(RECORD_COUNT, len(written))
        if len(written) == 1:
            span.set_attribute(RECORD_ID, written[0][0])
        self._records_attr(span, written)
        span.end()
        return _hex(span), chat.span_id

    def delete(self, rid: str) -> str:
        span = self._span("delete_memory")
        span.set_attribute(RECORD_ID, rid)
        self.records.pop(rid, None)
        span.end()
        return _hex(span)

    def search(self, query: str, hits: Sequence[tuple[str, str]]) -> str:
        span = self._span("search_memory")
        if self.capture:
            span.set_attribute(QUERY, query)
        span.set_attribute(RECORD_COUNT, len(hits))
        self._records_attr(
            span, [(rid, text, round(0.9 - 0.1 * i, 2)) for i, (rid, text) in enumerate(hits)]
        )
        span.end()
        return _hex(span)


@dataclass
class _Chat:
    """A model call's span: still open when hand-written, already ended when traced upstream."""

    span_id: str
    trace_id: str
    span: Span | None
    context: Context
    tracer: Tracer

    def finish(self, evaluation: dict[str, Any] | None = None, *, on_span: bool = False) -> None:
        """End the call; record an evaluation on its span or on an evaluator's child span."""
        if self.span is not None:
            if evaluation is not None and on_span:
                self.span.add_event(EVALUATION, evaluation)
                evaluation = None
            self.span.end()
        if evaluation is not None:
            evaluator = self.tracer.start_span("evaluate user_feedback", context=self.context)
            evaluator.add_event(EVALUATION, evaluation)
            evaluator.end()


class _LastChat(SpanProcessor):
    """Keeps the chat spans the upstream instrumentor ends, to learn their ids."""

    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        if (span.attributes or {}).get(OPERATION) == "chat":
            self.ended.append(span)

    def pop(self) -> ReadableSpan:
        return self.ended.pop()


class _App:
    def __init__(
        self,
        tracer: Tracer,
        capture: bool,
        rng: random.Random,
        llm: tuple[Any, Any, _LastChat] | None = None,
    ) -> None:
        self.tracer, self.capture, self.rng, self.llm = tracer, capture, rng, llm

    def chat(self, prompt: str, reply: str, *, system: str) -> _Chat:
        """One model call: a hand-written chat span, or a real ``openai`` call traced by the
        upstream OpenAI instrumentor (``opentelemetry-instrumentation-openai-v2``)."""
        if self.llm is not None:
            server, client, last = self.llm
            server.script(Reply(body=reply))
            client.chat.completions.create(
                model="acme-small",
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": prompt},
                ],
            )
            ended = last.pop()
            context = ended.get_span_context()
            return _Chat(
                format(context.span_id, "016x"),
                format(context.trace_id, "032x"),
                None,
                trace_api.set_span_in_context(trace_api.NonRecordingSpan(context)),
                self.tracer,
            )
        span = self.tracer.start_span("chat acme-small", kind=SpanKind.CLIENT)
        span.set_attribute(OPERATION, "chat")
        span.set_attribute(PROVIDER, "openai")
        span.set_attribute(MODEL, "acme-small")
        span.set_attribute("gen_ai.usage.input_tokens", 40 + len(prompt) // 4)
        span.set_attribute("gen_ai.usage.output_tokens", 5 + len(reply) // 4)
        if self.capture:
            messages = json.loads(_messages("system", system)) + json.loads(
                _messages("user", prompt)
            )
            span.set_attribute(INPUT_MESSAGES, json.dumps(messages))
            span.set_attribute(OUTPUT_MESSAGES, _messages("assistant", reply))
        return _Chat(
            _hex(span), _trace_hex(span), span, trace_api.set_span_in_context(span), self.tracer
        )

    def request(self, route: str) -> Span:
        span = self.tracer.start_span(f"POST {route}", kind=SpanKind.SERVER)
        span.set_attribute("http.request.method", "POST")
        span.set_attribute("http.route", route)
        return span

    def db(self) -> None:
        span = self.tracer.start_span("SELECT users", kind=SpanKind.CLIENT)
        span.set_attribute("db.system.name", "postgresql")
        span.set_attribute("db.query.text", "SELECT * FROM users WHERE id = $1")
        span.end()


def run_app(
    folder: Path,
    *,
    capture: bool = True,
    users: int = 5,
    seed: int = 0,
    questions: int = 12,
    server: Any = None,
) -> AppRun:
    """Run the app for ``users`` users and write its spans to ``folder/traces.jsonl``.

    Per user: one message per fact (each its own trace), then ``questions`` questions (each its
    own trace); failed questions carry one planted fault, in the order of :data:`FAULTS`.
    """
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "traces.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "acme-assistant"}))
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(path)))
    tracer = provider.get_tracer("acme.memory", "1.4.2")
    run = AppRun(traces=path)
    llm = None
    instrumentor: Any = None
    if server is not None:
        # Model calls go through the real openai client to the scripted loopback server, traced by
        # the upstream OpenAI instrumentor (its own spans, its own capture settings).
        import openai
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        last = _LastChat()
        provider.add_span_processor(last)
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        llm = (server, client, last)
    app = _App(tracer, capture, rng, llm)
    fault_cycle = 0
    for user in range(users):
        store = f"user-{user + 1}"
        memory = _Memory(tracer, store, capture)
        slots = rng.sample(SLOTS, k=min(questions, len(SLOTS)))
        values = {s.key: rng.choice(s.values) for s in slots}
        # Which questions fail, and how: about three in four fail.
        plan: dict[str, str | None] = {}
        for index, slot in enumerate(slots):
            if index % 4 == 3:
                plan[slot.key] = None
            else:
                plan[slot.key] = FAULTS[fault_cycle % len(FAULTS)]
                fault_cycle += 1
        culprit: dict[str, str] = {}

        def ingest(
            text: str,
            facts: list[tuple[str, str]],
            extracted: list[str] | None = None,
            memory: _Memory = memory,
        ) -> tuple[str, str]:
            """One message: ``memory.add`` under the request span. Returns (add, extraction)."""
            root = app.request("/messages")
            with trace_api.use_span(root, end_on_exit=True):
                app.db()
                return memory.add(app, text, facts, extracted=extracted)

        for slot in slots:
            value = values[slot.key]
            said = slot.said.format(v=value)
            fact = slot.stored.format(v=value)
            fault = plan[slot.key]
            if fault == "extraction":
                _, extraction = ingest(said, [])  # the extraction call drops the fact
                culprit[slot.key] = extraction
            else:
                ingest(said, [(slot.key, fact)])
            if rng.random() < 0.5:
                ingest(rng.choice(NOISE_SENTENCES), [])
        # Later faults against the stored facts.
        for slot in slots:
            fault = plan[slot.key]
            rid = memory.by_slot.get(slot.key)
            if fault == "update" and rid is not None:
                other = rng.choice([v for v in slot.values if v != values[slot.key]])
                friend = rng.choice(["Tom", "Lena", "Kofi", "Ana"])
                # The message is about a friend; the app's merge step overwrites the user's fact.
                text = f"My friend {friend} is obsessed with {other} lately."
                add, _ = ingest(
                    text,
                    [(slot.key, slot.stored.format(v=other))],
                    extracted=[f"Friend {friend} likes {other}"],
                )
                culprit[slot.key] = add
                values[slot.key + ":wrong"] = other
            elif fault == "deletion" and rid is not None:
                root = app.request("/messages")
                with trace_api.use_span(root, end_on_exit=True):
                    chat = app.chat(
                        "Please forget the dentist appointment, it was cancelled.",
                        json.dumps({"facts": [], "forget": ["dentist appointment"]}),
                        system="Extract durable facts about the user as a JSON list.",
                    )
                    chat.finish()
                    culprit[slot.key] = memory.delete(rid)  # deletes the wrong record
            elif fault == "stale" and rid is not None:
                # A real change, stored correctly; the search will serve the old version.
                new = rng.choice([v for v in slot.values if v != values[slot.key]])
                values[slot.key + ":old"] = values[slot.key]
                values[slot.key] = new
                ingest(slot.said.format(v=new), [(slot.key, slot.stored.format(v=new))])
        # Questions.
        distractors = [
            (rid, text)
            for rid, text in memory.records.items()
            if rid not in {memory.by_slot.get(s.key) for s in slots}
        ]
        for slot in slots:
            fault = plan[slot.key]
            rid = memory.by_slot.get(slot.key)
            expected = values[slot.key]
            root = app.request("/chat")
            with trace_api.use_span(root, end_on_exit=True):
                others = [
                    (r, t)
                    for r, t in memory.records.items()
                    if r != rid and (r, t) not in distractors
                ]
                rng.shuffle(others)
                noise = others[:2]
                if fault in ("extraction", "deletion") or rid is None:
                    hits = noise
                elif fault == "retrieval":
                    hits = noise  # the record is live, but the search misses it
                elif fault == "stale":
                    hits = [(rid, memory.history[rid][-2]), *noise]
                else:
                    hits = [(rid, memory.records[rid]), *noise]
                search_id = memory.search(slot.question, hits)
                context = "\n".join(f"- {t}" for _, t in hits)
                prompt = f"Memories:\n{context}\n\nQuestion: {slot.question}"
                if fault == "update":
                    answer = values[slot.key + ":wrong"]
                elif fault == "stale":
                    answer = values[slot.key + ":old"]
                elif fault in ("extraction", "deletion", "retrieval"):
                    answer = "I'm not sure, you haven't told me."
                elif fault == "response":
                    wrong = rng.choice([v for v in slot.values if v != expected])
                    answer = wrong
                else:
                    answer = expected
                chat = app.chat(prompt, answer, system="Answer from the memories.")
                case_id = chat.trace_id
                failed = fault is not None
                if fault == "retrieval" or fault == "stale":
                    culprit[slot.key] = search_id
                elif fault == "response":
                    culprit[slot.key] = chat.span_id
                explanation = (
                    f"Expected answer: {expected}"
                    if failed and rng.random() < 0.5
                    else ("The assistant got it wrong." if failed else "Looks right.")
                )
                attributes: dict[str, str | float] = {
                    "gen_ai.evaluation.name": "user_feedback",
                    "gen_ai.evaluation.score.label": "incorrect" if failed else "correct",
                    "gen_ai.evaluation.score.value": 0.0 if failed else 1.0,
                    A.GEN_AI_EVALUATION_EXPLANATION: explanation,
                }
                chat.finish(attributes, on_span=rng.random() < 0.5)
            if failed:
                assert fault is not None
                run.failed[case_id] = Truth(
                    case_id=case_id,
                    label=LABELS[fault],
                    span_id=culprit[slot.key],
                    fault=fault,
                    question=slot.question,
                    expected=expected,
                    answer=answer,
                )
            else:
                run.correct.append(case_id)
    if instrumentor is not None:
        instrumentor.uninstrument()
    provider.shutdown()
    return run


def _main() -> None:
    """``python -m tests._upstream_app FOLDER SEED``: the app with its model calls through the real
    ``openai`` client and the upstream OpenAI instrumentor, in a process of its own.

    The upstream instrumentation reads ``OTEL_SEMCONV_STABILITY_OPT_IN`` once per process, so a
    test process that already ran it with other settings cannot switch it on; a fresh process
    can. Writes ``truth.json`` (failed cases and correct case ids) next to the traces.
    """
    import sys
    from dataclasses import asdict

    from tests._openai_server import ScriptedOpenAI

    folder, seed = Path(sys.argv[1]), int(sys.argv[2])
    with ScriptedOpenAI(responder=lambda kind, body: "unscripted") as server:
        run = run_app(folder, seed=seed, server=server)
    truth = {"failed": {c: asdict(t) for c, t in run.failed.items()}, "correct": run.correct}
    (folder / "truth.json").write_text(json.dumps(truth))


if __name__ == "__main__":
    _main()

"""The engine interface every LLM-backed step goes through, and its two implementations.

- :class:`OfflineEngine` (the embedded default): deterministic rules (``_facts``) for fact
  extraction, update decisions, segmentation, profiles, sufficiency checks and extractive
  answers; a hashed bag-of-words "embedding". No network, no model.
- :class:`OpenAIEngine`: any OpenAI-compatible endpoint through the ``openai`` client
  (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, a model name). Structured steps ask for a JSON object;
  a malformed reply is retried once, then :class:`EngineReplyError` is raised (the calling op is
  recorded as failed and the pipeline degrades). An unreachable or erroring endpoint, after the
  client's retries, raises :class:`EngineUnavailableError` naming the endpoint. Replies are
  cached by request, so a counterfactual replay sees the same model behaviour.

Prompt templates are plain strings with ``{name}`` placeholders (other braces are left alone,
so JSON examples need no escaping).

>>> render_prompt('Say {word} as {"json": 1}', word="hi")
'Say hi as {"json": 1}'
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from memtrace_bench.systems import _facts as F
from memtrace_bench.systems._judge import judge_answer
from memtrace_bench.systems._protocol import (
    Decision,
    Engine,
    EngineReplyError,
    EngineUnavailableError,
    MemCellContent,
    Sufficiency,
)
from memtrace_otel._openai import endpoint_settings, missing_settings, openai_client
from memtrace_otel.attribution._tokens import content_tokens, overlap

T = TypeVar("T")

EMBEDDING_DIMS = 256
"""Width of the offline engine's hashed bag-of-words vectors."""


def render_prompt(template: str, **values: object) -> str:
    """Fill ``{name}`` placeholders that ``values`` names; leave every other brace alone."""

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        return str(values[key]) if key in values else match.group(0)

    return re.sub(r"\{(\w+)\}", fill, template)


def hashed_embedding(text: str, dims: int = EMBEDDING_DIMS) -> list[float]:
    """A deterministic unit vector of hashed, stemmed content tokens (the offline "embedding").

    >>> v = hashed_embedding("Maya lives in Porto")
    >>> len(v), round(sum(x * x for x in v), 6)
    (256, 1.0)
    """
    vec = [0.0] * dims
    for token in content_tokens(text):
        h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "big")
        vec[h % dims] += 1.0 if (h >> 31) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec] if norm else vec


def _split_line(line: str) -> tuple[str | None, str | None, str]:
    match = F.CONTEXT_HEADER.match(line.strip())
    if match is None:
        return None, None, line.strip()
    return match["date"].replace(",", ""), match["speaker"], line.strip()[match.end() :]


def _is_assistant(speaker: str | None) -> bool:
    return speaker is not None and speaker.lower() in ("assistant", "ai", "bot")


class OfflineEngine:
    """Deterministic rules in place of a model (see ``memtrace_bench.systems._facts``).

    Good enough that most synthetic questions are answered right; what remains wrong is wrong
    for a reason a trace can show (a trimmed window, a missed retrieval, a lossy update).
    """

    name = "offline"
    model = "offline-rules"

    def extract_facts(self, prompt: str, lines: Sequence[str]) -> list[str]:
        """Facts of every non-assistant line, in the third person, dates resolved."""
        out: list[str] = []
        for line in lines:
            date, speaker, body = _split_line(line)
            if _is_assistant(speaker):
                continue
            for fact in F.extract_facts(speaker, body, date):
                if fact not in out:
                    out.append(fact)
        return out

    def decide(
        self, prompt: str, facts: Sequence[str], existing: Sequence[tuple[str, str]]
    ) -> list[Decision]:
        """Same subject and relation: NONE if same value, UPDATE a single-valued one, else ADD;
        a forget request DELETEs the memories of its topic."""
        parsed = [(mid, text, _first_fact(text)) for mid, text in existing]
        decisions: list[Decision] = []
        touched: set[str] = set()
        for text in facts:
            fact = _first_fact(text)
            if fact.relation == F.FORGET:
                for mid, old, other in parsed:
                    if (
                        mid not in touched
                        and other.subject == fact.subject
                        and other.relation == fact.value
                    ):
                        decisions.append(Decision("DELETE", old, mid, old))
                        touched.add(mid)
                continue
            if any(old.strip().lower() == text.strip().lower() for _, old, _ in parsed):
                decisions.append(Decision("NONE", text))
                continue
            same = [
                (mid, old, other)
                for mid, old, other in parsed
                if mid not in touched
                and fact.relation != F.GENERIC
                and other.subject == fact.subject
                and other.relation == fact.relation
                and (fact.relation in F.SINGLE_VALUED or other.value == fact.value)
            ]
            if not same:
                decisions.append(Decision("ADD", text))
                continue
            mid, old, other = same[0]
            if other.value == fact.value and not (fact.date and not other.date):
                decisions.append(Decision("NONE", text, mid, old))
                continue
            decisions.append(Decision("UPDATE", text, mid, old))
            touched.add(mid)
        return decisions

    def answer(self, prompt: str, question: str, context: Sequence[str]) -> str:
        """The rule-based extractive answer."""
        return F.answer_question(question, context)

    def judge(
        self, prompt: str, question: str, gold_answers: Sequence[str], prediction: str
    ) -> bool:
        """The deterministic judge (abstention when the gold answer says "not mentioned")."""
        abstention = any("not mentioned" in g.lower() for g in gold_answers)
        return judge_answer(prediction, gold_answers, abstention=abstention).correct

    def detect_boundary(self, prompt: str, buffer: Sequence[str], message: str) -> bool:
        """Close an episode after 8 lines, or after 4 when a user line shares no words with it."""
        if len(buffer) >= 8:
            return True
        _, speaker, body = _split_line(message)
        if len(buffer) < 4 or _is_assistant(speaker):
            return False
        return overlap(body, " ".join(buffer)) < 0.1

    def memcell(self, prompt: str, lines: Sequence[str]) -> MemCellContent:
        """The episode keeps the non-assistant lines; the facts are their extracted facts."""
        kept = [line for line in lines if not _is_assistant(_split_line(line)[1])]
        return MemCellContent("\n".join(kept), tuple(self.extract_facts(prompt, lines)))

    def update_profile(
        self, prompt: str, profile: Sequence[str], facts: Sequence[str]
    ) -> list[str]:
        """Structured attributes only; a single-valued one is replaced, a forgotten one removed."""
        lines = list(profile)
        for text in facts:
            fact = _first_fact(text)
            if fact.relation == F.GENERIC:
                continue
            if fact.relation == F.FORGET:
                lines = [
                    old
                    for old in lines
                    if not (
                        _first_fact(old).subject == fact.subject
                        and _first_fact(old).relation == fact.value
                    )
                ]
                continue
            if fact.relation in F.SINGLE_VALUED:
                lines = [
                    old
                    for old in lines
                    if not (
                        _first_fact(old).subject == fact.subject
                        and _first_fact(old).relation == fact.relation
                    )
                ]
            if text not in lines:
                lines.append(text)
        return lines

    def check_sufficiency(
        self, prompt: str, question: str, documents: Sequence[str]
    ) -> Sufficiency:
        """Sufficient when the rules find an answer; else queries naming the relation and,
        for a question about a relative, the relative's name once it is known."""
        lines = [line for doc in documents for line in doc.splitlines()]
        if F.answer_question(question, lines) != F.ABSTAIN:
            return Sufficiency(True)
        spec = F.parse_question(question)
        if spec is None:
            return Sufficiency(False, (" ".join(content_tokens(question)),))
        words = " ".join(F.relation_keywords(spec))
        queries = [f"{spec.subject} {words}"]
        if spec.via:
            queries.append(f"{spec.subject} {spec.via} named")
            names = [
                c.fact.value
                for c in F.read_context(lines)
                if c.fact.relation == F.SIBLING
                and c.fact.subject == spec.subject
                and c.fact.detail == spec.via
            ]
            if names:
                queries.append(f"{names[-1]} {words}")
        return Sufficiency(False, tuple(queries))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Hashed bag-of-words unit vectors."""
        return [hashed_embedding(t) for t in texts]


def _first_fact(text: str) -> F.Fact:
    date, speaker, body = _split_line(text)
    facts = F.parse_statement(speaker, body, date)
    return facts[0] if facts else F.Fact("", F.GENERIC, text)


# --- the OpenAI-compatible engine -------------------------------------------------------------
_JSON_BLOCK = re.compile(r"\{.*\}", re.S)


def _parse_json_object(content: str) -> dict[str, Any]:
    """The JSON object in a reply (also inside a fenced block or after some words)."""
    text = content.strip()
    try:
        value = json.loads(text)
    except ValueError:
        match = _JSON_BLOCK.search(text)
        if match is None:
            raise ValueError("no JSON object in the reply") from None
        value = json.loads(match.group(0))
    if not isinstance(value, dict):
        raise ValueError("the reply is JSON but not an object")
    return value


def _string_list(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field} must be a list of strings")
    return [v.strip() for v in value if v.strip()]


class OpenAIEngine:
    """An engine on any OpenAI-compatible endpoint, through the ``openai`` client.

    Args:
        model: the chat model name.
        base_url: the endpoint (``.../v1``); ``None`` reads ``OPENAI_BASE_URL``. Never
            defaulted (see :mod:`memtrace_otel._openai`): for OpenAI's own, name it.
        api_key: ``None`` reads ``OPENAI_API_KEY``; a loopback ``base_url`` may go without.
        embeddings_model: the embeddings model; ``None`` uses the offline hashed vectors.
        max_retries: the client's retries on connection errors, 408/429 and 5xx replies.
        timeout: seconds per request.

    Raises:
        ValueError: an empty model name, no endpoint, or no API key for a non-loopback one.
    """

    name = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        embeddings_model: str | None = None,
        max_retries: int = 2,
        timeout: float = 60.0,
    ) -> None:
        import openai  # lazily: the offline path never needs it

        if not model:
            raise ValueError("the openai engine needs a model name")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        url, key = endpoint_settings(base_url, api_key)
        missing = missing_settings(url, key)
        if url is None or key is None:
            raise ValueError(f"the openai engine needs an endpoint; missing: {', '.join(missing)}")
        self.model = model
        self.embeddings_model = embeddings_model
        self.base_url = url
        self.max_retries = max_retries
        self._openai = openai
        self._client = openai_client(url, key, timeout=timeout, max_retries=max_retries)
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    # -- transport ---------------------------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        openai = self._openai
        try:
            return fn()
        except openai.APIConnectionError as exc:  # includes timeouts
            raise EngineUnavailableError(
                f"unreachable after {self.max_retries + 1} attempts ({exc})", endpoint=self.base_url
            ) from None
        except openai.APIStatusError as exc:
            raise EngineUnavailableError(
                f"HTTP {exc.status_code} after {self.max_retries + 1} attempts: {exc.message}",
                endpoint=self.base_url,
            ) from None

    def _chat(self, prompt: str, *, json_mode: bool) -> str:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
        }
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        reply = self._call(lambda: self._client.chat.completions.create(**kwargs))
        choices = getattr(reply, "choices", None) or []
        content = choices[0].message.content if choices else None
        return content or ""

    def _task(self, task: str, prompt: str, parse: Callable[[str], T], *, json_mode: bool) -> T:
        """Ask, parse, retry a malformed reply once; cache the outcome (also a failure)."""
        key = hashlib.sha256(f"{task}\x00{json_mode}\x00{prompt}".encode()).hexdigest()
        with self._lock:
            if key in self._cache:
                cached = self._cache[key]
                if isinstance(cached, EngineReplyError):
                    raise cached
                return cached  # type: ignore[no-any-return]
        problem = ""
        for _attempt in range(2):
            content = self._chat(prompt, json_mode=json_mode)
            try:
                result = parse(content)
            except (ValueError, KeyError, TypeError) as exc:
                problem = f"{exc}; reply was {content[:120]!r}"
                continue
            with self._lock:
                self._cache[key] = result
            return result
        error = EngineReplyError(f"{task}: malformed reply from {self.base_url} twice: {problem}")
        with self._lock:
            self._cache[key] = error
        raise error

    # -- steps -------------------------------------------------------------------------------
    def extract_facts(self, prompt: str, lines: Sequence[str]) -> list[str]:
        """Facts from a ``{"facts": [...]}`` reply."""
        text = render_prompt(prompt, conversation="\n".join(lines))
        return self._task(
            "extract_facts",
            text,
            lambda c: _string_list(_parse_json_object(c)["facts"], "facts"),
            json_mode=True,
        )

    def decide(
        self, prompt: str, facts: Sequence[str], existing: Sequence[tuple[str, str]]
    ) -> list[Decision]:
        """Decisions from a ``{"memory": [{"id", "text", "event", "old_memory"}]}`` reply."""
        old = json.dumps([{"id": i, "text": t} for i, t in existing], ensure_ascii=False)
        text = render_prompt(
            prompt, existing=old, facts=json.dumps(list(facts), ensure_ascii=False)
        )
        known = {i for i, _ in existing}

        def parse(content: str) -> list[Decision]:
            items = _parse_json_object(content)["memory"]
            if not isinstance(items, list):
                raise ValueError("memory must be a list")
            out = []
            for item in items:
                event = str(item["event"]).upper()
                if event not in ("ADD", "UPDATE", "DELETE", "NONE"):
                    raise ValueError(f"unknown event {event!r}")
                mid = item.get("id")
                mid = str(mid) if mid is not None else None
                if event in ("UPDATE", "DELETE") and mid not in known:
                    raise ValueError(f"{event} of unknown memory id {mid!r}")
                out.append(Decision(event, str(item.get("text", "")), mid, item.get("old_memory")))
            return out

        return self._task("decide", text, parse, json_mode=True)

    def answer(self, prompt: str, question: str, context: Sequence[str]) -> str:
        """A plain-text answer (an empty reply is malformed)."""
        text = render_prompt(prompt, question=question, context="\n".join(context))

        def parse(content: str) -> str:
            if not content.strip():
                raise ValueError("empty answer")
            return content.strip()

        return self._task("answer", text, parse, json_mode=False)

    def judge(
        self, prompt: str, question: str, gold_answers: Sequence[str], prediction: str
    ) -> bool:
        """``{"label": "CORRECT" | "WRONG"}``."""
        text = render_prompt(
            prompt, question=question, gold=" | ".join(gold_answers), prediction=prediction
        )

        def parse(content: str) -> bool:
            label = str(_parse_json_object(content)["label"]).strip().upper()
            if label not in ("CORRECT", "WRONG"):
                raise ValueError(f"unknown label {label!r}")
            return label == "CORRECT"

        return self._task("judge", text, parse, json_mode=True)

    def detect_boundary(self, prompt: str, buffer: Sequence[str], message: str) -> bool:
        """``{"should_end": bool}``."""
        text = render_prompt(prompt, buffer="\n".join(buffer), message=message)

        def parse(content: str) -> bool:
            value = _parse_json_object(content)["should_end"]
            if not isinstance(value, bool):
                raise ValueError("should_end must be a boolean")
            return value

        return self._task("detect_boundary", text, parse, json_mode=True)

    def memcell(self, prompt: str, lines: Sequence[str]) -> MemCellContent:
        """``{"episode": str, "facts": [str]}``."""
        text = render_prompt(prompt, conversation="\n".join(lines))

        def parse(content: str) -> MemCellContent:
            data = _parse_json_object(content)
            episode = data["episode"]
            if not isinstance(episode, str) or not episode.strip():
                raise ValueError("episode must be a non-empty string")
            return MemCellContent(episode.strip(), tuple(_string_list(data["facts"], "facts")))

        return self._task("memcell", text, parse, json_mode=True)

    def update_profile(
        self, prompt: str, profile: Sequence[str], facts: Sequence[str]
    ) -> list[str]:
        """``{"profile": [str]}``."""
        text = render_prompt(prompt, profile="\n".join(profile), facts="\n".join(facts))
        return self._task(
            "update_profile",
            text,
            lambda c: _string_list(_parse_json_object(c)["profile"], "profile"),
            json_mode=True,
        )

    def check_sufficiency(
        self, prompt: str, question: str, documents: Sequence[str]
    ) -> Sufficiency:
        """``{"is_sufficient": bool, "refined_queries": [str]}``."""
        text = render_prompt(prompt, question=question, documents="\n---\n".join(documents))

        def parse(content: str) -> Sufficiency:
            data = _parse_json_object(content)
            ok = data["is_sufficient"]
            if not isinstance(ok, bool):
                raise ValueError("is_sufficient must be a boolean")
            queries = _string_list(data.get("refined_queries", []), "refined_queries")
            return Sufficiency(ok, tuple(queries[:3]))

        return self._task("check_sufficiency", text, parse, json_mode=True)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors from the embeddings endpoint, or the offline hashed ones without a model."""
        if not self.embeddings_model or not texts:
            return [hashed_embedding(t) for t in texts]
        model = self.embeddings_model
        key = hashlib.sha256(
            ("embed\x00" + model + "\x00" + "\x00".join(texts)).encode()
        ).hexdigest()
        with self._lock:
            if key in self._cache:
                return self._cache[key]  # type: ignore[no-any-return]
        reply = self._call(lambda: self._client.embeddings.create(model=model, input=list(texts)))
        data = sorted(reply.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise EngineReplyError(
                f"embed: {self.base_url} returned {len(data)} vectors for {len(texts)} texts"
            )
        vectors = [_unit([float(x) for x in d.embedding]) for d in data]
        with self._lock:
            self._cache[key] = vectors
        return vectors


def _unit(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec] if norm else vec


ENGINES = ("offline", "openai")
"""The engine names :func:`make_engine` knows."""


def make_engine(
    name: str = "offline",
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    embeddings_model: str | None = None,
    max_retries: int = 2,
    options: Mapping[str, Any] | None = None,
) -> Engine:
    """An engine by name: ``offline`` or ``openai``.

    Raises:
        ValueError: an unknown name, or the openai engine without a model.
    """
    if name == "offline":
        return OfflineEngine()
    if name == "openai":
        return OpenAIEngine(
            model=model or os.environ.get("OPENAI_MODEL") or "",
            base_url=base_url,
            api_key=api_key,
            embeddings_model=embeddings_model,
            max_retries=max_retries,
            **dict(options or {}),
        )
    raise ValueError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}")

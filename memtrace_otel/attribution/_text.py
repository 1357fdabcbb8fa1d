"""Text matching for evidence: which tokens bear the answer, and whether a value still holds them.

Deliberately deterministic and offline: attribution must give the same verdict twice with no
network. Tokens, stop words and stemming are the package's one tokenizer
(:mod:`memtrace_otel.systems._text`), so ``lives``/``living``/``lived`` meet; ranking is
``rank_bm25`` (through :class:`memtrace_otel.systems.Bm25Index`, the package's one BM25).

What this module adds is the notion of *key* tokens: the tokens a value must keep to still hold
a fact. Word overlap alone is not enough: a rewrite that swaps the city, or a summary that drops
the date, keeps most of the words and loses the fact. Key tokens are the answer's tokens when
they are known, else the names, numbers and dates of the evidence that the question does not
already name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from memtrace_otel.systems import Bm25Index
from memtrace_otel.systems._text import STOPWORDS, content_tokens, stem

__all__ = [
    "Corpus",
    "asks_for_time",
    "bm25_ranking",
    "content_tokens",
    "entity_tokens",
    "has_tokens",
    "is_non_answer",
    "recall",
    "says_undated",
    "segment_words",
]

_WORD = re.compile(r"[A-Za-z0-9]+")
_INITIAL = re.compile(r"(?:^|[.!?:;\n\]\[\"(]\s*)$")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
_MONTHS = frozenset(
    [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ]
)
_TIME_QUESTION = re.compile(
    r"\b(when|what (?:date|day|month|year|time)|which (?:date|day|month|year)|how long ago)\b",
    re.IGNORECASE,
)
_UNDATED = re.compile(
    r"\bdates?\b(?: (?:is|was|were|has been|had been))? (?:not|never) (?:given|known|"
    r"mentioned|stated|specified|said|recorded)\b|\bdates? (?:unknown|unclear|unspecified|"
    r"uncertain|missing)\b|\b(?:no|unknown|unspecified|unclear|uncertain|without an?y?) dates?\b"
    r"|\bundated\b",
    re.IGNORECASE,
)
_NON_ANSWER = re.compile(
    r"\b(i (?:do not|don'?t|cannot|can'?t) (?:know|tell|say|answer|recall|remember)|"
    r"not (?:mentioned|specified|stated|known|sure|available|provided)|no (?:information|record|"
    r"mention|answer)|unknown|unanswerable|cannot be determined|none given)\b",
    re.IGNORECASE,
)


def recall(needle: Iterable[str], haystack: Iterable[str]) -> float:
    """Share of the distinct ``needle`` tokens found in ``haystack`` (1.0 for an empty needle).

    >>> recall(["porto", "ana"], ["ana", "live", "porto"])
    1.0
    """
    wanted = set(needle)
    if not wanted:
        return 1.0
    return len(wanted & set(haystack)) / len(wanted)


@functools.lru_cache(maxsize=1 << 16)
def entity_tokens(text: str, *, anywhere: bool = False) -> frozenset[str]:
    """Stemmed tokens of the names, numbers and months in ``text``.

    A name is a capitalised word that does not open a sentence (there capitals say nothing;
    ``anywhere``: they do, as in a short answer like "Vienna") and is not a stop word.

    >>> sorted(entity_tokens("Big news: I moved to Porto on 7 May 2023 with my sister."))
    ['2023', '7', 'may', 'porto']
    """
    out = set()
    for match in _WORD.finditer(text):
        word = match.group()
        low = word.lower()
        if (
            low in _MONTHS
            or word[0].isdigit()
            or (
                word[0].isupper()
                and low not in STOPWORDS
                and (
                    anywhere or not _INITIAL.search(text, max(0, match.start() - 3), match.start())
                )
            )
        ):
            out.add(stem(low))
    return frozenset(out)


def has_tokens(key: frozenset[str], strict: frozenset[str], words: frozenset[str]) -> bool:
    """Whether ``words`` holds the ``key`` tokens: every ``strict`` one (names, numbers, dates:
    a swapped city or a shifted day is a different fact), and most of the rest.

    >>> key = frozenset({"4", "february", "2023"})
    >>> has_tokens(key, key, frozenset({"move", "4", "march", "2023"}))
    False
    >>> has_tokens(frozenset({"software", "engineer"}), frozenset(), frozenset({"engineer"}))
    False
    """
    if not key:
        return False
    if strict - words:
        return False
    loose = key - strict
    if not loose:
        return True
    found = len(loose & words)
    return found == len(loose) if len(loose) <= 2 else found / len(loose) >= 0.6


@functools.lru_cache(maxsize=1 << 16)
def segment_words(text: str) -> tuple[frozenset[str], ...]:
    """Content tokens of each line and sentence of a value (cached: the same records are tested
    for every case of their store).

    >>> [sorted(s) for s in segment_words("Ana lives in Porto. Bob has a cat.")]
    [['ana', 'live', 'porto'], ['bob', 'cat']]
    """
    parts = (part for line in text.splitlines() for part in _SENTENCE.split(line))
    return tuple(words for words in (frozenset(content_tokens(p)) for p in parts) if words)


def asks_for_time(question: str) -> bool:
    """Whether the question asks when something happened (then the date is the answer).

    >>> asks_for_time("When did Ana move to Porto?"), asks_for_time("Where does Ana live?")
    (True, False)
    """
    return bool(_TIME_QUESTION.search(question))


def says_undated(text: str) -> bool:
    """Whether a text says that its date is unknown ("date not given", "no date", "undated").

    >>> says_undated("Ana got engaged (date not given)."), says_undated("Ana got engaged.")
    (True, False)
    """
    return bool(_UNDATED.search(text))


def is_non_answer(text: str) -> bool:
    """Whether an answer declines to answer ("I don't know", "not mentioned").

    >>> is_non_answer("I don't know."), is_non_answer("Porto")
    (True, False)
    """
    return bool(_NON_ANSWER.search(text)) or not content_tokens(text)


class Corpus:
    """Texts with their content tokens and a BM25+ index, built once and searched many times.

    >>> Corpus(["Ana lives in Porto", "Bob has a cat"]).ranking("Where does Ana live?")
    [(0, ...)]
    """

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.words = [frozenset(content_tokens(t)) for t in self.texts]
        self._index = Bm25Index([(str(i), text) for i, text in enumerate(self.texts)])

    def ranking(self, query: str) -> list[tuple[int, float]]:
        """Indexes of the texts sharing a word with ``query``, best BM25+ score first."""
        return [(int(k), score) for k, score in self._index.search(query, len(self.texts))]

    def telling(self, query: str) -> set[str]:
        """The query's words that tell the texts apart (in at most half of them): a user's
        own name, in every message, says nothing about which one is meant. In a store of one
        or two texts every shared word tells.

        >>> sorted(Corpus(["Erin's dog is called Rex."]).telling("What is Erin's dog called?"))
        ['call', 'dog', 'erin']
        """
        asked = set(content_tokens(query))
        n = len(self.words)
        found = {w: sum(w in d for d in self.words) for w in asked}
        if n <= 2:
            return {w for w, df in found.items() if df}
        return {w for w, df in found.items() if 0 < df * 2 <= n}


def bm25_ranking(docs: Sequence[str], query: str) -> list[tuple[int, float]]:
    """Indexes of the documents sharing a word with ``query``, best BM25+ score first.

    >>> bm25_ranking(["Ana lives in Porto", "Bob has a cat"], "Where does Ana live?")
    [(0, ...)]
    """
    return Corpus(docs).ranking(query)

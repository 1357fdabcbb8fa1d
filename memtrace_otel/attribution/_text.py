"""Text matching for evidence: which tokens bear the answer, and whether a value still holds them.

Deliberately deterministic and offline: attribution must give the same verdict twice with no
network. Tokens, stop words and stemming are the package's one tokenizer
(:mod:`memtrace_otel.attribution._tokens`), so ``lives``/``living``/``lived`` meet; ranking is
BM25+ (:class:`memtrace_otel.attribution._tokens.Bm25Index`, the package's one BM25).

Words alone miss paraphrase ("What car does Elena drive?" against "I bought a Tesla Model 3
today!"): :meth:`Corpus.similarity` scores the texts by meaning with the package's sentence encoder
(:mod:`memtrace_otel.attribution._semantic`, all-MiniLM-L6-v2 in numpy), and
:meth:`Corpus.hybrid_ranking` fuses that with BM25 (see there). Without a model installed both fall
back to words alone.

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
from typing import TYPE_CHECKING

from memtrace_otel.attribution._semantic import default_encoder
from memtrace_otel.attribution._tokens import (
    STOPWORDS,
    Bm25Index,
    _content_tokens,
    content_tokens,
    stem,
)

if TYPE_CHECKING:
    from memtrace_otel.attribution._semantic import Vectors

__all__ = [
    "SEMANTIC_FLOOR",
    "Corpus",
    "asks_for_time",
    "content_tokens",
    "date_numbers",
    "entity_tokens",
    "has_tokens",
    "is_non_answer",
    "recall",
    "says_undated",
    "segment_words",
]

SEMANTIC_FLOOR = 0.25
"""Cosine (all-MiniLM-L6-v2) from which a text counts as near a question by meaning.

Chosen from the model's behaviour on sentences written for the purpose (not a benchmark's
templates; they are in benchmarks/bench_semantic.py): questions about a named person against
first-person chat messages that answer them in other words scored 0.20 to 0.58 (median 0.33),
against unrelated messages a median of 0.06, 95 % below 0.22 and 99 % below 0.32. Above 0.25 the
best-scoring message was the right one in 14 of 21 questions, 14 of 17 when it also led the
runner-up by 0.03: meaning finds what words cannot, but it is a hint, not proof."""
_WORD = re.compile(r"[A-Za-z0-9]+")
_NAME = re.compile(r"(?<=[a-z0-9,;:] )([A-Z][a-z]+)(?:'s)?\b")
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
# A decline, by English grammar: the speaker negates knowing, having, finding or recalling
# ("I don't know", "I do not have any details", "I couldn't find anything"), has no knowledge
# ("I have no idea", "no information"), or says the fact was never given ("wasn't mentioned").
_NON_ANSWER = re.compile(
    r"\b(i(?:'m| am)? (?:do not|don'?t|did not|didn'?t|cannot|can'?t|could not|couldn'?t|"
    r"am unable to|was unable to|unable to|not able to) (?:\w+ ){0,2}?(?:know|tell|say|answer|"
    r"recall|remember|find|see|locate|determine)\b|"
    r"(?:i|we) (?:do not|don'?t|did not|didn'?t) have (?:\w+ )?(?:information|info|details?|"
    r"record|memory|memories|knowledge|data|mention)|"
    r"(?:i|we) (?:have|had|'ve) (?:no|not) (?:\w+ )?(?:idea|information|info|details?|record|"
    r"memory|memories|knowledge|data|mention)|"
    r"(?:\w+n'?t|not|never|nothing) (?:been |being )?(?:mentioned|specified|stated|known|"
    r"available|provided|shared|recorded|given)|not sure|no (?:information|info|details?|record|"
    r"mention|answer|idea|data)|unknown|unanswerable|cannot be determined|none given)\b",
    re.IGNORECASE,
)


def recall(needle: Iterable[str], haystack: Iterable[str]) -> float:
    """Share of the distinct ``needle`` tokens found in ``haystack`` (1.0 for an empty needle).

    >>> recall(["porto", "ana"], ["ana", "live", "porto"])
    1.0
    """
    # Sets are taken as they are (the hot callers pass frozensets): no copy of either.
    wanted = needle if isinstance(needle, frozenset | set) else set(needle)
    if not wanted:
        return 1.0
    found = haystack if isinstance(haystack, frozenset | set) else set(haystack)
    return len(wanted & found) / len(wanted)


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


def segment_words(text: str) -> tuple[frozenset[str], ...]:
    """Content tokens of each line and sentence of a value (cached: the same records are tested
    for every case of their store).

    >>> [sorted(s) for s in segment_words("Ana lives in Porto. Bob has a cat.")]
    [['ana', 'live', 'porto'], ['bob', 'cat']]
    """
    return _segmented(text)[0]


def word_count(text: str) -> int:
    """``content_token_count(text)``, counted over the lines and sentences that
    :func:`segment_words` reads (no token spans two of them: they are cut at whitespace), in
    the same pass: a value is tokenized once, not whole and then again by parts.

    >>> from memtrace_otel.attribution._tokens import content_token_count
    >>> text = "Ana's cat is called Tofu. She moved to Porto!" + chr(10) + "Bob's; Ann"
    >>> word_count(text), content_token_count(text)
    (8, 8)
    """
    return _segmented(text)[1]


@functools.lru_cache(maxsize=1 << 16)
def _segmented(text: str) -> tuple[tuple[frozenset[str], ...], int]:
    """:func:`segment_words` and :func:`word_count` of ``text``, in one pass (cached)."""
    segments = []
    count = 0
    for line in text.splitlines():
        for part in _SENTENCE.split(line):
            tokens = _content_tokens(part)
            if tokens:
                count += len(tokens)
                segments.append(frozenset(tokens))
    return tuple(segments), count


def asks_for_time(question: str) -> bool:
    """Whether the question asks when something happened (then the date is the answer).

    >>> asks_for_time("When did Ana move to Porto?"), asks_for_time("Where does Ana live?")
    (True, False)
    """
    return bool(_TIME_QUESTION.search(question))


_MONTH = "(?:" + "|".join(sorted(_MONTHS)) + ")"
_DATE_NUMBER = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?(?: of)? {_MONTH}\b|\b{_MONTH} (\d{{1,2}})\b"
    r"|\b((?:19|20)\d\d)\b",
    re.IGNORECASE,
)


def date_numbers(text: str) -> frozenset[str]:
    """The numbers of ``text`` that belong to a date (a day beside its month, a year).

    >>> sorted(date_numbers("Opening night is 12 May 2024, row 7."))
    ['12', '2024']
    """
    return frozenset(g for m in _DATE_NUMBER.finditer(text) for g in m.groups() if g)


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
        self._vectors: Vectors | None = None

    def similarity(self, query: str) -> list[float] | None:
        """Cosine similarity by meaning of ``query`` to each text (sentence embeddings), or
        None when no sentence model is installed (then rank by words alone).

        The query is read without its names (:meth:`focus`). The texts are encoded once per
        corpus.
        """
        encoder = default_encoder()
        if encoder is None:
            return None
        if not self.texts:
            return []
        if self._vectors is None:
            self._vectors = encoder.encode(self.texts)
        (vector,) = encoder.encode([self.focus(query)])
        return [float(x) for x in self._vectors @ vector]

    def focus(self, query: str) -> str:
        """``query`` without its names (capitalised words inside a sentence, months aside), as
        the sentence model reads it: names are for the words to match (BM25 finds "Tofu"
        exactly), meaning is for the rest. The model knows nothing of a person called Elena, and
        a name pulls the query toward every message that greets or mentions someone ("Hey
        Tim!"), while the user speaks of themself as "I".

        >>> Corpus([]).focus("When did Iris adopt Tofu in May?")
        'When did adopt in May?'
        >>> Corpus([]).focus("What TV show is Ahmed's sister watching?")
        'What TV show is sister watching?'
        """
        kept = _NAME.sub(lambda m: m.group(0) if m.group(1).lower() in _MONTHS else "", query)
        return re.sub(r"\s+([?.!,])|\s{2,}", lambda m: m.group(1) or " ", kept).strip()

    def hybrid_ranking(self, query: str) -> list[tuple[int, float]]:
        """Texts near ``query`` by words or by meaning, best first, fused by reciprocal rank.

        Each text scores ``1 / rank`` in the BM25+ ranking (texts sharing a word with the
        query) plus ``1 / rank`` in the ranking by meaning (texts whose cosine reaches
        :data:`SEMANTIC_FLOOR`): reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR
        2009) with k = 0, the form this package's evidence ranking already uses for its BM25
        ranks. A text first in both scores 2, first in one alone 1: agreement wins, and a
        paraphrase with no shared word still ranks. Without a sentence model this is
        :meth:`ranking` scored by reciprocal rank.

        >>> Corpus(["Ana lives in Porto", "Bob has a cat"]).hybrid_ranking("Where does Ana live?")
        [(0, 2.0)]
        """
        score: dict[int, float] = {}
        for rank, (i, _) in enumerate(self.ranking(query)):
            score[i] = score.get(i, 0.0) + 1.0 / (rank + 1)
        for rank, (i, _) in enumerate(self.meaning_ranking(query)):
            score[i] = score.get(i, 0.0) + 1.0 / (rank + 1)
        return sorted(score.items(), key=lambda item: (-item[1], item[0]))

    def meaning_ranking(self, query: str) -> list[tuple[int, float]]:
        """Texts whose cosine to ``query`` reaches :data:`SEMANTIC_FLOOR`, best first (empty
        without a sentence model)."""
        cosines = self.similarity(query) or []
        near = [(i, c) for i, c in enumerate(cosines) if c >= SEMANTIC_FLOOR]
        return sorted(near, key=lambda item: (-item[1], item[0]))

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

"""Text matching for evidence: normalisation, answer-bearing tokens, BM25 and rank fusion.

Deliberately simple and deterministic: attribution must run with no network and give the same
verdict twice.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

_TOKEN = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "can",
        "will",
        "just",
        "don",
        "should",
        "now",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "you",
        "your",
        "yours",
        "he",
        "him",
        "his",
        "she",
        "her",
        "hers",
        "it",
        "its",
        "they",
        "them",
        "their",
        "theirs",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "these",
        "those",
        "am",
        "would",
        "could",
        "also",
        "as",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "o",
        "re",
        "ve",
        "y",
        "said",
        "says",
        "tell",
        "told",
        "like",
        "really",
        "yes",
        "oh",
        "well",
    ]
)
_MONTHS = {
    "jan": "january",
    "feb": "february",
    "mar": "march",
    "apr": "april",
    "jun": "june",
    "jul": "july",
    "aug": "august",
    "sep": "september",
    "sept": "september",
    "oct": "october",
    "nov": "november",
    "dec": "december",
}


def tokens(text: str) -> list[str]:
    """Lowercase alphanumeric tokens, month abbreviations expanded.

    >>> tokens("Ana moved to PORTO on 7 May, 2023")
    ['ana', 'moved', 'to', 'porto', 'on', '7', 'may', '2023']
    """
    return [_MONTHS.get(t, t) for t in _TOKEN.findall(text.lower())]


def content_tokens(text: str) -> list[str]:
    """Tokens without stopwords, light plural stripping (``nurses`` -> ``nurse``).

    >>> content_tokens("She is working as the nurses")
    ['working', 'nurse']
    """
    out = []
    for t in tokens(text):
        if t in STOPWORDS:
            continue
        if len(t) > 4 and t.endswith("s") and not t.endswith("ss"):
            t = t[:-1]
        out.append(t)
    return out


def recall(needle: Iterable[str], haystack: Iterable[str]) -> float:
    """Share of the distinct ``needle`` tokens found in ``haystack`` (1.0 for an empty needle).

    >>> recall(["porto", "ana"], ["ana", "lives", "porto"])
    1.0
    """
    wanted = set(needle)
    if not wanted:
        return 1.0
    return len(wanted & set(haystack)) / len(wanted)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD-style token F1 over content tokens.

    >>> round(token_f1("she lives in Porto", "Porto"), 2)
    0.67
    """
    p, g = content_tokens(prediction), content_tokens(gold)
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, rec = common / len(p), common / len(g)
    return 2 * precision * rec / (precision + rec)


class BM25:
    """Okapi BM25 over a small in-memory corpus (k1=1.5, b=0.75).

    >>> index = BM25([["ana", "porto"], ["bob", "lisbon"]])
    >>> index.ranking(["porto"])
    [0]
    """

    def __init__(
        self, corpus: Sequence[Sequence[str]], *, k1: float = 1.5, b: float = 0.75
    ) -> None:
        self._docs = [Counter(doc) for doc in corpus]
        self._lengths = [len(doc) for doc in corpus]
        self._avg = (sum(self._lengths) / len(corpus)) if corpus else 0.0
        df: Counter[str] = Counter()
        for doc in self._docs:
            df.update(doc.keys())
        n = len(corpus)
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self._k1, self._b = k1, b

    def scores(self, query: Sequence[str]) -> list[float]:
        """The BM25 score of every document for ``query``."""
        out = []
        for doc, length in zip(self._docs, self._lengths, strict=True):
            norm = (
                self._k1 * (1 - self._b + self._b * length / self._avg) if self._avg else self._k1
            )
            score = 0.0
            for term in query:
                tf = doc.get(term, 0)
                if tf:
                    score += self._idf[term] * tf * (self._k1 + 1) / (tf + norm)
            out.append(score)
        return out

    def ranking(self, query: Sequence[str]) -> list[int]:
        """Indexes of the documents with a positive score, best first (ties by index)."""
        scores = self.scores(query)
        return sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))


def reciprocal_rank_fusion(rankings: Iterable[Sequence[int]], *, k: int = 60) -> list[int]:
    """Fuse rankings by reciprocal rank (ties broken by index).

    >>> reciprocal_rank_fusion([[2, 0], [0, 1]])
    [0, 2, 1]
    """
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            score[item] = score.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(score, key=lambda i: (-score[i], i))

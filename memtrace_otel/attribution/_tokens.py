"""The package's one tokenizer, owned by the attribution method; the bench wing imports it from here.

Tokens are lower-case alphanumeric runs; ``content_tokens`` drops stop words and strips a few
English suffixes so that ``lives``/``living``/``live`` meet in BM25 and in overlap scores.
Dates are written the LoCoMo way, ``8 May 2023``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import re
import string
from collections import Counter
from collections.abc import Sequence

_TOKEN = re.compile(r"[a-z0-9]+")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)

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
        "s",
        "t",
        "can",
        "will",
        "just",
        "don",
        "should",
        "now",
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "ourselves",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "her",
        "hers",
        "herself",
        "it",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "these",
        "those",
        "am",
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
        "would",
        "could",
        "ought",
        "i'm",
        "you're",
        "he's",
        "she's",
        "it's",
        "we're",
        "they're",
        "i've",
        "you've",
        "we've",
        "they've",
        "i'd",
        "you'd",
        "he'd",
        "she'd",
        "we'd",
        "they'd",
        "i'll",
        "you'll",
        "he'll",
        "she'll",
        "we'll",
        "they'll",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "hasn't",
        "haven't",
        "hadn't",
        "doesn't",
        "don't",
        "didn't",
        "won't",
        "wouldn't",
        "shan't",
        "shouldn't",
        "can't",
        "cannot",
        "couldn't",
        "mustn't",
        "let's",
        "that's",
        "who's",
        "what's",
        "here's",
        "there's",
        "when's",
        "where's",
        "why's",
        "how's",
        "also",
        "really",
        "just",
        "got",
        "get",
        "like",
        "yes",
        "oh",
        "hey",
        "hi",
    ]
)

_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip
_MONTH_NUMBER = {m.lower(): i + 1 for i, m in enumerate(_MONTHS)}
DATE_PATTERN = r"\d{1,2} (?:" + "|".join(_MONTHS) + r"),? \d{4}"
"""A regular expression matching a date written ``8 May 2023`` (or ``8 May, 2023``)."""
_DATE = re.compile(r"(\d{1,2}) (" + "|".join(_MONTHS) + r"),? (\d{4})")


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric tokens.

    >>> tokens("Ana moved to Porto, on 8 May!")
    ['ana', 'moved', 'to', 'porto', 'on', '8', 'may']
    """
    return _TOKEN.findall(text.lower().replace("'s ", " "))


@functools.lru_cache(maxsize=1 << 16)
def stem(token: str) -> str:
    """A crude suffix stripper, enough to match inflections of the same word.

    A consonant doubled before the suffix is undoubled ("swimming", "planned"), except l, s
    and z, which English doubles in the stem itself ("falling", "passed").

    >>> [stem(t) for t in ["lives", "living", "moved", "cities", "class"]]
    ['live', 'live', 'move', 'city', 'class']
    >>> [stem(t) for t in ["swimming", "swim", "planned", "falling", "added"]]
    ['swim', 'swim', 'plan', 'fall', 'add']
    """
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 5 and token.endswith("ing"):
        return _undouble(
            token[:-3] + "e" if token[-4] not in "aeiouy" and token[-5] in "aeiou" else token[:-3]
        )
    if len(token) > 4 and token.endswith("ed"):
        return _undouble(
            token[:-1] if token[-3] not in "aeiou" and token[-4] in "aeiou" else token[:-2]
        )
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def _undouble(stemmed: str) -> str:
    if len(stemmed) >= 4 and stemmed[-1] == stemmed[-2] and stemmed[-1] not in "aeioulsz":
        return stemmed[:-1]
    return stemmed


def content_tokens(text: str) -> list[str]:
    """Stemmed tokens without stop words (what BM25 and overlap scores compare).

    >>> content_tokens("Where does Maya live now?")
    ['maya', 'live']
    """
    return list(_content_tokens(text))


def content_token_set(text: str) -> frozenset[str]:
    """The distinct :func:`content_tokens` of ``text`` (from the cached tuple, without the
    list copy :func:`content_tokens` makes for its callers).

    >>> sorted(content_token_set("Where does Maya live now? Maya lives in Porto."))
    ['live', 'maya', 'porto']
    """
    return frozenset(_content_tokens(text))


def content_token_count(text: str) -> int:
    """``len(content_tokens(text))``, without the list copy.

    >>> content_token_count("Where does Maya live now?")
    2
    """
    return len(_content_tokens(text))


@functools.lru_cache(maxsize=1 << 16)
def _content_tokens(text: str) -> tuple[str, ...]:
    # Memory texts are tokenised again at every index rebuild and evidence check: once is enough.
    return tuple(stem(t) for t in tokens(text) if t not in STOPWORDS)


@functools.lru_cache(maxsize=1 << 16)
def count_tokens(text: str) -> int:
    """The token count the buffers and windows budget with (whitespace words).

    >>> count_tokens("I moved to Porto today.")
    5
    """
    return len(text.split())


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: lower case, no punctuation, no articles, single spaces.

    >>> normalize_answer("The  Toyota Corolla!")
    'toyota corolla'
    """
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """Token F1 between normalised strings (the LoCoMo/SQuAD metric).

    >>> round(token_f1("Maya lives in Porto", "Porto"), 2)
    0.4
    """
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def format_date(day: _dt.date) -> str:
    """``8 May 2023``.

    >>> format_date(_dt.date(2023, 5, 8))
    '8 May 2023'
    """
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def parse_date(text: str) -> _dt.date | None:
    """The first ``8 May 2023`` / ``8 May, 2023`` date in ``text``, if any.

    >>> parse_date("1:56 pm on 8 May, 2023")
    datetime.date(2023, 5, 8)
    >>> parse_date("someday") is None
    True
    """
    match = _DATE.search(text)
    if match is None:
        return None
    try:
        return _dt.date(int(match[3]), _MONTH_NUMBER[match[2].lower()], int(match[1]))
    except ValueError:
        return None


def shift_date(text: str, days: int) -> str:
    """A ``8 May 2023`` date moved by ``days`` (unchanged when it does not parse).

    >>> shift_date("1 June 2023", -1)
    '31 May 2023'
    """
    day = parse_date(text)
    return format_date(day + _dt.timedelta(days=days)) if day is not None else text


def overlap(query: str, text: str) -> float:
    """The share of the query's content tokens found in ``text`` (0..1).

    >>> overlap("Where does Maya live?", "Maya lives in Porto")
    1.0
    """
    wanted = set(content_tokens(query))
    if not wanted:
        return 0.0
    return len(wanted & set(content_tokens(text))) / len(wanted)


# --- ranking: the package's one BM25 ---------------------------------------------------------
class Bm25Index:
    """BM25+ over stemmed content tokens (Lv and Zhai, 2011: k1 = 1.5, b = 0.75, delta = 1, the
    parameters of ``rank_bm25.BM25Plus``, whose scores these are to the bit); deterministic
    ties.

    BM25+ keeps every idf positive, which matters for the small stores here (with Okapi's idf a
    word in half of two documents scores zero). Only documents sharing a word with the query are
    returned. Plain Python floats, in ``rank_bm25``'s order of operations: the lists scored
    are a store's few hundred messages at most, where numpy's per-call cost outweighs its speed,
    and a run whose cases need no sentence model then never imports numpy (0.1 s of start-up).

    >>> index = Bm25Index([("a", "Maya lives in Porto"), ("b", "Leo has a cat")])
    >>> index.search("Where does Maya live?", 5)
    [('a', ...)]
    """

    K1 = 1.5
    B = 0.75
    DELTA = 1

    def __init__(self, docs: Sequence[tuple[str, str]]) -> None:
        self.keys = [k for k, _ in docs]
        corpus = [content_tokens(text) or ["_"] for _, text in docs]
        self._words = [frozenset(c) for c in corpus]
        self._freqs: list[dict[str, int]] = []
        self._idf: dict[str, float] = {}
        self._norms: list[float] = []  # k1 * (1 - b + b * length / average length), per doc
        if not corpus:
            return
        documents: dict[str, int] = {}  # word -> documents holding it
        total = 0
        for tokens in corpus:
            total += len(tokens)
            freqs: dict[str, int] = {}
            for word in tokens:
                freqs[word] = freqs.get(word, 0) + 1
            self._freqs.append(freqs)
            for word in freqs:
                documents[word] = documents.get(word, 0) + 1
        size = len(corpus)
        average = total / size
        self._idf = {word: math.log((size + 1) / n) for word, n in documents.items()}
        k1, b = self.K1, self.B
        self._norms = [k1 * (1 - b + b * len(tokens) / average) for tokens in corpus]

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """The ``k`` best keys with a positive score, best first."""
        if not self._freqs or k <= 0:
            return []
        words = content_tokens(query)
        if not words:
            return []
        wanted = set(words)
        hits = [i for i, doc in enumerate(self._words) if doc & wanted]
        if not hits:
            return []
        scores = [0.0] * len(hits)
        scale = self.K1 + 1
        delta = self.DELTA
        for word in words:  # each occurrence of a query word counts, as in rank_bm25
            idf = self._idf.get(word) or 0
            for j, i in enumerate(hits):
                freq = self._freqs[i].get(word) or 0
                scores[j] += idf * (delta + (freq * scale) / (self._norms[i] + freq))
        order = sorted(range(len(hits)), key=lambda j: (-scores[j], hits[j]))
        return [(self.keys[hits[j]], round(scores[j], 4)) for j in order[:k]]


@functools.lru_cache(maxsize=128)
def bm25_index(docs: tuple[tuple[str, str], ...]) -> Bm25Index:
    """A shared, cached :class:`Bm25Index` for ``(key, text)`` documents: replays re-run the same
    store states, and rebuilding BM25 over hundreds of memories per message is the cost."""
    return Bm25Index(docs)

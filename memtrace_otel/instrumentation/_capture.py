"""Content capture: the one place that decides what of the app's data leaves the process.

:meth:`CaptureConfig.record` decides for every piece of app text: a variable's value, each
content field of ``memtrace.variable.meta``, and the message of an exception the app raised
through an op. Nothing else in the package writes app text into a span. Every value also gets a
``sha256`` digest of its canonical form, whatever the settings, so the graph and attribution work
without content. Text is recorded only when capture is on for its category; it passes the
redaction hook first and is cut to the size limit.

Two settings, two scopes:

- ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (upstream, its meaning kept): whether
  GenAI content is captured at all: every category, LLM prompts and completions included.
- ``MEMTRACE_CAPTURE_CONTENT`` (ours, narrower): overrides it for the memory pipeline's own
  categories only (``message``, ``memory``, ``query``, ``candidates``, and ``gold``, the expected
  answer). Its extra value ``PRODUCTION`` captures those with the built-in redaction (unless a
  hook is given), and also the answer the user saw (``prediction``) and the outputs of decision
  and filter ops (``extract``, ``create``, ``update``, ``delete``, ``filter``: mem0's parsed
  decisions, a dedup's kept list), which restate captured records; LLM prompts, raw completions,
  the assembled context and exception messages keep following the upstream variable, whose
  default ``NO_CONTENT`` keeps them out. Its value ``REFERENCE`` (contract v0.3 section 6) sends
  every value ``SPAN_AND_EVENT`` would record, of every category, to a content store
  (``MEMTRACE_CONTENT_URL``, any fsspec URL) instead: the span carries the object's URL
  (``memtrace.variable.value_ref``), no text.

``MEMTRACE_DIGEST_KEY`` keys every digest (``b2k:<key id>:<hex>``, keyed BLAKE2b) so that no one
without the key can confirm a guessed value; without it digests are plain ``sha256:``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from opentelemetry.util.types import AttributeValue

from memtrace_otel._internal import data_warning, internal_error
from memtrace_otel._settings import check, positive_int, resolve
from memtrace_otel.instrumentation._content import (
    ContentWriter,
    Digester,
    Pseudonymizer,
    content_writer,
    parse_key,
)
from memtrace_otel.instrumentation._variables import Variable
from memtrace_otel.semconv import PRODUCTION, REFERENCE, CaptureMode, Category, OpKind, Role, is_ref
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv.env import (
    ENV_CAPTURE_MESSAGE_CONTENT,
    ENV_GENAI_UPLOAD_BASE_PATH,
    ENV_MEMTRACE_CAPTURE_CONTENT,
    ENV_MEMTRACE_CONTENT_PACK,
    ENV_MEMTRACE_CONTENT_URL,
    ENV_MEMTRACE_DIGEST_KEY,
    ENV_MEMTRACE_MAX_VALUE_LENGTH,
    ENV_MEMTRACE_PSEUDONYMIZE_IDS,
)

DEFAULT_MAX_VALUE_LENGTH = 4096
"""Characters of a value kept by default (Tempo cuts attributes at 2 KiB unless configured)."""

Redactor = Callable[[str], str]
"""A redaction hook: gets the value as a string, returns what may be recorded."""

BUILTIN_REDACTOR = "builtin"
"""``CaptureConfig(redact="builtin")`` selects :func:`redact_pii` as the hook."""

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# 13-19 digits, optionally grouped by single spaces or dashes (how card numbers are written).
_CARD = re.compile(r"(?<![\w+])\d(?:[ -]?\d){12,18}(?!\w)")
# An optional "+" and country code, then digit groups separated by a space, dot, dash or
# parentheses: "+351 912 345 678", "(555) 123-4567", "555.123.4567".
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]?\d{2,4}){1,4}(?!\w)"
)
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DIGIT_RUN = re.compile(r"\d+")
_ASCII_BYTES = bytes(range(128))
# Secrets, replaced before the identifiers (a token's digit runs must not become "phones").
# A PEM private key, with or without its END line (a value cut mid-key leaks no less).
_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|.*)",
    re.DOTALL,
)
# A JWT (and any JWS/JWE): base64url '{"' header, then payload and signature segments.
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")
_BEARER = re.compile(r"\b(Bearer|Token|Basic)(\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
# OpenAI (sk-..., sk-proj-...), Anthropic (sk-ant-...), Stripe (sk_live_..., rk_test_...) keys.
_API_KEY = re.compile(r"(?<![A-Za-z0-9])(?:sk|rk|pk)[-_][A-Za-z0-9_-]{16,}")
_AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA")
_AWS_KEY = re.compile(rf"(?<![A-Z0-9])(?:{'|'.join(_AWS_PREFIXES)})[A-Z0-9]{{16}}(?![A-Z0-9])")
# GitHub (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_) and Slack (xoxb-, xoxp-, ...) tokens.
_VENDOR_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abposr]-[A-Za-z0-9-]{10,})"
)
# "api_key=...", "secret: ...", "aws_secret_access_key = ...": the value after a secret's name.
_NAMED_SECRET = re.compile(
    r"(?i)((?:api[_-]?key|secret(?:[_-]access)?[_-]?key|secret|token|password|passwd)"
    r"[\"']?\s*[:=]\s*[\"']?)([^\s\"',;]{6,})"
)


def redact_secrets(text: str) -> str:
    """Replace API keys, tokens and private keys with placeholders (part of :func:`redact_pii`).

    >>> redact_secrets("key sk-live-4eC39HqLyjWDarjtT1zdp7dc, auth: Bearer abc.def-123456")
    'key <api-key>, auth: Bearer <token>'
    >>> redact_secrets("AKIAIOSFODNN7EXAMPLE")
    '<aws-key>'
    """
    # Each pattern is tried only where one of its matches can start (:func:`_starts`): next to a
    # substring every match holds, found in one scan of the text at C speed (~0.4 us a KB); a
    # regex scanned over a whole 30 KB prompt costs milliseconds. The scans are the cost, so
    # there are as few as the patterns allow: a one-character test first (a memchr, ~20 ns a
    # KB) where a pattern needs that character, one finder per pattern, and one for the words
    # two patterns share ("token"). A finder is a rare letter and what must follow it, so the
    # scan stops seldom: "k" then "en" or "ey" finds "token" and "api_key" at once.
    dash, underscore = "-" in text, "_" in text
    if dash and "PRIVATE KEY-----" in text:
        text = _PEM.sub("<private-key>", text)
    if "J" in text:
        text = _sub_at(_JWT, text, _starts(text, _JWT_AT), "<jwt>")
    lower = text.lower() if text.isascii() else _gate(text)
    lowered = text
    # A test first, inline: most text has no occurrence, and the starts' set-up costs as much
    # as the scan of a 1 KB value. On a short value the same test by substrings is cheaper than
    # a regex call (~0.1 us), a memchr for the rare letter first.
    if len(text) < _SHORT:
        has_k = "k" in lower and ("ken" in lower or "key" in lower)
        has_b = "b" in lower and ("bearer" in lower or "basic" in lower)
    else:
        has_k = _K_WORDS.search(lower) is not None
        has_b = _BEARER_WORD.search(lower) is not None
    k_words = _starts(lower, _K_WORDS_AT) if has_k else _NO_STARTS
    if has_b or k_words:
        starts = _starts(lower, _BEARER_WORDS_AT)
        starts.update(at - _TOKEN_K for at in k_words if at >= _TOKEN_K)
        text = _sub_at(_BEARER, text, starts, r"\1\2<token>")
    if dash or underscore:  # (sk|rk|pk)[-_], gh?_, github_pat_, xox?-
        text = _sub_at(_API_KEY, text, _starts(text, _API_KEY_AT), "<api-key>")
        # gh[pousr]_ and github_pat_ need a "_", xox[abposr]- a "-" (placeholders add neither)
        vendor = (
            _VENDOR_AT
            if dash and underscore
            else _VENDOR_UNDERSCORE_AT
            if underscore
            else _VENDOR_DASH_AT
        )
        text = _sub_at(_VENDOR_TOKEN, text, _starts(text, vendor), "<token>")
    # Every prefix starts with a capital A: a memchr rules out text without one (a short
    # value often) before the prefix scan.
    if "A" in text and _AWS_PREFIX.search(text):
        text = _sub_at(_AWS_KEY, text, _starts(text, _AWS_AT), "<aws-key>")
    if "=" in text or ":" in text:
        if text is not lowered:
            lower = text.lower() if text.isascii() else _gate(text)
            k_words = _starts(lower, _K_WORDS_AT)
        starts = _starts(lower, _NAMED_WORDS_AT)
        if starts or k_words:
            starts.update(at - back for at in k_words for back in _NAMED_K_BACKS if at >= back)
            text = _sub_at(_NAMED_SECRET, text, starts, _named_secret)
    return text


_FOLD: Final = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}
"""The non-ASCII letters the case-insensitive patterns take for ASCII ones (İ and ı for i, ſ for
s, the Kelvin sign for k; no other code point): mapped to them before the gates lower the text,
so a gate sees every word the pattern matches ("Baſic ..." included)."""
_FOLD_CHARS: Final = tuple(chr(c) for c in _FOLD)


def _gate(text: str) -> str:
    """Non-ASCII ``text`` with its ASCII letters lowered, for the gates of the case-insensitive
    patterns, its folding letters (:data:`_FOLD`) mapped to theirs first, every other character
    left as it is (so each one stays at its place, as :func:`_sub_at` needs).

    Those patterns' words are ASCII, so the ASCII letters and the folding letters are all a gate
    must see lowered: ``bytes.lower()`` of the UTF-8 bytes does exactly that (the bytes of every
    other character are 0x80 and above, which it leaves), in a third of ``str.lower()``'s time
    on mem0's 33 KB extraction prompt (which lowers every character through Unicode's tables).

    >>> _gate("Ana EN ſÉ")
    'ana en sÉ'
    """
    for char in _FOLD_CHARS:  # one-character tests: ~1 us on a 33 KB prompt
        if char in text:
            text = text.translate(_FOLD)
            break
    return text.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


Finder = str | re.Pattern[str]
"""Where a pattern's matches can be: a substring (``str.find``), or a regex that matches one
character, the rarest its needle starts with, and looks ahead for the rest (``finditer`` then
visits every occurrence, overlapping ones included, and its scan is a C loop over that letter)."""

# "k" then "en" or "ey": "token" (its "k" 2 after the match's start; a pattern of both the bearer
# and the named secrets), "api_key", "api-key" and "apikey" (4 or 3 after). Lowered text.
_K_WORDS: Final = re.compile("k(?=en|ey)")
_TOKEN_K: Final = 2
_NAMED_K_BACKS: Final = (_TOKEN_K, 3, 4)
_JWT_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = ((re.compile("J"), (2,)),)
_K_WORDS_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = ((_K_WORDS, (0,)),)
_BEARER_WORD: Final = re.compile("b(?=earer|asic)")
_BEARER_WORDS_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = ((_BEARER_WORD, (0,)),)
_BEARER_AT: Final = (*_BEARER_WORDS_AT, (_K_WORDS, (_TOKEN_K,)))
_API_KEY_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = ((re.compile("k(?=[-_])"), (1,)),)
_VENDOR_UNDERSCORE_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = (
    (re.compile("g(?=h[pousr]_|ithub_pat_)"), (0,)),
)
_VENDOR_DASH_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = (
    (re.compile("x(?=ox[abposr]-)"), (0,)),
)
_VENDOR_AT: Final = _VENDOR_UNDERSCORE_AT + _VENDOR_DASH_AT
_AWS_PREFIX: Final = re.compile(f"A(?={'|'.join(p[1:] for p in _AWS_PREFIXES)})")
_AWS_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = ((_AWS_PREFIX, (0,)),)
_NO_STARTS: Final[frozenset[int]] = frozenset()
_SHORT: Final = 256
"""Characters below which :func:`redact_secrets` tests for its words by substrings rather than by
its finders' regexes (the same test: "k" then "en" or "ey" is "ken" or "key")."""
_NAMED_WORDS_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = (
    ("secret", (0,)),
    ("passw", (0,)),
)
_NAMED_AT: Final = (*_NAMED_WORDS_AT, (_K_WORDS, _NAMED_K_BACKS))
"""Where each secret pattern can start: ``back`` characters before an occurrence of a finder's
match (an API key 1 before its ``k-``; "token" 2 before its "k", "api_key" and "apikey" 4 and 3).
``_BEARER_AT`` and ``_NAMED_AT`` are all of those patterns' starts (the tests hold them against
``pattern.sub``); :func:`redact_secrets` scans their words with a "k" (:data:`_K_WORDS`) once
for both, then each pattern's other words (``_BEARER_WORDS_AT``, ``_NAMED_WORDS_AT``)."""


def _starts(haystack: str, finders: tuple[tuple[Finder, tuple[int, ...]], ...]) -> set[int]:
    """The offsets ``back`` before each occurrence of each finder in ``haystack``, where not
    before its start.

    >>> sorted(_starts("xsk-1 k_2", _API_KEY_AT))
    [1, 5]
    """
    starts: set[int] = set()
    for finder, backs in finders:
        if isinstance(finder, str):
            at = haystack.find(finder)
            while at >= 0:
                starts.update(at - back for back in backs if at >= back)
                at = haystack.find(finder, at + 1)
        else:
            # search() first: most text has no occurrence, and finditer's set-up costs as much
            # as a scan of 1 KB
            first = finder.search(haystack)
            if first is None:
                continue
            for match in finder.finditer(haystack, first.start()):
                at = match.start()
                starts.update(at - back for back in backs if at >= back)
    return starts


def _sub_at(
    pattern: re.Pattern[str],
    text: str,
    starts: set[int],
    repl: str | Callable[[re.Match[str]], str],
) -> str:
    """``pattern.sub(repl, text)`` when every match starts at one of ``starts``: ``pattern.match``
    tried at each, left to right, skipping those inside a match already replaced. ``starts``
    come from :func:`_starts` over ``text`` or, for a case-insensitive pattern, over its
    ``lower()`` (:func:`_gate`'s when not ASCII), which keeps every character at its place.

    >>> t = "a sk-live-4eC39HqLyjWDarjtT1zdp7dc b"
    >>> _sub_at(_API_KEY, t, _starts(t, _API_KEY_AT), "<k>")
    'a <k> b'
    """
    if not starts:
        return text
    parts: list[str] = []
    done = 0
    for start in sorted(starts):
        if start < done:
            continue
        match = pattern.match(text, start)
        if match is None:
            continue
        parts.append(text[done:start])
        parts.append(repl(match) if callable(repl) else match.expand(repl))
        done = match.end()
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def _named_secret(match: re.Match[str]) -> str:
    value = match.group(2)
    if value.startswith("<") and value.endswith(">"):  # already a placeholder
        return match.group()
    return match.group(1) + "<secret>"


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2 == 1:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group())
    return "<card>" if _luhn_ok(digits) else match.group()


def _phone(match: re.Match[str]) -> str:
    text = match.group()
    digits = re.sub(r"\D", "", text)
    # Below 9 digits (7 with a "+") most matches are dates, amounts or ids, not phone numbers;
    # an ISO date is kept whatever its length so memories keep their timeline.
    enough = len(digits) >= (7 if text.startswith("+") else 9)
    if not enough or len(digits) > 15 or _ISO_DATE.fullmatch(text[:10]):
        return text
    return "<phone>"


def redact_pii(text: str) -> str:
    """Replace secrets, e-mail addresses, card numbers and phone numbers with placeholders.

    The built-in redaction hook (``CaptureConfig(redact="builtin")``). Secrets first
    (:func:`redact_secrets`: OpenAI-style ``sk-...`` keys, bearer tokens, AWS access keys, JWTs,
    PEM private keys, GitHub and Slack tokens, ``api_key=...``-style values). Card numbers must pass
    the Luhn check, so order numbers and other long ids are kept; phone numbers need 9 to 15
    digits (7 with a leading ``+``). It is a safety net for common identifiers, not a
    guarantee: names and addresses pass through, so pair it with your own hook when needed.

    >>> redact_pii("mail ana@example.com or call +351 912 345 678")
    'mail <email> or call <phone>'
    >>> redact_pii("card 4111 1111 1111 1111, order 1234 5678 9012 3456")
    'card <card>, order 1234 5678 9012 3456'
    >>> redact_pii("moved to Porto on 2024-05-01")
    'moved to Porto on 2024-05-01'
    """
    text = redact_secrets(text)
    if "@" in text:  # every e-mail address has one (a memchr; the pattern costs ~40 us a KB)
        text = _EMAIL.sub("<email>", text)
    # Card and phone numbers start at a run of digits (a card always; a phone number there, or
    # at its "+" or "("): each pattern is tried only there (:func:`_sub_at`), where scanning the
    # text costs 20-30 us a KB (their look-behind rules out re's fast prefix search).
    runs = _digit_runs(text)
    if not runs:
        return text
    carded = _sub_at(_CARD, text, runs, _card)
    if carded != text:  # (a card the Luhn check refused is kept: the text is equal, not the same)
        text, runs = carded, _digit_runs(carded)
    return _sub_at(_PHONE, text, runs | _starts(text, _PHONE_MARKS_AT), _phone)


def _digit_runs(text: str) -> set[int]:
    """Where each run of digits (``\\d``: any Unicode decimal digit) in ``text`` starts: ten
    memchr scans, or one regex scan (~13 us a KB) when a digit beyond ASCII is there.

    >>> sorted(_digit_runs("a 12-345 b7")), sorted(_digit_runs("é 12 ٣٤")), sorted(_digit_runs("é1"))
    ([2, 5, 10], [2, 5], [1])
    """
    if not text.isascii():
        # The text's characters beyond ASCII alone (its UTF-8 bytes without the ASCII ones are
        # whole characters): a regex over those few tells whether one is a digit.
        beyond = text.encode("utf-8", "surrogatepass").translate(None, _ASCII_BYTES)
        if _DIGIT_RUN.search(beyond.decode("utf-8", "surrogatepass")):
            return {match.start() for match in _DIGIT_RUN.finditer(text)}
    runs: set[int] = set()
    for digit in "0123456789":
        at = text.find(digit)
        while at >= 0:
            if at == 0 or not text[at - 1].isdecimal():
                runs.add(at)
            at = text.find(digit, at + 1)
    return runs


_PHONE_MARKS_AT: Final[tuple[tuple[Finder, tuple[int, ...]], ...]] = (("+", (0,)), ("(", (0,)))
"""Where a phone number can start other than at its digits: its "+" or its "(" ."""

_PURE_HOOKS: Final = frozenset([redact_secrets, redact_pii])
"""The built-in hooks: each returns the same text for the same value, so a value's digest can
stand for what it returned."""
_CLEAN_REMEMBERED: Final = 4096
"""Digests a capture remembers as clean (see :meth:`CaptureConfig._remember_clean`), at most; then
it starts over."""

_LEGACY = {"true": CaptureMode.SPAN_AND_EVENT, "false": CaptureMode.NO_CONTENT}

_DECIDING_KINDS: Final = frozenset(
    [OpKind.EXTRACT, OpKind.CREATE, OpKind.UPDATE, OpKind.DELETE, OpKind.FILTER]
)
"""Ops whose outputs ``PRODUCTION`` also records: a memory system's decisions parsed from its LLM
(mem0 1.x's event, id and text) and what a filter kept or dropped. They restate records that
are captured anyway; a raw completion is the output of a ``generate`` op, never of these."""
_NEVER_EXTRA: Final = frozenset([Category.PROMPT, Category.CONTEXT])


def _restates_records(
    category: Category, kind: OpKind | str | None, role: Role | str | None, answer: bool
) -> bool:
    """What ``PRODUCTION`` records beyond the memory categories (contract v0.3 section 6): the
    answer the user saw (the ``prediction`` a question's ``generate`` op wrote), and the outputs
    of decision and filter ops; never an LLM prompt, another LLM call's completion or the
    assembled context."""
    if role != Role.OUTPUT:
        return False
    if category == Category.PREDICTION:
        return answer and kind == OpKind.GENERATE
    return kind in _DECIDING_KINDS and category not in _NEVER_EXTRA


MEMORY_CATEGORIES: Final = frozenset(
    [Category.MESSAGE, Category.MEMORY, Category.QUERY, Category.CANDIDATES, Category.GOLD]
)
"""The memory pipeline's categories (and the expected answer, which people give, not an LLM):
``MEMTRACE_CAPTURE_CONTENT`` decides for these; the upstream variable for the rest (``prompt``,
``context``, ``prediction``, ``score``, ``other``) and for exception messages."""

STRUCTURAL_META_KEYS: Final = frozenset(["source_refs", "role"])
"""``memtrace.variable.meta`` fields that are structure, recorded whatever the capture setting:
``source_refs`` (its ``<id>@<version>`` refs) and ``role`` (a short identifier such as
``user``). Numbers and booleans are structure too. Every other field is content."""

META_CONTENT_REF: Final = "content_ref"
"""Under ``REFERENCE`` capture, the ``memtrace.variable.meta`` key holding the content store URL of
the meta's content fields (one JSON object); structure fields stay inline."""

_IDENTIFIER = re.compile(r"[A-Za-z0-9_.:-]{1,32}")
# Tuples, not ``bool | int | float``: a union expression is built again on every evaluation.
_NUMBERS = (bool, int, float)
_SEQUENCES = (list, tuple)


def parse_capture_mode(value: str | CaptureMode, *, source: str = "capture mode") -> CaptureMode:
    """Parse one of the four upstream values or legacy ``true``/``false`` (any case).

    Raises:
        ValueError: an unknown value.

    >>> parse_capture_mode("span_only")
    <CaptureMode.SPAN_ONLY: 'SPAN_ONLY'>
    >>> parse_capture_mode("true")
    <CaptureMode.SPAN_AND_EVENT: 'SPAN_AND_EVENT'>
    """
    return check(source, value, _capture_mode)


@dataclass(frozen=True)
class CaptureConfig:
    """Content-capture settings, resolved at construction: argument > environment > default.

    Args:
        mode: the GenAI content mode for every category (a :class:`CaptureMode` or its name, or
            ``"REFERENCE"``); ``None`` reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``,
            else ``NO_CONTENT``. Our values live in span events, so every mode but
            ``NO_CONTENT`` records them.
        memory_mode: the narrower override for the memory pipeline's categories
            (:data:`MEMORY_CATEGORIES`): a mode, or ``"PRODUCTION"`` (capture them, with the
            built-in redaction unless ``redact`` is given); ``None`` reads
            ``MEMTRACE_CAPTURE_CONTENT`` (only when ``mode`` is not given), else follows ``mode``.
            ``"REFERENCE"`` here (or in ``mode``) applies to every category.
        max_value_length: characters kept of a value; ``None`` reads
            ``MEMTRACE_MAX_VALUE_LENGTH``, else 4096. (Objects in a content store are not cut.)
        redact: a hook every value passes before it is recorded, or ``"builtin"`` for
            :func:`redact_pii` (e-mail, phone and card numbers, API keys and tokens). If it
            raises, the value is dropped (digest only), never recorded unredacted. Default:
            :func:`redact_pii` under ``PRODUCTION``, :func:`redact_secrets` under ``REFERENCE``. The digest is
            always of the raw value: attribution compares digests across spans.
        content_url: the content store of ``REFERENCE`` capture (any fsspec URL); ``None`` reads
            ``MEMTRACE_CONTENT_URL``, else ``OTEL_INSTRUMENTATION_GENAI_UPLOAD_BASE_PATH``. With
            none, ``REFERENCE`` logs once and records no content (``NO_CONTENT``).
        digest_key: the key of keyed digests (at least 16 bytes); ``None`` reads
            ``MEMTRACE_DIGEST_KEY``, else digests are unkeyed ``sha256:``.
        pseudonymize_ids: whether the personal parts of identifiers (e-mail addresses and phone
            numbers in store ids, case ids and refs, the ids in ``meta.source_refs`` included)
            go out as keyed pseudonyms (:class:`~memtrace_otel.instrumentation._content.Pseudonymizer`);
            ``None`` reads ``MEMTRACE_PSEUDONYMIZE_IDS``, else on under ``REFERENCE`` with a
            digest key. Needs the key (without one it is logged once and off); under
            ``REFERENCE`` each pseudonym's original is written to the content store.
        content_pack: under ``REFERENCE``, write each batch's objects of a memory store as one
            pack object (``packs/``, found through the store's manifest) instead of one object
            each: one write (one PUT on an object store) per batch. ``None`` reads
            ``MEMTRACE_CONTENT_PACK``, else off.

    Raises:
        ValueError: an unknown mode or a non-positive length given as an argument, a
            ``redact`` that is neither callable nor ``"builtin"``, a ``digest_key`` shorter than
            16 bytes, or a ``content_url`` whose protocol fsspec does not know. A bad
            environment variable is logged once and its default used (it must not break the app).

    >>> CaptureConfig(mode="SPAN_ONLY", redact="builtin").mask("ana@example.com")
    ('<email>', False)
    >>> production = CaptureConfig(memory_mode="PRODUCTION")
    >>> production.record("ana@example.com", Category.MEMORY), production.record("hi", Category.PROMPT)
    (('<email>', False), (None, False))
    >>> reference = CaptureConfig(mode="REFERENCE", content_url="memory://doc-store")
    >>> reference.record("hi", Category.PREDICTION)
    ('memory://doc-store/objects/sha256/8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4', False)
    """

    mode: CaptureMode | str | None = None
    max_value_length: int | None = None
    redact: Redactor | Literal["builtin"] | None = field(default=None, compare=False)
    memory_mode: CaptureMode | str | None = None
    content_url: str | None = None
    digest_key: str | bytes | None = field(default=None, repr=False, compare=False)
    pseudonymize_ids: bool | None = None
    content_pack: bool | None = None

    def __post_init__(self) -> None:
        explicit = self.mode is not None
        reference = explicit and _is_reference(self.mode)
        if reference:
            mode = CaptureMode.SPAN_AND_EVENT
        else:
            mode = resolve(
                "capture mode",
                self.mode,
                ENV_CAPTURE_MESSAGE_CONTENT,
                CaptureMode.NO_CONTENT,
                _capture_mode,
            )
        # The narrower variable applies only when no mode is given in code; else it follows mode.
        follow: CaptureMode | str = mode
        memory = resolve(
            "memory_mode",
            self.memory_mode,
            None if explicit else ENV_MEMTRACE_CAPTURE_CONTENT,
            follow,
            _memory_mode,
        )
        production = memory == PRODUCTION
        if memory == REFERENCE:
            reference = True
            memory = mode = CaptureMode.SPAN_AND_EVENT
        elif production:
            memory = CaptureMode.SPAN_AND_EVENT
        writer: ContentWriter | None = None
        url: str | None = None
        if reference:
            url = resolve("content_url", self.content_url, ENV_MEMTRACE_CONTENT_URL, None, _url)
            url = url or resolve("content_url", None, ENV_GENAI_UPLOAD_BASE_PATH, None, _url)
            pack = resolve(
                "content_pack", self.content_pack, ENV_MEMTRACE_CONTENT_PACK, False, _boolean
            )
            object.__setattr__(self, "content_pack", pack)
            writer = _writer_or_none(url, given=self.content_url is not None, pack=pack)
            if writer is None:
                mode = memory = CaptureMode.NO_CONTENT
        object.__setattr__(self, "content_url", url if writer is not None else self.content_url)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "memory_mode", memory)
        object.__setattr__(self, "production", production)
        object.__setattr__(self, "reference", writer is not None)
        object.__setattr__(self, "_writer", writer)
        object.__setattr__(
            self,
            "_captured",
            frozenset(
                c
                for c in Category
                if (memory if c in MEMORY_CATEGORIES else mode) is not CaptureMode.NO_CONTENT
            ),
        )

        digester = Digester(_digest_key(self.digest_key))
        object.__setattr__(self, "_digester", digester)
        pseudonyms = resolve(
            "pseudonymize_ids",
            self.pseudonymize_ids,
            ENV_MEMTRACE_PSEUDONYMIZE_IDS,
            writer is not None and digester.key is not None,
            _boolean,
        )
        if pseudonyms and digester.key is None:
            data_warning(
                "pseudonyms:no-key",
                "memtrace-otel: pseudonymised identifiers need %s; identifiers are sent as they are",
                ENV_MEMTRACE_DIGEST_KEY,
            )
            pseudonyms = False
        object.__setattr__(self, "pseudonymize_ids", pseudonyms)
        object.__setattr__(
            self,
            "_pseudonymizer",
            Pseudonymizer(digester.key, writer) if pseudonyms and digester.key else None,
        )
        object.__setattr__(
            self, "_keyed_digest", None if digester.key is None else _keyed(digester)
        )

        length = resolve(
            "max_value_length",
            self.max_value_length,
            ENV_MEMTRACE_MAX_VALUE_LENGTH,
            DEFAULT_MAX_VALUE_LENGTH,
            positive_int,
        )
        object.__setattr__(self, "max_value_length", length)
        if self.redact == BUILTIN_REDACTOR or (self.redact is None and production):
            object.__setattr__(self, "redact", redact_pii)
        elif self.redact is None and writer is not None:
            # The store is the user's, and PII may be the memory itself (a new phone number):
            # only secrets, which no memory needs, are kept out of it by default.
            object.__setattr__(self, "redact", redact_secrets)
        elif self.redact is not None and not callable(self.redact):
            raise ValueError(f"redact must be callable or 'builtin', got {self.redact!r}")

    production: bool = field(default=False, init=False, compare=False)
    """Whether ``memory_mode`` is ``PRODUCTION``."""
    reference: bool = field(default=False, init=False, compare=False)
    """Whether values go to a content store (``REFERENCE`` with a store configured)."""
    _keyed_digest: Callable[[str], str] | None = field(init=False, repr=False, compare=False)
    _captured: frozenset[Category] = field(default=frozenset(), init=False, repr=False)
    _writer: ContentWriter | None = field(default=None, init=False, repr=False, compare=False)
    _digester: Digester = field(init=False, repr=False, compare=False)
    _pseudonymizer: Pseudonymizer | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _clean: dict[str, None] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Digests of raw values a built-in hook returned unchanged (see :meth:`_to_store`)."""

    def pseudonym(self, identifier: str, store: str | None = None) -> str:
        """``identifier`` (a store id, case id or ref) as it leaves: its e-mail addresses and
        phone numbers replaced by keyed pseudonyms when ``pseudonymize_ids`` is on, else as it
        is. ``store``: the (raw) memory store it came with, whose manifest lists the mapping.

        >>> on = CaptureConfig(digest_key="0123456789abcdef", pseudonymize_ids=True)
        >>> on.pseudonym("ana@example.com").startswith("pii-f0ccd733-")
        True
        >>> CaptureConfig().pseudonym("ana@example.com")
        'ana@example.com'
        """
        p = self._pseudonymizer
        return identifier if p is None else p(identifier, store)

    @classmethod
    def for_production(cls, redact: Redactor | Literal["builtin"] | None = None) -> CaptureConfig:
        """The production setting: memory records, messages, queries, candidates and expected
        answers captured, and the answer the user saw and the outputs of decision and filter ops,
        all redacted (built-in hook unless ``redact``) and cut; LLM prompts, other completions,
        context and exception messages follow the upstream variable (default: not captured)."""
        return cls(memory_mode=PRODUCTION, redact=redact)

    @property
    def captures_values(self) -> bool:
        """Whether values (not only digests) of any category are recorded."""
        return bool(self._captured)

    @property
    def content_writer(self) -> ContentWriter | None:
        """The content store writer of ``REFERENCE`` capture (flush or shut it down in tests)."""
        return self._writer

    def value_digest(self, text: str) -> str:
        """``memtrace.variable.digest`` of a canonical value: keyed when a digest key is set.

        >>> CaptureConfig(digest_key="0123456789abcdef").value_digest("abc")[:13]
        'b2k:f0ccd733:'
        """
        keyed = self._keyed_digest
        return digest(text) if keyed is None else keyed(text)

    def captures(self, category: Category) -> bool:
        """Whether values of ``category`` are recorded (else digests only)."""
        return category in self._captured

    def record(
        self,
        text: str,
        category: Category,
        store: str | None = None,
        *,
        kind: OpKind | str | None = None,
        role: Role | str | None = None,
        answer: bool = False,
        digest: str | None = None,
        data: bytes | None = None,
    ) -> tuple[str | None, bool]:
        """What of one piece of app text of ``category`` leaves the process.

        Every value, every content field of ``memtrace.variable.meta``, every exception message
        and feedback's expected answer and comment pass here: nothing when capture is off for
        the category, else the text after the redaction hook, cut to the size limit. Under
        ``REFERENCE`` the redacted text goes to the content store instead (queued, never
        blocking) and what leaves in the span is the object's URL. ``kind`` and ``role``: the op
        the value is an input or output of, and ``answer``: that op serves a question (it has a
        case id); ``PRODUCTION`` chooses by them (contract v0.3 section 6).

        Args:
            store: the memory store the text belongs to (``REFERENCE``: whose manifest lists it).
            digest: :meth:`value_digest` of ``text`` when the caller has it: under ``REFERENCE``
                it names the object when the redaction hook left the text as it was.
            data: ``text``'s UTF-8 bytes when the caller has them (the digest's): under
                ``REFERENCE`` they are stored when the hook left the text as it was.

        Returns:
            ``(text, truncated)``; ``text`` is ``None`` when capture is off or the hook failed;
            under ``REFERENCE`` it is the object's URL (see :attr:`reference`).

        >>> production = CaptureConfig(memory_mode="PRODUCTION")
        >>> production.record('{"event":"UPDATE"}', Category.OTHER, kind="update", role="output")
        ('{"event":"UPDATE"}', False)
        >>> production.record("raw completion", Category.OTHER, kind="generate", role="output")
        (None, False)
        >>> production.record("Porto", Category.PREDICTION, kind="generate", role="output", answer=True)
        ('Porto', False)
        """
        if category not in self._captured and not (
            self.production and _restates_records(category, kind, role, answer)
        ):
            return None, False
        writer = self._writer
        if writer is not None:
            return self._to_store(writer, text, store, digest, data), False
        return self._redact_and_cut(text, digest)

    def mask(self, text: str) -> tuple[str | None, bool]:
        """Apply the redaction hook and the size limit to one value (``None`` if nothing is captured).

        Prefer :meth:`record`, which also applies the category's setting.
        """
        if not self._captured:
            return None, False
        return self._redact_and_cut(text)

    def _to_store(
        self,
        writer: ContentWriter,
        text: str,
        store: str | None,
        known: str | None,
        data: bytes | None = None,
    ) -> str | None:
        """Queue the (redacted) text for the store; its URL. On the app's thread only what names
        the object: the hook and the digest (reused when the hook changed nothing); the write,
        the manifest and the store's folder name are the writer thread's."""
        hook = self.redact
        if callable(hook) and (known is None or known not in self._clean):
            try:
                kept = hook(text)
                if not isinstance(kept, str):
                    raise TypeError(f"redaction hook returned {type(kept).__name__}, not str")
            except Exception:
                internal_error("capture.redact")
                return None
            if kept is not text and kept != text:
                known = data = None
            elif known is not None and hook in _PURE_HOOKS:
                self._remember_clean(known)
            text = kept
        if data is None:
            data = text.encode("utf-8", "surrogatepass")
        digester = self._digester
        name = digester.name(known if known is not None else digester(data))
        writer.put(name, data, store)
        return writer.ref(name)

    def _remember_clean(self, digest: str) -> None:
        """Remember that a built-in hook returned the value of ``digest`` unchanged: the same
        value again (a system prompt on every call, a memory on every search) skips the hook. A
        built-in hook is a function of the text alone, and the digest names the text (keyed, with
        a key); a hook of the user's may not be, so its values always pass through it."""
        clean = self._clean
        if len(clean) >= _CLEAN_REMEMBERED:
            clean.clear()
        clean[digest] = None

    def _redact_and_cut(self, text: str, known: str | None = None) -> tuple[str | None, bool]:
        """The hook's text, cut; ``known``: the digest of ``text``, if the caller has it (a value
        a built-in hook returned unchanged before is not passed through it again)."""
        hook = self.redact
        if callable(hook) and (known is None or known not in self._clean):
            try:
                kept = hook(text)
                if not isinstance(kept, str):
                    raise TypeError(f"redaction hook returned {type(kept).__name__}, not str")
            except Exception:
                internal_error("capture.redact")
                return None, False
            if known is not None and hook in _PURE_HOOKS and (kept is text or kept == text):
                self._remember_clean(known)
            text = kept
        limit: int = self.max_value_length  # type: ignore[assignment]
        if len(text) > limit:
            return text[:limit], True
        return text, False


def canonical_value(value: Any) -> str:
    """The canonical string form of a value: strings as they are, anything else as sorted JSON.

    Values JSON cannot encode fall back to ``repr`` with one warning per type.

    >>> canonical_value({"b": 1, "a": [1, 2]})
    '{"a":[1,2],"b":1}'
    """
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        data_warning(
            f"unserialisable:{type(value).__name__}",
            "memtrace-otel: a %s value is not JSON-serialisable; its repr() is recorded instead",
            type(value).__name__,
        )
        return repr(value)


def digest(text: str) -> str:
    """``sha256:<hex>`` of a canonical value.

    >>> digest("abc")
    'sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
    """
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _keyed(digester: Digester) -> Callable[[str], str]:
    def keyed(text: str) -> str:
        return digester(text.encode("utf-8", "surrogatepass"))

    return keyed


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _is_reference(value: Any) -> bool:
    return isinstance(value, str) and value.strip().upper() == REFERENCE


def _digest_key(argument: str | bytes | None) -> bytes | None:
    """The digest key: the argument (a short one raises), else ``MEMTRACE_DIGEST_KEY``.

    Not through ``resolve``: its messages quote the bad value, and this one is a secret. A
    short key in the environment is logged (without it) and digests stay unkeyed.
    """
    if argument is not None:
        return parse_key(argument, source="digest_key") if argument else None
    raw = os.environ.get(ENV_MEMTRACE_DIGEST_KEY, "").strip()
    if not raw:
        return None
    try:
        return parse_key(raw, source=ENV_MEMTRACE_DIGEST_KEY)
    except ValueError as exc:
        data_warning(
            f"env:{ENV_MEMTRACE_DIGEST_KEY}", "memtrace-otel: %s; digests stay unkeyed", exc
        )
        return None


def _url(value: object) -> str | None:
    if not isinstance(value, str):
        raise ValueError("expected an fsspec URL such as file:///srv/content or s3://bucket/x")
    return value.strip().rstrip("/") or None


_no_store_logged: list[bool] = []


def _writer_or_none(url: str | None, *, given: bool, pack: bool = False) -> ContentWriter | None:
    """The content writer of ``url``; ``None`` (logged once) when no store is configured,
    fsspec is missing, or (from the environment) fsspec does not know the URL's protocol.

    Raises:
        ValueError: a ``content_url`` argument whose protocol fsspec does not know.
    """
    why = None
    if not url:
        why = (
            f"no content store: set {ENV_MEMTRACE_CONTENT_URL} (or {ENV_GENAI_UPLOAD_BASE_PATH}) "
            "or CaptureConfig(content_url=...)"
        )
    else:
        try:
            import fsspec  # noqa: F401 - only checked for here
        except ImportError:
            why = "fsspec is not installed: pip install 'memtrace-otel[content]'"
    if why is None:
        try:
            return content_writer(url, pack=pack)  # type: ignore[arg-type]
        except ValueError as exc:
            if given:
                raise ValueError(f"invalid content_url {url!r}: {exc}") from None
            why = str(exc)
    if not _no_store_logged:
        _no_store_logged.append(True)
        logging.getLogger("memtrace_otel").warning(
            "memtrace-otel: REFERENCE capture with %s; no content is recorded (NO_CONTENT)", why
        )
    return None


def _capture_mode(value: object) -> CaptureMode:
    if isinstance(value, CaptureMode):
        return value
    text = str(value).strip()
    if text.lower() in _LEGACY:
        return _LEGACY[text.lower()]
    try:
        return CaptureMode(text.upper())
    except ValueError:
        allowed = ", ".join([*(m.value for m in CaptureMode), "true", "false"])
        raise ValueError(f"expected one of {allowed}") from None


def _memory_mode(value: object) -> CaptureMode | str:
    if isinstance(value, str) and value.strip().upper() == PRODUCTION:
        return PRODUCTION
    if _is_reference(value):
        return REFERENCE
    if not isinstance(value, str | CaptureMode):
        raise ValueError(f"expected a capture mode or {PRODUCTION!r}")
    try:
        return _capture_mode(value)
    except ValueError:
        raise ValueError(
            f"expected one of {', '.join(m.value for m in CaptureMode)}, true, false, "
            f"{PRODUCTION}, {REFERENCE}"
        ) from None


def meta_json(
    capture: CaptureConfig,
    meta: Mapping[str, Any],
    category: Category,
    store: str | None = None,
    *,
    kind: OpKind | str | None = None,
    role: Role | str | None = None,
    answer: bool = False,
) -> str | None:
    """``memtrace.variable.meta``: structure always, each content field as :meth:`CaptureConfig.record` says.

    Structure: ``source_refs`` (its refs), ``role`` (a short identifier), numbers and booleans.
    Every other field is content of the variable's category: recorded redacted and cut when its
    category is captured (a structured field stays structured unless redaction or the cut changed
    it, then it is the redacted JSON text), else left out. Under ``REFERENCE`` the content
    fields go together, as one JSON object, to the content store, and the meta carries its URL
    under :data:`META_CONTENT_REF`. ``None`` when nothing is left.

    >>> meta_json(CaptureConfig(mode="NO_CONTENT"), {"source_refs": ["m:1@1"], "note": "x"}, Category.MEMORY)
    '{"source_refs":["m:1@1"]}'
    """
    out: dict[str, Any] = {}
    content: dict[str, Any] | None = {} if capture.reference else None
    for key, value in meta.items():
        key = str(key)
        if value is None or isinstance(value, _NUMBERS):
            out[key] = value
            continue
        if key == "source_refs" and isinstance(value, _SEQUENCES):
            refs = [r for r in value if isinstance(r, str) and is_ref(r)]
            if len(refs) == len(value):
                out[key] = (
                    refs
                    if capture._pseudonymizer is None
                    else [capture.pseudonym(r, store) for r in refs]
                )
                continue
        if key == "role" and isinstance(value, str) and _IDENTIFIER.fullmatch(value):
            out[key] = value
            continue
        if content is not None:
            content[key] = value
            continue
        text = canonical_value(value)
        kept, truncated = capture.record(text, category, store, kind=kind, role=role, answer=answer)
        if kept is None:
            continue
        out[key] = value if kept == text and not truncated else kept
    if content:
        ref, _ = capture.record(canonical_value(content), category, store)
        if ref is not None:
            out[META_CONTENT_REF] = ref
    if not out:
        return None
    return json.dumps(out, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


_CATEGORY_VALUES = {c: c.value for c in Category}  # enum .value is a descriptor call: hot path


def event_attributes(
    capture: CaptureConfig,
    var: Variable,
    ref: str,
    role: Role | str,
    store: str | None = None,
    *,
    kind: OpKind | str | None = None,
    answer: bool = False,
) -> dict[str, AttributeValue]:
    """The attributes of one ``memtrace.variable`` event: ref, role, category, digest, and what
    :meth:`CaptureConfig.record` and :func:`meta_json` let leave of the value and its meta
    (under ``REFERENCE``, ``memtrace.variable.value_ref`` instead of the value).

    ``ref`` is ``var.ref`` (the caller often has it already); ``role`` a :class:`Role` or its value;
    ``store`` the op's memory store; ``kind`` the op's kind; ``answer``: the op serves a question
    (it has a case id).
    """
    value = var.value
    text = value if isinstance(value, str) else canonical_value(value)
    category = var.category
    pseudonym = capture._pseudonymizer
    if pseudonym is not None:
        known = pseudonym.known
        ref = known(ref) or pseudonym(ref, store)
        store = (known(store) or pseudonym(store)) if store else store
    attrs: dict[str, AttributeValue] = {
        A.MEMTRACE_VARIABLE_REF: ref,
        A.MEMTRACE_VARIABLE_ROLE: str(role),
        A.MEMTRACE_VARIABLE_CATEGORY: _CATEGORY_VALUES[category],
        # Encoded once: the digest's bytes are the object's under REFERENCE (a 33 KB prompt
        # with non-ASCII text takes ~40 us to encode).
        A.MEMTRACE_VARIABLE_DIGEST: (
            value_digest := capture._digester(data := text.encode("utf-8", "surrogatepass"))
        ),
    }
    if var.deleted:
        attrs[A.MEMTRACE_VARIABLE_DELETED] = True
    else:
        value, truncated = capture.record(
            text,
            category,
            store,
            kind=kind,
            role=role,
            answer=answer,
            digest=value_digest,
            data=data,
        )
        if value is not None:
            if capture.reference:
                attrs[A.MEMTRACE_VARIABLE_VALUE_REF] = value
            else:
                attrs[A.MEMTRACE_VARIABLE_VALUE] = value
            if truncated:
                attrs[A.MEMTRACE_VARIABLE_TRUNCATED] = True
    if var.meta:
        meta = meta_json(capture, var.meta, category, store, kind=kind, role=role, answer=answer)
        if meta is not None:
            attrs[A.MEMTRACE_VARIABLE_META] = meta
    return attrs


def exception_attributes(
    capture: CaptureConfig, exc: BaseException
) -> tuple[dict[str, AttributeValue], str]:
    """The ``exception`` event's attributes and the span status description for ``exc``.

    The type and the stack frames (code locations, never values) always leave; the message
    follows :meth:`CaptureConfig.record` as category ``other`` (the upstream variable: off by
    default), redacted and cut. Chained exceptions' messages are left out with the same rule.
    Under ``REFERENCE`` the message goes to the content store and the event carries
    ``memtrace.exception.message_ref``; the stack trace and the status name the type only.
    """
    module = type(exc).__module__
    qualname = type(exc).__qualname__
    name = f"{module}.{qualname}" if module and module != "builtins" else qualname
    message, _ = capture.record(str(exc), Category.OTHER)
    message_ref = None
    if capture.reference:
        message_ref, message = message, None
    frames = "".join(traceback.format_tb(exc.__traceback__)) if exc.__traceback__ else ""
    last = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    attrs: dict[str, AttributeValue] = {
        A.EXCEPTION_TYPE: name,
        A.EXCEPTION_STACKTRACE: f"Traceback (most recent call last):\n{frames}{last}\n"
        if frames
        else f"{last}\n",
        A.EXCEPTION_ESCAPED: "True",
    }
    if message:
        attrs[A.EXCEPTION_MESSAGE] = message
    if message_ref:
        attrs[A.MEMTRACE_EXCEPTION_MESSAGE_REF] = message_ref
    return attrs, last

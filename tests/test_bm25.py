"""The package's one BM25 (:class:`~memtrace_otel.attribution._tokens.Bm25Index`) is BM25+ with
``rank_bm25.BM25Plus``'s parameters, computed in plain Python (no numpy, so a run whose cases need
no sentence model never imports it). Its scores must be ``rank_bm25``'s to the bit: verdicts
rank store messages by them, and a last-bit difference can swap a tie."""

from __future__ import annotations

import json
import random

import pytest

from memtrace_otel.attribution import _tokens
from memtrace_otel.attribution._tokens import Bm25Index, content_tokens
from tests.conftest import shared_path

rank_bm25 = pytest.importorskip("rank_bm25")


def _locomo() -> tuple[list[str], list[str]]:
    """LoCoMo's messages and questions: real conversation text, not ours."""
    data = json.loads(shared_path("datasets", "locomo", "locomo10.json").read_text())
    texts = [
        turn["text"]
        for conversation in data
        for session in conversation["conversation"].values()
        if isinstance(session, list)
        for turn in session
        if isinstance(turn, dict) and "text" in turn
    ]
    return texts, [qa["question"] for conversation in data for qa in conversation["qa"]]


def test_scores_equal_rank_bm25_to_the_bit_on_real_conversations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts, questions = _locomo()
    monkeypatch.setattr(_tokens, "round", lambda x, _: x, raising=False)  # unrounded scores
    rng = random.Random(34)
    compared = 0
    for size in (1, 2, 3, 7, 40, 250, 600):
        for _ in range(6):
            docs = [(f"m{i}", rng.choice(texts)) for i in range(size)]
            corpus = [content_tokens(text) or ["_"] for _, text in docs]
            theirs = rank_bm25.BM25Plus(corpus)
            ours = Bm25Index(docs)
            for question in rng.sample(questions, 8):
                words = content_tokens(question)
                hits = [i for i, c in enumerate(corpus) if set(c) & set(words)]
                if not hits:
                    assert ours.search(question, 10) == []
                    continue
                expected = theirs.get_batch_scores(words, hits)
                got = dict(ours.search(question, len(docs)))
                assert got == {docs[i][0]: float(s) for i, s in zip(hits, expected, strict=True)}
                compared += len(hits)
    assert compared > 1000


def test_ranking_is_best_first_ties_by_position_and_only_shared_words() -> None:
    index = Bm25Index(
        [("a", "Leo has a cat"), ("b", "Maya lives in Porto"), ("c", "Maya lives in Porto")]
    )
    assert [k for k, _ in index.search("Where does Maya live?", 5)] == ["b", "c"]
    assert index.search("Where does Maya live?", 1) == index.search("Maya live", 1)[:1]
    assert index.search("quantum chromodynamics", 5) == []
    assert Bm25Index([]).search("Maya", 5) == []
    assert index.search("Maya", 0) == []

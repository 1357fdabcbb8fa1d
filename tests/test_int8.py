"""The sentence encoder's int8 layers (memtrace_otel/attribution/_int8.py) on the real
all-MiniLM-L6-v2 weights: close to the float32 pass, independent of batching, deterministic, and
chosen by the one precision setting (argument > MEMTRACE_EMBEDDING_PRECISION > default)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("onnxruntime")

from memtrace_otel.attribution import _int8, _semantic
from memtrace_otel.attribution._semantic import SentenceEncoder, default_encoder, model_dir
from memtrace_otel.semconv import env as E

# Written for this test: questions, the messages answering them in other words, and others.
TEXTS = [
    "What car does Elena drive?",
    "I bought a Tesla Model 3 today!",
    "Where does Kofi live now?",
    "Packing is done and I'm now settled in Oslo, after three weeks of boxes.",
    "Which instrument is Tomasz learning?",
    "My fingers hurt from practising chords on the new guitar all evening.",
    "The quarterly report is due on Friday; please send the figures by Thursday noon.",
    "Good morning! How was your weekend?",
    "café naïve 北京 😀",
    "",
    "ok",
    " ".join(["The committee reviewed the proposal in detail and agreed on the next steps."] * 30),
]


@pytest.fixture(scope="module")
def path() -> str:
    found = model_dir()
    assert found is not None, "the all-MiniLM-L6-v2 model is missing (make install)"
    return str(found)


@pytest.fixture(scope="module")
def float32(path: str) -> np.ndarray:
    return SentenceEncoder.from_dir(path, precision="float32", cache_size=0).encode(TEXTS)


@pytest.fixture(autouse=True)
def _own_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_semantic, "_default", None)
    monkeypatch.setattr(_semantic, "_default_key", object())
    monkeypatch.delenv(E.ENV_MEMTRACE_EMBEDDING_PRECISION, raising=False)
    monkeypatch.delenv(E.ENV_MEMTRACE_EMBEDDING_MODEL, raising=False)


def test_int8_is_the_default_and_its_vectors_stay_close_to_float32(
    path: str, float32: np.ndarray
) -> None:
    encoder = SentenceEncoder.from_dir(path, cache_size=0)
    assert encoder.precision == "int8"
    vectors = encoder.encode(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == float32.shape
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (vectors * float32).sum(axis=1).min() >= 0.97  # 0.984 measured
    # What the evidence method compares: cosines between texts, here within 0.04 of float32's
    # (0.024 at most measured).
    assert np.abs(vectors @ vectors.T - float32 @ float32.T).max() <= 0.04


def test_int8_finds_the_same_paraphrases_as_float32(path: str) -> None:
    exact = SentenceEncoder.from_dir(path, precision="float32")
    fast = SentenceEncoder.from_dir(path, precision="int8")
    for question in (TEXTS[0], TEXTS[2], TEXTS[4]):
        messages = [TEXTS[1], TEXTS[3], TEXTS[5], TEXTS[6], TEXTS[7]]
        best = [int(np.argmax(e.similarity(question, messages))) for e in (exact, fast)]
        assert best[0] == best[1] == [TEXTS[0], TEXTS[2], TEXTS[4]].index(question)


def test_a_texts_int8_vector_does_not_depend_on_its_batch(path: str) -> None:
    together = SentenceEncoder.from_dir(path, cache_size=0).encode(TEXTS)
    narrow = SentenceEncoder.from_dir(path, cache_size=0, batch_size=1)
    alone = np.stack([narrow.encode([t])[0] for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    again = SentenceEncoder.from_dir(path, cache_size=0).encode(TEXTS)
    np.testing.assert_array_equal(again, together)  # same input, same bits


def test_the_variable_picks_the_precision_and_a_bad_one_keeps_the_default(
    path: str,
    float32: np.ndarray,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_PRECISION, "float32")
    encoder = default_encoder()
    assert encoder is not None and encoder.precision == "float32"
    np.testing.assert_allclose(encoder.encode(TEXTS), float32, atol=1e-6)
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_PRECISION, "INT8")
    switched = default_encoder()  # the process's encoder follows the variable
    assert switched is not None and switched is not encoder and switched.precision == "int8"
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_PRECISION, "int4")
    with caplog.at_level(logging.WARNING):
        assert SentenceEncoder.from_dir(path).precision == "int8"
    assert "invalid MEMTRACE_EMBEDDING_PRECISION 'int4'" in caplog.text
    with pytest.raises(ValueError, match="invalid precision 'int4': expected int8 or float32"):
        SentenceEncoder.from_dir(path, precision="int4")


def test_without_onnxruntime_the_layers_run_in_float32(
    path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_int8, "RUNTIME_PACKAGES", ("no_such_runtime_package_here",))
    assert _int8.missing_runtime() == "no_such_runtime_package_here"
    assert SentenceEncoder.from_dir(path).precision == "float32"
    with pytest.raises(ImportError, match="no_such_runtime_package_here"):
        SentenceEncoder.from_dir(path, precision="int8")
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_PRECISION, "int8")
    with caplog.at_level(logging.WARNING, logger=_semantic.__name__):
        encoder = default_encoder()  # a deployment's setting never turns the similarity off
    assert encoder is not None and encoder.precision == "float32"
    assert "the layers run in float32" in caplog.text


def test_int8_that_disagrees_with_float32_at_load_falls_back_to_float32(
    path: str,
    float32: np.ndarray,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A CPU whose 8-bit products saturate gives vectors far from float32's: as if no agreement
    # were enough, the encoder keeps float32 and says so.
    monkeypatch.setattr(_semantic, "_PROBE_FLOOR", 1.01)
    with caplog.at_level(logging.WARNING, logger=_semantic.__name__):
        encoder = SentenceEncoder.from_dir(path, cache_size=0)
    assert encoder.precision == "float32" and encoder._int8 is None
    assert "the layers run in float32" in caplog.text
    np.testing.assert_allclose(encoder.encode(TEXTS), float32, atol=1e-6)

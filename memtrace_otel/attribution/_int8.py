"""The sentence encoder's transformer layers with int8 weights, run by onnxruntime.

The float32 forward pass (:mod:`._semantic`) spends nearly all its time in the six layers' matrix
products (about 21 MFLOP per token). Here the same layers are built, when the encoder is loaded,
into one ONNX graph whose four products per layer multiply 8-bit integers and accumulate in 32
bits (onnxruntime's integer kernels: VNNI or AMX on current x86); everything else (attention
scores, softmax, layer norms, GELU with the exact erf) stays float32. Nothing is downloaded and
no file is written: the graph is made from the loaded weights, in memory, as ONNX protobuf bytes
written here (no onnx package: its import alone costs 0.6 s of a cold run), and holds no text.

- **Weights:** per output column, symmetric: ``scale = max |w| / 127``, ``q = round(w / scale)``.
- **Activations:** per token (each row of the ``(tokens, hidden)`` input of a product), symmetric
  around the uint8 zero point 128, quantized in the graph before every product (``QuantizeLinear``
  per row; the product, its int32 to float conversion and the weights' scales are onnxruntime's
  fused ``MatMulIntegerToFloat``, then the row's scale and the bias). Per token, not
  per batch: a text's vector does not depend on which texts share its batch (a per-tensor scale
  would let a long text in the batch move every other text's vector).
- **Cost and accuracy:** about 3x faster than the float32 pass on one core (1.5 s against 5.0 s
  CPU for 800 LoCoMo turns), vectors at cosine >= 0.98 to the float32 ones, pairwise cosines
  0.006 from float32's on average (0.04 at most) over those turns. The encoder checks this when
  it loads (three fixed sentences, cosine >= 0.97 to float32, else it runs float32 and says so):
  x86 CPUs without VNNI can saturate 8-bit products.

One intra-op thread and no inter-op threads: like the float32 pass's one BLAS thread, the same
bits on every run and no spinning threads on a busy machine.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["RUNTIME_PACKAGES", "Int8Layers", "missing_runtime"]

Vectors = npt.NDArray[np.float32]


class Layer(Protocol):
    """The weights of one transformer layer, as the float32 encoder holds them (``_semantic``'s
    frozen layers have these fields; named here so that this module does not import that one).
    ``qkv_w`` is ``(hidden, 3 * hidden)``: the query, key and value projections side by side."""

    @property
    def qkv_w(self) -> Vectors: ...
    @property
    def qkv_b(self) -> Vectors: ...
    @property
    def out_w(self) -> Vectors: ...
    @property
    def out_b(self) -> Vectors: ...
    @property
    def ln1(self) -> tuple[Vectors, Vectors]: ...
    @property
    def ff_w(self) -> Vectors: ...
    @property
    def ff_b(self) -> Vectors: ...
    @property
    def down_w(self) -> Vectors: ...
    @property
    def down_b(self) -> Vectors: ...
    @property
    def ln2(self) -> tuple[Vectors, Vectors]: ...


RUNTIME_PACKAGES = ("onnxruntime",)
"""What the int8 layers need (the ``semantic`` extra). The graph is written here as ONNX protobuf
bytes, so the onnx package is not needed."""
_OPSET = 20  # Gelu (exact erf) and LayerNormalization are standard operators from opset 20
_IR_VERSION = 9  # what onnxruntime >= 1.17 reads
_MICROSOFT = "com.microsoft"  # onnxruntime's own operators (MatMulIntegerToFloat)


def missing_runtime() -> str | None:
    """The first package of :data:`RUNTIME_PACKAGES` that is not installed, or None."""
    for name in RUNTIME_PACKAGES:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


# The ONNX protobuf schema's field numbers and enums this module writes (onnx/onnx.proto, stable
# since IR version 3): written here so that building the graph needs no onnx package (its import
# alone costs 0.6 s of a cold run).
_FLOAT, _UINT8, _INT8, _INT64 = 1, 2, 3, 7  # TensorProto.DataType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7  # AttributeProto.AttributeType
_DTYPES = {np.dtype(np.float32): _FLOAT, np.dtype(np.uint8): _UINT8, np.dtype(np.int8): _INT8}
_DTYPES[np.dtype(np.int64)] = _INT64


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64: two's complement, as protobuf writes it
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _float(field: int, value: float) -> bytes:
    return _varint(field << 3 | 5) + np.float32(value).tobytes()


def _attribute(name: str, value: int | float | list[int]) -> bytes:
    if isinstance(value, list):
        return _bytes(1, name) + b"".join(_int(8, v) for v in value) + _int(20, _ATTR_INTS)
    if isinstance(value, float):
        return _bytes(1, name) + _float(2, value) + _int(20, _ATTR_FLOAT)
    return _bytes(1, name) + _int(3, value) + _int(20, _ATTR_INT)


def _value_info(name: str, elem_type: int, shape: Sequence[int | str]) -> bytes:
    dims = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in shape)
    tensor = _int(1, elem_type) + _bytes(2, dims)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor))


class _Graph:
    """Nodes and initializers of the graph being built, with fresh names, serialized as ONNX."""

    def __init__(self) -> None:
        self.nodes: list[bytes] = []
        self.initializers: list[bytes] = []
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def const(self, value: npt.NDArray[Any] | np.generic) -> str:
        name = self._name("c")
        array = np.ascontiguousarray(value)  # a scalar stays 0-d in its shape below
        self.initializers.append(
            b"".join(_int(1, d) for d in np.shape(value))
            + _int(2, _DTYPES[array.dtype])
            + _bytes(8, name)
            + _bytes(9, array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
        )
        return name

    def op(self, kind: str, *inputs: str, **attributes: int | float | list[int]) -> str:
        out = self._name("t")
        self.nodes.append(self._node(kind, inputs, out, attributes))
        return out

    @staticmethod
    def _node(
        kind: str,
        inputs: Sequence[str],
        out: str,
        attributes: dict[str, int | float | list[int]],
        domain: str = "",
    ) -> bytes:
        return (
            b"".join(_bytes(1, i) for i in inputs)
            + _bytes(2, out)
            + _bytes(3, out)
            + _bytes(4, kind)
            + b"".join(_bytes(5, _attribute(k, v)) for k, v in attributes.items())
            + (_bytes(7, domain) if domain else b"")
        )

    def model(self, result: str, inputs: Sequence[bytes], outputs: Sequence[bytes]) -> bytes:
        """The serialized ModelProto whose graph ends in ``Identity(result)`` named ``hidden``."""
        self.nodes.append(self._node("Identity", [result], "hidden", {}))
        graph = (
            b"".join(_bytes(1, n) for n in self.nodes)
            + _bytes(2, "sentence_encoder_int8")
            + b"".join(_bytes(5, t) for t in self.initializers)
            + b"".join(_bytes(11, v) for v in inputs)
            + b"".join(_bytes(12, v) for v in outputs)
        )
        opsets = _bytes(8, _bytes(1, "") + _int(2, _OPSET)) + _bytes(
            8, _bytes(1, _MICROSOFT) + _int(2, 1)
        )
        return _int(1, _IR_VERSION) + _bytes(2, "memtrace-otel") + _bytes(7, graph) + opsets

    def int8_product(self, x: str, weight: Vectors, bias: Vectors) -> str:
        """``x @ weight + bias`` for a ``(tokens, in)`` float input: int8 weights per output
        column, uint8 activations per token (zero point 128), int32 accumulation."""
        column = np.abs(weight).max(axis=0).astype(np.float32) / np.float32(127.0)
        column[column == 0] = 1.0
        quantized = np.clip(np.rint(weight / column), -127, 127).astype(np.int8)
        axis = self.const(np.array([1]))
        high = self.op("ReduceMax", x, axis, keepdims=0)
        low = self.op("Neg", self.op("ReduceMin", x, axis, keepdims=0))
        peak = self.op("Max", high, low, self.const(np.float32(1e-12)))
        row = self.op("Div", peak, self.const(np.float32(127.0)))  # (tokens,)
        zero = self.op("Expand", self.const(np.uint8(128)), self.op("Shape", row))
        codes = self.op("QuantizeLinear", x, row, zero, axis=0)
        out = self._name("t")
        inputs = [codes, self.const(quantized), self.const(np.float32(1.0)), self.const(column)]
        inputs.append(self.const(np.uint8(128)))
        self.nodes.append(self._node("MatMulIntegerToFloat", inputs, out, {}, _MICROSOFT))
        per_token = self.op("Unsqueeze", row, axis)
        return self.op("Add", self.op("Mul", out, per_token), self.const(bias))

    def layer_norm(self, x: str, norm: tuple[Vectors, Vectors], eps: float) -> str:
        weight, bias = norm
        return self.op(
            "LayerNormalization", x, self.const(weight), self.const(bias), axis=-1, epsilon=eps
        )


class Int8Layers:
    """The encoder's layers as one onnxruntime session: ``(tokens, hidden)`` float32 in (the
    embeddings after their layer norm, a padded batch flattened), the last layer's output out.

    Raises:
        ImportError: onnxruntime is not installed (the ``semantic`` extra).
    """

    def __init__(self, layers: Sequence[Layer], hidden: int, heads: int, eps: float) -> None:
        import onnxruntime

        g = _Graph()
        size = hidden // heads
        split = "split"  # (batch, width, 3, heads, size): the attention's view of the tokens
        bias = "padding"  # (batch, 1, 1, width): 0 for a token, -1e9 for padding
        flat = g.const(np.array([-1, hidden]))
        x = "tokens"
        for layer in layers:
            qkv = g.int8_product(x, layer.qkv_w, layer.qkv_b)  # the query is pre-scaled
            heads_view = g.op("Transpose", g.op("Reshape", qkv, split), perm=[2, 0, 3, 1, 4])
            q, k, v = (g.op("Gather", heads_view, g.const(np.array(i)), axis=0) for i in range(3))
            scores = g.op("Add", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), bias)
            attended = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
            context = g.op("Reshape", g.op("Transpose", attended, perm=[0, 2, 1, 3]), flat)
            y = g.op("Add", g.int8_product(context, layer.out_w, layer.out_b), x)
            x = g.layer_norm(y, layer.ln1, eps)
            inner = g.op("Gelu", g.int8_product(x, layer.ff_w, layer.ff_b))
            y = g.op("Add", g.int8_product(inner, layer.down_w, layer.down_b), x)
            x = g.layer_norm(y, layer.ln2, eps)
        model = g.model(
            x,
            [
                _value_info("tokens", _FLOAT, ["n", hidden]),
                _value_info(split, _INT64, [5]),
                _value_info(bias, _FLOAT, ["b", 1, 1, "w"]),
            ],
            [_value_info("hidden", _FLOAT, ["n", hidden])],
        )
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # errors only: no optimizer chatter on stderr
        self._session = onnxruntime.InferenceSession(
            model, options, providers=["CPUExecutionProvider"]
        )
        self._shape = (heads, size)

    def __call__(self, x: Vectors, batch: int, width: int, padding: Vectors) -> Vectors:
        """The layers over a padded batch flattened to ``(batch * width, hidden)``;
        ``padding`` is the ``(batch, 1, 1, width)`` additive attention mask."""
        split = np.array([batch, width, 3, *self._shape], dtype=np.int64)
        (out,) = self._session.run(None, {"tokens": x, "split": split, "padding": padding})
        result: Vectors = np.asarray(out, dtype=np.float32)
        return result

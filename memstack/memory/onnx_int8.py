"""Run a weight-only int8 ONNX model's MatMuls on its int8 weights (``MatMulNBits``).

    >>> from memstack.memory.minilm import _packaged_model
    >>> from memstack.memory.onnx_int8 import graph_ops, int8_matmuls
    >>> fast = int8_matmuls(_packaged_model().read_bytes())
    >>> graph_ops(fast).count("MatMulNBits")
    36

Why: the default model stores each weight matrix as int8 codes with one scale per output
column, dequantised in the graph (``Cast`` to float, ``Mul`` by the scales) before a
float ``MatMul``. onnxruntime folds those into float32 constants when it loads the model,
so every query's embedding reads 42 MB of float weights: ~8 ms of CPU, the longest step
of a recall at 100,000 memories (benchmarks/README.md, "bench_memory_scale.py"). Here
each such ``MatMul`` becomes onnxruntime's ``MatMulNBits`` with ``bits=8``: the same
codes and scales (a block's scale is its column's), read as int8, and the activations
quantised per block of ``block_size`` (``accuracy_level=4``) for integer products. The
vectors stay within ~0.0003 of the file's in cosine (``tests/memory/test_onnx_int8.py``),
under the ~0.003 of the int8 codes the vector index keeps.

The model file is protobuf; onnxruntime takes its bytes but has no API to edit a graph,
and the ``onnx`` package is a dependency for one rewrite. The wire format is small:
fields are (number, type) keys followed by a varint or a length-prefixed value, so the
rewrite reads the graph's nodes and initializers, and copies every other field as it was.
Anything unexpected (another exporter's layout, weights not stored as raw bytes) leaves
that ``MatMul`` as it is; bytes that are not a model give None.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

__all__ = ["BLOCK_SIZE", "graph_ops", "int8_matmuls"]

#: Activations are quantised per this many inputs: 32 keeps the vectors within ~0.0003 in
#: cosine of float activations (128: ~0.0014), at no speed difference measured.
BLOCK_SIZE = 32
_ACCURACY_INT8 = 4  # MatMulNBits: int8 products of quantised activations and weights
_CONTRIB = b"com.microsoft"

# Field numbers of onnx.proto (ModelProto, GraphProto, NodeProto, TensorProto, ...).
_MODEL_GRAPH, _MODEL_OPSET = 7, 8
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 3, 4, 5, 7
_TENSOR_DIMS, _TENSOR_TYPE, _TENSOR_NAME, _TENSOR_RAW = 1, 2, 8, 9
_ATTR_NAME, _ATTR_INT, _ATTR_TYPE = 1, 3, 20
_ATTR_INT_TYPE = 2
_FLOAT, _UINT8, _INT8 = 1, 2, 3
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class _Malformed(ValueError):
    """Bytes that do not parse as the protobuf wire format."""


# -- the wire format ------------------------------------------------------------------------
def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise _Malformed("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(data: memoryview) -> Iterator[tuple[int, int, int | memoryview, memoryview]]:
    """(number, wire type, value, the field's raw bytes) of each field of a message."""
    at = 0
    while at < len(data):
        start = at
        key, at = _varint(data, at)
        number, kind = key >> 3, key & 7
        value: int | memoryview
        if kind == _VARINT:
            value, at = _varint(data, at)
        elif kind == _BYTES:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise _Malformed("truncated field")
            value, at = data[at : at + size], at + size
        elif kind in (_FIXED64, _FIXED32):
            width = 8 if kind == _FIXED64 else 4
            value, at = data[at : at + width], at + width
        else:
            raise _Malformed(f"wire type {kind}")
        if number == 0 or at > len(data):
            raise _Malformed("bad field")
        yield number, kind, value, data[start:at]


def _messages(
    fields: Iterable[tuple[int, int, int | memoryview, memoryview]], number: int
) -> Iterator[memoryview]:
    """The length-delimited values of field ``number`` (sub-messages, strings)."""
    for field_number, _, value, _ in fields:
        if field_number == number and not isinstance(value, int):
            yield value


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, kind: int) -> bytes:
    return _encode_varint(number << 3 | kind)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _key(number, _BYTES) + _encode_varint(len(value)) + value


def _int_field(number: int, value: int) -> bytes:
    return _key(number, _VARINT) + _encode_varint(value)


# -- the messages read ----------------------------------------------------------------------
@dataclass
class _Node:
    op: str = ""
    domain: str = ""
    name: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    ints: dict[str, int] = field(default_factory=dict)


def _node(raw: memoryview) -> _Node:
    node = _Node()
    for number, _, value, _ in _fields(raw):
        if isinstance(value, int):
            continue
        if number == _NODE_INPUT:
            node.inputs.append(bytes(value).decode())
        elif number == _NODE_OUTPUT:
            node.outputs.append(bytes(value).decode())
        elif number == _NODE_NAME:
            node.name = bytes(value).decode()
        elif number == _NODE_OP:
            node.op = bytes(value).decode()
        elif number == _NODE_DOMAIN:
            node.domain = bytes(value).decode()
        elif number == _NODE_ATTRIBUTE:
            name, number_value = "", None
            for attr_number, _, attr_value, _ in _fields(value):
                if attr_number == _ATTR_NAME and not isinstance(attr_value, int):
                    name = bytes(attr_value).decode()
                elif attr_number == _ATTR_INT and isinstance(attr_value, int):
                    number_value = attr_value
            if number_value is not None:
                node.ints[name] = number_value
    return node


@dataclass
class _Tensor:
    name: str = ""
    dtype: int = 0
    dims: list[int] = field(default_factory=list)
    raw: memoryview | None = None


def _tensor(data: memoryview) -> _Tensor:
    tensor = _Tensor()
    for number, kind, value, _ in _fields(data):
        if number == _TENSOR_DIMS and isinstance(value, int):
            tensor.dims.append(value)
        elif number == _TENSOR_DIMS and kind == _BYTES and not isinstance(value, int):
            at = 0  # packed
            while at < len(value):
                dim, at = _varint(value, at)
                tensor.dims.append(dim)
        elif number == _TENSOR_TYPE and isinstance(value, int):
            tensor.dtype = value
        elif number == _TENSOR_NAME and not isinstance(value, int):
            tensor.name = bytes(value).decode()
        elif number == _TENSOR_RAW and not isinstance(value, int):
            tensor.raw = value
    return tensor


def _tensor_bytes(name: str, dtype: int, array: np.ndarray) -> bytes:
    dims = b"".join(_int_field(_TENSOR_DIMS, int(d)) for d in array.shape)
    return (
        dims
        + _int_field(_TENSOR_TYPE, dtype)
        + _bytes_field(_TENSOR_NAME, name.encode())
        + _bytes_field(_TENSOR_RAW, np.ascontiguousarray(array).tobytes())
    )


def _node_bytes(op: str, inputs: list[str], outputs: list[str], name: str, **ints: int) -> bytes:
    parts = [_bytes_field(_NODE_INPUT, i.encode()) for i in inputs]
    parts += [_bytes_field(_NODE_OUTPUT, o.encode()) for o in outputs]
    parts += [_bytes_field(_NODE_NAME, name.encode()), _bytes_field(_NODE_OP, op.encode())]
    for key, value in ints.items():
        attribute = (
            _bytes_field(_ATTR_NAME, key.encode())
            + _int_field(_ATTR_INT, value)
            + _int_field(_ATTR_TYPE, _ATTR_INT_TYPE)
        )
        parts.append(_bytes_field(_NODE_ATTRIBUTE, attribute))
    parts.append(_bytes_field(_NODE_DOMAIN, _CONTRIB))
    return b"".join(parts)


# -- the rewrite ----------------------------------------------------------------------------
def graph_ops(model: bytes) -> list[str]:
    """The op type of each node of ``model``'s graph, in order."""
    for graph in _messages(_fields(memoryview(model)), _MODEL_GRAPH):
        return [_node(node).op for node in _messages(_fields(graph), _GRAPH_NODE)]
    return []


def int8_matmuls(model: bytes, *, block_size: int = BLOCK_SIZE) -> bytes | None:
    """``model`` with each ``MatMul`` of ``Cast(int8 weights) * column scales`` replaced by
    ``MatMulNBits`` on the same codes; None when there is none (or ``model`` is no model)."""
    try:
        return _rewrite(memoryview(model), block_size)
    except (_Malformed, UnicodeDecodeError, ValueError):
        return None


def _rewrite(model: memoryview, block_size: int) -> bytes | None:
    top = list(_fields(model))
    graphs = list(_messages(top, _MODEL_GRAPH))
    if len(graphs) != 1:
        return None
    graph = _rewrite_graph(graphs[0], block_size)
    if graph is None:
        return None
    # One join of views: the model is ~23 MB, and each copy of it cost ~20 ms.
    parts: list[bytes | memoryview] = []
    contrib = False
    for number, _, value, raw in top:
        if number == _MODEL_GRAPH:
            size = sum(len(part) for part in graph)
            parts += [_key(_MODEL_GRAPH, _BYTES), _encode_varint(size), *graph]
            continue
        if number == _MODEL_OPSET and not isinstance(value, int):
            contrib |= any(bytes(domain) == _CONTRIB for domain in _messages(_fields(value), 1))
        parts.append(raw)
    if not contrib:
        parts.append(_bytes_field(_MODEL_OPSET, _bytes_field(1, _CONTRIB) + _int_field(2, 1)))
    return b"".join(parts)


def _rewrite_graph(graph: memoryview, block_size: int) -> list[bytes | memoryview] | None:
    """The rewritten graph's fields, in order, or None when no MatMul was rewritten."""
    fields = list(_fields(graph))
    nodes = [_node(node) for node in _messages(fields, _GRAPH_NODE)]
    tensors = {
        t.name: t for t in (_tensor(tensor) for tensor in _messages(fields, _GRAPH_INITIALIZER))
    }
    made_by = {output: node for node in nodes for output in node.outputs}
    readers = Counter(name for node in nodes for name in node.inputs)
    replaced: dict[int, bytes] = {}  # a MatMul's place among the nodes -> its MatMulNBits
    dropped: set[str] = set()  # outputs of the Cast and Mul nodes no longer read
    freed: set[str] = set()  # initializers no longer read
    added: list[bytes] = []
    for index, node in enumerate(nodes):
        found = _weight_of(node, made_by, tensors)
        if found is None:
            continue
        cast, scale_node, codes, scales = found
        k, n = codes.shape
        if k % block_size:
            continue
        blocks = k // block_size
        name = f"{node.name or node.outputs[0]}_int8"
        # MatMulNBits holds, per output column, its blocks of unsigned codes (8 bits: zero
        # point 128) and one scale per block: here the column's, repeated.
        packed = (codes.T.astype(np.int16) + 128).astype(np.uint8).reshape(n, blocks, block_size)
        block_scales = np.repeat(scales[:, None], blocks, axis=1).reshape(-1)
        added.append(_bytes_field(_GRAPH_INITIALIZER, _tensor_bytes(name + "_B", _UINT8, packed)))
        added.append(
            _bytes_field(_GRAPH_INITIALIZER, _tensor_bytes(name + "_S", _FLOAT, block_scales))
        )
        replaced[index] = _node_bytes(
            "MatMulNBits",
            [node.inputs[0], name + "_B", name + "_S"],
            node.outputs,
            name,
            K=k,
            N=n,
            bits=8,
            block_size=block_size,
            accuracy_level=_ACCURACY_INT8,
        )
        # The MatMul read the Mul's output; the Mul and the Cast go when nothing else reads
        # them, and so do their initializers.
        readers[node.inputs[1]] -= 1
        for weight_node in (scale_node, cast):
            if readers[weight_node.outputs[0]] > 0:
                break
            dropped.add(weight_node.outputs[0])
            for name_read in weight_node.inputs:
                readers[name_read] -= 1
                if readers[name_read] == 0 and name_read in tensors:
                    freed.add(name_read)
    if not replaced:
        return None
    parts: list[bytes | memoryview] = []
    index = -1
    for number, _, value, raw in fields:
        if number == _GRAPH_NODE and not isinstance(value, int):
            index += 1
            node = nodes[index]
            if index in replaced:
                parts.append(_bytes_field(_GRAPH_NODE, replaced[index]))
            elif not (set(node.outputs) & dropped):
                parts.append(raw)
        elif number == _GRAPH_INITIALIZER and not isinstance(value, int):
            if _tensor(value).name not in freed:
                parts.append(raw)
        else:
            parts.append(raw)
    return parts + added


def _weight_of(
    node: _Node, made_by: dict[str, _Node], tensors: dict[str, _Tensor]
) -> tuple[_Node, _Node, np.ndarray, np.ndarray] | None:
    """For ``MatMul(x, Mul(Cast(int8 codes), column scales))``: the Cast, the Mul, the codes
    (K, N) and the scales (N,); else None."""
    if node.op != "MatMul" or node.domain or len(node.inputs) != 2:
        return None
    scale_node = made_by.get(node.inputs[1])
    if scale_node is None or scale_node.op != "Mul" or len(scale_node.inputs) != 2:
        return None
    cast = made_by.get(scale_node.inputs[0])
    if cast is None or cast.op != "Cast" or cast.ints.get("to") != _FLOAT:
        return None
    codes_tensor = tensors.get(cast.inputs[0])
    scales_tensor = tensors.get(scale_node.inputs[1])
    if codes_tensor is None or scales_tensor is None:
        return None
    if codes_tensor.dtype != _INT8 or len(codes_tensor.dims) != 2 or codes_tensor.raw is None:
        return None
    k, n = codes_tensor.dims
    if scales_tensor.dtype != _FLOAT or scales_tensor.raw is None:
        return None
    if scales_tensor.dims not in ([n], [1, n]) or len(codes_tensor.raw) != k * n:
        return None
    codes = np.frombuffer(codes_tensor.raw, dtype=np.int8).reshape(k, n)
    scales = np.frombuffer(scales_tensor.raw, dtype="<f4").astype(np.float32)
    if len(scales) != n:
        return None
    return cast, scale_node, codes, scales

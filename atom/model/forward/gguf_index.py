"""A GGUF file's tensor index, read without parsing its metadata values.

`gguf.GGUFReader` builds a numpy view of every metadata value, a 49,152-token
vocabulary and its merges included: seconds of every start (docs/performance.md,
"Start-up"), where ATOM needs only the tensors (their names, types and bytes). This
reads the header, steps over the metadata (a string array is walked length by length,
never decoded), and maps the tensors' bytes as `GGUFReader` shapes them. Little-endian
GGUF v2/v3 only; anything else is read by `GGUFReader` itself."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# GGUF metadata value types → their size in bytes (STRING = 8 and ARRAY = 9 vary)
FIXED_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, UINT32 = 8, 9, 4
ALIGNMENT_KEY = "general.alignment"
FLOAT_TYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
INT_TYPES = {"I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64}


@dataclass(frozen=True, slots=True)
class IndexedTensor:
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    data: np.ndarray  # mapped, shaped as GGUFReader shapes it (rows of bytes when quantized)


def tensors(path: Path) -> list[IndexedTensor]:
    """The file's tensors, in the file's order."""
    import gguf  # type: ignore[import-untyped]

    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    version = struct.unpack_from("<I", mapped, 4)[0] if mapped[:4] == b"GGUF" else 0
    if version not in (2, 3):  # v1, big-endian or no GGUF: the reference reader decides
        return [
            IndexedTensor(t.name, t.tensor_type, t.data) for t in gguf.GGUFReader(str(path)).tensors
        ]
    num_tensors, num_kv = struct.unpack_from("<QQ", mapped, 8)
    pos, alignment = 24, gguf.GGUF_DEFAULT_ALIGNMENT
    for _ in range(num_kv):
        key, pos = _string(mapped, pos)
        kind = struct.unpack_from("<I", mapped, pos)[0]
        if key == ALIGNMENT_KEY and kind == UINT32:
            alignment = struct.unpack_from("<I", mapped, pos + 4)[0]
        pos = _skip_value(mapped, pos + 4, kind)
    infos = []
    for _ in range(num_tensors):
        name, pos = _string(mapped, pos)
        num_dims = struct.unpack_from("<I", mapped, pos)[0]
        dims = struct.unpack_from(f"<{num_dims}Q", mapped, pos + 4)
        kind, offset = struct.unpack_from("<IQ", mapped, pos + 4 + 8 * num_dims)
        infos.append((name, dims, gguf.GGMLQuantizationType(kind), offset))
        pos += 4 + 8 * num_dims + 12
    start = -(-pos // alignment) * alignment
    array = np.frombuffer(mapped, dtype=np.uint8)
    return [_tensor(array, start, *info) for info in infos]


def _tensor(
    array: np.ndarray, start: int, name: str, dims: tuple[int, ...], kind: Any, offset: int
) -> IndexedTensor:
    import gguf  # type: ignore[import-untyped]

    shape = tuple(reversed(dims))
    count = int(np.prod(dims))
    dtype = FLOAT_TYPES.get(kind.name) or INT_TYPES.get(kind.name)
    if dtype is None:
        block, size = gguf.GGML_QUANT_SIZES[kind]
        count, dtype = count * size // block, np.uint8
        shape = gguf.quants.quant_shape_to_byte_shape(shape, kind)
    first = start + offset
    nbytes = count * np.dtype(dtype).itemsize
    data = array[first : first + nbytes].view(dtype).reshape(shape)
    return IndexedTensor(name, kind, data)


def _string(mapped: mmap.mmap, pos: int) -> tuple[str, int]:
    length = struct.unpack_from("<Q", mapped, pos)[0]
    return mapped[pos + 8 : pos + 8 + length].decode(), pos + 8 + length


def _skip_value(mapped: mmap.mmap, pos: int, kind: int) -> int:
    """Where the metadata value of type `kind` at `pos` ends."""
    if kind in FIXED_SIZES:
        return pos + FIXED_SIZES[kind]
    if kind == STRING:
        return pos + 8 + struct.unpack_from("<Q", mapped, pos)[0]
    if kind != ARRAY:
        raise ValueError(f"unknown GGUF metadata type {kind}")
    item, count = struct.unpack_from("<IQ", mapped, pos)
    pos += 12
    if item in FIXED_SIZES:
        return pos + count * FIXED_SIZES[item]
    for _ in range(count):
        pos = _skip_value(mapped, pos, item)
    return pos

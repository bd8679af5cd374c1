"""CTranslate2's model file (`model.bin`), read: the variables a converted model holds,
by name, as torch tensors. Pure reading, no CTranslate2 needed.

The file (CTranslate2's `ModelSpec._serialize`, binary version 6): a uint32 version, the
spec's name, a uint32 revision, a uint32 count of variables, each a name, a uint8 rank,
that many uint32 dimensions, a uint8 type (float32, int8, int16, int32, float16,
bfloat16), a uint32 byte count and the bytes; then a uint32 count of aliases, each a
name and the variable it names. A string is a uint16 length (its NUL included), the
bytes and the NUL; numbers are little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch

VERSION = 6  # the binary version read here
DTYPES = (torch.float32, torch.int8, torch.int16, torch.int32, torch.float16, torch.bfloat16)


class Ct2Error(ValueError):
    """The bytes are not a model file this reader knows."""


@dataclass(frozen=True, slots=True)
class Ct2Model:
    spec: str  # e.g. "WhisperSpec"
    revision: int
    variables: dict[str, torch.Tensor]  # by name, aliases resolved to their variable


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        self.at = 0

    def number(self, fmt: str) -> int:
        if self.at + struct.calcsize(fmt) > len(self.data):
            raise Ct2Error("the model file ends early")
        (value,) = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str:
        size = self.number("H")
        raw = self.bytes(size)
        return bytes(raw[:-1]).decode()

    def bytes(self, size: int) -> memoryview:
        if self.at + size > len(self.data):
            raise Ct2Error("the model file ends early")
        raw = self.data[self.at : self.at + size]
        self.at += size
        return raw


def read_model(data: bytes | memoryview) -> Ct2Model:
    """A model file's variables (the tensors share `data`'s memory where they can)."""
    reader = _Reader(data)
    version = reader.number("I")
    if version != VERSION:
        raise Ct2Error(f"binary version {version}, this reader knows {VERSION}")
    spec, revision = reader.string(), reader.number("I")
    variables: dict[str, torch.Tensor] = {}
    for _ in range(reader.number("I")):
        name = reader.string()
        shape = [reader.number("I") for _ in range(reader.number("B"))]
        kind = reader.number("B")
        if kind >= len(DTYPES):
            raise Ct2Error(f"{name}: unknown type {kind}")
        raw = reader.bytes(reader.number("I"))
        tensor = (
            torch.frombuffer(bytearray(raw), dtype=DTYPES[kind])
            if len(raw)
            else torch.empty(0, dtype=DTYPES[kind])
        )
        variables[name] = tensor.reshape(shape)
    for _ in range(reader.number("I")):
        alias, name = reader.string(), reader.string()
        variables[alias] = variables[name]
    return Ct2Model(spec=spec, revision=revision, variables=variables)

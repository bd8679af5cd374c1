"""The 1B bench's GGUF writer (bench/big_model.py) puts ATOM's blocks in GGUF's order:
the `gguf` package's own dequantization gives back the weights they stand for."""

from __future__ import annotations

import gguf  # type: ignore[import-untyped]
import torch

from atom.model.forward import int4, q8
from bench.big_model import q4_1, q8_0


def test_q4_1_and_q8_0_blocks_read_back_through_gguf() -> None:
    weight = torch.randn(24, 96, generator=torch.Generator().manual_seed(7)) * 0.02
    for write, quantize, kind in (
        (q4_1, int4.quantize_blocks, gguf.GGMLQuantizationType.Q4_1),
        (q8_0, q8.quantize_blocks, gguf.GGMLQuantizationType.Q8_0),
    ):
        read = torch.from_numpy(gguf.dequantize(write(weight), kind).copy())
        assert torch.equal(read.float(), quantize(weight)[1])

"""Q8_0 blocks: weights a Q8_0 file holds come back exactly, the kernel against the same
arithmetic in float64 on each instruction set, and the default model's own blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from atom.model.forward.blocks import Q8_0
from atom.model.forward.q8 import quantize_blocks
from atom.model.loader import default_model_path
from tests.model.tiny import KERNEL_ISAS, block_product, cpu_ops, kernel_isa


def q8_0_weights(rows: int, width: int, seed: int) -> torch.Tensor:
    """Weights as a Q8_0 file holds them: d * q per block of 32, some q at ±127."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(-127, 128, (rows, width // 32, 32), generator=gen)
    q[..., 0] = torch.where(torch.rand(rows, width // 32, generator=gen) < 0.5, -127, 127)
    d = (torch.rand(rows, width // 32, 1, generator=gen) / 100).half().float()
    return (q * d).reshape(rows, width)


def test_q8_0_weights_come_back_exactly() -> None:
    weight = q8_0_weights(24, 96, seed=1)
    blocks, dequantized = quantize_blocks(weight)
    assert blocks.dtype == torch.uint8 and blocks.shape == (24, 96 // 32 * 34)
    assert torch.equal(dequantized, weight)


@pytest.mark.parametrize("isa", KERNEL_ISAS)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7, 12, 37, 63, 64, 70, 130])
@pytest.mark.parametrize(("width", "bias"), [(32, False), (64, True), (96, False), (608, True)])
def test_q8_linear_matches_the_same_arithmetic(isa: str, rows: int, width: int, bias: bool) -> None:
    gen = torch.Generator().manual_seed(rows * width)
    weight = q8_0_weights(48, width, seed=rows)
    b = torch.randn(48, generator=gen) if bias else None
    x = torch.randn(1, rows, width, generator=gen)
    x[0, 0, :5] = 0.0  # an all-zero stretch: a block of zeros has no scale
    with kernel_isa(isa):
        got = cpu_ops().q8_linear(x, Q8_0.pack(weight), b)
    assert got.shape == (1, rows, 48)
    expected = block_product(x[0], weight, b, minimums=False)
    torch.testing.assert_close(got[0], expected, rtol=1e-4, atol=1e-4)


def test_q8_linear_refuses_widths_off_the_block() -> None:
    with pytest.raises(RuntimeError, match="blocks of 32"):
        cpu_ops().q8_linear(torch.zeros(1, 40), torch.zeros(16, 34, dtype=torch.uint8), None)


def test_the_default_models_q8_0_embedding_comes_back_byte_for_byte() -> None:
    """Its token embedding (also its output projection) ships as Q8_0: dequantized and
    re-quantized, the very scales and values."""
    import gguf  # type: ignore[import-untyped]

    reader = gguf.GGUFReader(str(default_model_path()))
    tensor = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert tensor.tensor_type.name == "Q8_0"
    raw = np.asarray(tensor.data)[:64].reshape(64, -1, 34)  # rows of (d, 32 values)
    weight = torch.from_numpy(gguf.dequantize(raw.reshape(64, -1), tensor.tensor_type).copy())
    blocks, _ = quantize_blocks(weight)
    nb = weight.shape[1] // 32
    scales = blocks[:, : 2 * nb].reshape(64, nb, 2)
    values = (blocks[:, 2 * nb :].to(torch.int16) - 128).to(torch.int8).reshape(64, nb, 32)
    assert torch.equal(scales, torch.from_numpy(raw[..., :2].copy()))
    assert torch.equal(values.view(torch.uint8), torch.from_numpy(raw[..., 2:].copy()))

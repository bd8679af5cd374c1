"""`--quantization int4`: 4-bit weights in blocks of 32 for CPU decode.

Each weight row is cut into blocks of 32 along the input, each a GGUF Q4_1 block: a
float16 scale d, a float16 minimum m and 32 nibbles q, the weight being d * q + m
(20 bytes for 32 weights, 0.625 a weight against int8's 1). A row is stored as its
scales, then its minimums, then its nibbles (the kernel reads the scales of four
blocks at once). The default model ships as Q4_1, and a Q4_1 block's smallest and
largest weights sit at q = 0 and q = 15, so re-quantizing its dequantized weights
gives back those very blocks.

A layer of these blocks is a `blocks.BlockLinear` (format `Q4_1`): every product, one
row or a whole prompt, is ATOM's `int4_linear` kernel: integer dot products on
activations quantized per 32-block (as llama.cpp's Q8_1), so one outlier only
coarsens its own block, the 4-bit weights streamed once for every 128 rows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

BLOCK = 32
BLOCK_BYTES = 20


def pack(scale: torch.Tensor, minimum: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Rows of blocks uint8 [N, nb * 20] from float16 scales and minimums [N, nb] and
    the values q [N, nb, 32] (0..15)."""
    q = q.to(torch.uint8)
    nibbles = nibbles_of(q)
    parts = (scale.contiguous().view(torch.uint8), minimum.contiguous().view(torch.uint8), nibbles)
    return torch.cat(parts, dim=1).contiguous()  # a row: scales | minimums | nibbles


def unpack(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`pack` undone: (scale, minimum as float32 [N, nb], q uint8 [N, nb, 32])."""
    nb = blocks.shape[1] // BLOCK_BYTES
    scale = blocks[:, : 2 * nb].contiguous().view(torch.float16).float()
    minimum = blocks[:, 2 * nb : 4 * nb].contiguous().view(torch.float16).float()
    return scale, minimum, values_of(blocks[:, 4 * nb :])


def dequantized(blocks: torch.Tensor) -> torch.Tensor:
    """The weights rows of blocks stand for, float32 [N, K]."""
    return with_minimums(*unpack(blocks))


def with_minimums(scale: torch.Tensor, minimum: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Blocks' weights d · q + m [N, K] from scales and minimums [N, nb], values q
    [N, nb, 32] (float32, as `gguf` dequantizes Q4_1 and Q5_1)."""
    values = q.float() * scale.float().unsqueeze(-1) + minimum.float().unsqueeze(-1)
    return values.reshape(len(q), -1)


def nibbles_of(q: torch.Tensor) -> torch.Tensor:
    """Values q uint8 [N, nb, 32] (their low four bits) as GGUF's nibbles [N, nb * 16]:
    weight i in byte i's low half, weight 16 + i in its high half."""
    return (q[..., : BLOCK // 2] & 0x0F | (q[..., BLOCK // 2 :] << 4)).reshape(len(q), -1)


def values_of(nibbles: torch.Tensor) -> torch.Tensor:
    """`nibbles_of` undone: [N, nb * 16] → the values uint8 [N, nb, 32] (0..15)."""
    packed = nibbles.reshape(len(nibbles), -1, BLOCK // 2)
    return torch.cat((packed & 0x0F, packed >> 4), dim=-1)


def quantize_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks uint8 [N, K / 32 * 20], the weights they stand for, float32 [N, K])."""
    return quantize_with_minimums(weight, 15, pack)


Packer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def quantize_with_minimums(
    weight: torch.Tensor, levels: int, packer: Packer
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each block of 32 of `weight` [N, K] as d · q + m, m its smallest weight and q in
    0..`levels`: (the rows `packer` makes of them, the weights they stand for)."""
    rows, width = weight.shape
    values = weight.detach().float().reshape(rows, width // BLOCK, BLOCK)
    low, high = values.amin(dim=-1), values.amax(dim=-1)
    scale, minimum = ((high - low) / levels).half(), low.half()
    step = scale.float().unsqueeze(-1)
    q = ((values - minimum.float().unsqueeze(-1)) / torch.where(step > 0, step, 1.0)).round()
    q = q.clamp(0, levels)
    return packer(scale, minimum, q), with_minimums(scale, minimum, q)

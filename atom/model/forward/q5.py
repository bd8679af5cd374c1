"""Q5_1 blocks: a GGUF's Q5_0, Q5_1 and Q5_K tensors (`--quantization auto`).

Each weight row is cut into blocks of 32 along the input, each a GGUF Q5_1 block: a
float16 scale d, a float16 minimum m and 32 five-bit values q, the weight being
d * q + m (24 bytes for 32 weights, 0.75 a weight). A row is stored as its scales,
then its minimums, then each block's fifth bits (32 bits, bit i of weight i, as
GGUF's qh), then its nibbles (the low four bits, in Q4_1's order). Q5_0 and Q5_K
blocks become these exactly, up to float16's rounding of Q5_K's sub-block scales
(gguf_blocks.py).

A layer of these blocks is a `blocks.BlockLinear` (format `Q5_1`): every product is
ATOM's `q5_linear` kernel, `int4_linear`'s loops with each nibble given its fifth
bit.
"""

from __future__ import annotations

import torch

from atom.model.forward import int4

BLOCK = 32
BLOCK_BYTES = 24
LEVELS = 31  # q = 0..31


def pack(scale: torch.Tensor, minimum: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Rows of blocks uint8 [N, nb * 24] from float16 scales and minimums [N, nb] and
    the values q [N, nb, 32] (0..31)."""
    rows = q.shape[0]
    q = q.to(torch.uint8)
    bits = (q >> 4).reshape(rows, -1, 4, 8) << torch.arange(8, dtype=torch.uint8)
    fifth = bits.sum(-1, dtype=torch.uint8)  # four bytes a block: bit i of weight i
    parts = (
        scale.contiguous().view(torch.uint8),
        minimum.contiguous().view(torch.uint8),
        fifth.reshape(rows, -1),
        int4.nibbles_of(q),
    )
    return torch.cat(parts, dim=1).contiguous()


def unpack(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`pack` undone: (scale, minimum as float32 [N, nb], q int64 [N, nb, 32])."""
    rows, width = blocks.shape
    nb = width // BLOCK_BYTES
    scale = blocks[:, : 2 * nb].contiguous().view(torch.float16).float()
    minimum = blocks[:, 2 * nb : 4 * nb].contiguous().view(torch.float16).float()
    fifth = blocks[:, 4 * nb : 8 * nb].reshape(rows, nb, 4, 1).to(torch.int64)
    high = ((fifth >> torch.arange(8)) & 1).reshape(rows, nb, BLOCK)
    return scale, minimum, int4.values_of(blocks[:, 8 * nb :]) | (high << 4)


def quantize_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks uint8 [N, K / 32 * 24], the weights they stand for, float32 [N, K])."""
    return int4.quantize_with_minimums(weight, LEVELS, pack)

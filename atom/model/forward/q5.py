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
    q = q.to(torch.uint8)
    parts = (
        scale.contiguous().view(torch.uint8),
        minimum.contiguous().view(torch.uint8),
        bits_of(q, 4),
        int4.nibbles_of(q),
    )
    return torch.cat(parts, dim=1).contiguous()


def bits_of(q: torch.Tensor, bit: int) -> torch.Tensor:
    """Bit `bit` of each value q [N, nb, 32] as four bytes a block [N, nb * 4], bit i
    of a block's 32 that of its weight i (GGUF's qh)."""
    bits = ((q.to(torch.uint8) >> bit) & 1).reshape(len(q), -1, 4, 8)
    octets = bits << torch.arange(8, dtype=torch.uint8)
    return octets.sum(-1, dtype=torch.uint8).reshape(len(q), -1)


def bit_values(packed: torch.Tensor, nb: int) -> torch.Tensor:
    """`bits_of`'s bytes [N, nb * 4] back to one bit a weight, uint8 [N, nb, 32]."""
    bytes_ = packed.reshape(len(packed), nb, 4, 1)
    return ((bytes_ >> torch.arange(8, dtype=torch.uint8)) & 1).reshape(len(packed), nb, BLOCK)


def unpack(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`pack` undone: (scale, minimum as float32 [N, nb], q uint8 [N, nb, 32])."""
    nb = blocks.shape[1] // BLOCK_BYTES
    scale = blocks[:, : 2 * nb].contiguous().view(torch.float16).float()
    minimum = blocks[:, 2 * nb : 4 * nb].contiguous().view(torch.float16).float()
    fifth = bit_values(blocks[:, 4 * nb : 8 * nb], nb)
    return scale, minimum, int4.values_of(blocks[:, 8 * nb :]) | (fifth << 4)


def dequantized(blocks: torch.Tensor) -> torch.Tensor:
    """The weights rows of blocks stand for, float32 [N, K]."""
    return int4.with_minimums(*unpack(blocks))


def quantize_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks uint8 [N, K / 32 * 24], the weights they stand for, float32 [N, K])."""
    return int4.quantize_with_minimums(weight, LEVELS, pack)

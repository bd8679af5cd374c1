"""Q6_K blocks of 32: a GGUF's Q6_K tensors (`--quantization auto`).

GGUF's Q6_K holds 256 weights a super-block: a float16 scale d, sixteen int8 scales s
(one a sub-block of 16) and 256 six-bit values q, the weight being d * s * (q - 32).
ATOM keeps those numbers, cut into blocks of 32 along the input, each with its own
copy of d: a block is d, the scales of its two halves and its 32 values (28 bytes for
32 weights, 0.875 a weight against Q6_K's 0.82 and Q8_0's 1.06). A row is stored as
its d's, its low halves' scales, its high halves', each block's fifth bits and sixth
bits (32 bits each, bit i of weight i, as Q5_1's), then its nibbles (the low four
bits, in Q4_1's order). A Q6_K tensor's blocks become these exactly
(gguf_blocks.py), and the kernel's arithmetic is exact up to its last float product,
so a layer computes with the very weights the file holds.

A layer of these blocks is a `blocks.BlockLinear` (format `Q6_K`): every product is
ATOM's `q6_linear` kernel.
"""

from __future__ import annotations

import torch

from atom.model.forward import int4, q5

BLOCK = 32
BLOCK_BYTES = 28
ZERO = 32  # the stored value of a weight 0: q = 0..63 stands for -32..31
SCALE = 127  # the largest int8 scale `quantize_blocks` makes


def pack(d: torch.Tensor, scales: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Rows of blocks uint8 [N, nb * 28] from float16 d [N, nb], int8 scales
    [N, nb, 2] (a block's low half's, then its high half's) and the values q
    [N, nb, 32] (0..63)."""
    q = q.to(torch.uint8)
    scales = scales.to(torch.int8).view(torch.uint8)
    parts = (
        d.contiguous().view(torch.uint8),
        scales[..., 0],
        scales[..., 1],
        q5.bits_of(q, 4),
        q5.bits_of(q, 5),
        int4.nibbles_of(q),
    )
    return torch.cat(parts, dim=1).contiguous()


def unpack(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`pack` undone: (d float32 [N, nb], scales int8 [N, nb, 2], q uint8 [N, nb, 32])."""
    nb = blocks.shape[1] // BLOCK_BYTES
    d = blocks[:, : 2 * nb].contiguous().view(torch.float16).float()
    halves = blocks[:, 2 * nb : 4 * nb].contiguous().view(torch.int8)
    scales = halves.reshape(len(blocks), 2, nb).transpose(1, 2)
    fifth = q5.bit_values(blocks[:, 4 * nb : 8 * nb], nb)
    sixth = q5.bit_values(blocks[:, 8 * nb : 12 * nb], nb)
    return d, scales, int4.values_of(blocks[:, 12 * nb :]) | (fifth << 4) | (sixth << 5)


def dequantized(blocks: torch.Tensor) -> torch.Tensor:
    """The weights rows of blocks stand for, float32 [N, K]: (d · s) · (q - 32), in the
    order and precision of `gguf`'s own dequantization (so they equal it)."""
    d, scales, q = unpack(blocks)
    step = (d.unsqueeze(-1) * scales.float()).repeat_interleave(BLOCK // 2, dim=-1)
    return (step * (q.float() - ZERO)).reshape(len(blocks), -1)


def quantize_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks uint8 [N, K / 32 * 28], the weights they stand for, float32 [N, K]):
    each half-block's step d · s at least its largest magnitude / 31 (so no value is
    clipped), d the block's, with room for float16's rounding of d."""
    w = weight.detach().float().reshape(len(weight), -1, 2, BLOCK // 2)
    amax = w.abs().amax(-1)  # [N, nb, 2]
    d = (amax.amax(-1) / (31 * (SCALE - 1))).half()
    safe_d = torch.where(d > 0, d.float(), torch.ones_like(d, dtype=torch.float32))
    scales = (amax / (31 * safe_d.unsqueeze(-1))).ceil().clamp(0, SCALE)
    step = (d.float().unsqueeze(-1) * scales).unsqueeze(-1)
    q = torch.where(step > 0, w / torch.where(step > 0, step, 1.0), 0.0)
    q = (q.round() + ZERO).clamp(0, 2 * ZERO - 1).reshape(len(weight), -1, BLOCK)
    blocks = pack(d, scales, q)
    return blocks, dequantized(blocks)

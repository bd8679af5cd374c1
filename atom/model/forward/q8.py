"""Q8_0 blocks: the output projection of `--quantization int4` (and a GGUF's Q8_0 tensors).

Each weight row is cut into blocks of 32 along the input, each a GGUF Q8_0 block: a
float16 scale d and 32 int8 values q, the weight being d * q (34 bytes for 32 weights).
A row is stored as its scales, then its values plus 128 (unsigned bytes, what the
VNNI dot product takes). Quantizing the dequantized weights of a Q8_0 tensor gives
back its very blocks: a block's largest magnitude sits at q = ±127.

A layer of these blocks is a `blocks.BlockLinear` (format `Q8_0`): every product, one
row or a whole prompt, is ATOM's `q8_linear` kernel, integer dot products on
activations quantized per 32-block, as `int4_linear`'s.
"""

from __future__ import annotations

import torch

BLOCK = 32
BLOCK_BYTES = 34


def quantize_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks uint8 [N, K / 32 * 34], the weights they stand for, float32 [N, K])."""
    rows, width = weight.shape
    values = weight.detach().float().reshape(rows, width // BLOCK, BLOCK)
    scale = (values.abs().amax(dim=-1) / 127).half()
    step = scale.float().unsqueeze(-1)
    q = (values / torch.where(step > 0, step, 1.0)).round().clamp(-127, 127).to(torch.int16)
    stored = (q + 128).to(torch.uint8).reshape(rows, -1)
    blocks = torch.cat((scale.view(torch.uint8), stored), dim=1).contiguous()
    return blocks, dequantized(blocks)


def dequantized(blocks: torch.Tensor) -> torch.Tensor:
    """The weights rows of blocks stand for, float32 [N, K]: d · q, exact."""
    nb = blocks.shape[1] // BLOCK_BYTES
    scale = blocks[:, : 2 * nb].contiguous().view(torch.float16).float()
    q = blocks[:, 2 * nb :].reshape(len(blocks), nb, BLOCK).to(torch.int16) - 128
    return (q.float() * scale.unsqueeze(-1)).reshape(len(blocks), -1)

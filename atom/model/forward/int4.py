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

import torch

BLOCK = 32
BLOCK_BYTES = 20


def quantize_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks uint8 [N, K / 32 * 20], the weights they stand for, float32 [N, K])."""
    rows, width = weight.shape
    values = weight.detach().float().reshape(rows, width // BLOCK, BLOCK)
    low, high = values.amin(dim=-1), values.amax(dim=-1)
    scale, minimum = ((high - low) / 15).half(), low.half()
    step = scale.float().unsqueeze(-1)
    q = ((values - minimum.float().unsqueeze(-1)) / torch.where(step > 0, step, 1.0)).round()
    q = q.clamp(0, 15).to(torch.uint8)
    nibbles = q[..., : BLOCK // 2] | (q[..., BLOCK // 2 :] << 4)
    parts = (scale.view(torch.uint8), minimum.view(torch.uint8), nibbles.reshape(rows, -1))
    blocks = torch.cat(parts, dim=1).contiguous()  # a row: scales | minimums | nibbles
    dequantized = q.float() * step + minimum.float().unsqueeze(-1)
    return blocks, dequantized.reshape(rows, width)

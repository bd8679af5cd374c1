"""Linear layers whose weights are GGUF blocks, multiplied by ATOM's block kernels.

A `BlockFormat` names one of them: Q4_1 (`int4.py`, the 4-bit layers of
`--quantization int4` and of GGUF Q4_1 tensors) and Q8_0 (`q8.py`, int4's output
projection and GGUF Q8_0 tensors). A `BlockLinear` holds one layer's blocks and runs
every product through the format's kernel (csrc/blocks.cpp), one row or many.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from atom.model.forward import int4, q8
from atom.model.forward.kernels import ProjectionKind

Quantizer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
TILE_ROWS = 16  # weight rows a tile (one to each 32-bit lane of a 512-bit register)


@dataclass(frozen=True, slots=True)
class BlockFormat:
    name: str  # GGUF's name of the type
    quantize: Quantizer  # float weights [N, K] -> (blocks, the weights they stand for)
    kernel: str  # the kernels module's product for it
    kind: ProjectionKind  # its form in the kernels' DecodeStack
    numbers: tuple[int, ...]  # bytes of each per-block number of a row, in order
    packed: int  # bytes of a block's packed weights
    block: int = 32  # weights a block, along the input

    def supports(self, linear: nn.Linear) -> bool:
        return linear.in_features % self.block == 0

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        """The blocks of `weight` [N, K], tiled as the kernel reads them; rows of zeros
        fill the last tile (their outputs are 0)."""
        return tiled(self.quantize(padded(weight))[0], self)


def padded(rows: torch.Tensor) -> torch.Tensor:
    """`rows` (weights [N, K] or a bias [N]) with zeros up to a whole number of tiles."""
    missing = -rows.shape[0] % TILE_ROWS
    return torch.cat((rows, rows.new_zeros(missing, *rows.shape[1:]))) if missing else rows


def tiled(blocks: torch.Tensor, fmt: BlockFormat) -> torch.Tensor:
    """Rows of blocks in GGUF's order [N, K / 32 * bytes] as tiles (the module
    docstring): the same shape and bytes, moved."""
    rows, width = blocks.shape
    tiles, nb = rows // TILE_ROWS, width // (sum(fmt.numbers) + fmt.packed)
    numbers, at = [], 0
    for size in fmt.numbers:
        part = blocks[:, at : at + size * nb].reshape(tiles, TILE_ROWS, nb, size)
        numbers.append(part.transpose(1, 2).reshape(tiles, nb, -1))
        at += size * nb
    weights = blocks[:, at:].reshape(tiles, TILE_ROWS, nb, fmt.packed // 4, 4)
    grouped = weights.permute(0, 2, 3, 1, 4).reshape(tiles, nb, -1)
    return torch.cat((grouped, *numbers), dim=2).reshape(rows, width).contiguous()


Q4_1 = BlockFormat("Q4_1", int4.quantize_blocks, "int4_linear", ProjectionKind.INT4, (2, 2), 16)
Q8_0 = BlockFormat("Q8_0", q8.quantize_blocks, "q8_linear", ProjectionKind.Q8, (2,), 32)


class BlockLinear(nn.Module):
    def __init__(self, linear: nn.Linear, fmt: BlockFormat, kernels: Any) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.format = fmt
        # buffers, so the model's state_dict (and the weight-update shape check) sees them
        self.register_buffer("blocks", fmt.pack(linear.weight))
        bias = None if linear.bias is None else padded(linear.bias.detach().float())
        self.register_buffer("bias", bias)
        self.whole_tiles = linear.out_features % TILE_ROWS == 0  # else zeros fill the last
        self._gemv = getattr(kernels, fmt.kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self._gemv(x, self.blocks, self.bias)
        return out if self.whole_tiles else out[..., : self.out_features].contiguous()

    def projection(self, kernels: Any) -> Any:
        """This layer as the kernels' `Projection` (None with a filled-up last tile:
        the kernels' decoder stack takes whole tiles)."""
        if not self.whole_tiles:
            return None
        return kernels.Projection(self.format.kind, self.blocks, None, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"format={self.format.name}"
        )

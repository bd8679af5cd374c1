"""Linear layers whose weights are GGUF blocks, multiplied by ATOM's block kernels.

A `BlockFormat` names one of them: Q4_1 (`int4.py`, the 4-bit layers of
`--quantization int4` and of GGUF Q4_1 tensors), Q5_1 (`q5.py`, GGUF's 5-bit tensors),
Q6_K (`q6.py`, GGUF's Q6_K in blocks of 32) and Q8_0 (`q8.py`, int4's output
projection and GGUF Q8_0 tensors). A `BlockLinear` holds one layer's blocks and runs
every product through the format's kernel (csrc/blocks.cpp), one row or many; a
`BlockEmbedding` looks a tied token table up in an output projection's blocks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from atom.model.forward import int4, q5, q6, q8
from atom.model.forward.kernels import ProjectionKind

Quantizer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Dequantizer = Callable[[torch.Tensor], torch.Tensor]
TILE_ROWS = 16  # weight rows a tile (one to each 32-bit lane of a 512-bit register)


@dataclass(frozen=True, slots=True)
class BlockFormat:
    name: str  # GGUF's name of the type
    quantize: Quantizer  # float weights [N, K] -> (blocks, the weights they stand for)
    dequantize: Dequantizer  # blocks -> the weights they stand for
    kernel: str  # the kernels module's product for it
    kind: ProjectionKind  # its form in the kernels' DecodeStack
    numbers: tuple[int, ...]  # bytes of each per-block number of a row, in order
    packed: int  # bytes of a block's packed weights
    block: int = 32  # weights a block, along the input
    planes: int = 0  # the last numbers that are high bits (fifth, sixth), tiled as planes

    @property
    def row_bytes(self) -> int:  # a row's bytes for one block
        return sum(self.numbers) + self.packed

    @property
    def plain(self) -> int:  # how many of the numbers are not bit planes
        return len(self.numbers) - self.planes

    def supports(self, linear: nn.Linear) -> bool:
        return linear.in_features % self.block == 0

    def pack(self, weight: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The blocks of `weight` [N, K] (or its rows of blocks already made, `rows`),
        tiled as the kernel reads them; rows of zeros fill the last tile (their outputs
        are 0)."""
        blocks = self.quantize(padded(weight))[0] if rows is None else padded(rows)
        return tiled(blocks, self)

    def parts(self, blocks: torch.Tensor) -> list[torch.Tensor]:
        """Rows of blocks [N, K / 32 * bytes] as `quantize` stores them (each per-block
        number of a row apart, then the packed weights) taken apart: one [N, K / 32,
        bytes] view per number, then the packed weights'."""
        rows, width = blocks.shape
        nb = width // self.row_bytes
        out, at = [], 0
        for size in (*self.numbers, self.packed):
            out.append(blocks[:, at : at + size * nb].view(rows, nb, size))
            at += size * nb
        return out


def padded(rows: torch.Tensor) -> torch.Tensor:
    """`rows` (weights [N, K] or a bias [N]) with zeros up to a whole number of tiles."""
    missing = -rows.shape[0] % TILE_ROWS
    return torch.cat((rows, rows.new_zeros(missing, *rows.shape[1:]))) if missing else rows


def tiled(blocks: torch.Tensor, fmt: BlockFormat) -> torch.Tensor:
    """Rows of blocks in GGUF's order [N, K / 32 * bytes] as tiles (the module
    docstring): the same shape and bytes, moved."""
    rows, width = blocks.shape
    *per_block, weights = fmt.parts(blocks)
    tiles, nb = rows // TILE_ROWS, weights.shape[1]
    numbers = [
        n.view(tiles, TILE_ROWS, nb, -1).transpose(1, 2).reshape(tiles, nb, -1)
        for n in per_block[: fmt.plain]
    ] + [planes(bits, tiles) for bits in per_block[fmt.plain :]]
    grouped = weights.reshape(tiles, TILE_ROWS, nb, fmt.packed // 4, 4).permute(0, 2, 3, 1, 4)
    # written into the [N, width] tensor itself: a view of a [tiles, nb, bytes] result
    # would keep that result alive as its base (heap.onto_huge_pages moves no views)
    out = torch.empty(rows, width, dtype=blocks.dtype, device=blocks.device)
    torch.cat((grouped.reshape(tiles, nb, -1), *numbers), dim=2, out=out.view(tiles, nb, -1))
    return out


def planes(high: torch.Tensor, tiles: int) -> torch.Tensor:
    """A high bit of each weight [N, nb, 4] (bit i of a block's 32: weight i's) as each
    tile block's eight 64-bit planes [tiles, nb, 64]: for group k (inputs 4k.. in the
    low nibbles, 16 + 4k.. in the high ones) the low nibbles' plane, then the high
    ones'; bit 4j + i of a plane is row j's byte i of the group (csrc/blocks.cpp)."""
    nb = high.shape[1]
    bits = (high.unsqueeze(-1) >> torch.arange(8, dtype=torch.uint8)) & 1  # [N, nb, 4, 8]
    # weight w = half · 16 + 4k + i of row j -> [tiles, nb, k, half, j, i]
    bits = bits.reshape(tiles, TILE_ROWS, nb, 2, 4, 4).permute(0, 2, 4, 3, 1, 5)
    octets = bits.reshape(tiles, nb, 4, 2, 8, 8) << torch.arange(8, dtype=torch.uint8)
    return octets.sum(-1, dtype=torch.uint8).reshape(tiles, nb, 64)


Q4_1 = BlockFormat(
    "Q4_1", int4.quantize_blocks, int4.dequantized, "int4_linear", ProjectionKind.INT4, (2, 2), 16
)
Q5_1 = BlockFormat(
    "Q5_1",
    q5.quantize_blocks,
    q5.dequantized,
    "q5_linear",
    ProjectionKind.Q5,
    (2, 2, 4),
    16,
    planes=1,
)
Q6_K = BlockFormat(
    "Q6_K",
    q6.quantize_blocks,
    q6.dequantized,
    "q6_linear",
    ProjectionKind.Q6,
    (2, 1, 1, 4, 4),
    16,
    planes=2,
)
Q8_0 = BlockFormat(
    "Q8_0", q8.quantize_blocks, q8.dequantized, "q8_linear", ProjectionKind.Q8, (2,), 32
)


class BlockLinear(nn.Module):
    """`linear` in blocks of `fmt`: quantized from its weights, or `rows` of blocks made
    elsewhere (a GGUF's own, gguf_blocks.py)."""

    def __init__(
        self, linear: nn.Linear, fmt: BlockFormat, kernels: Any, rows: torch.Tensor | None = None
    ) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.format = fmt
        # buffers, so the model's state_dict (and the weight-update shape check) sees them
        self.register_buffer("blocks", fmt.pack(linear.weight, rows))
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


def rows_of_tiles(blocks: torch.Tensor, ids: torch.Tensor, fmt: BlockFormat) -> torch.Tensor:
    """Rows `ids` [n] of tiled blocks (`tiled` undone for them): [n, K / 32 * bytes] in
    the order `fmt.quantize` makes. Only their own bytes are read."""
    nb = blocks.shape[1] // fmt.row_bytes
    lanes = ids % TILE_ROWS
    first = (ids // TILE_ROWS * nb).unsqueeze(-1) + torch.arange(nb, device=ids.device)
    lane_bytes = _lane_bytes(fmt, ids.device)[lanes].unsqueeze(1)
    where = first.unsqueeze(-1) * TILE_ROWS * fmt.row_bytes + lane_bytes
    found = blocks.view(-1)[where]  # [n, nb, bytes]
    sizes = [*fmt.numbers[: fmt.plain], *[8] * fmt.planes]  # a plane: 8 bytes a row
    *numbers, packed = found.split([*sizes, fmt.packed], dim=-1)
    numbers[fmt.plain :] = [_plane_bits(part, lanes) for part in numbers[fmt.plain :]]
    return torch.cat([part.reshape(len(ids), -1) for part in (*numbers, packed)], dim=1)


@functools.cache  # a lookup a step: the table is the format's, made once
def _lane_bytes(fmt: BlockFormat, device: torch.device) -> torch.Tensor:
    """Where each lane's bytes lie in a tile block [16, bytes]: each number's, a plane's
    eight bytes that hold its bits (group k's low and high nibbles' planes, byte j / 2
    of each, in that order), then its packed weights in GGUF's order."""
    j = torch.arange(TILE_ROWS).unsqueeze(-1)
    parts, at = [], TILE_ROWS * fmt.packed
    for index, size in enumerate(fmt.numbers):
        plane = index >= fmt.plain
        inside = 8 * torch.arange(8) + j // 2 if plane else size * j + torch.arange(size)
        parts.append(at + inside)
        at += TILE_ROWS * size
    groups = 64 * torch.arange(fmt.packed // 4).unsqueeze(-1) + torch.arange(4)
    parts.append(groups.reshape(1, -1) + 4 * j)
    return torch.cat(parts, dim=1).to(device)


def _plane_bits(found: torch.Tensor, lanes: torch.Tensor) -> torch.Tensor:
    """A row's eight plane bytes [n, nb, 8] (`_lane_bytes`) as its bits in `planes`'s
    input form [n, nb, 4]: lane j's four bits are the nibble j % 2 of each byte, those
    of inputs 4k.. (low nibbles) and 16 + 4k.. (high ones); byte b of the result holds
    inputs 8b..8b + 7."""
    shift = (4 * (lanes % 2)).to(torch.uint8).view(-1, 1, 1)
    nibbles = ((found >> shift) & 0x0F).view(*found.shape[:2], 2, 2, 2)  # [.., k // 2, k % 2, half]
    nibbles = nibbles.permute(0, 1, 4, 2, 3)  # [.., half, k // 2, k % 2]
    return (nibbles[..., 0] | (nibbles[..., 1] << 4)).reshape(*found.shape[:2], 4)


class BlockEmbedding(nn.Module):
    """Token embeddings read from the tiles of a tied output projection: each row
    dequantized on lookup (as `gguf` dequantizes the format), so no float32 copy of the
    table is kept (a 1B model with SmolLM2's vocabulary: 400 MB against 107 MB of Q8_0
    blocks or 88 MB of Q6_K ones)."""

    blocks: torch.Tensor

    def __init__(self, head: BlockLinear) -> None:
        super().__init__()
        self.format = head.format
        self.num_embeddings, self.embedding_dim = head.out_features, head.in_features
        self.register_buffer("blocks", head.get_buffer("blocks"))  # the very tensor

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = rows_of_tiles(self.blocks, ids.reshape(-1), self.format)
        return self.format.dequantize(rows).view(*ids.shape, self.embedding_dim)


def embedding_from_head(
    embedding: nn.Embedding, head: nn.Module, *, requantized: bool = False
) -> nn.Module:
    """A `BlockEmbedding` over `head`'s tiles when they give back every value of
    `embedding` exactly (a tied Q8_0 table, as the default model's, or a Q6_K one), or,
    `requantized` (the table is a GGUF's quantized tensor tied to its output, e.g. Q3_K,
    so Q8_0 blocks in the head are it re-quantized), each within half a Q8_0 step; else
    `embedding`."""
    if not isinstance(head, BlockLinear):
        return embedding
    if head.out_features != embedding.num_embeddings or not head.whole_tiles:
        return embedding
    lookup = BlockEmbedding(head)
    ids = torch.arange(embedding.num_embeddings, device=embedding.weight.device)
    close = _within_half_a_step if requantized and head.format is Q8_0 else torch.equal
    same = all(close(lookup(chunk), embedding.weight[chunk]) for chunk in ids.split(4096))
    return lookup if same else embedding


def _within_half_a_step(values: torch.Tensor, table: torch.Tensor) -> bool:
    """Whether Q8_0 `values` are each within half a step (1/254 of its block's largest
    magnitude, and float16's rounding of that step) of the `table` they stand for."""
    blocks = table.reshape(*table.shape[:-1], -1, Q8_0.block)
    step = blocks.abs().amax(-1, keepdim=True) / 127
    error = (values.reshape(blocks.shape) - blocks).abs()
    return bool((error <= step * (0.5 + 2**-10)).all())

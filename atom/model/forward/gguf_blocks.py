"""A GGUF file's 4-, 5- and 6-bit tensors as Q4_1, Q5_1 or Q6_K rows, read from its own blocks.

transformers loads a GGUF dequantized to float32 (atom/model/gguf_folder.py), and
Q4_1 and Q8_0 blocks come back exactly from those floats; the other 4-, 5- and 6-bit
types do not (a Q4_0 or Q4_K block whose values miss q = 0 or 15 re-quantizes to
other blocks). So under `--quantization auto` their Q4_1 (4-bit), Q5_1 (5-bit, or
a fused layer mixing 4- and 5-bit parts) or Q6_K (q6.py: Q6_K in blocks of 32) rows
are made from the file's blocks:

- Q4_0 (d, 32 q): d · (q - 8) is Q4_1's d · q + m with m = -8 d, exactly; Q5_0
  likewise, d · (q - 16) with m = -16 d;
- Q4_1, Q5_1: as they are;
- Q4_K and Q5_K (a super-block of 256: d, dmin, eight 6-bit scales sc and minimums m,
  256 q): each sub-block of 32 is d·sc · q - dmin·m, a block with scale d·sc and
  minimum -dmin·m, both rounded to float16 (relative error at most 2^-11 of each,
  against the format's own step of 1/15 or 1/31 of a sub-block's range);
- a 4-bit block in Q5_1 rows: its q (0..15) with the fifth bit clear;
- Q6_K (a super-block of 256: d, sixteen int8 scales s, 256 q): each block of 32 its
  d, the s of its two halves and its q, exactly.

The rows are matched to the Linear's by their values (transformers reorders q/k rows
for its rotary layout, and a fused layer stacks its parts), and used only when they
stand for the loaded weights: `update_weights_from_disk` may have loaded others.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import torch

from atom.model.forward import gguf_index, int4, q5, q6

FOUR_BIT = frozenset({"Q4_0", "Q4_1", "Q4_K"})  # the types that become Q4_1 rows
FIVE_BIT = frozenset({"Q5_0", "Q5_1", "Q5_K"})  # with those: Q5_1 rows
# the types each of ATOM's row formats holds (its name: the kernel's format)
HOLDS = {"Q4_1": FOUR_BIT, "Q5_1": FOUR_BIT | FIVE_BIT, "Q6_K": frozenset({"Q6_K"})}
BLOCK = 32
Parts = tuple[np.ndarray, np.ndarray, np.ndarray]  # scale, minimum [N, nb]; q [N, nb, 32]


def as_rows(raw: np.ndarray, kind: str, rows: str) -> np.ndarray:
    """Rows of `kind` blocks (uint8 [N, bytes a row]) as ATOM's `rows` ("Q4_1":
    int4.py, "Q5_1": q5.py, "Q6_K": q6.py), which must hold `kind` (HOLDS)."""
    if kind not in HOLDS[rows]:
        raise ValueError(f"{kind} blocks cannot be {rows} rows")
    if kind == "Q6_K":
        return _q6_k_rows(raw)
    scale, minimum, q = _k_parts(raw, kind) if kind.endswith("_K") else _parts(raw, kind)
    scale16, minimum16 = (torch.from_numpy(v.astype(np.float16)) for v in (scale, minimum))
    packer = q5.pack if rows == "Q5_1" else int4.pack
    return packer(scale16, minimum16, torch.from_numpy(q)).numpy()


def _q6_k_rows(raw: np.ndarray) -> np.ndarray:
    """Q6_K rows as q6.py's: each block of 32 its super-block's d, its halves' scales
    and its values (GGUF's layout read as `gguf.quants.Q6_K` reads it)."""
    rows = len(raw)
    blocks = raw.reshape(-1, 210)  # 128 low-nibble bytes, 64 high-bit bytes, 16 s, d
    low = blocks[:, :128].reshape(-1, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    high = blocks[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(
        1, 1, 4, 1
    )
    q = (low & 0x0F).reshape(-1, 256) | ((high & 0x03).reshape(-1, 256) << 4)
    scales = blocks[:, 192:208].view(np.int8).reshape(rows, -1, 2)  # 8 blocks a super-block
    d = np.repeat(blocks[:, 208:210].copy().view(np.float16), 8, axis=1).reshape(rows, -1)
    tensors = (torch.from_numpy(v) for v in (d, scales.copy(), q.reshape(rows, -1, BLOCK)))
    return q6.pack(*tensors).numpy()


def _parts(raw: np.ndarray, kind: str) -> Parts:
    """Q4_0, Q4_1, Q5_0, Q5_1 rows taken apart (q: the nibbles, with GGUF's fifth bits
    qh added for the 5-bit types)."""
    size = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24}[kind]
    blocks = raw.reshape(len(raw), -1, size)
    scale = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
    if kind.endswith("_0"):
        minimum = (-16 if kind == "Q5_0" else -8) * scale
    else:
        minimum = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    packed = blocks[..., size - 16 :]
    q = np.concatenate((packed & 0x0F, packed >> 4), axis=-1)  # [N, nb, 32]
    if kind.startswith("Q5"):
        qh = blocks[..., size - 20 : size - 16].copy().view(np.uint32)  # [N, nb, 1]
        q = q | (((qh >> np.arange(BLOCK, dtype=np.uint32)) & 1) << 4).astype(np.uint8)
    return scale, minimum, q


def _k_parts(raw: np.ndarray, kind: str) -> Parts:
    """Each sub-block of 32 of Q4_K or Q5_K rows: (scale d·sc, minimum -dmin·m, q)."""
    from gguf.quants import Q4_K  # type: ignore[import-untyped]

    rows, five = len(raw), kind == "Q5_K"
    blocks = raw.reshape(-1, 176 if five else 144)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16])
    packed = blocks[:, 48 if five else 16 :].reshape(-1, 4, 1, 32)  # 4 groups: 2 sub-blocks
    q = ((packed >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0x0F).reshape(-1, 8, 32)
    if five:  # sub-block s takes bit s of each of the 32 bytes of qh
        qh = blocks[:, 16:48].reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
        q = q | ((qh & 1) << 4)
    return (
        (d * sc.astype(np.float32)).reshape(rows, -1),
        (-dmin * m.astype(np.float32)).reshape(rows, -1),
        q.reshape(rows, -1, BLOCK),
    )


def dequantized(blocks: torch.Tensor, rows: str) -> tuple[torch.Tensor, torch.Tensor]:
    """ATOM's `rows` (as_rows) of blocks as (the weights they stand for [N, K], each
    weight's float16 rounding bound: 2^-10 of its block's (15 or 31) |d| + |m|; Q6_K's
    are exact, 0)."""
    if rows == "Q6_K":
        values = q6.dequantized(blocks)
        return values, torch.zeros_like(values)
    five = rows == "Q5_1"
    scale, minimum, q = (q5 if five else int4).unpack(blocks)
    bound = ((31 if five else 15) * scale.abs() + minimum.abs()) * 2**-10
    values = int4.with_minimums(scale, minimum, q)
    return values, bound.repeat_interleave(BLOCK, dim=1)


class GgufFile:
    """An open GGUF file: its tensors' types, and its 4- to 6-bit tensors as block rows. Close
    it (a `with` block) once the layers are built: the rows read are copies, and the
    mapped file's pages would otherwise stay resident."""

    def __init__(self, path: Path) -> None:
        self._tensors: dict[str, Any] = {t.name: t for t in gguf_index.tensors(path)}
        self.types = {name: t.tensor_type.name for name, t in self._tensors.items()}

    def __enter__(self) -> GgufFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._tensors = {}

    def block_rows(self, names: list[str], weight: torch.Tensor, rows: str) -> torch.Tensor | None:
        """ATOM's `rows` ("Q4_1", "Q5_1" or "Q6_K") of the tensors `names` (stacked, as
        a fused Linear holds them) in the order of `weight`'s rows; None unless every
        one is a tensor of this file of a type they hold (HOLDS) and together they
        stand for `weight`."""
        parts, at = [], 0
        for name in names:
            tensor = self._tensors.get(name)
            if tensor is None or tensor.tensor_type.name not in HOLDS[rows]:
                return None
            raw = np.asarray(tensor.data)
            order = _row_order(raw, tensor.tensor_type, weight[at : at + raw.shape[0]])
            if order is None:
                return None
            parts.append(as_rows(raw[order], tensor.tensor_type.name, rows))
            at += raw.shape[0]
        if at != weight.shape[0]:
            return None
        blocks = torch.from_numpy(np.concatenate(parts))
        values, bound = dequantized(blocks, rows)
        return blocks if bool(((values - weight.float()).abs() <= bound).all()) else None


def _row_order(raw: np.ndarray, kind: Any, weight: torch.Tensor) -> np.ndarray | None:
    """For each row of `weight`, the row of `raw` (blocks of type `kind`) holding the same
    values, matched by their first block as gguf dequantizes it (transformers' own
    reading, bit for bit); None where a row has no match."""
    import gguf  # type: ignore[import-untyped]

    if raw.shape[0] != weight.shape[0]:
        return None
    width, size = gguf.GGML_QUANT_SIZES[kind]
    heads = gguf.dequantize(raw[:, :size], kind).astype(np.float32)
    where: dict[bytes, list[int]] = {}
    for index in range(raw.shape[0] - 1, -1, -1):  # popped from the end: first rows first
        where.setdefault(heads[index].tobytes(), []).append(index)
    wanted = weight[:, :width].detach().float().numpy()
    order = []
    for row in wanted:
        found = where.get(row.tobytes())
        if not found:
            return None
        order.append(found.pop())
    return np.array(order)

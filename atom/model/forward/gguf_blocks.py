"""A GGUF file's 4-bit tensors as Q4_1 rows, read from the file's own blocks.

transformers loads a GGUF dequantized to float32 (atom/model/gguf_folder.py), and
Q4_1 and Q8_0 blocks come back exactly from those floats; the other 4-bit types do
not (a Q4_0 or Q4_K block whose values miss q = 0 or 15 re-quantizes to other
blocks). So under `--quantization auto` their Q4_1 rows are made from the file's
blocks:

- Q4_0 (d, 32 q): d · (q - 8) is Q4_1's d · q + m with m = -8 d, exactly;
- Q4_1: as it is;
- Q4_K (a super-block of 256: d, dmin, eight 6-bit scales sc and minimums m, 256 q):
  each sub-block of 32 is d·sc · q - dmin·m, a Q4_1 block with scale d·sc and minimum
  -dmin·m, both rounded to float16 (relative error at most 2^-11 of each, against the
  format's own step of 1/15 of a sub-block's range).

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

FOUR_BIT = frozenset({"Q4_0", "Q4_1", "Q4_K"})  # the types that become Q4_1 rows
BLOCK = 32


def as_q4_1(raw: np.ndarray, kind: str) -> np.ndarray:
    """Rows of `kind` blocks (uint8 [N, bytes a row]) as ATOM's Q4_1 rows (int4.py: a
    row's float16 scales, then its minimums, then its nibbles)."""
    rows = raw.shape[0]
    if kind == "Q4_K":
        scale, minimum, q = _q4_k(raw)
    else:
        size = 18 if kind == "Q4_0" else 20
        blocks = raw.reshape(rows, -1, size)
        scale = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
        if kind == "Q4_0":
            minimum = -8 * scale
        else:
            minimum = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        packed = blocks[..., size - 16 :]
        q = np.concatenate((packed & 0x0F, packed >> 4), axis=-1)  # [N, nb, 32]
    nibbles = q[..., : BLOCK // 2] | (q[..., BLOCK // 2 :] << 4)
    return np.concatenate(
        (
            scale.astype(np.float16).view(np.uint8).reshape(rows, -1),
            minimum.astype(np.float16).view(np.uint8).reshape(rows, -1),
            nibbles.astype(np.uint8).reshape(rows, -1),
        ),
        axis=1,
    )


def _q4_k(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each sub-block of 32 of Q4_K rows: (scale d·sc, minimum -dmin·m, q [.., 32])."""
    from gguf.quants import Q4_K  # type: ignore[import-untyped]

    rows = raw.shape[0]
    blocks = raw.reshape(-1, 144)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16])
    packed = blocks[:, 16:].reshape(-1, 4, 1, 32)  # four groups of 32 bytes: two sub-blocks
    q = (packed >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0x0F
    return (
        (d * sc.astype(np.float32)).reshape(rows, -1),
        (-dmin * m.astype(np.float32)).reshape(rows, -1),
        q.reshape(rows, -1, BLOCK),
    )


def dequantized(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ATOM's Q4_1 rows [N, nb * 20] as (the weights they stand for [N, K], each
    weight's float16 rounding bound: 2^-10 of its block's 15 |d| + |m|)."""
    n, width = rows.shape
    nb = width // 20
    scale = rows[:, : 2 * nb].contiguous().view(torch.float16).float().unsqueeze(-1)
    minimum = rows[:, 2 * nb : 4 * nb].contiguous().view(torch.float16).float().unsqueeze(-1)
    packed = rows[:, 4 * nb :].reshape(n, nb, BLOCK // 2)
    q = torch.cat((packed & 0x0F, packed >> 4), dim=-1).float()
    bound = (15 * scale.abs() + minimum.abs()) * 2**-10
    return (q * scale + minimum).reshape(n, -1), bound.expand(n, nb, BLOCK).reshape(n, -1)


class GgufFile:
    """An open GGUF file: its tensors' types, and its 4-bit tensors as Q4_1 rows. Close
    it (a `with` block) once the layers are built: the rows read are copies, and the
    mapped file's pages would otherwise stay resident."""

    def __init__(self, path: Path) -> None:
        import gguf  # type: ignore[import-untyped]

        self._tensors: dict[str, Any] = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
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

    def q4_1_rows(self, names: list[str], weight: torch.Tensor) -> torch.Tensor | None:
        """The Q4_1 rows of the 4-bit tensors `names` (stacked, as a fused Linear
        holds them) in the order of `weight`'s rows; None unless every one is a 4-bit
        tensor of this file and together they stand for `weight`."""
        parts, at = [], 0
        for name in names:
            tensor = self._tensors.get(name)
            if tensor is None or tensor.tensor_type.name not in FOUR_BIT:
                return None
            raw = np.asarray(tensor.data)
            order = _row_order(raw, tensor.tensor_type, weight[at : at + raw.shape[0]])
            if order is None:
                return None
            parts.append(as_q4_1(raw[order], tensor.tensor_type.name))
            at += raw.shape[0]
        if at != weight.shape[0]:
            return None
        rows = torch.from_numpy(np.concatenate(parts))
        values, bound = dequantized(rows)
        return rows if bool(((values - weight.float()).abs() <= bound).all()) else None


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

"""The runner's paged KV tensors: `[layers, 2, slots, kv_heads, head_dim]` of the cache's
dtype and, for an int8 cache, `[layers, 2, slots, kv_heads, head_dim / 16]` float16
scales (a group of 16 values is int8 * scale: atom/model/forward/attention.py,
`Int8Rows`). Slot `b * block_size + i`
is position i of block b in every layer. Also what a step's block moves do to them: a
block's bytes for the disk tier, a block filled from them, blocks copied."""

from __future__ import annotations

import math
from typing import Any

import torch

from atom.model.forward.attention import INT8_GROUP, Int8Rows, Rows

SCALE_BYTES = 2  # an int8 cache's float16 scale, one a group of INT8_GROUP values


def kv_layout(config: Any) -> tuple[int, int, int]:
    """(layers, kv heads, head dim) of a model's KV cache."""
    text = config.get_text_config()
    kv_heads = int(getattr(text, "num_key_value_heads", text.num_attention_heads))
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    return int(text.num_hidden_layers), kv_heads, head_dim


def kv_bytes_per_block(config: Any, block_size: int, dtype: torch.dtype) -> int:
    """A block's bytes in every layer, an int8 cache's scales included."""
    layers, kv_heads, head_dim = kv_layout(config)
    itemsize = torch.empty((), dtype=dtype).element_size()
    row = head_dim * itemsize + (head_dim // INT8_GROUP * SCALE_BYTES if dtype == torch.int8 else 0)
    return layers * 2 * block_size * kv_heads * row


class PagedCache:
    """The tensors (`tensors`), each layer's (K, V) views (`layers`), and block moves."""

    def __init__(
        self, config: Any, num_blocks: int, block_size: int, dtype: torch.dtype, device: Any
    ) -> None:
        layers, kv_heads, head_dim = kv_layout(config)
        slots = num_blocks * block_size
        self.block_size, self._device = block_size, device
        values = torch.zeros((layers, 2, slots, kv_heads, head_dim), dtype=dtype, device=device)
        self.tensors: tuple[torch.Tensor, ...] = (values,)
        if dtype == torch.int8:
            if head_dim % INT8_GROUP:
                raise ValueError(
                    f"--kv-cache-dtype int8 needs a head size of groups of {INT8_GROUP}"
                )
            groups = head_dim // INT8_GROUP
            shape = (layers, 2, slots, kv_heads, groups)
            scales = torch.zeros(shape, dtype=torch.float16, device=device)
            self.tensors = (values, scales)
            self.layers: tuple[tuple[Rows, Rows], ...] = tuple(
                (Int8Rows(v[0], s[0]), Int8Rows(v[1], s[1]))
                for v, s in zip(values, scales, strict=True)
            )
        else:  # views made once, not by indexing the cache per layer at every step
            self.layers = tuple((layer[0], layer[1]) for layer in values)

    def _slots(self, block_id: int) -> torch.Tensor:
        start = block_id * self.block_size
        return torch.arange(start, start + self.block_size, device=self._device)

    def block_bytes(self, block_id: int) -> bytes:
        """Block `block_id` in every layer, each tensor's part after the one before."""
        slots = self._slots(block_id)
        parts = [t[:, :, slots].contiguous().cpu().view(torch.uint8) for t in self.tensors]
        return b"".join(part.numpy().tobytes() for part in parts)

    def fill(self, block_id: int, payload: bytes) -> None:
        """Block `block_id` from what `block_bytes` gave (the same shapes: the disk tier's
        fingerprint holds the cache's layout)."""
        slots, start = self._slots(block_id), 0
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        for tensor in self.tensors:
            shape = (*tensor.shape[:2], self.block_size, *tensor.shape[3:])
            size = math.prod(shape) * tensor.element_size()
            part = data[start : start + size].view(tensor.dtype).view(shape)
            tensor[:, :, slots] = part.to(self._device)
            start += size
        assert start == len(payload), "a block of another layout"

    def copy(self, pairs: tuple[tuple[int, int], ...]) -> None:
        """Each (source, destination) block's rows, in every layer."""
        sources = torch.cat([self._slots(source) for source, _ in pairs])
        targets = torch.cat([self._slots(target) for _, target in pairs])
        for tensor in self.tensors:
            tensor[:, :, targets] = tensor[:, :, sources]

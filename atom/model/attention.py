"""The ragged attention function registered with transformers, and per-sequence KV storage.

One forward runs every scheduled token of every sequence flattened into a batch
of one: query is (1, heads, num_tokens, dim). `StepMeta` (passed as a forward
keyword, which transformers hands to every attention call) says which slice of
tokens belongs to which sequence; the function writes that slice's K/V into
the sequence's cache and attends over everything the sequence has cached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

ATTN_IMPLEMENTATION = "atom_ragged"


class SeqKVCache:
    """Contiguous K/V of one sequence for all layers; grows by doubling. Owned by the runner."""

    def __init__(self, *, num_layers: int, num_kv_heads: int, head_dim: int, like: torch.Tensor):
        self._shape = (num_layers, num_kv_heads, 0, head_dim)
        self.keys = like.new_empty(self._shape)
        self.values = like.new_empty(self._shape)

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def reserve(self, num_tokens: int) -> None:
        if num_tokens <= self.capacity:
            return
        size = max(num_tokens, 2 * self.capacity, 64)
        grown_k = self.keys.new_empty((*self._shape[:2], size, self._shape[3]))
        grown_v = torch.empty_like(grown_k)
        grown_k[:, :, : self.capacity] = self.keys
        grown_v[:, :, : self.capacity] = self.values
        self.keys, self.values = grown_k, grown_v


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqSlice:
    """Tokens [q_start, q_start+q_len) of the flat batch are positions start_pos.. of `cache`."""

    q_start: int
    q_len: int
    start_pos: int
    cache: SeqKVCache


@dataclass(frozen=True, slots=True, kw_only=True)
class StepMeta:
    slices: tuple[SeqSlice, ...]


def ragged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    scaling: float | None = None,
    step_meta: StepMeta,
    **_: object,
) -> tuple[torch.Tensor, None]:
    """Write each sequence's new K/V, attend over its cache; returns (1, tokens, heads, dim)."""
    layer = int(module.layer_idx)  # type: ignore[arg-type]
    outputs = [_attend_one(layer, query, key, value, s, scaling) for s in step_meta.slices]
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def _attend_one(
    layer: int,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    s: SeqSlice,
    scaling: float | None,
) -> torch.Tensor:
    end = s.start_pos + s.q_len
    q_slice = slice(s.q_start, s.q_start + s.q_len)
    s.cache.keys[layer, :, s.start_pos : end] = key[0, :, q_slice]
    s.cache.values[layer, :, s.start_pos : end] = value[0, :, q_slice]
    k = s.cache.keys[layer : layer + 1, :, :end]
    v = s.cache.values[layer : layer + 1, :, :end]
    q = query[:, :, q_slice]
    mask = None
    if s.q_len > 1 and s.start_pos > 0:
        q_pos = torch.arange(s.start_pos, end, device=q.device)
        mask = q_pos[:, None] >= torch.arange(end, device=q.device)[None, :]
    is_causal = s.q_len > 1 and s.start_pos == 0
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, scale=scaling, enable_gqa=True
    )


AttentionInterface.register(ATTN_IMPLEMENTATION, ragged_attention)

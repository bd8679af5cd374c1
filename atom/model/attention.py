"""The ragged paged-attention function registered with transformers.

One forward runs every scheduled token of every sequence flattened into a batch
of one: query is (1, heads, num_tokens, dim). `StepMeta` (a forward keyword that
transformers passes to every attention call) carries, once per step, the flat
KV slot of every new token and how to read each sequence back:

- prefill slices (several new tokens): gather the sequence's slots, causal SDPA;
- the decode group (one new token each): one padded gather and one batched SDPA
  with a length mask, so decode costs one kernel per layer whatever the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

ATTN_IMPLEMENTATION = "atom_paged"


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillSlice:
    """Query tokens [q_start, q_start+q_len) are positions start_pos.. of one sequence,
    whose KV lives at `read_slots` (every position up to start_pos+q_len)."""

    q_start: int
    q_len: int
    start_pos: int
    read_slots: torch.Tensor


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeGroup:
    """Query rows `q_idx` (one token per sequence) read `read_slots` [batch, max_len],
    padded; `mask` [batch, 1, 1, max_len] is True where a slot is real."""

    q_idx: torch.Tensor
    read_slots: torch.Tensor
    mask: torch.Tensor


@dataclass(frozen=True, slots=True, kw_only=True)
class StepMeta:
    kv_cache: torch.Tensor  # [layers, 2, num_slots, kv_heads, head_dim], owned by the runner
    write_slots: torch.Tensor  # [num_tokens]
    prefills: tuple[PrefillSlice, ...]
    decode: DecodeGroup | None


def paged_attention(
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
    """Write the step's K/V into the paged cache, attend; returns (1, tokens, heads, dim)."""
    layer = int(module.layer_idx)  # type: ignore[arg-type]
    k_cache, v_cache = step_meta.kv_cache[layer, 0], step_meta.kv_cache[layer, 1]
    k_cache.index_copy_(0, step_meta.write_slots, key[0].transpose(0, 1))
    v_cache.index_copy_(0, step_meta.write_slots, value[0].transpose(0, 1))
    out = torch.empty_like(query)
    for s in step_meta.prefills:
        q_slice = slice(s.q_start, s.q_start + s.q_len)
        out[:, :, q_slice] = _prefill(query[:, :, q_slice], k_cache, v_cache, s, scaling)
    if step_meta.decode is not None:
        d = step_meta.decode
        out[0, :, d.q_idx] = _decode(query, k_cache, v_cache, d, scaling)
    return out.transpose(1, 2), None


def _prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    s: PrefillSlice,
    scaling: float | None,
) -> torch.Tensor:
    k = k_cache.index_select(0, s.read_slots).transpose(0, 1).unsqueeze(0)
    v = v_cache.index_select(0, s.read_slots).transpose(0, 1).unsqueeze(0)
    if s.start_pos == 0:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scaling, enable_gqa=True
        )
    end = s.start_pos + s.q_len
    q_pos = torch.arange(s.start_pos, end, device=q.device)
    mask = q_pos[:, None] >= torch.arange(end, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling, enable_gqa=True)


def _decode(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    d: DecodeGroup,
    scaling: float | None,
) -> torch.Tensor:
    q = query[0, :, d.q_idx].transpose(0, 1).unsqueeze(2)  # [batch, heads, 1, dim]
    shape = (*d.read_slots.shape, *k_cache.shape[1:])  # [batch, max_len, kv_heads, dim]
    flat = d.read_slots.flatten()
    k = k_cache.index_select(0, flat).view(shape).permute(0, 2, 1, 3)  # [b, kv_heads, len, dim]
    v = v_cache.index_select(0, flat).view(shape).permute(0, 2, 1, 3)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=d.mask, scale=scaling, enable_gqa=True)
    return o[:, :, 0].transpose(0, 1)  # [heads, batch, dim]


AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention)

"""Paged decode attention on a GPU, in Triton: `paged_decode` with the CPU kernel's
arguments (atom/model/forward/kernels.py, csrc/attention.cpp), so `KernelDecode` runs
either.

One query token per sequence, read in place from the paged KV cache through the block
tables: no gather copy of K/V. A program takes one sequence and one KV head, and all
the query heads that share it (GQA) as the rows of one tile: it walks the sequence's
positions a tile of keys at a time (each key's slot from its block's id), scores them
against the group's queries, and keeps a running softmax (its maximum, its sum and the
weighted V rows) so every K and V row is read once. Sliding windows and soft-capped
scores are taken as the CPU kernel takes them (0: off). A float32, float16 or bfloat16
cache; the arithmetic is float32, the products too ("ieee": not the tensor cores'
TF32, whose 10-bit mantissa would part from the gathering path's float32); the output
has the queries' dtype. An int8 cache is
not taken here (the gathering path serves it).

Imported only where it runs: on a CUDA device with `triton` installed, or under
`TRITON_INTERPRET=1` on a CPU, where the tests run it (float32 and float16: the
interpreter has no bfloat16 arithmetic)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

KERNEL_OFF = 0  # a window or soft-cap of 0: none (as the CPU kernel's arguments)
MIN_TILE = 16  # tl.dot's smallest side


@triton.jit
def _decode(
    q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, out_ptr,
    q_stride_b, q_stride_h, cache_stride_slot, cache_stride_head, table_stride,
    out_stride_b, out_stride_h,
    scale, window, softcap,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    TILE_G: tl.constexpr, TILE_N: tl.constexpr, TILE_D: tl.constexpr,
):  # fmt: skip
    seq, kv_head = tl.program_id(0), tl.program_id(1)
    rows, dims = tl.arange(0, TILE_G), tl.arange(0, TILE_D)  # the group's query heads
    heads = kv_head * GROUP + rows
    tile_ok = (rows < GROUP)[:, None] & (dims < HEAD_DIM)[None, :]
    q_at = q_ptr + seq * q_stride_b + heads[:, None] * q_stride_h + dims[None, :]
    q = tl.load(q_at, mask=tile_ok, other=0.0).to(tl.float32)
    length = tl.load(lens_ptr + seq)
    first = length * 0  # (the first position attended, of the lengths' type)
    if window > 0:
        first = tl.maximum(length - window, 0)
    best = tl.full([TILE_G], float("-inf"), tl.float32)
    total = tl.zeros([TILE_G], tl.float32)
    acc = tl.zeros([TILE_G, TILE_D], tl.float32)
    for start in range((first // TILE_N) * TILE_N, length, TILE_N):
        pos = start + tl.arange(0, TILE_N)
        pos_ok = (pos < length) & (pos >= first)
        block = tl.load(tables_ptr + seq * table_stride + pos // BLOCK_SIZE, mask=pos_ok, other=0)
        slots = block * BLOCK_SIZE + pos % BLOCK_SIZE
        at = slots[:, None] * cache_stride_slot + kv_head * cache_stride_head + dims[None, :]
        kv_ok = pos_ok[:, None] & (dims < HEAD_DIM)[None, :]
        k = tl.load(k_ptr + at, mask=kv_ok, other=0.0).to(tl.float32)
        scores = _scored(q, k, pos_ok, scale, softcap)  # [TILE_G, TILE_N]
        new_best = tl.maximum(best, tl.max(scores, axis=1))
        shrink, weights = tl.exp(best - new_best), tl.exp(scores - new_best[:, None])
        v = tl.load(v_ptr + at, mask=kv_ok, other=0.0).to(tl.float32)
        acc = acc * shrink[:, None] + tl.dot(weights, v, input_precision="ieee")
        total, best = total * shrink + tl.sum(weights, axis=1), new_best
    out_at = out_ptr + seq * out_stride_b + heads[:, None] * out_stride_h + dims[None, :]
    tl.store(out_at, (acc / total[:, None]).to(out_ptr.dtype.element_ty), mask=tile_ok)


@triton.jit
def _scored(q, k, pos_ok, scale, softcap):
    """The queries' scaled scores against a tile of keys, soft-capped (tanh(s / c) * c,
    tanh from the sigmoid) when asked; -inf past the positions attended."""
    scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
    if softcap > 0:
        scores = (2.0 / (1.0 + tl.exp(-2.0 * scores / softcap)) - 1.0) * softcap
    return tl.where(pos_ok[None, :], scores, float("-inf"))


def paged_decode(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    scale: float,
    window: int = KERNEL_OFF,
    softcap: float = KERNEL_OFF,
    **scales: torch.Tensor,
) -> torch.Tensor:
    """query [batch, heads, dim] (rows may be strided; a head's values packed), caches
    [slots, kv_heads, dim], block_tables [batch, max_blocks] and seq_lens [batch] (each
    sequence's length, its new token included) → [batch, heads, dim]."""
    if scales:
        raise ValueError("paged_decode (Triton): an int8 cache is served by the gather path")
    batch, num_heads, head_dim = query.shape
    num_kv = k_cache.shape[1]
    if num_heads % num_kv or k_cache.shape[2] != head_dim or query.stride(2) != 1:
        raise ValueError("paged_decode (Triton): head shapes")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("paged_decode (Triton): the cache's layout")
    group = num_heads // num_kv
    out = torch.empty((batch, num_heads, head_dim), dtype=query.dtype, device=query.device)
    tables = block_tables.contiguous()
    _decode[(batch, num_kv)](
        query, k_cache, v_cache, tables, seq_lens.contiguous(), out,
        query.stride(0), query.stride(1), k_cache.stride(0), k_cache.stride(1), tables.stride(0),
        out.stride(0), out.stride(1),
        float(scale), int(window), float(softcap),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
        TILE_G=max(MIN_TILE, triton.next_power_of_2(group)),
        TILE_N=max(MIN_TILE, min(64, triton.next_power_of_2(block_size))),
        TILE_D=max(MIN_TILE, triton.next_power_of_2(head_dim)),
    )  # fmt: skip
    return out

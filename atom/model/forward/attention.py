"""The ragged paged-attention function registered with transformers.

One forward runs every scheduled token of every sequence flattened into a batch
of one: query is (1, heads, num_tokens, dim). `StepMeta` (a forward keyword that
transformers passes to every attention call) carries, once per step, the flat
KV slot of every new token and how to read each sequence back:

- prefill slices (several new tokens): gather the sequence's slots, causal SDPA;
- the decode group (one new token each), one call per layer whatever the batch:
  `KernelDecode` reads the cache in place through the block tables (the CPU
  kernel in `atom.model.forward.kernels`); `GatherDecode` does one padded gather and one
  batched SDPA with a length mask (any device).

An int8 cache (`--kv-cache-dtype int8`) holds each layer's K and V as `Int8Rows`: int8
values and a float16 scale for each group of INT8_GROUP values of a token's head (max
|x| / 127, as llama.cpp's q8_0 blocks but of 16); `write_rows` and `read_rows` quantize
and widen them, the kernels take the scales beside the values.

Layers may ask for a sliding window (only the last `sliding_window` positions
are attended: Mistral, Gemma 2/3, Cohere 2) and a score soft-cap (Gemma 2);
transformers passes both as keywords, and every path honours them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

if TYPE_CHECKING:
    from atom.model.lora.mixing import LoraStep

ATTN_IMPLEMENTATION = "atom_paged"
DecodeKernel = Callable[
    ..., torch.Tensor
]  # the paged_decode CPU kernel (atom.model.forward.kernels)


KERNEL_OFF = 0  # paged_decode's window and softcap arguments: 0 means none (csrc/ops.h)


INT8_GROUP = 16  # values one scale covers in an int8 cache (csrc/attention.cpp: kInt8Group)


@dataclass(frozen=True, slots=True)
class Int8Rows:
    """One layer's K or V in an int8 cache: `values` [slots, kv_heads, dim] int8 and
    `scales` [slots, kv_heads, dim / INT8_GROUP] float16; a group is values * scale."""

    values: torch.Tensor
    scales: torch.Tensor


Rows = torch.Tensor | Int8Rows  # one layer's K or V cache


def write_rows(cache: Rows, slots: torch.Tensor, x: torch.Tensor) -> None:
    """Rows x [tokens, kv_heads, dim] into `slots`: rounded to the cache's dtype, or for
    int8 each group's values times the inverse of its scale (max |x| * (1 / 127), rounded
    to float16), rounded to nearest even and clamped to ±127: the same arithmetic as the
    CPU kernel's rope_write (csrc/layer.cpp)."""
    if isinstance(cache, torch.Tensor):
        cache.index_copy_(0, slots, x.to(cache.dtype))
        return
    groups = x.float().unflatten(-1, (-1, INT8_GROUP))
    scale = (groups.abs().amax(dim=-1) * (1.0 / 127.0)).to(torch.float16)
    wide = scale.float()
    inverse = torch.where(wide > 0, 1.0 / wide, torch.zeros_like(wide))
    values = torch.round(groups * inverse[..., None]).clamp(-127, 127).flatten(-2)
    cache.values.index_copy_(0, slots, values.to(torch.int8))
    cache.scales.index_copy_(0, slots, scale)


def read_rows(cache: Rows, slots: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The rows at `slots` [n] (any shape of slots: the rows take its shape), widened."""
    if isinstance(cache, torch.Tensor):
        return cache.index_select(0, slots.flatten()).to(dtype)
    values = cache.values.index_select(0, slots.flatten()).to(dtype).unflatten(-1, (-1, INT8_GROUP))
    scales = cache.scales.index_select(0, slots.flatten()).to(dtype)
    return (values * scales[..., None]).flatten(-2)


def kernel_caches(k: Rows, v: Rows) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The CPU kernels' cache arguments: the K and V tensors, and an int8 cache's scales."""
    if isinstance(k, torch.Tensor):
        assert isinstance(v, torch.Tensor)
        return k, v, {}
    assert isinstance(v, Int8Rows)
    return k.values, v.values, {"k_scales": k.scales, "v_scales": v.scales}


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillSlice:
    """Query tokens [q_start, q_start+q_len) are positions start_pos.. of one sequence,
    whose KV lives at `read_slots` (every position up to start_pos+q_len)."""

    q_start: int
    q_len: int
    start_pos: int
    read_slots: torch.Tensor


@dataclass(frozen=True, slots=True)
class Scoring:
    """How one layer scores: the scale, its sliding window and soft-cap (None: off)."""

    scale: float
    window: int | None = None
    softcap: float | None = None


class DecodeGroup(Protocol):
    """Query rows `q_idx` of the flat batch, one token per sequence."""

    @property
    def q_idx(self) -> torch.Tensor: ...

    def attend(
        self, q: torch.Tensor, k_cache: Rows, v_cache: Rows, scoring: Scoring
    ) -> torch.Tensor:
        """q [batch, heads, dim] → [batch, heads, dim]."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class GatherDecode:
    """`read_slots` [batch, max_len], padded; `seq_lens` [batch]; `mask`
    [batch, 1, 1, max_len] is True where a slot is real."""

    q_idx: torch.Tensor
    read_slots: torch.Tensor
    seq_lens: torch.Tensor
    mask: torch.Tensor

    def attend(
        self, q: torch.Tensor, k_cache: Rows, v_cache: Rows, scoring: Scoring
    ) -> torch.Tensor:
        batch, max_len = self.read_slots.shape
        k = read_rows(k_cache, self.read_slots, q.dtype)
        v = read_rows(v_cache, self.read_slots, q.dtype)
        k = k.view(batch, max_len, *k.shape[1:]).permute(0, 2, 1, 3)  # [batch, kv_heads, len, dim]
        v = v.view(batch, max_len, *v.shape[1:]).permute(0, 2, 1, 3)
        mask = self.mask
        if scoring.window is not None:
            positions = torch.arange(max_len, device=mask.device)
            recent = positions[None, :] >= (self.seq_lens - scoring.window)[:, None]
            mask = mask & recent[:, None, None, :]
        return attend(q.unsqueeze(2), k, v, mask, scoring)[:, :, 0]


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelDecode:
    """`block_tables` [batch, max_blocks] (padded) and `seq_lens` [batch], int64."""

    q_idx: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    block_size: int
    kernel: DecodeKernel

    def attend(
        self, q: torch.Tensor, k_cache: Rows, v_cache: Rows, scoring: Scoring
    ) -> torch.Tensor:
        k, v, scales = kernel_caches(k_cache, v_cache)
        return self.kernel(
            q,
            k,
            v,
            self.block_tables,
            self.seq_lens,
            self.block_size,
            scoring.scale,
            KERNEL_OFF if scoring.window is None else scoring.window,
            KERNEL_OFF if scoring.softcap is None else scoring.softcap,
            **scales,
        )


def runs_triton(device: str) -> bool:
    """Whether ATOM's Triton kernels run on `device`: a CUDA one, with triton installed."""
    return device.startswith("cuda") and find_spec("triton") is not None


def decode_kernel(ops: Any, device: str, kv_dtype: str) -> Callable[..., Any] | None:
    """What reads a decode step's K/V in place from the paged cache: the CPU kernel, or
    on CUDA the Triton one (atom/model/forward/triton_decode.py) where triton is
    installed and the cache is not int8; None: the gathering path (any device)."""
    if ops is not None:
        return ops.paged_decode  # type: ignore[no-any-return]
    if kv_dtype == "int8" or not runs_triton(device):
        return None
    from atom.model.forward.triton_decode import paged_decode

    return paged_decode


def decode_name(ops: Any, device: str, kv_dtype: str) -> str:
    """The start-up log's name for `decode_kernel`'s choice."""
    if ops is not None:
        return "cpu_kernel"
    return "gather" if decode_kernel(ops, device, kv_dtype) is None else "triton"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepMeta:
    layer_caches: tuple[tuple[Rows, Rows], ...]  # per layer (k, v), the runner's
    write_slots: torch.Tensor  # [num_tokens]
    prefills: tuple[PrefillSlice, ...]
    decode: DecodeGroup | None
    lora: LoraStep | None = None  # the step's adapters and their rows (docs/lora.md)

    def layer_cache(self, layer: int) -> tuple[Rows, Rows]:
        """(k_cache, v_cache) of one layer, each [num_slots, kv_heads, head_dim], in the
        cache's own dtype (`--kv-cache-dtype`): written rounded to it (int8: quantized,
        `Int8Rows`), read back widened."""
        return self.layer_caches[layer]


def paged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    step_meta: StepMeta,
    **_: object,
) -> tuple[torch.Tensor, None]:
    """Write the step's K/V into the paged cache, attend; returns (1, tokens, heads, dim)."""
    scoring = Scoring(
        scale=query.shape[-1] ** -0.5 if scaling is None else scaling,
        window=sliding_window,
        softcap=softcap,
    )
    k_cache, v_cache = step_meta.layer_cache(int(module.layer_idx))  # type: ignore[arg-type]
    write_rows(k_cache, step_meta.write_slots, key[0].transpose(0, 1))
    write_rows(v_cache, step_meta.write_slots, value[0].transpose(0, 1))
    out = attend_written(query[0].transpose(0, 1), k_cache, v_cache, step_meta, scoring)
    return out.unsqueeze(0), None


def attend_written(
    q: torch.Tensor, k_cache: Rows, v_cache: Rows, meta: StepMeta, scoring: Scoring
) -> torch.Tensor:
    """Attention of the step's queries q [tokens, heads, dim] (rows may be strided) over
    one layer's cache, which already holds this step's K/V; returns [tokens, heads, dim]."""
    d = meta.decode
    if d is not None and not meta.prefills:  # all rows decode, in order: no scatter
        return d.attend(q, k_cache, v_cache, scoring)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    for s in meta.prefills:
        rows = slice(s.q_start, s.q_start + s.q_len)
        q_slice = q[rows].transpose(0, 1).unsqueeze(0)
        out[rows] = _prefill(q_slice, k_cache, v_cache, s, scoring)[0].transpose(0, 1)
    if d is not None:
        out[d.q_idx] = d.attend(q[d.q_idx], k_cache, v_cache, scoring)
    return out


def _prefill(
    q: torch.Tensor, k_cache: Rows, v_cache: Rows, s: PrefillSlice, scoring: Scoring
) -> torch.Tensor:
    k = read_rows(k_cache, s.read_slots, q.dtype).transpose(0, 1).unsqueeze(0)
    v = read_rows(v_cache, s.read_slots, q.dtype).transpose(0, 1).unsqueeze(0)
    if s.start_pos == 0 and scoring.window is None and scoring.softcap is None:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scoring.scale, enable_gqa=True
        )
    end = s.start_pos + s.q_len
    q_pos = torch.arange(s.start_pos, end, device=q.device)[:, None]
    k_pos = torch.arange(end, device=q.device)[None, :]
    mask = q_pos >= k_pos
    if scoring.window is not None:
        mask &= k_pos > q_pos - scoring.window
    return attend(q, k, v, mask, scoring)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scoring: Scoring
) -> torch.Tensor:
    """Masked attention [b, heads, q, dim] over [b, kv_heads, k, dim]; SDPA unless the
    scores are soft-capped, which SDPA cannot do."""
    if scoring.softcap is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scoring.scale, enable_gqa=True
        )
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scoring.scale
    scores = torch.tanh(scores / scoring.softcap) * scoring.softcap
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention)

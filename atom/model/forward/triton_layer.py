"""The small operators of ATOM's own forward as Triton kernels, one launch each: `TritonOps`
has `TorchOps`' three functions (atom/model/forward/operators.py), for a CUDA device.

- `add_rms_norm`: the residual add and the RMSNorm of the sum, a program a row (torch
  runs about six kernels for it);
- `rope_write`: the rotary embedding of the q and k heads, in place, and the k and v
  heads written to their cache rows, a program a token and head (about eight);
- `silu_mul`: SiLU of the gate half times the up half (three).

The arithmetic is float32 and each result is rounded once to the tensors' dtype, where
torch rounds after each operation: the results match TorchOps' to a unit in the last
place, not bit for bit. An int8 cache's `rope_write` (its scales) is TorchOps'.

Imported only where it runs: on a CUDA device with `triton` installed, or under
`TRITON_INTERPRET=1` on a CPU, where the tests run it (float32 and float16)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from atom.model.forward.operators import TorchOps


@triton.jit
def _add_rms_norm(
    x_ptr, delta_ptr, weight_ptr, out_ptr, row_stride, delta_stride, out_stride, width, eps,
    HAS_DELTA: tl.constexpr, TILE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, TILE)
    ok = cols < width
    x = tl.load(x_ptr + row * row_stride + cols, mask=ok, other=0.0)
    if HAS_DELTA:
        x = x + tl.load(delta_ptr + row * delta_stride + cols, mask=ok, other=0.0)
        tl.store(x_ptr + row * row_stride + cols, x, mask=ok)  # the residual, in place
    h = x.to(tl.float32)
    normed = h * tl.rsqrt(tl.sum(h * h, axis=0) / width + eps)
    weight = tl.load(weight_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    out = normed.to(x.dtype).to(tl.float32) * weight  # transformers': weight * h.to(dtype)
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _silu_mul(gate_up_ptr, out_ptr, in_stride, out_stride, width, TILE: tl.constexpr):
    row, part = tl.program_id(0), tl.program_id(1)
    cols = part * TILE + tl.arange(0, TILE)
    ok = cols < width
    gate = tl.load(gate_up_ptr + row * in_stride + cols, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * in_stride + width + cols, mask=ok, other=0.0)
    out = gate / (1.0 + tl.exp(-gate)) * up.to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rope_write(
    qkv_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr, slots_ptr,
    qkv_stride, trig_stride, cache_stride_slot, cache_stride_head,
    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HALF: tl.constexpr, TILE: tl.constexpr,
):  # fmt: skip
    token, head = tl.program_id(0), tl.program_id(1)
    cols = tl.arange(0, TILE)
    ok = cols < HALF
    at = qkv_ptr + token * qkv_stride + head * 2 * HALF + cols
    first = tl.load(at, mask=ok, other=0.0)
    second = tl.load(at + HALF, mask=ok, other=0.0)
    slot = tl.load(slots_ptr + token)
    if head < HEADS + KV_HEADS:  # q or k: rotated (rotate_half), in place
        trig = token * trig_stride + cols
        cos1 = tl.load(cos_ptr + trig, mask=ok, other=0.0).to(tl.float32)
        cos2 = tl.load(cos_ptr + trig + HALF, mask=ok, other=0.0).to(tl.float32)
        sin1 = tl.load(sin_ptr + trig, mask=ok, other=0.0).to(tl.float32)
        sin2 = tl.load(sin_ptr + trig + HALF, mask=ok, other=0.0).to(tl.float32)
        a, b = first.to(tl.float32), second.to(tl.float32)
        first, second = (a * cos1 - b * sin1).to(first.dtype), (b * cos2 + a * sin2).to(first.dtype)
        tl.store(at, first, mask=ok)
        tl.store(at + HALF, second, mask=ok)
        if head >= HEADS:
            row = k_ptr + slot * cache_stride_slot + (head - HEADS) * cache_stride_head + cols
            tl.store(row, first.to(k_ptr.dtype.element_ty), mask=ok)
            tl.store(row + HALF, second.to(k_ptr.dtype.element_ty), mask=ok)
    else:  # v: written as it is
        row = v_ptr + slot * cache_stride_slot + (head - HEADS - KV_HEADS) * cache_stride_head
        tl.store(row + cols, first.to(v_ptr.dtype.element_ty), mask=ok)
        tl.store(row + HALF + cols, second.to(v_ptr.dtype.element_ty), mask=ok)


class TritonOps:
    """TorchOps' three operators, a Triton launch each (rows packed, heads contiguous)."""

    OPS_NAME = "triton"

    @staticmethod
    def add_rms_norm(
        x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float
    ) -> torch.Tensor:
        """x += delta in place; returns the RMSNorm of x."""
        rows, width = x.shape
        out = torch.empty_like(x)
        _add_rms_norm[(rows,)](
            x, x if delta is None else delta, weight, out,
            x.stride(0), 0 if delta is None else delta.stride(0), out.stride(0), width, eps,
            HAS_DELTA=delta is not None, TILE=triton.next_power_of_2(width),
        )  # fmt: skip
        return out

    @staticmethod
    def rope_write(
        qkv: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slots: torch.Tensor,
        heads: int,
        kv_heads: int,
        k_scales: torch.Tensor | None = None,
        v_scales: torch.Tensor | None = None,
    ) -> None:
        """Rotate the q/k heads of qkv [tokens, (heads + 2 kv_heads) * dim] in place by
        cos/sin [tokens, dim]; write K/V to the cache rows `slots`."""
        if k_scales is not None or v_scales is not None:  # an int8 cache
            TorchOps.rope_write(qkv, cos, sin, k_cache, v_cache, slots, heads, kv_heads,
                                k_scales, v_scales)  # fmt: skip
            return
        tokens = qkv.shape[0]
        half = k_cache.shape[2] // 2
        _rope_write[(tokens, heads + 2 * kv_heads)](
            qkv, cos, sin, k_cache, v_cache, slots,
            qkv.stride(0), cos.stride(0), k_cache.stride(0), k_cache.stride(1),
            HEADS=heads, KV_HEADS=kv_heads, HALF=half, TILE=triton.next_power_of_2(half),
        )  # fmt: skip

    @staticmethod
    def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        rows, width = gate_up.shape[0], gate_up.shape[1] // 2
        out = torch.empty((rows, width), dtype=gate_up.dtype, device=gate_up.device)
        tile = min(1024, triton.next_power_of_2(width))
        _silu_mul[(rows, triton.cdiv(width, tile))](
            gate_up, out, gate_up.stride(0), out.stride(0), width, TILE=tile
        )
        return out

"""The small operators of ATOM's own forward (`atom.model.forward.llama_forward`), and its one-call
decode path.

`TorchOps` writes each operator with torch's own (any device and dtype); the CPU
kernels module (`atom.model.forward.kernels`) has the same three functions as single calls,
and `TritonOps` (`atom.model.forward.triton_layer`) as single launches on a CUDA device.
`DecodeStack` runs every layer of a kernel decode step in one call of the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from atom.model.forward.attention import (
    Int8Rows,
    KernelDecode,
    Rows,
    StepMeta,
    kernel_caches,
    runs_triton,
    write_rows,
)
from atom.model.forward.kernels import ProjectionKind
from atom.model.lora.mixing import KernelRows, LoraStep

STACK_ROWS = 64  # decode steps of up to this many tokens run as one DecodeStack call


class TorchOps:
    """The fused operators of a layer written with torch's own (any device and dtype).
    `atom.model.forward.kernels` provides the same three functions as single CPU calls."""

    OPS_NAME = "torch"

    @staticmethod
    def add_rms_norm(
        x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float
    ) -> torch.Tensor:
        """x += delta in place; returns the RMSNorm of x (transformers' arithmetic)."""
        if delta is not None:
            x.add_(delta)
        if x.dtype == torch.float32:  # one fused call, bit-identical to the module
            return F.rms_norm(x, (x.shape[-1],), weight, eps)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(x.dtype)

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
        """Rotate q/k heads of qkv [tokens, (heads + 2 kv_heads) * dim] in place by
        cos/sin [tokens, dim] (rotate_half convention); write K/V to the cache rows (an
        int8 cache's with its scales, as the kernel's `rope_write`)."""
        x = qkv.view(qkv.shape[0], heads + 2 * kv_heads, -1)
        qk = x[:, : heads + kv_heads]
        half = x.shape[-1] // 2
        rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin[:, None]
        qk.copy_(qk * cos[:, None] + rotated)
        k: Rows = k_cache if k_scales is None else Int8Rows(k_cache, k_scales)
        v: Rows = v_cache if v_scales is None else Int8Rows(v_cache, v_scales)
        write_rows(k, slots, x[:, heads : heads + kv_heads])
        write_rows(v, slots, x[:, heads + kv_heads :])

    @staticmethod
    def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        half = gate_up.shape[-1] // 2
        return F.silu(gate_up[:, :half]) * gate_up[:, half:]


def gpu_ops(device: torch.device) -> Any | None:
    """`TritonOps` (atom/model/forward/triton_layer.py) on a CUDA device where triton is
    installed; else None."""
    if not runs_triton(str(device)):
        return None
    from atom.model.forward.triton_layer import TritonOps

    return TritonOps


def ops_name(model: Any) -> str:
    """What runs the small operators of a loaded model, for the start-up log."""
    ops = getattr(model, "ops", None)
    if ops is None:
        return "transformers"  # not ATOM's forward
    return getattr(ops, "OPS_NAME", "cpu_kernels")  # (the kernels module has none)


@dataclass(frozen=True, slots=True)
class DecodeStack:
    """The kernels' `DecodeStack` over a model's layers: a decode step of up to
    `max_rows` tokens through every layer in one call (the kernels in the order
    `LlamaLayer.forward` calls them, without its Python), LoRA deltas included."""

    stack: Any
    max_rows: int
    kernels: Any
    lora_layers: list[object] = field(default_factory=list)  # the LoRA slots the stack has

    def run(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: StepMeta
    ) -> torch.Tensor:
        decode = meta.decode
        assert isinstance(decode, KernelDecode)
        caches = [kernel_caches(k, v) for k, v in meta.layer_caches]
        return self.stack.run(  # type: ignore[no-any-return]
            x,
            cos,
            sin,
            [k for k, _, _ in caches],
            [v for _, v, _ in caches],
            [scales["k_scales"] for _, _, scales in caches if scales],
            [scales["v_scales"] for _, _, scales in caches if scales],
            meta.write_slots,
            decode.block_tables,
            decode.seq_lens,
            decode.block_size,
            None if meta.lora is None else self._lora_rows(meta.lora),
        )

    def _lora_rows(self, lora: LoraStep) -> torch.Tensor:
        """Each row's LoRA slot; the stack is given the slots' tensors once (they are
        allocated once, at the first adapter)."""
        assert isinstance(lora.rows, KernelRows)
        if not self.lora_layers or self.lora_layers[0] is not lora.layers:
            self.stack.set_lora(
                [
                    self.kernels.LoraSlotStack(s.a, s.b_t, s.cols, s.room)
                    for layer in lora.layers
                    for s in (layer[name] for name in ("qkv", "o", "gate_up", "down"))
                ]
            )
            self.lora_layers[:] = [lora.layers]
        return lora.rows.slots


def decode_stack(model: Any) -> DecodeStack | None:
    """A `DecodeStack` for `model` (a `LlamaForward`), or None when its operators are
    not the kernels' or one of its projections has no kernel form."""
    kernels = model.ops
    if not hasattr(kernels, "DecodeStack"):
        return None
    stack = kernels.DecodeStack()
    for layer in model.layers:
        found = [
            _projection(kernels, p)
            for p in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj)
        ]
        forms = [f for f in found if f is not None]
        if len(forms) < len(found):
            return None
        norms = (layer.input_layernorm, layer.post_attention_layernorm)
        if norms[0].variance_epsilon != norms[1].variance_epsilon:
            return None  # the stack takes one epsilon a layer
        stack.add_layer(
            *forms,
            *(n.weight for n in norms),
            norms[0].variance_epsilon,
            layer.num_heads,
            layer.num_kv_heads,
            layer.scoring.scale,
        )
    return DecodeStack(stack=stack, max_rows=STACK_ROWS, kernels=kernels)


def _projection(kernels: Any, linear: nn.Module) -> Any | None:
    if isinstance(linear, nn.Linear):
        return kernels.Projection(ProjectionKind.FLOAT, linear.weight, None, linear.bias)
    form = getattr(linear, "projection", None)
    return None if form is None else form(kernels)  # type: ignore[no-any-return]

"""ATOM's own forward for the Llama family, over a loaded transformers model's weights.

transformers' decoder layer costs ~65 small operator calls and a dozen Python module
calls; on CPU at small batches that overhead, more than the weights, sets the decode
speed. This forward does the same arithmetic with q/k/v fused into one projection and
gate/up into another, rotary applied to q and k together, and the same paged attention
function, so a layer is about half the calls (docs/performance.md has the numbers).

`--model-impl auto` uses it when `unsupported_reason` finds nothing this forward does
not implement (like vLLM's own model classes beside its transformers backend);
`transformers` always runs transformers' classes through the attention interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from atom.model.attention import ATTN_IMPLEMENTATION, Scoring, StepMeta, attend_written

ARCHITECTURES = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"})
IMPLEMENTATIONS = ("auto", "atom", "transformers")


def unsupported_reason(model: Any) -> str | None:
    """Why this forward cannot stand in for `model` (None: it can)."""
    name = type(model).__name__
    if name not in ARCHITECTURES:
        return f"{name} has no ATOM implementation"
    config = model.config
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act}"
    if getattr(config, "sliding_window", None) is not None:
        return "sliding-window attention"
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for group in ((attn.q_proj, attn.k_proj, attn.v_proj), (mlp.gate_proj, mlp.up_proj)):
            if len({p.bias is None for p in group}) > 1:
                return "fused projections with and without bias"
    probe = torch.zeros(1, 1, config.hidden_size, dtype=model.dtype, device=model.device)
    cos, _ = model.model.rotary_emb(probe, torch.zeros(1, 1, dtype=torch.long, device=model.device))
    if cos.shape[-1] != model.model.layers[0].self_attn.head_dim:
        return "partial rotary embeddings"
    return None


@dataclass(frozen=True, slots=True)
class LeanOutput:
    logits: torch.Tensor  # [1, kept rows, vocab], as transformers' output


def _fuse(projections: list[nn.Linear]) -> nn.Linear:
    """One Linear computing the given projections side by side (new weight storage)."""
    first = projections[0]
    fused = nn.Linear(
        first.in_features,
        sum(p.out_features for p in projections),
        bias=first.bias is not None,
        device=first.weight.device,
        dtype=first.weight.dtype,
    )
    fused.weight.data = torch.cat([p.weight.data for p in projections])
    if first.bias is not None:
        fused.bias.data = torch.cat([p.bias.data for p in projections])
    return fused


class TorchOps:
    """The fused operators of a layer written with torch's own (any device and dtype).
    `atom.model.kernels` provides the same three functions as single CPU calls."""

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
    ) -> None:
        """Rotate q/k heads of qkv [tokens, (heads + 2 kv_heads) * dim] in place by
        cos/sin [tokens, dim] (rotate_half convention); write K/V to the cache rows."""
        x = qkv.view(qkv.shape[0], heads + 2 * kv_heads, -1)
        qk = x[:, : heads + kv_heads]
        half = x.shape[-1] // 2
        rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin[:, None]
        qk.copy_(qk * cos[:, None] + rotated)
        k_cache.index_copy_(0, slots, x[:, heads : heads + kv_heads])
        v_cache.index_copy_(0, slots, x[:, heads + kv_heads :])

    @staticmethod
    def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
        half = gate_up.shape[-1] // 2
        return F.silu(gate_up[:, :half]) * gate_up[:, half:]


class LeanLayer(nn.Module):
    def __init__(self, layer: Any, layer_idx: int, config: Any, ops: Any) -> None:
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.layer_idx = layer_idx  # the layer's cache in the step's KV tensor
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(attn.head_dim)
        self.how = Scoring(scale=float(attn.scaling))
        self.input_layernorm = layer.input_layernorm
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.qkv_proj = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        self.o_proj = attn.o_proj
        self.gate_up_proj = _fuse([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj
        self.ops = ops

    def forward(
        self,
        x: torch.Tensor,
        delta: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        step_meta: StepMeta,
    ) -> torch.Tensor:
        """Adds the previous layer's `delta` into the residual stream x [tokens, hidden]
        in place, and returns this layer's own delta (its MLP output)."""
        ops, tokens, heads = self.ops, x.shape[0], self.num_heads
        norm = self.input_layernorm
        qkv = self.qkv_proj(ops.add_rms_norm(x, delta, norm.weight, norm.variance_epsilon))
        k_cache, v_cache = step_meta.layer_cache(self.layer_idx)
        ops.rope_write(
            qkv, cos, sin, k_cache, v_cache, step_meta.write_slots, heads, self.num_kv_heads
        )
        q = qkv.view(tokens, -1, self.head_dim)[:, :heads]
        out = attend_written(q, k_cache, v_cache, step_meta, self.how)
        norm = self.post_attention_layernorm
        h = ops.add_rms_norm(
            x, self.o_proj(out.reshape(tokens, -1)), norm.weight, norm.variance_epsilon
        )
        return self.down_proj(ops.silu_mul(self.gate_up_proj(h)))  # type: ignore[no-any-return]


class LeanCausalLM(nn.Module):
    """Takes over `model`'s embeddings, norms, rotary module and (fused) projections;
    `ops` runs the small operators (`TorchOps`, or the CPU kernels module)."""

    def __init__(self, model: Any, ops: Any = TorchOps) -> None:
        super().__init__()
        self.config = model.config
        inner = model.model
        self.embed_tokens = inner.embed_tokens
        self.rotary_emb = inner.rotary_emb
        self.layers = nn.ModuleList(
            LeanLayer(layer, i, model.config, ops) for i, layer in enumerate(inner.layers)
        )
        self.norm = inner.norm
        self.lm_head = model.lm_head
        self.ops = ops

    def set_attn_implementation(self, name: str) -> None:
        if name != ATTN_IMPLEMENTATION:
            raise ValueError(f"the ATOM forward always uses {ATTN_IMPLEMENTATION}")

    def forward(
        self,
        *,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        logits_to_keep: torch.Tensor,
        step_meta: StepMeta,
        **_: object,
    ) -> LeanOutput:
        """The runner's call: input_ids/position_ids [1, tokens]; logits of the kept rows."""
        x = self.embed_tokens(input_ids[0])
        cos, sin = self.rotary_emb(x, position_ids)
        cos, sin = cos[0].contiguous(), sin[0].contiguous()  # [tokens, dim]
        delta = None
        for layer in self.layers:
            delta = layer(x, delta, cos, sin, step_meta)
        h = self.ops.add_rms_norm(x, delta, self.norm.weight, self.norm.variance_epsilon)
        logits = self.lm_head(h[logits_to_keep])
        return LeanOutput(logits=logits.unsqueeze(0))


def lean_model(model: Any, implementation: str, kernels: Any = None) -> Any:
    """`model` itself, or the ATOM forward over its weights, per `--model-impl`
    (`kernels`: the CPU kernels module for its small operators; None: torch's)."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"unknown --model-impl {implementation!r} (one of {', '.join(IMPLEMENTATIONS)})"
        )
    if implementation == "transformers":
        return model
    reason = unsupported_reason(model)
    if reason is None:
        return LeanCausalLM(model, kernels or TorchOps).eval()
    if implementation == "atom":
        raise ValueError(f"--model-impl atom cannot run this model: {reason}")
    return model

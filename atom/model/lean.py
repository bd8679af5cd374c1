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

from atom.model.attention import ATTN_IMPLEMENTATION, StepMeta, paged_attention

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


def _rms_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm; in float32 as one fused call, bit-identical to the module."""
    if x.dtype != torch.float32:
        return norm(x)  # type: ignore[no-any-return]  # it upcasts, then casts back first
    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [tokens, heads, dim] (transformers' rotate_half convention)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LeanLayer(nn.Module):
    def __init__(self, layer: Any, layer_idx: int, config: Any) -> None:
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.layer_idx = layer_idx  # paged_attention finds this layer's cache by it
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(attn.head_dim)
        self.scaling = float(attn.scaling)
        self.intermediate = int(mlp.gate_proj.out_features)
        self.input_layernorm = layer.input_layernorm
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.qkv_proj = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        self.o_proj = attn.o_proj
        self.gate_up_proj = _fuse([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, step_meta: StepMeta
    ) -> torch.Tensor:
        tokens, heads, kv_heads = x.shape[0], self.num_heads, self.num_kv_heads
        h = _rms_norm(self.input_layernorm, x)
        qkv = self.qkv_proj(h).view(tokens, heads + 2 * kv_heads, -1)
        qk = _rotate(qkv[:, : heads + kv_heads], cos, sin)
        out, _ = paged_attention(
            self,
            qk[:, :heads].transpose(0, 1).unsqueeze(0),
            qk[:, heads:].transpose(0, 1).unsqueeze(0),
            qkv[:, heads + kv_heads :].transpose(0, 1).unsqueeze(0),
            None,
            scaling=self.scaling,
            step_meta=step_meta,
        )
        x = x + self.o_proj(out.reshape(tokens, heads * self.head_dim))
        gate_up = self.gate_up_proj(_rms_norm(self.post_attention_layernorm, x))
        act = F.silu(gate_up[:, : self.intermediate]) * gate_up[:, self.intermediate :]
        return x + self.down_proj(act)


class LeanCausalLM(nn.Module):
    """Takes over `model`'s embeddings, norms, rotary module and (fused) projections."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.config = model.config
        inner = model.model
        self.embed_tokens = inner.embed_tokens
        self.rotary_emb = inner.rotary_emb
        self.layers = nn.ModuleList(
            LeanLayer(layer, i, model.config) for i, layer in enumerate(inner.layers)
        )
        self.norm = inner.norm
        self.lm_head = model.lm_head

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
        cos, sin = cos[0].unsqueeze(1), sin[0].unsqueeze(1)  # [tokens, 1, dim]
        for layer in self.layers:
            x = layer(x, cos, sin, step_meta)
        logits = self.lm_head(_rms_norm(self.norm, x[logits_to_keep]))
        return LeanOutput(logits=logits.unsqueeze(0))


def lean_model(model: Any, implementation: str) -> Any:
    """`model` itself, or the ATOM forward over its weights, per `--model-impl`."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"unknown --model-impl {implementation!r} (one of {', '.join(IMPLEMENTATIONS)})"
        )
    if implementation == "transformers":
        return model
    reason = unsupported_reason(model)
    if reason is None:
        return LeanCausalLM(model).eval()
    if implementation == "atom":
        raise ValueError(f"--model-impl atom cannot run this model: {reason}")
    return model

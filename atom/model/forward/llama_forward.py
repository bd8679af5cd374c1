"""ATOM's own forward for the Llama family, over a loaded transformers model's weights.

transformers' decoder layer costs ~65 small operator calls and a dozen Python module
calls; on CPU at small batches that overhead, more than the weights, sets the decode
speed. This forward does the same arithmetic with q/k/v fused into one projection and
gate/up into another, and its small operators (residual add + RMSNorm, rotary + the
K/V cache write, SiLU·mul) each as one call of an `ops` object: the CPU kernels of
`atom.model.forward.kernels`, or `TorchOps` anywhere else. A decode layer on the kernels is
nine calls, and a decode step of a few tokens runs all layers in one call of the
kernels' `DecodeStack` (bench/results/history.md, "One-call decode").

`--model-impl auto` uses it when `unsupported_reason` finds nothing this forward does
not implement (like vLLM's own model classes beside its transformers backend);
`transformers` always runs transformers' classes through the attention interface.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from atom.model.forward.attention import (
    ATTN_IMPLEMENTATION,
    KernelDecode,
    Scoring,
    StepMeta,
    attend_written,
    kernel_caches,
)
from atom.model.forward.operators import DecodeStack, TorchOps, decode_stack, gpu_ops
from atom.model.lora.mixing import KernelRows, LoraStep

ARCHITECTURES = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"})


def unsupported_reason(model: Any) -> str | None:
    """Why this forward cannot stand in for `model` (None: it can)."""
    name = getattr(model, "text_architecture", type(model).__name__)  # a TextView's
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
class ForwardOutput:
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


class LlamaLayer(nn.Module):
    def __init__(self, layer: Any, layer_idx: int, config: Any, ops: Any) -> None:
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.layer_idx = layer_idx  # which of the step's layer caches is this layer's
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(attn.head_dim)
        self.scoring = Scoring(scale=float(attn.scaling))
        self.input_layernorm = layer.input_layernorm
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.qkv_proj = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        self.o_proj = attn.o_proj
        self.gate_up_proj = _fuse([mlp.gate_proj, mlp.up_proj])
        self.down_proj = mlp.down_proj
        self.ops = ops
        # Tensor parallel: sums the ranks' partial outputs (tensor_parallel.py); None: alone.
        self.reduce: Callable[[torch.Tensor], None] | None = None

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
        lora = step_meta.lora
        norm = self.input_layernorm
        h = ops.add_rms_norm(x, delta, norm.weight, norm.variance_epsilon)
        qkv = self._project(self.qkv_proj, "qkv", h, lora)
        k_cache, v_cache = step_meta.layer_cache(self.layer_idx)
        k, v, scales = kernel_caches(k_cache, v_cache)
        ops.rope_write(
            qkv, cos, sin, k, v, step_meta.write_slots, heads, self.num_kv_heads, **scales
        )
        q = qkv.view(tokens, -1, self.head_dim)[:, :heads]
        out = attend_written(q, k_cache, v_cache, step_meta, self.scoring)
        norm = self.post_attention_layernorm
        attended = self._project(self.o_proj, "o", out.reshape(tokens, -1), lora)
        if self.reduce is not None:
            self.reduce(attended)
        h = ops.add_rms_norm(x, attended, norm.weight, norm.variance_epsilon)
        gate_up = self._project(self.gate_up_proj, "gate_up", h, lora)
        delta = self._project(self.down_proj, "down", ops.silu_mul(gate_up), lora)
        if self.reduce is not None:
            self.reduce(delta)
        return delta

    def _project(
        self, module: nn.Module, name: str, x: torch.Tensor, lora: LoraStep | None
    ) -> torch.Tensor:
        """One of the layer's projections, with the step's adapters' deltas added to
        their rows (atom/model/lora/mixing.py)."""
        out: torch.Tensor = module(x)
        if lora is not None:
            lora.add(out, x, self.layer_idx, name)
        return out


class LlamaForward(nn.Module):
    """Takes over `model`'s embeddings, norms, rotary module and (fused) projections;
    `ops` runs the small operators (`TorchOps`, or the CPU kernels module)."""

    def __init__(self, model: Any, ops: Any = TorchOps) -> None:
        super().__init__()
        self.config = model.config
        inner = model.model
        self.embed_tokens = inner.embed_tokens
        self.rotary_emb = inner.rotary_emb
        self.layers = nn.ModuleList(
            LlamaLayer(layer, i, model.config, ops) for i, layer in enumerate(inner.layers)
        )
        self.norm = inner.norm
        self.lm_head = model.lm_head
        self.ops = ops
        self.use_decode_stack = True  # False: every step through the Python layers
        self._stack: DecodeStack | None = None
        self._stack_built = False

    def _decode_stack(self, meta: StepMeta, num_tokens: int) -> DecodeStack | None:
        """The one-call path for this step, when it is a kernel decode of few rows. Built
        at the first such step, after `--quantization` has swapped the projections."""
        if not self.use_decode_stack or meta.prefills:
            return None
        if meta.lora is not None and not isinstance(meta.lora.rows, KernelRows):
            return None
        if not isinstance(meta.decode, KernelDecode):
            return None
        if not self._stack_built:
            self._stack, self._stack_built = decode_stack(self), True
        if self._stack is None or num_tokens > self._stack.max_rows:
            return None
        return self._stack

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
        image_embeds: tuple[torch.Tensor, torch.Tensor] | None = None,
        **_: object,
    ) -> ForwardOutput:
        """The runner's call: input_ids/position_ids [1, tokens]; logits of the kept rows.
        `image_embeds`: (rows, embeddings) replacing those rows' token embeddings (an
        image's placeholders, atom/model/vision/placement.py)."""
        x = self.embed_tokens(input_ids[0])
        if image_embeds is not None:
            rows, values = image_embeds
            x[rows] = values.to(x.dtype)
        cos, sin = self.rotary_emb(x, position_ids)
        cos, sin = cos[0].contiguous(), sin[0].contiguous()  # [tokens, dim]
        stack = self._decode_stack(step_meta, x.shape[0])
        if stack is not None:
            delta = stack.run(x, cos, sin, step_meta)
        else:
            delta = None
            for layer in self.layers:
                delta = layer(x, delta, cos, sin, step_meta)
        h = self.ops.add_rms_norm(x, delta, self.norm.weight, self.norm.variance_epsilon)
        logits = self.lm_head(h[logits_to_keep])
        return ForwardOutput(logits=logits.unsqueeze(0))


def own_forward(model: Any, implementation: str, kernels: Any = None) -> Any:
    """`model` itself, or the ATOM forward over its weights, per `--model-impl`
    (`kernels`: the CPU kernels module for its small operators; None: Triton's on a
    CUDA device where triton is installed, else torch's)."""
    if implementation == "transformers":
        return model
    reason = unsupported_reason(model)
    if reason is None:
        device = next(model.parameters()).device
        return LlamaForward(model, kernels or gpu_ops(device) or TorchOps).eval()
    if implementation == "atom":
        raise ValueError(f"--model-impl atom cannot run this model: {reason}")
    return model

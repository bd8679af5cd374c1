"""Tensor parallelism for ATOM's Llama-family forward (`--tensor-parallel-size N`).

Each of N ranks keeps 1/N of every layer's attention heads and MLP width, in the
Megatron split: the fused q/k/v and gate/up projections keep their rank's rows
(column-parallel), the attention output and down projections the matching columns
(row-parallel); their partial outputs are summed across ranks by one all-reduce after
attention and one after the MLP. Embeddings, norms and the output head stay whole on
every rank, so every rank ends a step with the same logits. The KV cache follows the
heads: a rank caches its own KV heads only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from atom.model.forward.llama_forward import LlamaForward, LlamaLayer
from atom.model.parallel import Rank

Reduce = Callable[[torch.Tensor], None]  # sums a tensor across the ranks, in place


def split(model: object, rank: Rank) -> None:
    """Keep `rank`'s share of a loaded model; ValueError for one ATOM's forward does not run."""
    if not isinstance(model, LlamaForward):
        raise ValueError(
            "--tensor-parallel-size above 1 needs ATOM's own forward (a Llama, Mistral or "
            "Qwen2 text model with --model-impl auto or atom)"
        )
    shard(model, rank.rank, rank.world, rank.all_reduce)


def shard(model: LlamaForward, rank: int, world: int, reduce: Reduce) -> None:
    """Keep rank `rank`'s share of `model` (of `world`), in place; ValueError naming
    `--tensor-parallel-size` when it does not divide the heads."""
    config = model.config
    heads, kv_heads = int(config.num_attention_heads), int(config.num_key_value_heads)
    if heads % world or kv_heads % world:
        raise ValueError(
            f"--tensor-parallel-size {world} does not divide the model's {heads} attention "
            f"heads and {kv_heads} KV heads"
        )
    for layer in model.layers:
        assert isinstance(layer, LlamaLayer)
        _shard_layer(layer, rank, world, reduce)
    local = copy.copy(config)  # what the KV cache is sized by: this rank's heads
    local.head_dim = model.layers[0].head_dim
    local.num_attention_heads, local.num_key_value_heads = heads // world, kv_heads // world
    model.config = local
    model.use_decode_stack = False  # the one-call decode runs whole layers, no all-reduce


def _shard_layer(layer: LlamaLayer, rank: int, world: int, reduce: Reduce) -> None:
    dim, heads, kv_heads = layer.head_dim, layer.num_heads, layer.num_kv_heads
    q, kv = heads * dim, kv_heads * dim
    layer.qkv_proj = _rows(layer.qkv_proj, (q, kv, kv), rank, world)
    layer.o_proj = _columns(layer.o_proj, rank, world)
    half = layer.gate_up_proj.out_features // 2
    layer.gate_up_proj = _rows(layer.gate_up_proj, (half, half), rank, world)
    layer.down_proj = _columns(layer.down_proj, rank, world)
    layer.num_heads, layer.num_kv_heads = heads // world, kv_heads // world
    layer.reduce = reduce


def _rows(linear: nn.Linear, parts: tuple[int, ...], rank: int, world: int) -> nn.Linear:
    """Column-parallel: this rank's slice of each of the fused `parts`' output rows."""

    def mine(tensor: torch.Tensor) -> torch.Tensor:
        pieces = tensor.split(list(parts))
        return torch.cat([p.chunk(world)[rank] for p in pieces]).contiguous()

    bias = None if linear.bias is None else mine(linear.bias.data)
    return _linear(mine(linear.weight.data), bias)


def _columns(linear: nn.Linear, rank: int, world: int) -> nn.Linear:
    """Row-parallel: this rank's slice of the input columns; the bias is added once
    (by rank 0), since the ranks' outputs are summed."""
    weight = linear.weight.data.chunk(world, dim=1)[rank].contiguous()
    bias = None
    if linear.bias is not None:
        bias = linear.bias.data.clone() if rank == 0 else torch.zeros_like(linear.bias.data)
    return _linear(weight, bias)


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    out_features, in_features = weight.shape
    linear = nn.Linear(
        in_features, out_features, bias=bias is not None, device=weight.device, dtype=weight.dtype
    )
    linear.weight.data = weight
    if bias is not None:
        linear.bias.data = bias
    return linear

"""A PEFT LoRA folder read into the form ATOM's forward adds: per layer and fused
projection, one `A` and one `B` whose product is the adapter's delta.

ATOM's Llama forward fuses q/k/v into one projection and gate/up into another
(atom/model/forward/llama_forward.py), so an adapter's parts are fused the same way:
the parts' `A` matrices stacked along the rank, their `B` matrices placed
block-diagonally, and each part's scaling (`lora_alpha / r`, or `lora_alpha /
sqrt(r)` with rsLoRA, as PEFT defines it) over its columns, so `(B @ (A @ x)) *
scale` is every part's delta side by side. A part the adapter leaves out adds
nothing. Everything PEFT can save but this cannot apply (DoRA, trained biases,
embedding or head adapters, saved modules) is refused by name, not half applied.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

# ATOM's fused projections and the PEFT module names they are made of, in column order.
FUSED = {
    "qkv": ("q_proj", "k_proj", "v_proj"),
    "o": ("o_proj",),
    "gate_up": ("gate_proj", "up_proj"),
    "down": ("down_proj",),
}
PROJECTION_OF = {part: fused for fused, parts in FUSED.items() for part in parts}
_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+_proj)\.lora_([AB])\.weight$")


@dataclass(frozen=True, slots=True)
class FusedLora:
    """One fused projection's adapter: delta = ((x @ a.T) @ b.T) * scale (the device
    slots fold `scale` into B, atom/model/lora/mixing.py)."""

    a: torch.Tensor  # [rank of every part together, in_features]
    b: torch.Tensor  # [out_features of the fused projection, rank of every part]
    scale: torch.Tensor  # [out_features]: each part's scaling over its columns

    def to(self, device: torch.device | str) -> FusedLora:
        return FusedLora(self.a.to(device), self.b.to(device), self.scale.to(device))


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraAdapter:
    """A loaded adapter: its served name, where it came from, its largest rank and
    each layer's fused projections it changes."""

    name: str
    path: str
    rank: int
    layers: tuple[Mapping[str, FusedLora], ...]
    shapes: Mapping[str, tuple[int, int]]  # (out, in) of each of the model's fused projections

    @property
    def num_bytes(self) -> int:
        return sum(
            t.numel() * t.element_size()
            for layer in self.layers
            for fused in layer.values()
            for t in (fused.a, fused.b, fused.scale)
        )

    def to(self, device: torch.device | str) -> LoraAdapter:
        layers = tuple({k: f.to(device) for k, f in layer.items()} for layer in self.layers)
        return replace(self, layers=layers)


@dataclass(frozen=True, slots=True, kw_only=True)
class BaseShapes:
    """What an adapter must fit: the base model's layer count and each part's
    (out_features, in_features)."""

    num_layers: int
    parts: Mapping[str, tuple[int, int]]

    @classmethod
    def of(cls, config: Any) -> BaseShapes:
        text = config.get_text_config()
        hidden, inter = int(text.hidden_size), int(text.intermediate_size)
        heads = int(text.num_attention_heads)
        kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
        q, kv = heads * head_dim, kv_heads * head_dim
        parts = {
            "q_proj": (q, hidden),
            "k_proj": (kv, hidden),
            "v_proj": (kv, hidden),
            "o_proj": (hidden, q),
            "gate_proj": (inter, hidden),
            "up_proj": (inter, hidden),
            "down_proj": (hidden, inter),
        }
        return cls(num_layers=int(text.num_hidden_layers), parts=parts)

    def fused(self) -> dict[str, tuple[int, int]]:
        """(out, in) of each fused projection."""
        return {
            projection: (sum(self.parts[n][0] for n in names), self.parts[names[0]][1])
            for projection, names in FUSED.items()
        }


def read_adapter(
    name: str, path: str, base: BaseShapes, *, max_rank: int, dtype: torch.dtype
) -> LoraAdapter:
    """The PEFT LoRA adapter in folder `path`, fused for ATOM's forward; ValueError,
    naming what does not fit, for anything else."""
    folder = Path(path).expanduser()
    config = _adapter_config(folder)
    tensors = _adapter_tensors(folder)
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        found = _KEY.search(key)
        if found is None or found.group(2) not in PROJECTION_OF:
            raise ValueError(f"{folder}: the adapter tensor {key} is not one ATOM applies")
        pairs.setdefault((int(found.group(1)), found.group(2)), {})[found.group(3)] = tensor
    if not pairs:
        raise ValueError(f"{folder}: the adapter has no LoRA weights")
    parts = {k: _checked(folder, k, v, config, base, max_rank) for k, v in pairs.items()}
    layers = tuple(_fuse_layer(i, parts, base, dtype) for i in range(base.num_layers))
    rank = max(part.a.shape[0] for part in parts.values())
    return LoraAdapter(name=name, path=str(folder), rank=rank, layers=layers, shapes=base.fused())


def _adapter_config(folder: Path) -> dict[str, Any]:
    file = folder / "adapter_config.json"
    if not file.is_file():
        raise ValueError(f"{folder} is not a PEFT adapter folder (no adapter_config.json)")
    config = json.loads(file.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{folder}: a {config['peft_type']} adapter, not LoRA")
    refused = {
        "use_dora": "DoRA adapters",
        "fan_in_fan_out": "fan_in_fan_out weights",
        "modules_to_save": "adapters that save whole modules",
        "lora_bias": "adapters with LoRA biases",
        "trainable_token_indices": "adapters that train token embeddings",
        "layer_replication": "adapters that replicate layers",
        "alora_invocation_tokens": "activated LoRA adapters",
        "target_parameters": "adapters of parameters rather than modules",
    }
    for field, what in refused.items():
        if config.get(field):
            raise ValueError(f"{folder}: {what} are not supported ({field})")
    if config.get("bias", "none") != "none":
        raise ValueError(f"{folder}: adapters with trained biases are not supported (bias)")
    return config


def _adapter_tensors(folder: Path) -> dict[str, torch.Tensor]:
    safetensors = folder / "adapter_model.safetensors"
    if safetensors.is_file():
        from safetensors.torch import load_file

        return load_file(str(safetensors))
    pickled = folder / "adapter_model.bin"
    if pickled.is_file():
        return torch.load(pickled, map_location="cpu", weights_only=True)  # type: ignore[no-any-return]
    raise ValueError(f"{folder}: no adapter_model.safetensors (or .bin)")


@dataclass(frozen=True, slots=True)
class _Part:
    a: torch.Tensor
    b: torch.Tensor
    scaling: float


def _checked(
    folder: Path,
    where: tuple[int, str],
    pair: dict[str, torch.Tensor],
    config: dict[str, Any],
    base: BaseShapes,
    max_rank: int,
) -> _Part:
    """One module's A, B and scaling, checked against the base's shapes."""
    layer, part = where
    label = f"{folder}: layers.{layer}.{part}"
    if set(pair) != {"A", "B"} or layer >= base.num_layers:
        raise ValueError(f"{label} needs lora_A and lora_B of an existing layer")
    a, b = pair["A"], pair["B"]
    rank, (out_features, in_features) = a.shape[0], base.parts[part]
    if a.shape != (rank, in_features) or b.shape != (out_features, rank):
        raise ValueError(
            f"{label}: shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit the base "
            f"model's {out_features} x {in_features}"
        )
    if rank > max_rank:
        raise ValueError(f"{label}: rank {rank} is above --max-lora-rank {max_rank}")
    alpha = _pattern(config.get("alpha_pattern"), layer, part, config.get("lora_alpha", 8))
    scaling = alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)
    return _Part(a.float(), b.float(), scaling)


def _pattern(patterns: Any, layer: int, part: str, default: float) -> float:
    """PEFT's per-module override: a pattern key matching the module's name at its end."""
    block = "self_attn" if PROJECTION_OF[part] in ("qkv", "o") else "mlp"
    name = f"model.layers.{layer}.{block}.{part}"
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?{key}$", name):
            return float(value)
    return float(default)


def _fuse_layer(
    layer: int, parts: Mapping[tuple[int, str], _Part], base: BaseShapes, dtype: torch.dtype
) -> dict[str, FusedLora]:
    """Each fused projection of `layer` the adapter changes: A stacked, B block-diagonal,
    each part's scaling over its columns."""
    fused: dict[str, FusedLora] = {}
    for projection, names in FUSED.items():
        present = [parts[layer, n] for n in names if (layer, n) in parts]
        if not present:
            continue
        a = torch.cat([part.a for part in present])
        out_features = sum(base.parts[n][0] for n in names)
        b, scale = torch.zeros(out_features, a.shape[0]), torch.zeros(out_features)
        rank_at, row_at = 0, 0
        for n in names:
            rows = base.parts[n][0]
            if (layer, n) in parts:
                part = parts[layer, n]
                rank = part.a.shape[0]
                b[row_at : row_at + rows, rank_at : rank_at + rank] = part.b
                scale[row_at : row_at + rows] = part.scaling
                rank_at += rank
            row_at += rows
        fused[projection] = FusedLora(
            a.to(dtype).contiguous(), b.to(dtype).contiguous(), scale.to(dtype)
        )
    return fused

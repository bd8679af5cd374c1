"""PEFT LoRA adapters made in a test: random, with non-zero B so they change outputs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

ALL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def save_adapter(
    model: Any,
    folder: Path,
    *,
    rank: int,
    targets: tuple[str, ...] = ALL_TARGETS,
    alpha: int = 16,
    rslora: bool = False,
    seed: int = 0,
    std: float = 0.05,
) -> Path:
    """A LoRA adapter of a copy of `model` (the model itself is untouched) with random A
    and B, saved as a PEFT folder; returns the folder."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), use_rslora=rslora)
    peft_model = get_peft_model(copy.deepcopy(model), config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    peft_model.save_pretrained(str(folder))
    return folder


def with_adapter(model: Any, folder: Path, *, merge: bool) -> Any:
    """PEFT's own model of a copy of `model` with the adapter in `folder`: merged into
    the weights (`merge_and_unload`), or applied beside them as PEFT runs it."""
    from peft import PeftModel

    adapted = PeftModel.from_pretrained(copy.deepcopy(model), str(folder))
    return (adapted.merge_and_unload() if merge else adapted).eval()

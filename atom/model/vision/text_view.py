"""A vision-language model's language half, shaped as a `*ForCausalLM` so ATOM's
forward can take its weights over, and the vision half left to encode images."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from atom.model.vision.families import TEXT_ARCHITECTURES


class TextView(nn.Module):
    """`model` (the decoder: embeddings, layers, norm, rotary), `lm_head` and the text
    config, as a causal LM has them; `text_architecture` names the causal LM it is."""

    def __init__(self, vlm: Any) -> None:
        super().__init__()
        self.config = vlm.config.get_text_config()
        model_type = self.config.model_type
        if model_type not in TEXT_ARCHITECTURES:
            raise ValueError(f"a {model_type} language model has no ATOM implementation")
        self.text_architecture = TEXT_ARCHITECTURES[model_type]
        self.model = vlm.get_decoder()
        self.lm_head = vlm.lm_head
        self.generation_config = vlm.generation_config

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device


def vision_half(vlm: Any) -> Any:
    """The module whose `get_image_features` encodes images, with the language model
    detached from it (ATOM's forward holds its weights; nothing here reads them again)."""
    inner = vlm.model
    decoder = vlm.get_decoder()
    for name, child in list(inner.named_children()):
        if child is decoder:
            setattr(inner, name, nn.Module())
    return inner

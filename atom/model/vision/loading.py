"""Loading a vision-language model: transformers' model and processor from the folder,
then its language half behind ATOM's forward and its vision half as the encoder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atom.model.vision.encoder import VisionEncoder
from atom.model.vision.families import vision_family
from atom.model.vision.grid_processor import GridProcessor
from atom.model.vision.prompter import ImagePrompter
from atom.model.vision.text_view import TextView, vision_half


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionParts:
    """What a vision-language model adds to a text model's runtime."""

    encoder: VisionEncoder  # runs in the runner's step
    prompter: ImagePrompter  # runs in the request's planning thread


def read_model(folder: Path, dtype: Any) -> tuple[Any, Any | None]:
    """transformers' model in `folder`, and its processor when it reads images (None for
    a text-only model)."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoProcessor,
    )

    family = vision_family(AutoConfig.from_pretrained(folder))
    if family is None:
        return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype), None
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=dtype)
    if family.mrope:
        return model, _grid_processor(folder, model.config)
    return model, AutoProcessor.from_pretrained(folder)


def _grid_processor(folder: Path, config: Any) -> GridProcessor:
    from transformers import AutoImageProcessor, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    image_token = str(tokenizer.convert_ids_to_tokens(int(config.image_token_id)))
    merge = int(config.vision_config.spatial_merge_size)
    video_id = getattr(config, "video_token_id", None)
    video_token = None if video_id is None else str(tokenizer.convert_ids_to_tokens(int(video_id)))
    image_processor = AutoImageProcessor.from_pretrained(folder)
    return GridProcessor(tokenizer, image_processor, image_token, merge, video_token)


def vision_forward(
    vlm: Any, processor: Any, implementation: str, kernels: Any
) -> tuple[Any, VisionParts]:
    """ATOM's forward over the language half, and the vision half; ValueError when the
    language model is one ATOM's forward does not implement."""
    from atom.model.forward.llama_forward import own_forward

    family = vision_family(vlm.config)
    assert family is not None
    if implementation == "transformers":
        raise ValueError("vision-language models run on ATOM's forward: use --model-impl auto")
    view = TextView(vlm)
    forward = own_forward(view, "atom", kernels=kernels)
    encoder = VisionEncoder(vision_half(vlm), family, view.dtype)
    merge = int(vlm.config.vision_config.spatial_merge_size) if family.mrope else None
    video_id = getattr(vlm.config, "video_token_id", None) if family.video_join else None
    vision = vlm.config.vision_config
    scale = getattr(vision, "tokens_per_second", None)  # Qwen2.5-VL's
    prompter = ImagePrompter(
        processor,
        int(vlm.config.image_token_id),
        merge,
        None if video_id is None else int(video_id),
        None if scale is None else float(scale) * int(vision.temporal_patch_size),
    )
    return forward, VisionParts(encoder=encoder, prompter=prompter)

"""The vision-language architectures ATOM serves, and what differs between them.

Every family runs its vision encoder through transformers' own `get_image_features`
and its text model through ATOM's forward (atom/model/forward/llama_forward.py); a
family only says how one image's processor tensors join a batch of images. The
encoder's output rows, flattened, are each image's rows in order, whatever the family.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionFamily:
    """`join`: the processor tensors `get_image_features` takes, each with the dimension
    one image's tensor is concatenated along to make a batch. `mrope`: the language
    model's rotary positions are (time, height, width) triples, an image's tokens laid
    out on its grid (atom/model/vision/rope.py)."""

    architecture: str
    join: Mapping[str, int]
    mrope: bool = False
    # a video's tensors for `get_video_features`, joined as `join`'s; empty: no video
    video_join: Mapping[str, int] = field(default_factory=dict)


FAMILIES = {
    family.architecture: family
    for family in (
        # LLaVA-style: a CLIP/SigLIP tower and a projector; one fixed-size crop an image.
        VisionFamily(architecture="LlavaForConditionalGeneration", join={"pixel_values": 0}),
        # Idefics3 / SmolVLM: a SigLIP tower and a pixel-shuffle connector over an image
        # split into crops (plus the whole image scaled down); one image's crops are
        # [1, crops, ...], and a batch of images one row of all their crops.
        VisionFamily(
            architecture="Idefics3ForConditionalGeneration",
            join={"pixel_values": 1, "pixel_attention_mask": 1},
        ),
        # Qwen2-VL: a ViT over patches of the image at its own resolution, merged 2x2;
        # an image's patches are rows of one [patches, features] tensor, its grid beside.
        VisionFamily(
            architecture="Qwen2VLForConditionalGeneration",
            join={"pixel_values": 0, "image_grid_thw": 0},
            mrope=True,
            video_join={"pixel_values_videos": 0, "video_grid_thw": 0},
        ),
        # Qwen2.5-VL: the same inputs and positions; windowed attention in its tower.
        VisionFamily(
            architecture="Qwen2_5_VLForConditionalGeneration",
            join={"pixel_values": 0, "image_grid_thw": 0},
            mrope=True,
            video_join={"pixel_values_videos": 0, "video_grid_thw": 0},
        ),
    )
}

# The text model each family's language model runs as (ATOM's forward implements these).
TEXT_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen2_vl_text": "Qwen2ForCausalLM",  # Qwen2's layers; only its positions differ
    "qwen2_5_vl_text": "Qwen2ForCausalLM",
}


def vision_family(config: Any) -> VisionFamily | None:
    """The family of a model's config; None for a text-only model. ValueError for a
    vision-language architecture ATOM does not serve."""
    if getattr(config, "vision_config", None) is None:
        return None
    names = list(getattr(config, "architectures", None) or [])
    for name in names:
        if name in FAMILIES:
            return FAMILIES[name]
    raise ValueError(
        f"vision-language architecture {', '.join(names) or config.model_type} is not served "
        f"(served: {', '.join(sorted(FAMILIES))}; docs/multimodal.md)"
    )

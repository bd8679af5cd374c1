"""The multimodal architectures ATOM serves, and what differs between them.

Every family runs its encoders (vision, and audio for the speech-language models)
through transformers' own `get_image_features` / `get_video_features` /
`get_audio_features` (or ATOM's stand-in where a model has none), and its text model
through ATOM's forward (atom/model/forward/llama_forward.py); a family only says how one
part's processor tensors join a batch of parts. An encoder's output rows, flattened,
are each part's rows in order, whatever the family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from atom.model.vision.qwen2_audio import qwen2_audio_features


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaInputs:
    """One kind of part's processor tensors, each with the dimension one part's tensor
    is concatenated along to make a batch; `encode(module, **tensors)` gives the rows
    (None: the module's own `get_<kind>_features`)."""

    join: Mapping[str, int]
    encode: Callable[..., Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaFamily:
    """`parts`: the kinds of part the family takes ("image", "video", "audio") and their
    inputs. `mrope`: the language model's rotary positions are (time, height, width)
    triples, an image's tokens laid out on its grid (atom/model/vision/rope.py)."""

    architecture: str
    parts: Mapping[str, MediaInputs]
    mrope: bool = False


_QWEN_VL = {
    "image": MediaInputs(join={"pixel_values": 0, "image_grid_thw": 0}),
    "video": MediaInputs(join={"pixel_values_videos": 0, "video_grid_thw": 0}),
}

FAMILIES = {
    family.architecture: family
    for family in (
        # LLaVA-style: a CLIP/SigLIP tower and a projector; one fixed-size crop an image.
        MediaFamily(
            architecture="LlavaForConditionalGeneration",
            parts={"image": MediaInputs(join={"pixel_values": 0})},
        ),
        # Idefics3 / SmolVLM: a SigLIP tower and a pixel-shuffle connector over an image
        # split into crops (plus the whole image scaled down); one image's crops are
        # [1, crops, ...], and a batch of images one row of all their crops.
        MediaFamily(
            architecture="Idefics3ForConditionalGeneration",
            parts={"image": MediaInputs(join={"pixel_values": 1, "pixel_attention_mask": 1})},
        ),
        # Qwen2-VL: a ViT over patches of the image at its own resolution, merged 2x2;
        # an image's patches are rows of one [patches, features] tensor, its grid beside.
        MediaFamily(architecture="Qwen2VLForConditionalGeneration", parts=_QWEN_VL, mrope=True),
        # Qwen2.5-VL: the same inputs and positions; windowed attention in its tower.
        MediaFamily(architecture="Qwen2_5_VLForConditionalGeneration", parts=_QWEN_VL, mrope=True),
        # Audio Flamingo 3 (Ultravox-style): a Whisper encoder over each 30-second window
        # of the audio, pooled, and a projector; a clip's windows are rows of its tensors.
        MediaFamily(
            architecture="AudioFlamingo3ForConditionalGeneration",
            parts={"audio": MediaInputs(join={"input_features": 0, "input_features_mask": 0})},
        ),
        # Qwen2-Audio: a Whisper encoder over one 30-second window, pooled, a projector.
        MediaFamily(
            architecture="Qwen2AudioForConditionalGeneration",
            parts={
                "audio": MediaInputs(
                    join={"input_features": 0, "feature_attention_mask": 0},
                    encode=qwen2_audio_features,
                )
            },
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


def media_family(config: Any) -> MediaFamily | None:
    """The family of a model's config; None for a text-only model. ValueError for a
    vision- or audio-language architecture ATOM does not serve."""
    if all(getattr(config, f"{tower}_config", None) is None for tower in ("vision", "audio")):
        return None
    names = list(getattr(config, "architectures", None) or [])
    for name in names:
        if name in FAMILIES:
            return FAMILIES[name]
    raise ValueError(
        f"multimodal architecture {', '.join(names) or config.model_type} is not served "
        f"(served: {', '.join(sorted(FAMILIES))}; docs/multimodal.md)"
    )

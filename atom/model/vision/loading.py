"""Loading a vision- or audio-language model: transformers' model and processor from the
folder, then its language half behind ATOM's forward and its media half as the encoder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atom.model.vision.encoder import MediaEncoder
from atom.model.vision.families import MediaFamily, media_family
from atom.model.vision.grid_processor import GridProcessor
from atom.model.vision.prompter import Mark, MediaPrompter
from atom.model.vision.text_view import TextView, vision_half


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionParts:
    """What a vision- or audio-language model adds to a text model's runtime."""

    encoder: MediaEncoder  # runs in the runner's step
    prompter: MediaPrompter  # runs in the request's planning thread


def read_model(folder: Path, dtype: Any) -> tuple[Any, Any | None]:
    """transformers' model in `folder`, and its processor when it reads images or audio
    (None for a text-only model)."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoProcessor

    family = media_family(AutoConfig.from_pretrained(folder))
    if family is None:
        return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype), None
    model = getattr(transformers, family.architecture).from_pretrained(folder, dtype=dtype)
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

    family = media_family(vlm.config)
    assert family is not None
    if implementation == "transformers":
        raise ValueError("multimodal models run on ATOM's forward: use --model-impl auto")
    view = TextView(vlm)
    forward = own_forward(view, "atom", kernels=kernels)
    encoder = MediaEncoder(vision_half(vlm), family, view.dtype)
    config = vlm.config
    scale = getattr(getattr(config, "vision_config", None), "tokens_per_second", None)
    prompter = MediaPrompter(
        processor,
        _marks(processor, config, family),
        merge=int(config.vision_config.spatial_merge_size) if family.mrope else None,
        video_seconds_scale=(  # Qwen2.5-VL's
            None if scale is None else float(scale) * int(config.vision_config.temporal_patch_size)
        ),
        max_audio_seconds=_longest_clip(processor) if "audio" in family.parts else None,
    )
    return forward, VisionParts(encoder=encoder, prompter=prompter)


def _marks(processor: Any, config: Any, family: MediaFamily) -> dict[str, Mark]:
    """Each kind of part's placeholder (the processor's `<kind>_token`) and the token
    its rows replace (the config's `<kind>_token_id`); a kind the processor has no
    placeholder for is not taken (a Qwen2-VL folder saved without a video token)."""
    marks = {}
    for kind in family.parts:
        placeholder = getattr(processor, f"{kind}_token", None)
        if placeholder:
            placeholder_id = int(processor.tokenizer.convert_tokens_to_ids(str(placeholder)))
            target = int(getattr(config, f"{kind}_token_id"))
            marks[kind] = Mark(str(placeholder), placeholder_id, target)
    return marks


def _longest_clip(processor: Any) -> float:
    """The seconds of audio the processor takes whole: Audio Flamingo 3's as many whole
    windows as fit in `max_audio_len`, the others one window of their feature extractor."""
    window = float(processor.feature_extractor.chunk_length)
    longest = getattr(processor, "max_audio_len", None)
    return window if longest is None else float(longest // window) * window

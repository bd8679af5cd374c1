"""Tiny random vision-language models saved as Hugging Face folders, with the default
model's real tokenizer and a real image processor configuration, and images to show
them (PNG data URLs, made here)."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import torch

from atom.model.loader import load_tokenizer
from atom.vocabulary.config import Settings

IMAGE_TOKEN = "<image>"
# A chat template that writes IMAGE_TOKEN where a message's content has an image part.
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'video' %}<video>{% elif part['type'] == 'audio' %}<audio>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}


def tiny_llava(
    folder: Path,
    seed: int = 0,
    *,
    image_size: int = 32,
    patch: int = 8,
    vision_hidden: int = 32,
    vision_layers: int = 2,
    **text: Any,
) -> Path:
    """LLaVA: by default a 2-layer CLIP tower on 32x32 images in patches of 8 (16 image
    tokens, its CLS dropped), a projector, and a 2-layer Llama (TEXT, with `text` over
    it); saved with its processor."""
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = load_tokenizer(None, cache_dir=Settings().cache_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    tokenizer.chat_template = TEMPLATE
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=patch,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=TEMPLATE,
        image_token=IMAGE_TOKEN,
    )
    config = LlavaConfig(
        text_config=LlamaConfig(vocab_size=len(tokenizer), **{**TEXT, **text}),
        vision_config=CLIPVisionConfig(
            hidden_size=vision_hidden,
            intermediate_size=2 * vision_hidden,
            num_hidden_layers=vision_layers,
            num_attention_heads=4,
            image_size=image_size,
            patch_size=patch,
            projection_dim=vision_hidden,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def tiny_idefics3(folder: Path, seed: int = 0) -> Path:
    """Idefics3 (SmolVLM's architecture): a 2-layer SigLIP-style tower on 32x32 crops in
    patches of 8, a pixel-shuffle connector (scale 2: 4 image tokens a crop), a 2-layer
    Llama; an image is split into 32-pixel crops of its 64-pixel resize, plus itself
    scaled to 32 (a 40x30 picture: 4 crops and the global one, 20 image tokens framed by
    row/column tokens); saved with its processor."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        Idefics3VisionConfig,
        LlamaConfig,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    tokenizer = load_tokenizer(None, cache_dir=Settings().cache_dir)
    grid = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    frame = ["<fake_token_around_image>", IMAGE_TOKEN, "<end_of_utterance>", "<global-img>"]
    tokenizer.add_special_tokens({"additional_special_tokens": frame + grid})
    tokenizer.chat_template = TEMPLATE
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=True
    )
    processor = Idefics3Processor(
        image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4,
        chat_template=TEMPLATE,
    )  # fmt: skip
    config = Idefics3Config(
        text_config=LlamaConfig(vocab_size=len(tokenizer), **TEXT),
        vision_config=Idefics3VisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=32,
            patch_size=8,
        ),
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config).eval()
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


QWEN_TEMPLATE = TEMPLATE.replace("<image>", "<|vision_start|><|image_pad|><|vision_end|>").replace(
    "<video>", "<|vision_start|><|video_pad|><|vision_end|>"
)


def tiny_qwen2_5_vl(folder: Path, seed: int = 0) -> Path:
    """Qwen2.5-VL: as tiny_qwen2_vl, with Qwen2.5-VL's tower (windowed attention but in
    its last layer, a gated MLP) and language model."""
    return tiny_qwen2_vl(folder, seed, version="2.5")


def tiny_qwen2_vl(folder: Path, seed: int = 0, *, version: str = "2") -> Path:
    """Qwen2-VL: a 2-layer ViT on patches of 8 merged 2x2, at the image's own resolution
    within 16x16..48x48 pixels (a 40x30 picture: 32x32, a 1x2x2 merged grid, 4 image
    tokens), and a
    2-layer Qwen2-VL language model with multimodal rotary positions; saved with its
    tokenizer and image processor (its processor needs torchvision to be built)."""
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    tokenizer = load_tokenizer(None, cache_dir=Settings().cache_dir)
    marks = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": marks})
    tokenizer.chat_template = QWEN_TEMPLATE
    ids = {mark: tokenizer.convert_tokens_to_ids(mark) for mark in marks}
    text = {k: v for k, v in TEXT.items() if k != "tie_word_embeddings"}
    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}
    hidden = TEXT["hidden_size"]
    merge = {"patch_size": 8, "spatial_merge_size": 2, "temporal_patch_size": 2}
    if version == "2":
        config_cls, model_cls = Qwen2VLConfig, Qwen2VLForConditionalGeneration
        tower = {"depth": 2, "embed_dim": 32, "num_heads": 4, "hidden_size": hidden, **merge}
    else:
        config_cls, model_cls = Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
        tower = {
            "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 4,
            "out_hidden_size": hidden, "window_size": 16, "fullatt_block_indexes": [1], **merge,
        }  # fmt: skip
    config = config_cls(
        text_config={
            "vocab_size": len(tokenizer),
            "rope_parameters": rope,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            **text,
        },
        vision_config=tower,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    Qwen2VLImageProcessorPil(
        min_pixels=16 * 16, max_pixels=48 * 48, patch_size=8, merge_size=2, temporal_patch_size=2
    ).save_pretrained(folder)
    return folder


def picture(seed: int, size: tuple[int, int] = (40, 30), fmt: str = "PNG") -> Any:
    """A PIL image of random colored blocks (each seed its own picture)."""
    from PIL import Image

    generator = torch.Generator().manual_seed(seed)
    width, height = size
    blocks = torch.randint(0, 256, (height // 5 + 1, width // 5 + 1, 3), generator=generator)
    pixels = blocks.repeat_interleave(5, 0).repeat_interleave(5, 1)[:height, :width]
    return Image.fromarray(pixels.to(torch.uint8).numpy(), "RGB").convert(
        "P" if fmt == "GIF" else "RGB"
    )


def encoded(image: Any, fmt: str = "PNG") -> bytes:
    """`image`'s file in `fmt` (WebP lossless: its pixels come back exactly)."""
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return buffer.getvalue()


def data_url(image: Any, fmt: str = "PNG") -> str:
    """A base64 data URL of `image` in `fmt` (PNG, JPEG, WEBP, GIF)."""
    mime = {"PNG": "png", "JPEG": "jpeg", "WEBP": "webp", "GIF": "gif"}[fmt]
    return f"data:image/{mime};base64,{base64.b64encode(encoded(image, fmt)).decode()}"

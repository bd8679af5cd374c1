"""Tiny random audio-language models saved as Hugging Face folders, with the default
model's real tokenizer and Whisper's real feature extractor (fewer mel bins): Audio
Flamingo 3 (Ultravox-style) and Qwen2-Audio."""

from __future__ import annotations

from pathlib import Path

import torch

from atom.model.loader import load_tokenizer
from atom.vocabulary.config import Settings
from tests.vision_models import TEMPLATE, TEXT

MELS = 32  # the encoders' mel bins (the real models: 128)
ENCODER = {"num_hidden_layers": 2, "num_attention_heads": 4}
AF3_TEMPLATE = TEMPLATE.replace("<audio>", "<sound>")


def tiny_audioflamingo3(folder: Path, seed: int = 0, *, max_audio_len: int = 60) -> Path:
    """Audio Flamingo 3: a 2-layer Whisper-style encoder over each 30-second window
    (750 audio tokens a window after its pooling), a projector and a 2-layer Qwen2 of
    2048 positions; clips up to `max_audio_len` seconds. AF3_TEMPLATE writes `<sound>` for an audio
    part (and for a video part, which the model refuses before rendering)."""
    from transformers import (
        AudioFlamingo3Config,
        AudioFlamingo3ForConditionalGeneration,
        AudioFlamingo3Processor,
        WhisperFeatureExtractor,
    )

    tokenizer = load_tokenizer(None, cache_dir=Settings().cache_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<sound>"]})
    tokenizer.chat_template = AF3_TEMPLATE
    processor = AudioFlamingo3Processor(
        feature_extractor=WhisperFeatureExtractor(feature_size=MELS),
        tokenizer=tokenizer,
        chat_template=AF3_TEMPLATE,
        max_audio_len=max_audio_len,
    )
    config = AudioFlamingo3Config(
        audio_config={"num_mel_bins": MELS, "hidden_size": 32, "intermediate_size": 64, **ENCODER},
        text_config={"vocab_size": len(tokenizer), **TEXT, "max_position_embeddings": 2048},
        audio_token_id=tokenizer.convert_tokens_to_ids("<sound>"),
    )
    torch.manual_seed(seed)
    AudioFlamingo3ForConditionalGeneration(config).eval().save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


QWEN_AUDIO_TEMPLATE = TEMPLATE.replace("<audio>", "<|audio_bos|><|AUDIO|><|audio_eos|>")


def tiny_qwen2_audio(folder: Path, seed: int = 0) -> Path:
    """Qwen2-Audio: a 2-layer Whisper-style encoder over one 30-second window, pooled,
    a projector and a 2-layer Qwen2; its template frames `<|AUDIO|>` as Qwen2-Audio's."""
    from transformers import (
        Qwen2AudioConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        WhisperFeatureExtractor,
    )

    tokenizer = load_tokenizer(None, cache_dir=Settings().cache_dir)
    marks = ["<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": marks})
    tokenizer.chat_template = QWEN_AUDIO_TEMPLATE
    processor = Qwen2AudioProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=MELS),
        tokenizer=tokenizer,
        chat_template=QWEN_AUDIO_TEMPLATE,
    )
    config = Qwen2AudioConfig(
        audio_config={"num_mel_bins": MELS, "d_model": 32, "encoder_ffn_dim": 64,
                      "encoder_layers": 2, "encoder_attention_heads": 4},
        text_config={"model_type": "qwen2", "vocab_size": len(tokenizer), **TEXT},
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
    )  # fmt: skip
    torch.manual_seed(seed)
    Qwen2AudioForConditionalGeneration(config).eval().save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder

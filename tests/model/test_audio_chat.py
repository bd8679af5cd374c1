"""Audio parts on tiny random Audio Flamingo 3 and Qwen2-Audio models: ATOM's engine
answers a prompt holding audio clips as transformers' own `generate` does, token for
token, whole and with chunked prefill splitting a clip; the prompter refuses a clip
longer than the model hears."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from atom.http.audio_parts import LoadedAudio
from atom.model.loader import load_runtime
from atom.model.runner import Runtime
from atom.model.vision.prompter import ImageRefused
from atom.text.prompt import AUDIO_PART, TemplateControls, render_chat
from atom.vocabulary.config import Settings
from tests.audio_models import tiny_audioflamingo3, tiny_qwen2_audio
from tests.model.tiny import BLOCK, greedy_after, run_all

MAKERS: dict[str, Callable[[Path], Path]] = {
    "audioflamingo3": tiny_audioflamingo3,
    "qwen2_audio": tiny_qwen2_audio,
}


@pytest.fixture(scope="module", params=sorted(MAKERS))
def folder(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    name = str(request.param)
    return MAKERS[name](tmp_path_factory.mktemp(name))


def clip(seed: int, seconds: float) -> LoadedAudio:
    """Noise shaped by a slow tone, as 16 kHz samples (each seed its own clip)."""
    generator = np.random.default_rng(seed)
    n = int(seconds * 16_000)
    tone = np.sin(np.arange(n) * 2 * np.pi * (200 + 50 * seed) / 16_000)
    samples = (0.3 * tone + 0.05 * generator.standard_normal(n)).astype(np.float32)
    return LoadedAudio(samples=samples, sha256=f"{seed:064d}")


def audio_prompt(rt: Runtime, clips: list[LoadedAudio]) -> tuple[tuple[int, ...], Any]:
    assert rt.images is not None
    content = [*(AUDIO_PART for _ in clips), {"type": "text", "text": "What is said?"}]
    controls = TemplateControls(chat_template=rt.images.chat_template)
    ids = render_chat(rt.tokenizer, [{"role": "user", "content": content}], controls=controls)
    return rt.images.expand(ids, clips)


def reference(folder: Path, prompt: tuple[int, ...], images: Any) -> list[int]:
    """transformers' greedy continuation of the same prompt and audio tensors."""
    import transformers
    from transformers import AutoConfig

    name = AutoConfig.from_pretrained(folder).architectures[0]
    model = getattr(transformers, name).from_pretrained(folder, dtype=torch.float32).eval()
    tensors = {
        key: torch.cat([torch.as_tensor(image.pixels[key]) for image in images])
        for key in images[0].pixels
    }
    return greedy_after(model, torch.tensor([prompt]), **tensors)


@pytest.mark.parametrize("budget", [4096, 16])
def test_greedy_output_with_audio_equals_transformers_generate(folder: Path, budget: int) -> None:
    settings = {"model": (str(folder),), "kv_cache_memory_bytes": 8 << 20, "block_size": BLOCK}
    rt = load_runtime(Settings(**settings))
    prompt, clips = audio_prompt(rt, [clip(1, 2.0), clip(2, 1.0)])
    assert [c.ref.kind for c in clips] == ["audio", "audio"]
    assert [c.ref.num_tokens for c in clips] == [50, 25]  # 100 mel frames a second, /4
    want = reference(folder, prompt, clips)
    got, _ = run_all(rt.runner, [prompt], images=[clips], budget=budget)
    assert got == [want]


def test_a_clip_longer_than_the_model_hears_is_refused(folder: Path) -> None:
    rt = load_runtime(Settings(model=(str(folder),), kv_cache_memory_bytes=8 << 20))
    assert rt.images is not None and rt.images.takes("audio") and not rt.images.takes("image")
    longest = rt.images.max_audio_seconds
    assert longest == (60 if "audioflamingo3" in folder.name else 30)
    with pytest.raises(ImageRefused, match=f"this model hears at most {longest:g} s"):
        audio_prompt(rt, [clip(1, longest + 1)])

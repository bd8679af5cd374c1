"""Video parts on tiny random Qwen2-VL and Qwen2.5-VL models: a video's patches as
Qwen2-VL pairs frames in time, and ATOM's engine answering a video prompt as
transformers' own `generate` does, token for token, whole and with chunked prefill
splitting the video (Qwen2.5-VL's time positions step by its frames' seconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from atom.http.videos import LoadedVideo
from atom.model.loader import load_runtime
from atom.model.runner import Runtime
from atom.model.vision.grid_processor import video_patches
from atom.model.vision.rope import rope_positions
from atom.text.prompt import VIDEO_PART, TemplateControls, render_chat
from atom.vocabulary.config import Settings
from tests.model.tiny import BLOCK, greedy_after, run_all
from tests.vision_models import picture, tiny_qwen2_vl

FPS = 2.0  # the frames' rate as sampled


@pytest.fixture(scope="module", params=["2", "2.5"])
def folder(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    version = str(request.param)
    return tiny_qwen2_vl(tmp_path_factory.mktemp(f"qwen{version}_vl"), version=version)


def test_a_frame_shown_twice_is_the_image_processors_patches(folder: Path) -> None:
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(folder)
    frame = picture(1)
    video = video_patches(processor, [[frame, frame]])
    image = processor(images=[frame], return_tensors="pt")
    assert torch.equal(video["pixel_values_videos"], image["pixel_values"])
    assert video["video_grid_thw"].tolist() == image["image_grid_thw"].tolist()
    _, height, width = image["image_grid_thw"][0].tolist()
    odd = video_patches(processor, [[picture(1), picture(2), picture(3)]])  # the last repeated
    assert odd["video_grid_thw"].tolist() == [[2, height, width]]
    second = video_patches(processor, [[picture(3), picture(3)]])["pixel_values_videos"]
    assert torch.equal(odd["pixel_values_videos"][height * width :], second)


def video_prompt(rt: Runtime, frames: list[Any]) -> tuple[tuple[int, ...], Any]:
    assert rt.images is not None
    conversation = [{"role": "user", "content": [VIDEO_PART, {"type": "text", "text": "What?"}]}]
    controls = TemplateControls(chat_template=rt.images.chat_template)
    ids = render_chat(rt.tokenizer, conversation, controls=controls)
    video = LoadedVideo(frames=tuple(frames), sha256="0" * 64, seconds=2.0, fps=FPS)
    return rt.images.expand(ids, [video])


def reference(folder: Path, prompt: tuple[int, ...], pixels: dict[str, Any]) -> list[int]:
    """transformers' greedy continuation of the same prompt and video tensors."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    kinds = (ids == model.config.video_token_id).int() * 2  # text 0, image 1, video 2
    if model.config.model_type == "qwen2_5_vl":  # the seconds each temporal patch spans
        pixels = {**pixels, "second_per_grid_ts": torch.tensor([2 / FPS])}
    return greedy_after(model, ids, mm_token_type_ids=kinds, **pixels)


@pytest.mark.parametrize("budget", [4096, 8])
def test_greedy_output_with_a_video_equals_transformers_generate(folder: Path, budget: int) -> None:
    settings = {"model": (str(folder),), "kv_cache_memory_bytes": 8 << 20, "block_size": BLOCK}
    rt = load_runtime(Settings(**settings))
    prompt, [video] = video_prompt(rt, [picture(s) for s in (1, 2, 3, 4)])
    assert video.ref.kind == "video" and video.grid[0] == 2  # four frames: two in time
    assert video.ref.num_tokens == 2 * video.grid[1] * video.grid[2]
    want = reference(folder, prompt, dict(video.pixels))
    got, _ = run_all(rt.runner, [prompt], images=[(video,)], budget=budget)
    assert got == [want]


def test_a_videos_rotary_positions_are_transformers(folder: Path) -> None:
    """ATOM's positions for a prompt with a video (atom/model/vision/rope.py) equal the
    model's own `get_rope_index`: Qwen2.5-VL's time positions step by tokens_per_second
    times each temporal patch's seconds, Qwen2-VL's by one."""
    from transformers import AutoModelForImageTextToText

    settings = {"model": (str(folder),), "kv_cache_memory_bytes": 8 << 20, "block_size": BLOCK}
    rt = load_runtime(Settings(**settings))
    frames = [picture(s) for s in range(1, 7)]  # three temporal patches
    prompt, [video] = video_prompt(rt, frames)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    extra = {}
    if model.config.model_type == "qwen2_5_vl":
        extra["second_per_grid_ts"] = torch.tensor([2 / FPS])
    want, _ = model.model.get_rope_index(
        ids,
        (ids == model.config.video_token_id).int() * 2,
        video_grid_thw=video.pixels["video_grid_thw"],
        **extra,
    )
    got = rope_positions(0, len(prompt), [video])
    assert [list(row) for row in got] == want[:, 0].tolist()

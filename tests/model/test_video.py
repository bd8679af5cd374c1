"""Video parts on a tiny random Qwen2-VL: a video's patches as Qwen2-VL pairs frames in
time, and ATOM's engine answering a video prompt as transformers' own `generate` does,
token for token, beside an image prompt and with chunked prefill splitting the video."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from atom.http.videos import LoadedVideo
from atom.model.loader import load_runtime
from atom.model.runner import Runtime
from atom.model.vision.grid_processor import video_patches
from atom.text.prompt import VIDEO_PART, TemplateControls, render_chat
from atom.vocabulary.config import Settings
from tests.model.tiny import BLOCK, GREEDY, run_all
from tests.vision_models import picture, tiny_qwen2_vl


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_qwen2_vl(tmp_path_factory.mktemp("qwen2_vl"))


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
    video = LoadedVideo(frames=tuple(frames), sha256="0" * 64, seconds=2.0)
    return rt.images.expand(ids, [video])


def reference(folder: Path, prompt: tuple[int, ...], pixels: dict[str, Any]) -> list[int]:
    """transformers' greedy continuation of the same prompt and video tensors."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    kinds = (ids == model.config.video_token_id).int() * 2  # text 0, image 1, video 2
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        mm_token_type_ids=kinds,
        **pixels,
        max_new_tokens=GREEDY.max_tokens,
        min_new_tokens=GREEDY.max_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


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

"""Qwen2-VL's processor: transformers builds the model's own processor only with
torchvision installed (for its video half), which ATOM does not need. Images go
through the model's image processor; a video's frames too, each as an image, then
their patches are paired in time as Qwen2-VL's video processor pairs them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class GridProcessor:
    """The processor calls MediaPrompter makes: an image's (or a video's) patches, and
    its placeholder repeated once per merged patch of its grid."""

    def __init__(
        self,
        tokenizer: Any,
        image_processor: Any,
        image_token: str,
        merge: int,
        video_token: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token = image_token
        self.video_token = video_token
        self.chat_template = getattr(tokenizer, "chat_template", None)
        self._merge = merge

    def __call__(
        self,
        *,
        text: str,
        return_tensors: str,
        add_special_tokens: bool,
        images: list[Any] | None = None,
        videos: list[Sequence[Any]] | None = None,
    ) -> dict[str, Any]:
        if videos:
            assert self.video_token is not None
            pixels = video_patches(self.image_processor, videos)
            grids, token = pixels["video_grid_thw"], self.video_token
        else:
            pixels = dict(self.image_processor(images=images, return_tensors=return_tensors))
            grids, token = pixels["image_grid_thw"], self.image_token
        counts = iter(int(grid.prod()) // self._merge**2 for grid in grids)
        pieces = text.split(token)
        expanded = pieces[0] + "".join(token * next(counts) + p for p in pieces[1:])
        encoded = self.tokenizer(
            expanded, add_special_tokens=add_special_tokens, return_tensors=return_tensors
        )
        return {"input_ids": encoded["input_ids"], **pixels}


def video_patches(image_processor: Any, videos: list[Sequence[Any]]) -> dict[str, torch.Tensor]:
    """Each video's `pixel_values_videos` rows and `video_grid_thw`: every frame made
    patches by the image processor (which repeats one image over the patch's
    `temporal_patch_size` frames), then each run of that many frames put in one patch,
    frame by frame (an odd last run filled with its last frame, as Qwen2-VL's video
    processor pads)."""
    span = int(image_processor.temporal_patch_size)
    rows: list[torch.Tensor] = []
    grids: list[list[int]] = []
    for frames in videos:
        frames = list(frames) + [frames[-1]] * (-len(frames) % span)
        out = image_processor(images=frames, return_tensors="pt")
        _, height, width = (int(n) for n in out["image_grid_thw"][0])
        values = out["pixel_values"]  # [frames * h * w, channels * span * patch * patch]
        patch = int(image_processor.patch_size)
        one = values.reshape(len(frames), height * width, -1, span, patch, patch)[:, :, :, 0]
        paired = one.reshape(len(frames) // span, span, height * width, -1, patch, patch)
        rows.append(paired.permute(0, 2, 3, 1, 4, 5).reshape(-1, values.shape[-1]))
        grids.append([len(frames) // span, height, width])
    return {"pixel_values_videos": torch.cat(rows), "video_grid_thw": torch.tensor(grids)}

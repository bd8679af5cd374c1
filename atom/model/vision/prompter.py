"""A conversation's images and videos → prompt token ids and PromptImages, by the
model's own processor. Runs in the request's planning thread.

The chat template (`ImagePrompter.chat_template`, atom/text/prompt.py renders it)
writes each image (or video) as the processor's placeholder token; each placeholder is
then replaced by the token run the processor expands it to (for LLaVA N copies of the
image token; other families frame them with text tokens; a Qwen2-VL video one token per
merged patch of its frames' grid), and its processor tensors are kept for the vision
encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from atom.vocabulary.images import ImageRef, PromptImage


class ImageRefused(ValueError):
    """The model's processor could not take image `index` of the prompt."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index


class ImagePrompter:
    def __init__(
        self,
        processor: Any,
        image_token_id: int,
        merge: int | None = None,
        video_token_id: int | None = None,
        video_seconds_scale: float | None = None,
    ) -> None:
        """`merge`: the vision tower's spatial merge, for a model whose rotary positions
        follow each image's grid (PromptImage.grid); None for the others.
        `video_token_id`: where a video's rows go (None: the model takes no video).
        `video_seconds_scale`: a video's time positions step by this over its frames a
        second (Qwen2.5-VL: tokens_per_second x temporal_patch_size); None: by one
        (Qwen2-VL)."""
        self._processor = processor
        self.tokenizer = processor.tokenizer
        self._placeholder = str(processor.image_token)
        self._placeholder_id = int(self.tokenizer.convert_tokens_to_ids(self._placeholder))
        self._image_token_id = image_token_id  # where the encoder's rows go
        self._merge = merge
        self.takes_video = video_token_id is not None
        self._seconds_scale = video_seconds_scale
        self._video_token_id = video_token_id
        video = getattr(processor, "video_token", None)
        self._video_placeholder = str(video) if self.takes_video and video else None
        self._video_placeholder_id = (
            int(self.tokenizer.convert_tokens_to_ids(video)) if self._video_placeholder else None
        )
        # The processor's template knows image parts (None: the tokenizer's).
        self.chat_template: str | None = getattr(processor, "chat_template", None)

    def expand(
        self, ids: Sequence[int], images: Sequence[Any]
    ) -> tuple[tuple[int, ...], tuple[PromptImage, ...]]:
        """`ids`: a conversation rendered by `chat_template`, one placeholder token
        where each of `images` (LoadedImage or LoadedVideo, in order) goes. Raises
        ValueError when the template placed another number of them, ImageRefused when
        the processor cannot take one (Qwen2-VL's refuses an aspect ratio over 200, say)."""
        marks = {self._placeholder_id, self._video_placeholder_id}
        slots = [i for i, token in enumerate(ids) if token in marks]
        if len(slots) != len(images):
            raise ValueError(
                f"the chat template placed {len(slots)} images, the messages hold {len(images)}"
            )
        prompt: list[int] = []
        placed: list[PromptImage] = []
        last = 0
        for index, (slot, item) in enumerate(zip(slots, images, strict=True)):
            prompt.extend(ids[last:slot])
            if (ids[slot] == self._placeholder_id) != (item.kind == "image"):
                raise ValueError(f"the chat template placed part {index} as another kind")
            expansion, image = self._placed(index, item, len(prompt))
            placed.append(image)
            prompt.extend(expansion)
            last = slot + 1
        prompt.extend(ids[last:])
        return tuple(prompt), tuple(placed)

    def _placed(self, index: int, item: Any, offset: int) -> tuple[list[int], PromptImage]:
        """The tokens item `index` (an image or a video) stands for, placed from prompt
        position `offset`, and its PromptImage."""
        try:
            expansion, pixels = self._expand(item)
        except Exception as exc:  # processors raise what they like for odd images
            raise ImageRefused(index, f"the model's processor refused it: {exc}") from None
        target = self._image_token_id if item.kind == "image" else self._video_token_id
        positions = tuple(offset + j for j, t in enumerate(expansion) if t == target)
        width, height = item.size
        ref = ImageRef(
            sha256=item.sha256,
            width=width,
            height=height,
            num_tokens=len(positions),
            offset=positions[0],
            kind=item.kind,
        )
        grid = self._grid(pixels, item.kind)
        step = 1.0
        if item.kind == "video" and self._seconds_scale is not None:
            step = self._seconds_scale / item.fps
        image = PromptImage(ref=ref, positions=positions, pixels=pixels, grid=grid, time_step=step)
        return expansion, image

    def _grid(self, pixels: dict[str, Any], kind: str) -> tuple[int, ...]:
        """The image's (or video's) tokens as (time, height, width), for grid-following
        positions."""
        if self._merge is None:
            return ()
        t, h, w = (int(n) for n in pixels[f"{kind}_grid_thw"][0])
        return t, h // self._merge, w // self._merge

    def _expand(self, item: Any) -> tuple[list[int], dict[str, Any]]:
        """The tokens one image or video stands for in a prompt, and its tensors for the
        encoder."""
        media = (
            {"text": self._video_placeholder, "videos": [item.frames]}
            if item.kind == "video"
            else {"text": self._placeholder, "images": [item.image]}
        )
        out = self._processor(**media, return_tensors="pt", add_special_tokens=False)
        ids = [int(t) for t in out["input_ids"][0]]
        pixels = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask")}
        return ids, pixels

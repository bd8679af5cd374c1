"""A conversation's images → prompt token ids and PromptImages, by the model's own
processor. Runs in the request's planning thread.

The chat template (`ImagePrompter.chat_template`, atom/text/prompt.py renders it)
writes each image as the processor's placeholder token; each placeholder is then
replaced by the token run the processor expands that image to (for LLaVA N copies of
the image token; other families frame them with text tokens), and the image's
processor tensors are kept for the vision encoder.
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
    def __init__(self, processor: Any, image_token_id: int, merge: int | None = None) -> None:
        """`merge`: the vision tower's spatial merge, for a model whose rotary positions
        follow each image's grid (PromptImage.grid); None for the others."""
        self._processor = processor
        self.tokenizer = processor.tokenizer
        self._placeholder = str(processor.image_token)
        self._placeholder_id = int(self.tokenizer.convert_tokens_to_ids(self._placeholder))
        self._image_token_id = image_token_id  # where the encoder's rows go
        self._merge = merge
        # The processor's template knows image parts (None: the tokenizer's).
        self.chat_template: str | None = getattr(processor, "chat_template", None)

    def expand(
        self, ids: Sequence[int], images: Sequence[Any]
    ) -> tuple[tuple[int, ...], tuple[PromptImage, ...]]:
        """`ids`: a conversation rendered by `chat_template`, one placeholder token
        where each of `images` (LoadedImage, in order) goes. Raises ValueError when the
        template placed another number of images, ImageRefused when the processor cannot
        take one (Qwen2-VL's refuses an aspect ratio over 200, say)."""
        slots = [i for i, token in enumerate(ids) if token == self._placeholder_id]
        if len(slots) != len(images):
            raise ValueError(
                f"the chat template placed {len(slots)} images, the messages hold {len(images)}"
            )
        prompt: list[int] = []
        placed: list[PromptImage] = []
        last = 0
        for index, (slot, image) in enumerate(zip(slots, images, strict=True)):
            prompt.extend(ids[last:slot])
            try:
                expansion, pixels = self._expand(image.image)
            except Exception as exc:  # processors raise what they like for odd images
                raise ImageRefused(index, f"the model's processor refused it: {exc}") from None
            positions = tuple(
                len(prompt) + j for j, t in enumerate(expansion) if t == self._image_token_id
            )
            width, height = image.size
            ref = ImageRef(
                sha256=image.sha256,
                width=width,
                height=height,
                num_tokens=len(positions),
                offset=positions[0],
            )
            grid = self._grid(pixels)
            placed.append(PromptImage(ref=ref, positions=positions, pixels=pixels, grid=grid))
            prompt.extend(expansion)
            last = slot + 1
        prompt.extend(ids[last:])
        return tuple(prompt), tuple(placed)

    def _grid(self, pixels: dict[str, Any]) -> tuple[int, ...]:
        """The image's tokens as (time, height, width), for grid-following positions."""
        if self._merge is None:
            return ()
        t, h, w = (int(n) for n in pixels["image_grid_thw"][0])
        return t, h // self._merge, w // self._merge

    def _expand(self, image: Any) -> tuple[list[int], dict[str, Any]]:
        """The tokens one image stands for in a prompt, and its tensors for the encoder."""
        out = self._processor(
            text=self._placeholder, images=[image], return_tensors="pt", add_special_tokens=False
        )
        ids = [int(t) for t in out["input_ids"][0]]
        pixels = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask")}
        return ids, pixels

"""Qwen2-VL's processor, for images only: transformers builds the model's own processor
only with torchvision installed (for its video half), which ATOM does not need."""

from __future__ import annotations

from typing import Any


class GridProcessor:
    """The processor calls ImagePrompter makes: an image's patches by the model's image
    processor, and its placeholder repeated once per merged patch of its grid."""

    def __init__(self, tokenizer: Any, image_processor: Any, image_token: str, merge: int) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token = image_token
        self.chat_template = getattr(tokenizer, "chat_template", None)
        self._merge = merge

    def __call__(
        self, *, text: str, images: list[Any], return_tensors: str, add_special_tokens: bool
    ) -> dict[str, Any]:
        pixels = dict(self.image_processor(images=images, return_tensors=return_tensors))
        counts = iter(int(grid.prod()) // self._merge**2 for grid in pixels["image_grid_thw"])
        pieces = text.split(self.image_token)
        expanded = pieces[0] + "".join(self.image_token * next(counts) + p for p in pieces[1:])
        encoded = self.tokenizer(
            expanded, add_special_tokens=add_special_tokens, return_tensors=return_tensors
        )
        return {"input_ids": encoded["input_ids"], **pixels}

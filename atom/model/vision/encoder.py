"""The vision encoder in the engine's step: every image a step's chunks need, of every
request, encoded in one call of the model's own `get_image_features` (and every video
in one of its `get_video_features`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from atom.model.vision.families import VisionFamily
from atom.vocabulary.images import PromptImage


class VisionEncoder:
    """`vision`: the module with `get_image_features` (text_view.vision_half)."""

    def __init__(self, vision: Any, family: VisionFamily, dtype: torch.dtype) -> None:
        self._vision = vision
        self._family = family
        self._dtype = dtype
        self.device = next(vision.parameters()).device
        self.mrope = family.mrope  # the language model's positions follow image grids

    def encode(self, images: Sequence[PromptImage]) -> list[torch.Tensor]:
        """Each image's (or video's) rows [its placeholder count, hidden], in order."""
        found: dict[int, torch.Tensor] = {}
        for kind in ("image", "video"):
            picked = [i for i, image in enumerate(images) if image.ref.kind == kind]
            if picked:
                rows = self._encode(kind, [images[i] for i in picked])
                found.update(zip(picked, rows, strict=True))
        return [found[i] for i in range(len(images))]

    def _encode(self, kind: str, images: list[PromptImage]) -> list[torch.Tensor]:
        join = self._family.join if kind == "image" else self._family.video_join
        batch: dict[str, torch.Tensor] = {}
        for key, dim in join.items():
            joined = torch.cat([torch.as_tensor(i.pixels[key]) for i in images], dim=dim)
            joined = joined.to(self.device)
            batch[key] = joined.to(self._dtype) if joined.is_floating_point() else joined
        features = getattr(self._vision, f"get_{kind}_features")
        out = features(**batch).pooler_output
        pieces = out if isinstance(out, list | tuple) else [out]
        rows = torch.cat([p.reshape(-1, p.shape[-1]) for p in pieces])
        sizes = [len(image.positions) for image in images]
        if rows.shape[0] != sum(sizes):
            raise RuntimeError(
                f"the vision encoder gave {rows.shape[0]} rows for {sum(sizes)} placeholders"
            )
        return list(rows.split(sizes))

"""The media encoders in the engine's step: every image a step's chunks need, of every
request, encoded in one call of the model's own `get_image_features` (every video in one
of its `get_video_features`, every audio clip in one of its `get_audio_features`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from atom.model.vision.families import MediaFamily
from atom.vocabulary.images import PromptImage


class MediaEncoder:
    """`vision`: the module with `get_image_features` (text_view.vision_half), or its
    audio counterpart."""

    def __init__(self, vision: Any, family: MediaFamily, dtype: torch.dtype) -> None:
        self._vision = vision
        self._family = family
        self._dtype = dtype
        self.device = next(vision.parameters()).device
        self.mrope = family.mrope  # the language model's positions follow image grids

    def encode(self, images: Sequence[PromptImage]) -> list[torch.Tensor]:
        """Each part's (image, video or audio clip) rows [its placeholder count, hidden],
        in order."""
        found: dict[int, torch.Tensor] = {}
        for kind in self._family.parts:
            picked = [i for i, image in enumerate(images) if image.ref.kind == kind]
            if picked:
                rows = self._encode(kind, [images[i] for i in picked])
                found.update(zip(picked, rows, strict=True))
        return [found[i] for i in range(len(images))]

    def _encode(self, kind: str, images: list[PromptImage]) -> list[torch.Tensor]:
        inputs = self._family.parts[kind]
        batch: dict[str, torch.Tensor] = {}
        for key, dim in inputs.join.items():
            joined = torch.cat([torch.as_tensor(i.pixels[key]) for i in images], dim=dim)
            joined = joined.to(self.device)
            batch[key] = joined.to(self._dtype) if joined.is_floating_point() else joined
        if inputs.encode is None:
            out = getattr(self._vision, f"get_{kind}_features")(**batch).pooler_output
        else:
            out = inputs.encode(self._vision, **batch).pooler_output
        pieces = out if isinstance(out, list | tuple) else [out]
        rows = torch.cat([p.reshape(-1, p.shape[-1]) for p in pieces])
        sizes = [len(image.positions) for image in images]
        if rows.shape[0] != sum(sizes):
            raise RuntimeError(
                f"the {kind} encoder gave {rows.shape[0]} rows for {sum(sizes)} placeholders"
            )
        return list(rows.split(sizes))

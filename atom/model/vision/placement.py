"""Where a step's image rows go: the encoder's output for each image, computed once per
sequence, placed at the image's placeholder positions of the step's flat batch.

A prompt split by chunked prefill (or cut by a prefix-cache hit) can leave an image's
placeholders in several steps: its rows are kept per sequence until the chunk that
holds its last placeholder has run, so each image is encoded once."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import torch

from atom.model.runner import SeqChunk
from atom.model.vision.encoder import MediaEncoder
from atom.model.vision.rope import rope_positions
from atom.vocabulary.images import PromptImage

Key = tuple[str, int]  # (sequence, the image's first placeholder position)


class ImageRows:
    """Owned by the runner; called from its one worker thread."""

    def __init__(self, encoder: MediaEncoder) -> None:
        self._encoder = encoder
        self._rows: dict[Key, torch.Tensor] = {}

    def embeds(self, chunks: Sequence[SeqChunk]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(flat-batch rows, their embeddings) for every placeholder in `chunks`; None
        when the step holds none. New images of every chunk are encoded in one call."""
        held = [(chunk, _held(chunk)) for chunk in chunks]
        if not any(images for _, images in held):
            return None
        self._encode_missing(held)
        rows: list[int] = []
        values: list[torch.Tensor] = []
        offset = 0
        for chunk, images in held:
            start, stop = chunk.start_pos, chunk.start_pos + len(chunk.token_ids)
            for image in images:
                key = (chunk.seq_id, image.positions[0])
                first = bisect_left(image.positions, start)
                last = bisect_left(image.positions, stop)
                rows.extend(offset + p - start for p in image.positions[first:last])
                values.append(self._rows[key][first:last])
                if stop >= image.end:
                    del self._rows[key]  # its last placeholder is in this step
            offset += len(chunk.token_ids)
        device = values[0].device
        return torch.tensor(rows, dtype=torch.long, device=device), torch.cat(values)

    def _encode_missing(self, held: list[tuple[SeqChunk, list[PromptImage]]]) -> None:
        missing: dict[Key, PromptImage] = {}
        for chunk, images in held:
            for image in images:
                key = (chunk.seq_id, image.positions[0])
                if key not in self._rows:
                    missing[key] = image
        if missing:
            encoded = self._encoder.encode(list(missing.values()))
            self._rows.update(zip(missing, encoded, strict=True))

    def positions(self, chunks: Sequence[SeqChunk]) -> torch.Tensor | None:
        """The step's [3, 1, tokens] rotary positions when the model's follow each image's
        grid (atom/model/vision/rope.py); None when they are the sequence positions."""
        if not self._encoder.mrope:
            return None
        rows: tuple[list[int], list[int], list[int]] = ([], [], [])
        for chunk in chunks:
            stop = chunk.start_pos + len(chunk.token_ids)
            for row, part in zip(
                rows, rope_positions(chunk.start_pos, stop, chunk.images), strict=True
            ):
                row.extend(part)
        return torch.tensor(rows, dtype=torch.long, device=self._encoder.device)[:, None, :]

    def release(self, seq_id: str) -> None:
        """Forget a sequence's rows (finished or aborted). A preempted sequence keeps
        those of images it had not passed; its recomputation uses them again."""
        for key in [k for k in self._rows if k[0] == seq_id]:
            del self._rows[key]


def _held(chunk: SeqChunk) -> list[PromptImage]:
    """The chunk's images with placeholders in it."""
    start, stop = chunk.start_pos, chunk.start_pos + len(chunk.token_ids)
    return [image for image in chunk.images if image.end > start and image.positions[0] < stop]

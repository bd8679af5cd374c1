"""Multimodal rotary positions (Qwen2-VL): each token's (time, height, width) position.

A text token's three positions are equal. An image's tokens, laid out on its grid of
t x h x w merged patches, start at the position the token before them would have had
plus one, and count along their own axis; the text after an image goes on from that
start plus max(h, w), so every image shifts the positions after it by max(h, w) minus
its token count. (transformers' `get_rope_index` computes the same for a whole prompt;
here any chunk of a sequence gets its own positions, a decode step's too.)
"""

from __future__ import annotations

from collections.abc import Sequence

from atom.vocabulary.images import PromptImage


def rope_positions(
    start: int, stop: int, images: Sequence[PromptImage]
) -> tuple[list[int], list[int], list[int]]:
    """The three position rows of sequence positions [start, stop); `images`: every
    image of the sequence that begins before `stop`, in prompt order."""
    rows: tuple[list[int], list[int], list[int]] = ([], [], [])
    shift = 0  # of the positions after the images passed so far
    p = start
    for image in images:
        first, end = image.positions[0], image.end
        _, height, width = image.grid
        for q in range(max(p, start), min(first, stop)):  # text before this image
            for row in rows:
                row.append(q + shift)
        base = first + shift
        for q in range(max(first, start), min(end, stop)):
            t, rest = divmod(q - first, height * width)
            h, w = divmod(rest, width)
            rows[0].append(base + int(t * image.time_step))
            rows[1].append(base + h)
            rows[2].append(base + w)
        shift += max(height, width) - (end - first)
        p = end
    for q in range(max(p, start), stop):  # text after the last image, and the output
        for row in rows:
            row.append(q + shift)
    return rows

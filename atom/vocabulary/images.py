"""Images in a prompt: what the request log records of each, and what the engine gets.

A chat message's image becomes a run of placeholder tokens in the prompt (the model's
processor decides how many, and which text tokens frame them); the vision encoder's
output rows replace those placeholders' embeddings. `ImageRef` is plain data (the
request log's `request_accepted` lists them: no pixels, no bytes); `PromptImage` adds
the processor's tensors, which travel with the Batcher's Submit and are never logged;
the logged request body keeps no image bytes either (`without_image_bytes`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageRef:
    """One image of a prompt: its content hash (sha256 of the decoded RGB pixels and
    their size, so the same picture as PNG or WebP is the same image), its size, and
    the prompt tokens it fills: `num_tokens` rows of the encoder's output, the first at
    prompt position `offset`."""

    sha256: str
    width: int
    height: int
    num_tokens: int
    offset: int
    # or "video": its frames' hash and size, all its frames' tokens; or "audio": the hash
    # of its 16 kHz samples, a size of 0x0
    kind: str = "image"


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptImage:
    """An image as the runner consumes it: `positions` are the prompt positions that
    take the encoder's output rows, in order (the placeholder tokens of its span);
    `pixels` the processor's tensors for this image alone (pixel_values, ...)."""

    ref: ImageRef
    positions: tuple[int, ...]
    pixels: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # (time, height, width) of its tokens, for a model whose rotary positions follow the
    # image's grid (Qwen2-VL); empty for the others
    grid: tuple[int, ...] = ()
    time_step: float = 1.0  # a video's positions per step of its time grid (Qwen2.5-VL)

    @property
    def end(self) -> int:
        """One past its last placeholder position."""
        return self.positions[-1] + 1


def spans(images: tuple[PromptImage, ...]) -> tuple[tuple[int, int, str], ...]:
    """(first position, end, hash) of each image: what prefix-cache keys cover."""
    return tuple((image.positions[0], image.end, image.ref.sha256) for image in images)


DATA_URL = re.compile(r"data:[\w.+-]+/[\w.+-]+(;[^,]*)?,")


def without_image_bytes(value: Any) -> Any:
    """A request body with each `data:` URL (and each `input_audio` part's base64) replaced
    by a note of its media type, length and sha256 (of the text): the request log keeps
    no image or audio bytes. The parts themselves are in `request_accepted`'s ImageRefs,
    in the order the body holds them."""
    if isinstance(value, dict):
        return {key: _without(key, item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_image_bytes(item) for item in value]
    if isinstance(value, str) and DATA_URL.match(value):
        return _omitted(value.partition(",")[0], value)
    return value


def _without(key: str, value: Any) -> Any:
    if key == "input_audio" and isinstance(value, dict) and isinstance(value.get("data"), str):
        return {**value, "data": _omitted("base64", value["data"])}
    return without_image_bytes(value)


def _omitted(head: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{head},(omitted: {len(text)} characters, sha256 {digest})"

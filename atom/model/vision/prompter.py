"""A conversation's images, videos and audio clips → prompt token ids and PromptImages,
by the model's own processor. Runs in the request's planning thread.

The chat template (`MediaPrompter.chat_template`, atom/text/prompt.py renders it)
writes each part as the processor's placeholder token for its kind; each placeholder is
then replaced by the token run the processor expands it to (for LLaVA N copies of the
image token; other families frame them with text tokens; a Qwen2-VL video one token per
merged patch of its frames' grid; an audio clip one token per pooled encoder frame), and
its processor tensors are kept for the encoder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from atom.vocabulary.images import ImageRef, PromptImage


class ImageRefused(ValueError):
    """The model's processor could not take image `index` of the prompt."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index


@dataclass(frozen=True, slots=True)
class Mark:
    """Where one kind of part goes: the placeholder token the chat template writes (the
    processor expands it), and the token whose positions take the encoder's rows."""

    placeholder: str
    placeholder_id: int
    target_id: int


# The processor's argument for each kind of part.
ARGUMENTS = {"image": "images", "video": "videos", "audio": "audio"}


class MediaPrompter:
    def __init__(
        self,
        processor: Any,
        marks: Mapping[str, Mark],
        *,
        merge: int | None = None,
        video_seconds_scale: float | None = None,
        max_audio_seconds: float | None = None,
    ) -> None:
        """`marks`: the kinds of part the model takes ("image", "video", "audio").
        `merge`: the vision tower's spatial merge, for a model whose rotary positions
        follow each image's grid (PromptImage.grid); None for the others.
        `video_seconds_scale`: a video's time positions step by this over its frames a
        second (Qwen2.5-VL: tokens_per_second x temporal_patch_size); None: by one
        (Qwen2-VL). `max_audio_seconds`: the longest clip the model hears (its
        processor would cut a longer one short)."""
        self._processor = processor
        self.tokenizer = processor.tokenizer
        self._marks = dict(marks)
        self.kinds = tuple(self._marks)  # the kinds of part it takes, as `marks` orders them
        self._merge = merge
        self._seconds_scale = video_seconds_scale
        self.max_audio_seconds = max_audio_seconds
        # The processor's template knows media parts (None: the tokenizer's).
        self.chat_template: str | None = getattr(processor, "chat_template", None)

    def takes(self, kind: str) -> bool:
        """Whether the model takes parts of `kind` ("image", "video", "audio")."""
        return kind in self.kinds

    def expand(
        self, ids: Sequence[int], images: Sequence[Any]
    ) -> tuple[tuple[int, ...], tuple[PromptImage, ...]]:
        """`ids`: a conversation rendered by `chat_template`, one placeholder token
        where each of `images` (LoadedImage, LoadedVideo or LoadedAudio, in order)
        goes. Raises ValueError when the template placed another number of them,
        ImageRefused when the processor cannot take one (Qwen2-VL's refuses an aspect
        ratio over 200, say)."""
        kinds = {mark.placeholder_id: kind for kind, mark in self._marks.items()}
        slots = [i for i, token in enumerate(ids) if token in kinds]
        if len(slots) != len(images):
            raise ValueError(
                f"the chat template placed {len(slots)} media parts, the messages hold "
                f"{len(images)}"
            )
        prompt: list[int] = []
        placed: list[PromptImage] = []
        last = 0
        for index, (slot, item) in enumerate(zip(slots, images, strict=True)):
            prompt.extend(ids[last:slot])
            if kinds[ids[slot]] != item.kind:
                raise ValueError(f"the chat template placed part {index} as another kind")
            expansion, image = self._placed(index, item, len(prompt))
            placed.append(image)
            prompt.extend(expansion)
            last = slot + 1
        prompt.extend(ids[last:])
        return tuple(prompt), tuple(placed)

    def _placed(self, index: int, item: Any, offset: int) -> tuple[list[int], PromptImage]:
        """The tokens item `index` (an image, a video or an audio clip) stands for,
        placed from prompt position `offset`, and its PromptImage."""
        longest = self.max_audio_seconds
        if item.kind == "audio" and longest is not None and item.seconds > longest:
            raise ImageRefused(
                index, f"the clip is {item.seconds:.1f} s; this model hears at most {longest:g} s"
            )
        try:
            expansion, pixels = self._expand(item)
        except Exception as exc:  # processors raise what they like for odd images
            raise ImageRefused(index, f"the model's processor refused it: {exc}") from None
        target = self._marks[item.kind].target_id
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
        """The tokens one part stands for in a prompt, and its tensors for the encoder."""
        media = {"text": self._marks[item.kind].placeholder, ARGUMENTS[item.kind]: [item.content]}
        out = self._processor(**media, return_tensors="pt", add_special_tokens=False)
        ids = [int(t) for t in out["input_ids"][0]]
        pixels = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask")}
        return ids, pixels

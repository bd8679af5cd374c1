"""Video files to the frames a video-language model sees: RGB frames sampled in time.

Decoded with PyAV (FFmpeg's libraries, as atom/audio/decode.py), frame by frame as a
stream: only the frames kept are held, so memory is bounded by `max_frames`, not by the
video's length. Frames are taken `fps` a second (the first at 0 s); a video longer than
`max_frames / fps` seconds gives `max_frames` frames spread evenly over its whole length
instead (vLLM's `num_frames`, Qwen2-VL's processor's `fps`). Each target time takes the
first frame shown at or after it, once: a video of fewer frames a second than `fps`
gives each of its frames, not copies.

Refused (VideoError, with the reason): an empty file, bytes FFmpeg cannot read, a file
with no video stream (an audio file), frames larger than `max_pixels`, a stream that
breaks off before its first frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np

from atom.audio.containers import first_stream, reason, stated_seconds


class VideoError(ValueError):
    """The bytes are not a video this server reads; the message says why."""


@dataclass(frozen=True, slots=True)
class Frames:
    """The frames kept ([height, width, 3] uint8 RGB each), the time each was shown at,
    and the video's length, in seconds."""

    images: tuple[np.ndarray, ...]
    times: tuple[float, ...]
    seconds: float
    fps: float  # the frames sampled a second: `fps`, or fewer over a long video


def sample_frames(data: bytes, *, fps: float, max_frames: int, max_pixels: int) -> Frames:
    """The video's frames at `fps`, at most `max_frames` of them (module docstring)."""
    container, stream = first_stream(data, "video", VideoError)
    with container:
        width, height = stream.codec_context.width, stream.codec_context.height
        if width * height > max_pixels:
            raise VideoError(
                f"the video's frames have {width}x{height} pixels, more than {max_pixels}"
            )
        seconds = stated_seconds(container, stream) or 0.0
        targets = _targets(seconds, fps, max_frames)
        rate = 1 / (targets[1] - targets[0]) if len(targets) > 1 else fps
        kept: list[tuple[float, np.ndarray]] = []
        last = 0.0  # the time of the last frame decoded
        for at, frame in _decoded(container, stream):
            last = at
            if at >= targets[0] - 1e-6:  # the first frame shown at or after the target
                kept.append((at, frame.to_ndarray(format="rgb24")))
                targets = [t for t in targets if t > at + 1e-6]  # those it answered go
                if not targets:
                    break
    if not kept:
        raise VideoError("the video holds no frame that decodes")
    return Frames(
        images=tuple(image for _, image in kept),
        times=tuple(at for at, _ in kept),
        seconds=seconds if seconds > 0 else last,
        fps=rate,
    )


def _targets(seconds: float, fps: float, max_frames: int) -> list[float]:
    """The times to take frames at: every 1/fps seconds, or `max_frames` spread evenly
    when that would be more (a length of 0, unknown: every 1/fps up to max_frames)."""
    if seconds <= 0:
        return [i / fps for i in range(max_frames)]
    count = max(1, min(max_frames, int(seconds * fps)))
    step = seconds / count if count == max_frames else 1 / fps
    return [i * step for i in range(count)]


def _decoded(
    container: av.container.InputContainer, stream: av.video.stream.VideoStream
) -> Iterator[tuple[float, av.VideoFrame]]:
    """Each frame and the time it is shown at, in order."""
    try:
        for frame in container.decode(stream):
            if frame.time is not None:
                yield float(frame.time), frame
    except av.error.FFmpegError as e:
        raise VideoError(f"the video is damaged ({reason(e)})") from None

"""Video frames (atom/video/frames.py) from files PyAV writes: sampled in time, bounded
in number, and refused with a reason when the bytes are not a video ATOM reads."""

from __future__ import annotations

import numpy as np
import pytest

from atom.video.frames import VideoError, sample_frames
from tests.audio.media import counting_video, tone

LIMITS = {"max_pixels": 1920 * 1080}


def shown(frames_images: tuple[np.ndarray, ...]) -> list[int]:
    """Each kept frame's number (its fill value / 4)."""
    return [round(float(image.mean()) / 4) for image in frames_images]


def test_frames_are_taken_at_fps_and_spread_over_a_long_video() -> None:
    data = counting_video(3.0)  # 30 frames at 10 a second
    frames = sample_frames(data, fps=2.0, max_frames=32, **LIMITS)
    assert shown(frames.images) == [0, 5, 10, 15, 20, 25]
    assert frames.times == pytest.approx((0.0, 0.5, 1.0, 1.5, 2.0, 2.5))
    assert frames.seconds == pytest.approx(3.0) and frames.fps == pytest.approx(2.0)
    assert frames.images[0].shape == (32, 32, 3)
    spread = sample_frames(data, fps=2.0, max_frames=4, **LIMITS)  # 6 would be too many
    assert shown(spread.images) == [0, 8, 15, 23]  # at 0, 0.75, 1.5, 2.25 s
    dense = sample_frames(data, fps=30.0, max_frames=100, **LIMITS)
    assert shown(dense.images) == list(range(30))  # each frame once, never copies


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"not a video at all, just some text", "not a video file"),
        (tone("flac", "flac", 16_000, seconds=1.0), "no video stream"),
    ],
)
def test_what_is_not_a_video_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(VideoError, match=reason):
        sample_frames(data, fps=2.0, max_frames=8, **LIMITS)


def test_frames_over_the_pixel_limit_are_refused_before_decoding() -> None:
    with pytest.raises(VideoError, match="32x32 pixels, more than 1000"):
        sample_frames(counting_video(1.0), fps=2.0, max_frames=8, max_pixels=1000)

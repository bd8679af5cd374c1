"""Videos a chat message points at (`video_url` parts): `data:video/...;base64,` URLs,
`file://` paths under `--allowed-local-media-path` and web addresses from
`--allowed-media-domains`, within the media policy (atom/http/media.py), their frames
sampled as `--media-io-kwargs` says (atom/video/frames.py). Runs in the request's
planning thread; every refusal is a 400 naming the field that held the video.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar

from atom.http.media import MediaPolicy, media_bytes
from atom.video.frames import VideoError, sample_frames
from atom.vocabulary.errors import InvalidRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedVideo:
    frames: tuple[Any, ...]  # PIL images in RGB, in time order
    sha256: str  # of the frames' size and pixels
    seconds: float
    fps: float  # the frames taken a second (a Qwen2.5-VL video's positions follow it)
    kind: ClassVar[str] = "video"

    @property
    def size(self) -> tuple[int, int]:
        width, height = self.frames[0].size
        return int(width), int(height)

    @property
    def content(self) -> Any:
        """What the model's processor takes: the frames."""
        return self.frames


def load_video(url: str, param: str, policy: MediaPolicy) -> LoadedVideo:
    """The frames of the video `url` names; InvalidRequest naming `param` when the policy
    refuses it or it is no video FFmpeg reads."""
    from PIL import Image

    raw = media_bytes(url, param, policy, "video")
    sampling = policy.video
    try:
        frames = sample_frames(
            raw, fps=sampling.fps, max_frames=sampling.num_frames, max_pixels=policy.max_pixels
        )
    except VideoError as error:
        raise InvalidRequest(f"{param}: {error}", param=param) from None
    height, width = frames.images[0].shape[:2]
    digest = hashlib.sha256(f"video {width}x{height}:".encode())
    for image in frames.images:
        digest.update(image.tobytes())
    return LoadedVideo(
        frames=tuple(Image.fromarray(image) for image in frames.images),
        sha256=digest.hexdigest(),
        seconds=frames.seconds,
        fps=frames.fps,
    )

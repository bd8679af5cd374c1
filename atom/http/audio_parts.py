"""Audio clips a chat message holds (`input_audio` parts, whose base64 arrives here as a
data: URL, and `audio_url` parts: data: URLs, `file://` paths under
`--allowed-local-media-path`, web addresses from `--allowed-media-domains`), within the
media policy (atom/http/media.py), decoded to 16 kHz mono (atom/audio/decode.py). Runs
in the request's planning thread; every refusal is a 400 naming the part's field."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from atom.audio.decode import SAMPLE_RATE, AudioError, decode_audio
from atom.http.media import MediaPolicy, media_bytes
from atom.vocabulary.errors import InvalidRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedAudio:
    samples: np.ndarray  # float32 [n], mono, SAMPLE_RATE a second
    sha256: str  # of the decoded samples: the same sound as wav or flac hashes alike
    kind: ClassVar[str] = "audio"
    size: ClassVar[tuple[int, int]] = (0, 0)  # no picture: the log's ImageRef has 0x0

    @property
    def seconds(self) -> float:
        return len(self.samples) / SAMPLE_RATE

    @property
    def content(self) -> Any:
        """What the model's processor takes: the samples."""
        return self.samples


def load_audio(url: str, param: str, policy: MediaPolicy, *, max_seconds: float) -> LoadedAudio:
    """The clip `url` names, decoded; InvalidRequest naming `param` when the policy
    refuses it, it is no audio FFmpeg reads, or it is longer than `max_seconds` (found
    from its header where it says, else by decoding no further)."""
    raw = media_bytes(url, param, policy, "audio")
    try:
        audio = decode_audio(raw, max_seconds=max_seconds)
    except AudioError as error:
        raise InvalidRequest(f"{param}: {error}", param=param) from None
    digest = hashlib.sha256(f"audio {SAMPLE_RATE}:".encode())
    digest.update(audio.samples.tobytes())
    return LoadedAudio(samples=audio.samples, sha256=digest.hexdigest())

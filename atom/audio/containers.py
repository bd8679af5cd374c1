"""What audio and video decoding share of PyAV: a file's bytes opened at its first
stream of one kind, how long its header says that stream is, and FFmpeg's reason for a
failure in words (atom/audio/decode.py, atom/video/frames.py)."""

from __future__ import annotations

import io
from typing import Any

import av


def first_stream(
    data: bytes, kind: str, error: type[ValueError]
) -> tuple[av.container.InputContainer, Any]:
    """The file opened and its first `kind` ("audio" or "video") stream; `error` with the
    reason when the bytes are empty, FFmpeg cannot read them, or no such stream is in it."""
    if not data:
        raise error("the file is empty")
    article = "an" if kind == "audio" else "a"
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.error.FFmpegError, ValueError) as e:
        raise error(f"not {article} {kind} file FFmpeg reads ({reason(e)})") from None
    stream = next(iter(getattr(container.streams, kind)), None)
    if stream is None:
        container.close()
        raise error(f"the file holds no {kind} stream")
    return container, stream


def stated_seconds(container: av.container.InputContainer, stream: Any) -> float | None:
    """How long the file says the stream is (its own header's, else the container's);
    None when it does not say."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration / av.time_base)
    return None


def reason(error: Exception) -> str:
    """FFmpeg's words for a failure."""
    return str(getattr(error, "strerror", None) or error)

"""Audio files to what a speech model hears: 16 kHz mono float32 samples.

Decoded with PyAV (FFmpeg's libraries, built into its wheels on PyPI for Linux, macOS
and Windows, so nothing else needs installing): wav, flac, mp3, ogg/opus, webm, m4a and
whatever else FFmpeg reads; resampled by FFmpeg's resampler as the frames come. The
alternatives read fewer formats from PyPI alone: soundfile (libsndfile) no m4a or webm,
torchaudio's own decoding needs an FFmpeg installed beside it (torchaudio 2.9+ hands
decoding to torchcodec).

A file is decoded at most up to `max_seconds` of audio: one whose header says it is
longer is refused before decoding, and past it decoding stops and the file is refused
(AudioTooLong). `audio_windows` gives the audio in windows as it is
decoded (what a speech model takes at a time), so memory holds one window, not the
file's whole audio.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import av
import numpy as np

from atom.audio.containers import first_stream, reason, stated_seconds

SAMPLE_RATE = 16_000
# A file whose own header promises this much more audio than it holds was cut short.
TRUNCATED_SECONDS = 0.5


class AudioError(ValueError):
    """The bytes are not audio this server reads; the message says why."""


class AudioTooLong(AudioError):
    """The audio is longer than the limit."""


@dataclass(frozen=True, slots=True)
class Audio:
    samples: np.ndarray  # float32 [n], mono, SAMPLE_RATE a second

    @property
    def seconds(self) -> float:
        return len(self.samples) / SAMPLE_RATE


def decode_audio(data: bytes, *, max_seconds: float) -> Audio:
    """The first audio stream of a file's bytes, at 16 kHz mono, whole; AudioError when
    there is none, the bytes are damaged or cut short, or it is longer than `max_seconds`."""
    return Audio(np.concatenate(list(audio_windows(data, max_seconds=max_seconds))))


def audio_windows(
    data: bytes, *, max_seconds: float, window_seconds: float = 30.0
) -> Iterator[np.ndarray]:
    """The audio as decode_audio reads it, in windows of `window_seconds` (the last one
    shorter), each as soon as it is decoded: beside the file's bytes, memory holds one
    window. A file cut short is found at its end, after the windows before it."""
    container, stream = _opened(data)
    total = 0
    with container:
        header = stated_seconds(container, stream)
        if header is not None and header > max_seconds:  # refused before decoding
            said = f"its header says {header:.0f} s"
            raise AudioTooLong(f"the audio is longer than {max_seconds:g} s, the limit ({said})")
        parts = _within(_resampled(container, stream), max_seconds)
        for window in _cut(parts, int(window_seconds * SAMPLE_RATE)):
            total += len(window)
            yield window
        promised = stated_seconds(container, stream)
    if not total:
        raise AudioError("the file holds no audio samples")
    if promised is not None and promised - total / SAMPLE_RATE > TRUNCATED_SECONDS:
        raise AudioError(
            f"the file is cut short: its header promises {promised:.1f} s, "
            f"it holds {total / SAMPLE_RATE:.1f} s"
        )


def _opened(data: bytes) -> tuple[av.container.InputContainer, av.audio.stream.AudioStream]:
    """The file opened, and its first audio stream; AudioError when it has none."""
    if data:
        _check_wav_length(data)
    return first_stream(data, "audio", AudioError)


def _within(parts: Iterator[np.ndarray], max_seconds: float) -> Iterator[np.ndarray]:
    """The parts until they pass `max_seconds` of audio, then AudioTooLong."""
    limit, total = int(max_seconds * SAMPLE_RATE), 0
    for part in parts:
        total += len(part)
        if total > limit:
            raise AudioTooLong(f"the audio is longer than {max_seconds:g} s, the limit")
        yield part


def _cut(parts: Iterator[np.ndarray], window: int) -> Iterator[np.ndarray]:
    """Parts of any length, joined and cut into windows of `window` samples (the last
    one shorter, if any is left)."""
    held: list[np.ndarray] = []
    count = 0
    for part in parts:
        held.append(part)
        count += len(part)
        if count >= window:
            joined = np.concatenate(held)
            while len(joined) >= window:
                yield joined[:window]
                joined = joined[window:]
            held, count = [joined], len(joined)
    if count:
        yield np.concatenate(held)


def _resampled(
    container: av.container.InputContainer, stream: av.audio.stream.AudioStream
) -> Iterator[np.ndarray]:
    """The stream's frames, resampled to 16 kHz mono float32, as FFmpeg gives them."""
    resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
    try:
        for frame in container.decode(stream):
            for part in resampler.resample(frame):
                yield part.to_ndarray().reshape(-1)
        for part in resampler.resample(None):
            yield part.to_ndarray().reshape(-1)
    except av.error.FFmpegError as e:
        raise AudioError(f"the audio is damaged ({reason(e)})") from None


def _check_wav_length(data: bytes) -> None:
    """A WAV file's data chunk must hold the bytes its header counts (FFmpeg reads a cut
    one without a word); a size of 0 or 0xFFFFFFFF (a stream's writer did not know it)
    promises nothing."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return
    at = 12
    while at + 8 <= len(data):
        size = int.from_bytes(data[at + 4 : at + 8], "little")
        if data[at : at + 4] == b"data":
            if 0 < size < 0xFFFFFFFF and at + 8 + size > len(data):
                raise AudioError(
                    f"the file is cut short: its header counts {size} bytes of audio, "
                    f"it holds {len(data) - at - 8}"
                )
            return
        at += 8 + size + size % 2  # chunks are padded to an even size

"""Audio files to 16 kHz mono samples (atom/audio/decode.py), with files PyAV writes."""

from __future__ import annotations

import numpy as np
import pytest

from atom.audio.decode import (
    SAMPLE_RATE,
    AudioError,
    AudioTooLong,
    audio_windows,
    decode_audio,
)
from tests.audio.media import FORMATS, TONE_HZ, silent_video, tone


def loudest_hz(samples: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.fft.rfftfreq(len(samples), 1 / SAMPLE_RATE)[spectrum.argmax()])


@pytest.mark.parametrize(("container", "codec", "rate"), FORMATS)
def test_every_format_decodes_to_16_khz_mono_with_its_sound(
    container: str, codec: str, rate: int
) -> None:
    audio = decode_audio(tone(container, codec, rate, seconds=2.0), max_seconds=60)
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    assert abs(audio.seconds - 2.0) < 0.1  # encoders pad a frame at most
    assert abs(loudest_hz(audio.samples) - TONE_HZ) < 2  # the tone, at 16 kHz
    # two channels of amplitude 0.3 mixed down to one (FFmpeg mixes at -3 dB each: 0.42)
    amplitude = float(np.sqrt(2) * audio.samples[SAMPLE_RATE // 2 : -SAMPLE_RATE // 2].std())
    assert amplitude == pytest.approx(0.3 * np.sqrt(2), rel=0.1)


@pytest.mark.parametrize(
    ("container", "codec", "rate"),
    [f for f in FORMATS if f[0] != "ogg"],  # an ogg stream cut at a page promises nothing
)
def test_a_file_cut_in_half_is_refused(container: str, codec: str, rate: int) -> None:
    data = tone(container, codec, rate, seconds=2.0)
    with pytest.raises(AudioError, match=r"cut short|damaged|not an audio file"):
        decode_audio(data[: len(data) // 2], max_seconds=60)


def test_audio_past_the_limit_is_refused_without_decoding_the_rest() -> None:
    data = tone("flac", "flac", 16_000, seconds=3.0)
    with pytest.raises(AudioTooLong, match="longer than 1 s"):
        decode_audio(data, max_seconds=1)
    assert decode_audio(data, max_seconds=3.5).seconds == pytest.approx(3.0, abs=0.05)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"this is a text file, not a sound", "not an audio file"),
        (b"RIFF\x24\x00\x00\x00WAVEfmt ", "not an audio file"),  # a header and nothing
        (silent_video(), "no audio stream"),
    ],
)
def test_what_is_not_audio_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(AudioError, match=reason):
        decode_audio(data, max_seconds=60)


def test_long_audio_comes_in_windows() -> None:
    data = tone("flac", "flac", 16_000, seconds=7.0)
    windows = list(audio_windows(data, max_seconds=60, window_seconds=3.0))
    assert [len(w) for w in windows] == [3 * SAMPLE_RATE, 3 * SAMPLE_RATE, SAMPLE_RATE]
    whole = decode_audio(data, max_seconds=60).samples
    assert np.array_equal(np.concatenate(windows), whole)

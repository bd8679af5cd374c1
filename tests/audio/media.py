"""Audio files the tests make with PyAV's encoders: a tone in any container FFmpeg writes."""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import av
import numpy as np
import pytest

from atom.audio.decode import SAMPLE_RATE, decode_audio
from atom.model.catalog import is_installed

TONE_HZ = 440.0
# The tests that hear speech: espeak-ng speaks it, the packaged Whisper base hears it.
NEEDS_SPEECH = pytest.mark.skipif(
    shutil.which("espeak-ng") is None or not is_installed("whisper-base"),
    reason="needs espeak-ng and the Whisper packages (make test installs them)",
)

# (container, codec, sample rate): what the transcription routes take
FORMATS = [
    ("wav", "pcm_s16le", 22_050),
    ("flac", "flac", 44_100),
    ("mp3", "libmp3lame", 22_050),
    ("ogg", "libopus", 48_000),
    ("webm", "libopus", 48_000),
    ("ipod", "aac", 44_100),  # .m4a
]


def tone(container: str, codec: str, rate: int, seconds: float, channels: int = 2) -> bytes:
    """A TONE_HZ sine of `seconds`, amplitude 0.3 in every channel, encoded."""
    layout = "mono" if channels == 1 else "stereo"
    t = np.arange(int(rate * seconds)) / rate
    wave = (0.3 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = layout
        frame = av.AudioFrame.from_ndarray(
            np.stack([wave] * channels), format="fltp", layout=layout
        )
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buffer.getvalue()


def silent_video(seconds: float = 1.0) -> bytes:
    """An mp4 with one video stream and no audio."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(int(10 * seconds)):
            image = np.full((32, 32, 3), i * 20 % 255, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


def spoken_wav(text: str) -> bytes:
    """`text` said by Debian's espeak-ng: its WAV file (22,050 Hz mono)."""
    with tempfile.TemporaryDirectory() as folder:
        wav = Path(folder) / "speech.wav"
        subprocess.run(["espeak-ng", "-w", str(wav), text], check=True)
        return wav.read_bytes()


def spoken(text: str) -> np.ndarray:
    """`text` said by Debian's espeak-ng, as 16 kHz mono samples (atom/audio/decode.py)."""
    return decode_audio(spoken_wav(text), max_seconds=30).samples


def wav_of(samples: np.ndarray, rate: int = SAMPLE_RATE) -> bytes:
    """Mono float samples as a 16-bit WAV file."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def spaced(sentences: list[str], every_s: float) -> np.ndarray:
    """Each sentence spoken `every_s` seconds after the one before (silence between),
    starting at 1 s: with `every_s` 30, each falls in a window of its own."""
    step = int(every_s * SAMPLE_RATE)
    audio = np.zeros(step * len(sentences), dtype=np.float32)
    for i, sentence in enumerate(sentences):
        said = spoken(sentence)[: step - SAMPLE_RATE]
        at = i * step + SAMPLE_RATE
        audio[at : at + len(said)] = said
    return audio


def silent_flac(seconds: float, rate: int = SAMPLE_RATE) -> bytes:
    """`seconds` of silence as FLAC (small: two hours are about 1.3 MB), its length in
    its header."""
    buffer = io.BytesIO()
    minute = np.zeros((1, rate * 60), dtype=np.int16)
    with av.open(buffer, mode="w", format="flac") as out:
        stream = out.add_stream("flac", rate=rate)
        stream.layout = "mono"
        for i in range(int(seconds // 60)):
            frame = av.AudioFrame.from_ndarray(minute, format="s16", layout="mono")
            frame.sample_rate, frame.pts = rate, i * len(minute[0])
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


def counting_video(seconds: float, rate: int = 10, size: int = 32) -> bytes:
    """An mp4 whose frame i is filled with the value i (as near as the codec keeps it)."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=rate)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv444p"
        stream.options = {"qp": "0"}  # lossless: each frame's value comes back
        for i in range(int(seconds * rate)):
            image = np.full((size, size, 3), i * 4, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()

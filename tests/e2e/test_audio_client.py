"""The default server's speech model (Whisper base from PyPI, beside the chat model) with
the official `openai` client: every response format, a stream over several windows,
translations, the request log's replay, and bad input refused with the field named."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from atom.log.codec import read_log
from atom.log.replay import project
from atom.vocabulary.events import WindowTranscribed
from tests.audio.media import NEEDS_SPEECH, silent_flac, silent_video, spaced, spoken_wav, wav_of
from tests.e2e.conftest import Server

pytestmark = [pytest.mark.slow, NEEDS_SPEECH]

MODEL = "whisper-base"
FOX = "The quick brown fox jumps over the lazy dog."
# Three sentences, and a word of each that Whisper base hears in espeak-ng's voice.
SENTENCES = {FOX: "fox", "She sells sea shells by the sea shore.": "shore",
             "The rain in Spain stays mainly in the plain.": "spain"}  # fmt: skip


@pytest.fixture(scope="module")
def fox() -> bytes:
    return spoken_wav(FOX)


def words(text: str) -> str:
    return re.sub(r"[^a-z ]", "", text.lower())


def test_every_response_format_through_the_openai_client(server: Server, fox: bytes) -> None:
    client = server.client()
    asked = {"model": MODEL, "file": ("fox.wav", fox), "language": "en"}
    whole = client.audio.transcriptions.create(**asked)
    assert "lazy dog" in words(whole.text)
    assert whole.usage is not None and whole.usage.seconds == 3  # type: ignore[union-attr]
    text = client.audio.transcriptions.create(**asked, response_format="text")
    assert text == whole.text + "\n"
    verbose = client.audio.transcriptions.create(**asked, response_format="verbose_json")
    assert verbose.language == "english" and 2.0 < verbose.duration < 3.0
    assert verbose.segments and "lazy dog" in words(verbose.text)
    ends = [(s.start, s.end) for s in verbose.segments]
    assert all(a < b for a, b in ends) and ends == sorted(ends)
    timed = client.audio.transcriptions.create(
        **asked, response_format="verbose_json", timestamp_granularities=["word", "segment"]
    )
    assert timed.words and words(" ".join(w.word for w in timed.words)) == words(timed.text)
    times = [(w.start, w.end) for w in timed.words]
    assert all(a <= b for a, b in times) and times == sorted(times)
    assert times[0][0] >= 0.0 and times[-1][1] <= timed.duration + 0.02
    srt = client.audio.transcriptions.create(**asked, response_format="srt")
    assert re.match(r"1\n00:00:0\d,\d{3} --> 00:00:0\d,\d{3}\n\S", srt)
    vtt = client.audio.transcriptions.create(**asked, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:0") and "lazy dog" in words(vtt)
    english = client.audio.translations.create(model=MODEL, file=("fox.wav", fox))
    assert "lazy dog" in words(english.text)


def test_long_audio_streams_a_delta_a_window_and_replays_from_the_log(server: Server) -> None:
    """Three sentences 30 s apart: three windows, three deltas whose text joined is the
    done event's; concurrent requests give the text one gives alone; the log replays
    the stream byte for byte."""
    audio = wav_of(spaced(list(SENTENCES), every_s=30.0))
    client = server.client()
    events = list(
        client.audio.transcriptions.create(
            model=MODEL, file=("long.wav", audio), language="en", stream=True
        )
    )
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    [done] = [e for e in events if e.type == "transcript.text.done"]
    assert len(deltas) == 3 and "".join(deltas) == done.text
    for word, delta in zip(SENTENCES.values(), deltas, strict=True):
        assert word in words(delta), (word, delta)

    def alone(_: int) -> str:
        return client.audio.transcriptions.create(
            model=MODEL, file=("long.wav", audio), language="en"
        ).text

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(alone, range(3))) == [done.text] * 3
    sent = httpx.post(
        f"{server.url}/v1/audio/transcriptions",
        files={"file": ("long.wav", audio)},
        data={"language": "en", "stream": "true"},
        headers={"x-request-id": "long-stream"},
        timeout=120,
    )
    replayed = {r.request_id: r for r in project(read_log(server.log_path))}
    again = replayed["transcription-long-stream"]
    assert again.is_complete and bytes(again.body) == sent.content
    assert again.content_type == "text/event-stream"


def with_rate(wav: bytes, rate: int) -> bytes:
    """A WAV file with another sample rate written in its header."""
    at = wav.index(b"fmt ") + 12
    return wav[:at] + rate.to_bytes(4, "little") + wav[at + 4 :]


# Each bad file (made from the good one) and what its refusal says.
BAD: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "not audio": (lambda _: b"this is a text file, not a sound", "not an audio file"),
    "empty": (lambda _: b"", "empty"),
    "cut in half": (lambda fox: fox[: len(fox) // 2], "cut short"),
    "a sample rate of 0": (lambda fox: with_rate(fox, 0), "not an audio file"),
    "a video with no sound": (lambda _: silent_video(), "no audio stream"),
    "two hours": (lambda _: silent_flac(7200), "longer than 3600 s"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_files_are_a_400_naming_the_file_and_the_server_serves_on(
    server: Server, fox: bytes, name: str
) -> None:
    make, reason = BAD[name]
    r = httpx.post(
        f"{server.url}/v1/audio/transcriptions", files={"file": ("x", make(fox))}, timeout=60
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "file" and reason in error["message"]
    ok = httpx.post(
        f"{server.url}/v1/audio/transcriptions", files={"file": ("fox.wav", fox)}, timeout=60
    )
    assert ok.status_code == 200 and "lazy dog" in words(ok.json()["text"])


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"language": "xx"}, "language"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": "1.5"}, "temperature"),
        ({"response_format": "mp3"}, "response_format"),
        ({"timestamp_granularities[]": "word"}, "timestamp_granularities"),
        ({"stream": "true", "response_format": "srt"}, "stream"),
        ({"model": "SmolLM2-135M-Instruct"}, "model"),
        ({"voice": "alloy"}, "voice"),
    ],
)  # fmt: skip
def test_bad_fields_are_a_400_naming_the_field(
    server: Server, fox: bytes, fields: dict[str, str], param: str
) -> None:
    r = httpx.post(
        f"{server.url}/v1/audio/transcriptions",
        files={"file": ("fox.wav", fox)},
        data=fields,
        timeout=60,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_a_body_without_a_file_is_a_400(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/audio/transcriptions", json={"model": MODEL}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "file"
    listed = httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]
    kinds = {card["id"]: card["kind"] for card in listed}
    assert kinds[MODEL] == "transcribe"
    assert json.loads(httpx.get(f"{server.url}/health?deep=1", timeout=60).text)["status"] == "ok"


def test_a_client_that_leaves_mid_stream_aborts_its_windows(server: Server, fox: bytes) -> None:
    """Ten windows of speech; the client reads the first delta and leaves: the log ends
    the request as aborted, long before ten windows' time, and the next one is served."""
    audio = wav_of(spaced([FOX] * 10, every_s=30.0))
    with httpx.stream(
        "POST",
        f"{server.url}/v1/audio/transcriptions",
        files={"file": ("long.wav", audio)},
        data={"language": "en", "stream": "true"},
        headers={"x-request-id": "leaves"},
        timeout=120,
    ) as r:
        first = next(r.iter_lines())
        assert "transcript.text.delta" in first
    deadline = time.monotonic() + 30
    ends: list[str] = []
    while not ends and time.monotonic() < deadline:
        time.sleep(0.2)
        ends = [
            e.event.type
            for e in read_log(server.log_path)
            if getattr(e.event, "request_id", None) == "transcription-leaves"
            and e.event.type in {"request_aborted", "transcription_finished"}
        ]
    assert ends == ["request_aborted"]
    windows = [
        e.event
        for e in read_log(server.log_path)
        if isinstance(e.event, WindowTranscribed) and e.event.request_id == "transcription-leaves"
    ]
    assert len(windows) < 10
    ok = httpx.post(
        f"{server.url}/v1/audio/transcriptions", files={"file": ("fox.wav", fox)}, timeout=60
    )
    assert ok.status_code == 200 and "lazy dog" in words(ok.json()["text"])

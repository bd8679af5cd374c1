"""Audio parts in chat, served by a tiny random Audio Flamingo 3 through the real loader
and HTTP: `input_audio` through the official client, `audio_url` as a data: URL, an
allowed local file and an allowed web address answer alike for the same sound, and the
log keeps the clip's hash, not its bytes; a clip the policy or the model refuses is a
400 naming its part, and the server serves on."""

from __future__ import annotations

import base64
import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.vocabulary.config import Settings
from atom.vocabulary.events import RequestAccepted, RequestReceived
from tests.audio.media import silent_video, tone, wav_of
from tests.audio_models import tiny_audioflamingo3
from tests.conftest import serving, wait_ready
from tests.vision_models import data_url, picture

CHAT = "/v1/chat/completions"
LONGEST_S = 60  # the model's processor takes clips up to this long: two windows


def sound(seconds: float, hz: float = 300.0) -> bytes:
    t = np.arange(int(16_000 * seconds)) / 16_000
    return wav_of((0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32))


def input_audio(data: bytes, fmt: str = "wav") -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    return {"type": "input_audio", "input_audio": {"data": encoded, "format": fmt}}


def audio_url(url: str) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": url}}


TEXT = {"type": "input_text", "text": "What is said?"}  # a Responses text part


def asking(*parts: dict[str, Any]) -> dict[str, Any]:
    content = [*parts, {"type": "text", "text": "What is said?"}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0}


@pytest.fixture
def web(tmp_path: Path) -> Iterator[str]:
    """tmp_path/web over HTTP on a loopback port."""
    (tmp_path / "web").mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "web"))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
async def served(tmp_path: Path, web: str) -> AsyncIterator[tuple[str, Path]]:
    folder = tiny_audioflamingo3(tmp_path / "model", max_audio_len=LONGEST_S)
    (tmp_path / "media").mkdir()
    settings = Settings(
        model=(str(folder),),
        served_model_name=("af3",),
        kv_cache_memory_bytes=32 << 20,
        request_log=str(tmp_path / "requests.jsonl"),
        allowed_local_media_path=str(tmp_path / "media"),
        allowed_media_domains=("127.0.0.1",),
        limit_mm_per_prompt='{"audio": 2}',
    )
    app = create_app(settings, on_fatal=lambda: None)
    async with serving(app) as url:
        await wait_ready(app)
        yield url, tmp_path


async def test_a_clip_answers_alike_from_every_source(served: tuple[str, Path], web: str) -> None:
    url, tmp = served
    clip = sound(35.0)  # two 30-second windows: 750 + 125 audio tokens
    (tmp / "media" / "clip.wav").write_bytes(clip)
    (tmp / "web" / "clip.wav").write_bytes(clip)
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none")
    official = await client.chat.completions.create(
        model="af3",
        messages=asking(input_audio(clip))["messages"],
        temperature=0,
        max_tokens=4,
    )
    answer = official.choices[0].message.content
    assert answer and official.usage is not None and official.usage.prompt_tokens > 875
    responded = await client.responses.create(
        model="af3",
        input=[{"role": "user", "content": [input_audio(clip), TEXT]}],  # type: ignore[list-item]
        temperature=0,
        max_output_tokens=4,
    )
    assert responded.output_text == answer  # the same conversation through Responses
    async with httpx.AsyncClient(base_url=url, timeout=120) as http_client:
        for part in (
            audio_url("data:audio/wav;base64," + base64.b64encode(clip).decode()),
            audio_url(f"file://{tmp / 'media' / 'clip.wav'}"),
            audio_url(f"{web}/clip.wav"),
            input_audio(tone("flac", "flac", 16_000, 1.0), "flac"),
        ):
            r = await http_client.post(CHAT, json=asking(part))
            assert r.status_code == 200, r.text
            if part["type"] == "audio_url":
                assert r.json()["choices"][0]["message"]["content"] == answer
    events = [e.event for e in read_log(tmp / "requests.jsonl")]
    refs = [e.images for e in events if isinstance(e, RequestAccepted)]
    assert [r[0].kind for r in refs] == ["audio"] * 6
    assert [r[0].num_tokens for r in refs] == [875] * 5 + [25]
    assert len({r[0].sha256 for r in refs[:5]}) == 1  # the same sound, however it came
    received = next(e for e in events if isinstance(e, RequestReceived))
    logged = received.body["messages"][0]["content"][0]["input_audio"]["data"]
    assert logged.startswith("base64,(omitted: ") and len(logged) < 200


async def test_refused_clips_name_their_part(served: tuple[str, Path]) -> None:
    url, tmp = served
    (tmp / "elsewhere.wav").write_bytes(sound(1.0))
    whole = tone("mp3", "libmp3lame", 22_050, 3.0)
    refusals = {
        "not valid base64": {
            "type": "input_audio", "input_audio": {"data": "*not base64*", "format": "wav"}
        },
        "not audio": audio_url("data:image/png;base64,AAAA"),
        "not an audio file FFmpeg reads": input_audio(b"these bytes are no sound at all"),
        "no audio stream": input_audio(silent_video(), "m4a"),
        "cut short": input_audio(whole[: len(whole) // 2], "mp3"),
        "outside --allowed-local-media-path": audio_url(f"file://{tmp / 'elsewhere.wav'}"),
        "media from example.com is not allowed": audio_url("https://example.com/a.wav"),
        f"longer than {LONGEST_S} s": input_audio(sound(LONGEST_S + 5)),
        "format": input_audio(sound(1.0), "aiff"),
    }  # fmt: skip
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for says, part in refusals.items():
            refused = await client.post(CHAT, json=asking(part))
            assert refused.status_code == 400, (says, refused.text)
            error = refused.json()["error"]
            assert error["param"].startswith("messages.0.content.0"), (says, error)
            assert says in error["message"], (says, error)
        three = await client.post(CHAT, json=asking(*[input_audio(sound(1.0))] * 3))
        assert three.status_code == 400 and three.json()["error"]["param"] == "messages.0.content.2"
        assert "at most 2 audio clips" in three.json()["error"]["message"]
        image = await client.post(
            CHAT, json=asking({"type": "image_url", "image_url": {"url": data_url(picture(1))}})
        )
        assert (
            image.status_code == 400 and "takes no image parts" in image.json()["error"]["message"]
        )
        bad = {"type": "input_audio", "input_audio": {"data": "*", "format": "wav"}}
        body = {"input": [{"role": "user", "content": [TEXT, bad]}], "max_output_tokens": 4}
        refused = await client.post("/v1/responses", json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "input.0.content.1"
        again = await client.post(CHAT, json=asking(input_audio(sound(1.0))))
        assert again.status_code == 200, again.text

"""`video_url` parts in chat, served by a tiny random Qwen2-VL through the real loader
and HTTP: a video answers and is logged by its frames' hash; a video the policy refuses
or that is no video is a 400 naming its part, and the server serves on."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.vocabulary.config import Settings
from atom.vocabulary.events import RequestAccepted
from tests.audio.media import counting_video, tone
from tests.conftest import serving, wait_ready
from tests.vision_models import tiny_qwen2_vl


def video_url(data: bytes, media_type: str = "video/mp4") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def asking(*urls: str) -> dict[str, Any]:
    parts = [{"type": "video_url", "video_url": {"url": url}} for url in urls]
    content = [*parts, {"type": "text", "text": "What happens?"}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0}


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Path]]:
    folder = tiny_qwen2_vl(tmp_path / "model")
    (tmp_path / "media").mkdir()
    settings = Settings(
        model=(str(folder),),
        kv_cache_memory_bytes=8 << 20,
        request_log=str(tmp_path / "requests.jsonl"),
        allowed_local_media_path=str(tmp_path / "media"),
        media_io_kwargs='{"video": {"fps": 2, "num_frames": 4}}',
    )
    app = create_app(settings, on_fatal=lambda: None)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as client:
        await wait_ready(app)
        yield client, tmp_path


async def test_a_video_answers_and_refusals_name_the_part(
    http: tuple[httpx.AsyncClient, Path],
) -> None:
    client, tmp = http
    video = counting_video(3.0)  # 30 frames: 4 kept (at most 4, spread over 3 s)
    (tmp / "media" / "clip.mp4").write_bytes(video)
    (tmp / "elsewhere.mp4").write_bytes(video)
    answered = await client.post("/v1/chat/completions", json=asking(video_url(video)))
    assert answered.status_code == 200, answered.text
    local = await client.post(
        "/v1/chat/completions", json=asking(f"file://{tmp / 'media' / 'clip.mp4'}")
    )
    assert local.json()["choices"][0]["message"] == answered.json()["choices"][0]["message"]
    accepted = [
        e.event for e in read_log(tmp / "requests.jsonl") if isinstance(e.event, RequestAccepted)
    ]
    [first, second] = [a.images for a in accepted]
    assert first[0].kind == "video" and first[0].sha256 == second[0].sha256
    assert first[0].num_tokens == 2 * 2 * 2  # 4 frames: 2 in time, 32x32 pixels: 2x2 merged
    refusals = {
        "'image/png' is not video": asking(video_url(video, "image/png")),
        "not a video file FFmpeg reads": asking(video_url(b"no video here at all")),
        "no video stream": asking(video_url(tone("flac", "flac", 16_000, 1.0))),
        "outside --allowed-local-media-path": asking(f"file://{tmp / 'elsewhere.mp4'}"),
        "media from example.com is not allowed": asking("https://example.com/clip.mp4"),
        "must be a data:, file: or http(s): URL": asking("ftp://example.com/clip.mp4"),
    }
    for says, body in refusals.items():
        refused = await client.post("/v1/chat/completions", json=body)
        assert refused.status_code == 400, (says, refused.text)
        error = refused.json()["error"]
        assert error["param"] == "messages.0.content.0" and says in error["message"], error
    two = await client.post("/v1/chat/completions", json=asking(video_url(video), video_url(video)))
    assert two.status_code == 400 and two.json()["error"]["param"] == "messages.0.content.1"
    assert "at most 1 videos" in two.json()["error"]["message"]
    sound = {"data": base64.b64encode(video).decode(), "format": "m4a"}
    clip = {"type": "input_audio", "input_audio": sound}
    heard = {**asking(), "messages": [{"role": "user", "content": [clip]}]}
    no_audio = await client.post("/v1/chat/completions", json=heard)
    assert no_audio.status_code == 400, no_audio.text
    assert "this model takes no audio parts" in no_audio.json()["error"]["message"]
    again = await client.post("/v1/chat/completions", json=asking(video_url(video)))
    assert again.json()["choices"][0]["message"] == answered.json()["choices"][0]["message"]

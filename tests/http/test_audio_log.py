"""What the request log keeps of a transcription's audio (a tiny random Whisper with
Whisper base's tokenizer): its hash and size, and its bytes only with
--request-log-audio; replay gives the answer again either way."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project
from atom.model.catalog import is_installed
from atom.vocabulary.audio_events import TranscriptionRequested
from atom.vocabulary.config import Settings
from tests.audio.media import tone
from tests.conftest import fake_loader, serving, wait_ready

pytestmark = pytest.mark.skipif(
    not is_installed("whisper-base"), reason="needs the Whisper packages (make test installs them)"
)


@pytest.mark.parametrize("keep", [False, True])
async def test_the_log_names_the_audio_and_keeps_it_when_asked(
    tokenizer: Any, tmp_path: Path, keep: bool
) -> None:
    log_path = tmp_path / "requests.jsonl"
    settings = Settings(request_log=str(log_path), request_log_audio=keep)
    app = create_app(settings, load=fake_loader(tokenizer))
    sound = tone("flac", "flac", 16_000, seconds=1.0)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as http:
        await wait_ready(app)
        answer = await http.post(
            "/v1/audio/transcriptions",
            files={"file": ("tone.flac", sound)},
            data={"language": "en", "response_format": "verbose_json"},
        )
    assert answer.status_code == 200, answer.text
    [asked] = [e.event for e in read_log(log_path) if isinstance(e.event, TranscriptionRequested)]
    assert asked.audio.sha256 == hashlib.sha256(sound).hexdigest()
    assert (asked.audio.num_bytes, asked.audio.filename) == (len(sound), "tone.flac")
    assert asked.audio.data == (base64.b64encode(sound).decode() if keep else None)
    [replayed] = project(read_log(log_path))
    assert bytes(replayed.body) == answer.content

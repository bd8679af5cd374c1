"""The Transcriber (atom/actors/transcriber.py) on the packaged Whisper base: requests
decode their windows together, each window as the model decodes it alone."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import trio
import trio.testing

from atom.actors.device import DeviceThread
from atom.actors.transcriber import Transcriber, WindowDone
from atom.audio.decode import SAMPLE_RATE, AudioError
from atom.model.whisper.decoding import WindowDecode, WindowTask
from atom.model.whisper.package import transformers_folder
from atom.model.whisper.runtime import WhisperRuntime, load_whisper
from atom.vocabulary.errors import InvalidRequest, Overloaded
from tests.audio.media import spoken

pytestmark = pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="needs Debian's espeak-ng (make test installs it)"
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return transformers_folder(str(tmp_path_factory.mktemp("cache")))


def alone(runtime: WhisperRuntime, audio: np.ndarray, task: WindowTask) -> WindowDecode:
    """One window decoded by itself, the reference."""
    window = WindowDecode(runtime.tokens, task, max_tokens=runtime.max_tokens)
    runtime.decode([window], [audio])
    return window


async def test_requests_decode_together_and_windows_follow_each_other(
    folder: Path,
) -> None:
    """Two requests at once: a sentence, and two windows (a sentence, then another).
    Both decode in the same steps; each window is its decoding alone, the second window
    prompted with the first one's text, and its start is the first one's length."""
    fox = spoken("The quick brown fox jumps over the lazy dog.")
    shells = spoken("She sells sea shells by the sea shore.")
    rain = spoken("The rain in Spain stays mainly in the plain.")
    runtime = load_whisper(folder, num_slots=4)
    task = WindowTask(language="en")
    device = DeviceThread()
    transcriber = Transcriber(runtime, device=device, max_queued_requests=4)
    found: dict[str, list[WindowDone]] = {}
    heard: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(transcriber.run)

        async def ask(name: str, audio: list[np.ndarray]) -> None:
            found[name], seconds = await transcriber.transcribe(
                audio, task, on_window=lambda w: heard.append(w.index)
            )
            assert seconds == sum(len(a) for a in audio) / SAMPLE_RATE

        async with trio.open_nursery() as asks:
            asks.start_soon(ask, "one", [fox])
            asks.start_soon(ask, "two", [shells, rain])
        nursery.cancel_scope.cancel()
    device.close()
    assert transcriber.most_windows_a_step == 2  # both requests in one step
    assert sorted(heard) == [0, 0, 1]
    expected_fox = alone(runtime, fox, task).generated
    first = alone(runtime, shells, task)
    text = tuple(t for t in first.generated if t < runtime.tokens.end_of_text)
    second = alone(runtime, rain, WindowTask(language="en", previous=text))
    assert [w.tokens for w in found["one"]] == [tuple(expected_fox)]
    assert [w.tokens for w in found["two"]] == [tuple(first.generated), tuple(second.generated)]
    assert [(w.index, w.start) for w in found["two"]] == [(0, 0.0), (1, len(shells) / SAMPLE_RATE)]
    words = runtime.tokenizer.decode(found["two"][1].tokens).lower()
    assert "rain in spain" in words, words


async def test_a_full_queue_is_overloaded_and_a_caller_that_leaves_frees_its_slot(
    folder: Path,
) -> None:
    fox = spoken("The quick brown fox jumps over the lazy dog.")
    runtime = load_whisper(folder, num_slots=1)
    device = DeviceThread()
    transcriber = Transcriber(runtime, device=device, max_queued_requests=1)
    task = WindowTask(language="en")
    # nothing takes the queue yet: one request waits in it, the next is refused
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transcriber.transcribe, [fox], task)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(Overloaded):
            await transcriber.transcribe([fox], task)
        nursery.cancel_scope.cancel()  # the waiting caller leaves: its window never starts
    async with trio.open_nursery() as nursery:
        await nursery.start(transcriber.run)
        async with trio.open_nursery() as asks:  # a caller that leaves mid-window
            asks.start_soon(transcriber.transcribe, [fox], task)
            while transcriber.num_steps < 3:
                await trio.sleep(0.01)
            asks.cancel_scope.cancel()
        steps = transcriber.num_steps
        while not transcriber.is_idle:
            await trio.sleep(0.01)
        assert runtime.batch.num_free == 1 and transcriber.num_steps <= steps + 1
        [done], _ = await transcriber.transcribe([fox], task)  # and the next one is served
        nursery.cancel_scope.cancel()
    device.close()
    assert "lazy dog" in runtime.tokenizer.decode(done.tokens).lower()


async def test_audio_damaged_past_its_first_window_fails_that_request_alone(
    folder: Path,
) -> None:
    """A file found damaged at its second window: its request fails with a 400 naming
    `file`, after its first window decoded; a request beside it is served."""
    fox = spoken("The quick brown fox jumps over the lazy dog.")

    def damaged() -> Iterator[np.ndarray]:
        yield fox
        raise AudioError("the audio is damaged (invalid data)")

    runtime = load_whisper(folder, num_slots=2)
    device = DeviceThread()
    transcriber = Transcriber(runtime, device=device, max_queued_requests=4)
    task = WindowTask(language="en")
    heard: list[int] = []
    found: list[WindowDone] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(transcriber.run)
        with pytest.raises(InvalidRequest) as refused:
            await transcriber.transcribe(damaged(), task, on_window=lambda w: heard.append(w.index))
        found, seconds = await transcriber.transcribe([fox], task)
        nursery.cancel_scope.cancel()
    device.close()
    assert refused.value.param == "file" and "damaged" in refused.value.message
    assert heard == [0] and seconds == len(fox) / SAMPLE_RATE
    assert "lazy dog" in runtime.tokenizer.decode(found[0].tokens).lower()

"""OpenAI's transcribe rules on a window's result (atom/model/whisper/decoding.py): the
chance of no speech read after `<|startoftranscript|>`, a failed window decoded again one
temperature step higher in its own slot, and silence left unsaid rather than retried."""

from __future__ import annotations

import torch

from atom.model.whisper.batch import WindowBatch
from atom.model.whisper.decoding import WindowDecode, WindowTask
from atom.model.whisper.slots import WhisperSlots
from tests.model.test_whisper_decoding import TOKENS, tiny_whisper


@torch.no_grad()
def decoded(temperature: float, text: str) -> tuple[WindowDecode, list[float]]:
    """A window of the tiny model decoded at `temperature`, every try's text judged as
    `text`; the temperatures its tries ran at."""
    model = tiny_whisper()
    slots = WhisperSlots(model, num_slots=2)
    tries: list[float] = []
    window = WindowDecode(
        TOKENS, WindowTask(language="en", temperature=temperature, seed=3), max_tokens=12
    )

    def judge(ids: object) -> str:
        tries.append(window.temperature)
        return text

    batch = WindowBatch(slots, judge)
    batch.start([window], torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(4)))
    while batch.num_active:
        batch.step()
    assert batch.num_free == 2
    return window, tries


def test_a_window_that_repeats_itself_climbs_the_temperatures() -> None:
    window, tries = decoded(0.0, "the same words " * 40)
    assert tries == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]  # then the last try is kept
    assert window.temperature == 1.0 and window.compression_ratio > 2.4
    assert window.generated and window.fed >= len(window.generated)


def test_a_request_above_temperature_0_is_decoded_once() -> None:
    window, tries = decoded(0.4, "the same words " * 40)
    assert tries == [0.4] and window.temperature == 0.4


def test_the_chance_of_no_speech_is_read_after_the_start_token() -> None:
    model = tiny_whisper()
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(4))
    window, _ = decoded(0.4, "words")
    with torch.no_grad():
        start = torch.tensor([[TOKENS.start_of_transcript]])
        logits = model(input_features=features, decoder_input_ids=start).logits[0, -1]
    want = float(torch.softmax(logits, dim=-1)[TOKENS.no_speech])
    assert abs(window.no_speech_prob - want) < 1e-5


def test_silence_is_left_unsaid_not_retried() -> None:
    window = WindowDecode(TOKENS, WindowTask(language="en"), max_tokens=12)
    window.generated.extend([5, 6, 7])
    window.sum_logprob = -8.0  # a mean of -2: unlikely tokens
    window.no_speech_prob = 0.9
    assert window.is_silent and not window.finish("Thanks for watching!")
    window.no_speech_prob = 0.3  # speech after all: unlikely tokens are retried
    assert not window.is_silent and window.finish("Thanks for watching!")
    assert window.temperature == 0.2 and not window.generated and window.sum_logprob == 0.0

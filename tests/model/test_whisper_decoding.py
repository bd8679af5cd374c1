"""Whisper decoding in ATOM (atom/model/whisper): the slot decoder against transformers'
forward, the timestamp rules on chosen logits, and the packaged model's windows decoded
together against CTranslate2's (faster-whisper's engine) decoding of each alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import ctranslate2
import pytest
import torch
from transformers import (
    WhisperConfig,
    WhisperForConditionalGeneration,
)

from atom.model.whisper.batch import WindowBatch
from atom.model.whisper.decoding import (
    WhisperTokens,
    WindowDecode,
    WindowTask,
    apply_timestamp_rules,
    segments_of,
)
from atom.model.whisper.package import ctranslate2_folder, transformers_folder
from atom.model.whisper.runtime import load_whisper
from atom.model.whisper.slots import WhisperSlots
from tests.audio.media import spoken


def tiny_whisper() -> WhisperForConditionalGeneration:
    config = WhisperConfig(
        vocab_size=300, num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_source_positions=1500, max_target_positions=64,
        pad_token_id=1, bos_token_id=1, eos_token_id=2, decoder_start_token_id=3,
    )  # fmt: skip
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    for parameter in model.parameters():
        torch.nn.init.normal_(parameter, std=0.2)
    return model


def test_slots_fed_unevenly_give_transformers_logits() -> None:
    """Three windows in slots 2, 0 and 3: prompts of 3, 1 and 5 tokens in one forward,
    then steps that feed some of them: each slot's logits are transformers' for its
    whole sequence so far."""
    model = tiny_whisper()
    slots = WhisperSlots(model, num_slots=4)
    features = torch.randn(3, 80, 3000, generator=torch.Generator().manual_seed(1))
    order = [2, 0, 3]
    slots.encode(order, features)
    fed: dict[int, list[int]] = {slot: [] for slot in order}
    feeds = {2: [5, 6, 7], 0: [8], 3: [9, 10, 11, 12, 13]}
    for step in range(6):
        for slot, feed in feeds.items():
            fed[slot] = fed[slot] + feed
        got = slots.step(list(feeds), list(feeds.values()))
        with torch.no_grad():
            for row, slot in zip(got, feeds, strict=True):
                i = order.index(slot)
                ids = torch.tensor([fed[slot]])
                expected = model(input_features=features[i : i + 1], decoder_input_ids=ids)
                torch.testing.assert_close(row, expected.logits[0, -1], rtol=1e-5, atol=1e-5)
        feeds = {s: [20 + step + s] for s in ([2, 3] if step % 2 else [0, 2, 3])}
    assert slots.lengths == [len(fed[0]), 0, len(fed[2]), len(fed[3])]


# A toy vocabulary laid out as Whisper's: text, then the specials, then the timestamps.
TOKENS = WhisperTokens(
    end_of_text=20, start_of_transcript=21, start_of_previous=22, tasks={"transcribe": 23,
    "translate": 24}, languages={"en": 25}, no_timestamps=26, no_speech=19, timestamp_begin=27,
    suppress=(), suppress_at_begin=(),
)  # fmt: skip
VOCAB = 100  # 27..99: <|0.00|> .. <|1.44|>


def allowed(generated: list[int], text: float = 10.0) -> set[int]:
    """What the rules leave after `generated`, text logits at `text` and timestamps at 0
    (text at 10 is likelier than all timestamps together, so that rule stays out)."""
    logits = torch.zeros(VOCAB)
    logits[: TOKENS.timestamp_begin] = text
    apply_timestamp_rules(logits, generated, TOKENS)
    return {int(i) for i in torch.isfinite(logits).nonzero()}


def test_timestamps_open_a_window_within_a_second_and_come_in_pairs() -> None:
    text_or_end, stamps_from = set(range(0, 26)), lambda first: set(range(first, VOCAB))
    assert allowed([]) == set(range(27, 78))  # a timestamp first, at most <|1.00|>
    assert allowed([30]) == text_or_end  # a segment opened: its text
    assert allowed([30, 5]) == text_or_end | stamps_from(31)  # text goes on, or a later stamp
    assert allowed([30, 5, 40]) == set(range(20, 26)) | stamps_from(40)  # closed at 40 or later
    assert allowed([30, 5, 40, 40]) == text_or_end  # a closed pair: the next segment's text
    # all timestamps together likelier than the likeliest text token: a timestamp it is
    assert allowed([30, 5], text=0.0) == stamps_from(31)


def test_sampling_follows_the_seed() -> None:
    """At a temperature above 0 a window samples from its task's seed: the same seed
    writes the same tokens, others write others (the tiny model: ids below 300)."""
    slots = WhisperSlots(tiny_whisper(), num_slots=1)
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(2))
    batch = WindowBatch(slots, lambda ids: " ".join(map(str, ids)))

    def sampled(seed: int) -> list[int]:
        task = WindowTask(language="en", temperature=1.0, seed=seed)
        window = WindowDecode(TOKENS, task, max_tokens=30)
        batch.start([window], features)
        while batch.num_active:
            batch.step()
        return window.generated

    first = sampled(7)
    assert len(first) > 3 and sampled(7) == first
    assert any(sampled(seed) != first for seed in (8, 9, 10))


def test_a_windows_tokens_cut_into_segments() -> None:
    # <|0.00|> a b <|1.00|> <|1.00|> c <|1.50|> <|1.52|> d (not closed: to the window's end)
    generated = [27, 5, 6, 77, 77, 7, 102, 103, 8]
    segments = segments_of(generated, TOKENS, seconds=30.0)
    assert [(s.start, s.end, s.tokens) for s in segments] == [
        (0.0, 1.0, (5, 6)),
        (1.0, 1.5, (7,)),
        (1.52, 30.0, (8,)),
    ]


SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells.",
)


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the converted transformers folder, a CTranslate2 folder of the packages' files)."""
    cache = tmp_path_factory.mktemp("cache")
    return transformers_folder(str(cache)), ctranslate2_folder(cache / "ct2")


@pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="needs Debian's espeak-ng (make test installs it)"
)
@pytest.mark.parametrize("timestamps", [False, True])
def test_windows_decoded_together_equal_ctranslate2_alone(
    packaged: tuple[Path, Path], timestamps: bool
) -> None:
    """Two spoken sentences in one batch, their language detected, with and without
    timestamps: each window's tokens are CTranslate2's greedy decoding of it alone."""
    folder, ct2_folder = packaged
    runtime = load_whisper(folder, num_slots=4)
    tokens = runtime.tokens
    audio = [spoken(text) for text in SENTENCES]
    task = WindowTask(timestamps=timestamps)
    windows = [WindowDecode(tokens, task, max_tokens=runtime.max_tokens) for _ in SENTENCES]
    runtime.decode(windows, audio)
    extracted = runtime.extractor(audio, sampling_rate=runtime.sample_rate, return_tensors="pt")
    features = extracted.input_features
    assert [w.language for w in windows] == ["en", "en"]
    reference = ctranslate2.models.Whisper(str(ct2_folder), device="cpu", compute_type="float32")
    prompt = [tokens.start_of_transcript, tokens.languages["en"], tokens.tasks["transcribe"]]
    prompt += [] if timestamps else [tokens.no_timestamps]
    alone = [
        reference.generate(
            ctranslate2.StorageView.from_array(f[None].numpy()), [prompt], beam_size=1
        )[0]
        for f in features
    ]
    assert [w.generated for w in windows] == [r.sequences_ids[0] for r in alone]
    if timestamps:
        assert all(segments_of(w.generated, tokens, seconds=30.0) for w in windows)

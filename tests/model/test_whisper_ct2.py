"""Whisper weights converted for CTranslate2, back in transformers' form
(atom/model/whisper): against CTranslate2's own converter and its own Whisper."""

from __future__ import annotations

import shutil
from pathlib import Path

import ctranslate2
import pytest
import torch
from transformers import (
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperTokenizer,
)

from atom.model.whisper.convert import state_dict
from atom.model.whisper.ct2 import Ct2Error, read_model
from atom.model.whisper.package import ctranslate2_folder, package_data, transformers_folder
from tests.audio.media import spoken

SPEECH = "The quick brown fox jumps over the lazy dog. It was a sunny morning."


def test_a_model_converted_by_ctranslate2_comes_back_bit_for_bit(tmp_path: Path) -> None:
    """A random Whisper through CTranslate2's converter and back: every tensor equal."""
    tokenizer = WhisperTokenizer(tokenizer_file=str(package_data()[1] / "tokenizer.json"))
    config = WhisperConfig(
        vocab_size=51865, num_mel_bins=80, d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_source_positions=1500, max_target_positions=448,
    )  # fmt: skip
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    for parameter in model.parameters():  # biases too (transformers starts them at zero)
        torch.nn.init.normal_(parameter)
    model.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    ctranslate2.converters.TransformersConverter(str(tmp_path / "hf")).convert(
        str(tmp_path / "ct2")
    )
    converted = state_dict(read_model((tmp_path / "ct2" / "model.bin").read_bytes()))
    expected = {k: v for k, v in model.state_dict().items() if k != "proj_out.weight"}  # tied
    assert converted.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(converted[name], tensor), name


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x05\x00\x00\x00", "binary version 5"),
        ((6).to_bytes(4, "little") + b"\x07", "ends early"),
    ],
)
def test_a_file_that_is_not_a_model_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(Ct2Error, match=reason):
        read_model(data)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return transformers_folder(str(tmp_path_factory.mktemp("cache")))


def greedy(
    model: WhisperForConditionalGeneration,
    features: torch.Tensor,
    prompt: list[int],
    suppress: list[int],
) -> list[int]:
    """Token by token, the most likely one, `suppress` never: the reference decoding."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        encoded = model.model.encoder(features).last_hidden_state
        while ids.shape[1] < 100:
            logits = model(encoder_outputs=(encoded,), decoder_input_ids=ids).logits[0, -1]
            logits[suppress] = -torch.inf
            token = int(logits.argmax())
            if token == model.config.eos_token_id:
                break
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return ids[0, len(prompt) :].tolist()


@pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="needs Debian's espeak-ng (make test installs it)"
)
def test_the_packaged_whisper_hears_what_ctranslate2_hears(folder: Path, tmp_path: Path) -> None:
    """The converted base model's greedy transcript of spoken English equals
    CTranslate2's (faster-whisper's engine) on the packages' own model file."""
    samples = spoken(SPEECH)
    features = WhisperFeatureExtractor.from_pretrained(folder)(
        samples, sampling_rate=16_000, return_tensors="pt"
    ).input_features
    tokenizer = WhisperTokenizer.from_pretrained(folder)
    prompt = tokenizer.convert_tokens_to_ids(
        ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
    )
    model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    ours = greedy(model, features, prompt, model.config.suppress_tokens)
    ct2_dir = ctranslate2_folder(tmp_path / "ct2")
    reference = ctranslate2.models.Whisper(str(ct2_dir), device="cpu", compute_type="float32")
    [result] = reference.generate(
        ctranslate2.StorageView.from_array(features.numpy()), [prompt], beam_size=1
    )
    assert ours == result.sequences_ids[0]
    text = tokenizer.decode(ours).lower()
    assert "fox jumps over the lazy dog" in text and "sunny morning" in text, text


def test_the_folder_is_made_once(folder: Path) -> None:
    made = (folder / "model.safetensors").stat().st_mtime_ns
    assert transformers_folder(str(folder.parent.parent)) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == made
    assert not list(folder.parent.glob("*.partial"))

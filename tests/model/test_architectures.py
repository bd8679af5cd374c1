"""The paged runner on architectures beyond Llama/Qwen2, built tiny from their configs:
greedy tokens equal transformers' `generate` (chunked prefill, both decode paths), and
for Gemma 2 (sliding windows on alternate layers + score soft-capping, whose squashed
logits make random-model argmax ties too close to compare tokens) the logits of every
step equal transformers' own full forward."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

from atom.model.runner import SeqChunk
from tests.model.tiny import GREEDY, PROMPTS, generate, run_all, tiny_model, torch_runner

ARCHITECTURES: dict[str, dict[str, Any]] = {
    "Qwen3Config": {"head_dim": 16},
    "GemmaConfig": {"head_dim": 16},
    "MistralConfig": {"sliding_window": 8},  # every layer windowed, prompts up to 64
    "Cohere2Config": {"sliding_window": 8},  # windowed and full layers mixed
    "Phi3Config": {"pad_token_id": 0},
    "GPTNeoXConfig": {"num_key_value_heads": 4},  # no GQA; the runner reads this field
    "Starcoder2Config": {"sliding_window": None},
}


@pytest.mark.parametrize("cpp", [False, True], ids=["gather", "cpp"])
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_greedy_tokens_match_transformers_generate(name: str, cpp: bool) -> None:
    config_cls = getattr(transformers, name)
    overrides = ARCHITECTURES[name]
    reference = tiny_model(config_cls, **overrides)
    prompts = PROMPTS[:12]
    ours, _ = run_all(torch_runner(config_cls, cpp=cpp, **overrides), prompts, budget=16)
    assert ours == [generate(reference, p) for p in prompts]


@pytest.mark.parametrize("cpp", [False, True], ids=["gather", "cpp"])
def test_gemma2_window_and_softcap_logits_match_a_full_forward(cpp: bool) -> None:
    overrides = {
        "head_dim": 16,
        "sliding_window": 8,
        "attn_logit_softcapping": 1.0,
        "initializer_range": 0.2,  # scores large enough for the cap to matter
    }
    reference = tiny_model(transformers.Gemma2Config, **overrides)
    runner = torch_runner(transformers.Gemma2Config, cpp=cpp, **overrides)
    tokens = list(PROMPTS[7][:20])  # prefilled in chunks of 6, then decoded one by one
    chunks = [(0, 6), (6, 12), (12, 20)] + [(n, n + 1) for n in range(20, 30)]
    with torch.inference_mode():
        for start, end in chunks:
            chunk = SeqChunk(
                seq_id="s",
                token_ids=tuple(tokens[start:end]),
                start_pos=start,
                block_ids=tuple(range(8)),
                params=GREEDY,
                seed=0,
                num_prompt_tokens=20,
            )
            ours = runner._forward((chunk,), runner._keep((chunk,)))[-1]
            full = reference(torch.tensor([tokens[:end]])).logits[0, -1]
            torch.testing.assert_close(ours, full, rtol=1e-4, atol=1e-4)
            if end == len(tokens):
                tokens.append(int(full.argmax()))  # the greedy continuation

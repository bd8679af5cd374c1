"""`--model-impl`: which models ATOM's own forward takes over, and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
import transformers

from atom.model.forward.llama_forward import LlamaForward, own_forward, unsupported_reason
from atom.vocabulary.config import Settings
from tests.model.tiny import PROMPTS, generate, run_all, tiny_model, torch_runner


@pytest.mark.parametrize(
    ("name", "overrides", "reason"),
    [
        ("LlamaConfig", {}, None),
        ("Qwen2Config", {}, None),  # q/k/v biases are fused too
        ("MistralConfig", {"sliding_window": None}, None),
        ("MistralConfig", {"sliding_window": 8}, "sliding-window attention"),
        ("LlamaConfig", {"hidden_act": "gelu"}, "activation gelu"),
        ("GemmaConfig", {"head_dim": 16}, "GemmaForCausalLM has no ATOM implementation"),
    ],
)
def test_unsupported_reason(name: str, overrides: dict[str, Any], reason: str | None) -> None:
    model = tiny_model(getattr(transformers, name), **overrides)
    assert unsupported_reason(model) == reason
    assert isinstance(own_forward(model, "auto"), LlamaForward) == (reason is None)
    assert own_forward(model, "transformers") is model
    if reason is not None:
        with pytest.raises(ValueError, match="cannot run this model"):
            own_forward(model, "atom")


def test_unknown_implementation_is_refused() -> None:
    with pytest.raises(ValueError, match=r"--model-impl \(ATOM_MODEL_IMPL\)"):
        Settings(model_impl="vllm")  # type: ignore[arg-type]  # refused once, at the start


def test_mistral_without_window_matches_generate() -> None:
    config_cls, overrides = transformers.MistralConfig, {"sliding_window": None}
    reference = tiny_model(config_cls, **overrides)
    prompts = PROMPTS[:8]
    ours, _ = run_all(torch_runner(config_cls, impl="atom", **overrides), prompts, budget=16)
    assert ours == [generate(reference, p) for p in prompts]

"""`--quantization int8`: every Linear becomes an Int8Linear whose outputs stay close to
float32, for transformers' classes and ATOM's own forward alike."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from atom.model.int8 import Int8Linear
from atom.model.lean import lean_model
from atom.model.quantization import quantize
from tests.model.tiny import tiny_model


def test_int8_linear_is_close_to_float() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 40)
    x = torch.randn(5, 96)
    expected = linear(x)
    got = Int8Linear(linear)(x)
    assert got.shape == expected.shape
    assert (got - expected).abs().max() < 0.02 * expected.abs().max()


@pytest.mark.parametrize(("impl", "linears"), [("transformers", 2 * 7 + 1), ("atom", 2 * 4 + 1)])
def test_quantize_replaces_every_linear(impl: str, linears: int) -> None:
    model = lean_model(tiny_model(LlamaConfig), impl)
    quantize(model, "int8", "cpu")
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert sum(isinstance(m, Int8Linear) for m in model.modules()) == linears


def test_quantized_logits_stay_close_to_float() -> None:
    ids = torch.tensor([[5, 17, 42, 8, 99, 3]])
    model = tiny_model(LlamaConfig, initializer_range=0.2)
    with torch.inference_mode():
        expected = model(input_ids=ids).logits[0, -1]
        quantize(model, "int8", "cpu")
        got = model(input_ids=ids).logits[0, -1]
    assert torch.nn.functional.cosine_similarity(got, expected, dim=0) > 0.99
    assert not torch.equal(got, expected)


def test_quantize_refuses_unknown_methods_and_cuda() -> None:
    model = tiny_model(LlamaConfig)
    with pytest.raises(ValueError, match="int3"):
        quantize(model, "int3", "cpu")
    with pytest.raises(ValueError, match="CPU only"):
        quantize(model, "int8", "cuda")

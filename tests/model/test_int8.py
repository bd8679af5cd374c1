"""`--quantization int8`: every Linear becomes an Int8Linear whose outputs stay close to
float32, for transformers' classes and ATOM's own forward alike."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import LlamaConfig

from atom.model.forward.int8 import Int8Linear
from atom.model.forward.kernels import load_cpu_ops
from atom.model.forward.llama_forward import own_forward
from atom.model.forward.quantization import quantize
from atom.vocabulary.config import Settings
from tests.model.tiny import tiny_model


def test_int8_linear_is_close_to_float() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 40)
    x = torch.randn(5, 96)
    expected = linear(x)
    got = Int8Linear(linear)(x)
    assert got.shape == expected.shape
    assert (got - expected).abs().max() < 0.02 * expected.abs().max()


@pytest.mark.parametrize("kernel", [False, True])
def test_a_row_gets_the_same_output_alone_and_among_many(kernel: bool) -> None:
    """Activations stay float, so an outlier row cannot coarsen the others (torch's fbgemm
    path, used before for more than 2 rows, quantized the whole batch to one 7-bit range)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 40)
    layer = Int8Linear(linear, cpu_ops().int8_linear if kernel else None)
    x = torch.randn(40, 96)
    x[7] *= 1000
    together = layer(x)
    alone = torch.cat([layer(row.unsqueeze(0)) for row in x])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(together[:7], linear(x[:7]), rtol=0.02, atol=0.02)


@pytest.mark.parametrize(("impl", "linears"), [("transformers", 2 * 7 + 1), ("atom", 2 * 4 + 1)])
def test_quantize_replaces_every_linear(impl: str, linears: int) -> None:
    model = own_forward(tiny_model(LlamaConfig), impl)
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
    with pytest.raises(ValueError, match=r"--quantization \(ATOM_QUANTIZATION\).*'int3'"):
        Settings(quantization="int3")  # type: ignore[arg-type]  # refused once, at the start
    with pytest.raises(ValueError, match="CPU only"):
        quantize(model, "int8", "cuda")


def cpu_ops() -> Any:
    return load_cpu_ops(Settings().cache_dir)

"""`--quantization int4`: 4-bit blocks that give back Q4_1 weights exactly, the kernel
against the same arithmetic in torch, and a quantized model that stays close to float."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from atom.model.forward.blocks import Q4_1, Q5_1, Q6_K, Q8_0, BlockFormat, BlockLinear
from atom.model.forward.int4 import quantize_blocks
from atom.model.forward.llama_forward import own_forward
from atom.model.forward.quantization import quantize
from atom.model.loader import default_model_path
from tests.model.tiny import KERNEL_ISAS, block_product, cpu_ops, kernel_isa, tiny_model


def q4_1_weights(rows: int, width: int, seed: int) -> torch.Tensor:
    """Weights as a Q4_1 file holds them: d * q + m per block of 32, q spanning 0..15."""
    gen = torch.Generator().manual_seed(seed)
    blocks = width // 32
    q = torch.randint(0, 16, (rows, blocks, 32), generator=gen)
    q[..., 0], q[..., 1] = 0, 15  # the quantizer maps a block's min and max there
    d = (torch.rand(rows, blocks, 1, generator=gen) / 20).half().float()
    m = (-torch.rand(rows, blocks, 1, generator=gen) / 3).half().float()
    return (q * d + m).reshape(rows, width)


def test_q4_1_weights_come_back_exactly() -> None:
    weight = q4_1_weights(24, 96, seed=1)
    blocks, dequantized = quantize_blocks(weight)
    assert blocks.dtype == torch.uint8 and blocks.shape == (24, 96 // 32 * 20)
    assert torch.equal(dequantized, weight)


def test_other_weights_are_within_half_a_step() -> None:
    weight = torch.randn(16, 64, generator=torch.Generator().manual_seed(2))
    _, dequantized = quantize_blocks(weight)
    span = weight.view(16, 2, 32).amax(-1) - weight.view(16, 2, 32).amin(-1)
    error = (dequantized - weight).abs().view(16, 2, 32).amax(-1)
    assert (error <= span / 30 * 1.01 + 1e-3).all()


# widths of 1 to 19 blocks: groups of four, a pair and a block alone after them
WIDTHS = [(32, False), (64, False), (96, True), (160, True), (608, False)]


@pytest.mark.parametrize("isa", KERNEL_ISAS)
# rows: groups of 4 (VNNI), of 16 and a rest (AMX, from 8), two jobs of the product
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7, 12, 37, 63, 64, 70, 130])
@pytest.mark.parametrize(("width", "bias"), WIDTHS)
def test_int4_linear_matches_the_same_arithmetic(
    isa: str, rows: int, width: int, bias: bool
) -> None:
    gen = torch.Generator().manual_seed(rows * width)
    weight = q4_1_weights(48, width, seed=rows)
    b = torch.randn(48, generator=gen) if bias else None
    x = torch.randn(1, rows, width, generator=gen)
    with kernel_isa(isa):
        got = cpu_ops().int4_linear(x, Q4_1.pack(weight), b)
    assert got.shape == (1, rows, 48)
    expected = block_product(x[0], weight, b, minimums=True)
    torch.testing.assert_close(got[0], expected, rtol=1e-4, atol=1e-4)
    exact = x[0] @ weight.T + (0 if b is None else b)
    assert (got[0] - exact).abs().max() < 0.02 * exact.abs().max()  # int8 activations


@pytest.mark.parametrize("isa", KERNEL_ISAS)
@pytest.mark.parametrize("rows", [1, 3, 7, 12, 37, 70, 130])
def test_q5_linear_matches_the_same_arithmetic(isa: str, rows: int) -> None:
    """Q5_1 runs the Q4_1 loops with each nibble given its fifth bit from the tiles' bit
    planes: every row count, on every instruction set, against the block arithmetic."""
    gen = torch.Generator().manual_seed(rows)
    linear = torch.nn.Linear(608, 48)
    blocks, values = Q5_1.quantize(linear.weight)
    assert values.sub(linear.weight).abs().max() < linear.weight.abs().max() / 31
    x = torch.randn(rows, 608, generator=gen)
    with kernel_isa(isa):
        got = cpu_ops().q5_linear(x, Q5_1.pack(linear.weight, blocks), linear.bias)
    expected = block_product(x, values, linear.bias, minimums=True)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", KERNEL_ISAS)
@pytest.mark.parametrize("rows", [1, 3, 7, 12, 37, 70, 130])
def test_q6_linear_matches_the_same_arithmetic(isa: str, rows: int) -> None:
    """Q6_K blocks of 32: nibbles given two bits from the planes, a sum a half-block
    times its int8 scale; every row count (the AMX set runs the VNNI loops), against
    the block arithmetic, and the quantizer within half a step of a half-block."""
    gen = torch.Generator().manual_seed(rows)
    linear = torch.nn.Linear(608, 48)
    blocks, values = Q6_K.quantize(linear.weight)
    halves = linear.weight.detach().view(48, -1, 2, 16)
    largest = halves.abs().amax(-1, keepdim=True)  # a step is ≤ this / 31 + the block's d
    d = largest.amax(-2, keepdim=True) / (31 * 126) * 1.001
    assert ((values.view_as(halves) - halves).abs() <= (largest / 31 + d) / 2 + 1e-7).all()
    x = torch.randn(rows, 608, generator=gen)
    with kernel_isa(isa):
        got = cpu_ops().q6_linear(x, Q6_K.pack(linear.weight, blocks), linear.bias)
    expected = block_product(x, values, linear.bias, minimums=False)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_int4_linear_refuses_widths_off_the_block_and_rows_off_the_tile() -> None:
    with pytest.raises(RuntimeError, match="blocks of 32"):
        cpu_ops().int4_linear(torch.zeros(1, 40), torch.zeros(16, 20, dtype=torch.uint8), None)
    with pytest.raises(RuntimeError, match="tiles of 16 rows, not 24"):
        cpu_ops().int4_linear(torch.zeros(1, 32), torch.zeros(24, 20, dtype=torch.uint8), None)


@pytest.mark.parametrize("fmt", [Q4_1, Q5_1, Q6_K, Q8_0], ids=lambda fmt: fmt.name)
def test_a_layer_whose_outputs_fill_no_whole_tile_gets_them_all(fmt: BlockFormat) -> None:
    linear = torch.nn.Linear(64, 40)  # two tiles and a half
    layer = BlockLinear(linear, fmt, cpu_ops())
    assert layer.blocks.shape[0] == 48 and layer.projection(cpu_ops()) is None
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(5))
    got = layer(x)
    assert got.shape == (3, 40) and got.is_contiguous()
    values = fmt.quantize(linear.weight)[1]
    expected = block_product(x, values, linear.bias, minimums=fmt in (Q4_1, Q5_1))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("fmt", [Q4_1, Q5_1, Q6_K, Q8_0], ids=lambda fmt: fmt.name)
def test_a_row_gets_the_same_bits_alone_among_many_and_on_either_isa(fmt: BlockFormat) -> None:
    """Activations are quantized per row and block, and each output is summed in one
    order whatever the batch holds: a sequence's numbers do not depend on its neighbours
    (a decode batch, a speculative verify step), nor on AVX2 against AVX-512."""
    linear = torch.nn.Linear(608, 48)
    if fmt is Q4_1:
        linear.weight.data = q4_1_weights(48, 608, seed=3)
    layer = BlockLinear(linear, fmt, cpu_ops())
    x = torch.randn(40, 608, generator=torch.Generator().manual_seed(4))
    x[7] *= 1000  # an outlier row
    results = []
    for isa in KERNEL_ISAS:
        with kernel_isa(isa):
            together = layer(x)
            alone = torch.cat([layer(row.unsqueeze(0)) for row in x])
            pairs = torch.cat([layer(x[i : i + 2]) for i in range(0, 40, 2)])
        assert torch.equal(together, alone) and torch.equal(together, pairs)
        results.append(together)
    assert all(torch.equal(results[0], other) for other in results[1:])
    values = fmt.quantize(linear.weight)[1]
    expected = block_product(x, values, linear.bias, minimums=fmt in (Q4_1, Q5_1))
    torch.testing.assert_close(results[0], expected, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("config_cls", [LlamaConfig, Qwen2Config])
def test_int4_model_of_q4_1_weights_stays_close_to_float(config_cls: type) -> None:
    ids = torch.tensor([[5, 17, 42, 8, 99, 3]])
    model = tiny_model(config_cls, initializer_range=0.2)
    for module in model.modules():  # weights a Q4_1 file could hold, as the default model's
        if isinstance(module, torch.nn.Linear) and module is not model.lm_head:
            module.weight.data = quantize_blocks(module.weight)[1]
    with torch.inference_mode():
        expected = model(input_ids=ids).logits[0, -1]
        quantize(model, "int4", "cpu", kernels=cpu_ops())
        got = model(input_ids=ids).logits[0, -1]
    assert torch.nn.functional.cosine_similarity(got, expected, dim=0) > 0.99


def test_quantize_int4_puts_the_output_projection_in_q8_0_blocks() -> None:
    model = own_forward(tiny_model(LlamaConfig), "atom")
    forms = quantize(model, "int4", "cpu", kernels=cpu_ops())
    kinds = ("down_proj", "gate_up_proj", "o_proj", "qkv_proj")
    assert forms == {kind: "Q4_1" for kind in kinds} | {"lm_head": "Q8_0"}
    assert isinstance(model.lm_head, BlockLinear) and model.lm_head.format is Q8_0
    layers = [m for m in model.modules() if isinstance(m, BlockLinear) and m.format is Q4_1]
    assert len(layers) == 2 * 4
    with pytest.raises(ValueError, match="needs ATOM's CPU kernels"):
        quantize(tiny_model(LlamaConfig), "int4", "cpu")


def test_the_default_models_q4_1_blocks_come_back_byte_for_byte() -> None:
    """Dequantized and re-quantized, the GGUF's own blocks: same scales, minimums, nibbles."""
    import gguf  # type: ignore[import-untyped]

    reader = gguf.GGUFReader(str(default_model_path()))
    tensors = [t for t in reader.tensors if t.name.startswith("blk.0.")]
    assert sum(t.tensor_type.name == "Q4_1" for t in tensors) == 7  # q, k, v, o, gate, up, down
    for tensor in (t for t in tensors if t.tensor_type.name == "Q4_1"):
        raw = torch.from_numpy(np.asarray(tensor.data).copy())  # [rows, blocks * 20]
        rows, nb = raw.shape[0], raw.shape[1] // 20
        raw = raw.view(rows, nb, 20)
        scale, minimum = raw[..., 0:2].view(torch.float16), raw[..., 2:4].view(torch.float16)
        nibbles = raw[..., 4:]
        q = torch.cat([nibbles & 15, nibbles >> 4], dim=-1).float()
        weight = (q * scale.float() + minimum.float()).reshape(rows, nb * 32)
        blocks, _ = quantize_blocks(weight)
        assert torch.equal(blocks[:, : 2 * nb].view(torch.float16), scale.reshape(rows, nb))
        assert torch.equal(
            blocks[:, 2 * nb : 4 * nb].view(torch.float16), minimum.reshape(rows, nb)
        )
        assert torch.equal(blocks[:, 4 * nb :], nibbles.reshape(rows, nb * 16))

"""`--quantization auto`: each layer in the block format its GGUF tensors ship in, the
types without a kernel as Q8_0, float tensors float; nothing for other weights."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import LlamaConfig

from atom.model.forward import q8
from atom.model.forward.blocks import (
    Q4_1,
    Q5_1,
    Q6_K,
    Q8_0,
    BlockEmbedding,
    BlockFormat,
    BlockLinear,
    embedding_from_head,
    rows_of_tiles,
)
from atom.model.forward.llama_forward import own_forward
from atom.model.forward.quantization import quantize, tied_quantized_table
from atom.model.loader import (
    _own_storage,
    default_model_path,
    describe,
    kv_cache_dtype,
    open_gguf,
)
from atom.vocabulary.config import Settings
from tests.model.tiny import TINY, cpu_ops, tiny_model

PARTS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def gguf_types(**override: str) -> dict[str, str]:
    """A tiny model's tensors as a Q4_1 file names them (the embedding Q8_0, tied)."""
    types = {
        f"blk.{layer}.{part}.weight": "Q4_1"
        for layer in range(TINY["num_hidden_layers"])
        for part in PARTS
    }
    return {**types, "token_embd.weight": "Q8_0", **override}


def forms_of(model: Any) -> list[tuple[str, str]]:
    return [
        (name, m.format.name if isinstance(m, BlockLinear) else type(m).__name__)
        for name, m in model.named_modules()
        if isinstance(m, BlockLinear | torch.nn.Linear)
    ]


def test_auto_runs_each_layer_in_the_format_its_tensors_ship_in() -> None:
    model = own_forward(tiny_model(LlamaConfig), "atom")
    types = gguf_types(
        **{
            "blk.1.attn_v.weight": "Q6_K",
            "blk.0.ffn_down.weight": "F16",
            "blk.1.attn_output.weight": "Q4_K",  # no file to read its blocks: from floats
        }
    )
    forms = quantize(model, "auto", "cpu", kernels=cpu_ops(), gguf_types=types)
    assert forms == {
        "down_proj": "1 Q4_1, 1 float",
        "gate_up_proj": "Q4_1",
        "lm_head": "Q8_0",
        "o_proj": "1 Q4_1, 1 Q4_1 (from Q4_K)",
        "qkv_proj": "1 Q4_1, 1 Q8_0 (from Q4_1+Q6_K)",
    }
    layers = dict(forms_of(model))
    assert layers["layers.0.qkv_proj"] == "Q4_1" and layers["layers.1.qkv_proj"] == "Q8_0"
    assert layers["layers.0.down_proj"] == "Linear" and layers["layers.1.down_proj"] == "Q4_1"
    assert layers["lm_head"] == "Q8_0"


def test_an_untied_output_projection_takes_the_output_tensors_type() -> None:
    for shipped, form in (("Q6_K", "Q6_K"), ("Q3_K", "Q8_0 (from Q3_K)")):
        types = gguf_types(**{"output.weight": shipped})
        quantized = own_forward(tiny_model(LlamaConfig), "atom")
        forms = quantize(quantized, "auto", "cpu", kernels=cpu_ops(), gguf_types=types)
        assert forms["lm_head"] == form


def test_auto_leaves_other_weights_as_they_are() -> None:
    """safetensors weights (no GGUF types), no kernels, or CUDA: nothing is swapped."""
    for kwargs in (
        {"device": "cpu", "kernels": cpu_ops(), "gguf_types": None},
        {"device": "cpu", "kernels": None, "gguf_types": gguf_types()},
        {"device": "cuda", "kernels": cpu_ops(), "gguf_types": gguf_types()},
    ):
        model = own_forward(tiny_model(LlamaConfig), "atom")
        assert quantize(model, "auto", **kwargs) == {}
        assert {form for _, form in forms_of(model)} == {"Linear"}


def test_an_auto_model_of_shipped_blocks_stays_close_to_float() -> None:
    """Weights a Q4_1/Q8_0 file could hold: the blocks carry them exactly, so only the
    activations' per-block int8 rounding moves the logits, as `int4` (the same forms)
    does to the last bit (transformers' classes: unfused q/k/v names map too)."""
    import copy

    from atom.model.forward import int4, q8

    model = tiny_model(LlamaConfig, initializer_range=0.2)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            shipped = q8 if name == "lm_head" else int4
            module.weight.data = shipped.quantize_blocks(module.weight)[1]
    ids = torch.tensor([[5, 17, 42, 8, 99, 3]])
    twin = copy.deepcopy(model)
    with torch.inference_mode():
        expected = model(input_ids=ids).logits[0, -1]
        forms = quantize(model, "auto", "cpu", kernels=cpu_ops(), gguf_types=gguf_types())
        got = model(input_ids=ids).logits[0, -1]
        quantize(twin, "int4", "cpu", kernels=cpu_ops())
        assert torch.equal(twin(input_ids=ids).logits[0, -1], got)
    assert torch.nn.functional.cosine_similarity(got, expected, dim=0) > 0.99
    assert set(forms.values()) == {"Q4_1", "Q8_0"} and forms["q_proj"] == "Q4_1"


def test_the_default_models_types_and_their_description() -> None:
    with open_gguf(default_model_path()) as file:
        assert file is not None
        types = file.types
    assert types["token_embd.weight"] == "Q8_0"
    assert sum(t == "Q4_1" for t in types.values()) == 210
    assert describe("auto", {}) == "off" and describe("int8", {"o_proj": "int8"}) == (
        "int8 (o_proj int8)"
    )
    assert describe("auto", {"lm_head": "Q8_0", "o_proj": "Q4_1"}) == (
        "auto (lm_head Q8_0, o_proj Q4_1)"
    )


def test_the_kv_cache_is_float16_by_default_only_where_layers_run_quantized() -> None:
    assert kv_cache_dtype("auto", "float32", {"qkv_proj": "Q4_1", "lm_head": "float"}) == "float16"
    assert kv_cache_dtype("auto", "float32", {"o_proj": "int8"}) == "float16"
    assert kv_cache_dtype("auto", "float32", {}) == "float32"  # safetensors, `off`
    assert kv_cache_dtype("auto", "float32", {"qkv_proj": "float"}) == "float32"
    assert kv_cache_dtype("auto", "bfloat16", {}) == "bfloat16"  # CUDA
    assert kv_cache_dtype("float32", "float32", {"qkv_proj": "Q4_1"}) == "float32"
    assert kv_cache_dtype("bfloat16", "float32", {}) == "bfloat16"
    with pytest.raises(ValueError, match=r"--kv-cache-dtype \(ATOM_KV_CACHE_DTYPE\): expected"):
        Settings(kv_cache_dtype="fp8")  # type: ignore[arg-type]


def test_after_quantizing_no_kept_tensor_views_the_loaded_weights() -> None:
    """transformers maps the weights file and its tensors view the mapping; one kept view
    would keep the whole file resident (a 1B model: 4 GB) after its layers were replaced."""
    source = tiny_model(LlamaConfig)
    model = own_forward(source, "atom")
    held = [t.untyped_storage() for t in source.parameters()]  # no address reused
    addresses = {storage.data_ptr() for storage in held}
    quantize(model, "int4", "cpu", kernels=cpu_ops())
    kept = [*model.parameters(), *model.buffers()]
    assert any(t.untyped_storage().data_ptr() in addresses for t in kept)  # e.g. the embedding
    blocks = [m.blocks for m in model.modules() if isinstance(m, BlockLinear)]
    _own_storage(model, source)
    kept = [*model.parameters(), *model.buffers()]
    assert kept and all(t.untyped_storage().data_ptr() not in addresses for t in kept)
    after = [m.blocks for m in model.modules() if isinstance(m, BlockLinear)]
    assert all(a.data_ptr() == b.data_ptr() for a, b in zip(after, blocks, strict=True))


def test_a_tied_q8_0_table_is_looked_up_in_the_output_blocks_with_the_same_values() -> None:
    model = own_forward(tiny_model(LlamaConfig, vocab_size=304), "atom")
    table = model.embed_tokens.weight
    table.data = q8.quantize_blocks(table.data)[1]  # values a Q8_0 file holds
    model.lm_head.weight = table  # tied, as the default model's
    quantize(model, "int4", "cpu", kernels=cpu_ops())
    lookup = embedding_from_head(model.embed_tokens, model.lm_head)
    assert isinstance(lookup, BlockEmbedding) and lookup.blocks is model.lm_head.blocks
    ids = torch.tensor([[0, 5, 17, 303], [16, 15, 31, 32]])
    assert torch.equal(lookup(ids), table[ids])
    # values no Q8_0 block gives back, or a table the blocks do not cover whole: kept
    other = own_forward(tiny_model(LlamaConfig, vocab_size=304), "atom")
    other.lm_head.weight = other.embed_tokens.weight
    quantize(other, "int4", "cpu", kernels=cpu_ops())
    assert embedding_from_head(other.embed_tokens, other.lm_head) is other.embed_tokens
    # unless the table is a GGUF's quantized one, tied (a Q6_K table: values re-rounded)
    approximate = embedding_from_head(other.embed_tokens, other.lm_head, requantized=True)
    assert isinstance(approximate, BlockEmbedding)
    got, want = approximate(ids), other.embed_tokens.weight[ids]
    step = want.view(*ids.shape, -1, 32).abs().amax(-1, keepdim=True) / 127
    assert not torch.equal(got, want)
    assert ((got - want).view((*step.shape[:-1], 32)).abs() <= step * 0.501).all()
    untied = own_forward(tiny_model(LlamaConfig, vocab_size=304), "atom")  # another table
    quantize(untied, "int4", "cpu", kernels=cpu_ops())
    assert embedding_from_head(other.embed_tokens, untied.lm_head, requantized=True) is (
        other.embed_tokens
    )
    assert tied_quantized_table({"token_embd.weight": "Q6_K"})
    assert not tied_quantized_table({"token_embd.weight": "Q6_K", "output.weight": "Q6_K"})
    assert not tied_quantized_table({"token_embd.weight": "F16"})
    assert not tied_quantized_table(None)
    ragged = own_forward(tiny_model(LlamaConfig), "atom")  # 300 tokens: a filled-up tile
    quantize(ragged, "int4", "cpu", kernels=cpu_ops())
    assert embedding_from_head(ragged.embed_tokens, ragged.lm_head) is ragged.embed_tokens


def test_a_tied_q6_k_table_is_looked_up_in_its_own_q6_k_blocks() -> None:
    """A Q4_K_M file's tied Q6_K table: the output runs on Q6_K blocks, and the lookups
    read them back exactly (the loader passes `requantized` for any tied quantized
    table; only Q8_0 blocks may then differ from it)."""
    model = own_forward(tiny_model(LlamaConfig, vocab_size=304), "atom")
    table = model.embed_tokens.weight
    blocks, table.data = Q6_K.quantize(table.data)  # values a Q6_K file holds, its rows
    model.lm_head.weight = table  # tied
    model.lm_head = BlockLinear(model.lm_head, Q6_K, cpu_ops(), blocks)
    lookup = embedding_from_head(model.embed_tokens, model.lm_head, requantized=True)
    assert isinstance(lookup, BlockEmbedding) and lookup.blocks is model.lm_head.blocks
    ids = torch.tensor([[0, 5, 17, 303], [16, 15, 31, 32]])
    assert torch.equal(lookup(ids), table[ids])
    other = own_forward(tiny_model(LlamaConfig, vocab_size=304), "atom")  # float values
    other.lm_head.weight = other.embed_tokens.weight
    other.lm_head = BlockLinear(other.lm_head, Q6_K, cpu_ops())
    assert embedding_from_head(other.embed_tokens, other.lm_head, requantized=True) is (
        other.embed_tokens
    )


@pytest.mark.parametrize("fmt", [Q4_1, Q5_1, Q6_K, Q8_0], ids=lambda fmt: fmt.name)
def test_rows_read_from_tiles_are_the_rows_tiled(fmt: BlockFormat) -> None:
    weight = torch.randn(48, 96, generator=torch.Generator().manual_seed(9))
    rows = fmt.quantize(weight)[0]
    ids = torch.tensor([0, 47, 16, 15, 5, 5, 33])
    assert torch.equal(rows_of_tiles(fmt.pack(weight, rows), ids, fmt), rows[ids])

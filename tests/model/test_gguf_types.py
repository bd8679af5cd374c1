"""Each GGUF type `--quantization auto` serves, against the `gguf` package's own
dequantization: Q4_0, Q4_1 and Q4_K as Q4_1 rows, Q5_0, Q5_1 and Q5_K as Q5_1 rows and
Q6_K as Q6_K rows made from the file's blocks, Q8_0 and Q3_K as Q8_0 blocks of their
weights; and the kernels' products on them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import gguf  # type: ignore[import-untyped]
import numpy as np
import pytest
import torch

from atom.model import loader
from atom.model.forward import q8
from atom.model.forward.blocks import Q4_1, Q5_1, Q6_K, Q8_0, BlockFormat, BlockLinear
from atom.model.forward.gguf_blocks import as_rows, dequantized
from atom.model.forward.quantization import quantize
from atom.vocabulary.config import Settings
from bench.big_model import write
from tests.model.tiny import KERNEL_ISAS, block_product, cpu_ops, kernel_isa

Q = gguf.GGMLQuantizationType
# where each type keeps its float16 scales (d, then dmin / m) in a block
SCALES = {
    Q.Q4_0: (0,),
    Q.Q4_1: (0, 2),
    Q.Q8_0: (0,),
    Q.Q4_K: (0, 2),
    Q.Q5_0: (0,),
    Q.Q5_1: (0, 2),
    Q.Q5_K: (0, 2),
    Q.Q6_K: (208,),
    Q.Q3_K: (108,),
}


def random_blocks(kind: Q, rows: int, cols: int, seed: int) -> np.ndarray:
    """Rows of `kind` blocks as a file could hold them: random bits, the float16 scales
    small and positive, Q8_0's values within ±127 and reaching it (as its quantizer
    makes them)."""
    rng = np.random.default_rng(seed)
    width, size = gguf.GGML_QUANT_SIZES[kind]
    raw = rng.integers(0, 256, (rows, cols // width, size), dtype=np.uint8)
    for at in SCALES[kind]:
        scale = rng.uniform(2e-5, 4e-4, raw.shape[:2]).astype(np.float16)
        raw[..., at : at + 2] = scale.view(np.uint8).reshape(*raw.shape[:2], 2)
    if kind == Q.Q8_0:
        raw[..., 2:][raw[..., 2:] == 0x80] = 0x81
        raw[..., 2] = 127
    return raw.reshape(rows, -1)


def reference(raw: np.ndarray, kind: Q) -> torch.Tensor:
    return torch.from_numpy(gguf.dequantize(raw, kind).astype(np.float32))


@pytest.mark.parametrize(
    ("kind", "fmt"),
    [
        (Q.Q4_0, Q4_1),
        (Q.Q4_1, Q4_1),
        (Q.Q4_K, Q4_1),
        (Q.Q5_0, Q5_1),
        (Q.Q5_1, Q5_1),
        (Q.Q5_K, Q5_1),
        (Q.Q4_K, Q5_1),  # a 4-bit part of a fused layer with 5-bit ones
    ],
    ids=lambda v: getattr(v, "name", v),
)
@pytest.mark.parametrize("isa", KERNEL_ISAS)
def test_four_and_five_bit_types_become_block_rows_the_kernel_multiplies(
    kind: Q, fmt: BlockFormat, isa: str
) -> None:
    raw = random_blocks(kind, 48, 512, seed=int(kind))
    weight = reference(raw, kind)
    rows = torch.from_numpy(as_rows(raw, kind.name, fmt.name))
    values, bound = dequantized(rows, fmt.name)
    if kind.name.endswith("_K"):  # the sub-blocks' d·sc and dmin·m rounded to float16
        assert ((values - weight).abs() <= bound).all() and not torch.equal(values, weight)
    else:
        assert torch.equal(values, weight)
    layer = BlockLinear(torch.nn.Linear(512, 48, bias=False), fmt, cpu_ops(), rows)
    x = torch.randn(20, 512, generator=torch.Generator().manual_seed(3))
    with kernel_isa(isa):
        got = layer(x)
    nb = 512 // 32
    minimum = rows[:, 2 * nb : 4 * nb].contiguous().view(torch.float16).float()
    expected = block_product(x, values, None, minimums=minimum.repeat_interleave(32, dim=1))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    exact = x @ weight.T
    assert (got - exact).abs().max() < 0.02 * exact.abs().max()  # int8 activations


def test_block_rows_refuse_a_type_they_cannot_hold() -> None:
    with pytest.raises(ValueError, match="Q5_K blocks cannot be Q4_1 rows"):
        as_rows(random_blocks(Q.Q5_K, 16, 256, seed=1), "Q5_K", "Q4_1")
    with pytest.raises(ValueError, match="Q4_K blocks cannot be Q6_K rows"):
        as_rows(random_blocks(Q.Q4_K, 16, 256, seed=1), "Q4_K", "Q6_K")


@pytest.mark.parametrize("isa", KERNEL_ISAS)
def test_q6_k_becomes_q6_k_rows_of_32_exactly_and_the_kernel_multiplies_them(isa: str) -> None:
    """Each block of 32 keeps its super-block's d, its halves' int8 scales and its
    values: the weights are gguf's own, bit for bit, and the kernel's products are the
    block arithmetic's (int8 activations, no minimums)."""
    raw = random_blocks(Q.Q6_K, 48, 512, seed=6)
    weight = reference(raw, Q.Q6_K)
    rows = torch.from_numpy(as_rows(raw, "Q6_K", "Q6_K"))
    assert rows.shape == (48, 512 // 32 * 28)
    values, bound = dequantized(rows, "Q6_K")
    assert torch.equal(values, weight) and not bound.any()
    layer = BlockLinear(torch.nn.Linear(512, 48, bias=False), Q6_K, cpu_ops(), rows)
    x = torch.randn(20, 512, generator=torch.Generator().manual_seed(3))
    with kernel_isa(isa):
        got = layer(x)
    expected = block_product(x, values, None, minimums=False)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    exact = x @ weight.T
    assert (got - exact).abs().max() < 0.02 * exact.abs().max()  # int8 activations


@pytest.mark.parametrize("kind", [Q.Q8_0, Q.Q3_K])
def test_eight_bit_and_other_k_types_become_q8_0_blocks(kind: Q) -> None:
    raw = random_blocks(kind, 32, 512, seed=int(kind))
    weight = reference(raw, kind)
    blocks, values = q8.quantize_blocks(weight)
    if kind == Q.Q8_0:
        assert torch.equal(values, weight)
    else:  # within half a Q8_0 step: 1/254 of the block's largest magnitude
        largest = weight.view(32, -1, 32).abs().amax(-1, keepdim=True)
        error = (values - weight).view(32, -1, 32).abs()
        assert (error <= largest / 254 * 1.001 + 1e-9).all()
    layer = BlockLinear(torch.nn.Linear(512, 32, bias=False), Q8_0, cpu_ops(), blocks)
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(4))
    expected = block_product(x, values, None, minimums=False)
    torch.testing.assert_close(layer(x), expected, rtol=1e-4, atol=1e-5)


SHAPE = {"hidden": 256, "layers": 2, "ffn": 512, "heads": 4, "kv_heads": 2}


def q4_k_layer(rows: int, cols: int, gen: torch.Generator) -> tuple[np.ndarray, Q]:
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    return random_blocks(Q.Q4_K, rows, cols, seed), Q.Q4_K


@pytest.fixture(scope="module")
def q4_k_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gguf") / "tiny.Q4_K.gguf"
    write(out, shape=SHAPE, layer=q4_k_layer)
    return out


@pytest.mark.very_slow  # a whole GGUF load, ~40 s: `make test-all`
def test_a_q4_k_file_is_served_on_its_own_blocks(q4_k_file: Path, tmp_path: Path) -> None:
    """The whole load: transformers' float copy (q/k rows reordered for its rotary
    layout, q/k/v and gate/up fused by ATOM's forward) matched to the file's blocks."""
    settings = Settings(cache_dir=str(tmp_path))
    floats = loader.load_model(
        str(q4_k_file),
        cache_dir=str(tmp_path),
        device="cpu",
        dtype=torch.float32,
        max_model_len=None,
    ).model
    attention = floats.model.layers[1].self_attn
    names = [f"blk.1.attn_{part}.weight" for part in "qkv"]
    twin = copy.deepcopy(floats)
    with loader.open_gguf(q4_k_file) as file:
        assert file is not None
        built = loader._forward_model(
            settings, str(q4_k_file), "cpu", "float32", cpu_ops(), file.types, file
        )
        projections = (attention.q_proj, attention.k_proj, attention.v_proj)
        parts = [
            file.block_rows([name], proj.weight, "Q4_1")
            for name, proj in zip(names, projections, strict=True)
        ]
        assert file.block_rows(names[:1], attention.q_proj.weight.flip(1), "Q4_1") is None
        forms = quantize(twin, "auto", "cpu", cpu_ops(), file.types, file)
    assert set(built.forms.values()) == set(forms.values()) == {"Q4_1 (from Q4_K)", "Q8_0"}
    assert all(rows is not None for rows in parts)
    fused = Q4_1.pack(torch.empty(0), torch.cat(parts))
    assert torch.equal(built.model.layers[1].qkv_proj.blocks, fused)
    served = [m.blocks for m in built.model.modules() if isinstance(m, BlockLinear)]
    assert len({b.untyped_storage().data_ptr() for b in served}) == 1  # one huge-page arena
    raw = {t.name: t.data for t in gguf.GGUFReader(str(q4_k_file)).tensors}
    in_file = torch.from_numpy(as_rows(np.asarray(raw[names[0]]), "Q4_K", "Q4_1"))
    assert not torch.equal(parts[0], in_file)  # transformers' order, not the file's
    assert sorted(map(bytes, parts[0].numpy())) == sorted(map(bytes, in_file.numpy()))
    values, bound = dequantized(parts[0], "Q4_1")
    assert ((values - attention.q_proj.weight).abs() <= bound).all()
    ids = torch.tensor([[1, 17, 300, 4000, 9]])
    with torch.inference_mode():
        expected, got = (m(input_ids=ids).logits[0, -1] for m in (floats, twin))
    assert torch.nn.functional.cosine_similarity(got, expected, dim=0) > 0.99


def written(path: Path, layer: Any) -> tuple[Any, Any]:
    """A tiny model written to `path` with `layer`'s blocks, loaded as transformers loads
    a GGUF (floats), and a copy of it for `quantize`."""
    write(path, shape=SHAPE, layer=layer)
    floats = loader.load_model(
        str(path), cache_dir=str(path.parent), device="cpu", dtype=torch.float32, max_model_len=None
    ).model
    return floats, copy.deepcopy(floats)


def assert_answers_close(floats: Any, twin: Any) -> None:
    ids = torch.tensor([[1, 17, 300, 4000, 9]])
    with torch.inference_mode():
        expected, got = (m(input_ids=ids).logits[0, -1] for m in (floats, twin))
    assert torch.nn.functional.cosine_similarity(got, expected, dim=0) > 0.99


def q5_k_layer(rows: int, cols: int, gen: torch.Generator) -> tuple[np.ndarray, Q]:
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    return random_blocks(Q.Q5_K, rows, cols, seed), Q.Q5_K


@pytest.mark.very_slow  # a whole GGUF load, ~40 s: `make test-all`
def test_a_q5_k_file_is_served_on_q5_1_blocks_of_its_own(tmp_path: Path) -> None:
    """A Q5_K file's layers run on Q5_1 blocks made from its blocks (not Q8_0 ones of
    the floats), and its answers stay those of its float weights."""
    path = tmp_path / "tiny.Q5_K.gguf"
    floats, twin = written(path, q5_k_layer)
    gate = floats.model.layers[0].mlp.gate_proj
    with loader.open_gguf(path) as file:
        assert file is not None
        rows = file.block_rows(["blk.0.ffn_gate.weight"], gate.weight, "Q5_1")
        assert file.block_rows(["blk.0.ffn_gate.weight"], gate.weight, "Q4_1") is None
        forms = quantize(twin, "auto", "cpu", cpu_ops(), file.types, file)
    assert set(forms.values()) == {"Q5_1 (from Q5_K)", "Q8_0"}
    assert rows is not None and torch.equal(
        twin.model.layers[0].mlp.gate_proj.blocks, Q5_1.pack(gate.weight, rows)
    )
    values, bound = dequantized(rows, "Q5_1")
    assert ((values - gate.weight).abs() <= bound).all()
    assert_answers_close(floats, twin)


def q4_k_m_layer(rows: int, cols: int, gen: torch.Generator) -> tuple[np.ndarray, Q]:
    """As a Q4_K_M file mixes them: Q6_K for k, v and ffn_down (llama.cpp's rules give
    attn_v and some ffn_down Q6_K), the rest Q4_K."""
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    kv_rows = SHAPE["hidden"] // SHAPE["heads"] * SHAPE["kv_heads"]
    kind = Q.Q6_K if rows == kv_rows or cols == SHAPE["ffn"] else Q.Q4_K
    return random_blocks(kind, rows, cols, seed), kind


@pytest.mark.very_slow  # a whole GGUF load, ~40 s: `make test-all`
def test_a_q4_k_m_like_file_serves_q6_k_layers_on_their_own_blocks(tmp_path: Path) -> None:
    """Q6_K layers (k, v and ffn_down here) run on Q6_K rows equal to the file's weights,
    the Q4_K ones on Q4_1 rows (transformers' classes: q/k/v not fused, so each part
    keeps its type); the answers stay the floats'."""
    path = tmp_path / "tiny.Q4_K_M.gguf"
    floats, twin = written(path, q4_k_m_layer)
    down = floats.model.layers[1].mlp.down_proj
    with loader.open_gguf(path) as file:
        assert file is not None
        rows = file.block_rows(["blk.1.ffn_down.weight"], down.weight, "Q6_K")
        assert file.block_rows(["blk.1.ffn_gate.weight"], down.weight, "Q6_K") is None
        forms = quantize(twin, "auto", "cpu", cpu_ops(), file.types, file)
    assert forms["down_proj"] == forms["v_proj"] == "Q6_K"
    assert forms["q_proj"] == forms["gate_proj"] == "Q4_1 (from Q4_K)"
    assert rows is not None and torch.equal(dequantized(rows, "Q6_K")[0], down.weight)
    assert torch.equal(twin.model.layers[1].mlp.down_proj.blocks, Q6_K.pack(down.weight, rows))
    assert_answers_close(floats, twin)

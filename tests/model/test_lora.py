"""LoRA adapters through ATOM's forward equal PEFT's own merged models, token for token,
with several adapters and the base model mixed in one batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from atom.model.forward.llama_forward import own_forward
from atom.model.forward.quantization import quantize
from atom.model.lora.adapter import BaseShapes, read_adapter
from atom.model.lora.mixing import Grouped, LoraSlots, OneAdapter
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.model.torch_runner import TorchRunner
from atom.vocabulary.events import Submit
from tests.lora_adapters import save_adapter, with_adapter
from tests.model.tiny import BLOCK, GREEDY, PROMPTS, cpu_ops, generate, run_all, tiny_model

LORAS = (None, "attn-r4", "all-r8")


def adapters(base: object, folder: Path) -> dict[str, Path]:
    """Two adapters of different ranks and targets (one rsLoRA), saved with PEFT."""
    return {
        "attn-r4": save_adapter(
            base, folder / "a", rank=4, targets=("q_proj", "v_proj", "o_proj"), seed=1
        ),
        "all-r8": save_adapter(base, folder / "b", rank=8, rslora=True, seed=2, alpha=8),
    }


TIE = 1e-3  # logits closer than this are a tie two exact computations may break apart


def assert_same_greedy(
    model: object, prompt: tuple[int, ...], got: list[int], want: list[int]
) -> None:
    """`got` is `want`, or parts from it only where the reference's two candidates were a
    tie: their logits (the model's full forward over the tokens so far) within TIE.
    (PEFT's own generate and full forward break such ties differently too.)"""
    if got == want:
        return
    k = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
    with torch.no_grad():
        logits = model(torch.tensor([[*prompt, *want[:k]]])).logits[0, -1]  # type: ignore[operator]
    gap = abs(float(logits[got[k]] - logits[want[k]]))
    assert gap < TIE, f"token {k}: {got[k]} instead of {want[k]}, {gap:.2e} apart"


def runner_with(
    base: object,
    folders: dict[str, Path],
    *,
    cpp: bool,
    num_blocks: int,
    quantization: str = "off",
) -> TorchRunner:
    kernels = cpu_ops() if cpp else None
    forward = own_forward(base, "atom", kernels=kernels)
    quantize(forward, quantization, "cpu", kernels=kernels)
    runner = TorchRunner(
        forward,
        eos_token_ids=frozenset({0}),
        max_model_len=256,
        num_blocks=num_blocks,
        block_size=BLOCK,
        decode_kernel=None if kernels is None else kernels.paged_decode,
        max_loras=len(folders),
        max_lora_rank=8,
        lora_kernel=None if kernels is None else kernels.lora_add,
    )
    shapes = BaseShapes.of(runner.model.config)
    for name, folder in folders.items():
        runner.add_lora(read_adapter(name, str(folder), shapes, max_rank=8, dtype=torch.float32))
    return runner


@pytest.mark.parametrize("config_cls", [LlamaConfig, Qwen2Config])
@pytest.mark.parametrize(
    ("cpp", "budget", "num_blocks"),
    [(False, 4096, 512), (True, 4096, 512), (False, 16, 512), (False, 4096, 40)],
    ids=["torch", "kernels", "chunked-prefill", "preempted"],
)
def test_mixed_batches_equal_peft_merged_models(
    config_cls: type, cpp: bool, budget: int, num_blocks: int, tmp_path: Path
) -> None:
    base = tiny_model(config_cls)
    folders = adapters(base, tmp_path)
    references = {
        None: base,
        **{name: with_adapter(base, f, merge=True) for name, f in folders.items()},
    }
    expected = [generate(references[LORAS[i % 3]], prompt) for i, prompt in enumerate(PROMPTS)]
    runner = runner_with(base, folders, cpp=cpp, num_blocks=num_blocks)
    loras = [LORAS[i % 3] for i in range(len(PROMPTS))]
    outputs, preemptions = run_all(runner, PROMPTS, budget=budget, loras=loras)
    for prompt, lora, got, want in zip(PROMPTS, loras, outputs, expected, strict=True):
        assert_same_greedy(references[lora], prompt, got, want)
    assert (preemptions > 0) == (num_blocks < 512)


@pytest.mark.parametrize("quantization", ["int4", "int8"])
def test_adapters_on_a_quantized_base(quantization: str, tmp_path: Path) -> None:
    """The delta goes on top of integer layers. On int4's block kernels (as on the
    default GGUF's) no row's output depends on the batch, with the LoRA kernel too:
    every request gets the same tokens mixed with other adapters' as alone."""
    base = tiny_model(LlamaConfig)
    folders = adapters(base, tmp_path)
    runner = runner_with(base, folders, cpp=True, num_blocks=512, quantization=quantization)
    loras = [LORAS[i % 3] for i in range(len(PROMPTS))]
    mixed, _ = run_all(runner, PROMPTS, loras=loras)
    plain, _ = run_all(runner, PROMPTS)
    changed = [mixed[i] != plain[i] for i, lora in enumerate(loras) if lora is not None]
    assert sum(changed) > len(changed) // 2
    if quantization == "int4":
        for lora in LORAS:
            mine = [i for i, other in enumerate(loras) if other == lora]
            alone, _ = run_all(runner, [PROMPTS[i] for i in mine], loras=[lora] * len(mine))
            assert alone == [mixed[i] for i in mine]


def test_adapters_change_the_output(tmp_path: Path) -> None:
    """The proof above means something: each adapter's answers differ from the base's."""
    base = tiny_model(LlamaConfig)
    folders = adapters(base, tmp_path)
    runner = runner_with(base, folders, cpp=False, num_blocks=512)
    for name in folders:
        outputs, _ = run_all(runner, PROMPTS, loras=[name] * len(PROMPTS))
        plain, _ = run_all(runner, PROMPTS)
        assert sum(a != b for a, b in zip(outputs, plain, strict=True)) > len(PROMPTS) // 2


def test_a_prefix_cached_under_one_adapter_is_not_reused_by_another(tmp_path: Path) -> None:
    base = tiny_model(LlamaConfig)
    folders = adapters(base, tmp_path)
    runner = runner_with(base, folders, cpp=False, num_blocks=512)
    prompt = PROMPTS[7]  # 64 tokens: many full blocks
    # One run: the same prompt under every adapter, in that order, sharing one cache.
    outputs, _ = run_all(runner, [prompt] * 3, loras=list(LORAS), budget=4096)
    for lora, got in zip(LORAS, outputs, strict=True):
        reference = with_adapter(base, folders[lora], merge=False) if lora else base
        assert_same_greedy(reference, prompt, got, generate(reference, prompt))


def test_a_step_mixes_at_most_max_loras_adapters_and_never_holds_back_the_base() -> None:
    kv = KVCacheManager(num_blocks=64, block_size=BLOCK, enable_prefix_caching=True)
    scheduler = Scheduler(
        kv=kv,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        eos_token_ids=frozenset({0}),
        max_model_len=256,
        max_loras=1,
    )
    for rid, lora in (("a", "one"), ("b", "two"), ("c", None), ("d", "one")):
        scheduler.add(Submit(request_id=rid, prompt_ids=PROMPTS[3], params=GREEDY, lora=lora))
    planned = {c.seq_id: c.lora for c in scheduler.schedule().chunks}
    assert planned == {"a/0": "one", "c/0": None, "d/0": "one"}
    assert {s.lora for s in scheduler.sequences() if s.has_blocks} == {"one", None}
    for request_id in ("a", "d"):
        scheduler.drop(request_id)
    assert "b/0" in {c.seq_id for c in scheduler.schedule().chunks}


def test_the_device_holds_at_most_max_loras_adapters(tmp_path: Path) -> None:
    base = tiny_model(LlamaConfig)
    shapes = BaseShapes.of(base.config)
    folders = adapters(base, tmp_path)
    slots = LoraSlots(1, 8, torch.device("cpu"))
    for name, folder in folders.items():
        slots.add(read_adapter(name, str(folder), shapes, max_rank=8, dtype=torch.float32))
    mixed = slots.step({"attn-r4": [0, 2]}, 3)  # row 1 is the base model's
    assert mixed is not None and isinstance(mixed.rows, OneAdapter)
    assert mixed.rows.rows is not None and mixed.rows.rows.tolist() == [0, 2]
    alone = slots.step({"all-r8": [0, 1, 2]}, 3)  # takes the one slot over
    assert alone is not None and alone.rows == OneAdapter(0, None)
    with pytest.raises(ValueError, match="--max-loras"):
        slots.step({"attn-r4": [0], "all-r8": [1]}, 2)
    two = LoraSlots(2, 8, torch.device("cpu"))
    for name, folder in folders.items():
        two.add(read_adapter(name, str(folder), shapes, max_rank=8, dtype=torch.float32))
    assert {two.step({n: [0]}, 1).rows.slot for n in folders} == {0, 1}  # type: ignore[union-attr]
    two.remove("attn-r4")  # its slot is free again; the other adapter keeps its own
    two.add(read_adapter("again", str(folders["attn-r4"]), shapes, max_rank=8, dtype=torch.float32))
    assert {two.step({n: [0]}, 1).rows.slot for n in ("again", "all-r8")} == {0, 1}  # type: ignore[union-attr]
    # Listed in the other order than their slots': the rows follow the slots.
    grouped = two.step({"all-r8": [0, 3], "again": [2]}, 4).rows  # type: ignore[union-attr]
    assert isinstance(grouped, Grouped) and grouped.n == 2
    assert grouped.order.tolist() == [2, 0, 0, 3] and grouped.kept.tolist() == [0, 2, 3]
    assert grouped.rows.tolist() == [2, 0, 3]
    even = two.step({"all-r8": [1], "again": [0]}, 2).rows  # type: ignore[union-attr]
    assert isinstance(even, Grouped) and even.kept is None and even.rows.tolist() == [0, 1]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"use_dora": True}, "DoRA"),
        ({"bias": "all"}, "trained biases"),
        ({"modules_to_save": ["lm_head"]}, "save whole modules"),
        ({"peft_type": "IA3"}, "not LoRA"),
    ],
)
def test_adapters_atom_cannot_apply_are_refused_by_name(
    change: dict[str, object], words: str, tmp_path: Path
) -> None:
    base = tiny_model(LlamaConfig)
    folder = save_adapter(base, tmp_path / "a", rank=4)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=words):
        read_adapter("a", str(folder), BaseShapes.of(base.config), max_rank=8, dtype=torch.float32)


def test_an_adapter_of_another_model_or_rank_is_refused(tmp_path: Path) -> None:
    base = tiny_model(LlamaConfig)
    wider = tiny_model(LlamaConfig, hidden_size=96)
    shapes = BaseShapes.of(base.config)
    other = save_adapter(wider, tmp_path / "wide", rank=4)
    with pytest.raises(ValueError, match="do not fit"):
        read_adapter("w", str(other), shapes, max_rank=8, dtype=torch.float32)
    big = save_adapter(base, tmp_path / "big", rank=16)
    with pytest.raises(ValueError, match="above --max-lora-rank 8"):
        read_adapter("b", str(big), shapes, max_rank=8, dtype=torch.float32)
    head = save_adapter(base, tmp_path / "head", rank=4, targets=("q_proj", "lm_head"))
    with pytest.raises(ValueError, match="not one ATOM applies"):
        read_adapter("h", str(head), shapes, max_rank=8, dtype=torch.float32)


def test_the_kernel_gives_a_row_the_same_bits_alone_and_in_any_mix(tmp_path: Path) -> None:
    """csrc/lora.cpp: each row's delta is its own adapter's, close to torch's products,
    and bit for bit the same whatever the other rows and their adapters are."""
    base = tiny_model(LlamaConfig)
    shapes = BaseShapes.of(base.config)
    folders = adapters(base, tmp_path)
    slots = LoraSlots(2, 8, torch.device("cpu"), cpu_ops().lora_add)
    reference = LoraSlots(2, 8, torch.device("cpu"))
    for name, folder in folders.items():
        adapter = read_adapter(name, str(folder), shapes, max_rank=8, dtype=torch.float32)
        slots.add(adapter)
        reference.add(adapter)
    x = torch.randn(9, 64, generator=torch.Generator().manual_seed(3))
    mix = {"attn-r4": [0, 4, 5], "all-r8": [1, 2, 8]}  # rows 3, 6, 7: the base model
    mixed, expected = torch.zeros(9, 128), torch.zeros(9, 128)
    slots.step(mix, 9).add(mixed, x, 0, "qkv")  # type: ignore[union-attr]
    reference.step(mix, 9).add(expected, x, 0, "qkv")  # type: ignore[union-attr]
    torch.testing.assert_close(mixed, expected, rtol=1e-5, atol=1e-5)
    assert mixed[[3, 6, 7]].abs().sum() == 0
    for name, rows in mix.items():
        for row in rows:
            alone = torch.zeros(1, 128)
            slots.step({name: [0]}, 1).add(alone, x[row : row + 1], 0, "qkv")  # type: ignore[union-attr]
            assert torch.equal(alone[0], mixed[row])


def test_the_kernel_handles_sizes_off_its_blocks() -> None:
    """Inputs not a multiple of 8 and outputs not of 32 take the kernel's tail loops; a
    row of B restricted to some columns (`cols`) adds nothing elsewhere."""
    generator = torch.Generator().manual_seed(5)
    slots, room, n_in, n_out = 3, 6, 37, 45
    a = torch.randn(slots * room, n_in, generator=generator)
    b_t = torch.randn(slots * room, n_out, generator=generator)
    cols = torch.tensor([[0, n_out]] * (slots * room))
    cols[1] = torch.tensor([10, 20])
    b_t[1, :10], b_t[1, 20:] = 0, 0
    x = torch.randn(5, n_in, generator=generator)
    row_slots = torch.tensor([2, -1, 0, 0, 1])
    out = torch.randn(5, n_out, generator=generator)
    expected = out.clone()
    for row, slot in enumerate(row_slots.tolist()):
        if slot >= 0:
            at = slice(slot * room, (slot + 1) * room)
            expected[row] += (a[at] @ x[row]) @ b_t[at]
    cpu_ops().lora_add(out, x, a, b_t, cols, row_slots, room)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)

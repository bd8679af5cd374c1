"""LoRA adapters through ATOM's forward equal PEFT's own merged models, token for token,
with several adapters and the base model mixed in one batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from atom.model.forward.llama_forward import own_forward
from atom.model.lora.adapter import BaseShapes, read_adapter
from atom.model.torch_runner import TorchRunner
from tests.lora_adapters import save_adapter, with_adapter
from tests.model.tiny import BLOCK, PROMPTS, cpu_ops, generate, run_all, tiny_model

pytest.importorskip("peft")

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
    base: object, folders: dict[str, Path], *, cpp: bool, num_blocks: int
) -> TorchRunner:
    kernels = cpu_ops() if cpp else None
    runner = TorchRunner(
        own_forward(base, "atom", kernels=kernels),
        eos_token_ids=frozenset({0}),
        max_model_len=256,
        num_blocks=num_blocks,
        block_size=BLOCK,
        decode_kernel=None if kernels is None else kernels.paged_decode,
        max_loras=len(folders),
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

"""A vision-language model of each served family (LLaVA, Idefics3) through ATOM's engine
answers as transformers' own `generate` does, token for token: alone, batched with
text-only prompts, with chunked prefill splitting an image's placeholders, and on a
prefix-cache hit over a repeated image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from atom.http.media import MediaPolicy, load_image
from atom.model.loader import load_runtime
from atom.model.paged_cache import kv_bytes_per_block
from atom.model.runner import Runtime
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.text.prompt import IMAGE_PART, TemplateControls, render_chat
from atom.vocabulary.config import Settings
from atom.vocabulary.events import Submit
from atom.vocabulary.images import PromptImage
from tests.model.tiny import BLOCK, GREEDY, plan_step, run_all
from tests.vision_models import (
    data_url,
    picture,
    tiny_idefics3,
    tiny_llava,
    tiny_qwen2_5_vl,
    tiny_qwen2_vl,
)

QUESTIONS = ("What is in the picture?", "Describe it.", "Which colors?")


MAKERS = {
    "llava": tiny_llava,
    "idefics3": tiny_idefics3,
    "qwen2_vl": tiny_qwen2_vl,
    "qwen2_5_vl": tiny_qwen2_5_vl,
}
IMAGE_TOKENS = {"llava": 16, "idefics3": 20, "qwen2_vl": 4, "qwen2_5_vl": 4}  # 40x30 picture


@pytest.fixture(scope="module", params=sorted(MAKERS))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, family: str) -> Path:
    """The family's tiny model folder."""
    return MAKERS[family](tmp_path_factory.mktemp(family))


def runtime(folder: Path, **settings: Any) -> Runtime:
    base = {"model": (str(folder),), "kv_cache_memory_bytes": 8 << 20, "block_size": BLOCK}
    return load_runtime(Settings(**{**base, **settings}))


def conversation(question: str, num_images: int) -> list[dict[str, Any]]:
    parts = [IMAGE_PART] * num_images + [{"type": "text", "text": question}]
    return [{"role": "user", "content": parts}]


def rendered(rt: Runtime, question: str, seeds: tuple[int, ...]) -> tuple[Any, ...]:
    """(prompt ids, PromptImages, PIL images) of a question about pictures `seeds`."""
    assert rt.images is not None
    loaded = [load_image(data_url(picture(s)), "image", MediaPolicy()) for s in seeds]
    controls = TemplateControls(chat_template=rt.images.chat_template)
    rendered = render_chat(rt.tokenizer, conversation(question, len(seeds)), controls=controls)
    ids, images = rt.images.expand(rendered, loaded)
    return ids, images, [image.image for image in loaded]


def reference(folder: Path, question: str, pictures: list[Any]) -> tuple[list[int], list[int]]:
    """transformers' prompt ids and greedy continuation for the same conversation."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    inputs = reference_inputs(folder, model.config, conversation(question, len(pictures)), pictures)
    out = model.generate(
        **inputs,
        max_new_tokens=GREEDY.max_tokens,
        min_new_tokens=GREEDY.max_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    prompt = inputs["input_ids"][0].tolist()
    return prompt, out[0, len(prompt) :].tolist()


def reference_inputs(
    folder: Path, config: Any, messages: list[dict[str, Any]], pictures: list[Any]
) -> dict[str, Any]:
    """The model's own processor's inputs; for Qwen2-VL (whose processor transformers
    builds only with torchvision) the same made here from its tokenizer and image
    processor: each image's pad token once per 2x2 merged patch, and the token types
    from which transformers computes the rotary positions itself."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    if config.model_type not in ("qwen2_vl", "qwen2_5_vl"):
        processor = AutoProcessor.from_pretrained(folder)
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return dict(
            processor(text=[text], images=pictures or None, return_tensors="pt",
                      add_special_tokens=False)
        )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs: dict[str, Any] = {}
    if pictures:
        inputs = dict(
            AutoImageProcessor.from_pretrained(folder)(images=pictures, return_tensors="pt")
        )
        counts = [int(grid.prod()) // 4 for grid in inputs["image_grid_thw"]]
        pieces = text.split("<|image_pad|>")
        text = pieces[0] + "".join(
            "<|image_pad|>" * n + p for n, p in zip(counts, pieces[1:], strict=True)
        )
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    kinds = (ids == config.image_token_id).int()
    return {
        **inputs,
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": kinds,
    }


CASES = ((QUESTIONS[0], (1,)), (QUESTIONS[1], (2, 3)), (QUESTIONS[2], ()))


@pytest.fixture(scope="module")
def references(folder: Path) -> list[tuple[list[int], list[int]]]:
    return [reference(folder, q, [picture(s) for s in seeds]) for q, seeds in CASES]


@pytest.mark.parametrize("cpu_kernels", ["off", "on"])
@pytest.mark.parametrize("budget", [4096, 8])
def test_greedy_output_equals_transformers_generate(
    folder: Path, family: str, references: list[Any], cpu_kernels: str, budget: int
) -> None:
    """One image, two images, and a text-only prompt in one batch; budget 8 splits
    every image's placeholders over several steps."""
    rt = runtime(folder, cpu_kernels=cpu_kernels)
    prompts, images = [], []
    for (question, seeds), (want_prompt, _) in zip(CASES, references, strict=True):
        ids, placed, _ = rendered(rt, question, seeds)
        assert list(ids) == want_prompt
        assert [p.ref.num_tokens for p in placed] == [IMAGE_TOKENS[family]] * len(seeds)
        prompts.append(ids)
        images.append(placed)
    alone = [
        run_all(rt.runner, [p], images=[i], budget=budget)[0][0]
        for p, i in zip(prompts, images, strict=True)
    ]
    batched, _ = run_all(rt.runner, prompts, images=images, budget=budget)
    want = [out for _, out in references]
    assert alone == want
    assert batched == want
    assert rt.runner.num_sequences() == 0


def run_waves(rt: Runtime, waves: list[list[tuple[tuple[int, ...], tuple[PromptImage, ...]]]]):
    """Each wave's prompts run to the end before the next wave starts, on one KV cache:
    (outputs, cached prompt tokens at admission) by wave and prompt."""
    kv = KVCacheManager(num_blocks=rt.runner.num_blocks, block_size=BLOCK)
    scheduler = Scheduler(
        kv=kv,
        max_num_seqs=8,
        max_num_batched_tokens=4096,
        eos_token_ids=rt.runner.eos_token_ids,
        max_model_len=512,
    )
    results = []
    for w, wave in enumerate(waves):
        seqs = []
        for i, (ids, images) in enumerate(wave):
            submit = Submit(request_id=f"{w}-{i}", prompt_ids=ids, params=GREEDY, images=images)
            seqs.extend(scheduler.add(submit))
        outputs: dict[str, list[int]] = {s.request_id: [] for s in seqs}
        while scheduler.num_seqs:
            plan = plan_step(scheduler)
            for out in scheduler.update(plan, rt.runner.step(plan)):
                outputs[out.seq.request_id].extend(out.token_ids)
                if out.finish_reason is not None:
                    rt.runner.release(out.seq.seq_id)
        results.append([(outputs[s.request_id], s.num_cached_tokens) for s in seqs])
    return results


def test_a_repeated_image_hits_the_prefix_cache_and_another_image_does_not(
    folder: Path, references: list[Any]
) -> None:
    rt = runtime(folder)
    same, placed, _ = rendered(rt, QUESTIONS[0], (1,))
    other, other_placed, _ = rendered(rt, QUESTIONS[0], (7,))
    assert same == other  # the same placeholders: only the image tells them apart
    [[first], [again], [different]] = run_waves(
        rt, [[(same, placed)], [(same, placed)], [(other, other_placed)]]
    )
    image_end = placed[0].end
    assert first == (references[0][1], 0)
    assert again[0] == references[0][1]
    assert again[1] >= image_end - BLOCK + 1  # the image's blocks came from the cache
    assert different[1] <= placed[0].positions[0]  # nothing of the first image's KV
    assert different[0] != first[0]


def test_preempted_sequences_encode_their_images_again(folder: Path, references: list[Any]) -> None:
    """A KV cache just large enough for the longest sequence holds one or two of the
    three: the others are preempted mid-prompt or mid-answer and recompute, images
    included."""
    prompts, images = [], []
    whole = runtime(folder)
    for question, seeds in CASES:
        ids, placed, _ = rendered(whole, question, seeds)
        prompts.append(ids)
        images.append(placed)
    blocks = -(-(max(len(p) for p in prompts) + GREEDY.max_tokens) // BLOCK)
    block_bytes = kv_bytes_per_block(whole.runner.model.config, BLOCK, torch.float32)
    rt = runtime(folder, max_model_len=blocks * BLOCK, kv_cache_memory_bytes=blocks * block_bytes)
    assert rt.runner.num_blocks == blocks
    outputs, num_preemptions = run_all(rt.runner, prompts, images=images, budget=8)
    assert num_preemptions > 0
    assert outputs == [out for _, out in references]

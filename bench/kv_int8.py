"""An int8 KV cache against a float16 one on the default model: `python -m bench.kv_int8
[--requests 48] [--out FILE]`.

In process, the model loaded as the server loads it (by default with float32 layers,
`--weights off`: see --help), once with `--kv-cache-dtype float16` and once with `int8`:

- top-token agreement: the float16 cache's greedy answers to the chats of
  bench/rerun_quant.py are fed back to both caches as the server decodes them (the
  prompt in one prefill, then every answer token one decode step, all chats in one
  batch), and at each answer position the token each cache predicts next is compared.
  The decode steps run the decode-attention kernel, as the answers a server gives do.
  (`top_token_agreement_prompt_positions` is the same over the prompts' positions,
  read by prefill: all chats share their chat template's system prompt, so those
  positions repeat once a chat and weigh a few near-ties 48 times);
- perplexity of a fixed text (TEXT below, ~700 tokens) under each;
- the KV bytes a token takes in each.

The decode step at 32 x 1,000 tokens of context is `python -m bench.step --batch 32
--context 1000` with `ATOM_KV_CACHE_DTYPE` set to each.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import torch

from atom.model.loader import load_runtime
from atom.model.paged_cache import kv_bytes_per_block
from atom.model.runner import Runner, SeqChunk, StepPlan
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.choices import KVCacheDtype, Quantization
from atom.vocabulary.config import Settings
from atom.vocabulary.events import SamplingParams, Submit
from bench.rerun_quant import bodies
from bench.run import machine, publish

TEXT = " ".join(
    [
        "The harbour town woke before the sun. Fishermen carried nets down the stone steps,",
        "and the baker on the corner pulled the first loaves from an oven that had burned all",
        "night. A girl named Ilse walked her grandfather's dog along the sea wall, counting the",
        "boats that slipped out past the lighthouse. There were eleven that morning, one fewer",
        "than the day before, because the Marten family had sold their old trawler to a",
        "collector from the capital. Ilse did not like the collector. He wore a grey coat in",
        "summer and asked too many questions about the wreck beyond the northern reef.",
        "Everyone in town knew the story of the wreck. A merchant ship had struck the reef in",
        "a storm two hundred years ago, and its cargo of silver had never been found. Divers",
        "came every few years with new machines, and every few years they left with nothing",
        "but sunburn and debts. The grandfather said the silver was a lie told by an insurance",
        "clerk, but he said it with a smile that made Ilse suspect he knew more than he told.",
        "That afternoon the weather turned. Clouds rolled in from the west, the gulls flew",
        "inland, and the harbour master raised the red flag. The boats came back early, all",
        "but one. The eleventh boat, a small blue sloop that belonged to the schoolteacher,",
        "was still out when the first heavy drops began to fall. People gathered on the quay,",
        "shading their eyes and arguing about whether to send the lifeboat. Ilse ran home to",
        "fetch her grandfather, who had crewed the lifeboat for thirty years before his knees",
        "gave out. He listened to her, put on his oilskin, and walked to the quay faster than",
        "she had seen him walk in a long time. By the time they arrived, the lifeboat crew was",
        "already pulling on their jackets, and the schoolteacher's sloop had appeared as a dot",
        "of blue against the grey, rising and falling in swells that grew higher every minute.",
    ]
)
GREEDY = SamplingParams(temperature=0.0, max_tokens=48)


def answers(runtime: Any, num_requests: int) -> list[tuple[int, tuple[int, ...]]]:
    """(prompt length, prompt + greedy answer token ids) of the rerun bench's chats
    (tools and JSON left out)."""
    tokenizer = runtime.tokenizer
    chats = [b for b in bodies(num_requests) if "tools" not in b and "response_format" not in b]
    prompts = []
    for body in chats:
        text = tokenizer.apply_chat_template(
            body["messages"], add_generation_prompt=True, tokenize=False
        )
        prompts.append(tuple(tokenizer.encode(text, add_special_tokens=False)))
    runner: Runner = runtime.runner
    kv = KVCacheManager(num_blocks=runner.num_blocks, block_size=runner.block_size)
    scheduler = Scheduler(
        kv=kv,
        max_num_seqs=16,
        max_num_batched_tokens=2048,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=runtime.max_model_len,
    )
    for i, prompt in enumerate(prompts):
        scheduler.add(Submit(request_id=str(i), prompt_ids=prompt, params=GREEDY))
    outputs: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
    while scheduler.num_seqs:
        plan = scheduler.schedule()
        for out in scheduler.update(plan, runner.step(plan)):
            outputs[int(out.seq.request_id)].extend(out.token_ids)
        for seq_id in scheduler.take_released():
            runner.release(seq_id)
    return [(len(prompts[i]), (*prompts[i], *outputs[i])) for i in range(len(prompts))]


def decoded(runner: Runner, texts: list[tuple[int, tuple[int, ...]]]) -> list[list[int]]:
    """Each text's prompt prefilled, then its answer fed one decode step a token, all texts
    in one batch: the most likely next token at every answer position, by text."""
    span = -(-max(len(tokens) for _, tokens in texts) // runner.block_size)
    params = SamplingParams(temperature=0.0, max_tokens=1)
    predicted: list[list[int]] = [[] for _ in texts]
    for step in range(max(len(tokens) - n for n, tokens in texts)):
        chunks = []
        for i, (n, tokens) in enumerate(texts):
            start = 0 if step == 0 else n + step - 1
            if start < len(tokens) - 1 or step == 0:
                fed = tokens[:n] if step == 0 else tokens[start : start + 1]
                chunks.append(SeqChunk(seq_id=str(i), token_ids=fed, start_pos=start,
                                       block_ids=tuple(range(i * span, (i + 1) * span)),
                                       params=params, seed=0, num_prompt_tokens=n))  # fmt: skip
        for seq_id, (sampled, *_) in runner.step(StepPlan(chunks=tuple(chunks))).items():
            predicted[int(seq_id)].append(sampled.token_id)
    for i in range(len(texts)):
        runner.release(str(i))
    return predicted


def fed(runner: Runner, tokens: tuple[int, ...]) -> list[tuple[int, float]]:
    """One prefill of `tokens`: (most likely next token, the actual next token's logprob)
    at every position."""
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
    blocks = tuple(range(-(-len(tokens) // runner.block_size)))
    chunk = SeqChunk(seq_id="fed", token_ids=tokens, start_pos=0, block_ids=blocks,
                     params=params, seed=0, num_prompt_tokens=len(tokens))  # fmt: skip
    [sampled] = runner.step(StepPlan(chunks=(chunk,)))["fed"]
    runner.release("fed")
    assert sampled.prompt_logprobs is not None
    return [(lp.top[0][0], lp.logprob) for lp in sampled.prompt_logprobs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument(
        "--weights",
        type=Quantization,
        default=Quantization.OFF,
        help="the layers' form (default off: float32, where float16 and float32 caches agree "
        "at every position; under the GGUF's quantized layers any change to the cache moves "
        "about 11%% of near-tie positions, float16 against float32 too)",
    )
    parser.add_argument("--out")
    args = parser.parse_args()
    runtimes = {
        dtype: load_runtime(Settings(kv_cache_dtype=KVCacheDtype(dtype), quantization=args.weights))
        for dtype in ("float16", "int8")
    }
    texts = answers(runtimes["float16"], args.requests)
    base, int8 = (decoded(r.runner, texts) for r in runtimes.values())
    agree = sum(a == b for x, y in zip(base, int8, strict=True) for a, b in zip(x, y, strict=True))
    total = sum(len(x) for x in base)
    prompt_agree = prompt_total = 0
    for n, tokens in texts:
        before, after = (fed(r.runner, tokens[:n])[: n - 1] for r in runtimes.values())
        prompt_agree += sum(a[0] == b[0] for a, b in zip(before, after, strict=True))
        prompt_total += len(before)
    report: dict[str, Any] = {"machine": machine(), "weights": str(args.weights),
                              "sequences": len(texts), "answer_positions": total,
                              "top_token_agreement": round(agree / total, 4),
                              "prompt_positions": prompt_total,
                              "top_token_agreement_prompt_positions":
                                  round(prompt_agree / prompt_total, 4)}  # fmt: skip
    text_ids = tuple(runtimes["float16"].tokenizer.encode(TEXT))
    for dtype, runtime in runtimes.items():
        logprobs = [lp for _, lp in fed(runtime.runner, text_ids)]
        report[f"perplexity_{dtype}"] = round(math.exp(-sum(logprobs) / len(logprobs)), 4)
        config = runtime.runner.model.config  # type: ignore[attr-defined]
        per_block = kv_bytes_per_block(config, runtime.runner.block_size, getattr(torch, dtype))
        report[f"kv_bytes_per_token_{dtype}"] = per_block // runtime.runner.block_size
    report["text_tokens"] = len(text_ids)
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()

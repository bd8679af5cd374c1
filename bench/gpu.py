"""ATOM on a GPU against transformers' `generate`: `python -m bench.gpu` (bench/gpu.sh
runs it on the device machine, where no model package is installed).

A Llama-shaped model with random weights (`--shape`: the default model's, or the 1B of
bench/big_model.py) and the default model's tokenizer (`--tokenizer`, a folder: the
device machine gets it from `bench/gpu.sh fetch`) is written as an HF folder in
`--dtype`. ATOM serves it with its defaults (CUDA where there is one: bfloat16) at
each concurrency, streaming chats of `--output-tokens` (`ignore_eos`); transformers'
`generate` runs the same prompts in batches of that size, greedy, as many new tokens,
on the same device and dtype. The report also says how far ATOM's greedy answers to
`--agreement` prompts match `generate`'s, token by token (the CUDA path's check of its
numbers). Prints the JSON report; `--markdown` also writes a table for
docs/performance.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.big_model import DEFAULT_SHAPE
from bench.big_model import SHAPE as ONE_B
from bench.load import Target, prompt_text
from bench.run import MODEL, atom_server, free_port, machine, publish, scenarios

SHAPES = {
    "135m": DEFAULT_SHAPE,
    "1b": ONE_B,
}


def write_model(shape: dict[str, int], tokenizer: Path, out: Path, dtype: str) -> Path:
    """A Llama of `shape` with random weights and `tokenizer`, saved at `out` (kept)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if (out / "config.json").exists():
        return out
    tok = AutoTokenizer.from_pretrained(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=shape["hidden"],
        intermediate_size=shape["ffn"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def generate_rate(
    folder: Path, batch: int, prompt_words: int, output_tokens: int, dtype: str
) -> float:
    """Output tokens/s of transformers' `generate` on `batch` chats at once (greedy,
    `output_tokens` new tokens each, left-padded), after one untimed call."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    model = loaded.to(device).eval()  # type: ignore[arg-type]
    tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
    tok.pad_token = tok.pad_token or tok.eos_token
    chats = [
        [{"role": "user", "content": prompt_text(prompt_words, salt)}] for salt in range(batch)
    ]
    texts = tok.apply_chat_template(chats, add_generation_prompt=True, tokenize=False)
    inputs = tok(texts, return_tensors="pt", padding=True).to(device)
    settings = {"do_sample": False, "pad_token_id": tok.pad_token_id}
    model.generate(**inputs, max_new_tokens=4, **settings)
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    new = {"max_new_tokens": output_tokens, "min_new_tokens": output_tokens}
    model.generate(**inputs, **new, **settings)
    if device == "cuda":
        torch.cuda.synchronize()
    return round(batch * output_tokens / (time.perf_counter() - started), 2)


AGREEMENT_TOKENS = 32


def atom_answers(url: str, count: int) -> list[str]:
    """ATOM's greedy answers to `count` short chats (AGREEMENT_TOKENS each, EOS ignored)."""
    answers = []
    for salt in range(count):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt_text(30, 1000 + salt)}],
            "max_tokens": AGREEMENT_TOKENS,
            "temperature": 0,
            "ignore_eos": True,
        }
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).json()
        answers.append(reply["choices"][0]["message"]["content"])
    return answers


def agreement(folder: Path, answers: list[str], dtype: str) -> list[int]:
    """For each of ATOM's answers, how many of `generate`'s greedy tokens (one chat at a
    time, no padding) it starts with: AGREEMENT_TOKENS where the two agree throughout."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    model = loaded.to(device).eval()  # type: ignore[arg-type]
    tok = AutoTokenizer.from_pretrained(folder)
    matched = []
    for salt, answer in enumerate(answers):
        chat = [{"role": "user", "content": prompt_text(30, 1000 + salt)}]
        text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        ids = tok(text, return_tensors="pt")["input_ids"].to(device)
        settings = {"do_sample": False, "pad_token_id": tok.eos_token_id}
        new = {"max_new_tokens": AGREEMENT_TOKENS, "min_new_tokens": AGREEMENT_TOKENS}
        out = model.generate(ids, **new, **settings)[0, ids.shape[1] :].tolist()
        same = 0
        while same < len(out) and answer.startswith(str(tok.decode(out[: same + 1]))):
            same += 1
        matched.append(same)
    return matched


def markdown(report: dict[str, Any]) -> str:
    """The report as a table: ATOM against `generate` at each concurrency."""
    atom = {level["concurrency"]: level for level in report["atom"]["levels"]}
    rows = [
        f"| {c} | {atom[c]['output_tok_s']} | {rate} | {atom[c]['output_tok_s'] / rate:.2f}x |"
        for c, rate in report["generate"].items()
    ]
    matched = report["agreement"]
    head = [
        f"{report['machine']['cuda'] or report['machine']['cpu']}, model {report['shape']} "
        f"({report['dtype']}), {report['output_tokens']} output tokens, output tokens/s "
        f"(greedy agreement with `generate`: {matched} of {AGREEMENT_TOKENS} tokens):",
        "",
        "| concurrency | ATOM | transformers `generate` | ATOM / generate |",
        "|---|---|---|---|",
    ]
    return "\n".join(head + rows) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=list(SHAPES), default="135m")
    p.add_argument("--tokenizer", type=Path, default=Path(".gpu/tokenizer"))
    p.add_argument("--folder", type=Path, default=Path("/tmp/atom-bench-gpu"))
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--prompt-words", type=int, default=110)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--agreement", type=int, default=4, help="chats compared with generate")
    p.add_argument("--atom-env", nargs="*", default=[], help="ATOM_X=value settings for ATOM")
    p.add_argument("--out", help="write the JSON here too")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args()
    out = args.folder / f"{args.shape}-{args.dtype}"  # a kept folder per shape and dtype
    folder = write_model(SHAPES[args.shape], args.tokenizer, out, args.dtype)
    run_args = argparse.Namespace(
        **vars(args),
        model=str(folder),
        shared_prefix_words=0,
        long_prompt_words=[],
        structured=False,
        churn=False,
    )
    port = free_port()
    with atom_server(port, run_args, {}):
        url = f"http://127.0.0.1:{port}"
        target = Target(name="atom", url=url, model=MODEL, extra={"ignore_eos": True})
        served = trio.run(scenarios, target, run_args)
        answers = atom_answers(url, args.agreement)
    report: dict[str, Any] = {
        "machine": machine(),
        "shape": args.shape,
        "dtype": args.dtype,
        "output_tokens": args.output_tokens,
        "atom": served,
        "agreement": agreement(folder, answers, args.dtype),
        "generate": {
            c: generate_rate(folder, c, args.prompt_words, args.output_tokens, args.dtype)
            for c in args.concurrency
        },
    }
    publish(report, args.out)
    if args.markdown:
        Path(args.markdown).write_text(markdown(report))


if __name__ == "__main__":
    main()

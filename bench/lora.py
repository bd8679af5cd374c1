"""Multi-LoRA, side by side: `python -m bench.lora [--quantization int4 int8]`.

For each weight form, one ATOM server with `--enable-lora --max-loras N` and N random
adapters of rank `--rank` on every projection (made here with PEFT, written once to
`--adapter-dir`), loaded at runtime through POST /v1/load_lora_adapter so the resident
memory each adds is measured. Then, after one unmeasured run of the base model, the
same streaming chat load at `--concurrency`
(prompts distinct across all runs, prefix caching off, `ignore_eos`, `--max-tokens`
each): on the base model alone, then
spread over the N adapters (request i → adapter i mod N: every step mixes them), then
the base again; the ratio is the adapters' output tokens/s over the mean of the two
base runs. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.load import Sample, Target, fresh_connections, prompt_text, stream_chat, summarize
from bench.run import MODEL, atom_server, free_port, machine, publish, resident_mb


def adapters(folder: Path, count: int, rank: int) -> list[Path]:
    """`count` PEFT adapters of the default model's shapes, made once."""
    from tests.e2e.test_lora import default_model_shapes
    from tests.lora_adapters import save_adapter

    paths = [folder / f"rank{rank}-{i}" for i in range(count)]
    missing = [p for p in paths if not (p / "adapter_config.json").exists()]
    if missing:
        model = default_model_shapes()
        for i, path in enumerate(paths):
            if path in missing:
                save_adapter(model, path, rank=rank, seed=i, std=0.02)
    return paths


async def load(url: str, models: list[str], args: argparse.Namespace, first: int) -> dict[str, Any]:
    """`args.requests` chats at `args.concurrency`, request i to `models[i % len]`; the
    prompts are numbered from `first` (distinct from every other run's: no prefix hit)."""
    samples: list[Sample] = []
    queue = list(range(first, first + args.requests))
    async with fresh_connections(900) as client:

        async def worker() -> None:
            while queue:
                i = queue.pop()
                target = Target(name="atom", url=url, model=models[i % len(models)],
                                extra={"ignore_eos": True})  # fmt: skip
                messages = [{"role": "user", "content": prompt_text(args.prompt_words, i)}]
                samples.append(await stream_chat(client, target, messages, args.max_tokens))

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(args.concurrency):
                nursery.start_soon(worker)
        wall = trio.current_time() - started
    return summarize(samples, wall)


def run_form(quantization: str, paths: list[Path], args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "ATOM_QUANTIZATION": quantization,
        "ATOM_ENABLE_LORA": "true",
        "ATOM_MAX_LORAS": str(len(paths)),
        "ATOM_MAX_LORA_RANK": str(args.rank),
        "ATOM_ENABLE_ADMIN_ROUTES": "true",
        # bench.load's prompts share long word runs, and a cached prefix is found by
        # base requests and not across adapters: every run computes its prompts whole.
        "ATOM_ENABLE_PREFIX_CACHING": "false",
    }
    out: dict[str, Any] = {"resident_mb": {}}
    with atom_server(port, args, env) as proc:
        out["resident_mb"]["base"] = resident_mb(proc.pid)
        names = []
        for i, path in enumerate(paths):
            body = {"lora_name": f"lora{i}", "lora_path": str(path)}
            httpx.post(f"{url}/v1/load_lora_adapter", json=body, timeout=120).raise_for_status()
            names.append(f"lora{i}")
            out["resident_mb"][f"with_{i + 1}"] = resident_mb(proc.pid)
        trio.run(load, url, [MODEL], args, 0)  # warm-up, not measured: a first run is slower
        runs = (("base", [MODEL]), ("lora", names), ("base_again", [MODEL]))
        for n, (name, models) in enumerate(runs):
            out[name] = trio.run(load, url, models, args, 1000 * (n + 1))
            print(quantization, name, json.dumps(out[name]), file=sys.stderr)
        out["resident_mb"]["after_runs"] = resident_mb(proc.pid)  # the slots filled too
    base = (out["base"]["output_tok_s"] + out["base_again"]["output_tok_s"]) / 2
    out["ratio"] = round(out["lora"]["output_tok_s"] / base, 3)
    added = out["resident_mb"][f"with_{len(paths)}"] - out["resident_mb"]["base"]
    out["resident_mb_per_adapter"] = round(added / len(paths), 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quantization", nargs="+", default=["int4", "int8"])
    p.add_argument("--adapters", type=int, default=4)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt-words", type=int, default=120)
    p.add_argument("--adapter-dir", default="/tmp/atom-bench-lora")
    p.add_argument("--model", help="served model (default: the default model)")
    p.add_argument("--atom-env", nargs="*", default=[], help="ATOM_X=value settings for ATOM")
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    paths = adapters(Path(args.adapter_dir), args.adapters, args.rank)
    report: dict[str, Any] = {"machine": machine(), "args": vars(args), "results": {}}
    for quantization in args.quantization:
        report["results"][quantization] = run_form(quantization, paths, args)
    publish(report, args.out)


if __name__ == "__main__":
    main()

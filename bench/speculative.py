"""Speculative decoding, side by side: `python -m bench.speculative [--tokens 3 5]`.

Starts ATOM with its defaults, then with each `--methods` proposer (n-gram, suffix, a
draft model) for each `--tokens` K, and runs the same streaming greedy chats against
each, one after the other: workloads where drafts should pay (editing a code block,
quoting a long text, an agent loop repeating its tool-call structure: `agent_loop`,
independent histories, and `agent_session`, one growing conversation re-sent each
turn, its prefix cached) and one where they should not (free prose), at c=1 and
c=16. Prints one JSON document: output tokens/s (counted by the server's usage, as a
chunk may carry several tokens), its ratio to the run without drafts, and the
acceptance (`spec_decode_*` from /metrics).

The draft model is `--draft` (a path or a model name), or without it the default model
cut to its first `--draft-layers` layers (the same tokenizer; no smaller SmolLM2 ships
offline), written once to `--draft-dir`; served as `--draft-quantization`. With
`--atom-env ATOM_QUANTIZATION=off --draft SmolLM2-135M-Instruct` the float32 model
drafts with its own quantized weights.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.load import Sample, Target, fresh_connections, stream_chat, summarize
from bench.run import MODEL, atom_server, free_port, machine, publish

Messages = list[dict[str, str]]

CODE = """def load_orders(path):
    orders = []
    with open(path) as f:
        for line in f:
            order_id, customer, amount = line.strip().split(",")
            orders.append({"id": order_id, "customer": customer, "amount": float(amount)})
    return orders


def total_by_customer(orders):
    totals = {}
    for order in orders:
        totals[order["customer"]] = totals.get(order["customer"], 0.0) + order["amount"]
    return totals


def largest_orders(orders, count):
    return sorted(orders, key=lambda order: order["amount"], reverse=True)[:count]
"""

TEXT = (
    "The lighthouse stood on the northern cliff for two hundred years. Its keeper climbed "
    "the one hundred and twelve steps every evening to light the lamp, and every morning "
    "to put it out. Ships passing the rocks at night looked for its light, turning every "
    "ten seconds, and knew where the danger lay. When the storm of the winter came, the "
    "keeper stayed in the tower for three days and three nights, and the light never went "
    "out. The town below remembers him still, and on the first night of winter the "
    "children carry lanterns up the hill to the old tower."
)

CITIES = ["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Lisbon", "Oslo", "Prague", "Dublin"]
TOPICS = ["a fox", "the moon", "a baker", "a storm", "a robot", "a garden", "a train", "a river"]


def edit(i: int) -> Messages:
    name = ["fetch_orders", "read_orders", "parse_orders", "get_orders"][i % 4]
    ask = f"Rename the function load_orders to {name}. Reply with the whole code, nothing else."
    return [{"role": "user", "content": f"{ask}\n\n```python\n{CODE}```"}]


def quote(i: int) -> Messages:
    ask = "Repeat the text above exactly, word for word."
    return [{"role": "user", "content": f"Text {i}:\n{TEXT}\n\n{ask}"}]


def agent(i: int) -> Messages:
    """Earlier turns called a tool in one JSON shape; the next asks for another city."""
    messages: Messages = [
        {"role": "system", "content": "Answer every request with one JSON tool call."}
    ]
    for j in range(5):
        city = CITIES[(i + j) % len(CITIES)]
        messages.append({"role": "user", "content": f"What is the weather in {city}?"})
        call = {"tool": "get_weather", "arguments": {"city": city, "unit": "celsius"}}
        messages.append({"role": "assistant", "content": json.dumps(call)})
    messages.append({"role": "user", "content": f"What is the weather in {CITIES[(i + 5) % 9]}?"})
    return messages


def agent_session(i: int) -> Messages:
    """One agent's conversation as its framework re-sends it each turn: request i holds
    the 4 + i turns before it (its own earlier tool calls), so a request's prompt is the
    one before it plus a turn and its prefix is cached (`agent`'s are all different)."""
    messages: Messages = [
        {"role": "system", "content": "Answer every request with one JSON tool call."}
    ]
    for j in range(4 + i):
        city = CITIES[j % len(CITIES)]
        messages.append({"role": "user", "content": f"What is the weather in {city}?"})
        call = {"tool": "get_weather", "arguments": {"city": city, "unit": "celsius"}}
        messages.append({"role": "assistant", "content": json.dumps(call)})
    ask = f"What is the weather in {CITIES[(4 + i) % len(CITIES)]}?"
    return [*messages, {"role": "user", "content": ask}]


def prose(i: int) -> Messages:
    return [{"role": "user", "content": f"Write a short story about {TOPICS[i % len(TOPICS)]}."}]


WORKLOADS: dict[str, tuple[Callable[[int], Messages], int]] = {  # messages, max tokens
    "edit_code": (edit, 256),
    "quote_text": (quote, 192),
    "agent_loop": (agent, 64),
    "agent_session": (agent_session, 64),
    "free_prose": (prose, 128),
}


async def level(
    target: Target, workload: str, concurrency: int, num_requests: int
) -> dict[str, Any]:
    make, max_tokens = WORKLOADS[workload]
    samples: list[Sample] = []
    queue = list(range(num_requests))
    async with fresh_connections(900) as client:

        async def worker() -> None:
            while queue:  # in order: agent_session's turns follow each other
                samples.append(await stream_chat(client, target, make(queue.pop(0)), max_tokens))

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
        wall = trio.current_time() - started
    return summarize(samples, wall) | {"concurrency": concurrency}


def counters(url: str) -> dict[str, float]:
    """The chat model's spec_decode counters on /metrics (0 without speculation)."""
    out = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("atom:spec_decode_num_") and f'model_name="{MODEL}"}}' in line:
            name = line.split("{", 1)[0].removeprefix("atom:spec_decode_")
            out[name] = float(line.rsplit(" ", 1)[1])
    return out


async def workloads(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    await level(target, "free_prose", 1, 2)  # warm-up, not measured
    out: dict[str, Any] = {}
    for workload in args.workloads:
        for c in args.concurrency:
            before = counters(target.url)
            result = await level(target, workload, c, max(8, 2 * c))
            after = counters(target.url)
            drafts = after.get("num_drafts_total", 0) - before.get("num_drafts_total", 0)
            accepted = after.get("num_accepted_tokens_total", 0) - before.get(
                "num_accepted_tokens_total", 0
            )
            if drafts:
                result["mean_accepted_per_draft"] = round(accepted / drafts, 2)
            out[f"{workload}_c{c}"] = result
            print(target.name, workload, c, json.dumps(result), file=sys.stderr)
    return out


def truncated_draft(num_layers: int, folder: Path) -> Path:
    """The default model's first `num_layers` layers, its norm and head, as an HF folder."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from atom.model.catalog import resolve_source

    gguf = resolve_source(None)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    model.model.layers = model.model.layers[:num_layers]
    model.config.num_hidden_layers = num_layers
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config  # plain float weights now
    folder.mkdir(parents=True, exist_ok=True)
    save_model(model, str(folder / "model.safetensors"))
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model.config.save_pretrained(folder)  # last: its presence means the folder is whole
    return folder


def speculation(method: str, k: int, args: argparse.Namespace) -> dict[str, Any]:
    """The --speculative-config of one run."""
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method == "ngram":
        config |= {"prompt_lookup_min": args.lookup[0], "prompt_lookup_max": args.lookup[1]}
    if method == "draft_model":
        draft = args.draft or str(truncated_draft(args.draft_layers, Path(args.draft_dir)))
        config |= {"model": draft, "quantization": args.draft_quantization}
    return config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    methods = ["ngram", "suffix", "draft_model"]
    p.add_argument("--methods", nargs="+", default=methods, choices=methods)
    p.add_argument("--draft", help="the draft model (default: the truncated default model)")
    p.add_argument("--draft-layers", type=int, default=6)
    p.add_argument("--draft-quantization", default="int4")
    p.add_argument("--draft-dir", default="/tmp/atom-bench-draft")
    p.add_argument("--tokens", type=int, nargs="+", default=[3], help="num_speculative_tokens")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--lookup", type=int, nargs=2, default=[2, 4], help="prompt_lookup min max")
    p.add_argument("--model", help="served model (default: the default model)")
    p.add_argument("--atom-env", nargs="*", default=[], help="ATOM_X=value settings for ATOM")
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    runs: dict[str, dict[str, str]] = {"atom": {}}
    for method in args.methods:
        for k in args.tokens:
            config = json.dumps(speculation(method, k, args))
            runs[f"atom-{method}-{k}"] = {"ATOM_SPECULATIVE_CONFIG": config}
    report: dict[str, Any] = {"machine": machine(), "args": vars(args), "results": {}}
    for name, env in runs.items():
        port = free_port()
        with atom_server(port, args, env):
            target = Target(name=name, url=f"http://127.0.0.1:{port}", model=MODEL, extra={})
            report["results"][name] = trio.run(workloads, target, args)
    base = report["results"]["atom"]
    for result in report["results"].values():
        for key, value in result.items():
            value["ratio"] = round(value["output_tok_s"] / base[key]["output_tok_s"], 3)
    publish(report, args.out)


if __name__ == "__main__":
    main()

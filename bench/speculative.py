"""Speculative decoding, side by side: `python -m bench.speculative [--tokens 3 5]`.

Starts ATOM with its defaults, then with each `--methods` proposer (n-gram, suffix)
for each `--tokens` K, and
runs the same streaming greedy chats against each, one after the other: three
workloads where drafts should pay (editing a code block, quoting a long text, an
agent loop repeating its tool-call structure) and one where they should not (free
prose), at c=1 and c=16. Prints one JSON document: output tokens/s (counted by the
server's usage, as a chunk may carry several tokens), its ratio to the run without
drafts, and the acceptance (`spec_decode_*` from /metrics).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import httpx
import trio

from bench.load import Sample, Target, fresh_connections, stream_chat, summarize
from bench.run import MODEL, atom_server, free_port, machine

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


def prose(i: int) -> Messages:
    return [{"role": "user", "content": f"Write a short story about {TOPICS[i % len(TOPICS)]}."}]


WORKLOADS: dict[str, tuple[Callable[[int], Messages], int]] = {  # messages, max tokens
    "edit_code": (edit, 256),
    "quote_text": (quote, 192),
    "agent_loop": (agent, 64),
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
            while queue:
                samples.append(await stream_chat(client, target, make(queue.pop()), max_tokens))

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
    for workload in WORKLOADS:
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=["ngram", "suffix"], choices=["ngram", "suffix"])
    p.add_argument("--tokens", type=int, nargs="+", default=[3], help="num_speculative_tokens")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    p.add_argument("--lookup", type=int, nargs=2, default=[2, 4], help="prompt_lookup min max")
    p.add_argument("--atom-env", nargs="*", default=[], help="ATOM_X=value settings for ATOM")
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    runs: dict[str, dict[str, str]] = {"atom": {}}
    for method in args.methods:
        for k in args.tokens:
            config: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
            if method == "ngram":
                config |= {"prompt_lookup_min": args.lookup[0], "prompt_lookup_max": args.lookup[1]}
            runs[f"atom-{method}-{k}"] = {"ATOM_SPECULATIVE_CONFIG": json.dumps(config)}
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
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

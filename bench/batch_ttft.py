"""Interactive TTFT while a batch runs: `python -m bench.batch_ttft [--out FILE]`.

`atom serve` with the default model, once with `--scheduling-policy fcfs` and once with
`priority`; for each, the TTFT of 12 interactive streaming chats sent one after
another, first on an idle server, then while a batch of --lines chat lines runs (the
Batch API, atom/http/batch_runner.py), and how long the batch took.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import time
from typing import Any

import httpx
import openai

from atom.scaling.commands import serve_command
from atom.vocabulary.config import Settings
from bench.run import free_port, machine, publish, server

MODEL = "SmolLM2-135M-Instruct"


def ttfts(url: str, count: int) -> list[float]:
    out = []
    body = {"model": MODEL, "stream": True, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Name a colour."}]}  # fmt: skip
    for _ in range(count):
        started = time.perf_counter()
        first = None
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
            for line in r.iter_lines():
                if first is None and '"content":"' in line:
                    first = time.perf_counter() - started
        assert first is not None, "no content streamed"
        out.append(first)
    return out


def batch_lines(count: int) -> bytes:
    lines = [{"custom_id": f"b{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": MODEL, "max_tokens": 64, "ignore_eos": True,
                       "messages": [{"role": "user", "content": f"Write about the number {i}."}]}}
             for i in range(count)]  # fmt: skip
    return "\n".join(json.dumps(line) for line in lines).encode() + b"\n"


def measure(policy: str, lines: int) -> dict[str, Any]:
    port, data = free_port(), tempfile.mkdtemp(prefix="bench-batch-")
    env = {"ATOM_DATA_DIR": data, "ATOM_SCHEDULING_POLICY": policy, "ATOM_LOG_LEVEL": "warning"}
    command = serve_command(f"127.0.0.1:{port}", Settings.from_env({**os.environ, **env}))
    url = f"http://127.0.0.1:{port}"
    with server(command, f"{url}/health", env):
        ttfts(url, 2)  # warm-up
        idle = ttfts(url, 12)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
        uploaded = client.files.create(
            file=("b.jsonl", io.BytesIO(batch_lines(lines))), purpose="batch"
        )
        started = time.perf_counter()
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")  # fmt: skip
        time.sleep(1.0)
        busy = ttfts(url, 12)
        while client.batches.retrieve(batch.id).status != "completed":
            time.sleep(0.2)
        took = time.perf_counter() - started
    return {"ttft_idle_p50_s": round(statistics.median(idle), 4),
            "ttft_during_batch_p50_s": round(statistics.median(busy), 4),
            "ttft_during_batch_max_s": round(max(busy), 4),
            "batch_lines": lines, "batch_s": round(took, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=48)
    parser.add_argument("--out")
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": machine(), "model": MODEL}
    for policy in ("fcfs", "priority"):
        report[policy] = measure(policy, args.lines)
        print(policy, json.dumps(report[policy]), flush=True)
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()

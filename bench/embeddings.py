"""/v1/embeddings throughput against sentence-transformers' in-process `encode()`, one run.

Inputs/s for ~32-token sentences: ATOM over HTTP with 1, 16 and 64 concurrent clients
sending 1 and 16 inputs a request, and `SentenceTransformer.encode()` on the same model
and cores (its default batch of 32). Also the resident memory, after a first answer,
of a server serving the embedding model alone, the chat model alone, and both.

    .venv/bin/python -m bench.embeddings --out bench/results/embeddings.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.load import prompt_text
from bench.run import atom_server, cpu_model, free_port, machine

MODEL = "all-MiniLM-L6-v2"


def sentences(count: int, salt: int = 0) -> list[str]:
    """Distinct texts of about 32 tokens each (30 words and a salt)."""
    return [prompt_text(30, salt * 100_000 + i) for i in range(count)]


def encode_in_process(texts: list[str], rounds: int) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    from atom.model.catalog import resolve_source

    model = SentenceTransformer(str(resolve_source(MODEL)), device="cpu")
    model.encode(texts[:64])  # warm-up
    started = time.perf_counter()
    for _ in range(rounds):
        model.encode(texts)
    wall = time.perf_counter() - started
    return {"inputs_per_s": round(rounds * len(texts) / wall, 1), "batch_size": 32}


async def http_level(url: str, clients: int, per_request: int, total: int) -> dict[str, Any]:
    """`clients` concurrent clients, each posting requests of `per_request` inputs until
    `total` inputs went out."""
    pending = list(range(0, total, per_request))
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:

        async def client() -> None:
            while pending:
                start = pending.pop()
                texts = sentences(per_request, salt=start + 1)
                # base64, as the official client asks: JSON floats cost both ends CPU.
                body = {"model": MODEL, "input": texts, "encoding_format": "base64"}
                began = time.perf_counter()
                r = await http.post("/v1/embeddings", json=body)
                assert r.status_code == 200, r.text
                latencies.append(time.perf_counter() - began)

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(clients):
                nursery.start_soon(client)
        wall = time.perf_counter() - started
    latencies.sort()
    return {
        "clients": clients,
        "inputs_per_request": per_request,
        "inputs_per_s": round(total / wall, 1),
        "p50_latency_s": round(latencies[len(latencies) // 2], 4),
    }


def warm_up(url: str, *, with_embeddings: bool) -> None:
    """One answer from each model, so the resident memory counts weights in use."""
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    assert httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=120).status_code == 200
    if with_embeddings:
        body = {"model": MODEL, "input": sentences(16)}
        assert httpx.post(f"{url}/v1/embeddings", json=body, timeout=120).status_code == 200


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def served(port: int, models: str) -> Any:
    args = argparse.Namespace(atom_env=[f"ATOM_MODEL={models}"])
    return atom_server(port, args, {})


def server_pid(port: int) -> int:
    """The hypercorn process listening on `port` (bench.run starts it)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"hypercorn" in b" ".join(cmdline) and f"127.0.0.1:{port}".encode() in cmdline:
                return int(proc.name)
    raise LookupError(f"no server on port {port}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--inputs", type=int, default=512, help="inputs per measured level")
    p.add_argument("--out", help="write the results here as JSON")
    args = p.parse_args()
    results: dict[str, Any] = {"machine": machine(), "model": MODEL, "levels": []}
    results["sentence_transformers"] = encode_in_process(sentences(args.inputs), rounds=2)
    port = free_port()
    with served(port, MODEL):
        url = f"http://127.0.0.1:{port}"
        trio.run(http_level, url, 4, 16, 128)  # warm-up
        results["rss_bytes_embedding_only"] = resident_bytes(server_pid(port))
        for clients in (1, 16, 64):
            for per_request in (1, 16):
                level = trio.run(http_level, url, clients, per_request, args.inputs)
                level["ratio_to_encode"] = round(
                    level["inputs_per_s"] / results["sentence_transformers"]["inputs_per_s"], 2
                )
                results["levels"].append(level)
                print(json.dumps(level))
    for label, models in (("chat_only", "SmolLM2-135M-Instruct"),
                          ("chat_and_embedding", f"SmolLM2-135M-Instruct,{MODEL}")):  # fmt: skip
        port = free_port()
        with served(port, models):
            warm_up(f"http://127.0.0.1:{port}", with_embeddings=MODEL in models)
            results[f"rss_bytes_{label}"] = resident_bytes(server_pid(port))
    print(json.dumps({k: v for k, v in results.items() if k != "levels"}, indent=1))
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

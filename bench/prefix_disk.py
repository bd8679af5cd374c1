"""TTFT of a long shared prefix, cold, from memory and from the disk tier:
`python -m bench.prefix_disk [--out FILE]`.

`atom serve` with the default model, `--prefix-cache-dir` in a fresh folder and a KV
cache that holds about one such prefix. Each request is a streaming chat whose system
prompt is the same ~2,000-token document and whose question is new, max_tokens 1:

- cold: the first request (nothing cached);
- memory: the document again (its blocks still in memory);
- disk: the document again after two other documents pushed its blocks out of memory
  (saved to disk on their way out);
- restart: the document on a new server over the same folder (the first one saved the
  blocks it still held when it stopped).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import httpx

from atom.scaling.commands import serve_command
from atom.vocabulary.config import Settings
from bench.run import free_port, machine, publish, server

MODEL = "SmolLM2-135M-Instruct"
COLOURS = ("red", "green", "blue", "amber", "violet", "grey", "white", "black")
ANIMALS = ("otter", "heron", "lynx", "badger", "falcon", "newt", "moose", "wren")


def document(seed: int, sentences: int = 88) -> str:
    """About 2,000 tokens of plain facts, different for each seed."""
    return " ".join(
        f"Fact {i}: the {COLOURS[(i * 3 + seed) % 8]} {ANIMALS[(i * 5 + seed) % 8]} "
        f"of valley {seed}-{i} sleeps {i % 7 + 1} hours."
        for i in range(sentences)
    )


def ttft(url: str, doc: str, question: str) -> float:
    body = {"model": MODEL, "stream": True, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "system", "content": doc},
                         {"role": "user", "content": question}]}  # fmt: skip
    started = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        assert r.status_code == 200, r.read()
        took = None
        for line in r.iter_lines():  # read to the end: the request is done when it returns
            if took is None and '"content":"' in line and '"content":""' not in line:
                took = time.perf_counter() - started
    assert took is not None, "no content streamed"
    return took


def disk_hits(url: str) -> float:
    """The disk tier's hit count (tokens) from /metrics."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("atom:prefix_cache_disk_hits_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def measure(rounds: int, kv_mb: int) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="bench-prefix-disk-")
    env = {"ATOM_PREFIX_CACHE_DIR": folder, "ATOM_MAX_MODEL_LEN": "2560",
           "ATOM_KV_CACHE_MEMORY_BYTES": str(kv_mb << 20), "ATOM_LOG_LEVEL": "warning"}  # fmt: skip
    times: dict[str, list[float]] = {"cold": [], "memory": [], "disk": [], "restart": []}
    for r in range(rounds):
        doc = document(100 + r)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = serve_command(f"127.0.0.1:{port}", Settings.from_env({**os.environ, **env}))
        with server(command, f"{url}/health", env):
            ttft(url, document(1), "Warm up.")
            times["cold"].append(ttft(url, doc, f"Which animal is in fact {r}?"))
            times["memory"].append(ttft(url, doc, f"Which colour is in fact {r}?"))
            for other in (2, 3):
                ttft(url, document(other + 10 * r), "Count the facts.")
            before = disk_hits(url)
            times["disk"].append(ttft(url, doc, f"How long does fact {r} sleep?"))
            assert disk_hits(url) > before, "the document did not come from disk"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = serve_command(f"127.0.0.1:{port}", Settings.from_env({**os.environ, **env}))
        with server(command, f"{url}/health", env):
            times["restart"].append(ttft(url, doc, f"Where is valley {r}?"))
            assert disk_hits(url) > 0, "nothing came from disk after the restart"
        print(r, {k: round(v[-1], 3) for k, v in times.items()}, flush=True)
    medians = {f"ttft_{k}_p50_s": round(statistics.median(v), 4) for k, v in times.items()}
    cold = medians["ttft_cold_p50_s"]
    return {**medians,
            "disk_over_cold": round(medians["ttft_disk_p50_s"] / cold, 3),
            "restart_over_cold": round(medians["ttft_restart_p50_s"] / cold, 3),
            "memory_over_cold": round(medians["ttft_memory_p50_s"] / cold, 3),
            "rounds": rounds, "kv_cache_mb": kv_mb}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kv-mb", type=int, default=64)
    parser.add_argument("--out")
    args = parser.parse_args()
    report = {"machine": machine(), "model": MODEL, **measure(args.rounds, args.kv_mb)}
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()

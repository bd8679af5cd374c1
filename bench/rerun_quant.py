"""How far `--quantization int4` (or auto, int8) agrees with float32 on recorded traffic:
`python -m bench.rerun_quant [--quantization int4] [--requests 40]`.

Records a mix of chat requests against the real default model in float32 (greedy
questions, sampled ones, a JSON answer, a tool call) with `--request-log`, then re-runs
the log against the same model quantized, with the rerun's own comparison
(`atom replay LOG --rerun URL`, atom/log/rerun.py). Prints the summary and the divergences.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.rerun import Rerun, recorded_requests, summarize
from atom.vocabulary.choices import Quantization
from atom.vocabulary.config import Settings
from bench.run import machine, publish
from tests.conftest import serving, wait_ready
from tests.weather import WEATHER

TOPICS = ["Paris", "the sea", "a volcano", "bread", "the moon", "rain", "chess", "bees"]
KINDS = ["one fact", "two facts", "a short story", "a riddle", "a joke", "three words"]


def bodies(num_requests: int) -> list[dict[str, Any]]:
    """Mostly greedy questions of several lengths; every fifth sampled, one JSON, one tool."""
    out = []
    for i in range(num_requests):
        topic, kind = TOPICS[i % len(TOPICS)], KINDS[i // len(TOPICS) % len(KINDS)]
        ask = f"Tell me {kind} about {topic}."  # 48 distinct questions
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": ask}],
            "max_tokens": 48,
            "temperature": 0.7 if i % 5 == 4 else 0,
            "seed": i,
        }
        out.append(body)
    out.append({**out[0], "response_format": {"type": "json_object"}, "max_tokens": 40})
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    out.append({"messages": weather, "tools": [WEATHER], "temperature": 0, "max_tokens": 60})
    return out


async def record(log_path: Path, num_requests: int) -> None:
    app = create_app(Settings(request_log=str(log_path), quantization=Quantization.OFF))
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=300) as client:
        await wait_ready(app, timeout_s=600)
        async with trio.open_nursery() as nursery:
            for body in bodies(num_requests):
                nursery.start_soon(partial(client.post, "/v1/chat/completions", json=body))
                await trio.sleep(0.05)


async def rerun(log_path: Path, quantization: str) -> list[Any]:
    app = create_app(Settings(quantization=Quantization(quantization)))
    async with serving(app) as url:
        await wait_ready(app, timeout_s=600)
        recorded = recorded_requests(read_log(log_path))
        return await Rerun(url=url, concurrency=8, as_recorded=True).run(recorded)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "float32.jsonl"
        await record(log_path, args.requests)
        verdicts = await rerun(log_path, args.quantization)
    report = {
        "machine": machine(),
        "recorded": "float32 (--quantization off)",
        "rerun": args.quantization,
        "summary": summarize(verdicts),
        "greedy_first_divergence_chars": _positions(verdicts),
        "divergences": [dataclasses.asdict(v) for v in verdicts if not v.agreed],
    }
    publish(report, args.out, ensure_ascii=False)


def _positions(verdicts: list[Any]) -> dict[str, float]:
    """Where greedy answers first differ (characters into the text), when they do."""
    at = [
        int(v.divergence.rsplit(" ", 1)[1]) for v in verdicts if "character" in (v.divergence or "")
    ]
    return {"median": statistics.median(at), "min": min(at), "max": max(at)} if at else {}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quantization", default="int4", choices=("auto", "int4", "int8", "off"))
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--out", help="also write the report to this file")
    trio.run(main, parser.parse_args())

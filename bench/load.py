"""Streaming load against any OpenAI-compatible server: tokens/s, TTFT and inter-token latency."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

WORDS = [
    "river",
    "stone",
    "amber",
    "falcon",
    "quiet",
    "meadow",
    "copper",
    "lantern",
    "violet",
    "harbor",
    "summit",
    "willow",
    "ember",
    "canyon",
    "silver",
    "orchard",
    "thunder",
    "velvet",
    "glacier",
    "saffron",
]


def fresh_connections(timeout_s: float) -> httpx.AsyncClient:
    """A client that opens a connection for every request: llama-server closes a
    keep-alive connection after 5 requests, which a reused one meets as a disconnect
    (every server is measured the same way; a loopback connect costs ~0.1 ms)."""
    return httpx.AsyncClient(timeout=timeout_s, limits=httpx.Limits(max_keepalive_connections=0))


def prompt_text(num_words: int, salt: int) -> str:
    """Roughly one token per word; `salt` makes prompts distinct (no accidental cache hits)."""
    return " ".join(WORDS[(salt * 7 + i * 3) % len(WORDS)] for i in range(num_words)) + f" #{salt}"


@dataclass(slots=True)
class Sample:
    started: float
    first: float | None = None
    times: list[float] = field(default_factory=list)  # of each chunk with text
    num_tokens: int | None = None  # the server's usage; a chunk may hold several tokens

    @property
    def tokens(self) -> int:
        return len(self.times) if self.num_tokens is None else self.num_tokens

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.started

    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.times, self.times[1:], strict=False)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    name: str
    url: str
    model: str
    extra: dict[str, Any]  # how this server is told to ignore EOS


async def stream_chat(
    client: httpx.AsyncClient, target: Target, messages: list[dict[str, str]], max_tokens: int
) -> Sample:
    body = {
        "model": target.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **target.extra,
    }
    sample = Sample(started=time.perf_counter())
    async with client.stream("POST", f"{target.url}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                sample.num_tokens = chunk["usage"]["completion_tokens"]
            choices = chunk.get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                now = time.perf_counter()
                sample.first = sample.first or now
                sample.times.append(now)
    return sample


async def run_level(
    target: Target,
    *,
    concurrency: int,
    num_requests: int,
    prompt_words: int,
    max_tokens: int,
    salt: int = 0,
) -> dict[str, Any]:
    """Closed loop: `concurrency` workers send `num_requests` streaming chats in all."""
    samples: list[Sample] = []
    queue = list(range(num_requests))
    async with fresh_connections(600) as client:

        async def worker() -> None:
            while queue:
                i = queue.pop()
                msgs = [{"role": "user", "content": prompt_text(prompt_words, salt * 10_000 + i)}]
                samples.append(await stream_chat(client, target, msgs, max_tokens))

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
        wall = time.perf_counter() - started
    return summarize(samples, wall) | {"concurrency": concurrency}


def summarize(samples: list[Sample], wall_s: float) -> dict[str, Any]:
    tokens = sum(s.tokens for s in samples)
    ttfts = [s.ttft for s in samples if s.ttft is not None]
    itls = [x for s in samples for x in s.itls()]
    return {
        "requests": len(samples),
        "output_tokens": tokens,
        "output_tok_s": round(tokens / wall_s, 2),
        "ttft_p50_s": pct(ttfts, 50),
        "ttft_p99_s": pct(ttfts, 99),
        "itl_p50_ms": round(1000 * pct(itls, 50), 1) if itls else None,
        "itl_p99_ms": round(1000 * pct(itls, 99), 1) if itls else None,
    }


def pct(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return round(values[0], 4)
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 4)


async def shared_prefix(target: Target, *, prefix_words: int, num_later: int) -> dict[str, Any]:
    """TTFT of a first request with a long system prompt, then of later ones sharing it."""
    system = prompt_text(prefix_words, 424242)
    async with fresh_connections(600) as client:
        ttfts = []
        for i in range(1 + num_later):
            msgs = [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Question {i}: name a colour."},
            ]
            ttfts.append((await stream_chat(client, target, msgs, 4)).ttft or float("nan"))
    later = statistics.median(ttfts[1:])
    return {
        "first_ttft_s": round(ttfts[0], 4),
        "later_ttft_p50_s": round(later, 4),
        "ratio": round(later / ttfts[0], 3),
    }


async def long_prompts(target: Target, *, words: int, count: int) -> dict[str, Any]:
    """TTFT of `count` distinct prompts of `words` words, one at a time (nothing shared,
    so each is a full prefill), and how many tokens the server counted in them."""
    async with fresh_connections(900) as client:
        samples = []
        for i in range(count):
            msgs = [{"role": "user", "content": prompt_text(words, 5000 + i)}]
            samples.append(await stream_chat(client, target, msgs, 4))
    ttfts = [s.ttft for s in samples if s.ttft is not None]
    return {"words": words, "ttft_p50_s": pct(ttfts, 50), "ttft_min_s": round(min(ttfts), 4)}

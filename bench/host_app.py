"""`hypercorn -k trio -w 0 bench.host_app:app`: ATOM's whole server over a model that
costs nothing, for `python -m bench.host`.

The generation model is a FakeRunner (no forward, no delay) answering every request
with the same reply of about `HOST_REPLY_TOKENS` tokens (default 400), the default
model's tokenizer. With `HOST_PARSERS=1` the reply is a reasoning block, then text,
then a hermes tool call, for a server started with a reasoning and a tool-call
parser. `HOST_STEP_MS` stands for a device's step time (a sleep, the GIL released;
default 0). `GET /bench/steps` answers how many steps the runner has taken and the seconds
spent inside them, so the client can tell host time per step."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from atom.actors.cores import Loaded
from atom.actors.engine import exit_drained
from atom.http.app import create_app
from atom.logs import configure_logging
from atom.model.catalog import ModelSpec
from atom.model.fake_runner import FakeRunner
from atom.model.loader import load_tokenizer
from atom.model.runner import Runtime, Sampled, StepPlan
from atom.vocabulary.config import Settings

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "and",
    "keeps",
    "running",
    "far",
    "away",
]


def reply_text(num_tokens: int, with_parsers: bool) -> str:
    """About `num_tokens` tokens of plain words (one token a word, with its space)."""
    words = " ".join(WORDS[i % len(WORDS)] for i in range(num_tokens))
    if not with_parsers:
        return words
    third = num_tokens // 3
    thinking = " ".join(WORDS[i % len(WORDS)] for i in range(third))
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    return f"<think>{thinking}</think>{words[: len(words) // 2]} {call}"


@dataclass(slots=True)
class CountingRunner:
    """The FakeRunner, with the steps it takes and the seconds inside them counted."""

    runner: FakeRunner
    num_steps: int = 0
    step_s: float = 0.0

    def step(self, plan: StepPlan) -> Mapping[str, tuple[Sampled, ...]]:
        began = time.perf_counter()
        try:
            return self.runner.step(plan)
        finally:
            self.step_s += time.perf_counter() - began
            self.num_steps += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)


class HostApp:
    def __init__(self) -> None:
        self._app: Any = None
        self._runner: CountingRunner | None = None

    def _load(self, settings: Settings, spec: ModelSpec) -> Loaded:
        tokenizer = load_tokenizer(None, cache_dir=settings.cache_dir)
        num_tokens = int(os.environ.get("HOST_REPLY_TOKENS", "400"))
        text = reply_text(num_tokens, os.environ.get("HOST_PARSERS") == "1")
        reply = tokenizer.encode(text, add_special_tokens=False)
        runner = FakeRunner(
            eos_token_id=tokenizer.eos_token_id,
            script=lambda prompt_ids, params, seed: reply,
            num_blocks=65536,
            reads_back=False,  # no check costing a token its sequence's length
            step_delay_s=float(os.environ.get("HOST_STEP_MS", "0")) / 1000,
        )
        self._runner = CountingRunner(runner)
        return Runtime(runner=self._runner, tokenizer=tokenizer, max_model_len=4096)  # type: ignore[arg-type]

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/bench/steps":
            runner = self._runner
            body = {
                "steps": runner.num_steps if runner else 0,
                "step_s": runner.step_s if runner else 0.0,
            }
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})
            return
        if self._app is None:
            settings = Settings.from_env()
            configure_logging(settings.log_level, settings.log_format)
            self._app = create_app(settings, load=self._load, on_drained=exit_drained)
        await self._app(scope, receive, send)


app = HostApp()

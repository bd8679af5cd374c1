"""Shared fixtures: the real tokenizer, fake runtimes, and an in-process hypercorn server."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

# Triton kernels run under Triton's interpreter where no NVIDIA GPU is: it must be asked
# for before anything imports triton (torch may, on its own), so here, first of all
# (tests/model/test_triton_decode.py).
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import hypercorn.trio
import pytest
import torch
import trio
from hypercorn.config import Config
from transformers import WhisperConfig, WhisperForConditionalGeneration

from atom.actors.cores import Loaded
from atom.model.catalog import ModelKind, ModelSpec
from atom.model.fake_pooling import FakePoolingRunner
from atom.model.fake_runner import FakeRunner, Script
from atom.model.heap import thaw_heap
from atom.model.loader import load_tokenizer
from atom.model.pooling import PoolingRuntime
from atom.model.runner import Runtime
from atom.model.whisper.batch import WindowBatch
from atom.model.whisper.package import transformers_folder
from atom.model.whisper.runtime import WhisperRuntime, whisper_runtime
from atom.model.whisper.slots import WhisperSlots
from atom.vocabulary.config import Settings
from atom.vocabulary.events import ClientDisconnected, EngineStepped, Envelope, RequestReleased

FAKE_REPLY = "Hello world, this is a fake reply. Ça marche 🙂!"


@pytest.fixture(autouse=True)
def _thawed_heap() -> Iterator[None]:
    """Loading a model freezes the heap (atom/model/heap.py); between tests nothing stays
    frozen, so one test's garbage does not outlive it."""
    yield
    thaw_heap()


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return load_tokenizer(None, cache_dir=Settings().cache_dir)


def fake_loader(
    tokenizer: Any, *, reply: str = FAKE_REPLY, step_delay_s: float = 0.0, max_model_len: int = 2048
) -> Callable[[Settings, ModelSpec], Loaded]:
    """A loader for create_app/Engine: FakeRunner replying `reply` for generation models,
    a tiny random Whisper for speech models, FakePoolingRunner for the others; the real
    tokenizers."""
    script = replying(tokenizer, reply)

    def load_weights(path: str) -> Script:
        """Fake weights: a text file holding the reply they give."""
        return replying(tokenizer, Path(path).read_text())

    def load(settings: Settings, spec: ModelSpec) -> Loaded:
        if spec.kind is ModelKind.TRANSCRIBE:
            return fake_speech_runtime(settings.cache_dir)
        if spec.kind is not ModelKind.GENERATE:
            return fake_pooling_runtime(bert_tokenizer(), spec.kind)
        runner = FakeRunner(
            eos_token_id=tokenizer.eos_token_id,
            max_model_len=max_model_len,
            script=script,
            step_delay_s=step_delay_s,
        )
        return Runtime(
            runner=runner,
            tokenizer=tokenizer,
            max_model_len=max_model_len,
            load_weights=load_weights,
        )

    return load


def replying(tokenizer: Any, reply: str) -> Script:
    """A FakeRunner script that answers every prompt with `reply`."""
    reply_ids = tokenizer.encode(reply, add_special_tokens=False)

    def script(prompt_ids: tuple[int, ...], params: Any, seed: int) -> list[int]:
        return list(reply_ids)

    return script


@functools.cache
def bert_tokenizer() -> Any:
    """all-MiniLM-L6-v2's real tokenizer (WordPiece, with segment ids for pairs)."""
    return load_tokenizer("all-MiniLM-L6-v2", cache_dir=Settings().cache_dir)


def fake_speech_runtime(cache_dir: str) -> WhisperRuntime:
    """A Whisper of random weights, a few kilobytes a layer, with Whisper base's real
    tokenizer and special tokens (the packaged model's folder, converted once): its
    weights and tokenizer made once a session, its slots fresh for each server."""
    made = _speech_template(cache_dir)
    slots = WhisperSlots(made.batch.slots.model, num_slots=made.batch.slots.num_slots)
    return dataclasses.replace(
        made, batch=WindowBatch(slots, made.tokenizer.decode, made.batch.aligner)
    )


@functools.cache
def _speech_template(cache_dir: str) -> WhisperRuntime:
    folder = transformers_folder(cache_dir)
    config = WhisperConfig.from_pretrained(folder)
    for name in ("encoder_layers", "decoder_layers"):
        setattr(config, name, 1)
    for name in ("encoder_attention_heads", "decoder_attention_heads"):
        setattr(config, name, 2)
    config.d_model, config.encoder_ffn_dim, config.decoder_ffn_dim = 16, 32, 32
    # Its windows say garbage: each is decoded at six temperatures (the fallback ladder,
    # atom/model/whisper/decoding.py), so a short context keeps each try short.
    config.max_target_positions = 64
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    return whisper_runtime(model, folder, num_slots=2)


def fake_pooling_runtime(tokenizer: Any, kind: ModelKind) -> PoolingRuntime:
    num_dimensions = 1 if kind is ModelKind.SCORE else 8 if kind is ModelKind.EMBED else 3
    return PoolingRuntime(
        kind=kind,
        runner=FakePoolingRunner(kind=kind, num_dimensions=num_dimensions),
        tokenizer=tokenizer,
        max_model_len=512,
        num_dimensions=num_dimensions,
        labels=tuple(f"label_{i}" for i in range(3)) if kind is ModelKind.CLASSIFY else (),
    )


@asynccontextmanager
async def serving(app: Any, *, graceful_timeout_s: float = 3.0) -> AsyncIterator[str]:
    """Serve `app` with hypercorn on a free loopback port; yields the base URL. On leaving,
    requests still running get `graceful_timeout_s` before they are cancelled."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = graceful_timeout_s
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(hypercorn.trio.serve, app, config, shutdown_trigger=shutdown.wait)
        )
        try:
            yield binds[0]
        finally:
            shutdown.set()


@contextmanager
def serving_in_thread(app: Any) -> Iterator[str]:
    """`serving` in a thread of its own, for synchronous clients; yields the base URL once
    the models are loaded."""
    ready: list[str] = []
    stop = threading.Event()

    async def serve() -> None:
        async with serving(app, graceful_timeout_s=1) as url:
            await wait_ready(app)
            ready.append(url)
            while not stop.is_set():
                await trio.sleep(0.05)

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    while not ready:
        assert thread.is_alive(), "the server did not start"
        stop.wait(0.05)
    try:
        yield ready[0]
    finally:
        stop.set()
        thread.join(timeout=10)


async def wait_ready(app: Any, timeout_s: float = 60.0) -> None:
    with trio.fail_after(timeout_s):
        while not app.engine.is_ready:
            await trio.sleep(0.01)


def steps_before_release(envelopes: list[Envelope]) -> dict[str, int]:
    """For each request a client dropped: how many Batcher steps ran between its
    ClientDisconnected and its RequestReleased. An abort is applied at the next step
    boundary, so 0 or 1 (the step already running) is prompt release, by order of
    events rather than by the clock of a machine that may be busy."""
    disconnected: dict[str, int] = {}
    counts: dict[str, int] = {}
    for envelope in envelopes:
        event = envelope.event
        if isinstance(event, ClientDisconnected):
            disconnected[event.request_id] = 0
        elif isinstance(event, EngineStepped):
            for rid in disconnected:
                disconnected[rid] += 1
        elif isinstance(event, RequestReleased) and event.request_id in disconnected:
            counts[event.request_id] = disconnected.pop(event.request_id)
    assert not disconnected, f"never released: {sorted(disconnected)}"
    return counts

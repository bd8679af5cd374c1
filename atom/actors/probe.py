"""A deep health check: one token through each generation model's Batcher, one input
through each pooling model's Pooler, half a second of silence through each speech
model's Transcriber — the whole engine path, no HTTP request actor.

The probe's Batcher events (`health-…` request ids) reach the request log with no
`request_received` before them, so replay and metrics leave them out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import numpy as np
import trio

from atom.actors.cores import Core, EngineCore, PoolingCore
from atom.actors.outbox import Outbox
from atom.model.whisper.decoding import WindowTask
from atom.vocabulary.errors import EngineFailed
from atom.vocabulary.events import PoolingInput, Submit
from atom.vocabulary.plan import SamplingParams

PROBE_TIMEOUT_S = 30.0
ONE_TOKEN = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)


async def probe_all(cores: Iterable[Core]) -> None:
    """Probe every model but those POST /sleep put to sleep (they answer nothing)."""
    for core in list(cores):
        if not (isinstance(core, EngineCore) and core.batcher.sleep_level):
            await probe(core)


async def probe(core: Core) -> None:
    """Return once the model produced something; EngineFailed when it does not within
    PROBE_TIMEOUT_S (or its actor refuses: queue full, stopped)."""
    with trio.move_on_after(PROBE_TIMEOUT_S) as scope:
        if isinstance(core, EngineCore):
            await _one_token(core)
        elif isinstance(core, PoolingCore):
            await core.pooler.pool([PoolingInput(token_ids=_first_ids(core.tokenizer))])
        else:
            silence = np.zeros(core.runtime.sample_rate // 2, dtype=np.float32)
            await core.transcriber.transcribe([silence], WindowTask(language="en"))
    if scope.cancelled_caught:
        raise EngineFailed(f"the model `{core.name}` gave nothing in {PROBE_TIMEOUT_S:g} s")


async def _one_token(core: EngineCore) -> None:
    outbox = Outbox()
    submit = Submit(
        request_id=f"health-{uuid.uuid4().hex}",
        prompt_ids=_first_ids(core.tokenizer),
        params=ONE_TOKEN,
    )
    core.batcher.submit_nowait(submit, outbox)
    num_envelopes = 0
    while batch := await outbox.receive_batch():
        num_envelopes += len(batch)
    if not num_envelopes:
        raise EngineFailed(f"the model `{core.name}` sampled no token")


def _first_ids(tokenizer: object) -> tuple[int, ...]:
    ids = tokenizer("Hello")["input_ids"]  # type: ignore[operator]
    return tuple(int(i) for i in ids) or (0,)

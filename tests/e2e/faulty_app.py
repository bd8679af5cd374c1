"""`hypercorn -k trio -w 0 tests.e2e.faulty_app:app`: the server of `atom.http:app`
whose generation model's step goes wrong once the file named by `FAULT_FLAG` exists:
with `FAULT=hang` it blocks for good (a kernel that never returns, for the watchdog),
with `FAULT=raise` it raises (a runner bug) — for the subprocess fault tests. With
`FAKE_REPLY` set, the model is a FakeRunner answering that text instead (no fault),
each step taking `FAKE_STEP_DELAY` seconds."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping, MutableMapping
from typing import Any

from atom.actors.cores import Loaded
from atom.actors.engine import exit_drained
from atom.http.app import create_app, load_served
from atom.logs import configure_logging
from atom.model.catalog import ModelSpec
from atom.model.loader import load_tokenizer
from atom.model.runner import Runner, Runtime, Sampled, StepPlan
from atom.vocabulary.config import Settings
from tests.conftest import fake_loader


class Faulty:
    """A runner whose `step` hangs or raises while the flag file exists."""

    def __init__(self, runner: Runner, flag: str, fault: str) -> None:
        self._runner, self._flag, self._fault = runner, flag, fault

    def step(self, plan: StepPlan) -> Mapping[str, tuple[Sampled, ...]]:
        if os.path.exists(self._flag):
            if self._fault == "raise":
                raise RuntimeError("an injected runner fault")
            threading.Event().wait()  # forever
        return self._runner.step(plan)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)


def load(settings: Settings, spec: ModelSpec) -> Loaded:
    if "FAKE_REPLY" in os.environ:  # no real model: FakeRunner, many events a second
        tokenizer = load_tokenizer(None, cache_dir=settings.cache_dir)
        delay = float(os.environ.get("FAKE_STEP_DELAY", "0"))  # seconds a step
        return fake_loader(tokenizer, reply=os.environ["FAKE_REPLY"], step_delay_s=delay)(
            settings, spec
        )
    loaded = load_served(settings, spec)
    if isinstance(loaded, Runtime):
        faulty = Faulty(loaded.runner, os.environ["FAULT_FLAG"], os.environ.get("FAULT", "hang"))
        return dataclasses.replace(loaded, runner=faulty)  # type: ignore[arg-type]
    return loaded


class FaultyApp:
    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if self._app is None:
            settings = Settings.from_env()
            configure_logging(settings.log_level, settings.log_format)
            self._app = create_app(settings, load=load, on_drained=exit_drained)
        await self._app(scope, receive, send)


app = FaultyApp()

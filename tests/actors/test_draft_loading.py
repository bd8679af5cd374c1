"""Models loads the draft model that --speculative-config names beside each generation
model: with the served model's settings but the draft's own quantization, attached to
the runtime its Scheduler's proposer drafts with; a draft with another tokenizer is
refused at load."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest

from atom.actors.bus import EventBus
from atom.actors.models import Models
from atom.model.catalog import ModelKind, ModelSpec
from atom.model.runner import Runtime
from atom.projections.responses_store import ResponsesStore
from atom.vocabulary.config import Settings
from tests.conftest import bert_tokenizer, fake_loader

SERVED = ModelSpec(name="chat", source="/models/chat", kind=ModelKind.GENERATE)


def models_loading(tokenizer: Any, draft: str) -> tuple[Models, list[tuple[str, str]]]:
    """Models whose loader records (source, quantization) and gives `/models/other` a
    BERT tokenizer."""
    loads: list[tuple[str, str]] = []
    base = fake_loader(tokenizer)

    def load(settings: Settings, spec: ModelSpec) -> Any:
        loads.append((spec.source, settings.quantization))
        runtime = base(settings, spec)
        if spec.source == "/models/other":
            return dataclasses.replace(runtime, tokenizer=bert_tokenizer())
        return runtime

    config = {"model": draft, "num_speculative_tokens": 2, "quantization": "int8"}
    settings = Settings(speculative_config=json.dumps(config), quantization="int4")
    models = Models(
        settings,
        (SERVED,),
        load,
        bus=EventBus(clock=time.monotonic),
        clock=time.monotonic,
        responses=ResponsesStore(max_entries=1),
        on_fatal=lambda: None,
    )
    return models, loads


def test_the_draft_is_loaded_with_its_own_quantization_and_attached(tokenizer: Any) -> None:
    models, loads = models_loading(tokenizer, "/models/draft")
    loaded = models._load_with_draft(SERVED)
    assert loads == [("/models/chat", "int4"), ("/models/draft", "int8")]
    assert isinstance(loaded, Runtime) and loaded.draft is not None


def test_a_draft_with_another_tokenizer_is_refused(tokenizer: Any) -> None:
    models, _ = models_loading(tokenizer, "/models/other")
    with pytest.raises(ValueError, match="has another tokenizer than /models/chat"):
        models._load_with_draft(SERVED)

"""LoRA adapters served for real: the default model with an adapter made here with PEFT
(random, non-zero B), served with --lora-modules, listed by /v1/models, answering chat
through the official client differently from the base; more loaded and unloaded at
runtime while other requests stream; refusals in the API's shape; the request log and
/metrics name the adapter."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from atom.log.codec import read_log
from atom.model.catalog import resolve_source
from atom.vocabulary.events import LoraLoaded, LoraUnloaded, RequestReceived
from tests.e2e.conftest import CAPITAL, Server, running_server
from tests.lora_adapters import save_adapter

pytestmark = pytest.mark.slow


def default_model_shapes() -> Any:
    """A random model of the default model's shapes: an adapter fits by shape alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    gguf = resolve_source(None)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    model = default_model_shapes()
    made = {
        "tuned": save_adapter(model, root / "tuned", rank=8, seed=1, std=0.15),
        "second": save_adapter(model, root / "second", rank=4, targets=("q_proj", "v_proj")),
        "too-big": save_adapter(model, root / "too-big", rank=32, targets=("q_proj",)),
    }
    # Corrupt ones (each was a 500 with a traceback): weights that are no safetensors file,
    # and a config nested 100,000 deep.
    made["corrupt-weights"] = shutil.copytree(made["second"], root / "corrupt-weights")
    (made["corrupt-weights"] / "adapter_model.safetensors").write_bytes(b"\xff" * 64)
    made["deep-config"] = shutil.copytree(made["second"], root / "deep-config")
    (made["deep-config"] / "adapter_config.json").write_text("[" * 100_000 + "]" * 100_000)
    return made


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, folders: dict[str, Path]) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("lora") / "requests.jsonl"
    with running_server(
        log,
        ATOM_ENABLE_LORA="true",
        ATOM_LORA_MODULES=json.dumps([f"tuned={folders['tuned']}"]),
        ATOM_MAX_LORAS="2",
        ATOM_ENABLE_ADMIN_ROUTES="true",
    ) as running:
        yield running


def ask(server: Server, model: str, **more: Any) -> Any:
    return server.client().chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": CAPITAL}],
        temperature=0,
        max_tokens=16,
        **more,
    )


def admin(server: Server, route: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/{route}", json=body, timeout=120)


def test_the_adapter_is_listed_under_its_base_model(server: Server) -> None:
    cards = {c["id"]: c for c in httpx.get(f"{server.url}/v1/models").json()["data"]}
    assert cards["tuned"]["parent"] == server.model
    assert cards[server.model]["parent"] is None


def test_the_adapter_answers_chat_differently_from_the_base(server: Server) -> None:
    base, tuned = ask(server, server.model), ask(server, "tuned")
    assert tuned.model == "tuned"
    assert "Paris" in (base.choices[0].message.content or "")
    assert tuned.choices[0].message.content != base.choices[0].message.content


def test_adapters_load_and_unload_while_another_request_streams(
    server: Server, folders: dict[str, Path]
) -> None:
    streamed: list[str] = []

    def stream() -> None:
        chunks = server.client().chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": CAPITAL}],
            max_tokens=120,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        streamed.extend(c.choices[0].delta.content or "" for c in chunks if c.choices)

    streaming = threading.Thread(target=stream)
    streaming.start()
    loaded = admin(
        server, "load_lora_adapter", {"lora_name": "second", "lora_path": str(folders["second"])}
    )
    assert loaded.status_code == 200, loaded.text
    assert loaded.text == "Success: LoRA adapter 'second' added successfully."
    second = ask(server, "second")
    assert second.model == "second"
    unloaded = admin(server, "unload_lora_adapter", {"lora_name": "second"})
    assert unloaded.status_code == 200, unloaded.text
    streaming.join(timeout=120)
    assert len(streamed) > 100  # the stream went on to its end meanwhile
    with pytest.raises(openai.NotFoundError):
        ask(server, "second")


def test_an_adapter_in_use_is_not_unloaded(server: Server) -> None:
    stream = server.client().chat.completions.create(
        model="tuned",
        messages=[{"role": "user", "content": CAPITAL}],
        max_tokens=200,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    first = next(iter(stream))  # the request runs
    refused = admin(server, "unload_lora_adapter", {"lora_name": "tuned"})
    metrics = httpx.get(f"{server.url}/metrics").text
    rest = list(stream)
    info = f'atom:lora_requests_info{{model_name="{server.model}",max_lora="2",'
    assert f'{info}running_lora_adapters="tuned",waiting_lora_adapters=""}}' in metrics
    assert first.model == "tuned" and rest
    assert refused.status_code == 409
    assert "requests running or queued" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"lora_name": "gone", "lora_path": "/nonexistent/adapter"}, 400, "adapter_config.json"),
        ({"lora_name": "big", "lora_path": "too-big"}, 400, "--max-lora-rank"),
        ({"lora_name": "tuned", "lora_path": "tuned"}, 400, "already served"),
        ({"lora_name": "SmolLM2-135M-Instruct", "lora_path": "tuned"}, 409, "already served"),
        ({"lora_name": "x"}, 400, "lora_path"),
        ({"lora_name": "c", "lora_path": "corrupt-weights"}, 400, "corrupt-weights"),
        ({"lora_name": "d", "lora_path": "deep-config"}, 400, "deep-config"),
    ],
)
def test_adapters_that_cannot_be_served_are_refused(
    server: Server, folders: dict[str, Path], body: dict[str, Any], status: int, words: str
) -> None:
    if body.get("lora_path") in folders:
        body = {**body, "lora_path": str(folders[body["lora_path"]])}
    refused = admin(server, "load_lora_adapter", body)
    assert refused.status_code == status, refused.text
    assert words in refused.json()["error"]["message"]
    assert admin(server, "unload_lora_adapter", {"lora_name": "never"}).status_code == 404
    assert ask(server, "tuned").model == "tuned"  # and the server keeps serving


def test_the_log_names_the_adapter(server: Server) -> None:
    ask(server, "tuned")
    events = [e.event for e in read_log(server.log_path)]
    loaded = [e.lora for e in events if isinstance(e, LoraLoaded)]
    assert loaded[0] == "tuned"
    assert "second" in loaded and "second" in [
        e.lora for e in events if isinstance(e, LoraUnloaded)
    ]
    assert "tuned" in {e.model for e in events if isinstance(e, RequestReceived)}

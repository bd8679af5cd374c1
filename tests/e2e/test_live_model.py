"""The real chat model's state changed while it serves (one server for the module):
a profile of its steps, new weights from disk, a level-2 sleep and the wake-up; and,
since this server runs a reasoning parser, a thinking budget the sampler enforces."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from safetensors.torch import load_file, save_file

from atom.model.loader import default_model_path, local_folder
from atom.vocabulary.config import Settings
from tests.e2e.conftest import CAPITAL, Server, running_server

pytestmark = pytest.mark.slow
CHAT = {
    "messages": [{"role": "user", "content": CAPITAL}],
    "max_tokens": 12,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    root = tmp_path_factory.mktemp("live")
    env = {
        "ATOM_MODEL": "SmolLM2-135M-Instruct",
        "ATOM_ENABLE_ADMIN_ROUTES": "true",
        "ATOM_PROFILE_DIR": str(root / "traces"),
        "ATOM_REASONING_PARSER": "qwen3",  # SmolLM2 writes no <think>: its answers stay content
    }
    with running_server(root / "requests.jsonl", **env) as server:
        yield server, root


def weights_copy(root: Path, name: str, change: Any) -> Path:
    """The served model's folder copied, its tensors passed through `change`."""
    original = local_folder(default_model_path(), Settings().cache_dir)
    folder = root / name
    shutil.copytree(original, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    tensors = load_file(original / "model.safetensors")
    save_file(change(tensors), folder / "model.safetensors")
    return folder


def answer(server: Server) -> str:
    return str(server.chat(CHAT)["choices"][0]["message"]["content"])


def test_a_profile_traces_the_forward_and_sampling_inside_the_batchers_model_steps(
    served: tuple[Server, Path],
) -> None:
    server, _ = served
    assert httpx.post(f"{server.url}/start_profile").status_code == 200
    answer(server)
    stopped = httpx.post(f"{server.url}/stop_profile", timeout=120).json()
    events = json.loads(Path(stopped["trace"]).read_text())["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    forwards = [e for e in spans if e["name"] == "atom.forward"]
    steps = [e for e in spans if e["name"] == "model step"]
    assert len(forwards) == len(steps) >= 2  # one forward a step, a step a token
    assert any(e["name"] == "atom.sampling" for e in spans)
    assert any(e["name"].startswith("aten::") for e in spans)  # the torch ops themselves
    for forward in forwards:  # one clock: every forward lies inside a step the loop waited on
        assert any(
            step["ts"] - 1000 <= forward["ts"]
            and forward["ts"] + forward["dur"] <= step["ts"] + step["dur"] + 1000
            for step in steps
        ), forward


def test_new_weights_change_the_answer_and_the_old_ones_bring_it_back(
    served: tuple[Server, Path],
) -> None:
    server, root = served
    before = answer(server)
    flipped = weights_copy(
        root, "flipped", lambda t: {**t, "model.norm.weight": -t["model.norm.weight"]}
    )
    original = local_folder(default_model_path(), Settings().cache_dir)
    update = f"{server.url}/update_weights_from_disk"
    swapped = httpx.post(update, json={"model_path": str(flipped)}, timeout=300).json()
    changed = answer(server)
    back = httpx.post(update, json={"model_path": str(original)}, timeout=300).json()
    assert swapped["success"] is True and back["success"] is True
    assert changed != before and answer(server) == before


def test_weights_of_another_shape_are_refused_and_the_model_keeps_serving(
    served: tuple[Server, Path],
) -> None:
    server, root = served
    before = answer(server)

    def fewer_layers(tensors: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in tensors.items() if not k.startswith("model.layers.29.")}

    smaller = weights_copy(root, "smaller", fewer_layers)
    config = json.loads((smaller / "config.json").read_text())
    (smaller / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 29}))
    refused = httpx.post(
        f"{server.url}/update_weights_from_disk", json={"model_path": str(smaller)}, timeout=300
    )
    assert refused.status_code == 400 and refused.json()["success"] is False
    assert "do not fit the served model" in refused.json()["message"]
    assert answer(server) == before


def test_a_level_2_sleep_frees_the_model_and_the_wake_up_reloads_it(
    served: tuple[Server, Path],
) -> None:
    server, _ = served
    before = answer(server)
    slept = httpx.post(f"{server.url}/sleep", params={"level": "2"}, timeout=120)
    refused = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, timeout=60)
    woke = httpx.post(f"{server.url}/wake_up", timeout=300)
    assert slept.json() == {"is_sleeping": True, "level": 2}
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "model_asleep"
    assert woke.json() == {"is_sleeping": False}
    assert answer(server) == before


def test_a_thinking_budget_forces_the_end_of_the_reasoning_and_the_answer_follows(
    served: tuple[Server, Path],
) -> None:
    server, _ = served
    prefilled = [*CHAT["messages"], {"role": "assistant", "content": "<think>"}]  # type: ignore[misc]
    body = {
        **CHAT,
        "messages": prefilled,
        "add_generation_prompt": False,
        "continue_final_message": True,  # the prompt now ends inside an open <think>
        "max_tokens": 40,
        "ignore_eos": True,
    }
    free = server.chat(body)
    budgeted = server.chat({**body, "thinking_token_budget": 5})
    free_message, message = free["choices"][0]["message"], budgeted["choices"][0]["message"]
    assert free_message["content"] == ""  # left alone, 40 tokens of reasoning, no answer
    marker = httpx.post(
        f"{server.url}/tokenize", json={"prompt": "</think>", "add_special_tokens": False}
    ).json()["tokens"]
    # Five tokens of reasoning, the forced marker, and the one the parser needs to see it end.
    assert budgeted["usage"]["completion_tokens_details"]["reasoning_tokens"] <= 5 + len(marker) + 1
    assert message["reasoning_content"] and message["content"]  # ended, then answered
    assert free_message["reasoning_content"].startswith(message["reasoning_content"].strip()[:10])

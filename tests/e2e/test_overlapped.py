"""The real default model with overlapped steps (--async-scheduling; on by default only
on CUDA) answers as in lockstep: a grammar, a stop string, penalties and seeded choices
included. Two fresh servers, without a prefix cache, so each computes the same rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.e2e.conftest import CAPITAL, Server, running_server
from tests.e2e.test_structured import ASK, PERSON

pytestmark = pytest.mark.slow
QUESTION = [{"role": "user", "content": CAPITAL}]
BODIES = {
    "greedy": {"messages": QUESTION, "temperature": 0, "max_tokens": 24},
    "json_schema": {
        "messages": ASK,
        "temperature": 0,
        "max_tokens": 120,
        "response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}},
    },
    "stop_string": {"messages": QUESTION, "temperature": 0, "stop": [" Paris"]},
    "seeded_n2_penalty": {
        "messages": QUESTION,
        "n": 2,
        "temperature": 1.0,
        "seed": 11,
        "frequency_penalty": 0.5,
        "max_tokens": 16,
    },
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    folder = tmp_path_factory.mktemp("overlapped")
    with (
        serving(folder / "lockstep.jsonl", "false") as lockstep,
        serving(folder / "overlapped.jsonl", "true") as overlapped,
    ):
        yield lockstep, overlapped


def serving(log: Path, overlap: str) -> AbstractContextManager[Server]:
    return running_server(
        log,
        ATOM_MODEL="SmolLM2-135M-Instruct",
        ATOM_ENABLE_PREFIX_CACHING="false",
        ATOM_ASYNC_SCHEDULING=overlap,
    )


@pytest.mark.parametrize("name", list(BODIES))
def test_overlapped_steps_answer_as_lockstep(pair: tuple[Server, Server], name: str) -> None:
    lockstep, overlapped = pair
    body = BODIES[name]
    want, got = lockstep.chat(body)["choices"], overlapped.chat(body)["choices"]
    answers = [(c["message"]["content"], c["finish_reason"]) for c in want]
    assert [(c["message"]["content"], c["finish_reason"]) for c in got] == answers
    assert all(text for text, _ in answers)

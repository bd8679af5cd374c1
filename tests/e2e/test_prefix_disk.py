"""The prefix cache's disk tier in a real server: a sleep keeps the cache's blocks on disk
for after the wake-up, and a stopped server's blocks serve the next one's prefix hits;
the answers stay the same (docs/architecture.md, "Prefix cache on disk")."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server, running_server

pytestmark = pytest.mark.slow
DOCUMENT = " ".join(
    f"Rule {i}: the gate of tower {i} opens at {i % 12 + 1} o'clock." for i in range(60)
)


def ask(server: Server, question: str) -> str:
    body = {"messages": [{"role": "system", "content": DOCUMENT},
                         {"role": "user", "content": question}],
            "temperature": 0, "max_tokens": 12}  # fmt: skip
    return str(server.chat(body)["choices"][0]["message"]["content"])


def disk_hits(server: Server) -> float:
    lines = httpx.get(f"{server.url}/metrics").text.splitlines()
    [line] = [
        x for x in lines if x.startswith('atom:prefix_cache_disk_hits_total{model_name="Smol')
    ]
    return float(line.rsplit(" ", 1)[1])


def test_a_sleep_and_a_restart_keep_the_prefix_on_disk(tmp_path: Path) -> None:
    env = {"ATOM_PREFIX_CACHE_DIR": str(tmp_path / "kv"), "ATOM_ENABLE_ADMIN_ROUTES": "true"}
    with running_server(tmp_path / "first.jsonl", **env) as server:
        first = ask(server, "When does the gate of tower 7 open?")
        assert disk_hits(server) == 0
        assert httpx.post(f"{server.url}/sleep", params={"level": "1"}, timeout=60).is_success
        assert httpx.post(f"{server.url}/wake_up", timeout=60).is_success
        assert ask(server, "When does the gate of tower 7 open?") == first
        after_sleep = disk_hits(server)
        assert after_sleep >= 16 * 30  # the document's blocks, read back
    assert list((tmp_path / "kv").rglob("*.kv"))  # the stop saved what the cache held
    with running_server(tmp_path / "second.jsonl", **env) as server:
        assert ask(server, "When does the gate of tower 7 open?") == first
        assert disk_hits(server) >= after_sleep

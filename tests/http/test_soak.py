"""The soak of bench/soak.py, short, in CI (FakeRunner model): clients dropping requests
at random points under a steady load, then a mixed load with bad requests; afterwards
nothing is left running, queued, open or holding KV blocks, no task is left over, no
answer is a 5xx and the request log replays every client's bytes (issue 20)."""

from __future__ import annotations

from typing import Any

from bench.soak import main, parser


async def test_a_short_soak_leaves_nothing_behind(tokenizer: Any) -> None:
    args = parser().parse_args(
        ["--fake", "--disconnects", "40", "--mixed", "150", "--streams", "8"]
    )
    args.tokenizer = tokenizer
    report = await main(args)
    clean = {
        "running_requests": 0,
        "queued_requests": 0,
        "running_seqs": 0,
        "runner_seqs": 0,
        "open_requests": 0,
        "kv_cache_usage": 0,
        "tasks": report["tasks_before"],
    }
    assert report["after_disconnects"] == clean
    assert report["after_mixed"] == clean
    dropped = report["disconnects"]
    assert dropped["never_released"] == 0 and dropped["num_released"] >= 20
    assert {"queued", "mid_stream"} <= set(dropped["dropped_at"])
    statuses = report["mixed"]["statuses"]
    assert sum(statuses.values()) == 150 and all(status < 500 for status in statuses)
    assert statuses[200] == 135 and sum(n for s, n in statuses.items() if s >= 400) == 15
    replay = report["mixed"]["replay_identical"]
    assert replay["logged"] == 135 and replay["identical"] == 135

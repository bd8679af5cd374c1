"""Golden request logs replay to exactly the bytes their clients received."""

from __future__ import annotations

import json
from pathlib import Path

from atom.log.codec import decode, encode, read_log
from atom.log.replay import project
from atom.vocabulary.events import Envelope

GOLDEN = Path(__file__).parent / "golden"


def test_golden_logs_replay_byte_identical() -> None:
    for log_path in sorted(GOLDEN.glob("*.jsonl")):
        expected = json.loads(log_path.with_suffix(".responses.json").read_text())
        replayed = {r.request_id: r for r in project(read_log(log_path))}
        assert set(expected) <= set(replayed)
        for request_id, raw in expected.items():
            body = bytes(replayed[request_id].body)
            if replayed[request_id].is_complete:
                assert body == raw.encode()
            else:  # the disconnected client read a prefix of what was sent
                assert body.startswith(raw.encode())


def test_codec_round_trips_every_line_of_the_golden_logs() -> None:
    for log_path in GOLDEN.glob("*.jsonl"):
        for line in log_path.read_text().splitlines():
            envelope = decode(line)
            assert isinstance(envelope, Envelope)
            assert decode(encode(envelope)) == envelope  # older logs lack newer optional fields


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    lines = (GOLDEN / "mix.jsonl").read_text().splitlines()
    torn = tmp_path / "torn.jsonl"
    torn.write_text("\n".join(lines[:10]) + "\n" + lines[10][:25])
    assert len(list(read_log(torn))) == 10

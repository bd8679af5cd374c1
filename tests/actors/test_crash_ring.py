"""The crash ring keeps the last minutes of events and writes them as a request log."""

from __future__ import annotations

from pathlib import Path

from atom.log.codec import read_log
from atom.log.crash_ring import CrashRing
from atom.vocabulary.events import ClientDisconnected, Envelope


def _envelope(seq: int, at: float) -> Envelope:
    return Envelope(seq=seq, at=at, event=ClientDisconnected(request_id=f"r{seq}"))


def test_it_keeps_the_window_and_at_most_max_events(tmp_path: Path) -> None:
    ring = CrashRing(tmp_path, window_s=10, max_events=5)
    for seq, at in enumerate([0.0, 1.0, 2.0, 12.5, 13.0, 14.0]):
        ring.keep(_envelope(seq, at))
    path = ring.dump()
    assert path is not None and path.parent == tmp_path
    assert [e.seq for e in read_log(path)] == [3, 4, 5]  # 0-2 are over 10 s older than 14
    many = CrashRing(tmp_path / "many", window_s=100, max_events=5)
    for seq in range(12):
        many.keep(_envelope(seq, float(seq)))
    many_path = many.dump()
    assert many_path is not None
    assert [e.seq for e in read_log(many_path)] == [7, 8, 9, 10, 11]


def test_after_the_dump_every_new_event_is_appended_to_it(tmp_path: Path) -> None:
    ring = CrashRing(tmp_path)
    ring.keep(_envelope(0, 1.0))
    path = ring.dump()
    ring.keep(_envelope(1, 2.0))
    assert ring.dump() == path  # once
    assert path is not None
    assert [e.seq for e in read_log(path)] == [0, 1]
    assert len(list(tmp_path.iterdir())) == 1


def test_a_dump_that_cannot_be_written_is_logged_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    ring = CrashRing(blocker / "dumps")  # a folder under a file: no such folder can exist
    ring.keep(_envelope(0, 1.0))
    assert ring.dump() is None
    ring.keep(_envelope(1, 2.0))  # and it keeps going

"""The Registry's routing table is read in worker threads (requests are planned there)
while the event loop loads and unloads models: a lookup reads one snapshot, and a
change never alters a snapshot someone may be reading."""

from __future__ import annotations

import threading
import time

import pytest

from atom.actors.registry import LoraCard, Registry
from atom.model.catalog import ModelKind, ModelSpec
from atom.vocabulary.errors import AtomError, EngineNotReady

GENERATE = frozenset({ModelKind.GENERATE})


def spec(name: str) -> ModelSpec:
    return ModelSpec(name=name, source=f"/models/{name}", kind=ModelKind.GENERATE)


def test_a_change_builds_a_new_table_and_leaves_the_one_being_read() -> None:
    registry = Registry((spec("a"),))
    before = registry.routes
    registry.put_spec("b", spec("b"))
    registry.put_lora("x", LoraCard(name="x", path="/x", base="a", rank=8, num_bytes=1))
    registry.put_spec("a", None)
    assert list(before.specs) == ["a"] and not before.loras  # as it was
    assert list(registry.specs) == ["b"] and list(registry.loras) == ["x"]
    with pytest.raises(TypeError):
        registry.specs["c"] = spec("c")  # type: ignore[index]  # read-only: no change in place


def test_lookups_in_threads_while_models_come_and_go_see_a_whole_table() -> None:
    """What build_request does in worker threads, against what the admin routes do."""
    registry = Registry(tuple(spec(f"m{i}") for i in range(50)))
    failures: list[BaseException] = []
    stop = threading.Event()

    def look_up() -> None:
        while not stop.is_set():
            for name in (None, "m0", "m49", "late"):
                try:
                    registry.core(name, GENERATE, "/v1/chat/completions")
                except (EngineNotReady, AtomError):
                    pass  # loading, or not served (yet): a clean answer either way
                except BaseException as error:  # a table changed under the reader
                    failures.append(error)

    readers = [threading.Thread(target=look_up) for _ in range(4)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        for i in range(50, 60):
            registry.put_spec(f"m{i}", spec(f"m{i}"))
        registry.put_spec("late", spec("late"))
        for i in range(50, 60):
            registry.put_spec(f"m{i}", None)
        registry.put_spec("late", None)
    stop.set()
    for reader in readers:
        reader.join()
    assert failures == []


def test_an_adapter_counts_as_a_use_of_its_base_model() -> None:
    registry = Registry((spec("a"), spec("b")))
    registry.put_lora("x", LoraCard(name="x", path="/x", base="a", rank=8, num_bytes=1))
    for name in ("a", "b"):
        registry.put_core(name, object())  # type: ignore[arg-type]  # any loaded model
    registry.touch("b")
    registry.touch("x")  # the adapter: "a" is now the most recent
    assert registry.least_recently_used() == "b"

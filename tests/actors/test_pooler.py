"""The Pooler: batching within the token budget, overload, a caller that leaves, a
runner that fails."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from atom.actors.device import DeviceThread
from atom.actors.pooler import Pooler
from atom.model.fake_pooling import FakePoolingRunner
from atom.vocabulary.errors import EngineFailed, Overloaded
from atom.vocabulary.events import PoolingInput


class Recording(FakePoolingRunner):
    """Remembers the token counts of every forward it ran."""

    def __init__(self) -> None:
        super().__init__(num_dimensions=4)
        self.forwards: list[list[int]] = []

    def pool(self, inputs: Sequence[PoolingInput]) -> Any:
        self.forwards.append([len(i.token_ids) for i in inputs])
        return super().pool(inputs)


def inputs(*lengths: int) -> list[PoolingInput]:
    return [PoolingInput(token_ids=tuple(range(1, n + 1))) for n in lengths]


async def test_inputs_of_several_requests_share_forwards_within_the_budget() -> None:
    runner = Recording()
    device = DeviceThread()
    pooler = Pooler(runner, device=device, max_num_batched_tokens=10, max_queued_requests=8)
    results: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:

        async def ask(name: str, request: list[PoolingInput]) -> None:
            results[name] = await pooler.pool(request)

        # Queued in this order before the Pooler takes any of them.
        for name, request in (("a", inputs(3, 3)), ("b", inputs(2, 6, 1)), ("c", inputs(20))):
            nursery.start_soon(ask, name, request)  # c alone is above the budget
            await trio.testing.wait_all_tasks_blocked()
        await nursery.start(pooler.run)
        while len(results) < 3:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    device.close()
    assert runner.forwards == [[3, 3, 2], [6, 1], [20]]
    expected = FakePoolingRunner(num_dimensions=4).pool(inputs(2, 6, 1))
    assert [list(v) for v in results["b"]] == [list(v) for v in expected]


async def test_a_full_queue_is_overloaded_and_a_caller_that_left_is_skipped() -> None:
    runner = Recording()
    device = DeviceThread()
    pooler = Pooler(runner, device=device, max_num_batched_tokens=100, max_queued_requests=1)
    with trio.move_on_after(0.05):
        await pooler.pool(inputs(5))  # queued, never run: the Pooler is not running yet
    with pytest.raises(Overloaded):
        # the abandoned request still holds the queue's one place
        await pooler.pool(inputs(4))
    async with trio.open_nursery() as nursery:
        await nursery.start(pooler.run)
        assert len(await pooler.pool(inputs(7))) == 1
        nursery.cancel_scope.cancel()
    device.close()
    assert runner.forwards == [[7]]  # the abandoned request never ran


async def test_a_failing_runner_fails_the_waiting_requests_and_the_pooler() -> None:
    class Broken(FakePoolingRunner):
        def pool(self, inputs: Sequence[PoolingInput]) -> Any:
            raise RuntimeError("device lost")

    device = DeviceThread()
    pooler = Pooler(Broken(), device=device, max_num_batched_tokens=100, max_queued_requests=4)
    errors: list[BaseException] = []

    async def ask() -> None:
        try:
            await pooler.pool(inputs(3))
        except EngineFailed as error:
            errors.append(error)

    with pytest.raises(BaseExceptionGroup) as raised:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            await pooler.run()
    device.close()
    assert raised.group_contains(RuntimeError, match="device lost")
    assert len(errors) == 2
    with pytest.raises(EngineFailed):
        await pooler.pool(inputs(1))  # refused once the Pooler stopped

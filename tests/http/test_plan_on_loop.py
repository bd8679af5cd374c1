"""A small request plans on the event loop; media and grammars send it to a thread."""

from __future__ import annotations

import threading

from atom.http.fetch import INLINE_PLAN_BYTES, plan_off_loop
from atom.vocabulary.config import Settings
from atom.vocabulary.on_loop import off_loop


def where(*, needs_thread: bool = False) -> str:
    if needs_thread:
        off_loop()
    return threading.current_thread().name


async def test_a_small_body_plans_on_the_loop() -> None:
    loop = threading.current_thread().name
    assert await plan_off_loop(Settings(), where, body_bytes=100) == loop


async def test_a_large_body_or_none_plans_in_a_worker_thread() -> None:
    loop = threading.current_thread().name
    assert await plan_off_loop(Settings(), where, body_bytes=INLINE_PLAN_BYTES + 1) != loop
    assert await plan_off_loop(Settings(), where) != loop


async def test_work_for_a_thread_plans_again_there() -> None:
    loop = threading.current_thread().name
    planned = await plan_off_loop(Settings(), lambda: where(needs_thread=True), body_bytes=100)
    assert planned != loop

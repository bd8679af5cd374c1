"""DeviceThread: every job runs on the same OS thread, results and errors come back,
and a cancelled caller still waits for its job to finish."""

from __future__ import annotations

import threading

import pytest
import trio

from atom.actors.device import DeviceThread


async def test_jobs_run_in_order_on_one_thread() -> None:
    device = DeviceThread()
    threads = [await device.run_sync(threading.get_ident) for _ in range(5)]
    assert len(set(threads)) == 1
    assert threads[0] != threading.get_ident()
    assert await device.run_sync(pow, 2, 10) == 1024
    device.close()


async def test_errors_are_raised_in_the_caller() -> None:
    device = DeviceThread()
    with pytest.raises(ZeroDivisionError):
        await device.run_sync(lambda: 1 / 0)
    assert await device.run_sync(lambda: "still serving") == "still serving"
    device.close()


async def test_a_cancelled_caller_waits_for_its_job() -> None:
    device = DeviceThread()
    release = threading.Event()
    finished: list[bool] = []

    def job() -> None:
        release.wait(5)
        finished.append(True)

    threading.Timer(0.2, release.set).start()  # the job ends well after the deadline
    with trio.move_on_after(0.05) as scope:
        await device.run_sync(job)
        assert finished == [True]  # run_sync returned only once the job had ended
        await trio.lowlevel.checkpoint()  # where the deadline is delivered
    assert scope.cancel_called and scope.cancelled_caught
    device.close()


async def test_not_even_a_base_exception_ends_the_device_thread() -> None:
    """A job that raises SystemExit or KeyboardInterrupt (what would end an OS thread)
    fails its caller alone: the thread runs the next job, so no later step waits for
    a thread that is gone (issue 20: a device-thread crash)."""
    device = DeviceThread()

    def exits() -> None:
        raise SystemExit(3)

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(SystemExit):
        await device.run_sync(exits)
    with pytest.raises(KeyboardInterrupt):
        await device.run_sync(interrupted)
    assert await device.run_sync(lambda: "still serving") == "still serving"
    device.close()


async def test_a_started_job_reads_the_result_of_the_one_before() -> None:
    """`start` queues without waiting; a job started after another reads its result
    (or fails with it), and the first job's caller still gets the result too."""
    device = DeviceThread()
    gate = threading.Event()
    first = device.start(lambda: gate.wait(5) and 41)
    second = device.start(lambda: first.value() + 1)  # queued while the first still runs
    gate.set()
    assert await second.result() == 42
    assert await first.result() == 41
    failed = device.start(lambda: 1 / 0)
    after = device.start(failed.value)
    with pytest.raises(RuntimeError, match="follows failed"):
        await after.result()
    with pytest.raises(ZeroDivisionError):
        await failed.result()
    device.close()

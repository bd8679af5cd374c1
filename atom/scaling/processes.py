"""Child processes that never outlive the launcher: each asks the kernel for SIGTERM
when its parent dies (PR_SET_PDEATHSIG), so even a `kill -9` of `atom serve` leaves no
replica or router behind; a replica so signalled drains as on any SIGTERM.

The kernel sends that signal when the *thread* that forked the child ends, so children
are started here, on the launcher's main thread, never through `trio.run_process`
(which forks on a worker thread that ends after a few idle seconds). Each child has a
process group of its own: a signal for the launcher's group (a terminal's Ctrl-C,
`timeout`) reaches the launcher alone, and it decides the order in which they stop."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import trio

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork


@dataclass(frozen=True, slots=True)
class Child:
    name: str  # "replica 0", "router"
    process: subprocess.Popen[bytes]

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        if self.running:
            self.process.send_signal(signum)

    async def exited(self) -> int:
        """Its exit status, once it has one (waited on through a pidfd, no thread)."""
        pidfd = os.pidfd_open(self.process.pid)
        try:
            await trio.lowlevel.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        return self.process.wait()


def spawn(
    name: str,
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    cpus: Sequence[int] = (),
    pass_fds: Sequence[int] = (),
) -> Child:
    """Start `command`, pinned to `cpus` when given; call from the main thread."""
    parent = os.getpid()

    def in_child() -> None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request took hold
            os._exit(1)
        if cpus:
            os.sched_setaffinity(0, cpus)

    process = subprocess.Popen(
        list(command),
        env=dict(env),
        pass_fds=tuple(pass_fds),
        preexec_fn=in_child,
        process_group=0,  # a terminal's Ctrl-C reaches the launcher alone, which drains
    )
    return Child(name=name, process=process)

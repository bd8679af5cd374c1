"""RequestActor: one generation request, from the Batcher's tokens to the bytes on the wire.

Its nursery runs a disconnect watcher (owns ASGI `receive`; cancels the actor
when the client goes away), a router (Outbox → the choice streams), one
ChoiceStream per choice, and a writer (publishes each event, renders it with
atom.projections.wire and hands the bytes to `respond`, which atom/http/asgi.py frames as
ASGI messages). Usage and latency are a fold of the request's own envelopes
(atom/projections/usage.py). Leaving early for any reason aborts the request in the Batcher
from `finally`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
import trio

from atom.actors.choice_stream import ChoiceStream
from atom.actors.cores import EngineCore
from atom.actors.outbox import Outbox
from atom.projections.renderers import renderer_for
from atom.projections.usage import RequestUsage
from atom.projections.wire import Output
from atom.text.pipeline import pipeline_for
from atom.vocabulary.errors import AtomError, EngineFailed
from atom.vocabulary.events import (
    Abort,
    ChoiceFinished,
    ClientDisconnected,
    Event,
    KeepAliveSent,
    RequestAborted,
    RequestAccepted,
    RequestFailed,
    RequestReceived,
    Submit,
    TokensSampled,
)
from atom.vocabulary.plan import RequestPlan

ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationRequest:
    """A validated request: what was received (its plan inside), the plan itself, and
    what to ask of the Batcher (built from the plan)."""

    received: RequestReceived
    plan: RequestPlan
    submit: Submit


class RequestActor:
    def __init__(
        self,
        core: EngineCore,
        request: GenerationRequest,
        *,
        receive: ASGIReceive,
        respond: Callable[[Output], Awaitable[None]],
    ) -> None:
        self._core = core
        self._request = request
        self._receive = receive
        self._respond = respond  # sends an Output as HTTP (atom/http/asgi.py)
        self._renderer = renderer_for(request.received, request.plan.shape)
        self._outbox = Outbox()
        self._is_done = False  # the final bytes have been handed to the server
        self._has_client_left = False
        self._usage: RequestUsage | None = None  # from the RequestReceived on
        self._scope: trio.CancelScope | None = None
        self._cancelled_as: str | None = None  # why `cancel` ended the request

    @property
    def request_id(self) -> str:
        return self._request.received.request_id

    async def run(self) -> None:
        """Serve the request to the end, the client's disconnect or an error."""
        with structlog.contextvars.bound_contextvars(request_id=self.request_id):
            self._usage = RequestUsage(self._core.bus.publish(self._request.received))
            failure: AtomError | None = None
            try:
                async with trio.open_nursery() as nursery:
                    self._scope = nursery.cancel_scope
                    if self._cancelled_as is not None:
                        nursery.cancel_scope.cancel()
                    nursery.start_soon(self._watch_disconnect, nursery.cancel_scope)
                    await self._generate()
                    nursery.cancel_scope.cancel()  # the response is complete
            except* AtomError as group:
                failure = first_leaf(group)  # type: ignore[assignment]
            except* Exception as group:
                log.error("request_crashed", exc_info=first_leaf(group))
                failure = EngineFailed("internal error while serving the request")
            finally:
                if not self._is_done and failure is None:
                    # Cancelled from outside without the client leaving: `cancel`, or the
                    # server stops.
                    reason = self._cancelled_as or "server_shutdown"
                    if self._has_client_left:
                        reason = "client_disconnected"
                    self._release(reason)
                    self._core.bus.publish(
                        RequestAborted(request_id=self.request_id, reason=reason)
                    )
            if failure is not None:
                await self._fail(failure)

    def cancel(self, reason: str) -> None:
        """End the request from outside, logged with `reason` (a cancelled background
        response)."""
        self._cancelled_as = reason
        if self._scope is not None:
            self._scope.cancel()

    async def _generate(self) -> None:
        submit = self._request.submit
        if submit.params.grammar is not None and self._core.precompile is not None:
            # Compile in a worker thread now, so the Batcher's step only copies the matcher.
            await trio.to_thread.run_sync(self._core.precompile, submit.params.grammar)
        self._core.batcher.submit_nowait(submit, self._outbox)
        # Published before any checkpoint, so it precedes the Batcher's RequestScheduled.
        accepted = RequestAccepted(
            request_id=self.request_id,
            prompt_ids=submit.prompt_ids,
            more_prompt_ids=submit.more_prompt_ids,
            num_choices=submit.total_choices,
            images=tuple(image.ref for image in submit.images),
        )
        await self._emit(accepted)
        to_writer, from_choices = trio.open_memory_channel[Event](math.inf)
        async with trio.open_nursery() as nursery, to_writer:
            inboxes = {}
            for idx in range(submit.total_choices):
                to_choice, inbox = trio.open_memory_channel[Any](math.inf)
                inboxes[idx] = to_choice
                run = partial(self._choice(idx).run, on_stop_string=self._stop_choice)
                nursery.start_soon(run, inbox, to_writer.clone())
            nursery.start_soon(self._route, inboxes)
            nursery.start_soon(self._write, from_choices)

    def _choice(self, idx: int) -> ChoiceStream:
        request = self._request
        pipeline = pipeline_for(
            self.request_id, request.plan, request.submit.prompts, idx, self._core.tokenizer
        )
        return ChoiceStream(pipeline, idx)

    async def _route(self, inboxes: dict[int, trio.MemorySendChannel[Any]]) -> None:
        """Outbox → choice streams. A stream that stopped early drops what still arrives."""
        assert self._usage is not None
        try:
            while batch := await self._outbox.receive_batch():
                for envelope in batch:
                    self._usage.apply(envelope)
                    sampled = envelope.event
                    assert isinstance(sampled, TokensSampled)
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        inboxes[sampled.choice_idx].send_nowait(envelope)
        finally:
            for channel in inboxes.values():
                channel.close()

    async def _write(self, inbox: trio.MemoryReceiveChannel[Event]) -> None:
        assert self._usage is not None
        shape = self._request.plan.shape
        # A background stream's output goes to its tap, which counts events: no pings.
        pings = shape.stream and not shape.background
        interval = self._core.sse_ping_interval_s if pings else 0.0
        num_finished = 0
        async with inbox:
            while True:
                with trio.move_on_after(interval or math.inf) as idle:
                    try:
                        event = await inbox.receive()
                    except trio.EndOfChannel:
                        break
                if idle.cancelled_caught:
                    event = KeepAliveSent(request_id=self.request_id)
                num_finished += isinstance(event, ChoiceFinished)
                await self._emit(event)
        if num_finished < self._request.submit.total_choices:
            # A choice stream ended without finishing its choice (it failed): the request
            # ends by that failure, never as complete.
            raise EngineFailed("internal error while serving the request")
        await self._emit(self._usage.completed(self._core.clock()))

    async def _watch_disconnect(self, cancel_scope: trio.CancelScope) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if self._is_done:
            return  # the server sends http.disconnect after a complete response too
        self._has_client_left = True
        self._core.bus.publish(ClientDisconnected(request_id=self.request_id))
        self._release("client_disconnected")  # now: the Batcher drops it at its next step
        cancel_scope.cancel()

    def _stop_choice(self, choice_idx: int) -> None:
        self._core.batcher.abort_nowait(
            Abort(request_id=self.request_id, choice_idx=choice_idx, reason="stop_string")
        )

    def _release(self, reason: str) -> None:
        """Tell the Batcher to drop whatever it still holds of this request (once)."""
        if self._outbox.is_abandoned:
            return
        self._outbox.abandon()
        if not self._outbox.is_closed:
            self._core.batcher.abort_nowait(Abort(request_id=self.request_id, reason=reason))

    async def _fail(self, error: AtomError) -> None:
        self._release("failed")
        event = failed_event(self.request_id, error)
        with trio.move_on_after(5):  # a vanished client must not hold us
            await self._emit(event)

    async def _emit(self, event: Event) -> None:
        envelope = self._core.bus.publish(event)
        if self._usage is not None:
            self._usage.apply(envelope)
        output = self._renderer.feed(event)
        if output is None:
            return
        if output.is_final:
            self._is_done = True  # an http.disconnect from now on is the connection closing
        # A send waits while the socket's buffers are full: a client that stopped reading
        # would hold the request (and what the Batcher keeps producing for it) for ever.
        with trio.move_on_after(self._core.stream_stall_timeout_s or math.inf) as stall:
            await self._respond(output)
        if stall.cancelled_caught:
            log.warning("stream_stalled", timeout_s=self._core.stream_stall_timeout_s)
            if not output.is_final:  # (a final one: the request has completed; it just ends)
                self.cancel("stream_stalled")
                await trio.lowlevel.checkpoint()  # the actor's scope ends the request here


def failed_event(request_id: str, error: AtomError) -> RequestFailed:
    """The event of a request ended by `error`: its OpenAI error body's fields."""
    return RequestFailed(
        request_id=request_id,
        status=error.status,
        message=error.message,
        error_type=error.error_type,
        param=error.param,
        code=error.code,
        retry_after_s=error.retry_after_s,
    )


def first_leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf
